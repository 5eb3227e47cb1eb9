"""The estimate's communication features of an expert-parallel / DP-attention layout, term by term,
so cost/estimate.py can put fitted constants on each: the same collectives, message sizes and links
that fabric.layout_comm_seconds charges for the ceiling, returned as counts and bytes instead of seconds.

- without DP attention every rank sees every token: one all-reduce of all tokens after each mixer and
  each MLP / MoE block (vLLM's expert parallelism without DP gathers and reduces like tensor parallelism);
- with DP attention a rank's attention is its own; a dense MLP (or a MoE at ep 1) is priced as one
  all-reduce of all tokens over the tp ranks; a MoE at ep > 1 dispatches each rank's ceil(tokens / tp)
  tokens to the ranks holding their experts and combines the outputs (an all-to-all each way), and
  with ep < tp each expert's tp / ep ranks also reduce their partial sums.
"""

from __future__ import annotations

from typing import NamedTuple

from kvcalc.cost.fabric import Layout, alltoall_bytes, mlp_layers, tp_crosses_nodes
from kvcalc.cost.shard import allreduces_per_step
from kvcalc.model.spec import ModelSpec


class LayoutComm(NamedTuple):
    """One step's collectives on a layout (pipeline sends apart), before any constant is applied."""

    allreduces: int  # all-reduces over the tp ranks
    message_bytes: int  # each one's message: every token's hidden state
    bandwidth: float  # one direction's bytes/s a rank has for them
    # ep < tp under DP attention: (count, message bytes, ranks, bytes/s) of the experts' partial-sum reduces
    sub_allreduce: tuple[int, int, int, float]
    # (MoE layers that dispatch and combine, bytes one rank sends per dispatch, bytes/s over the ep
    # group, the link's ideal latency): two all-to-alls per layer, each at least latency + bytes / bytes/s
    a2a: tuple[int, float, float, float]


def layout_comm(spec: ModelSpec, dep: Layout, tokens: int, act: int) -> LayoutComm:
    """The collectives of a step over `tokens` tokens in flight on `dep` (cost/step.Deployment with a
    link), `act` bytes per activation element; their ideal seconds sum to layout_comm_seconds' (less
    its pipeline sends)."""
    link, tp = dep.link, dep.tp
    assert link is not None
    out = dep.scale_out or link
    tp_link = out if tp_crosses_nodes(tp, dep.gpus_per_node) else link
    ep_link = out if tp_crosses_nodes(dep.ep, dep.gpus_per_node) else link
    full = tokens * spec.hidden_size * act
    bw = tp_link.group_bandwidth(tp)
    if not dep.dp_attention:
        return LayoutComm(allreduces_per_step(spec), full, bw, (0, 0, 0, 0.0), (0, 0.0, 0.0, 0.0))
    dense, moe = mlp_layers(spec)
    if dep.ep <= 1:
        return LayoutComm(dense + moe, full, bw, (0, 0, 0, 0.0), (0, 0.0, 0.0, 0.0))
    mine = -(-tokens // tp)  # NOTE: the busiest DP rank's tokens: requests are spread whole over the tp ranks
    sent = alltoall_bytes(mine, spec.expert_width, act, spec.experts_per_token, dep.ep)  # LatentMoE: latent-wide
    a2a = (moe, sent, ep_link.group_bandwidth(dep.ep), ep_link.latency_s)
    sub = (0, 0, 0, 0.0)
    if dep.ep < tp:
        group = tp // dep.ep
        sub = (moe, full // dep.ep, group, link.group_bandwidth(group))
    return LayoutComm(dense, full, bw, sub, a2a)
