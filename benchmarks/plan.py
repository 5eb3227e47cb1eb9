"""`kvcalc plan` search time (issue 20: a typical search in under 2 s), in-process, without start-up.

Run by hand: python benchmarks/plan.py [--runs 3]. Prints each case's first (cold) and median time, the layouts
judged and the options the serving simulation checked. The figures last measured are in
benchmarks/plan_results.txt. The whole command adds kvcalc's start-up (benchmarks/startup.py).
"""

from __future__ import annotations

import argparse
import statistics
import time

from kvcalc.plan.plan_inputs import plan_from_inputs

PRICES = {"h200": 3.5, "mi300x": 2.5, "l40s": 1.0}
CASES = [
    # the acceptance question of issue 20
    ("llama-3.1-70b", "32k", 64, dict(tpot_ms=50, gpu="h100,h200,mi300x,l40s", price=PRICES)),
    # the default GPU set, a TTFT goal too
    ("llama-3.1-70b", "32k", 64, dict(tpot_ms=50, ttft_ms=2000, price=PRICES)),
    ("llama-3.1-8b", "8k", 128, dict(tpot_ms=30, price=PRICES)),
    # MoE: expert parallelism and DP attention, up to 16 GPUs over two nodes
    ("deepseek-v3", "8k", 64, dict(tpot_ms=60, gpu="h200,b200,mi300x", max_gpus=16, price=PRICES)),
    ("qwen3-235b-a22b", "32k", 32, dict(tpot_ms=40, price=PRICES, engine="sglang")),
    # a p99 TTFT goal the closed form's mean meets and the simulation refutes: simulated until the first is served
    ("qwen3-30b-a3b", "16k", 128, dict(ttft_ms=3000, price=PRICES)),
    # llama.cpp: each quant an option, the first ones served by llama-server's -np slots
    ("llama-3.1-8b", "4k", 8, dict(tpot_ms=50, ttft_ms=800, gpu="a100,l40s", engine="llamacpp", dtype="q4_k_m,q8_0")),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    for model, seq, users, options in CASES:
        times, result = [], None
        for _ in range(runs):
            start = time.perf_counter()
            result = plan_from_inputs(model, seq, users, **options)
            times.append(time.perf_counter() - start)
        goals = " ".join(
            f"{k}={v}" for k, v in options.items() if k in ("tpot_ms", "ttft_ms", "max_gpus", "engine", "dtype")
        )
        gpus = options.get("gpu", "default GPUs")
        first = result.options[0] if result.options else None
        best = (
            f"{first.gpus} x {first.gpu} tp {first.tp} x {first.replicas} replica(s), "
            + ("simulated" if first.estimate.ttft_p99_s is not None else "closed form")
            if first and first.meets
            else "none meets"
        )
        print(
            f"{model} {seq} {users} users {goals} ({gpus}): first run {times[0]:.3f} s, median {statistics.median(times):.3f} s, "
            f"{result.candidates} layouts, {result.simulated} simulated; first: {best}"
        )


if __name__ == "__main__":
    main()
