"""Ling / Ring 2.5 (BailingMoeV2_5ForCausalLM, model_type bailing_hybrid): MLA on every layer_group_size-th layer,
lightning (linear) attention with a fixed state on the others, MoE after leading dense layers.

The config is the defaults of inclusionAI's BailingMoeV2_5Config (github.com/inclusionAI/Ring-V2.5,
models/configuration_bailing_moe_v2_5.py), which vLLM and SGLang load with the checkpoint's remote code. Figures by
hand from vLLM 0.19's bailing_moe_linear.py (BailingMoELinearAttention, BailingMoeV25MLAAttention, BailingMoeV25)
and its linear_attention_state_shape.
"""

import json

import pytest
from conftest import GiB, run

from kvcalc.cost.kvcache import bytes_per_token, state_bytes
from kvcalc.cost.params import param_counts
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


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"short_conv_kernel_size": 4}, r"short_conv_kernel_size \(Ling 3's KDA linear-attention layers\)"),
        ({"architectures": ["BailingMoeV3ForCausalLM"]}, r"BailingMoeV3ForCausalLM \(Ling 3's KDA"),
        ({"full_attention_type": "gqa"}, "read as MLA only"),
        ({"kv_lora_rank": None}, "it needs kv_lora_rank"),
    ],
)
def test_other_bailing_hybrids_are_refused(extra, message):
    # Ling 3 (KDA linear layers) and GQA full-attention layers (SGLang's full_attention_type; vLLM 0.19 builds MLA
    # whatever the config says) are not Ling 2.5's layout
    with pytest.raises(SpecError, match=message):
        _spec(**extra)
