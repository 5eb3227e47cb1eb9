"""Pure serving under load: a step-level simulation of continuous batching as vLLM's V1 scheduler
runs it (vllm/v1/core/sched/scheduler.py, 0.19), timed by any step-time function.

Each engine step first schedules the running requests in admission order (a decode costs one
token, an unfinished prompt the rest of its chunk), then, if nothing was preempted, admits waiting
requests first-come-first-served while max_num_seqs and the token budget (max_num_batched_tokens)
allow; a prompt longer than the budget left is chunked. KV is held in blocks of `block_size` tokens
from a pool of `kv_blocks`: when a running request cannot get its next block, the most recently
admitted one is preempted (its blocks freed, recomputed from scratch later, vLLM's RECOMPUTE mode)
and goes back to the front of the queue.

Closed loop: `concurrency` clients, each sending its next request when the last one finishes.
Open loop: Poisson arrivals at `rate` requests/s (seeded). Runs of decode-only steps whose batch
does not change are jumped over: the step time is evaluated at the run's ends and its midpoint, and
summed as an arithmetic series where it is linear in the context (split where it is not), so the
work grows with the number of events (arrivals, prefills, finishes), not with tokens."""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

# A step's time from its composition: (decoding sequences, their contexts summed, prefill tokens,
# the tokens those prefill sequences already held (summed), prefill sequences) -> seconds.
StepTimer = Callable[[int, int, int, int, int], float]

LINEAR_TOLERANCE = 1e-9  # relative: a run whose midpoint lies on its chord is summed as a series


class Load(NamedTuple):
    """What the clients send: `requests` requests of `prompt` tokens, each wanting `new` tokens."""

    prompt: int
    new: int
    requests: int
    concurrency: int | None = None  # closed loop: clients each with one request in flight
    rate: float | None = None  # open loop: Poisson arrivals, requests/s
    seed: int = 0


class Limits(NamedTuple):
    """The engine's scheduler limits and KV pool."""

    max_num_seqs: int
    max_num_batched_tokens: int
    kv_blocks: int
    block_size: int = 16


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


class _Req:
    __slots__ = ("arrival", "first", "finish", "computed", "generated", "blocks", "index")

    def __init__(self, index: int, arrival: float) -> None:
        self.index, self.arrival = index, arrival
        self.first = self.finish = -1.0
        self.computed = self.generated = self.blocks = 0


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default, as `vllm bench serve` reports)."""
    s = sorted(values)
    if not s:
        return 0.0
    pos = (len(s) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def run_seconds(timer: StepTimer, n: int, context_sum: int, k: int) -> float:
    """Seconds of k decode-only steps of n sequences whose contexts sum to context_sum at the first
    step and each grow by one a step. NOTE: step times are convex piecewise-linear in the context
    (a max of memory and compute lines plus constants), so a run whose midpoint lies on the chord
    is linear throughout and sums as an arithmetic series; otherwise it is split in two."""
    if k <= 0:
        return 0.0
    a = timer(n, context_sum, 0, 0, 0)
    if k == 1:
        return a
    b = timer(n, context_sum + n * (k - 1), 0, 0, 0)
    if k == 2:
        return a + b
    m = (k - 1) // 2
    mid = timer(n, context_sum + n * m, 0, 0, 0)
    chord = a + (b - a) * m / (k - 1)
    if abs(mid - chord) <= LINEAR_TOLERANCE * max(abs(b), abs(a)):
        return k * (a + b) / 2
    return run_seconds(timer, n, context_sum, m + 1) + run_seconds(timer, n, context_sum + n * (m + 1), k - m - 1)


def _steps_before(timer: StepTimer, n: int, context_sum: int, k_max: int, budget: float) -> int:
    """The most steps (<= k_max) of a decode run that end no later than `budget` seconds from now,
    at least one: a new arrival is seen at the first step boundary after it."""
    if run_seconds(timer, n, context_sum, k_max) <= budget:
        return k_max
    lo, hi = 1, k_max  # run_seconds(lo) may exceed budget; the step that spans the arrival still runs
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if run_seconds(timer, n, context_sum, mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return max(lo, 1)


def _arrivals(load: Load) -> list[float]:
    if load.rate is None:
        return []
    rng = random.Random(load.seed)
    t, times = 0.0, []
    for _ in range(load.requests):
        times.append(t)
        t += rng.expovariate(load.rate)
    return times


def simulate(timer: StepTimer, load: Load, limits: Limits) -> ServeStats:
    """Run `load` through the scheduler, timing each step with `timer`.

    Closed loop: the figures are over the steady state, the requests that finish after the
    `concurrency`-th finish and no later than the one that sends the last request (the burst at
    start and the drain at the end, when fewer clients are busy, are left out); requests/s is
    those completions over that window. Open loop: over every request, from the first arrival
    to the last finish."""
    prompt, new, bs = load.prompt, load.new, limits.block_size
    closed = load.concurrency is not None
    arrivals = _arrivals(load)
    reqs: list[_Req] = []
    waiting: deque[_Req] = deque()
    running: list[_Req] = []
    free = limits.kv_blocks
    now, steps, preemptions, done = 0.0, 0, 0, 0
    in_flight_area = 0.0
    finished: list[_Req] = []

    def send(t: float) -> None:
        r = _Req(len(reqs), t)
        reqs.append(r)
        waiting.append(r)

    if closed:
        for _ in range(min(load.concurrency or 0, load.requests)):
            send(0.0)
    next_arrival = 0
    while done < load.requests:
        while next_arrival < len(arrivals) and arrivals[next_arrival] <= now:
            send(arrivals[next_arrival])
            next_arrival += 1
        if not running and not waiting:
            now = arrivals[next_arrival]  # idle until the next arrival (open loop only)
            continue
        budget = limits.max_num_batched_tokens
        decodes, context_sum, pre_tokens, pre_held, pre_seqs = 0, 0, 0, 0, 0
        scheduled: list[tuple[_Req, int]] = []
        preempted = False
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            need = prompt + r.generated - r.computed
            take = min(need, budget)
            want = -(-(r.computed + take) // bs) - r.blocks
            while want > free:
                victim = running.pop()  # the most recently admitted request
                free += victim.blocks
                victim.blocks = victim.computed = 0
                waiting.appendleft(victim)
                preemptions += 1
                preempted = True
                if victim is r:
                    break
            if r.blocks == 0 and r.computed == 0 and r not in running:
                continue  # preempted itself; `i` now points past the end or at the next request
            free -= want
            r.blocks += want
            scheduled.append((r, take))
            budget -= take
            i += 1
        if not preempted:
            while waiting and len(running) < limits.max_num_seqs and budget > 0:
                r = waiting[0]
                take = min(prompt + r.generated - r.computed, budget)
                want = -(-(r.computed + take) // bs) - r.blocks
                if want > free:
                    break
                waiting.popleft()
                running.append(r)
                free -= want
                r.blocks += want
                scheduled.append((r, take))
                budget -= take
        if not scheduled:
            raise ValueError("a single request does not fit the KV pool")
        for r, take in scheduled:
            if r.generated and r.computed == prompt + r.generated - 1:
                decodes += 1
                context_sum += r.computed + 1
            else:
                pre_tokens += take
                pre_held += r.computed
                pre_seqs += 1
        k = 1
        if not pre_tokens and not preempted and len(scheduled) == len(running):
            # NOTE: a decode-only step with every running request in it admitted no one, so whoever waits
            # stays blocked (free blocks only shrink, the batch stays full) until a finish: the batch is
            # the same until its first finish, a block shortage or, with an empty queue, an arrival.
            k = min(new - r.generated for r, _ in scheduled)
            k = min(k, max(1, bs * (free // max(decodes, 1))))
            if next_arrival < len(arrivals) and not waiting:
                k = _steps_before(timer, decodes, context_sum, k, arrivals[next_arrival] - now)
        seconds = (
            run_seconds(timer, decodes, context_sum, k)
            if k > 1
            else timer(decodes, context_sum, pre_tokens, pre_held, pre_seqs)
        )
        in_flight_area += seconds * (len(running) + len(waiting))
        now += seconds
        steps += k
        for r, take in scheduled:
            if k > 1:
                grown = r.computed + k
                extra = -(-grown // bs) - r.blocks
                free -= extra
                r.blocks += extra
                r.computed += k
                r.generated += k
            else:
                r.computed += take
                if r.computed == prompt + r.generated:
                    r.generated += 1  # the step that computes a prompt's last token samples the next
            if r.generated >= 1 and r.first < 0:
                r.first = now
            if r.generated >= new:
                r.finish = now
                free += r.blocks
                r.blocks = 0
                running.remove(r)
                finished.append(r)
                done += 1
                if closed and len(reqs) < load.requests:
                    send(now)
    return _stats(finished, load, steps, preemptions, in_flight_area, now)


def _stats(finished: list[_Req], load: Load, steps: int, preemptions: int, area: float, end: float) -> ServeStats:
    c = load.concurrency
    order = sorted(finished, key=lambda r: r.finish)
    steady = c is not None and len(order) > 2 * c
    if steady:
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
    tpots = [g / (load.new - 1) for g in decode_gaps] if load.new > 1 else [0.0] * len(measured)
    tpot = sum(tpots) / len(tpots)
    rps = len(measured) / window
    return ServeStats(
        ttft_s=sum(ttfts) / len(ttfts),
        ttft_p50_s=percentile(ttfts, 50),
        ttft_p99_s=percentile(ttfts, 99),
        tpot_s=tpot,
        itl_s=sum(decode_gaps) / max(len(measured) * (load.new - 1), 1),
        total_s=sum(r.finish - r.arrival for r in measured) / len(measured),
        tokens_per_s=rps * load.new,
        per_user_tokens_per_s=1 / tpot if tpot > 0 else 0.0,
        requests_per_s=rps,
        mean_in_flight=area / end if end > 0 else 0.0,
        preemptions=preemptions,
        steps=steps,
        measured=len(measured),
        duration_s=window,
    )
