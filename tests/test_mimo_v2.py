"""MiMo-V2-Flash: values narrower than keys (K 192, V 128) without MLA, and sliding layers with KV heads of
their own. Figures by hand from its config.json (model_presets/mimo-v2-flash.yaml) and vLLM 0.19's
mimo_v2_flash.py (QKV with v_head_size, o_proj from heads x 128, V padded to 192 in the cache)."""

import json

from conftest import FIXTURES, GiB, run, run_json

from kvcalc.cost.params import param_counts
from kvcalc.engines.vllm.figures import vllm_figures
from kvcalc.model.presets import get_model

CONFIG = FIXTURES / "real_configs" / "mimo-v2-flash.json"


def test_cache_by_hand():
    # 9 full layers x 4 KV heads x (192 + 128), every token; 39 sliding layers x 8 KV heads x (192 + 128), 128 tokens
    out = run_json("cache", "mimo-v2-flash", "--seq", "8192")
    assert out["bytes_per_token"] == (9 * 4 + 39 * 8) * (192 + 128) * 2 == 222_720
    assert out["total_bytes"] == (9 * 4 * 8192 + 39 * 8 * 128) * 320 * 2 == 214_302_720


def test_parameters_by_hand():
    q, o = 4096 * 64 * 192, 64 * 128 * 4096  # o_proj takes heads x V width
    # sliding layers also hold a sink logit per query head (add_swa_attention_sink_bias)
    full, sliding = q + o + 4096 * 4 * (192 + 128), q + o + 4096 * 8 * (192 + 128) + 64
    expert = 3 * 4096 * 2048
    total = (
        2 * 152576 * 4096  # untied embedding and LM head
        + 9 * full + 39 * sliding
        + 3 * 4096 * 16384  # layer 0's dense MLP (moe_layer_freq 0)
        + 47 * (256 * expert + 4097 * 256)  # 47 MoE layers: experts, router and its correction bias
        + (2 * 48 + 1) * 4096  # norms
    )  # fmt: skip
    counts = param_counts(get_model("mimo-v2-flash"))
    assert counts.total == total == 308_778_780_864  # "309B"
    assert counts.active == total - 47 * 248 * expert  # "15B active": 8 of 256 experts
    assert round(counts.active / 1e9, 2) == 15.45


def test_vllm_pads_values_to_the_key_width():
    spec = get_model("mimo-v2-flash")
    # tp 8: one KV head per rank in both kinds of layer, V padded to 192: 2 x 192 x 2 B = 768 B a token per layer,
    # pages of 16 tokens; 9 full layers one group, 39 sliding layers ceil(39 / 9) = 5 more
    v = vllm_figures(spec, 80 * GiB, kv_dtype="bf16", tp=8, seq=32768)
    assert (v.page_bytes_per_layer, v.group_size, v.kv_cache_groups) == (16 * 768, 9, 6)
    assert v.num_blocks == 80 * GiB // (16 * 768 * 9)


def test_engines_size_the_narrower_values_their_own_way():
    # SGLang's MHATokenToKVPool keeps V at v_head_dim: V is 128 / 192 of K
    out = run_json(
        "fit", "mimo-v2-flash", "--gpu", "h200", "--tp", "8", "--seq", "32k", "--engine", "sglang",
        "--engine-version", "0.5.7",
    )  # fmt: skip
    pool = out["sglang"]
    assert pool["v_bytes"] * 192 == pool["k_bytes"] * 128
    # llama.cpp: n_embd_k_gqa 4 x 192 and n_embd_v_gqa 4 x 128 on the full layers
    out = run_json("cache", "mimo-v2-flash", "--seq", "8192", "--gpu", "h200", "--engine", "llamacpp")
    full = next(p for p in out["llamacpp"]["kv_parts"] if p["cache"] == "non-SWA")
    assert full["k_bytes"] * 128 == full["v_bytes"] * 192 == 9 * 8192 * 4 * 192 * 2 * 128


def test_sliding_layers_with_another_shape_are_refused(tmp_path):
    raw = json.loads(CONFIG.read_text())
    for key, value in (("swa_num_attention_heads", 32), ("swa_v_head_dim", 192)):
        path = tmp_path / key / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps({**raw, key: value}))
        result = run("cache", path)
        assert result.exit_code != 0 and result.stderr.count("\n") == 1
        assert f"{key} (sliding layers with their own attention shape" in result.stderr
    path = tmp_path / "short" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({**raw, "hybrid_layer_pattern": [0, 1]}))
    result = run("cache", path)
    assert "hybrid_layer_pattern must list 0 (full) or 1 (sliding) for each of the 48 layers" in result.stderr


def test_dense_layers_between_moe_layers_make_the_parameters_unknown(tmp_path):
    # moe_layer_freq is read as leading dense layers (0) then MoE layers (1); another layout is not guessed at
    raw = json.loads(CONFIG.read_text())
    path = tmp_path / "mixed" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({**raw, "moe_layer_freq": [0, 1] * 24}))
    out = run_json("show", path)
    assert out["params"] is None
    assert (
        "moe_layer_freq other than 1, or leading dense layers (0) then MoE layers (1)" in out["spec"]["params_unknown"]
    )
    assert run_json("cache", path, "--seq", "8192")["total_bytes"] == 214_302_720  # the cache still answered
