"""Kimi-K3 (KimiK3ForConditionalGeneration): Kimi Linear's KDA layers with MLA every fourth, grown.

The config is Kimi-K3's as aiconfigurator-core 0.12.0 vendors it (tests/fixtures/real_configs/kimi-k3.json,
PROVENANCE.yaml). Figures by hand from SGLang 0.5.23's models/kimi_k3.py, which first ships in 0.5.17: beyond Kimi
Linear a full-rank KDA output gate (fused_qkvg_proj) beside a low-rank decay gate, q_lora_rank queries and an output
gate a channel on the MLA layers (mla_use_output_gate), routed experts in a 3,584-wide latent (routed_expert_down_proj
/ up_proj, a norm under latent_moe_use_norm), and an attention residual (attn_res_block_size): two norms and two
[1, hidden] projections a layer, one pair at the head. vLLM 0.19 has no class for it.
"""

import json

import pytest
from conftest import FIXTURES, run, run_json

from kvcalc.cost.kvcache import bytes_per_token, state_bytes
from kvcalc.cost.params import param_counts
from kvcalc.engines.sglang.mamba import strategy
from kvcalc.model.hf.reader import spec_from_config
from kvcalc.model.presets import get_model

H, P, LAYERS = 7168, 96 * 128, 93  # hidden; KDA heads x head_dim
RAW = json.loads((FIXTURES / "real_configs" / "kimi-k3.json").read_text())


def test_parameters_by_hand():
    spec = get_model("kimi-k3")
    kda = (
        4 * H * P  # q, k, v and the full-rank output gate g
        + H * 96  # b_proj
        + H * 128 + P * 128 + P  # the low-rank decay gate (f_a, f_b) and dt_bias
        + 3 * P * 4 + 96 + 128  # the q, k, v short convs, A_log, o_norm
        + P * H  # o_proj
    )  # fmt: skip
    mla = (
        H * (1536 + 512 + 64) + 1536 + 512  # fused q_a / kv_a projections and their norms
        + 1536 * 96 * 192 + 512 * 96 * 256  # q_b, kv_b
        + 96 * 128 * H  # o_proj
        + H * 96 * 128  # g_proj: a sigmoid gate a channel
    )  # fmt: skip
    assert (kda, mla) == (443_740_384, 232_196_096)
    latent = 3584
    moe = (
        896 * 3 * 3072 * latent  # routed experts, in the latent width
        + 2 * H * latent + latent  # routed_expert_down_proj / up_proj, routed_expert_norm
        + 896 * H + 896  # the router and its correction bias
        + 3 * H * 2 * 3072  # two shared experts as one MLP, in the hidden width
    )  # fmt: skip
    norms = LAYERS * (2 * H + 4 * H) + 3 * H  # pre-norms, the attention residual's, the final norm and head pair
    total = 69 * kda + 24 * mla + 3 * H * 33792 + 92 * moe + 2 * 163840 * H + norms
    assert param_counts(spec).total == total == 2_779_484_476_000
    assert param_counts(spec).active_excl_embedding == 104_189_612_640  # 16 routed experts and the shared ones


def test_cache_and_state_per_request():
    spec = get_model("kimi-k3")
    # full_attn_layers is 1-based: layers 3, 7, .., 91 and 92 are MLA, a latent of 512 + 64 each
    assert bytes_per_token(spec, "bf16") == 24 * 576 * 2 == 27_648
    # a KDA layer: three bf16 conv windows of 3 steps over 96 x 128 channels, a float32 128 x 128 state a head
    per_layer = 3 * 3 * P * 2 + 96 * 128 * 128 * 4
    assert state_bytes(spec, 1) == 69 * per_layer == 449_372_160
    assert state_bytes(spec, 1, tp=8) == 69 * per_layer // 8


def test_only_the_routed_experts_are_mxfp4():
    ck = get_model("kimi-k3").checkpoint
    assert ck is not None and ck.quantization is not None
    q = ck.quantization
    # llm-compressor's mxfp4-pack-quantized, every module but the routed experts ignored
    assert q.linear is None and not q.attention_quantized
    assert q.experts is not None and (q.experts.name, q.experts.group_size, q.experts.scale_bytes) == ("mxfp4", 32, 1)


def test_engines():
    # vLLM 0.19 has no class for it; SGLang from 0.5.17, its states under extra_buffer (5 slots a request)
    result = run("fit", "kimi-k3", "--gpu", "b300", "--tp", "8", "--seq", "8192", "--engine", "vllm")
    assert result.exit_code != 0 and "['KimiK3ForConditionalGeneration'] are not supported" in result.stderr
    assert result.stderr.count("\n") == 1
    assert strategy((0, 5, 17), "KimiK3ForConditionalGeneration") == "extra_buffer"
    ok = run("fit", "kimi-k3", "--gpu", "b300", "--tp", "8", "--seq", "8192", "--engine", "sglang")
    assert ok.exit_code == 0 and "fits on 8 x b300 under SGLang 0.5.23" in ok.stdout


def test_sglang_registers_zero_biases_for_its_mxfp4_experts(monkeypatch):
    # SGLang's Mxfp4MoEMethod.create_weights registers w13 / w2 biases on CUDA whether the checkpoint has them or not
    # (quantization/mxfp4.py: always to 0.5.16, `with_bias or not _is_hip` from 0.5.17); Kimi-K3's have none. On
    # B300 (flashinfer_mxfp4, the intermediate size padded to 128, biases made fp32) at tp 16, per MoE layer:
    # 896 experts x (2 x 256 + 3,584) x 4 B, over the 92 MoE layers
    from kvcalc.engines import weights
    from kvcalc.engines.sglang.pool import SglangSettings, predict
    from kvcalc.model.presets import get_gpu

    per_layer = 896 * 2 * 256 * 4 + 896 * 3584 * 4
    assert per_layer == 14_680_064
    layout = "sglang-flashinfer-128"
    with_zeros = weights.mxfp4_experts(layout, 896, 3072 // 16, 3584, True, False, 2)
    assert with_zeros == weights.mxfp4_experts(layout, 896, 3072 // 16, 3584, True, True, 2)
    spec, b300 = get_model("kimi-k3"), get_gpu("b300")
    served = predict(spec, b300, SglangSettings(tp=16), seq=8192)
    plain = weights.MXFP4_LAYOUTS[layout]._replace(always_bias=False)
    monkeypatch.setitem(weights.MXFP4_LAYOUTS, layout, plain)
    assert with_zeros - weights.mxfp4_experts(layout, 896, 3072 // 16, 3584, True, False, 2) == per_layer
    assert served.weights_bytes - predict(spec, b300, SglangSettings(tp=16), seq=8192).weights_bytes == 92 * per_layer


def test_kimi_linear_without_k3s_fields_is_unchanged():
    # Kimi Linear's low-rank output gate and plain MLA stay as they were: drop K3's fields and the count falls by
    # exactly what they add
    lin = dict(RAW["text_config"])
    lin["linear_attn_config"] = {**lin["linear_attn_config"], "use_full_rank_gate": False}
    for key in ("mla_use_output_gate", "attn_res_block_size", "routed_expert_hidden_size", "latent_moe_use_norm"):
        lin.pop(key)
    plain = spec_from_config({**lin, "quantization_config": None}, "k3-as-kimi-linear", "k3/config.json")
    k3 = get_model("kimi-k3")
    low_rank_gate = H * 128 + P * 128
    # experts in the hidden width (each 3 x 3,072 x 7,168) where K3's are in the latent, no latent projections or norm
    experts = 92 * (896 * 3 * 3072 * (3584 - H) + 2 * H * 3584 + 3584)
    added = 69 * (H * P - low_rank_gate) + 24 * H * P + (4 * LAYERS + 2) * H + experts
    assert param_counts(k3).total - param_counts(plain).total == added
    with pytest.raises(AssertionError):
        assert param_counts(k3).total == param_counts(plain).total


def test_compare_shows_the_latent_and_the_state_beside_the_cache():
    # batch 32 x 32,768: K3's 24 MLA layers cache a latent (no KV heads); its KDA state, 449,372,160 B a request, is
    # beside the KV cache, as GLM-5.2 (MLA alone) has none
    rows = {r["name"]: r for r in run_json("compare", "kimi-k3", "glm-5.2", "--seq", "32k")["rows"]}
    assert rows["kimi-k3"]["kv_heads"] is None and rows["glm-5.2"]["kv_heads"] is None
    assert rows["kimi-k3"]["total_bytes"] == 32 * 32768 * 27_648
    assert (rows["kimi-k3"]["state_bytes"], rows["glm-5.2"]["state_bytes"]) == (32 * 449_372_160, 0)
    table = run("compare", "kimi-k3", "glm-5.2", "--seq", "32k").stdout
    assert "+ state" in table and "13.39 GiB" in table  # 32 x 449,372,160 B
    assert "+ state" not in run("compare", "llama-3.1-8b", "glm-5.2").stdout
