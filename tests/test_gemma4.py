"""Gemma 4: full-attention layers with their own KV shape (global_head_dim, num_global_key_value_heads) and
V = K (attention_k_eq_v), read from the real configs (tests/fixtures/real_configs/gemma-4-26b-a4b.json,
gemma-4-31b-it-nvfp4.json); every figure derived by hand from those configs."""

import json

import pytest
from conftest import FIXTURES, run, run_json

from kvcalc.cost.flops import decode_attention_flops, prefill_attention_flops
from kvcalc.cost.params import attention_params, param_counts
from kvcalc.engines.vllm.figures import vllm_figures
from kvcalc.model.presets import get_model
from kvcalc.model.spec import LayerKind

GIB = 2**30
CONFIG = FIXTURES / "real_configs" / "gemma-4-26b-a4b.json"


def test_gemma4_26b_cache_per_token_by_hand():
    # 25 sliding layers (W 1,024) of 8 KV heads x 256, 5 full layers of 2 KV heads x 512; K and V both cached
    out = run_json("cache", "gemma-4-26b-a4b", "--seq", "32768", "--batch", "4")
    assert out["bytes_per_token"] == 25 * 2 * 8 * 256 * 2 + 5 * 2 * 2 * 512 * 2 == 225_280
    assert out["total_bytes"] == 4 * 2 * (25 * 2 * 8 * 256 * 1024 + 5 * 2 * 2 * 512 * 32768)
    # the 31B: 50 sliding of 16 KV heads x 256, 10 full of 4 x 512
    dense = run_json("cache", "gemma-4-31b-it-nvfp4", "--seq", "1")
    assert dense["bytes_per_token"] == 50 * 2 * 16 * 256 * 2 + 10 * 2 * 4 * 512 * 2 == 901_120


def test_full_layers_take_the_global_shape_and_load_k_as_v():
    spec = get_model("gemma-4-26b-a4b")
    full = [run for run, _ in spec.layer_groups() if run.kind == LayerKind.FULL]
    assert [(r.head_dim, r.kv_heads, r.v_is_k) for r in full] == [(512, 2, True)]
    (run,) = full
    h, hidden = 16, 2816
    # q and o at 16 heads x 512; k_proj only (2 heads x 512), no v_proj
    assert attention_params(spec, run) == hidden * h * 512 + hidden * 2 * 512 + h * 512 * hidden
    # the MoE block (128 experts of 704, top 8) runs beside the dense MLP (2,112) in every layer
    c = param_counts(spec)
    assert c.expert_params == 3 * hidden * 704 and c.shared_experts == 30 * 3 * hidden * 2112
    assert c.total == pytest.approx(25.2e9, rel=0.005) and c.active == pytest.approx(3.8e9, rel=0.01)


def test_attention_flops_use_each_layers_width():
    spec = get_model("gemma-4-26b-a4b")
    # decode at 4,096 cached tokens: 2 x 16 heads x (d + d) per key; sliding layers see 1,024 keys
    assert decode_attention_flops(spec, 4096) == 25 * 2 * 16 * 512 * 1024 + 5 * 2 * 16 * 1024 * 4096
    pairs = 4096 * 4097 // 2
    window = 1024 * 1025 // 2 + (4096 - 1024) * 1024
    assert prefill_attention_flops(spec, 4096) == 25 * 2 * 16 * 512 * window + 5 * 2 * 16 * 1024 * pairs


def test_vllm_unifies_the_page_sizes():
    # sliding pages 16 x 8 x 256 x 2 (K, V) x 2 B = 131,072 B; full pages half that, so vLLM 0.19 doubles the full
    # layers' block to 32 tokens (unify_kv_cache_spec_page_size); groups of 5 layers: 5 sliding + 1 full
    spec = get_model("gemma-4-26b-a4b")
    v = vllm_figures(spec, 20 * GIB, kv_dtype="bf16", tp=1, seq=32768)
    assert v.page_bytes_per_layer == 131_072 and v.group_size == 5 and v.kv_cache_groups == 6
    assert v.num_blocks == 20 * GIB // (131_072 * 5) and v.kv_cache_tokens == v.num_blocks // 6 * 16
    sliding = -(-(1023 + 8192) // 16) + 1
    assert v.blocks_per_request == 5 * sliding + 32768 // 32


def test_config_reading_follows_gemma4_text_config(tmp_path):
    config = json.loads(CONFIG.read_text())
    text = config["text_config"]
    # without attention_k_eq_v the full layers keep num_key_value_heads (Gemma4TextConfig.per_layer_config),
    # still at global_head_dim; and V has its own projection
    plain = {**config, "text_config": {**text, "attention_k_eq_v": False}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(plain))
    out = run_json("cache", str(path), "--seq", "1")
    assert out["bytes_per_token"] == 25 * 2 * 8 * 256 * 2 + 5 * 2 * 8 * 512 * 2
    # per-layer input embeddings (the E2B / E4B models) are not counted: parameters unknown, cache answered
    ple = {**config, "text_config": {**text, "hidden_size_per_layer_input": 256}}
    path.write_text(json.dumps(ple))
    shown = run_json("show", str(path))
    assert shown["params"] is None and shown["kv_bytes_per_token_bf16"] == 225_280
    assert "per-layer input embeddings" in shown["spec"]["params_unknown"]


def test_llamacpp_caches_v_on_k_eq_v_layers():
    # src/models/gemma4.cpp: Vcur = Kcur where the file has no attn_v, normed apart and stored as any V. Gemma 4
    # 26B-A4B at 8,192 tokens: 5 full layers x 8,192 cells x 2 KV heads x 512 x 2 B for K and again for V; 25
    # sliding layers over 1,024 + 512 (one ubatch) cells x 8 x 256 x 2 B each
    out = run_json("cache", "gemma-4-26b-a4b", "--seq", "8192", "--gpu", "rtx-4090", "--engine", "llamacpp")
    parts = {p["cache"]: p for p in out["llamacpp"]["kv_parts"]}
    assert parts["non-SWA"]["k_bytes"] == parts["non-SWA"]["v_bytes"] == 5 * 8192 * 2 * 512 * 2
    assert parts["SWA"]["k_bytes"] == parts["SWA"]["v_bytes"] == 25 * 1536 * 8 * 256 * 2


def test_sglang_says_it_does_not_model_a_split_of_unequal_cells():
    result = run("fit", "gemma-4-26b-a4b", "--gpu", "h100", "--engine", "sglang")
    assert result.exit_code == 2 and "sliding and full layers cache different KV shapes" in result.stderr
    # Gemma 3's equal shapes still get SGLang's hybrid pool
    assert run("fit", "gemma-3-27b", "--gpu", "h100", "--engine", "sglang").exit_code == 0


def test_a_minimal_gemma4_text_config():
    # tests/fixtures/configs/gemma4-global.json: 3 sliding layers of 16 KV heads x 256, one full of 4 x 512;
    # no hidden_size_per_layer_input, so Gemma4TextConfig's default (256) applies: parameters unknown
    shown = run_json("show", FIXTURES / "configs" / "gemma4-global.json")
    assert shown["kv_bytes_per_token_bf16"] == 3 * 2 * 16 * 256 * 2 + 2 * 4 * 512 * 2
    assert shown["params"] is None and "per-layer input embeddings" in shown["spec"]["params_unknown"]


def test_vllm_holds_both_rotary_caches():
    # the sliding layers' default rope (256 wide) and the full layers' proportional rope, which vLLM builds
    # head-wide (Gemma4RotaryEmbedding: rotary_dim = head_size = 512); 262,144 rows each, bf16
    from kvcalc.engines.weights import allocated, weight_bytes

    w = weight_bytes(get_model("gemma-4-26b-a4b"), "bf16", None)
    assert w.rotary_cache == allocated(262_144 * 512 * 2) + allocated(262_144 * 256 * 2)
