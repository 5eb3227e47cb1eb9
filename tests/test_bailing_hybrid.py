"""Ling's hybrids (model_type bailing_hybrid): MLA on every layer_group_size-th layer, linear attention with a fixed
state on the others, MoE after leading dense layers.

Ling / Ring 2.5 (BailingMoeV2_5ForCausalLM, lightning attention): the config is the defaults of inclusionAI's
BailingMoeV2_5Config (github.com/inclusionAI/Ring-V2.5, models/configuration_bailing_moe_v2_5.py), which vLLM and
SGLang load with the checkpoint's remote code; figures by hand from vLLM 0.19's bailing_moe_linear.py
(BailingMoELinearAttention, BailingMoeV25MLAAttention, BailingMoeV25) and its linear_attention_state_shape.

Ling 3 (BailingMoeV3ForCausalLM, KDA): the fields a public loader pins for Ling-3.0-flash, with transformers 5.25's
BailingHybridConfig defaults for the rest (layer_group_size 6, moe_intermediate_size 768, one shared expert);
figures by hand from transformers' BailingHybridForCausalLM and SGLang 0.5.23's bailing_moe_v3.py and
KimiLinearStateShape.
"""

import json

import pytest
from conftest import GiB, run

from kvcalc.cost.kvcache import bytes_per_token, state_bytes
from kvcalc.cost.params import param_counts
from kvcalc.engines.sglang.mamba import state_bytes_per_request, strategy
from kvcalc.engines.vllm.figures import vllm_figures
from kvcalc.errors import SpecError
from kvcalc.model.hf.reader import spec_from_config

RAW = {
    "architectures": ["BailingMoeV2_5ForCausalLM"], "model_type": "bailing_hybrid", "vocab_size": 157184,
    "hidden_size": 2048, "intermediate_size": 5120, "num_hidden_layers": 20, "num_attention_heads": 16,
    "num_key_value_heads": 4, "use_qkv_bias": False, "use_bias": False, "tie_word_embeddings": False,
    "num_experts": 256, "num_shared_experts": 1, "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4,
    "moe_intermediate_size": 512, "first_k_dense_replace": 1, "head_dim": 128, "use_qk_norm": True,
    "moe_router_enable_expert_bias": True, "layer_group_size": 5, "group_norm_size": 4, "kv_lora_rank": 512,
    "q_lora_rank": None, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128,
    "router_dtype": "fp32", "torch_dtype": "bfloat16",
}  # fmt: skip
LIGHTNING_STATE = 16 * 128 * 128 * 2  # a head_dim x head_dim matrix for each of 16 heads, in bf16


def _spec(**extra):
    return spec_from_config({**RAW, **extra}, "ling-2.5", "Ling-2.5/config.json")


def test_layers_parameters_cache_and_state_by_hand():
    spec = _spec()
    kinds = [run.kind.value for run in spec.expanded_layers()]
    assert [i for i, k in enumerate(kinds) if k == "mla"] == [4, 9, 14, 19]  # (i + 1) % 5 == 0
    inner = 16 * 128
    # query_key_value (3 x every head), q and k norms, g_proj, g_norm, dense
    lightning = 2048 * 3 * inner + 2 * 128 + 2048 * inner + inner + inner * 2048
    mla = 2048 * 16 * 192 + 2048 * 576 + 512 + 512 * 16 * 256 + 16 * 128 * 2048  # q, kv_a (+ norm), kv_b, o
    expert = 3 * 2048 * 512
    total = (
        16 * lightning + 4 * mla
        + 3 * 2048 * 5120  # layer 0's dense MLP
        + 19 * (256 * expert + expert + 256 * 2048 + 256)  # routed experts, the shared one, the router, its bias
        + 2 * 157184 * 2048 + (2 * 20 + 1) * 2048
    )  # fmt: skip
    counts = param_counts(spec)
    assert counts.total == total == 16_436_556_544
    assert counts.active == total - 19 * 248 * expert
    assert bytes_per_token(spec, "bf16") == 4 * (512 + 64) * 2  # the 4 MLA layers' latent only
    assert state_bytes(spec, 1) == 16 * LIGHTNING_STATE == 8 << 20


def test_a_last_partial_group_is_lightning_and_biases_count():
    # 22 layers of groups of 5: layers 20 and 21 are lightning, as vLLM's and SGLang's (i + 1) % size rule reads them
    spec = _spec(num_hidden_layers=22)
    assert [run.kind.value for run in spec.expanded_layers()][19:] == ["mla", "stateless", "stateless"]
    # use_qkv_bias: 3 x heads x head_dim more a lightning layer; no q / k norms without use_qk_norm
    plain, biased = param_counts(_spec()), param_counts(_spec(use_qkv_bias=True, use_qk_norm=False))
    assert biased.total - plain.total == 16 * (3 * 16 * 128 - 2 * 128)


def test_vllm_pages_the_latent_to_the_lightning_state():
    # a lightning layer's state per rank 524,288 B; a latent 1,152 B a token: the block grows in steps of 16 to 464
    # tokens; the 4 MLA layers one group, the 16 lightning layers four more
    v = vllm_figures(_spec(), 60 * GiB, kv_dtype="bf16", tp=1, seq=32768)
    assert (v.block_size, v.page_bytes_per_layer, v.group_size, v.kv_cache_groups) == (464, 464 * 1152, 4, 5)
    assert LIGHTNING_STATE <= 464 * 1152 < LIGHTNING_STATE + 16 * 1152
    assert v.blocks_per_request == 71 + 4  # ceil(32,768 / 464) for the MLA group, one block for each other


def test_sglang_serves_it_from_0_5_9(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(RAW))
    old = run("fit", path, "--gpu", "h100", "--engine", "sglang", "--engine-version", "0.5.8")
    assert old.exit_code != 0 and old.stderr.count("\n") == 1
    assert "SGLang 0.5.8 has no model class for BailingMoeV2_5ForCausalLM (first in 0.5.9)" in old.stderr
    assert run("fit", path, "--gpu", "h100", "--engine", "sglang", "--engine-version", "0.5.9").exit_code == 0


LING3 = {
    "architectures": ["BailingMoeV3ForCausalLM"], "model_type": "bailing_hybrid", "num_hidden_layers": 42,
    "hidden_size": 2560, "vocab_size": 157184, "tie_word_embeddings": False, "first_k_dense_replace": 2,
    "intermediate_size": 6144, "num_attention_heads": 32, "num_key_value_heads": 32, "kv_lora_rank": 512,
    "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "head_dim": 128,
    "gated_attention_proj_granularity_type": "head_wise", "short_conv_kernel_size": 4, "no_kda_lora": True,
    "kda_safe_gate": True, "kda_lower_bound": -5.0, "num_experts": 512, "num_experts_per_tok": 8,
    "num_shared_experts": 1, "moe_intermediate_size": 768, "layer_group_size": 6, "n_group": 8, "topk_group": 4,
    "moe_router_enable_expert_bias": True, "torch_dtype": "bfloat16",
}  # fmt: skip


def _ling3(**extra):
    return spec_from_config({**LING3, **extra}, "ling-3", "Ling-3/config.json")


def test_ling3_kda_and_gated_mla_by_hand():
    spec = _ling3()
    assert [i for i, r in enumerate(spec.expanded_layers()) if r.kind.value == "mla"] == [5, 11, 17, 23, 29, 35, 41]
    p = 32 * 128
    # q, k, v; their short convs (4 taps); A_log, dt_bias and the full-rank decay gate (no_kda_lora); b_proj;
    # o_norm, o_proj; the full-rank output gate
    kda = 3 * 2560 * p + 3 * p * 4 + 32 + p + 2560 * p + 2560 * 32 + 128 + p * 2560 + 2560 * p
    mla = 2560 * 32 * 192 + 2560 * 576 + 512 + 512 * 32 * 256 + 32 * 128 * 2560 + 2560 * 32  # and a gate a head
    expert = 3 * 2560 * 768
    total = (
        35 * kda + 7 * mla
        + 2 * 3 * 2560 * 6144  # layers 0 and 1: dense MLPs
        + 40 * (512 * expert + expert + 2561 * 512)  # routed experts, the shared one, the router and its bias
        + 2 * 157184 * 2560 + (2 * 42 + 1) * 2560
    )  # fmt: skip
    assert param_counts(spec).total == total
    assert bytes_per_token(spec, "bf16") == 7 * 576 * 2
    # SGLang: the recurrent state in float32 whatever the model dtype, three conv windows of 3 steps in bf16
    layer = 32 * 128 * 128 * 4 + 3 * 3 * p * 2
    assert state_bytes_per_request(spec) == 35 * layer == state_bytes(spec, 1)


def test_ling3_as_transformers_writes_it():
    # transformers 5.25's BailingHybridConfig.to_dict(): the KDA shape under linear_*, head_dim overwritten with the
    # MLA's qk_rope_head_dim, layer_types; torch counts 19,504,075,200 parameters of BailingHybridForCausalLM built
    # from it on the meta device, whose routers keep their bias as a buffer (6 MoE layers x 512 experts)
    written = {**LING3, "num_hidden_layers": 8, "layer_group_size": 4, "head_dim": 64, "linear_head_dim": 128}
    written |= {"linear_num_heads": 32, "linear_conv_kernel_dim": 4}
    written["layer_types"] = (
        ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + ["full_attention"]
    )
    assert param_counts(spec_from_config(written, "ling-3", "x/config.json")).total == 19_504_075_200 + 6 * 512


def test_ling3_is_sglangs_from_0_5_19_and_no_vllm_class(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LING3))
    old = run("fit", path, "--gpu", "h200", "--tp", "8", "--engine", "sglang", "--engine-version", "0.5.18")
    assert "SGLang 0.5.18 has no model class for BailingMoeV3ForCausalLM (first in 0.5.19)" in old.stderr
    vllm = run("fit", path, "--gpu", "h200", "--tp", "8", "--engine", "vllm")
    assert vllm.exit_code != 0 and vllm.stderr.count("\n") == 1
    assert "Model architectures ['BailingMoeV3ForCausalLM'] are not supported for now." in vllm.stderr
    assert strategy((0, 5, 19), "BailingMoeV3ForCausalLM") == "extra_buffer"  # 5 state slots a running request


@pytest.mark.parametrize(
    ("raw", "extra", "message"),
    [
        (RAW, {"full_attention_type": "gqa"}, "read as MLA only"),
        (RAW, {"kv_lora_rank": None}, "it needs kv_lora_rank"),
        (RAW, {"layer_types": ["full_attention"] * 20}, "layer_types in a Ling 2.5 config"),
        (LING3, {"v_head_dim": 64}, "v_head_dim 64 beside head_dim 128"),
        (LING3, {"gated_attention_proj_granularity_type": "per_token"}, "'per_token' is not read"),
        (LING3, {"layer_group_size": [1, 0]}, "0 \\(MLA\\) or 1 \\(linear\\) for each of the 42 layers"),
    ],
)
def test_layouts_not_read_are_refused(raw, extra, message):
    # GQA full-attention layers (SGLang's full_attention_type; vLLM 0.19 builds MLA whatever the config says) and
    # shapes the engines would read apart are not guessed
    with pytest.raises(SpecError, match=message):
        spec_from_config({**raw, **extra}, "b", "b/config.json")


def test_tensor_parallelism_must_divide_group_norm_size(tmp_path):
    # BailingMoELinearAttention (vLLM 0.19, SGLang): "tp_size must be <= group_norm_size" and "group_norm_size must
    # be divisible by tp_size": tp 8 with the class's 4 would not start; left out of a config, not guessed
    from kvcalc.cost.kvcache import valid_tp

    assert valid_tp(_spec()) == [1, 2, 4]
    assert valid_tp(_spec(group_norm_size=None)) == [1, 2, 4, 8, 16]
    assert valid_tp(_ling3()) == [1, 2, 4, 8, 16, 32]  # Ling 3's KDA layers have no grouped norm
    path = tmp_path / "ling" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(RAW))
    refused = run("fit", path, "--gpu", "h100", "--tp", "8")
    assert refused.exit_code != 0 and refused.stderr.count("\n") == 1
    assert "tensor parallelism 8 does not divide ling's group_norm_size 4" in refused.stderr
    assert "(allowed: 1, 2, 4)" in refused.stderr
    assert run("fit", path, "--gpu", "h100", "--tp", "4").exit_code == 0
