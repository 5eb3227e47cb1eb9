"""Layers that attend over an earlier layer's K and V and cache none of their own: Hunyuan's cross-layer attention
(use_cla) and Gemma 3n / 4's KV-sharing tail (num_kv_shared_layers)."""

from __future__ import annotations

from kvcalc.model.hf.fields import Config
from kvcalc.model.spec import LayerKind, LayerRun


def cross_layer_attention(cfg: Config, runs: list[LayerRun], layers: int) -> list[LayerRun]:
    """Hunyuan CLA: layer i computes K and V when i % cla_share_factor == 0; the layers after it attend
    over those (HunYuanCrossAttention has q_proj and o_proj only; vLLM hunyuan_v1.py shares the cache)."""
    factor = cfg.int_field("cla_share_factor", default=1)
    base = runs or [LayerRun()] * layers
    if any(r.kind != LayerKind.FULL for r in base):
        raise cfg.refuse("use_cla with windowed or hybrid layers is not read")
    return [r.model_copy(update={"kv_shared": i % factor != 0}) for i, r in enumerate(base)]


def kv_shared_tail(cfg: Config, model_type: str, runs: list[LayerRun], layers: int, inter: int) -> list[LayerRun]:
    """Gemma 3n / Gemma 4 (their configs' kv_sharing_modes): the last num_kv_shared_layers layers "reuse" the K and
    V of the last earlier layer of their own type, with no k/v projections and no cache of their own (vLLM
    gemma3n.py / gemma4.py: kv_sharing_target_layer_name); under Gemma 4's use_double_wide_mlp their MLPs are
    twice as wide."""
    shared = cfg.int_field("num_kv_shared_layers")
    if shared >= layers:
        raise cfg.refuse(f"num_kv_shared_layers {shared} leaves none of the {layers} layers to hold K and V")
    base = runs or [LayerRun()] * layers
    first = layers - shared
    if {r.kind for r in base[first:]} - {r.kind for r in base[:first]} or any(
        not r.kind.self_head_kv for r in base[first:]
    ):
        raise cfg.refuse("num_kv_shared_layers: a sharing layer has no earlier layer of its own kind to read from")
    wide = {"intermediate_size": 2 * inter} if model_type == "gemma4_text" and cfg.get("use_double_wide_mlp") else {}
    return [r if i < first else r.model_copy(update={"kv_shared": True, **wide}) for i, r in enumerate(base)]
