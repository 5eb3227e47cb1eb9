"""How far llama.cpp's measured decode sits below kvcalc's decode ceiling (fit --engine llamacpp).

Reads the llama-bench `tg 512` points of ../shared/reference/speed_calibration.json (Llama-3-8B and
-70B, Q4_K_M and F16, consumer NVIDIA and Apple; XiongjieDai/GPU-Benchmarks-on-LLM-Inference) and
prints measured / ceiling for each point whose GPU has a preset. The weights are a Llama-3 tensor
table in llama.cpp's Q4_K_M recipe as llama-quant.cpp applies it (kvcalc/model/gguf/mix.py: q4_K, with
attn_v and ffn_down in q6_K on the use_more_bits layers, output q6_K) or F16.

    python benchmarks/llamacpp_ceiling.py
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from kvcalc.engines.llamacpp.buffers import TensorRow
from kvcalc.engines.llamacpp.eras import era
from kvcalc.model.gguf.mix import tensor_table
from kvcalc.model.presets import get_gpu, get_model
from kvcalc.plan.calibration import constants_for
from kvcalc.plan.quants import quant_row

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "reference" / "speed_calibration.json"
GPUS = {  # the source's names -> presets
    "NVIDIA GeForce RTX 3080 10GB": "rtx-3080", "NVIDIA GeForce RTX 4080 16GB": "rtx-4080",
    "NVIDIA GeForce RTX 3090 24GB": "rtx-3090", "NVIDIA GeForce RTX 4090 24GB": "rtx-4090",
    "Apple M1 Max 32‑Core GPU 64GB": "m1-max", "Apple M2 Ultra 76-Core GPU 192GB": "m2-ultra",
    "Apple M3 Max 40‑Core GPU 64GB": "m3-max-64gb",
}  # fmt: skip


def table(model: str, recipe: str) -> list[TensorRow]:
    """The tensor table llama-quantize writes for the recipe (model/gguf/mix.py's per-tensor rules)."""
    return [TensorRow(*t) for t in tensor_table(get_model(model), "f16" if recipe == "F16" else "q4_k_m")]


def main() -> None:
    if not SHARED.exists():
        raise SystemExit(f"{SHARED} is not here")
    points = [
        p for p in json.loads(SHARED.read_text())
        if p["metric"] == "output_tok_s_per_user" and p["id"].endswith("tg512") and p["gpu"] in GPUS
    ]  # fmt: skip
    ratios = []
    for p in points:
        model = "llama-3-8b" if p["model"].endswith("8B") else "llama-3-70b"
        recipe = "F16" if p["weight_dtype"].startswith("f16") else "Q4_K_M"
        gpu = get_gpu(GPUS[p["gpu"]])
        spec = get_model(model)
        row = quant_row(recipe, 0, spec, table(model, recipe), 512, era(None), gpu.capacity_bytes, int(64e9),
                        gpu.unified_memory, gpu, constants_for(gpu, "llamacpp"), weights_exact=True)  # fmt: skip
        if not row.fits_fully:
            continue
        ratio = p["value"] / row.decode_tokens_per_s_ceiling
        ratios.append(ratio)
        print(f"{model:12} {recipe:7} {GPUS[p['gpu']]:12} measured {p['value']:7.2f} tok/s  ceiling "
              f"{row.decode_tokens_per_s_ceiling:7.1f}  measured/ceiling {ratio:.2f}")  # fmt: skip
    print(f"{len(ratios)} points: measured/ceiling median {statistics.median(ratios):.2f}, "
          f"range {min(ratios):.2f}-{max(ratios):.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
