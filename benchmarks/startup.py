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
WITH_COLLECTOR = [sys.executable, "-c", "from kvcalc.cli.app import app; app(prog_name='kvcalc')"]
COMMANDS = {
    "cache llama-3-8b": [sys.executable, "-m", "kvcalc", "cache", "llama-3-8b"],
    "cache meta-llama/Meta-Llama-3-8B (alias)": [sys.executable, "-m", "kvcalc", "cache", "meta-llama/Meta-Llama-3-8B"],
    "roofline 7b --gpu a100": [sys.executable, "-m", "kvcalc", "roofline", "7b", "--gpu", "a100"],
    "generate 7b --gpu a100": [sys.executable, "-m", "kvcalc", "generate", "7b", "--gpu", "a100"],
    # The same commands with CPython's cyclic collector left on and nothing frozen at exit (kvcalc/__main__.py
    # turns it off and freezes): what kvcalc's own code costs, apart from the collector's passes over
    # everything imported, during the run and at exit.
    "cache llama-3-8b, collector on": [*WITH_COLLECTOR, "cache", "llama-3-8b"],
    "roofline 7b --gpu a100, collector on": [*WITH_COLLECTOR, "roofline", "7b", "--gpu", "a100"],
    "generate 7b --gpu a100, collector on": [*WITH_COLLECTOR, "generate", "7b", "--gpu", "a100"],
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
2026-12-01 17:50 UTC, start-up of roofline and generate (issues 18/19), 2-core dev machine (load 2.6-3.3),
Python 3.11.7, typer 0.29.2, rich 15.0.0, pydantic 2.14.4, --runs 21 (wall moves by +-10 ms at this load;
compare by instructions):
  kvcalc cache llama-3-8b                   125.2 ms   reference 160.8 ms   0.78x (median of pairs 0.88x)
  kvcalc cache meta-llama/Meta-Llama-3-8B   136.1 ms   reference 162.1 ms   0.84x (0.88x)
  kvcalc roofline 7b --gpu a100             127.1 ms   reference 137.1 ms   0.93x (0.96x)
  kvcalc generate 7b --gpu a100             132.5 ms   reference 139.1 ms   0.95x (0.96x)
  collector on, nothing frozen: cache 1.11x (1.10x), roofline 1.16x (1.16x), generate 1.16x (1.16x)
--instructions: cache 770.0 M, alias 774.1 M, roofline 828.7 M, generate 841.8 M; reference 766.5 M
  (1.00x, 1.01x, 1.08x, 1.10x). Collector on, nothing frozen: cache 853.1 M, roofline 914.6 M, generate
  925.5 M (1.11x, 1.19x, 1.21x). Before: cache 850.0 M, roofline 954.8 M, generate 931.6 M (1.11x, 1.25x,
  1.21x); wall 1.05x, 1.17x and 1.16x. After merging main at 18:00 (load 3.0): the same instructions; wall
  cache 0.89x, roofline 0.97x, generate 0.97x (0.99x); collector on 1.11x, 1.14-1.20x, 1.17x.
Where it came from (instructions, on roofline unless said):
- Rich's Table laid out the roofline table in 58 M (14 columns x 7 rows; the reference's 2 x 1 table
  costs it 14 M). present/sheet.py lays out any table at its natural widths directly, byte for byte as
  Rich did (property test against Rich, pipe and terminal, tests/test_sheet_layout.py; 738 table outputs
  of 62 commands at 7 widths byte-identical before and after): -63 M roofline, -26 M generate, -32 M
  cache. Rich's table rendered each str cell through markup and emoji codes, and the emoji table alone
  took 2 ms to import; the direct layout checks the two patterns instead.
- The shipped fit is a module, kvcalc/cost/calibration_data.py (scripts/calibration_module.py writes it
  from calibration.json; a test keeps them equal): no json import on roofline or generate (-5 M); json
  comes in only when a user's calibration file exists.
- kvcalc/__main__.py freezes the objects at exit: CPython's exit-time collection runs with the
  collector off too, and scanned everything the imports made (-48 M, about -15 ms on every command).
  The "collector on" rows run without this and without gc.disable: kvcalc's own code.
- params.shard_formats imports llama.cpp's quant tables only for a --dtype (-3 M, since main's GGUF work).
What remains beyond the reference (roofline, collector off): the cost modules and their result models
(about 26 M beyond cache's), ModelSpec's validator and the preset read (21 M, as cache), the GPU preset
and GpuSpec (6 M), the rows and their estimates (12 M), the notes' Rich wrapping (3 M).

2026-12-01 17:00 UTC, after issues 18-23 (subpackages; sglang, llama.cpp, estimate, serving, plan commands), --runs 21:
  kvcalc cache llama-3-8b                  131.7 ms   reference 125.2 ms   1.05x (median of pairs 1.05x)
  kvcalc cache meta-llama/Meta-Llama-3-8B  138.9 ms   reference 129.7 ms   1.07x (1.08x)
  kvcalc roofline 7b --gpu a100            146.7 ms   reference 125.4 ms   1.17x (1.17x)
  kvcalc cache llama-3-8b, collector on    143.9 ms   reference 126.3 ms   1.14x (1.12x)
--instructions: cache 849.8 M, alias 854.2 M, roofline 955.3 M, collector on 885.0 M; reference 766.4 M
  (1.11x, 1.11x, 1.25x, 1.15x). Right after the move into subpackages, before the other issues: cache 830.9 M
  (828.0 M before it). The growth is cache's own new options (llama.cpp's: 28 TypeAdapters, Typer builds one
  per option of the command it runs) and the new command modules; roofline also loads the calibrated
  estimate's constants (json) and times every row twice (ceiling and estimate).

2026-12-01 05:08 UTC, 2-core dev machine (load 0.9), Python 3.11.7, typer 0.29.2, pydantic 2.14.4, --runs 41:
  kvcalc cache llama-3-8b                  182.5 ms   reference 177.3 ms   1.03x (median of pairs 1.03x)
  kvcalc cache meta-llama/Meta-Llama-3-8B  170.0 ms   reference 161.7 ms   1.05x (1.04x)
  kvcalc roofline 7b --gpu a100            192.4 ms   reference 173.6 ms   1.11x (1.10x)
  kvcalc cache llama-3-8b, collector on    215.6 ms   reference 195.9 ms   1.10x (1.12x)
--instructions (the same count every run; compare changes by this, wall time moves by +-5 ms here):
  cache llama-3-8b 828.0 M, alias 832.4 M, roofline 904.5 M, collector on 862.6 M; reference 766.3 M
  (1.08x, 1.09x, 1.18x, 1.13x). At the previous stop: 900.7 M, 917.4 M, 984.2 M (1.18x, 1.20x, 1.28x).
The goal (cache within 1.10x) is met; it was 1.15x at the previous stop (1.40x before that).
Of the 73 M instructions saved on cache, kvcalc's own code gave 38 M: each command's result models
live beside its core function (cache defines 3 Pydantic classes, not 12); GpuSpec is in gpu.py
(cache without --gpu never defines it); quant's models defer their validators and the --dtype
formats are built on demand; presetyaml reads flow values itself, so json is imported only by
--format json and config.json reads; the CLI modules keep real annotations (Typer evaluated ~100
annotation strings of the command it ran); LayerRun builds its validator once, not once inside
ModelSpec's and again on first use; layer_groups copies each distinct run once; four patterns
compile on first use. An alias is looked up only in the preset files whose text holds it (-16 M on
the alias), and step.py's records are NamedTuples, not frozen dataclasses (-15 M on roofline).
The other 35 M: kvcalc/__main__.py runs the command with CPython's cyclic collector off, which
otherwise scans everything the imports create; --memory shows what that costs in memory: under
0.5 MiB on the largest grids and `kvcalc lab`, 3 MiB on a 16k-point chart.
What remains beyond the reference (instructions, collector on): Typer's work per option, about 0.8 M
for each of cache's 15 options beyond the reference's 2 (12 M); ModelSpec's class (36 fields) and
validator (11.6 M with the checkpoint models nested in it); the CLI modules that define the other
commands (10 M); the cache table's extra Rich rendering (7 M); CacheResult (3 M).
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
    """Peak RSS and time of the HEAVY commands, with the cyclic collector on and off (Linux)."""
    if not os.path.exists("/proc/self/status"):
        sys.exit("--memory reads VmHWM from /proc/self/status: Linux only")
    # NOTE: VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child reports its parent's peak.
    report = "import sys; sys.stderr.write([x for x in open('/proc/self/status') if x.startswith('VmHWM')][0])"
    runs = {
        "on": f"import atexit; atexit.register(lambda: exec({report!r}))\n"
        "import sys; from kvcalc.cli.app import app; app(prog_name='kvcalc', args=sys.argv[1:])",
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


def instructions() -> None:
    """Instructions each command executes (valgrind's cachegrind, hash seed fixed): one run each, and
    the same count every time, where wall time moves by several ms between runs on a shared machine."""
    import re
    import shutil

    if not shutil.which("valgrind"):
        sys.exit("--instructions needs valgrind")

    def count(cmd: list[str]) -> int:
        tool = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
        env = {**os.environ, "COLUMNS": "100", "PYTHONHASHSEED": "0"}
        done = subprocess.run([*tool, *cmd], capture_output=True, text=True, env=env, check=True)
        return int(re.search(r"I\s+refs:\s+([\d,]+)", done.stderr).group(1).replace(",", ""))

    ref = count(REFERENCE)
    for name, cmd in COMMANDS.items():
        own = count(cmd)
        print(f"kvcalc {name:42s} {own / 1e6:7.1f} M   reference {ref / 1e6:7.1f} M   ratio {own / ref:4.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=31)
    parser.add_argument("--memory", action="store_true", help="peak memory of large requests, collector on/off")
    parser.add_argument("--instructions", action="store_true", help="instructions executed (needs valgrind)")
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
    if args.instructions:
        instructions()
        return
    for name, cmd in COMMANDS.items():
        ref, own, ratio = interleaved(cmd, args.runs)
        print(
            f"kvcalc {name:42s} {own * 1e3:7.1f} ms   reference {ref * 1e3:7.1f} ms   "
            f"ratio {own / ref:4.2f}x (median of pairs {ratio:4.2f}x)"
        )


if __name__ == "__main__":
    main()
