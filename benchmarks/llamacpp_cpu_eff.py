"""How much of its system memory's bandwidth llama.cpp's CPU side reaches in decode: the fraction the estimate
takes for weights left on the CPU (layers `-ngl` leaves there, experts `--n-cpu-moe` keeps there), and its 80% band.

For each public run of benchmarks/llamacpp_cpu/points.csv (sources and quotes there): the GPU's part of a decoded
token is kvcalc's calibrated estimate of it (plan/llamacpp_speed.step_features, timed as `fit --engine llamacpp`
times it), the rest of the measured time is the CPU's, and the bytes the CPU reads in it (the weights it holds
that the token reaches, routed experts top-k of their bytes, and its KV) over that time, divided by the RAM's
bandwidth (nominal, or the source's own measurement), is the fraction reached. Everything not modelled on the CPU
side (its threads' barriers, the GPU<->CPU hand-overs of each split) lands in that fraction too. The shipped
constants (plan/llamacpp_speed.CPU_EFFICIENCY) are the median and the 10th and 90th percentiles;
tests/test_llamacpp_cpu_moe.py checks they are this script's.

    python benchmarks/llamacpp_cpu_eff.py > benchmarks/llamacpp_cpu_eff.md
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POINTS = ROOT / "benchmarks" / "llamacpp_cpu" / "points.csv"
# The RTX 2080 of four llmfit runs has no preset; its decode side needs only its bandwidth and fp32 peak
# (gamegpu.com / cputronic.com spec pages: 448 GB/s, 2,944 cores x 1,710 MHz x 2 = 10.07 TFLOPS).
RTX_2080 = {
    "name": "rtx-2080", "full_name": "GeForce RTX 2080", "memory_bytes": 8_000_000_000,
    "hbm_bandwidth_bytes_per_s": 448_000_000_000, "peak_dense_tflop_per_s": {"fp32": 10.07},
}  # fmt: skip
DECODE_CONTEXT = 256  # llama-bench's tg128 from an empty cache, a short chat's generation


def implied(row: dict) -> tuple[float, float, float]:
    """(fraction of the RAM bandwidth reached, the GPU part's estimated seconds, the CPU's bytes) of one run."""
    from kvcalc.cost.estimate import timed
    from kvcalc.engines.llamacpp.buffers import TensorRow, spec_tensors
    from kvcalc.engines.llamacpp.eras import era
    from kvcalc.engines.llamacpp.memory import llamacpp_memory
    from kvcalc.errors import SpecError
    from kvcalc.hardware.gpu import GpuSpec
    from kvcalc.model.gguf.mix import FTYPES, tensor_table
    from kvcalc.model.presets import get_gpu, get_model
    from kvcalc.plan.calibration import constants_for
    from kvcalc.plan.llamacpp_speed import _kv, _reads, step_features

    spec = get_model(row["model"])
    ftype = row["ftype"]
    try:
        rows = [TensorRow(*t) for t in tensor_table(spec, ftype)]
    except SpecError:
        rows = spec_tensors(spec, FTYPES[ftype], "mxfp4" if ftype == "mxfp4_moe" else None)
    ngl, cpu_moe, gpus = int(row["ngl"]), int(row["cpu_moe"]), 0 if row["gpu"] == "none" else 1
    r = llamacpp_memory(spec, rows, int(row["n_ctx"]), era(None), weights_exact=True, ngl=ngl, cpu_moe=cpu_moe,
                        n_gpus=gpus)  # fmt: skip
    bandwidth = float(row["cpu_bw_gbs"]) * 1e9
    seconds = 1 / float(row["decode_tok_s"])
    if not gpus:  # the CPU reads every weight the token reaches and its KV
        devs: list[int | None] = [None] * (spec.num_layers + 1)
        weights = _reads(spec, rows, devs, 1)[None][0]
        kv = _kv(r, devs, DECODE_CONTEXT, False).get(None, 0.0)
        return (weights + kv) / (bandwidth * seconds), 0.0, weights + kv
    gpu = GpuSpec.model_validate(RTX_2080) if row["gpu"] == "rtx-2080" else get_gpu(row["gpu"])
    f, cpu_bytes, _ = step_features(spec, rows, r, gpu, 1, False, context=DECODE_CONTEXT)
    gpu_s = timed(f, constants_for(gpu, "llamacpp"), "llamacpp").estimate_s
    return cpu_bytes / (bandwidth * (seconds - gpu_s)), gpu_s, cpu_bytes


def efficiency() -> tuple[float, float, float, list[tuple[dict, float, float, float]]]:
    """(median, 10th percentile, 90th percentile) of the fraction over the runs, and each run's figures."""
    runs = [(row, *implied(row)) for row in csv.DictReader(open(POINTS, newline=""))]
    fractions = sorted(f for _, f, _, _ in runs)
    deciles = statistics.quantiles(fractions, n=10, method="inclusive")
    return round(statistics.median(fractions), 2), round(deciles[0], 2), round(deciles[-1], 2), runs


def main() -> int:
    mid, lo, hi, runs = efficiency()
    print("# llama.cpp's CPU side in decode: the fraction of the RAM bandwidth it reaches\n")
    print("Written by `python benchmarks/llamacpp_cpu_eff.py` (see its docstring); runs and their sources in")
    print("`benchmarks/llamacpp_cpu/points.csv`.\n")
    print(f"Median **{mid:.2f}**, 10th percentile {lo:.2f}, 90th percentile {hi:.2f} over {len(runs)} runs: the")
    print("estimate reads the CPU's bytes at the median fraction of `--cpu-bandwidth` and its 80% interval at the")
    print("two percentiles; the ceiling reads them at the full bandwidth.\n")
    print("| run | model | placement | RAM GB/s | measured tok/s | GPU part (est.) ms | CPU bytes / token | fraction |")
    print("|---|---|---|---|---|---|---|---|")
    for row, fraction, gpu_s, cpu_bytes in runs:
        print(f"| {row['id']} | {row['model']} {row['ftype']} on {row['gpu']} | {row['placement']} | "
              f"{float(row['cpu_bw_gbs']):g} ({row['bw_basis']}) | {row['decode_tok_s']} | {gpu_s * 1e3:.2f} | "
              f"{cpu_bytes / 1e9:.3f} GB | {fraction:.2f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
