"""The figures of a simulated serving run (plan/serve.py): means, percentiles and the steady-state window."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from kvcalc.plan.serve_load import Load


class ServeStats(NamedTuple):
    """Figures over the measured requests (closed loop: steady state, see simulate)."""

    ttft_s: float  # mean, queueing included
    ttft_p50_s: float
    ttft_p99_s: float
    tpot_s: float  # mean over requests of (finish - first token) / (new - 1)
    itl_s: float  # mean gap between consecutive output tokens, all requests pooled
    total_s: float  # mean end-to-end latency of a request
    tokens_per_s: float  # output tokens per second, all users
    per_user_tokens_per_s: float  # 1 / TPOT
    requests_per_s: float
    mean_in_flight: float  # requests in the system (queued or running), averaged over time
    preemptions: int
    steps: int  # engine steps simulated
    measured: int  # requests the figures are over
    duration_s: float  # of the measured window


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default, as `vllm bench serve` reports)."""
    s = sorted(values)
    if not s:
        return 0.0
    pos = (len(s) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def stats(finished: list[Any], load: Load, steps: int, preemptions: int, area: float, end: float) -> ServeStats:
    c = load.concurrency
    order = sorted(finished, key=lambda r: r.finish)
    steady = c is not None and len(order) > 2 * c and not load.burst
    if steady and c is not None:
        # Every client is busy from the c-th finish (the start-up burst is over) until the (N - c)-th,
        # which sends the last request: the completions in between are the steady state.
        start, end = order[c - 1].finish, order[len(order) - c - 1].finish
        measured = [r for r in order if start < r.finish <= end] or order[c:-c]
    else:
        measured = order
        start = 0.0 if c is not None else min(r.arrival for r in order)
        end = order[-1].finish
    window = max(end - start, 1e-30)
    ttfts = [r.first - r.arrival for r in measured]
    decode_gaps = [(r.finish - r.first) for r in measured]
    tpots = [g / (r.new - 1) if r.new > 1 else 0.0 for g, r in zip(decode_gaps, measured)]
    tpot = sum(tpots) / len(tpots)
    return ServeStats(
        ttft_s=sum(ttfts) / len(ttfts),
        ttft_p50_s=percentile(ttfts, 50),
        ttft_p99_s=percentile(ttfts, 99),
        tpot_s=tpot,
        itl_s=sum(decode_gaps) / max(sum(r.new - 1 for r in measured), 1),
        total_s=sum(r.finish - r.arrival for r in measured) / len(measured),
        tokens_per_s=sum(r.new for r in measured) / window,
        per_user_tokens_per_s=1 / tpot if tpot > 0 else 0.0,
        requests_per_s=len(measured) / window,
        mean_in_flight=area / end if end > 0 else 0.0,
        preemptions=preemptions,
        steps=steps,
        measured=len(measured),
        duration_s=window,
    )
