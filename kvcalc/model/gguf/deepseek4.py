"""GGUF metadata of llama.cpp's deepseek4 architecture -> DeepSeek-V4's compressed-attention fields (src/models/
deepseek4.cpp of 0c1e57098, llama-cpp-python 0.3.36; its keys in src/llama-arch.cpp): every layer slides over
`attention.sliding_window` raw entries of `attention.key_length` (one KV head, K = V, the last
`rope.dimension_count` rotated); `attention.compress_ratios`, one per layer, adds a compressed cache at 4 (CSA, with
the lightning indexer's keys and top-k) or 128 (HCA); the loader reads the ratios with the MTP layers' after the
trunk's and refuses a list shorter than block_count."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvcalc.errors import SpecError
from kvcalc.model.spec import LayerKind, LayerRun

RATIOS = (0, 4, 128)  # deepseek4.cpp: window only, CSA (DSV4_CSA_RATIO), HCA (DSV4_HCA_RATIO)


def fields(get: Callable[..., Any], n: int, name: str) -> dict[str, Any]:
    """The ModelSpec fields of a deepseek4 file's `n` trunk layers; `get(key, default)` reads deepseek4.<key>."""
    ratios, window = get("attention.compress_ratios"), get("attention.sliding_window")
    if not isinstance(ratios, list) or len(ratios) < n:
        raise SpecError(f"{name}: deepseek4.attention.compress_ratios is shorter than block_count ({n})")
    if bad := [r for r in ratios[:n] if r not in RATIOS]:
        raise SpecError(f"{name}: deepseek4.attention.compress_ratios holds {bad[0]}; llama.cpp reads 0, 4 or 128")
    key, rope = get("attention.key_length_swa") or get("attention.key_length"), get("rope.dimension_count", 64)
    index = [get(f"attention.indexer.{k}") for k in ("head_count", "key_length", "top_k")]
    shape = [window, key, *(get(f"attention.{k}") for k in ("q_lora_rank", "output_group_count", "output_lora_rank"))]
    if not all(isinstance(v, int) and v > 0 for v in shape + index) or not 0 < rope < key:
        raise SpecError(
            f"{name}: deepseek4 metadata lacks attention.sliding_window / key_length / q_lora_rank / "
            "output_group_count / output_lora_rank / indexer.head_count / key_length / top_k"
        )
    kv = get("attention.head_count_kv", 1)
    if any(h != 1 for h in (kv if isinstance(kv, list) else [kv])[:n]):
        raise SpecError(f"{name}: deepseek4 has one KV head a layer; attention.head_count_kv says {kv}")
    runs = [
        LayerRun(kind=LayerKind.MLA, window_tokens=window, compress_ratio=r or None, compress_topk=r == 4)
        for r in ratios[:n]
    ]
    return {
        "head_dim": key, "num_kv_heads": None, "kv_lora_rank": key - rope, "qk_rope_head_dim": rope,
        "qk_nope_head_dim": key - rope, "v_head_dim": key, "q_lora_rank": shape[2], "o_groups": shape[3],
        "o_lora_rank": shape[4], "index_heads": index[0], "index_head_dim": index[1], "index_topk": index[2],
        "hc_mult": get("hyper_connection.count", 0) or 0, "hash_layers": get("hash_layer_count", 0) or 0,
        "router_bias": True, "architecture": "DeepseekV4ForCausalLM", "layer_pattern": runs,
    }  # fmt: skip
