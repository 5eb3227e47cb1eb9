"""The shipped estimate against public measurements it was never fitted on (benchmarks/holdout/points.csv).

Each point is asked of the command line as the acceptance scorer asks it: `kvcalc generate MODEL --gpu G
--tp T --pp P --prompt I --new O --engine E --format json`, with `--batch B` for a static batch and
`--concurrency C` for a closed loop, `--rate inf --requests N` for N requests sent at once (regime
burst_all_at_once, N in the batch column); the figure is read from `estimate` (tpot_s, ttft_s, total_s,
tokens_per_s) and the ceiling from the top level. Engines without a model of their own are asked as the
nearest of the four: LMDeploy's TurboMind and gpt-fast (compiled, CUDA graphs) as trtllm, TGI as vllm.
Reports, per source and metric: median |estimate / measured - 1|, the signed median, the share of
points inside the printed 80% interval and the points faster than the ceiling.

    python benchmarks/holdout_accuracy.py [--jobs 8] > benchmarks/holdout_accuracy.md
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POINTS = ROOT / "benchmarks" / "holdout" / "points.csv"
NEAREST = {"lmdeploy": "trtllm", "tgi": "vllm", "other": "trtllm"}
REGIMES = {"closed_loop_concurrency": "all, closed loops", "burst_all_at_once": "all, bursts"}
# metric -> (the estimate's field, the factor from seconds to the metric's unit)
FIELDS = {
    "tpot_ms": ("tpot_s", 1e3),
    "ttft_ms": ("ttft_s", 1e3),
    "e2e_latency_s": ("total_s", 1.0),
    "output_tok_s_total": ("tokens_per_s", 1.0),
}


def command(r: dict) -> list[str]:
    args = [sys.executable, "-m", "kvcalc", "generate", r["model"], "--gpu", r["gpu"], "--tp", r["tp"], "--pp", r["pp"]]
    args += ["--prompt", str(max(int(r["prompt"]), 1)), "--new", str(max(int(r["new"]), 1))]
    args += ["--engine", NEAREST.get(r["engine"], r["engine"]), "--format", "json"]
    args += ["--dtype", r["dtype"]] if r["dtype"] else []
    args += ["--kv-dtype", r["kv_dtype"]] if r["kv_dtype"] else []
    args += ["--ep", r["ep"]] if r["ep"] not in ("", "0", "1") else []
    args += ["--dp-attention"] if r["dp_attention"] == "1" else []
    if r["regime"] == "closed_loop_concurrency":
        # the client's length draw (SGLang bench_serving's default 0: uniform from 1 token up)
        args += ["--range-ratio", r["range_ratio"]] if r.get("range_ratio") not in (None, "") else []
        return args + ["--concurrency", r["concurrency"]]
    if r["regime"] == "burst_all_at_once":  # every request sent at once, no client cap: an open loop at rate inf
        return args + ["--rate", "inf", "--requests", r["batch"]]
    return args + ["--batch", r["batch"] or "1"]


def ask(r: dict) -> tuple[dict, tuple[float, float, float, float] | str]:
    """(the row, (estimate, ceiling, interval low, high) in the metric's unit, or kvcalc's error line)."""
    run = subprocess.run(command(r), capture_output=True, text=True, cwd=ROOT)
    if run.returncode and not (run.returncode == 3 and run.stdout.strip()):  # 3 with JSON: printed, does not fit
        return r, run.stderr.strip().splitlines()[-1] if run.stderr.strip() else f"exit {run.returncode}"
    out = json.loads(run.stdout)
    field, unit = FIELDS[r["metric"]]
    lo, hi = out["estimate"]["interval"][field]
    return r, (out["estimate"][field] * unit, out[field] * unit, lo * unit, hi * unit)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=8)
    args = ap.parse_args()
    rows = list(csv.DictReader(open(POINTS, newline="")))
    with ThreadPoolExecutor(args.jobs) as pool:
        answers = list(pool.map(ask, rows))
    groups: dict[tuple[str, str], list[tuple[float, bool, bool]]] = defaultdict(list)
    lines = []
    for r, got in answers:
        if isinstance(got, str):
            lines.append(f"| {r['id']} | {r['metric']} | {r['value']} | refused: {got} | | |")
            continue
        est, ceil, lo, hi = got
        measured = float(r["value"])
        faster = measured > ceil * 1.0001 if r["metric"] == "output_tok_s_total" else measured < ceil * 0.9999
        err = est / measured - 1
        regime = REGIMES.get(r["regime"], "all, static batches")
        for key in ((r["source"], r["metric"]), ("all", r["metric"]), (regime, r["metric"])):
            groups[key].append((err, lo <= measured <= hi, faster))
        lines.append(
            f"| {r['id']} | {r['metric']} | {measured:,.4g} | {est:,.4g} ({err:+.1%}) | {ceil:,.4g}"
            f"{' (beaten)' if faster else ''} | {'yes' if lo <= measured <= hi else 'no'} |"
        )
    print("# Speed estimate on held-out public measurements\n")
    print("Written by `python benchmarks/holdout_accuracy.py` (see its docstring and benchmarks/holdout/README.md).")
    print("No point here was used by scripts/calibrate.py.\n")
    print("| source | metric | points | median error | signed median | inside the 80% interval | beat the ceiling |")
    print("|---|---|---|---|---|---|---|")
    for (source, metric), v in sorted(groups.items(), key=lambda kv: (not kv[0][0].startswith("all"), kv[0])):
        med = statistics.median(abs(e) for e, _, _ in v)
        signed = statistics.median(e for e, _, _ in v)
        inside = sum(i for _, i, _ in v)
        beats = sum(b for _, _, b in v)
        print(f"| {source} | {metric} | {len(v)} | {med:.1%} | {signed:+.1%} | {inside}/{len(v)} | {beats} |")
    every = [x for (source, _), v in groups.items() if source == "all" for x in v]
    inside = sum(i for _, i, _ in every)
    print(f"\nInside the printed 80% interval: {inside} of {len(every)} points ({inside / max(1, len(every)):.1%}).")
    print("\n| id | metric | measured | estimate | ceiling | inside |\n|---|---|---|---|---|---|")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
