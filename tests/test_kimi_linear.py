"""Kimi Linear (Kimi-Linear-48B-A3B): 20 KDA (Kimi Delta Attention) layers and 7 MLA layers, MoE after one dense layer.

The config's fields are Kimi-Linear-48B-A3B's as several public loaders pin them (one of them with a digest of the
fields it depends on); figures by hand from vLLM 0.19's layers/kda.py, kimi_linear.py and kda_state_shape.
"""

import json

from conftest import GiB, run

from kvcalc.cost.kvcache import bytes_per_token, state_bytes
from kvcalc.cost.params import param_counts
from kvcalc.engines.vllm.figures import vllm_figures
from kvcalc.model.hf.reader import spec_from_config

FULL = [4, 8, 12, 16, 20, 24, 27]  # 1-based, as the config numbers them
RAW = {
    "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "hidden_size": 2304,
    "intermediate_size": 9216, "num_attention_heads": 32, "num_key_value_heads": 32, "num_hidden_layers": 27,
    "vocab_size": 163840, "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "mla_use_nope": True, "head_dim": 72, "tie_word_embeddings": False,
    "linear_attn_config": {"head_dim": 128, "num_heads": 32, "short_conv_kernel_size": 4, "full_attn_layers": FULL,
                           "kda_layers": [i for i in range(1, 28) if i not in FULL]},
    "num_experts": 256, "num_experts_per_token": 8, "num_shared_experts": 1, "moe_intermediate_size": 1024,
    "first_k_dense_replace": 1, "moe_layer_freq": 1, "num_nextn_predict_layers": 0, "torch_dtype": "bfloat16",
}  # fmt: skip
P = 32 * 128  # KDA heads x head_dim
KDA_STATE = 3 * 3 * P * 2 + 32 * 128 * 128 * 4  # three bf16 conv windows of 3 steps, float32 recurrent state


def _spec():
    return spec_from_config(RAW, "kimi-linear-48b-a3b", "Kimi-Linear-48B-A3B/config.json")


def test_parameters_cache_and_state_by_hand():
    kda = 3 * 2304 * P + 2304 * 128 + 128 * P + P + 2304 * 32 + 3 * P * 4 + 32 + 2304 * 128 + 128 * P + 128 + P * 2304
    mla = 2304 * 32 * 192 + 2304 * 576 + 512 + 512 * 32 * 256 + 32 * 128 * 2304  # q, kv_a (+ norm), kv_b, o
    expert = 3 * 2304 * 1024
    total = (
        20 * kda + 7 * mla
        + 3 * 2304 * 9216  # layer 0's dense MLP
        + 26 * (256 * expert + expert + 2305 * 256)  # routed experts, the shared one, the router and its bias
        + 2 * 163840 * 2304 + (2 * 27 + 1) * 2304
    )  # fmt: skip
    counts = param_counts(_spec())
    assert counts.total == total == 49_122_681_728
    assert counts.active == total - 26 * 248 * expert  # 8 of 256 experts: "A3B"
    assert bytes_per_token(_spec(), "bf16") == 7 * (512 + 64) * 2  # the MLA layers' latent, every rank whole
    assert state_bytes(_spec(), 1) == 20 * KDA_STATE == 43_417_600


def test_vllm_groups_mla_and_kda_layers():
    # tp 2: a KDA layer's state per rank 542,720 B (heads and channels halved), a latent 1,152 B a token: the
    # block grows in steps of 16 to 944 tokens; 7 MLA layers one group, 20 KDA layers three more
    v = vllm_figures(_spec(), 60 * GiB, kv_dtype="bf16", tp=2, seq=32768)
    assert (v.block_size, v.page_bytes_per_layer, v.group_size, v.kv_cache_groups) == (944, 944 * 1152, 7, 4)
    assert KDA_STATE // 2 <= 944 * 1152 < KDA_STATE // 2 + 16 * 1152
    assert v.blocks_per_request == 35 + 3  # ceil(32,768 / 944) for the MLA group, one block for each KDA group


def test_kimi_k3s_gates_are_read():
    # Kimi-K3's variants (tests/test_kimi_k3.py) on Kimi Linear's shape: an output gate a channel on the 7 MLA layers
    # (hidden -> 32 heads x 128) and a full-rank KDA output gate (hidden -> heads x head_dim) in place of the low-rank
    # one on the 20 KDA layers; the cache and states do not change
    base = _spec()
    gated = spec_from_config({**RAW, "mla_use_output_gate": True}, "k", "k/config.json")
    assert param_counts(gated).total - param_counts(base).total == 7 * 2304 * 32 * 128
    lin = {**RAW["linear_attn_config"], "use_full_rank_gate": True}
    full = spec_from_config({**RAW, "linear_attn_config": lin}, "k", "k/config.json")
    assert param_counts(full).total - param_counts(base).total == 20 * (2304 * P - (2304 * 128 + 128 * P))
    for spec in (gated, full):
        assert bytes_per_token(spec, "bf16") == bytes_per_token(base, "bf16")
        assert state_bytes(spec, 1) == state_bytes(base, 1)


def test_layer_lists_must_cover_every_layer_once(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**RAW, "linear_attn_config": {**RAW["linear_attn_config"], "full_attn_layers": [4]}}))
    result = run("cache", path)
    assert "kda_layers and full_attn_layers must number each of the 27 layers once (1-based)" in result.stderr
