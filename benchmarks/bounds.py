"""Bounded time for bad and huge requests (issue 12): wall time of whole `kvcalc` runs.

Run by hand: python benchmarks/bounds.py [--runs 3]. Prints the median wall time of each case and
its exit status. The figures last measured are in benchmarks/bounds_results.txt.

Cases:
- the hub refuses the connection, and the hub accepts but never answers (no network, no cache);
- a 10^8-value range and a 10^6-row grid, refused before any work (units.MAX_ROWS = 50,000);
- `generate --new 1m` (its decode sum in closed form);
- a 16,384-row roofline sweep with --plot to a PNG (one point series per GPU and context);
- what the unit tests used to time (issue 23 moved those bounds here): a bad-input refusal, a path-shaped
  typo (never sent to the hub), the huge valid requests, long tables (16,384 rows; 20,000 rows stacked
  at 30 columns) and a 16,384-row SVG plot.

Each case has its bound in seconds (the goal, with room for a loaded 2-core machine); a median over it
is marked OVER and the exit status is 1.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

KV = [sys.executable, "-m", "kvcalc"]


def _run(args: list[str], env: dict[str, str], limit: float = 120) -> tuple[float, int | str]:
    start = time.perf_counter()
    try:
        out = subprocess.run(KV + args, env=env, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - start, f"killed after {limit:g} s"
    return time.perf_counter() - start, out.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", help="run only the cases whose name contains this")
    args = parser.parse_args()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # never accepted: a hub that does not answer
    tmp = tempfile.mkdtemp()
    base = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    hub = {**base, "HF_HOME": os.path.join(tmp, "hf")}
    svg = os.path.join(tmp, "big.svg")
    narrow = {**base, "COLUMNS": "30"}
    # name: (argv, env, bound in seconds)
    cases = {
        "unreachable hub (connection refused)": (
            ["cache", "acme/tiny"],
            {**hub, "HF_ENDPOINT": "http://127.0.0.1:9"},
            3,
        ),
        "unreachable hub (no answer)": (
            ["cache", "acme/tiny"],
            {**hub, "HF_ENDPOINT": f"http://127.0.0.1:{silent.getsockname()[1]}"},
            3,
        ),
        "roofline --batch 1..100000000+1 (refused)": (
            ["roofline", "7b", "--gpu", "h100", "--batch", "1..100000000+1"],
            base,
            3,
        ),
        "cache --batch 1..1000+1 --seq 1..1000+1, 10^6 rows (refused)": (
            ["cache", "7b", "--batch", "1..1000+1", "--seq", "1..1000+1"],
            base,
            3,
        ),
        "generate llama-3-8b --gpu h100 --new 1m": (
            ["generate", "llama-3-8b", "--gpu", "h100", "--new", "1m"],
            base,
            5,
        ),
        "cache 7b --batch 1..50000+1 --explain (50,000 rows)": (
            ["cache", "7b", "--batch", "1..50000+1", "--explain"],
            base,
            5,
        ),
        "roofline 7b --gpu h100 --batch 1..50000+1 --explain": (
            ["roofline", "7b", "--gpu", "h100", "--batch", "1..50000+1", "--explain"],
            base,
            5,
        ),
        "compare mha gqa mla --batch 1..16000+1 (48,000 rows)": (
            ["compare", "mha", "gqa", "mla", "--batch", "1..16000+1"],
            base,
            5,
        ),
        "roofline 7b --gpu h100 --batch 1..16384+1 --plot big.png": (
            ["roofline", "7b", "--gpu", "h100", "--batch", "1..16384+1", "--plot", os.path.join(tmp, "big.png")],
            base,
            20,
        ),
        # moved from the unit tests (issue 23)
        "cache 7b --seq 0 (a bad input, refused)": (["cache", "7b", "--seq", "0"], base, 5),
        "cache configs/qwen3-8b.jsn (a path typo, never sent to the hub)": (
            ["cache", "configs/qwen3-8b.jsn"],
            {**hub, "HF_ENDPOINT": "http://127.0.0.1:9"},
            1,
        ),
        "fit mixtral-8x7b --tp 2 --tpot-ms 1 --ttft-ms 1": (
            ["fit", "mixtral-8x7b", "--gpu", "h100", "--tp", "2", "--tpot-ms", "1", "--ttft-ms", "1"],
            base,
            5,
        ),
        "cache llama-3-8b --batch 2^40 --seq 2^40": (
            ["cache", "llama-3-8b", "--batch", "1099511627776", "--seq", "1099511627776"],
            base,
            5,
        ),
        "roofline 7b --gpu h100 --batch 1..50000+1": (
            ["roofline", "7b", "--gpu", "h100", "--batch", "1..50000+1"],
            base,
            5,
        ),
        "compare mha gqa mla --batch 1..1m --seq 1..1m": (
            ["compare", "mha", "gqa", "mla", "--batch", "1..1m", "--seq", "1..1m"],
            base,
            5,
        ),
        "roofline 7b --gpu h100 --batch 1..16384+1 (table)": (
            ["roofline", "7b", "--gpu", "h100", "--batch", "1..16384+1"],
            base,
            5,
        ),
        "roofline 7b --gpu h100 --batch 1..20000+1, 30 columns (stacked)": (
            ["roofline", "7b", "--gpu", "h100", "--batch", "1..20000+1"],
            narrow,
            5,
        ),
        "roofline 7b --gpu h100 --batch 1..16384+1 --plot big.svg -f csv": (
            ["roofline", "7b", "--gpu", "h100", "--batch", "1..16384+1", "--plot", svg, "-f", "csv"],
            base,
            20,
        ),
    }
    over = 0
    for name, (argv, env, bound) in cases.items():
        if args.only and args.only not in name:
            continue
        runs = [_run(argv, env) for _ in range(args.runs)]
        median = statistics.median(t for t, _ in runs)
        flag = "" if median < bound else "  OVER"
        over += bool(flag)
        print(f"{name:66s} {median:7.2f} s  (bound {bound:g} s)  exit {runs[0][1]}{flag}", flush=True)
    silent.close()
    sys.exit(1 if over else 0)


if __name__ == "__main__":
    main()
