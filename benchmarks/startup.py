"""Start-up benchmark: `kvcalc cache llama-3-8b` against a minimal Typer app that prints one Rich table.

Run by hand: python benchmarks/startup.py [--runs 31]. Both run in this interpreter, interleaved
(reference, kvcalc, reference, kvcalc, ...) so machine load hits both alike. The goal (issue 12) is a
median of at most 1.10x the reference. Results are in the RESULTS note below.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

# The floor any Typer CLI that prints a table pays: typer (with its pydantic TypeAdapters when it
# parses an option) and rich's console and table.
MINIMAL_TYPER_TABLE = """
import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer()


@app.command()
def cache(model: str, batch: str = "1"):
    table = Table("model", "batch")
    table.add_row(model, batch)
    Console().print(table)


@app.command()
def other():
    pass


app()
"""
REFERENCE = [sys.executable, "-c", MINIMAL_TYPER_TABLE, "cache", "x"]
WITH_COLLECTOR = [sys.executable, "-c", "from kvcalc.cli import app; app(prog_name='kvcalc')"]
COMMANDS = {
    "cache llama-3-8b": [sys.executable, "-m", "kvcalc", "cache", "llama-3-8b"],
    "cache meta-llama/Meta-Llama-3-8B (alias)": [sys.executable, "-m", "kvcalc", "cache", "meta-llama/Meta-Llama-3-8B"],
    "roofline 7b --gpu a100": [sys.executable, "-m", "kvcalc", "roofline", "7b", "--gpu", "a100"],
    # The same command with CPython's cyclic collector left on (kvcalc/__main__.py turns it off): what
    # kvcalc's own code costs, apart from the collector's passes over everything imported.
    "cache llama-3-8b, collector on": [*WITH_COLLECTOR, "cache", "llama-3-8b"],
}
# The largest requests the CLI accepts quickly, for peak memory with the collector on and off (--memory).
HEAVY = [
    ["roofline", "llama-3-8b", "--gpu", "h100", "--batch", "1..40000+1", "--explain"],
    ["roofline", "llama-3-8b", "--gpu", "h100", "--batch", "1..40000+1", "--format", "json"],
    ["cache", "llama-3-8b", "--seq", "1..45000+1", "--format", "csv"],
    ["cache", "llama-3-8b", "--seq", "1..16k", "--plot", os.path.join(tempfile.gettempdir(), "kvcalc-bench.png")],
    ["generate", "llama-3-8b", "--gpu", "h100", "--new", "1m"],
    ["fit", "llama-3-70b", "--gpu", "h100", "--tp", "4", "--engine", "vllm"],
    ["lab"],
]
RESULTS = """
2026-12-01 03:29 UTC, 2-core dev machine (load 0.8), Python 3.11.7, typer 0.29.2, --runs 31:
  kvcalc cache llama-3-8b                  173.3 ms   reference 150.8 ms   1.15x (median of pairs 1.15x)
  kvcalc cache meta-llama/Meta-Llama-3-8B  176.4 ms   reference 151.5 ms   1.17x
  kvcalc roofline 7b --gpu a100            183.4 ms   reference 150.0 ms   1.22x
The 1.10x goal is not met (+22 ms where +15 ms is allowed); it was 1.40x (with kvcalc's bytecode
stale, which this script now compiles first). Beyond what the reference pays: imports 12.6 ms
(the Pydantic model modules results/quant/specs 6.5 ms: about 20 us a field at class creation;
kvcalc's CLI, preset, sheet and core modules 5 ms; json 1.2 ms), and the run 6 ms (Typer building
and coercing cache's 21 options 3 ms, the ModelSpec and CacheResult schemas 2.5 ms, Rich 0.5 ms).
Done: shipped presets read without PyYAML (presetyaml.py, 8 ms), no string annotations in the
model modules (Pydantic compiled each, 2 ms), tp validity in kvcache.py (cache imports neither
parallel nor params), no importlib.resources, only the invoked command built, one preset file
read, lazy imports of the hub, plotting and NumPy.
"""


def _once(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "COLUMNS": "100"})
    return time.perf_counter() - start


def interleaved(cmd: list[str], runs: int) -> tuple[float, float, float]:
    """(median reference s, median command s, median of the per-pair ratios)."""
    _once(REFERENCE), _once(cmd)  # warm the file cache
    ref, own = [], []
    for _ in range(runs):
        ref.append(_once(REFERENCE))
        own.append(_once(cmd))
    return statistics.median(ref), statistics.median(own), statistics.median(o / r for o, r in zip(own, ref))


def peak_memory() -> None:
    """Peak RSS and time of the HEAVY commands, with the cyclic collector on and off."""
    # NOTE: VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child reports its parent's peak.
    report = "import sys; sys.stderr.write([x for x in open('/proc/self/status') if x.startswith('VmHWM')][0])"
    runs = {
        "on": f"import atexit; atexit.register(lambda: exec({report!r}))\n"
        "import sys; from kvcalc.cli import app; app(prog_name='kvcalc', args=sys.argv[1:])",
        "off": f"import atexit; atexit.register(lambda: exec({report!r}))\nfrom kvcalc.__main__ import main; main()",
    }
    for args in HEAVY:
        cells = []
        for label, code in runs.items():
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
            peak = next(int(x.split()[1]) for x in done.stderr.splitlines() if x.startswith("VmHWM"))
            cells.append(f"{label}: {peak / 1024:6.1f} MiB {time.perf_counter() - start:5.2f} s")
        print(f"kvcalc {' '.join(args)[:58]:58s} " + "   ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=31)
    parser.add_argument("--memory", action="store_true", help="peak memory of large requests, collector on/off")
    args = parser.parse_args()
    # NOTE: typer, rich and pydantic run from the bytecode pip compiled when it installed them; an
    # editable install (or PYTHONDONTWRITEBYTECODE=1) leaves kvcalc without it, and every run would
    # recompile kvcalc's sources (about 20 ms here). Compile it as an installed wheel would be.
    import compileall

    import kvcalc

    compileall.compile_dir(os.path.dirname(kvcalc.__file__), quiet=1)
    if args.memory:
        peak_memory()
        return
    for name, cmd in COMMANDS.items():
        ref, own, ratio = interleaved(cmd, args.runs)
        print(
            f"kvcalc {name:42s} {own * 1e3:7.1f} ms   reference {ref * 1e3:7.1f} ms   "
            f"ratio {own / ref:4.2f}x (median of pairs {ratio:4.2f}x)"
        )


if __name__ == "__main__":
    main()
