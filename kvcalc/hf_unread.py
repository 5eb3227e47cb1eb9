"""What the config reader refuses, and why: fields whose effect on the cache kvcalc does not model."""

from __future__ import annotations

from kvcalc.hf_fields import Config


def refuse_unread(cfg: Config, model_type: str) -> None:
    """Fields whose effect on the cache kvcalc does not model: refuse rather than guess."""
    if cfg.get("use_cla") and model_type not in ("hunyuan", "hunyuan_v1_dense", "hunyuan_v1_moe"):
        raise cfg.refuse(
            "use_cla (cross-layer KV sharing) is not read", hint="its cache is not estimated, rather than guessed"
        )
    if cfg.get("moe_layer_num_skipped"):
        raise cfg.refuse("moe_layer_num_skipped (dense leading layers, Hunyuan) is not read")
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and "E" in pattern and not cfg.get("n_routed_experts", "num_experts"):
        raise cfg.refuse("hybrid_override_pattern has MoE layers (E) but no n_routed_experts")
    if model_type == "falcon_h1" or cfg.get("mamba_d_ssm"):
        raise cfg.refuse(
            "Falcon-H1 runs attention and Mamba-2 side by side in every layer; that layout is not read",
            hint="its cache and state are not estimated, rather than guessed",
        )
    if cfg.get("index_topk") or model_type == "deepseek_v32":
        raise cfg.refuse(
            "DeepSeek-V3.2's lightning indexer keeps a second per-token cache (index_head_dim keys in fp8) "
            "that kvcalc does not model",
            hint="its cache is not estimated, rather than guessed",
        )
    if cfg.get("global_head_dim") or cfg.get("num_global_key_value_heads") or cfg.get("attention_k_eq_v"):
        raise cfg.refuse(
            "global_head_dim / num_global_key_value_heads / attention_k_eq_v (Gemma 4's full-attention layers "
            "have their own KV shape) are not read",
            hint="its cache is not estimated, rather than guessed",
        )
    if cfg.get("num_kv_shared_layers"):
        raise cfg.refuse("num_kv_shared_layers (Gemma 3n's KV sharing across layers) is not read")
    if cfg.get("linear_attn_config") or model_type == "kimi_linear":
        raise cfg.refuse("Kimi Linear's KDA linear attention is not read")
    attn_types = cfg.get("attn_type_list")
    if isinstance(attn_types, list) and any(t != 1 for t in attn_types):
        raise cfg.refuse("attn_type_list has lightning (linear) attention layers (MiniMax-01); they are not read")
    if model_type in ("mamba", "mamba2", "falcon_mamba"):
        raise cfg.refuse(
            f"'{model_type}' is a pure state-space model: it has no KV cache, and its state is not modelled"
        )
    if cfg.get("kv_reuse_group") or cfg.get("global_attn_idx") is not None:
        raise cfg.refuse("kv_reuse_group / global_attn_idx (Hymba's shared and windowed KV) are not read")
    if model_type in ("lfm2_moe", "lfm2_vl_moe"):
        raise cfg.refuse(
            f"'{model_type}' (LFM2 with experts) is not read yet",
            hint="its cache is not estimated, rather than guessed",
        )


# Mixture-of-experts keys the reader reads, or that do not change the parameter count.
MOE_KEYS_READ = {
    "num_local_experts", "n_routed_experts", "num_experts", "num_experts_per_tok", "experts_per_token",
    "moe_top_k", "num_selected_experts", "moe_topk", "moe_intermediate_size", "moe_shared_expert_intermediate_size",
    "shared_expert_intermediate_size", "n_shared_experts", "first_k_dense_replace", "num_shared_expert",
    "use_mixed_mlp_moe", "shared_intermediate_size", "expert_layer_period", "expert_layer_offset",
    "moe_drop_tokens", "moe_random_routing_dropped_token", "moe_router_topk_scaling_factor",
}  # fmt: skip


def parameter_doubts(cfg: Config) -> list[str]:
    """Config fields that would change the parameter count in ways the reader does not model. The cache
    is still answered; parameters are then reported as unknown rather than a different number."""
    doubts = []
    step = cfg.get("decoder_sparse_step")
    if step not in (None, 0, 1) or cfg.get("mlp_only_layers"):
        doubts.append("decoder_sparse_step / mlp_only_layers (dense layers between MoE layers) are not read")
    if cfg.get("hidden_size_per_layer_input") or cfg.get("vocab_size_per_layer_input"):
        doubts.append("per-layer input embeddings (Gemma 3n / 4) are not counted")
    if cfg.get("moe_layer_freq") not in (None, 1):
        doubts.append("moe_layer_freq other than 1 is not read")
    for key, value in cfg.data.items():
        if key in MOE_KEYS_READ or not ("expert" in key or key.startswith("moe_")):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, list)):
            continue
        if (isinstance(value, int) and value > 1) or (isinstance(value, list) and value):
            doubts.append(f"{key} is not read")
    return doubts
