"""Mixture-of-experts fields: expert counts, widths, shared experts and leading dense layers."""

from __future__ import annotations

from typing import Any

from kvcalc.hf_fields import Config


def moe_fields(cfg: Config, model_type: str) -> dict[str, Any]:
    experts = cfg.get("num_local_experts", "n_routed_experts", "num_experts", default=0) or 0
    if experts <= 1:
        return {}
    k = cfg.get("num_experts_per_tok", "experts_per_token", "moe_top_k", "num_selected_experts")
    if not k:
        raise cfg.refuse(f"{experts} experts but no num_experts_per_tok")
    moe_inter = cfg.get("moe_intermediate_size")
    if model_type == "llama4_text":
        moe_inter = cfg.get("intermediate_size")
    shared = 0
    if cfg.get("n_shared_experts"):
        shared = cfg.get("n_shared_experts") * (moe_inter or 0)
    elif cfg.get("shared_expert_intermediate_size"):
        shared = cfg.get("shared_expert_intermediate_size")
    elif model_type == "llama4_text":
        shared = moe_inter
    out = {"experts": experts, "experts_per_token": k, "shared_expert_intermediate_size": shared}
    if moe_inter:
        out["expert_intermediate_size"] = moe_inter
    dense = cfg.get("first_k_dense_replace", default=0)
    if dense:
        out["dense_layers"] = dense
    return out
