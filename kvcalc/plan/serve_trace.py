"""A closed loop's schedule as a trace, and its figures replayed from it under any step timer.

A closed loop's schedule does not depend on step times: clients send when a request finishes and the
schedulers (plan/serve.py, plan/serve_policies.py) count tokens and blocks. So one run with every step
at one second records which steps run and when each request arrives, gets its first token and
finishes (trace); any timer then gives simulate's figures by summing the same step times in the same
order (replay). The calibration fits the step model through traces (plan/serve_fit.py) and
serve_report times the ceiling, the estimate and its interval from one (runner)."""

from __future__ import annotations

from collections.abc import Callable

from kvcalc.plan.serve import Limits, Trace, _Engine, _Req, simulate
from kvcalc.plan.serve_load import Load
from kvcalc.plan.serve_runs import StepTimer, run_seconds
from kvcalc.plan.serve_stats import ServeStats
from kvcalc.plan.serve_stats import stats as _stats


def trace(load: Load, limits: Limits) -> Trace:
    """The schedule of a closed-loop `load`: every figure of simulate() is a weighted sum of its
    steps' times (cost/fitting.py fits the step model through it; replay times it)."""
    if load.concurrency is None:
        raise ValueError("an open loop's schedule depends on step times; only a closed loop has a trace")
    eng = (limits.policy or _Engine)(load, limits)
    eng.trace = out = Trace([], [], [])
    eng.run(lambda *a: 1.0)  # one second a step: `now` is the step clock
    out.requests.extend((round(r.arrival), round(r.first), round(r.finish), r.new) for r in eng.finished)
    return out._replace(preemptions=eng.preemptions)


def replay(tr: Trace, timer: StepTimer, load: Load) -> ServeStats:
    """simulate(timer, load, limits) of the closed loop `tr` traces, without scheduling it again: its
    steps timed in the same order by the same calls (a prompt step by `timer`, a decode run by
    run_seconds), so every figure is simulate's to the last bit (tests/test_serve.py)."""
    now, area, steps = 0.0, 0.0, 0
    at = {0: 0.0}  # step clock -> seconds: requests arrive, get a first token and finish between steps
    for (n, contexts, pre, held, seqs, k, start), inside in zip(tr.steps, tr.in_system):
        seconds = timer(n, contexts, pre, held, seqs) if pre else run_seconds(timer, n, contexts, k)
        area += seconds * inside
        now += seconds
        steps += k
        at[start + k] = now
    finished = []
    for arrival, first, finish, new in tr.requests:
        r = _Req(at[arrival], 0, new)
        r.first, r.finish = at[first], at[finish]
        finished.append(r)
    return _stats(finished, load, steps, tr.preemptions, area, now)


def runner(load: Load, limits: Limits) -> Callable[[StepTimer], ServeStats]:
    """simulate(timer, load, limits) for each of several timers: a closed loop is scheduled once and
    replayed under each (the estimate, its interval's two ends and the ceiling share one schedule);
    an open loop, whose schedule depends on step times, is simulated anew for each."""
    if load.concurrency is None:
        return lambda timer: simulate(timer, load, limits)
    tr = trace(load, limits)
    return lambda timer: replay(tr, timer, load)
