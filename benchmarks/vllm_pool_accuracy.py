"""vLLM 0.19's KV pool as kvcalc predicts it, against every start-up log of llm-d-planner's public
memory-validation sweep that got as far as sizing it (benchmarks/vllm_logs/points.csv: 61 logs on H100
80GB, DEBUG level, from llm-d-incubation/llm-d-planner accuracy/results/v0.19.0/logs/, each row with its
URL). Each log is predicted as `kvcalc fit MODEL --gpu h100 --engine vllm --seq L --tp --pp --gpu-util U`
with the model named as the log serves it (a preset or its alias offline; a quantized checkpoint as its base
preset by name), --dtype fp16 / fp32 where the log's dtype is, --dtype fp8 for online fp8 quantization and
--kv-dtype fp8 for an fp8 cache. A model kvcalc cannot resolve offline is listed, not guessed.

Reports each log's weights, available KV memory and KV tokens against the logged figures, and the mean and
worst error of the available memory. Writes benchmarks/vllm_pool_accuracy.md.

Run: python benchmarks/vllm_pool_accuracy.py   (about half a minute)
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POINTS = ROOT / "benchmarks" / "vllm_logs" / "points.csv"
OUT = ROOT / "benchmarks" / "vllm_pool_accuracy.md"
sys.path.insert(0, str(ROOT))
GIB = 2**30


def fit_args(row: dict) -> dict:
    """The API arguments that ask for the log's setup."""
    args = dict(
        seq=int(row["max_model_len"]), tp=int(row["tp"]), pp=int(row["pp"]), engine="vllm",
        gpu_util=float(row["gpu_memory_utilization"]),
    )  # fmt: skip
    dtype = {"float16": "fp16", "float32": "fp32"}.get(row["dtype"])
    if row["quantization"] == "fp8":
        dtype = "fp8"
    if dtype:
        args["dtype"] = dtype
    if row["kv_cache_dtype"] == "fp8":
        args["kv_dtype"] = "fp8"
    return args


def predict(row: dict) -> dict | str:
    """kvcalc's vLLM figures for the log's setup, or the one-line error where it cannot say."""
    import kvcalc
    from kvcalc.errors import KvcalcError

    try:
        v = kvcalc.fit(row["model"], "h100", **fit_args(row)).vllm
    except KvcalcError as e:
        return str(e).splitlines()[0]
    if v is None:
        return "no vLLM figures"
    return dict(weights=v.weights_bytes / GIB, available=v.available_kv_bytes / GIB, tokens=v.kv_cache_tokens)


def main() -> int:
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the presets and their aliases: the same answer on any machine
    rows = list(csv.DictReader(open(POINTS, newline="")))
    lines = [
        "# vLLM 0.19's KV pool against llm-d-planner's public start-up logs",
        "",
        f"Written by `python benchmarks/vllm_pool_accuracy.py` from `{POINTS.relative_to(ROOT)}` ({len(rows)} logs,",
        "H100 80GB, vLLM 0.19.0). GiB as vLLM logs them; error = kvcalc - logged.",
        "",
        "| model | tp | pp | max len | util | dtype / quant / KV | weights GiB (log) | available KV GiB (log) | error | KV tokens (log) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    errors, unresolved = [], []
    for row in rows:
        got = predict(row)
        kind = " / ".join(x for x in (row["dtype"], row["quantization"], row["kv_cache_dtype"]) if x)
        head = f"| {row['model']} | {row['tp']} | {row['pp']} | {row['max_model_len']} | {row['gpu_memory_utilization']} | {kind} "
        if isinstance(got, str):
            unresolved.append(f"- {row['model']} (tp {row['tp']}): {got}")
            continue
        err = got["available"] - float(row["available_kv_gib"])
        errors.append(err)
        lines.append(
            head
            + f"| {got['weights']:.2f} ({row['weights_gib']}) | {got['available']:.2f} ({row['available_kv_gib']}) "
            f"| {err:+.2f} | {got['tokens']:,} ({int(row['kv_tokens']):,}) |"
        )
    lines += [
        "",
        f"Predicted: {len(errors)} of {len(rows)} logs. Available KV memory: mean |error| "
        f"{statistics.fmean(abs(e) for e in errors):.3f} GiB, worst {max(errors, key=abs):+.2f} GiB, "
        f"{sum(abs(e) <= 0.1 for e in errors)} within 0.1 GiB.",
    ]
    if unresolved:
        lines += ["", "Not predicted (no config offline: kvcalc names what it lacks, never guesses):", *unresolved]
    OUT.write_text("\n".join(lines) + "\n")
    print(next(line for line in lines if line.startswith("Predicted:")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
