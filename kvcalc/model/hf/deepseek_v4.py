"""DeepSeek-V4's compressed attention (model_type deepseek_v4): every layer keeps a window of raw entries, and its
compressed-sparse (CSA) and heavily-compressed (HCA) layers one compressed entry per 4 or 128 tokens besides.

Read from transformers 5.25's DeepseekV4Config and modeling_deepseek_v4.py (docs/deepseek_v4.md has the rest): a
config names its layers by `compress_ratios` (one per layer, 0: window only; the multi-token-prediction layers'
entries follow and are not read) or, in transformers' own form, by `layer_types` and `compress_rates`. One KV head
of head_dim elements a token (K = V), its last qk_rope_head_dim rotated: cached as an MLA-kind entry of
(head_dim - qk_rope_head_dim) + qk_rope_head_dim elements, whole on every tensor-parallel rank.
"""

from __future__ import annotations

from typing import Any

from kvcalc.model.hf.fields import Config, window
from kvcalc.model.spec import LayerKind, LayerRun

MODEL_TYPE = "deepseek_v4"
# transformers 5.25 _COMPRESS_RATIO_TO_LAYER_TYPE and DeepseekV4Config.default_compress_rates
WINDOW_ONLY, CSA, HCA = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"
DEFAULT_RATES = {CSA: 4, HCA: 128}
# DeepseekV4Config.default_num_hash_layers: the first MoE layers route by token id
DEFAULT_HASH_LAYERS = 3


def _layer_types(cfg: Config, layers: int) -> tuple[list[str], dict[str, int]]:
    rates = cfg.get("compress_rates")
    rates = {**DEFAULT_RATES, **(rates if isinstance(rates, dict) else {})}
    types = cfg.get("layer_types")
    if types is None:
        ratios = cfg.get("compress_ratios")
        if not isinstance(ratios, list) or len(ratios) < layers:
            raise cfg.refuse(f"compress_ratios must give one ratio for each of the {layers} layers")
        by_ratio = {0: WINDOW_ONLY, rates[CSA]: CSA, rates[HCA]: HCA}
        if bad := [r for r in ratios[:layers] if r not in by_ratio]:
            raise cfg.refuse(
                f"compress_ratios holds {bad[0]!r}: DeepSeek-V4 layers compress by 0 (window only), "
                f"{rates[CSA]} (CSA) or {rates[HCA]} (HCA)"
            )
        types = [by_ratio[r] for r in ratios[:layers]]
    if not isinstance(types, list) or len(types) != layers or not set(types) <= {WINDOW_ONLY, CSA, HCA}:
        raise cfg.refuse(f"layer_types must name {WINDOW_ONLY}, {CSA} or {HCA} for each of the {layers} layers")
    return types, rates


def layers(cfg: Config, count: int) -> list[LayerRun]:
    """One MLA-kind run a layer: its window, and a CSA or HCA layer's compression."""
    types, rates = _layer_types(cfg, count)
    win = window(cfg, cfg.overrides.get("window") or cfg.get("sliding_window"))
    runs = []
    for t in types:
        ratio = rates[t] if t != WINDOW_ONLY else None
        runs.append(LayerRun(kind=LayerKind.MLA, window_tokens=win, compress_ratio=ratio, compress_topk=t == CSA))
    return runs


def fields(cfg: Config) -> dict[str, Any]:
    """The attention's shape, its output groups, the hyper-connections and the hash-routed layers."""
    head_dim, rope = cfg.int_field("head_dim"), cfg.int_field("qk_rope_head_dim")
    if rope >= head_dim:
        raise cfg.refuse(f"qk_rope_head_dim ({rope}) must be below head_dim ({head_dim})")
    mlp = cfg.get("mlp_layer_types")
    hashed = mlp.count("hash_moe") if isinstance(mlp, list) else cfg.get("num_hash_layers")
    return {
        "head_dim": head_dim,
        "num_kv_heads": None,
        "kv_lora_rank": head_dim - rope,
        "qk_rope_head_dim": rope,
        "qk_nope_head_dim": head_dim - rope,
        "v_head_dim": head_dim,
        "q_lora_rank": cfg.int_field("q_lora_rank"),
        "o_groups": cfg.int_field("o_groups"),
        "o_lora_rank": cfg.int_field("o_lora_rank"),
        "index_heads": cfg.int_field("index_n_heads"),
        "index_head_dim": cfg.int_field("index_head_dim"),
        "index_topk": cfg.int_field("index_topk"),
        "hc_mult": cfg.get("hc_mult", default=0),
        "hash_layers": DEFAULT_HASH_LAYERS if hashed is None else hashed,
        # DeepseekV4TopKRouter's e_score_correction_bias (a persistent buffer, in the checkpoint); hash layers lack it
        "router_bias": True,
    }
