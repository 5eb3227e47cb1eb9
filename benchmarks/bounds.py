"""Bounded time for bad and huge requests (issue 12): wall time of whole `kvcalc` runs.

Run by hand: python benchmarks/bounds.py [--runs 3]. Prints the median wall time of each case and
its exit status. The figures last measured are in benchmarks/bounds_results.txt.

Cases:
- the hub refuses the connection, and the hub accepts but never answers (no network, no cache);
- a 10^8-value range and a 10^6-row grid, refused before any work (units.MAX_ROWS = 50,000);
- `generate --new 1m` (its decode sum in closed form);
- a 16,384-row roofline sweep with --plot to a PNG (one point series per GPU and context).
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
    cases = {
        "unreachable hub (connection refused)": (["cache", "acme/tiny"], {**hub, "HF_ENDPOINT": "http://127.0.0.1:9"}),
        "unreachable hub (no answer)": (
            ["cache", "acme/tiny"],
            {**hub, "HF_ENDPOINT": f"http://127.0.0.1:{silent.getsockname()[1]}"},
        ),
        "roofline --batch 1..100000000+1 (refused)": (
            ["roofline", "7b", "--gpu", "h100", "--batch", "1..100000000+1"],
            base,
        ),
        "cache --batch 1..1000+1 --seq 1..1000+1, 10^6 rows (refused)": (
            ["cache", "7b", "--batch", "1..1000+1", "--seq", "1..1000+1"],
            base,
        ),
        "generate llama-3-8b --gpu h100 --new 1m": (["generate", "llama-3-8b", "--gpu", "h100", "--new", "1m"], base),
        "cache 7b --batch 1..50000+1 --explain (50,000 rows)": (
            ["cache", "7b", "--batch", "1..50000+1", "--explain"],
            base,
        ),
        "roofline 7b --gpu h100 --batch 1..50000+1 --explain": (
            ["roofline", "7b", "--gpu", "h100", "--batch", "1..50000+1", "--explain"],
            base,
        ),
        "compare mha gqa mla --batch 1..16000+1 (48,000 rows)": (
            ["compare", "mha", "gqa", "mla", "--batch", "1..16000+1"],
            base,
        ),
        "roofline 7b --gpu h100 --batch 1..16384+1 --plot big.png": (
            ["roofline", "7b", "--gpu", "h100", "--batch", "1..16384+1", "--plot", os.path.join(tmp, "big.png")],
            base,
        ),
    }
    for name, (argv, env) in cases.items():
        if args.only and args.only not in name:
            continue
        runs = [_run(argv, env) for _ in range(args.runs)]
        median = statistics.median(t for t, _ in runs)
        print(f"{name:62s} {median:7.2f} s  exit {runs[0][1]}", flush=True)
    silent.close()


if __name__ == "__main__":
    main()
