"""Step 3.5 (StepFun, Step3p5ForCausalLM): full and sliding layers with query heads of their own.

The config below is Step-3.5-Flash's shape (PROVENANCE). Torch counts 196,428,160,256 parameters of transformers
5.25's Step3p7TextModel (Step 3.7's text model, `model_type: step3p5`) built from the same shape on the meta device;
vLLM 0.19's Step3p5ForCausalLM adds the LM head (128,896 x 4,096) and a float32 router bias of 288 on each of the
42 MoE layers. Figures by hand from vLLM 0.19's models/step3p5.py.
"""

import json

import pytest
from conftest import run_json

from kvcalc.cost.flops import decode_attention_flops
from kvcalc.cost.kvcache import bytes_per_token, check_tp, valid_tp
from kvcalc.cost.params import param_counts
from kvcalc.errors import SpecError, UsageError
from kvcalc.model.hf.reader import spec_from_config

# NOTE: no verbatim copy of the hub file (stepfun-ai/Step-3.5-Flash) was reachable offline; these are its fields as
# AMD's ATOM tests them ("Realistic config matching HF checkpoint defaults": ROCm/ATOM tests/test_step3p5.py), with
# rope_theta and partial_rotary_factors a value a layer (as vLLM indexes them) over the 48 layer_types entries, which
# Megatron-Bridge's and Modular's Step 3.5 defaults and sglang-jax issue #1367 agree with.
PROVENANCE = "ROCm/ATOM tests/test_step3p5.py REALISTIC_KWARGS"
LAYERS = 45
TYPES = ["full_attention" if i % 4 == 0 else "sliding_attention" for i in range(LAYERS + 3)]  # + the 3 MTP layers
RAW = {
    "architectures": ["Step3p5ForCausalLM"], "model_type": "step3p5", "torch_dtype": "bfloat16",
    "vocab_size": 128896, "hidden_size": 4096, "intermediate_size": 11264, "num_hidden_layers": LAYERS,
    "num_attention_heads": 64, "num_attention_groups": 8, "head_dim": 128, "max_position_embeddings": 262144,
    "rms_norm_eps": 1e-06, "use_qk_norm": True, "moe_num_experts": 288, "moe_top_k": 8, "moe_intermediate_size": 1280,
    "share_expert_dim": 1280, "moe_layers_enum": ",".join(str(i) for i in range(3, LAYERS)), "moe_layer_offset": 0,
    "moe_every_n_layer": 1, "norm_expert_weight": True, "moe_router_activation": "sigmoid",
    "moe_router_scaling_factor": 3.0, "use_moe_router_bias": True, "need_fp32_gate": True, "att_impl_type": "GQA",
    "use_head_wise_attn_gate": True, "sliding_window": 512, "layer_types": TYPES,
    "attention_other_setting": {
        "attention_type": "sliding_attention", "num_attention_heads": 96, "num_attention_groups": 8, "head_dim": 128,
    },
    "rope_theta": [5000000.0 if t == "full_attention" else 10000.0 for t in TYPES],
    "partial_rotary_factors": [0.5 if t == "full_attention" else 1.0 for t in TYPES],
    "yarn_only_types": ["full_attention"], "rope_scaling": {"type": "llama3", "factor": 16.0},
    "swiglu_limits": [0.0] * 43 + [7.0] * 5, "swiglu_limits_shared": [0.0] * 43 + [16.0] * 5,
    "num_nextn_predict_layers": 3, "tie_word_embeddings": False,
}  # fmt: skip


def _spec(**extra):
    return spec_from_config({**RAW, **extra}, "step-3.5-flash", "Step-3.5-Flash/config.json")


def test_parameters_by_hand_match_torchs_count():
    spec = _spec()
    assert param_counts(spec).total == 196_956_130_368 == 196_428_160_256 + 128896 * 4096 + 42 * 288

    def attention(heads):  # q, k, v, o; q and k norms of head_dim; g_proj: one gate a head
        return 4096 * heads * 128 * 2 + 2 * 4096 * 8 * 128 + 2 * 128 + 4096 * heads

    expert = 3 * 4096 * 1280
    total = (
        12 * attention(64) + 33 * attention(96)  # layers 0, 4, .., 44 full; the others sliding, 96 heads
        + 3 * 3 * 4096 * 11264  # layers 0-2: a dense MLP
        + 42 * (288 * expert + expert + 288 * 4096 + 288)  # routed experts, the shared one, the router and its bias
        + 2 * 128896 * 4096 + (2 * LAYERS + 1) * 4096  # embedding and LM head (untied), the norms
    )  # fmt: skip
    assert param_counts(spec).total == total


def test_cache_and_attention_by_layer():
    spec = _spec()
    assert [r.kind.value for r in spec.expanded_layers()][:5] == ["full", "sliding", "sliding", "sliding", "full"]
    assert {spec.run_heads(r) for r in spec.expanded_layers() if r.kind.value == "sliding"} == {96}
    assert {spec.run_heads(r) for r in spec.expanded_layers() if r.kind.value == "full"} == {64}
    # 8 KV heads of 128 on every layer (layer_types cut to the 45 layers): 184,320 B a token while windows grow
    assert bytes_per_token(spec, "bf16") == LAYERS * 2 * 8 * 128 * 2 == 184_320
    # one new token over 4,096 cached: the 12 full layers' 64 heads see all, the 33 sliding layers' 96 the last 512
    assert decode_attention_flops(spec, 4096) == 12 * 2 * 64 * 256 * 4096 + 33 * 2 * 96 * 256 * 512


def test_cache_command_holds_each_layers_window(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(RAW))
    # 8,192 tokens: the 12 full layers hold them all, the 33 sliding layers their last 512; 4,096 B a layer and token
    assert run_json("cache", str(tmp_path), "--seq", "8192")["total_bytes"] == (12 * 8192 + 33 * 512) * 4096


def test_the_lm_head_is_its_own():
    # vLLM's Step3p5ForCausalLM builds a ParallelLMHead of its own, whatever the config says
    assert param_counts(_spec(tie_word_embeddings=True)).total == param_counts(_spec()).total


def test_moe_layers_enum_and_its_default():
    assert _spec().dense_layers == 3
    # vLLM's default without moe_layers_enum: every layer but the first is MoE
    assert _spec(moe_layers_enum=None).dense_layers == 1
    # MoE layers that are not a tail after leading dense ones: the cache is answered, the parameters are unknown
    odd = _spec(moe_layers_enum=",".join(str(i) for i in range(3, LAYERS) if i != 20))
    assert odd.params_unknown and "mlp_layer_types" in odd.params_unknown
    assert bytes_per_token(odd, "bf16") == 184_320


def test_a_rope_cache_per_setting():
    ck = _spec().checkpoint
    assert ck is not None
    # the full layers' llama3-scaled rope rotates half the head (64), the sliding layers' default rope all 128;
    # llama3 scaling keeps max_position_embeddings rows
    assert (ck.rotary_rows, ck.rotary_widths) == ((262144, 262144), (64, 128))
    one = _spec(rope_theta=10000.0, partial_rotary_factors=None, rope_scaling=None).checkpoint
    assert one is not None and one.rotary_widths is None


def test_tensor_parallelism_splits_both_head_counts():
    spec = _spec()
    assert valid_tp(spec) == [1, 2, 4, 8, 16, 32]  # divides 64 and 96; the 8 KV heads replicated past 8
    with pytest.raises(UsageError, match="does not divide step-3.5-flash's 96 query heads"):
        check_tp(spec, 64)


def test_what_vllm_does_not_build_is_refused():
    with pytest.raises(SpecError, match="att_impl_type 'MFA'"):
        _spec(att_impl_type="MFA")
    with pytest.raises(SpecError, match="attention_other_setting must give"):
        _spec(attention_other_setting={"num_attention_heads": 96})
    with pytest.raises(SpecError, match="moe_layers_enum must list layer indices"):
        _spec(moe_layers_enum="3,four")
