"""What a family's modeling code builds that its config does not state: biases, output gates, whose layers
a text model reuses. Read by reader.py; checked against transformers 5.25's modules on the meta device (a sweep of
its causal-LM classes, tests/test_transformers_families.py)."""

# Families whose q, k and v carry biases when the config does not say (Qwen2Attention and its VL text models').
QKV_BIAS = (
    "qwen2",
    "qwen2_moe",
    "qwen",
    "qwen2_vl",
    "qwen2_5_vl",
    "qwen2_vl_text",
    "qwen2_5_vl_text",
    "qwen2_5_omni_text",
)
# Text models whose layers are another family's (transformers subclasses them unchanged), read as that family
# after their own defaults (defaults.TYPE_DEFAULTS) are taken.
# (nvidia/MiniMax-M3-NVFP4 wraps MiniMax-M3's text model in minimax_m3_vl without naming the text model's type)
SAME_TEXT_MODEL = {"gemma4_unified_text": "gemma4_text", "minimax_m3_vl_text": "minimax_m3"}
# Attention whose output is gated a channel (heads x head_dim more rows: a second half of q_proj, MiniCPM5-MoE's
# q_gate_proj, HY4's gate_proj) where the config does not say (attn_output_gate).
OUTPUT_GATED = (
    "qwen3_next",
    "afmoe",
    "qwen3_5",
    "qwen3_5_text",
    "qwen3_5_moe",
    "qwen3_5_moe_text",
    "minicpm5_moe",
    "hy_v4",
)
# Families whose attention_bias also puts a bias on o_proj.
O_PROJ_BIAS = {
    "jais2",  # Jais2Attention: attention_bias (default True) on q, k, v and o_proj
    "llama",
    "gpt_oss",
    "qwen3",
    "qwen3_moe",
    "granite",
    "granitemoe",
    "granitemoehybrid",
    "cohere",
    "cohere2",
}
