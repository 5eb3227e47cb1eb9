"""LFM2-MoE (LFM2-8B-A1B): LFM2's short-conv and attention layers with experts after two dense layers.

The config is LFM2-8B-A1B's as a public loader test quotes it ("a trimmed LFM2-8B-A1B (MoE) config"; its MLX
quantization block left out); figures by hand from transformers 5's Lfm2Moe modules and vLLM 0.19's lfm2_moe.py
(the dense layers' MLP is intermediate_size wide, with no LFM2 width rule; the conv state is hidden_size wide).
"""

from kvcalc.cost.kvcache import bytes_per_token, state_bytes
from kvcalc.cost.params import param_counts
from kvcalc.model.hf.reader import spec_from_config

ATTENTION_AT = (2, 6, 10, 14, 18, 21)
RAW = {
    "model_type": "lfm2_moe", "vocab_size": 65536, "hidden_size": 2048, "intermediate_size": 7168,
    "moe_intermediate_size": 1792, "num_hidden_layers": 24, "num_attention_heads": 32, "num_key_value_heads": 8,
    "max_position_embeddings": 128000, "norm_eps": 1e-05, "conv_bias": False, "conv_L_cache": 3,
    "num_dense_layers": 2, "num_experts": 32, "num_experts_per_tok": 4, "norm_topk_prob": True,
    "use_expert_bias": True, "routed_scaling_factor": 1.0,
    "layer_types": ["full_attention" if i in ATTENTION_AT else "conv" for i in range(24)],
}  # fmt: skip


def test_parameters_cache_and_state_by_hand():
    spec = spec_from_config(RAW, "lfm2-8b-a1b", "LFM2-8B-A1B/config.json")
    conv = 2048 * 3 * 2048 + 2048 * 3 + 2048 * 2048  # in_proj to B, C, x; 3 taps; out_proj
    attention = 2 * 2048 * 2048 + 2 * 2048 * 8 * 64
    expert = 3 * 2048 * 1792
    total = (
        18 * conv + 6 * (attention + 2 * 64)  # q_layernorm and k_layernorm of head_dim 64
        + 2 * 3 * 2048 * 7168  # the two dense layers
        + 22 * (32 * expert + 2049 * 32)  # experts, router and its expert_bias (use_expert_bias)
        + 65536 * 2048  # tied embedding
        + (2 * 24 + 1) * 2048  # norms
    )  # fmt: skip
    counts = param_counts(spec)
    assert counts.total == total == 8_339_930_560  # "8.3B"
    assert counts.active == total - 22 * 28 * expert  # "1.5B active": 4 of 32 experts
    assert bytes_per_token(spec, "bf16") == 6 * 2 * 8 * 64 * 2 == 12_288  # the 6 attention layers
    assert state_bytes(spec, 1) == 18 * 2 * 2048 * 2  # 2 conv steps x 2048 channels a conv layer, bf16
