"""Vectors beside a decoder's matrices, by family: query and key norms, a second norm after each sub-block,
attention sinks, a bias per expert on the router, a gate on the shared expert; for the pre-Llama families
LayerNorm biases, linear and LM-head biases, one norm per parallel block, BLOOM's embedding norm and learned
position tables (`_legacy_fields`).

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
    "lfm2", "lfm2_moe", "lfm3", "hy_v3", "qwen3_omni_moe_text", "laguna", "step3p5",
}  # fmt: skip
HEAD_QK_FLAG = {
    "glm4_moe": ("use_qk_norm", False),
    "bailing_moe": ("use_qk_norm", False),
    "bailing_moe_v2": ("use_qk_norm", False),
    "hunyuan": ("use_qk_norm", False),
    "hunyuan_v1_dense": ("use_qk_norm", True),
    "hunyuan_v1_moe": ("use_qk_norm", True),
    "minimax_m3": ("use_qk_norm", False),  # qk_norm_type per_head (GemmaRMSNorm of head_dim, shared by the heads)
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
ROUTER_BIAS |= {"ernie4_5_moe", "exaone_moe", "nemotron_h", "laguna", "step3p5"}  # Step 3.5: vLLM asserts it
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
    "minimax_m3": ("use_routing_bias", True, False),
    "lfm2_moe": ("use_expert_bias", True, True),
    "bailing_moe": ("moe_router_enable_expert_bias", True, False),
    "bailing_moe_v2": ("moe_router_enable_expert_bias", True, False),
    # Ling 2.5's config class (and SGLang's BailingHybridConfig) default it on; vLLM reads the loaded config
    "bailing_hybrid": ("moe_router_enable_expert_bias", True, True),
}
# shared_expert_gate: Linear(hidden, 1) scaling the shared expert (Qwen2MoeSparseMoeBlock, Qwen3Next's).
SHARED_GATE = {"qwen2_moe", "qwen3_next", "qwen3_5_moe_text"}

# Pre-Llama families. LayerNorm (a bias beside each weight) rather than RMSNorm:
NORM_BIAS = {"bloom", "starcoder2", "gpt_bigcode", "gptj", "phi", "falcon", "gpt2", "gpt_neox", "opt", "gpt_neo"}
NORM_BIAS |= {"codegen", "persimmon", "biogpt", "jais2"}  # Jais2: nn.LayerNorm
# One norm before attention and MLP running side by side (GPTJBlock's ln_1, PhiDecoderLayer's and
# CohereDecoderLayer's input_layernorm; Falcon below).
PARALLEL = {"gptj", "phi", "cohere", "cohere2", "codegen"}
# Linear biases (q/k/v, o_proj, MLP) a family always has ...
BIASES = {
    "bloom": (True, True, True),
    "gpt_bigcode": (True, True, True),
    "gpt2": (True, True, True),
    "phi": (True, True, True),
    "persimmon": (True, True, True),
    "gptj": (False, False, True),
    "codegen": (False, False, True),
    "gpt_neo": (False, True, True),
}
# ... or under its config flag (flag, default): Starcoder2Config.use_bias, FalconConfig.bias, OPTConfig.enable_bias
BIAS_FLAG = {"starcoder2": ("use_bias", True), "falcon": ("bias", False), "opt": ("enable_bias", True)}
LM_HEAD_BIAS = {"gptj", "phi", "codegen"}  # their lm_head is nn.Linear(..., bias=True)
# Learned position tables (rows): GPT-2 and StarCoder's wpe; OPT's and BioGPT's with 2 rows of offset
POSITIONS = {"gpt2": ("n_positions", 0), "gpt_bigcode": ("n_positions", 0), "gpt_neo": ("max_position_embeddings", 0)}
POSITIONS |= {"opt": ("max_position_embeddings", 2), "biogpt": ("max_position_embeddings", 2)}


def _flag(cfg: Config, table: dict[str, tuple[str, Any]], model_type: str) -> bool:
    key, default = table[model_type]
    return bool(cfg.get(key, default=default))


def vector_fields(cfg: Config, model_type: str, moe: bool) -> dict[str, Any]:
    """The ModelSpec fields for this family's vectors (qk_norm, sandwich_norms, attention_sinks, router_bias,
    shared_expert_gate, and _legacy_fields'); only those it has (the router's and shared expert's only with
    experts: `moe`)."""
    fields: dict[str, Any] = {}
    if model_type in HEAD_QK or (model_type in HEAD_QK_FLAG and _flag(cfg, HEAD_QK_FLAG, model_type)):
        fields["qk_norm"] = "head"
    elif model_type in FULL_QK or (model_type in FULL_QK_FLAG and _flag(cfg, FULL_QK_FLAG, model_type)):
        fields["qk_norm"] = "full"
    if model_type == "minimax_m3" and fields.get("qk_norm") and cfg.get("qk_norm_type") == "per_layer":
        fields["qk_norm"] = "full"  # MiniMax-M2's per_layer norms: over all the heads
    if model_type in SANDWICH or (model_type == "lfm3" and cfg.get("use_sandwich_norm", default=True)):
        fields["sandwich_norms"] = True  # Lfm3DecoderLayer's post_operator_norm / post_ffn_norm under use_sandwich_norm
    if model_type in ("gpt_oss", "hy_v4"):
        fields["attention_sinks"] = "all"  # GptOssAttention.sinks, HYV4Attention.sinks: one per query head, every layer
    elif model_type == "mimo_v2_flash" and cfg.get("add_swa_attention_sink_bias", default=False):
        fields["attention_sinks"] = "sliding"  # vLLM MiMoV2Attention: attention_sink_bias on sliding layers only
    flagged = ROUTER_BIAS_FLAG.get(model_type)
    if moe and (model_type in ROUTER_BIAS or (flagged and cfg.get(flagged[0], default=flagged[2]) == flagged[1])):
        fields["router_bias"] = True
    if moe and model_type in SHARED_GATE:
        fields["shared_expert_gate"] = True
    if model_type == "kimi_linear" and cfg.get("attn_res_block_size"):
        fields["attention_residual"] = True  # Kimi-K3 (SGLang 0.5.23 kimi_k3.py): no parameters per block
    return fields | _legacy_fields(cfg, model_type)


def _legacy_fields(cfg: Config, model_type: str) -> dict[str, Any]:
    """LayerNorm biases, parallel blocks, linear and LM-head biases, the embedding norm, position tables."""
    fields: dict[str, Any] = {}
    if model_type in NORM_BIAS:
        fields["norm_bias"] = True
    if model_type in PARALLEL:
        fields["parallel_block"] = True
    elif model_type == "falcon":
        # FalconDecoderLayer: ln_attn and ln_mlp under new_decoder_architecture (num_ln_in_parallel_attn, default 2),
        # else one input_layernorm when parallel_attn (the default), else two norms in sequence
        if cfg.get("new_decoder_architecture", default=False):
            fields["parallel_block"] = cfg.get("num_ln_in_parallel_attn", default=2) == 1
        else:
            fields["parallel_block"] = bool(cfg.get("parallel_attn", default=True))
    biases = BIASES.get(model_type)
    if model_type in BIAS_FLAG:
        on = bool(cfg.get(BIAS_FLAG[model_type][0], default=BIAS_FLAG[model_type][1]))
        biases = (on, on, on)
    elif model_type == "gpt_neox":  # GPTNeoXConfig.attention_bias (query_key_value and dense); MLP biases always
        on = bool(cfg.get("attention_bias", default=True))
        biases = (on, on, True)
    if biases:
        fields.update(attention_bias=biases[0], o_proj_bias=biases[1], mlp_bias=biases[2])
    if model_type in LM_HEAD_BIAS:
        fields["lm_head_bias"] = True
    if model_type == "bloom":
        fields["embedding_norm"] = True  # word_embeddings_layernorm
    if model_type in POSITIONS:
        key, offset = POSITIONS[model_type]
        rows = cfg.get(key)
        if isinstance(rows, int) and rows > 0:
            fields["extra_params"] = (rows + offset) * cfg.int_field("hidden_size", "n_embd", "d_model")
    return fields
