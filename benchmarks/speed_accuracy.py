"""Leave-one-source-out accuracy of the calibrated speed estimate; writes benchmarks/speed_accuracy.md.

For each source in benchmarks/calibration/points.csv, the constants are refitted on every other
source (scripts/calibrate.py's fit, from the same starting constants) and the held-out source's
points are predicted. Reported as the issue's acceptance asks: median |predicted / measured - 1| on
TPOT, output throughput, TTFT at a fixed batch and TTFT under closed-loop load; how often the 80%
interval holds the measurement; and every measured point that beats the ceiling.

Closed-loop points are predicted as `generate --concurrency` prints them: through the serving
simulation (plan/serve_fit.py), C clients starting together, 10 x C requests, figures over all.

Run: python benchmarks/speed_accuracy.py [--sweeps N] [--jobs J]   (about 11 minutes on two cores)
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from calibrate import calibrate, load_points, nested_inside, phase_tail  # noqa: E402

from kvcalc.cost.fitting import INTERVAL_PHASES, ceiling, interval_phase, predict  # noqa: E402

OUT = ROOT / "benchmarks" / "speed_accuracy.md"
HELD_OUT = ROOT / "benchmarks" / "calibration" / "held_out_residuals.json"
TARGETS = {"TPOT": 0.15, "output throughput": 0.15, "TTFT, fixed batch": 0.20, "TTFT, under load": 0.30}


def kind(p) -> str | None:
    load = p.sf.setup.concurrency is not None and p.sf.setup.concurrency > 1
    if p.metric == "tpot_ms":
        return "TPOT"
    if p.metric == "output_tok_s_total":
        return "output throughput"
    if p.metric == "ttft_ms":
        return "TTFT, under load" if load else "TTFT, fixed batch"
    if p.metric == "e2e_latency_s":
        return "static batch total"
    return None


def interval_holds(p, c, pred: float) -> bool:
    phase = interval_phase(p)
    lo, hi = c.get(f"interval.{phase}.lo", 0.8), c.get(f"interval.{phase}.hi", 1.25)
    if p.metric == "output_tok_s_total":  # a rate: the time interval inverted
        return pred / hi <= p.value <= pred / lo
    bound = ceiling(p.sf, p.metric)
    return max(bound, pred * lo) <= p.value <= pred * hi


def beats_ceiling(p) -> bool:
    bound = ceiling(p.sf, p.metric)
    return p.value > bound * (1 + 1e-9) if p.metric == "output_tok_s_total" else p.value < bound * (1 - 1e-9)


def nested_coverage(residuals: list[dict]) -> tuple[float, int, dict[str, float]]:
    """How often the shipped interval's rule holds a new source's points: each source's residuals against the
    weighted quantiles of every other source's, per phase at the phase's tail (calibrate.phase_tail)."""
    inside = n = 0
    tails = {}
    for phase in INTERVAL_PHASES:
        tails[phase] = phase_tail(residuals, phase)
        i, m = nested_inside(residuals, phase, tails[phase])
        inside, n = inside + i, n + m
    return inside / max(n, 1), n, tails


def median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else math.nan


POINTS: list = []  # loaded once before the workers fork


def _held_out(src: str, sweeps: int) -> list[tuple]:
    """Fit on every source but `src`, score `src`'s points: (figure, |error|, interval holds, phase,
    log measured / predicted as a time, weight)."""
    points = POINTS
    c = calibrate([p for p in points if p.source != src], sweeps)
    out = []
    for p in points:
        k = kind(p)
        if p.source != src or k is None:
            continue
        pred = predict(p.sf, p.metric, c, p.engine)
        # measured / predicted as a time (a rate inverted), for the shipped interval
        ratio = pred / p.value if p.metric == "output_tok_s_total" else p.value / pred
        phase = interval_phase(p)
        out.append((k, abs(pred / p.value - 1), interval_holds(p, c, pred), phase, math.log(ratio), p.weight))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweeps", type=int, default=10, help="fit sweeps per held-out source (default 10)")
    ap.add_argument("--jobs", type=int, default=2, help="held-out sources fitted at once (default 2)")
    args = ap.parse_args()
    POINTS.extend(load_points())
    points = POINTS
    sources = sorted({p.source for p in points})
    errors: dict[str, list[float]] = defaultdict(list)
    by_source: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    held = 0
    total = 0
    residuals: list[dict] = []
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        for src, scored in zip(sources, pool.map(_held_out, sources, [args.sweeps] * len(sources))):
            for k, err, holds, phase, log_ratio, weight in scored:
                residuals.append({"phase": phase, "log_ratio": log_ratio, "weight": weight, "source": src, "kind": k})
                errors[k].append(err)
                by_source[src][k].append(err)
                held += holds
                total += 1
            print(f"held out {src}: {len(scored)} points", flush=True)
    beaten = [p for p in points if beats_ceiling(p)]
    lines = [
        "# Speed estimate: leave-one-source-out accuracy",
        "",
        "Written by `python benchmarks/speed_accuracy.py`: for each source of `benchmarks/calibration/points.csv`",
        "the constants are refitted on the other sources and the held-out points predicted. Error is",
        "median |predicted / measured - 1|. Closed-loop points are predicted as `generate --concurrency`",
        "prints them: the serving simulation, C clients starting together, 10 x C requests, figures over all.",
        "",
        "| figure | points | median error | target |",
        "|---|---|---|---|",
    ]
    for k in ("TPOT", "output throughput", "TTFT, fixed batch", "TTFT, under load", "static batch total"):
        target = f"<= {TARGETS[k]:.0%}" if k in TARGETS else ""
        lines.append(f"| {k} | {len(errors[k])} | {median(errors[k]):.1%} | {target} |")
    nested, nested_n, tails = nested_coverage(residuals)
    quantiles = ", ".join(f"{ph} {t:.1%}-{1 - t:.1%}" for ph, t in tails.items())
    lines += [
        "",
        "80% interval, held-out points inside it:",
        f"- the shipped interval's rule (weighted quantiles of the held-out log(measured / predicted) per phase:"
        f" {quantiles}, each the narrowest of calibrate.INTERVAL_TAILS that holds 80% of the phase),"
        f" each source scored with the interval from the OTHER sources' held-out residuals:"
        f" **{nested:.1%}** of {nested_n} (target >= 75%);",
        f"- each fold's in-sample interval (its own fit's residuals): {held / max(total, 1):.1%} of {total}"
        " (in-sample residuals are narrower than held-out ones, which is why the shipped interval is not taken from them).",
        "The shipped interval comes from all the held-out residuals (`benchmarks/calibration/held_out_residuals.json`,",
        "read by `scripts/calibrate.py`).",
        "",
        "## By held-out source",
        "",
        "| source | figure | points | median error |",
        "|---|---|---|---|",
    ]
    for src in sources:
        for k, errs in sorted(by_source[src].items()):
            lines.append(f"| {src} | {k} | {len(errs)} | {median(errs):.1%} |")
    lines += ["", f"## Measured points faster than the ceiling: {len(beaten)} of {len(points)}", ""]
    for p in beaten[:40]:
        s = p.sf.setup
        lines.append(
            f"- {p.label}, {p.source} {p.engine} {p.metric} = {p.value:g} vs ceiling {ceiling(p.sf, p.metric):g} "
            f"(batch {s.batch}, concurrency {s.concurrency}, {s.prompt}/{s.new}, tp {p.sf.decode.tp})"
        )
    OUT.write_text("\n".join(lines) + "\n")
    # NOTE: scripts/calibrate.py takes the shipped 80% interval from these held-out residuals, not
    # from its own in-sample fit (whose interval held only about half of the held-out points).
    import json

    HELD_OUT.write_text(json.dumps({"sweeps": args.sweeps, "residuals": residuals}) + "\n")
    print(f"-> {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
