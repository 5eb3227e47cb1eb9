"""Vectors beside a decoder's matrices, by family: query and key norms, a second norm after each sub-block,
attention sinks, a bias per expert on the router, a gate on the shared expert.

They hold a few thousand to a million parameters (Gemma 2 9B's second norms: 301,056; DeepSeek-V3's router
biases: 14,848) and no cache, yet without them a count misses the checkpoint's total. Each family as
transformers 5.25's modeling_<type>.py and vLLM 0.19's models/<type>.py build it; where a config flag decides,
the flag as vLLM reads it (its default where the config leaves it out).
"""

from __future__ import annotations

from typing import Any

from kvcalc.model.hf.fields import Config

# q_norm / k_norm of head_dim each (Qwen3Attention: "unlike olmo, only on the head dim"), in every
# self-attention layer; under a flag: (flag, its default).
HEAD_QK = {
    "qwen3", "qwen3_moe", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "qwen3_vl_text", "qwen3_vl_moe_text",
    "gemma3", "gemma3_text", "gemma3n_text", "gemma4_text", "exaone4", "exaone_moe", "apertus", "afmoe", "dots1",
    "lfm2", "lfm2_moe",
}  # fmt: skip
HEAD_QK_FLAG = {
    "glm4_moe": ("use_qk_norm", False),
    "bailing_moe": ("use_qk_norm", False),
    "bailing_moe_v2": ("use_qk_norm", False),
    "hunyuan": ("use_qk_norm", False),
    "hunyuan_v1_dense": ("use_qk_norm", True),
    "hunyuan_v1_moe": ("use_qk_norm", True),
}
# q_norm over num_heads x head_dim and k_norm over num_kv_heads x head_dim (Olmo2Attention; MiniMaxM2Attention's
# "per_layer" qk_norm_type; CohereLayerNorm((heads, head_dim)) under use_qk_norm).
FULL_QK = {"olmo2", "olmo3", "flex_olmo", "olmoe"}
FULL_QK_FLAG = {"minimax_m2": ("use_qk_norm", False), "cohere": ("use_qk_norm", False)}
# post_attention / post_feedforward norms beside the pre-norms (Gemma2DecoderLayer: four per layer; GLM-4-0414's
# post_self_attn_layernorm and post_mlp_layernorm; AfmoeDecoderLayer's pre_mlp / post_mlp_layernorm).
SANDWICH = {"gemma2", "gemma3", "gemma3_text", "gemma3n_text", "gemma4_text", "glm4", "glm4v_text", "glm4v", "afmoe"}
# A bias per expert on every MoE layer's router: gpt-oss's gate bias, or the aux-loss-free correction bias
# (e_score_correction_bias / expert_bias), always built by these ...
ROUTER_BIAS = {"gpt_oss", "glm4_moe", "glm4_moe_lite", "mimo_v2_flash", "longcat_flash", "kimi_linear", "afmoe"}
ROUTER_BIAS |= {"ernie4_5_moe", "exaone_moe", "nemotron_h"}
# ... and under a config flag by these: (flag, the value that builds it, the default).
ROUTER_BIAS_FLAG: dict[str, tuple[str, Any, Any]] = {
    # vLLM deepseek_v2.py: e_score_correction_bias only when topk_method == "noaux_tc" (also Kimi K2, GLM-5)
    "deepseek_v2": ("topk_method", "noaux_tc", None),
    "deepseek_v3": ("topk_method", "noaux_tc", None),
    "deepseek_v32": ("topk_method", "noaux_tc", None),
    "kimi_k2": ("topk_method", "noaux_tc", None),
    "glm_moe_dsa": ("topk_method", "noaux_tc", None),
    "dots1": ("topk_method", "noaux_tc", None),
    "minimax_m2": ("use_routing_bias", True, False),
    "lfm2_moe": ("use_expert_bias", True, True),
    "bailing_moe": ("moe_router_enable_expert_bias", True, False),
    "bailing_moe_v2": ("moe_router_enable_expert_bias", True, False),
}
# shared_expert_gate: Linear(hidden, 1) scaling the shared expert (Qwen2MoeSparseMoeBlock, Qwen3Next's).
SHARED_GATE = {"qwen2_moe", "qwen3_next", "qwen3_5_moe_text"}


def _flag(cfg: Config, table: dict[str, tuple[str, Any]], model_type: str) -> bool:
    key, default = table[model_type]
    return bool(cfg.get(key, default=default))


def vector_fields(cfg: Config, model_type: str) -> dict[str, Any]:
    """The ModelSpec fields for this family's vectors (qk_norm, sandwich_norms, attention_sinks, router_bias,
    shared_expert_gate); only those it has."""
    fields: dict[str, Any] = {}
    if model_type in HEAD_QK or (model_type in HEAD_QK_FLAG and _flag(cfg, HEAD_QK_FLAG, model_type)):
        fields["qk_norm"] = "head"
    elif model_type in FULL_QK or (model_type in FULL_QK_FLAG and _flag(cfg, FULL_QK_FLAG, model_type)):
        fields["qk_norm"] = "full"
    if model_type in SANDWICH:
        fields["sandwich_norms"] = True
    if model_type == "gpt_oss":
        fields["attention_sinks"] = "all"  # GptOssAttention.sinks: one per query head, every layer
    elif model_type == "mimo_v2_flash" and cfg.get("add_swa_attention_sink_bias", default=False):
        fields["attention_sinks"] = "sliding"  # vLLM MiMoV2Attention: attention_sink_bias on sliding layers only
    flagged = ROUTER_BIAS_FLAG.get(model_type)
    if model_type in ROUTER_BIAS or (flagged and cfg.get(flagged[0], default=flagged[2]) == flagged[1]):
        fields["router_bias"] = True
    if model_type in SHARED_GATE:
        fields["shared_expert_gate"] = True
    return fields
