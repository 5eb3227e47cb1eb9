"""Expert-parallel and DP-attention points: how far the estimate is from the measurements with the
shipped constants (kvcalc/cost/calibration.json over calibration.STARTING, which holds the a2a_*
defaults), before and after the layout and its all-to-all term; writes benchmarks/ep_accuracy.md.

The points are the rows of benchmarks/calibration/points.csv with ep > 1 or dp_attention 1. Each is
predicted three ways:
- `as tp only`: Deployment(tp, pp, link), as scripts/calibrate.py load_points builds every row today;
- `layout, no all-to-all`: Deployment(tp, pp, link, ep, dp_attention) with the MoE dispatch / combine
  term set to zero (DP attention's per-rank KV, sequences and all-reduces kept);
- `layout + all-to-all`: the estimate as shipped (cost/ep_comm.py's terms).
Reported: median |predicted / measured - 1| per metric, and how many points beat the ceiling.

Run: python benchmarks/ep_accuracy.py [--closed-form]   (the serving simulation by default, as the
lead's fit runs closed-loop points; --closed-form: cost/fitting.py's static form, faster)
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

POINTS = ROOT / "benchmarks" / "calibration" / "points.csv"
OUT = ROOT / "benchmarks" / "ep_accuracy.md"
WAYS = ("as tp only", "layout, no all-to-all", "layout + all-to-all")


def main() -> int:
    from calibrate import setup_of, sglang_release

    from kvcalc.cost.estimate import time_of
    from kvcalc.cost.fitting import ceiling, figures, setup_features
    from kvcalc.cost.shard import link_for
    from kvcalc.cost.step import Deployment
    from kvcalc.model.presets import get_gpu, get_model
    from kvcalc.plan.calibration import shipped
    from kvcalc.plan.serve_fit import run_features

    ap = argparse.ArgumentParser()
    ap.add_argument("--closed-form", action="store_true", help="cost/fitting.py's closed form, not the simulation")
    args = ap.parse_args()
    c, basis = shipped()
    rows = [r for r in csv.DictReader(open(POINTS, newline="")) if r["ep"] != "1" or r["dp_attention"] == "1"]
    cache: dict[tuple, object] = {}
    errors: dict[tuple[str, str], list[float]] = defaultdict(list)
    beats: list[str] = []
    skipped = 0
    for r in rows:
        setup = setup_of(r)  # read as the fit reads it: requests alike
        spec, gpu = get_model(r["model"]), get_gpu(r["gpu"])
        tp, pp, ep, dp = int(r["tp"]), int(r["pp"]), int(r["ep"]), r["dp_attention"] == "1"
        deps = {
            WAYS[0]: Deployment(tp=tp, pp=pp, link=link_for(gpu)),
            WAYS[1]: Deployment(tp=tp, pp=pp, link=link_for(gpu), ep=ep, dp_attention=dp),
        }
        for way in WAYS:
            dep = deps.get(way, deps[WAYS[1]])
            key = (
                r["model"],
                r["gpu"],
                r["dtype"],
                r["kv_dtype"],
                setup,
                r["engine"],
                tp,
                pp,
                way == WAYS[0] or (ep, dp),
            )
            if key not in cache:
                dtype, kv = r["dtype"] or None, r["kv_dtype"]
                try:
                    if setup.concurrency is not None and not args.closed_form:
                        sf = run_features(
                            spec, gpu, dep, setup, engine=r["engine"], dtype=dtype, kv_dtype=kv,
                            release=sglang_release(r["engine"]),
                        )  # fmt: skip
                    else:
                        sf = setup_features(spec, gpu, dep, setup, dtype, kv)
                except Exception as e:  # a layout or pool kvcalc refuses: counted
                    sf = e
                cache[key] = sf
            sf = cache[key]
            if isinstance(sf, Exception):
                skipped += 1
                continue
            if way == WAYS[1]:

                def time(f, c=c, e=r["engine"]):
                    return time_of(f._replace(a2a=(0, 0.0, 0.0, 0.0)), c, e)
            else:

                def time(f, c=c, e=r["engine"]):
                    return time_of(f, c, e)

            fig = figures(sf, time, c, r["engine"])
            metric = r["metric"]
            pred = {
                "tpot_ms": fig.tpot_s * 1000,
                "ttft_ms": fig.ttft_s * 1000,
                "output_tok_s_total": fig.tokens_per_s,
                "e2e_latency_s": fig.total_s,
            }[metric]
            value = float(r["value"])
            errors[(way, metric)].append(pred / value - 1)
            errors[(way, metric + (" (DP attention)" if dp else " (ep, attention TP)"))].append(pred / value - 1)
            if way == WAYS[2]:
                bound = ceiling(sf, metric)
                faster = value > bound if metric == "output_tok_s_total" else value < bound
                if faster:
                    beats.append(f"{r['id']} ({metric} {value:g}, ceiling {bound:.4g})")
    metrics = sorted({m for _, m in errors})
    lines = [
        "# Expert-parallel / DP-attention points: estimate error before and after the layout terms",
        "",
        f"`python benchmarks/ep_accuracy.py{' --closed-form' if args.closed_form else ''}`: {len(rows)} points of "
        f"benchmarks/calibration/points.csv with ep > 1 or DP attention; constants: {basis} "
        "(the shipped fit, all three rows timed with it; the fit went through the layout + all-to-all). "
        "Median |predicted / measured - 1| "
        "(median signed error, points):",
        "",
        "| prediction | " + " | ".join(f"{m} (n)" for m in metrics) + " |",
        "|---|" + "---|" * len(metrics),
    ]
    for way in WAYS:
        cells = []
        for m in metrics:
            e = errors.get((way, m), [])
            mid = statistics.median(abs(x) for x in e) if e else 0.0
            cells.append(f"{100 * mid:.1f}% ({100 * statistics.median(e):+.0f}%, {len(e)})" if e else "-")
        lines.append(f"| {way} | " + " | ".join(cells) + " |")
    lines += ["", f"Measured points faster than the layout's ceiling: {len(beats)}. Setups kvcalc refused: {skipped}."]
    lines += [f"- {b}" for b in beats]
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
