"""Start-up benchmark: `kvcalc cache llama-3-8b` against the bare import of its dependencies.

Run by hand: python benchmarks/startup.py [--runs 21]. The goal (issue "kvcalc core") is a median
wall time of at most 1.25x `python -c "import typer, rich.table, pydantic, yaml"`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

BASELINE = [sys.executable, "-c", "import typer, rich.table, pydantic, yaml"]
# The floor any Typer 0.2x CLI pays: parsing builds pydantic TypeAdapters (typer._adapters).
MINIMAL_TYPER = (
    "import typer\napp = typer.Typer()\n@app.command()\ndef cache(model: str, batch: str = '1'):\n"
    "    print(model)\n@app.command()\ndef other():\n    pass\napp()"
)
COMMANDS = {
    "(reference) a minimal two-command Typer app": [sys.executable, "-c", MINIMAL_TYPER, "cache", "x"],
    "cache llama-3-8b": [sys.executable, "-m", "kvcalc", "cache", "llama-3-8b"],
    "cache meta-llama/Meta-Llama-3-8B (alias)": [sys.executable, "-m", "kvcalc", "cache", "meta-llama/Meta-Llama-3-8B"],
    "roofline 7b --gpu a100": [sys.executable, "-m", "kvcalc", "roofline", "7b", "--gpu", "a100"],
}


def median_seconds(cmd: list[str], runs: int) -> float:
    subprocess.run(cmd, check=True, capture_output=True)  # warm the file cache
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    base = median_seconds(BASELINE, args.runs)
    print(f"{'baseline: import typer, rich.table, pydantic, yaml':50s} {base * 1e3:8.1f} ms")
    for name, cmd in COMMANDS.items():
        t = median_seconds(cmd, args.runs)
        label = name if name.startswith("(") else "kvcalc " + name
        print(f"{label:50s} {t * 1e3:8.1f} ms  {t / base:5.2f}x baseline")


if __name__ == "__main__":
    main()
