"""Pure layout arithmetic beyond tensor and pipeline splits: expert parallelism (whole experts per
rank, all-to-all dispatch and combine, the busiest rank's load), data-parallel attention, and node
boundaries (which collectives leave the scale-up domain for the scale-out link).

What one rank holds and reads is cost/shard.py's; this module says how ranks talk and how unevenly
routed tokens load them.

Meanings (SGLang's flags; vLLM's equivalents in plan/layout.py):
- ep: the experts of each MoE layer are split into ep groups of E / ep whole experts; with ep < tp
  each expert is further split over tp / ep ranks (SGLang's moe_tp_size = tp_size / ep_size);
- dp_attention: each of the tp ranks runs attention whole (attention tensor parallelism 1) on its own
  share of the requests and keeps their KV cache; MoE (and dense MLP) layers still span the tp ranks.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Protocol

from kvcalc.cost.shard import Link, allreduce_seconds
from kvcalc.errors import UsageError
from kvcalc.model.spec import ModelSpec


class Layout(Protocol):
    """What this module reads of a cost/step.Deployment (named here, not imported: step imports this module)."""

    @property
    def tp(self) -> int: ...
    @property
    def pp(self) -> int: ...
    @property
    def ep(self) -> int: ...
    @property
    def dp_attention(self) -> bool: ...
    @property
    def gpus_per_node(self) -> int | None: ...
    @property
    def link(self) -> Link | None: ...
    @property
    def scale_out(self) -> Link | None: ...
    @property
    def gpus(self) -> int: ...


def check_layout(spec: ModelSpec, tp: int, ep: int, dp_attention: bool) -> None:
    """Refuse an expert / attention-DP layout no engine can run."""
    if ep < 1:
        raise UsageError(f"expert parallelism must be at least 1, got {ep}")
    if ep > 1:
        if not spec.is_moe:
            raise UsageError(f"--ep {ep}: {spec.name} has no routed experts", hint="drop --ep")
        if spec.experts % ep:
            raise UsageError(
                f"--ep {ep} does not divide {spec.name}'s {spec.experts} experts",
                hint="each rank holds whole experts: ep must divide the expert count",
            )
        if tp % ep:
            raise UsageError(
                f"--ep {ep} must divide --tp {tp}: the expert-parallel group is made of the tensor-parallel ranks",
                hint="vLLM's expert-parallel size is tp x dp; SGLang's ep_size divides tp_size",
            )
    if dp_attention and tp < 2:
        raise UsageError(
            "--dp-attention needs --tp N >= 2: the N ranks each run attention on their own requests",
            hint="SGLang: --tp N --enable-dp-attention --dp N; vLLM: --data-parallel-size N",
        )


def attention_ranks(tp: int, dp_attention: bool) -> int:
    """Ranks that each hold their own requests' KV: tp with DP attention, else 1 (TP ranks share them)."""
    return tp if dp_attention else 1


def per_rank(batch: int, tp: int, dp_attention: bool) -> int:
    """Sequences the busiest rank holds: ceil(batch / tp) under DP attention, else all of them."""
    return -(-batch // attention_ranks(tp, dp_attention))


def ep_imbalance(experts: int, k: int, tokens: int, ep: int) -> float:
    """The busiest expert-parallel rank's routed (token, expert) pairs over the mean, for `tokens`
    tokens each routed to k of `experts` experts, E / ep experts per rank.

    Under uniform, independent routing a rank's pairs are about Binomial(n = tokens x k, 1 / ep); the
    expected largest of ep such counts is about mean + sigma x expected_max_z(ep). Real routers are more
    skewed than uniform (DeepSeek-V3 keeps redundant copies of hot experts for that reason), so this
    is a lower bound on the imbalance; 1 at ep 1. Capped where one rank takes every pair it can."""
    if ep <= 1 or tokens <= 0:
        return 1.0
    n = tokens * k
    mean = n / ep
    sigma = math.sqrt(n * (1 / ep) * (1 - 1 / ep))
    cap = tokens * min(k, experts // ep) / mean  # every token sends this rank all the experts it can
    return min(1.0 + sigma * expected_max_z(ep) / mean, cap, float(ep))


def remote_ranks(k: int, ep: int) -> float:
    """Expected other ranks one token is sent to: each of the ep - 1 holds at least one of its k
    experts with probability 1 - (1 - 1/ep)^k (uniform routing; a token goes once to each rank it
    needs, as DeepEP's and SGLang's dispatchers send it)."""
    if ep <= 1:
        return 0.0
    return (ep - 1) * (1 - (1 - 1 / ep) ** k)


def alltoall_bytes(tokens: int, hidden: int, act_bytes: int, k: int, ep: int) -> float:
    """Bytes one rank sends in one dispatch (and again in one combine) for its `tokens` tokens."""
    return tokens * remote_ranks(k, ep) * hidden * act_bytes


def alltoall_seconds(tokens: int, hidden: int, act_bytes: int, k: int, ep: int, link: Link) -> float:
    """One MoE layer's dispatch + combine: 2 x (alpha + bytes each rank sends / one direction's
    bandwidth); the sends to different ranks share the GPU's link."""
    if ep <= 1:
        return 0.0
    return 2 * (link.latency_s + alltoall_bytes(tokens, hidden, act_bytes, k, ep) / link.group_bandwidth(ep))


# --- nodes -------------------------------------------------------------------------------------


def nodes_spanned(gpus: int, gpus_per_node: int | None) -> int:
    return 1 if not gpus_per_node else -(-gpus // gpus_per_node)


def tp_crosses_nodes(tp: int, gpus_per_node: int | None) -> bool:
    return gpus_per_node is not None and tp > gpus_per_node


def pp_sends_across(tp: int, pp: int, gpus_per_node: int | None) -> int:
    """Stage-to-stage sends that leave a node: stage s holds ranks s x tp .. (s + 1) x tp - 1, placed
    node by node; the send from stage s to s + 1 crosses when their first ranks sit on different nodes."""
    if not gpus_per_node or pp < 2:
        return 0
    return sum((s * tp) // gpus_per_node != ((s + 1) * tp) // gpus_per_node for s in range(pp - 1))


def group_allreduce_seconds(message: int, tp: int, link: Link, scale_out: Link | None, crosses: bool) -> float:
    """A ring all-reduce over the tp ranks; across nodes its slowest hop is the scale-out link."""
    if crosses and scale_out is not None:
        return allreduce_seconds(message, tp, scale_out)
    return allreduce_seconds(message, tp, link)


def mlp_layers(spec: ModelSpec) -> tuple[int, int]:
    """(layers with a dense MLP, layers with routed experts), as shard.allreduces_per_step counts them."""
    dense = moe = 0
    for run, routed in zip(spec.expanded_layers(), spec.routes_experts()):
        if run.intermediate_size is not None:
            dense += run.intermediate_size > 0
        elif routed:
            moe += 1
        else:
            dense += spec.intermediate_size > 0
    return dense, moe


def layout_comm_seconds(spec: ModelSpec, dep: Layout, tokens: int, act: int) -> float:
    """A step's communication on `dep` (cost/step.Deployment) with experts, DP attention or nodes:

    - without DP attention every rank sees every token: one all-reduce after each mixer and each
      MLP / MoE block, as plain tensor parallelism (vLLM's expert parallelism without DP gathers every
      token to every rank and reduces the outputs the same way);
    - with DP attention a rank's attention is its own (no all-reduce); a dense MLP gathers the tp
      ranks' tokens and scatters the sums back (priced as one all-reduce of all tokens); a MoE layer
      dispatches each rank's own tokens to the ranks holding their experts and combines the outputs
      (all-to-all, ep > 1), or with ep 1 gathers and reduces like a dense MLP;
    - a collective whose group leaves the scale-up domain runs at the scale-out link's speed, and so
      do the pipeline sends between stages on different nodes.
    """
    from kvcalc.cost.shard import allreduces_per_step, send_seconds

    link, tp = dep.link, dep.tp
    assert link is not None  # step.comm_seconds returns 0 without a link
    out = dep.scale_out or link
    tp_link = out if tp_crosses_nodes(tp, dep.gpus_per_node) else link
    ep_link = out if tp_crosses_nodes(dep.ep, dep.gpus_per_node) else link
    full = tokens * spec.hidden_size * act
    if dep.dp_attention:
        dense, moe = mlp_layers(spec)
        seconds = dense * allreduce_seconds(full, tp, tp_link)
        if dep.ep > 1:
            mine = -(-tokens // tp)
            seconds += moe * alltoall_seconds(mine, spec.hidden_size, act, spec.experts_per_token, dep.ep, ep_link)
            if dep.ep < tp:  # each expert split over tp / ep ranks: their partial sums are reduced too
                seconds += moe * allreduce_seconds(full // dep.ep, tp // dep.ep, link)
        else:
            seconds += moe * allreduce_seconds(full, tp, tp_link)
    else:
        seconds = allreduces_per_step(spec) * allreduce_seconds(full, tp, tp_link)
    crossing = pp_sends_across(tp, dep.pp, dep.gpus_per_node)
    seconds += (dep.pp - 1 - crossing) * send_seconds(full, link) + crossing * send_seconds(full, out)
    return seconds


def node_warnings(dep: Layout, gpu_name: str) -> list[str]:
    """What a layout that leaves its scale-up domain means, one line each."""
    g = dep.gpus_per_node
    if not g or dep.gpus <= g:
        return []
    nodes = nodes_spanned(dep.gpus, g)
    link = dep.scale_out
    how = (
        f"over the scale-out link ({link.name}: {link.bandwidth_bytes_per_s / 1e9:g} GB/s each way)"
        if link
        else "over a scale-out link this GPU's preset has no sourced figure for (costed at the scale-up link's "
        "speed: a lower bound on time)"
    )
    out = []
    if dep.tp > g:
        out.append(
            f"tensor parallelism {dep.tp} spans {-(-dep.tp // g)} nodes of {g} {gpu_name} GPUs: every all-reduce "
            f"crosses nodes {how}; engines place tp inside a node and pp (or DP) across nodes"
        )
    sends = pp_sends_across(dep.tp, dep.pp, g)
    if sends:
        out.append(f"{sends} of {dep.pp - 1} pipeline sends cross nodes ({nodes} nodes of {g}) {how}")
    if dep.ep > g and dep.tp <= g:
        out.append(f"expert parallelism {dep.ep} spans nodes: its all-to-all runs {how}")
    return out


def busiest_experts(experts: int, reached: float, ep: int) -> float:
    """Distinct experts the busiest of ep ranks runs in a step that reaches `reached` of `experts` in
    all: each of a rank's E / ep experts is reached with p = reached / E, so about Binomial(E / ep, p)
    per rank; the expected largest is mean + sigma x expected_max_z(ep), at most E / ep (uniform routing, a
    lower bound on real skew)."""
    own = experts // ep
    p = min(max(reached / experts, 0.0), 1.0)
    mean = own * p
    return min(float(own), mean + math.sqrt(own * p * (1 - p)) * expected_max_z(ep))


@lru_cache(maxsize=64)
def expected_max_z(n: int) -> float:
    """The expected largest of n independent standard normals (Tippett's integral of x n phi(x) Phi(x)^(n-1),
    summed on a 0.01 grid): 0.5642 at 2, 1.4236 at 8.

    NOTE: not sqrt(2 ln n), the asymptotic bound (2.04 at 8, 43% more): each layer waits for its busiest
    rank, so a step costs the expected largest, and the bound overstated it enough that measured
    DeepSeek-R1 ep 8 runs beat the ceiling."""
    if n <= 1:
        return 0.0
    h = 0.01
    total = 0.0
    for i in range(1601):
        x = -8.0 + i * h
        total += x * n * math.exp(-x * x / 2) * (0.5 * (1 + math.erf(x / math.sqrt(2)))) ** (n - 1)
    return total * h / math.sqrt(2 * math.pi)
