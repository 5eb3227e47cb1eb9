"""Bounded serving simulation (issue 19): time of plan/serve.simulate and of the whole
serve_report (a closed loop: one schedule timed five ways, plan/serve_trace.runner; an open loop: four simulations) in-process.

Run by hand: python benchmarks/serve.py [--runs 3] [--engine vllm|sglang|trtllm]. Prints the median time of each case, the engine
steps simulated and the step-time evaluations made. The figures last measured are in
benchmarks/serve_results.txt. Target (issue 19): 2,000 requests at concurrency 256 in under 1 s.
"""

from __future__ import annotations

import argparse
import statistics
import time

from kvcalc.cost.step import SINGLE
from kvcalc.model.presets import get_gpu, get_model
from kvcalc.plan.serve import Load, simulate
from kvcalc.plan.serve_pool import serving_limits
from kvcalc.plan.serve_report import serve_report, step_timers

CASES = [
    ("llama-3-8b", "h100", Load(1024, 256, 2000, concurrency=256)),
    ("llama-3-8b", "h100", Load(1024, 1024, 2000, concurrency=256)),
    ("llama-3-8b", "h100", Load(8192, 1024, 2000, concurrency=64)),
    ("llama-3-8b", "h100", Load(1024, 256, 2000, rate=20.0, seed=0)),
    ("qwen3-30b-a3b", "h100", Load(1024, 1024, 2000, concurrency=256)),
    # the pool binds: 256 requests of 9,216 tokens want 2.4M, vLLM's pool holds 443,568 (preemption by recompute)
    ("llama-3.1-8b", "h100", Load(1024, 8192, 2560, concurrency=256, burst=True)),
]


def _median(fn, runs: int) -> tuple[float, object]:  # noqa: ANN001
    times, out = [], None
    for _ in range(runs):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--engine", default="vllm", help="whose scheduler and limits (default vllm)")
    args = parser.parse_args()
    runs, engine = args.runs, args.engine
    for model, gpu_name, load in CASES:
        spec, gpu = get_model(model), get_gpu(gpu_name)
        how = f"c={load.concurrency}" if load.concurrency else f"rate={load.rate:g}/s"
        name = f"{engine} {model} {gpu_name} {load.requests} requests {how} {load.prompt}+{load.new}"
        limits, _ = serving_limits(
            spec, gpu, SINGLE, engine=engine, dtype=None, kv_dtype="bf16", prompt=load.prompt, new=load.new
        )
        calls = 0

        def one():  # noqa: ANN202
            nonlocal calls
            ceiling = step_timers(spec, gpu, SINGLE, engine=engine, dtype=None, kv_dtype="bf16")[0]  # a fresh cache

            def counted(*a):  # noqa: ANN002, ANN202
                nonlocal calls
                calls += 1
                return ceiling(*a)

            calls = 0
            return simulate(counted, load, limits)

        t_sim, stats = _median(one, runs)
        kwargs = dict(
            concurrency=load.concurrency, rate=load.rate, requests=load.requests, seed=load.seed, engine=engine
        )
        t_all, _ = _median(lambda: serve_report(spec, gpu, SINGLE, prompt=load.prompt, new=load.new, **kwargs), runs)
        print(
            f"{name:<62} simulate {t_sim:6.3f} s ({stats.steps:,} steps, {calls:,} step-time calls)   "
            f"serve_report {t_all:6.3f} s"
        )


if __name__ == "__main__":
    main()
