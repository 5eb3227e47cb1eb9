"""DeepSeek-style multi-head latent attention (MLA) fields: the cached latent and the projections."""

from __future__ import annotations

from typing import Any

from kvcalc.model.hf.fields import Config
from kvcalc.model.spec import LayerKind, LayerRun

# The names a layer_types list gives every layer of a uniform MLA model (one name for all of them)
SPARSE_MLA_TYPES = {"full_attention", "attention", "indexed_attention", "deepseek_sparse_attention"}


def is_mla(cfg: Config) -> bool:
    return bool(cfg.get("kv_lora_rank"))


def mla_head_dim(cfg: Config) -> Any:
    # NOTE: an MLA model's "head shape" (for mha/gqa what-ifs) is its per-head value width.
    return cfg.get("v_head_dim", "qk_nope_head_dim")


def mla_fields(cfg: Config) -> dict[str, Any]:
    return {
        "kv_lora_rank": cfg.int_field("kv_lora_rank"),
        "qk_rope_head_dim": cfg.int_field("qk_rope_head_dim"),
        "qk_nope_head_dim": cfg.get("qk_nope_head_dim"),
        "v_head_dim": cfg.get("v_head_dim"),
        "q_lora_rank": cfg.get("q_lora_rank"),
        "num_kv_heads": None,
        # DeepSeek Sparse Attention's lightning indexer (deepseek_v32, glm_moe_dsa): all three or none
        "index_heads": cfg.get("index_n_heads"),
        "index_head_dim": cfg.get("index_head_dim"),
        "index_topk": cfg.get("index_topk"),
    }


def indexer_pattern(cfg: Config, layers: int) -> list[LayerRun]:
    """[] for uniform MLA; with GLM-5.2's `indexer_types` one run per layer, "shared" ones reusing an
    earlier layer's top-k without an indexer of their own (vLLM deepseek_v2.py compute_skip_topk_layers)."""
    kinds = {str(k) for k in cfg.get("layer_types") or []}
    if (kinds - {"full_attention", "attention"} and len(kinds) > 1) or not kinds <= SPARSE_MLA_TYPES:
        # one kind of MLA layer is read (transformers writes DeepSeek-V3.2's and HY4's as indexed_attention, 5.11
        # GLM-5.2's as deepseek_sparse_attention, which indexer_types splits into full and shared); not
        # Bailing's hybrid (linear-attention layers between MLA ones) nor dots3's sliding layers beside indexed ones
        raise cfg.refuse(
            f"layer_types mixing {', '.join(sorted(kinds))} in an MLA model is not read",
            hint="its cache is not estimated, rather than guessed",
        )
    if cfg.get("per_layer_config") is not None:  # dots3: some layers' own heads and latent rank
        raise cfg.refuse(
            "per_layer_config (per-layer MLA shapes) is not read",
            hint="its cache is not estimated, rather than guessed",
        )
    types = cfg.get("indexer_types")
    if types is None:
        return []
    if not isinstance(types, list) or len(types) != layers or not set(types) <= {"full", "shared"}:
        raise cfg.refuse(
            f"indexer_types must list 'full' or 'shared' for each of the {layers} layers",
            hint="its indexer caches are not estimated, rather than guessed",
        )
    return [LayerRun(kind=LayerKind.MLA, index_shared=t == "shared") for t in types]
