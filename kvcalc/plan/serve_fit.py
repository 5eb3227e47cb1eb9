"""A closed-loop run as weighted steps, so the calibration fits the step model through the serving
simulation that `generate --concurrency` prints rather than through a closed form.

A closed loop's schedule does not depend on step times (clients send when a request finishes; the
scheduler counts tokens and blocks), so one trace (plan/serve_trace.trace) fixes which steps run and when
each request arrives, gets its first token and finishes. Every figure is then a weighted sum of the
step times: a request's TTFT is the steps between its arrival and its first token, and so on. The
steps are grouped by their shape (decoding sequences, prompt tokens, prompt sequences, each within
about 10%) and each group is timed at its mean composition: step times are near-linear within a
group, so the sums agree with the simulation to well under a percent (tests/test_serve_fit.py)."""

from __future__ import annotations

import math
from functools import partial
from itertools import accumulate

from kvcalc.cost.fitting import Setup, SetupFeatures, WeightedRun
from kvcalc.cost.step import Deployment, stages
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import ModelSpec


def _bucket(x: float) -> int:
    """Exact up to 16, then about 10% wide."""
    return int(x) if x <= 16 else 16 + round(math.log(x / 16) / math.log(1.1))


def run_features(
    spec: ModelSpec,
    gpu: GpuSpec,
    dep: Deployment,
    setup: Setup,
    *,
    engine: str,
    dtype: str | None,
    kv_dtype: str,
    requests: int | None = None,
    release: str | None = None,
) -> SetupFeatures:
    """The closed-loop `setup` (concurrency C, prompt, new) as generate --concurrency C runs it by
    default: the engine's limits and KV pool (plan/serve_pool.serving_limits; setup.launch: the limits
    the run was launched with), C clients starting together, `requests` requests (default_requests),
    figures over all of them. `release`: SGLang's (None: engines/sglang/release.DEFAULT_RELEASE)."""
    from kvcalc.cost.estimate import features
    from kvcalc.plan.serve import Load
    from kvcalc.plan.serve_bound import request_flop_seconds, tokens_per_s_bound
    from kvcalc.plan.serve_pool import default_requests, serving_limits
    from kvcalc.plan.serve_report import step_timers
    from kvcalc.plan.serve_trace import trace

    c = setup.concurrency or 1
    p, n = max(1, setup.prompt), max(1, setup.new)
    # NOTE: a run's scheduler flags are known (scripts/inferencex_launch.py) but not its pool flags
    # (--mem-fraction-static, --gpu-memory-utilization), which its launch scripts often set beside them:
    # the pool stays the engine's at its defaults rather than sized by half of what sized it.
    limits, _ = serving_limits(
        spec, gpu, dep, engine=engine, dtype=dtype, kv_dtype=kv_dtype, prompt=p, new=n,
        launch=dict(setup.launch), pool_flags=False, release=release,
    )  # fmt: skip
    total = requests if requests is not None else default_requests(c)
    load = Load(p, n, total, concurrency=c, burst=True, range_ratio=setup.range_ratio)
    tr = trace(load, limits)
    end = max(step[6] + step[5] for step in tr.steps)
    # Per-step weights of each figure from difference arrays over the step clock.
    d_ttft, d_tpot, d_total = [0.0] * (end + 1), [0.0] * (end + 1), [0.0] * (end + 1)
    reqs = len(tr.requests)
    tokens = 0
    for a, f, e, new in tr.requests:
        tokens += new
        d_ttft[a] += 1 / reqs
        d_ttft[f] -= 1 / reqs
        d_total[a] += 1 / reqs
        d_total[e] -= 1 / reqs
        if new > 1:
            d_tpot[f] += 1 / (reqs * (new - 1))
            d_tpot[e] -= 1 / (reqs * (new - 1))
    # a step's weight in each figure: how many requests wait for their first token / decode / are in flight
    ttft, tpot, inflight = (list(accumulate(d)) for d in (d_ttft, d_tpot, d_total))
    at = {clock: (ttft[clock], tpot[clock], inflight[clock]) for clock in {step[6] for step in tr.steps}}
    groups: dict[tuple[int, int, int], list[float]] = {}
    decoding = [0.0, 0.0, 0.0]  # TPOT weights of the steps, and of their decoding sequences and contexts
    for dec, ctx, pre, held, seqs, k, start in tr.steps:
        key = (_bucket(dec), _bucket(pre), _bucket(seqs))
        g = groups.setdefault(key, [0.0] * 9)
        w = at[start]
        mid_ctx = ctx + dec * (k - 1) / 2  # a decode run's contexts grow by one a step
        for j, v in enumerate((k, dec * k, mid_ctx * k)):
            decoding[j] += w[1] * v
        for j, v in enumerate((dec * k, mid_ctx * k, pre * k, held * k, seqs * k)):
            g[j] += v
        g[5] += w[0] * k
        g[6] += w[1] * k
        g[7] += w[2] * k
        g[8] += k
    staged = stages(spec, dep, dtype)
    steps, weights = [], []
    for g in groups.values():
        k = g[8]
        dec, ctx, pre, held, seqs = (v / k for v in g[:5])
        b = round(dec)
        pseqs = max(1, round(seqs)) if pre >= 0.5 else 0
        steps.append(
            features(
                spec,
                gpu,
                dep,
                dtype=dtype,
                kv_dtype=kv_dtype,
                staged=staged,
                decode_batch=b,
                decode_context=round(ctx / dec) if dec else 0,
                prefill_tokens=round(pre),
                prefill_context=round(held / seqs) if pseqs else 0,
                prefill_seqs=max(pseqs, 1),
            )  # fmt: skip
        )
        weights.append((g[5], g[6], g[7], k))
    ceiling = step_timers(spec, gpu, dep, engine=engine, dtype=dtype, kv_dtype=kv_dtype)[0]
    work = partial(request_flop_seconds, spec, gpu, dep, dtype=dtype, kv_dtype=kv_dtype)
    run = WeightedRun(
        steps=tuple(steps),
        ttft=tuple(w[0] for w in weights),
        tpot=tuple(w[1] for w in weights),
        total=tuple(w[2] for w in weights),
        duration=tuple(w[3] for w in weights),
        tokens=tokens,
        rate_bound=tokens_per_s_bound(ceiling, load, limits, work),
    )
    alone = features(spec, gpu, dep, dtype=dtype, kv_dtype=kv_dtype, staged=staged, prefill_tokens=p)
    # The run's decode steps without their prompts, at the TPOT-weighted mean batch and context (a
    # decode step's time is affine in them), w of them per token: the bound of its TPOT (cost/fitting.bounded),
    # as generate --concurrency prints it (plan/serve_report.ceiling_stats).
    w, dec, ctx_sum = decoding
    decode = features(
        spec, gpu, dep, dtype=dtype, kv_dtype=kv_dtype, staged=staged,
        decode_batch=max(1, round(dec / w)) if w else 1, decode_context=round(ctx_sum / dec) if dec else p,
    )  # fmt: skip
    return SetupFeatures(setup, decode, alone, 0.0, run, decode_weight=w or 1.0)
