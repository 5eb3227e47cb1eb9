"""What the clients of a serving run send (plan/serve.py runs it): how many requests, how long each
is, and when they arrive."""

from __future__ import annotations

import random
from typing import NamedTuple


class Load(NamedTuple):
    """What the clients send: `requests` requests of `prompt` tokens, each wanting `new` tokens."""

    prompt: int
    new: int
    requests: int
    concurrency: int | None = None  # closed loop: clients each with one request in flight
    rate: float | None = None  # open loop: Poisson arrivals, requests/s
    seed: int = 0
    burst: bool = False  # closed loop: every client's first request whole, sent at once; figures over all
    range_ratio: float = 1.0  # < 1: each request's prompt and new tokens uniform in [int(ratio x L), L]
    turnaround: bool = True  # closed loop: a client's request may miss the next step (plan/serve.turnaround_steps)


def arrivals(load: Load) -> list[float]:
    """An open loop's Poisson arrival times (seeded); a closed loop's clients send on finishes: []."""
    if load.rate is None:
        return []
    rng = random.Random(load.seed)
    t, times = 0.0, []
    for _ in range(load.requests):
        times.append(t)
        t += rng.expovariate(load.rate)
    return times


def lengths(load: Load) -> list[tuple[int, int]]:
    """Each request's (prompt, new) tokens in sending order. With range_ratio < 1 both are drawn
    uniformly from [int(ratio x L), L] (seeded), as the random dataset of SGLang's and InferenceX's
    bench_serving draws them (`--random-range-ratio`; InferenceX runs 0.8). NOTE: recent `vllm bench
    serve` reads its flag of that name symmetrically, [L(1 - r), L(1 + r)]; this is not that."""
    if load.range_ratio >= 1:
        return [(load.prompt, load.new)] * load.requests
    rng = random.Random(f"lengths:{load.seed}")
    p_lo, n_lo = max(1, int(load.prompt * load.range_ratio)), max(1, int(load.new * load.range_ratio))
    return [(rng.randint(p_lo, load.prompt), rng.randint(n_lo, load.new)) for _ in range(load.requests)]
