"""How far llama.cpp's measured decode sits below kvcalc's decode ceiling (fit --engine llamacpp).

Reads the llama-bench `tg 512` points of ../shared/reference/speed_calibration.json (Llama-3-8B and
-70B, Q4_K_M and F16, consumer NVIDIA and Apple; XiongjieDai/GPU-Benchmarks-on-LLM-Inference) and
prints measured / ceiling for each point whose GPU has a preset. The weights are a Llama-3 tensor
table in llama.cpp's Q4_K_M recipe as llama-quant.cpp applies it (q4_K, with attn_v and ffn_down in
q6_K on half the layers, output q6_K) or F16: close to the published files, not read from them.

    python benchmarks/llamacpp_ceiling.py
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from kvcalc.engines.llamacpp.buffers import TensorRow
from kvcalc.engines.llamacpp.eras import era
from kvcalc.model.presets import get_gpu, get_model
from kvcalc.plan.quants import quant_row

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "reference" / "speed_calibration.json"
GPUS = {  # the source's names -> presets
    "NVIDIA GeForce RTX 3080 10GB": "rtx-3080", "NVIDIA GeForce RTX 4080 16GB": "rtx-4080",
    "NVIDIA GeForce RTX 3090 24GB": "rtx-3090", "NVIDIA GeForce RTX 4090 24GB": "rtx-4090",
    "Apple M1 Max 32‑Core GPU 64GB": "m1-max", "Apple M2 Ultra 76-Core GPU 192GB": "m2-ultra",
    "Apple M3 Max 40‑Core GPU 64GB": "m3-max-64gb",
}  # fmt: skip


def table(model: str, recipe: str) -> list[TensorRow]:
    spec = get_model(model)
    h, kv, ff, v = spec.hidden_size, spec.kv_heads * spec.head_dim_effective, spec.intermediate_size, spec.vocab_size

    def t(name: str, ne0: int, rows: int, typ: str) -> TensorRow:
        block, size = {"f16": (1, 2), "q4_K": (256, 144), "q6_K": (256, 210)}[typ]
        return TensorRow(name, ne0, typ, rows * ne0 // block * size)

    q, big = ("f16", "f16") if recipe == "F16" else ("q4_K", "q6_K")
    out = [t("token_embd.weight", h, v, q), t("output.weight", h, v, big)]
    for il in range(spec.num_layers):
        more = big if il % 2 == 0 else q  # use_more_bits: about half the layers
        out += [t(f"blk.{il}.attn_q.weight", h, h, q), t(f"blk.{il}.attn_k.weight", h, kv, q)]
        out += [t(f"blk.{il}.attn_v.weight", h, kv, more), t(f"blk.{il}.attn_output.weight", h, h, q)]
        out += [t(f"blk.{il}.ffn_gate.weight", h, ff, q), t(f"blk.{il}.ffn_up.weight", h, ff, q)]
        out += [t(f"blk.{il}.ffn_down.weight", ff, h, more)]
    return out


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
        row = quant_row(recipe, 0, spec, table(model, recipe), 512, era(None), gpu.capacity_bytes, gpu.bandwidth_bytes_per_s,
                        int(64e9), gpu.unified_memory, weights_exact=True)  # fmt: skip
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
