"""The tokens/s no closed loop beats, whatever its schedule: the ceiling's throughput under load
(plan/serve_report.ceiling_stats prints it; plan/serve_fit.run_features gives it to the calibration).

A simulated schedule is one schedule; a bound holds for all of them. Two kinds of work every run
has to do:
- its decode tokens: no step decodes more requests than the engine runs at once and its KV pool holds
  (serve.decoding_at_once, b), and none of those steps is faster than its ceiling at the shortest
  prompt's context; b / step grows with b, so no run decodes faster than b tokens a step;
- its FLOPs: every request's prompt pass and decode tokens, at the peak the ceiling's steps use, on the
  busiest pipeline stage's GPU.
The mean output tokens of a request over the larger of the two times is the bound."""

from __future__ import annotations

import math
from collections.abc import Callable

from kvcalc.cost.estimate import features
from kvcalc.cost.step import Deployment, stages
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import ModelSpec
from kvcalc.plan.serve import Limits, Load, StepTimer, decoding_at_once
from kvcalc.plan.serve_load import lengths


def request_flop_seconds(
    spec: ModelSpec, gpu: GpuSpec, dep: Deployment, prompt: int, new: float, *, dtype: str | None, kv_dtype: str
) -> float:
    """The least time the busiest pipeline stage's GPU spends on one request's FLOPs at the ceiling's peak: its
    prompt pass and new - 1 decode tokens over at least the prompt. 0 (no bound) where one request's FLOPs do not
    tell a GPU's share of a run's: expert parallelism (a rank's share follows the routing) and DP attention."""
    if dep.ep > 1 or dep.dp_attention:
        return 0.0
    staged = stages(spec, dep, dtype)
    first = features(spec, gpu, dep, prefill_tokens=prompt, dtype=dtype, kv_dtype=kv_dtype, staged=staged)
    token = features(
        spec, gpu, dep, decode_batch=1, decode_context=prompt, dtype=dtype, kv_dtype=kv_dtype, staged=staged
    )
    busiest = max(p[3] + max(0.0, new - 1) * d[3] for p, d in zip(first.stage_bytes, token.stage_bytes))
    return busiest / first.peak


def tokens_per_s_bound(
    ceiling: StepTimer, load: Load, limits: Limits, work: Callable[[int, float], float] | None = None
) -> float | None:
    """Output tokens/s no closed loop of `load` beats under `limits`, with steps no faster than `ceiling`;
    `work(prompt, new)`: request_flop_seconds for the deployment (None: the decode bound alone). None where
    neither applies: one new token a request (no decode step) and no FLOPs bound (EP or DP attention)."""
    sizes = lengths(load)
    new = sum(n for _, n in sizes) / len(sizes)
    shortest = min(p for p, _ in sizes)
    bound = math.inf
    if new > 1:
        b = decoding_at_once(load, limits)
        # NOTE: a request's first token comes from its prompt step; the other new - 1 from decode steps
        bound = new / (new - 1) * b / ceiling(b, b * shortest, 0, 0, 0)
    flop_s = work(shortest, new) if work else 0.0
    if flop_s > 0:
        bound = min(bound, new / flop_s)
    return None if math.isinf(bound) else bound
