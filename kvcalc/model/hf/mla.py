"""DeepSeek-style multi-head latent attention (MLA) fields: the cached latent and the projections."""

from __future__ import annotations

from typing import Any

from kvcalc.model.hf.fields import Config


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
