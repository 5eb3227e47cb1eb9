"""ERNIE 4.5 MoE and Ling (Bailing MoE): expert fields under names of their own.

ERNIE 4.5 names its experts moe_num_experts / moe_k / moe_num_shared_experts and places them from
moe_layer_start_index to moe_layer_end_index, every moe_layer_interval-th layer (vLLM 0.19 ernie45_moe.py,
transformers' Ernie4_5_MoeConfig: start 1, end -1 for the last layer, interval 1, two shared experts by default).
Its shared experts are ONE MLP of moe_intermediate_size x moe_num_shared_experts. Ling's (bailing_moe, vLLM
bailing_moe.py) likewise: num_shared_experts x (moe_shared_expert_intermediate_size, else moe_intermediate_size).

Configs: baidu/ERNIE-4.5-21B-A3B-PT's config.json (its architecture keys, as public engine tests quote them);
inclusionAI/Ling-lite-1.5's config.json (verbatim in a public loader test); inclusionAI/Ling-mini-2.0's
architecture keys (a public loader's fixture, "the published config, trimmed to the architecture keys").
Figures by hand from those modules.
"""

import pytest

from kvcalc.cost.kvcache import bytes_per_token
from kvcalc.cost.params import param_counts
from kvcalc.model.hf.reader import spec_from_config

ERNIE_21B = {
    "architectures": ["Ernie4_5_MoeForCausalLM"], "model_type": "ernie4_5_moe", "hidden_act": "silu",
    "hidden_size": 2560, "intermediate_size": 12288, "max_position_embeddings": 131072,
    "num_attention_heads": 20, "num_key_value_heads": 4, "num_hidden_layers": 28, "rms_norm_eps": 1e-05,
    "vocab_size": 103424, "rope_theta": 500000, "use_bias": False, "tie_word_embeddings": True,
    "moe_num_experts": 64, "moe_num_shared_experts": 2, "moe_layer_start_index": 1, "moe_layer_end_index": 27,
    "moe_intermediate_size": 1536, "moe_capacity": [64, 64, 64], "moe_gate": "topk", "moe_k": 6,
    "moe_layer_interval": 1, "moe_use_aux_free": True, "torch_dtype": "bfloat16",
}  # fmt: skip

LING_LITE = {
    "architectures": ["BailingMoeForCausalLM"], "attention_dropout": 0.0, "eos_token_id": 126081,
    "pad_token_id": 126081, "first_k_dense_replace": 0, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.006, "intermediate_size": 1408, "max_position_embeddings": 32768,
    "model_type": "bailing_moe", "moe_intermediate_size": 1408, "num_experts": 64, "num_shared_experts": 2,
    "norm_topk_prob": True, "num_attention_heads": 16, "num_experts_per_tok": 6, "num_hidden_layers": 28,
    "num_key_value_heads": 4, "pretraining_tp": 1, "rms_norm_eps": 1e-06, "rope_scaling": None,
    "rope_theta": 600000, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
    "use_bias": False, "use_qkv_bias": False, "vocab_size": 126464, "output_router_logits": False,
    "embedding_dropout": 0.0, "norm_head": False, "norm_softmax": False, "output_dropout": 0.0,
}  # fmt: skip

LING_MINI_2 = {
    "model_type": "bailing_moe", "architectures": ["BailingMoeV2ForCausalLM"], "num_hidden_layers": 20,
    "hidden_size": 2048, "intermediate_size": 5120, "first_k_dense_replace": 1, "moe_intermediate_size": 512,
    "moe_shared_expert_intermediate_size": 512, "num_shared_experts": 1, "num_experts": 256,
    "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4, "norm_topk_prob": True, "routed_scaling_factor": 2.5,
    "score_function": "sigmoid", "moe_router_enable_expert_bias": True, "num_attention_heads": 16,
    "num_key_value_heads": 4, "head_dim": 128, "partial_rotary_factor": 0.5, "use_qk_norm": True,
    "use_qkv_bias": False, "use_bias": False, "vocab_size": 157184, "tie_word_embeddings": False,
    "num_nextn_predict_layers": 1, "max_position_embeddings": 32768, "rms_norm_eps": 1e-06,
}  # fmt: skip


def _attention(hidden: int, heads: int, kv_heads: int, head_dim: int) -> int:
    return hidden * (heads + 2 * kv_heads) * head_dim + heads * head_dim * hidden


def test_ernie_45_21b_by_hand():
    spec = spec_from_config(ERNIE_21B, "ernie-4.5-21b-a3b", "ERNIE-4.5-21B-A3B-PT/config.json")
    assert (spec.experts, spec.experts_per_token, spec.dense_layers) == (64, 6, 1)
    assert spec.shared_expert_intermediate_size == 2 * 1536  # one MLP, two experts wide
    expert = 3 * 2560 * 1536
    body = (
        28 * _attention(2560, 20, 4, 128)
        + 3 * 2560 * 12288  # layer 0's dense MLP (moe_layer_start_index 1)
        + 27 * (64 * expert + 3 * 2560 * 3072 + 2561 * 64)  # experts, shared MLP, router and its correction bias
        + (2 * 28 + 1) * 2560  # norms
    )  # fmt: skip
    counts = param_counts(spec)
    assert counts.total == body + 103424 * 2560 == 21_825_437_888  # "21B total" (tied embedding)
    assert counts.active == counts.total - 27 * 58 * expert  # 6 of 64 experts: "3B activated"
    assert bytes_per_token(spec, "bf16") == 2 * 28 * 4 * 128 * 2 == 57_344


def test_ernie_defaults_follow_its_config_class():
    # Ernie4_5_MoeConfig: start 1, end -1 (the last layer), interval 1, two shared experts
    bare = {k: v for k, v in ERNIE_21B.items() if not k.startswith("moe_layer") and k != "moe_num_shared_experts"}
    spec = spec_from_config(bare, "ernie", "ernie/config.json")
    assert (spec.dense_layers, spec.shared_expert_intermediate_size) == (1, 3072)
    assert param_counts(spec).total == 21_825_437_888


@pytest.mark.parametrize(
    "change, doubt",
    [
        ({"moe_layer_interval": 2}, "moe_layer_start_index / moe_layer_end_index / moe_layer_interval"),
        ({"moe_layer_end_index": 20}, "moe_layer_start_index / moe_layer_end_index / moe_layer_interval"),
        ({"moe_num_experts": [64, 64], "moe_intermediate_size": [1536, 512]}, "moe_num_experts as a list"),
    ],
)
def test_ernie_layouts_not_read_leave_parameters_unknown(change, doubt):
    # dense layers after or between MoE layers, or ERNIE-VL's two expert sets: the cache is answered,
    # the parameters are unknown rather than another number
    spec = spec_from_config({**ERNIE_21B, **change}, "ernie", "ernie/config.json")
    assert spec.params_unknown and doubt in spec.params_unknown
    assert bytes_per_token(spec, "bf16") == 57_344


def test_ling_lite_15_by_hand():
    spec = spec_from_config(LING_LITE, "ling-lite-1.5", "Ling-lite-1.5/config.json")
    assert spec.shared_expert_intermediate_size == 2 * 1408 == 2816  # the checkpoint's shared_experts [2816, 2048]
    expert = 3 * 2048 * 1408
    body = 28 * (_attention(2048, 16, 4, 128) + 64 * expert + 3 * 2048 * 2816 + 2048 * 64) + (2 * 28 + 1) * 2048
    counts = param_counts(spec)
    assert counts.total == body + 2 * 126464 * 2048 == 16_801_974_272  # "16.8B total parameters"
    assert counts.active == counts.total - 28 * 58 * expert  # 6 of 64 experts: "2.75B activated"
    assert bytes_per_token(spec, "bf16") == 2 * 28 * 4 * 128 * 2


def test_ling_mini_20_by_hand():
    spec = spec_from_config(LING_MINI_2, "ling-mini-2.0", "Ling-mini-2.0/config.json")
    expert = 3 * 2048 * 512
    # use_qk_norm: a query and a key norm of head_dim 128 in each layer; moe_router_enable_expert_bias: a bias
    # per expert on each router (vLLM bailing_moe.py gate.expert_bias)
    layer = _attention(2048, 16, 4, 128) + 2 * 128
    routed = 19 * (256 * expert + 3 * 2048 * 512 + 2049 * 256)  # 19 MoE layers after one dense layer
    body = 20 * layer + 3 * 2048 * 5120 + routed + (2 * 20 + 1) * 2048
    counts = param_counts(spec)
    embeddings = 2 * 157184 * 2048
    assert counts.total == body + embeddings
    assert counts.total == pytest.approx(16.26e9, rel=1e-3)  # "16B total"
    # "1.4B activated (789M non-embedding)": 8 of 256 experts; the MTP layer is not counted
    assert counts.active - embeddings == body - 19 * 248 * expert
    assert (counts.active - embeddings) // 1_000_000 == 789


def test_ling_under_its_v2_model_type_reads_alike():
    # a re-saved config may name the type bailing_moe_v2 (BailingMoeV2ForCausalLM; vLLM's bailing_moe.py serves it)
    spec = spec_from_config({**LING_MINI_2, "model_type": "bailing_moe_v2"}, "ling", "ling/config.json")
    same = spec_from_config(LING_MINI_2, "ling", "ling/config.json")
    assert not spec.params_unknown and param_counts(spec) == param_counts(same)
