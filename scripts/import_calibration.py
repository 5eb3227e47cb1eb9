"""Copy the public speed measurements kvcalc's estimate is fitted on into benchmarks/calibration/.

Reads ../shared/reference/speed_calibration.json (670 public points, each with its source URL and a
verbatim quote) and aic_silicon_sample.csv (NVIDIA aiconfigurator's measured serving runs, Apache-2.0)
and writes benchmarks/calibration/points.csv: one row per measured figure, mapped to kvcalc presets.

Nothing is hand-picked: a point is kept when kvcalc can model its setup (a model and GPU preset, no
expert or attention-data parallelism, no speculative decoding, a known batch or concurrency) and its
regime is a static batch, batch 1 or closed-loop concurrency; every other point is skipped with the
reason counted in benchmarks/calibration/README.md. Run: python scripts/import_calibration.py
"""

from __future__ import annotations

import csv
import json
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "reference"
OUT = ROOT / "benchmarks" / "calibration" / "points.csv"
FIELDS = [
    "id", "source", "model", "gpu", "tp", "pp", "engine", "dtype", "kv_dtype", "regime", "batch",
    "concurrency", "prompt", "new", "metric", "value", "source_url", "quote",
]  # fmt: skip

GPU = {"h200-sxm": "h200", "h100-sxm": "h100", "a100-80gb-sxm": "a100", "gh200-144gb": "gh200"}
AIC_GPU = {"h100_sxm": "h100", "h200_sxm": "h200", "b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200"}


def engine_of(text: str) -> str | None:
    t = text.lower()
    for key, name in (("tensorrt", "trtllm"), ("lmdeploy", "trtllm"), ("sglang", "sglang"), ("llama.cpp", "llamacpp")):
        if key in t:
            return name
    if "vllm" in t or t.startswith("tgi"):
        return "vllm"
    return None  # MLC, ExLlama: no engine of the four


def dtype_of(text: str | None) -> str | None:
    t = (text or "").lower()
    if t.startswith("fp8"):
        return "fp8"
    if t.startswith("fp4") or "nvfp4" in t:
        return "nvfp4"
    if t.startswith("mxfp4"):
        return None  # the preset's native checkpoint
    if "gguf" in t:
        # a GGUF's llama.cpp quant (q4_k_m, q4_0, ...): priced by its per-tensor mix (model/gguf/mix.py)
        from kvcalc.model.gguf.mix import FTYPES

        named = [f for f in FTYPES if f in t]
        if named:
            return named[0]
    if "q4" in t or "int4" in t:
        return "int4"
    if t.startswith(("f16", "fp16")):
        return "fp16"
    if t.startswith("bf16"):
        return "bf16"
    return None


def resolve_model(*names: str | None) -> str | None:
    from kvcalc.model.presets import get_model

    for name in names:
        if not name:
            continue
        name = re.sub(r"\s*\(.*$", "", name).strip()
        try:
            return get_model(name).name
        except Exception:
            continue
    return None


def gpu_preset(gid: str | None) -> str | None:
    from kvcalc.model.presets import get_gpu

    if not gid:
        return None
    try:
        return get_gpu(GPU.get(gid, gid)).name
    except Exception:
        return None


def from_points(skipped: Counter) -> list[dict]:
    rows = []
    for p in json.loads((SHARED / "speed_calibration.json").read_text()):
        regime, metric = p["regime"], p["metric"]
        if regime not in ("static_batch", "single_stream_batch1", "closed_loop_concurrency"):
            skipped[f"regime {regime}"] += 1
            continue
        if p.get("speculative_decoding"):
            skipped["speculative decoding"] += 1
            continue
        engine = engine_of(p["engine"] or "")
        model = resolve_model(p.get("base_model"), p["model"])
        gpu = gpu_preset(p.get("gpu_id") or p.get("gpu_id_guess"))
        if not (engine and model and gpu):
            skipped["no engine, model or GPU preset"] += 1
            continue
        tp, pp, ep, n = (p.get(k) or 1 for k in ("tensor_parallel", "pipeline_parallel", "expert_parallel", "num_gpus"))
        if ep > 1 or n not in (tp * pp, tp) and not (engine == "llamacpp" and tp == 1):
            skipped["expert / data parallel layout"] += 1
            continue
        if engine == "llamacpp" and n > 1 and tp == 1:
            pp = n  # llama.cpp's default layer split
        value = float(p["value"])
        if metric == "output_tok_s_per_gpu":
            metric, value = "output_tok_s_total", value * n
        if metric == "prefill_tok_s":
            if not p.get("input_len"):
                skipped["prompt speed without a prompt length"] += 1
                continue
            metric, value = "ttft_ms", 1000 * p["input_len"] / value
        if metric == "output_tok_s_per_user":
            metric, value = "tpot_ms", 1000 / value
        if metric == "itl_ms":
            metric = "tpot_ms"
        if metric not in ("tpot_ms", "ttft_ms", "output_tok_s_total", "e2e_latency_s"):
            skipped[f"metric {metric}"] += 1
            continue
        batch = p.get("batch_size") if regime != "closed_loop_concurrency" else None
        conc = p.get("concurrency") if regime == "closed_loop_concurrency" else None
        if regime == "single_stream_batch1":
            batch = 1
        if not (batch or conc) or not p.get("input_len") and metric != "tpot_ms":
            skipped["no batch, concurrency or lengths"] += 1
            continue
        kv = "fp8" if str(p.get("kv_cache_dtype") or "").startswith("fp8") else "bf16"
        if (
            p.get("kv_cache_dtype") is None
            and engine == "trtllm"
            and dtype_of(p.get("weight_dtype")) in ("fp8", "nvfp4")
        ):
            # NOTE: TensorRT-LLM's fp8/fp4 checkpoints (trtllm-bench, the perf-overview tables) quantize
            # the KV cache with the weights; with bf16 KV several of these points would beat the ceiling.
            kv = "fp8"
        source = (
            "/".join(p["source_url"].split("/")[2:5])
            if "github.com" in p["source_url"]
            else p["source_url"].split("/")[2]
        )
        rows.append(
            dict(id=p["id"], source=source, model=model, gpu=gpu, tp=tp, pp=pp, engine=engine,
                 dtype=dtype_of(p.get("weight_dtype")) or "", kv_dtype=kv, regime=regime, batch=batch or "",
                 concurrency=conc or "", prompt=p.get("input_len") or 0, new=p.get("output_len") or 128,
                 metric=metric, value=value, source_url=p["source_url"], quote=p["quote"])
        )  # fmt: skip
    return rows


def from_aic(skipped: Counter) -> list[dict]:
    rows = []
    with open(SHARED / "aic_silicon_sample.csv", newline="") as fh:
        for r in csv.DictReader(fh):
            if r["mode"] != "agg":
                skipped["aiconfigurator: disaggregated"] += 1
                continue
            if r["attention_dp_size"] not in ("", "1") or r["moe_ep_size"] not in ("", "1") or r["pp_size"] != "1":
                skipped["aiconfigurator: expert / attention-DP / pipeline layout"] += 1
                continue
            model = resolve_model(r["model_path"])
            gpu = AIC_GPU.get(r["system"])
            if not (model and gpu):
                skipped["aiconfigurator: no model or GPU preset"] += 1
                continue
            conc = int(re.search(r"silicon_concurrency=(\d+)", r["silicon_data_source"]).group(1))
            prec = r["precision"]
            dtype = {"fp8": "fp8", "int4": "int4", "bf16": "bf16"}.get(prec, "nvfp4" if prec == "fp4" else "")
            if model.startswith("gpt-oss") and prec == "fp4":
                dtype = ""  # its native mxfp4 experts
            base = dict(source="github.com/ai-dynamo/aiconfigurator", model=model, gpu=gpu, tp=int(r["tp_size"]),
                        pp=1, engine=r["backend"], dtype=dtype, kv_dtype="fp8" if prec in ("fp8", "fp4") else "bf16",
                        regime="closed_loop_concurrency", batch="", concurrency=conc, prompt=int(r["isl"]),
                        new=int(r["osl"]), source_url="https://github.com/ai-dynamo/aiconfigurator/blob/095f58a51/aic-core/src/aiconfigurator_core/systems/silicon_sample.csv",
                        quote=f"row {r['id']}")  # fmt: skip
            rows.append(dict(base, id=r["id"] + ":ttft", metric="ttft_ms", value=float(r["silicon_ttft_ms"])))
            rows.append(dict(base, id=r["id"] + ":tpot", metric="tpot_ms", value=float(r["silicon_tpot_ms"])))
    return rows


def main() -> int:
    if not SHARED.exists():
        print(f"needs {SHARED}", file=sys.stderr)
        return 1
    sys.path.insert(0, str(ROOT))
    skipped: Counter = Counter()
    rows = from_points(skipped) + from_aic(skipped)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with open(OUT, "w", newline="") as fh:
        w = csv.DictWriter(fh, FIELDS)
        w.writeheader()
        w.writerows(rows)
    print(f"{len(rows)} points -> {OUT.relative_to(ROOT)}")
    for why, n in skipped.most_common():
        print(f"  skipped {n}: {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
