"""The serving simulation against public closed-loop measurements: a deterministic sample of the
closed_loop_concurrency points in benchmarks/calibration/points.csv (every k-th configuration, in file
order; none picked by hand), each run as `generate --concurrency C` prints it (plan/serve_report: the
engine's own scheduler, its pool, the API server's time, the ceiling as a bound) with the shipped
constants, beside the planner's closed form (cost/fitting.predict, prompts amortized over decode steps).

Reports the median |predicted / measured - 1| of TPOT and of TTFT (mean, queueing included), by engine,
and the measured points that beat the printed ceiling, for two readings of a closed-loop run: a
benchmark's whole run (generate's default: every client's first request sent at once, 10 x C requests,
figures over all of them, as `vllm bench serve --max-concurrency` reports them) and the steady state
(`--steady-state`: clients spread over a request's life, start-up and drain left out), and the benchmark
reading with each request's lengths drawn as the source's client draws them (`--range-ratio`: InferenceX
runs 0.8; the fit reads its points so). Every request alike, the benchmark reading is what a scorer gets
from `generate --concurrency` with no --range-ratio.
The constants are fitted through the benchmark reading (scripts/calibrate.py, plan/serve_fit.py), so
this is an in-sample check of the sample; benchmarks/speed_accuracy.md has the held-out errors.
Writes benchmarks/serve_accuracy.md.

Run: python benchmarks/serve_accuracy.py [--configs 60]   (a few minutes on one core)
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POINTS = ROOT / "benchmarks" / "calibration" / "points.csv"
OUT = ROOT / "benchmarks" / "serve_accuracy.md"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))


def main() -> int:
    from calibrate import layout_of

    from kvcalc.cost.fitting import Setup, predict, setup_features
    from kvcalc.cost.shard import link_for
    from kvcalc.cost.step import Deployment
    from kvcalc.model.presets import get_gpu, get_model
    from kvcalc.plan.calibration import constants_for
    from kvcalc.plan.serve_report import serve_report

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--configs", type=int, default=60)
    want = parser.parse_args().configs
    groups: dict[tuple, dict[str, float]] = defaultdict(dict)
    for r in csv.DictReader(open(POINTS, newline="")):
        if r["regime"] == "closed_loop_concurrency" and r["metric"] in ("tpot_ms", "ttft_ms") and int(r["prompt"]) > 0:
            key = layout_of(r) + (r["engine"],)
            run = (int(r["concurrency"]), int(r["prompt"]), int(r["new"]), float(r["range_ratio"] or 1), r["source"])
            groups[key + run][r["metric"]] = float(r["value"])
    configs = list(groups.items())
    stride = max(1, len(configs) // want)
    errors: dict[str, list[float]] = defaultdict(list)
    beaten: dict[str, int] = defaultdict(int)
    skipped, lines = 0, []
    signed: dict[str, list[float]] = defaultdict(list)
    for (model, gpu_name, tp, pp, ep, dp, dtype, kv, engine, c, prompt, new, ratio, source), measured in configs[
        ::stride
    ][:want]:
        spec, gpu = get_model(model), get_gpu(gpu_name)
        dep = Deployment(tp=int(tp), pp=int(pp), link=link_for(gpu), ep=int(ep or 1), dp_attention=dp == "1")
        d = dtype or None
        try:
            # what generate --concurrency prints (the benchmark's run) and with --steady-state
            args = dict(prompt=prompt, new=new, concurrency=c, engine=engine, dtype=d, kv_dtype=kv)
            bound, bound_b = serve_report(spec, gpu, dep, steady=True, **args), serve_report(spec, gpu, dep, **args)
            bound_r = serve_report(spec, gpu, dep, range_ratio=ratio, **args) if ratio < 1 else bound_b
            sim, sim_b, sim_r = bound.estimate, bound_b.estimate, bound_r.estimate
            sf = setup_features(spec, gpu, dep, Setup(None, c, prompt, new), d, kv)
        except Exception as e:  # a layout kvcalc refuses, or a request larger than the pool
            skipped += 1
            lines.append(f"skipped {model} {gpu_name} tp{tp} c{c}: {e}")
            continue
        consts = constants_for(gpu, engine)[0]
        for metric, attr in (("tpot_ms", "tpot_s"), ("ttft_ms", "ttft_s")):
            if metric not in measured:
                continue
            m = measured[metric]
            errors[f"{metric} amortized formula (cost/fitting.py)"].append(
                abs(predict(sf, metric, consts, engine) / m - 1)
            )
            runs = (("steady state", sim, bound), ("burst, all requests", sim_b, bound_b))
            runs += (("burst, the source's lengths", sim_r, bound_r),)
            for mode, est, top in runs:
                got = getattr(est, attr) * 1e3
                errors[f"{metric} simulation, {mode}"].append(abs(got / m - 1))
                errors[f"{metric} simulation, {mode}, {engine}"].append(abs(got / m - 1))
                signed[f"{metric} {mode}"].append(got / m - 1)
                signed[f"{metric} {mode}, {engine}"].append(got / m - 1)
                if getattr(top, attr) * 1e3 > m * 1.0001:
                    beaten[mode] += 1
                    lines.append(
                        f"beats the {mode} ceiling: {model} {gpu_name} tp{tp} {engine} c{c} {prompt}/{new} {metric} "
                        f"measured {m:.4g}, ceiling {getattr(top, attr) * 1e3:.4g} ({source})"
                    )
    out = [
        "# Serving simulation vs public closed-loop measurements",
        "",
        f"{sum(1 for _ in configs[::stride][:want]) - skipped} configurations (every {stride}th of {len(configs)}; "
        f"{skipped} skipped), shipped constants.",
        "",
        "| figure | median abs error | points |",
        "|---|---|---|",
        *[f"| {k} | {statistics.median(v):.1%} | {len(v)} |" for k, v in sorted(errors.items())],
        "",
        "Median signed error of the simulation (predicted / measured - 1): "
        + ", ".join(f"{k} {statistics.median(v):+.1%}" for k, v in sorted(signed.items())),
        "",
        "Measured points faster than the simulation's ceiling: "
        + ", ".join(f"{k} {beaten[k]}" for k in ("steady state", "burst, all requests", "burst, the source's lengths")),
        *([""] + [f"- {x}" for x in lines] if lines else []),
    ]
    OUT.write_text("\n".join(out) + "\n")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
