"""Laguna (poolside, LagunaForCausalLM): full and sliding layers with query heads of their own.

The config is Laguna-XS.2's as NVIDIA's aiconfigurator vendors it (ai-dynamo/aiconfigurator @ d063594,
aic-core/src/aiconfigurator_core/model_configs/poolside--Laguna-XS.2-FP8_config.json), without its quantization
and transform blocks. Torch counts 33,442,617,088 parameters of transformers 5.25's LagunaForCausalLM built from it
on the meta device; figures by hand from that model's modules and SGLang 0.5.23's models/laguna.py.
"""

import json

import pytest
from conftest import run

from kvcalc.cost.flops import decode_attention_flops
from kvcalc.cost.kvcache import bytes_per_token, valid_tp
from kvcalc.cost.params import param_counts
from kvcalc.errors import SpecError
from kvcalc.model.hf.reader import spec_from_config

LAYERS = 40
TYPES = ["full_attention" if i % 4 == 0 else "sliding_attention" for i in range(LAYERS)]
RAW = {
    "architectures": ["LagunaForCausalLM"], "model_type": "laguna", "vocab_size": 100352, "hidden_size": 2048,
    "intermediate_size": 8192, "num_hidden_layers": LAYERS, "num_attention_heads": 48, "num_key_value_heads": 8,
    "head_dim": 128, "max_position_embeddings": 262144, "attention_bias": False, "rms_norm_eps": 1e-06,
    "num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "gating": True, "sliding_window": 512,
    "layer_types": TYPES, "partial_rotary_factor": 0.5, "mlp_layer_types": ["dense"] + ["sparse"] * (LAYERS - 1),
    "moe_routed_scaling_factor": 2.5, "moe_apply_router_weight_on_input": False,
    "num_attention_heads_per_layer": [48 if t == "full_attention" else 64 for t in TYPES],
}  # fmt: skip


def _spec(**extra):
    return spec_from_config({**RAW, **extra}, "laguna-xs.2", "Laguna-XS.2/config.json")


def test_parameters_cache_and_attention_by_hand():
    spec = _spec()

    def attention(heads):  # q, k, v, o; q and k norms of head_dim; g_proj: one gate a head
        return 2048 * heads * 128 * 2 + 2 * 2048 * 8 * 128 + 2 * 128 + 2048 * heads

    expert = 3 * 2048 * 512
    total = (
        10 * attention(48) + 30 * attention(64)
        + 3 * 2048 * 8192  # layer 0's dense MLP
        + 39 * (256 * expert + expert + 256 * 2048 + 256)  # routed experts, the shared one, the router, its bias
        + 2 * 100352 * 2048 + (2 * LAYERS + 1) * 2048
    )  # fmt: skip
    assert param_counts(spec).total == total == 33_442_617_088  # torch's count of transformers' model
    assert bytes_per_token(spec, "bf16") == LAYERS * 8 * 128 * 2 * 2  # every layer's K and V while windows grow
    # one new token over 4,096 cached ones: the full layers' 48 heads see them all, the sliding layers' 64 the last 512
    assert decode_attention_flops(spec, 4096) == 10 * 2 * 48 * 256 * 4096 + 30 * 2 * 64 * 256 * 512


def test_tensor_parallelism_splits_every_layers_heads():
    assert valid_tp(_spec()) == [1, 2, 4, 8, 16]  # divides 48 and 64; the 8 KV heads replicated past 8
    with pytest.raises(SpecError, match="query heads must split over its KV heads evenly"):
        _spec(num_attention_heads_per_layer=[48 if t == "full_attention" else 60 for t in TYPES])


def test_gates_as_sglang_reads_them():
    per_element = param_counts(_spec(gating="per-element")).total - param_counts(_spec()).total
    assert per_element == 10 * 2048 * 48 * 127 + 30 * 2048 * 64 * 127  # a gate a channel, not a head
    assert param_counts(_spec(gating=False)).total == param_counts(_spec()).total - 2048 * (10 * 48 + 30 * 64)
    with pytest.raises(SpecError, match="gating_types"):
        _spec(gating_types=["per_head"] * 39 + ["per_element"])


def test_sglang_serves_it_from_0_5_12_and_vllm_019_has_no_class(tmp_path):
    path = tmp_path / "laguna" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(RAW))
    old = run("fit", path, "--gpu", "h100", "--engine", "sglang", "--engine-version", "0.5.11")
    assert "SGLang 0.5.11 has no model class for LagunaForCausalLM (first in 0.5.12)" in old.stderr
    vllm = run("fit", path, "--gpu", "h100", "--engine", "vllm")
    assert vllm.exit_code != 0 and vllm.stderr.count("\n") == 1
    assert "Model architectures ['LagunaForCausalLM'] are not supported for now." in vllm.stderr
    sglang = run("fit", path, "--gpu", "h100", "--engine", "sglang")
    assert sglang.exit_code == 0 and "Use Sliding window memory pool." in sglang.stdout
    refused = run("fit", path, "--gpu", "h100", "--tp", "3")
    assert "tensor parallelism 3 does not divide laguna's 64 query heads (a layer's own)" in refused.stderr


def test_laguna_s_as_aiconfigurator_vendors_it():
    # Laguna-S-2.1 (aic-core/.../poolside--Laguna-S-2.1-FP8_config.json @ 1cab08c): 48 and 72 query heads, the dense
    # first layer named by mlp_only_layers [0] (vLLM's qwen2_moe rule) as well as mlp_layer_types, a per_head gate
    # in gating_types for every layer; torch counts 117,561,977,600 parameters of transformers 5.25's model
    types = ["full_attention" if i % 4 == 0 else "sliding_attention" for i in range(48)]
    spec = _spec(
        hidden_size=3072, intermediate_size=12288, num_hidden_layers=48, num_experts_per_tok=10,
        moe_intermediate_size=1024, shared_expert_intermediate_size=1024, decoder_sparse_step=1, mlp_only_layers=[0],
        gating="per-head", gating_types=["per_head"] * 48, layer_types=types,
        mlp_layer_types=["dense"] + ["sparse"] * 47,
        num_attention_heads_per_layer=[48 if t == "full_attention" else 72 for t in types],
    )  # fmt: skip
    assert param_counts(spec).total == 117_561_977_600
    # tp must divide 48 and 72 and split or replicate the 8 KV heads evenly: not 16 (72 heads), 24 (3 copies of each)
    assert spec.dense_layers == 1 and valid_tp(spec) == [1, 2, 4, 8, 24]
    with pytest.raises(SpecError, match="decoder_sparse_step / mlp_only_layers"):
        param_counts(_spec(mlp_only_layers=[0, 5]))  # a dense layer between MoE ones: not read


def test_mha_variant_gives_each_layer_its_own_heads():
    # MHA as a what-if: every layer as many KV heads as its own query heads (48 on the full layers, 64 on the
    # sliding ones), each K and V of 128 in bf16
    from kvcalc.plan.variants import apply_variant

    mha = apply_variant(_spec(), "mha")
    assert bytes_per_token(mha, "bf16") == (10 * 48 + 30 * 64) * 128 * 2 * 2
    assert bytes_per_token(apply_variant(_spec(), "mqa"), "bf16") == LAYERS * 128 * 2 * 2
