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

# A Gemma 4 with per-layer input embeddings and an audio tower (E2B / E4B's kind), every field left to transformers
# 5.25's Gemma4Config defaults but the last 10 layers sharing K and V: 30 layers of 2,304 (8 heads of 256, 4 KV heads,
# a full layer of 512-wide heads every sixth), MLP 9,216, vocabulary 262,144 tied, per-layer inputs 256 wide over a
# 262,144-row table; the default vision tower (16 layers of 768) and audio tower (12 Conformer layers of 1,024).
PLE = FIXTURES / "configs" / "gemma4-ple-audio.json"
VISION_26B = 27 * (4 * 1152 * 16 * 72 + 3 * 1152 * 4304 + 4 * 1152 + 2 * 72) + 3 * 16 * 16 * 1152 + 2 * 10240 * 1152


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
    # the model card's 25.2B total and 3.8B active are the language model's; the vision tower (~550M) comes beside
    assert c.total - c.extra == pytest.approx(25.2e9, rel=0.005) and c.active == pytest.approx(3.8e9, rel=0.01)
    assert c.extra == VISION_26B + 2 * 1152 + 1152 * 2816


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
    # per-layer input embeddings (the E2B / E4B models): 256 wide over Gemma4TextConfig's default 262,144-row table
    ple = {**config, "text_config": {**text, "hidden_size_per_layer_input": 256}}
    path.write_text(json.dumps(ple))
    shown = run_json("show", str(path))
    assert shown["kv_bytes_per_token_bf16"] == 225_280 and shown["spec"]["params_unknown"] is None
    assert shown["params"]["per_layer_table"] == 262144 * 30 * 256
    assert shown["params"]["per_layer_inputs"] == 2816 * 30 * 256 + 256 + 30 * (2 * 2816 * 256 + 2816)


def test_llamacpp_caches_v_on_k_eq_v_layers():
    # src/models/gemma4.cpp: Vcur = Kcur where the file has no attn_v, normed apart and stored as any V. Gemma 4
    # 26B-A4B at 8,192 tokens: 5 full layers x 8,192 cells x 2 KV heads x 512 x 2 B for K and again for V; 25
    # sliding layers over 1,024 + 512 (one ubatch) cells x 8 x 256 x 2 B each
    out = run_json("cache", "gemma-4-26b-a4b", "--seq", "8192", "--gpu", "rtx-4090", "--engine", "llamacpp")
    parts = {p["cache"]: p for p in out["llamacpp"]["kv_parts"]}
    assert parts["non-SWA"]["k_bytes"] == parts["non-SWA"]["v_bytes"] == 5 * 8192 * 2 * 512 * 2
    assert parts["SWA"]["k_bytes"] == parts["SWA"]["v_bytes"] == 25 * 1536 * 8 * 256 * 2


def test_sglang_serves_gemma4_from_0_5_11_with_its_pool_split_by_bytes():
    result = run("fit", "gemma-4-26b-a4b", "--gpu", "h100", "--engine", "sglang", "--engine-version", "0.5.5")
    assert (
        result.exit_code == 2 and "SGLang 0.5.5 has no model class for Gemma4ForConditionalGeneration" in result.stderr
    )
    pool = run_json("fit", "gemma-4-26b-a4b", "--gpu", "h100", "--engine", "sglang", "--engine-version", "0.5.11")[
        "sglang"
    ]
    # 25 sliding layers of 8 KV heads x 256 and 5 full ones of 2 x 512 (K and V both held; 0.5.10's byte split):
    # full = uniform x (F + S) / (F + 0.8 S), one rank's K + V bytes a token over each kind
    f, s_ = 5 * 2 * 512 * 2 * 2, 25 * 8 * 256 * 2 * 2
    uniform = int(pool["available_kv_bytes"] // (f + s_))
    assert pool["max_total_num_tokens"] == int(uniform * (f + s_) / (f + 0.8 * s_))
    assert pool["swa_tokens"] == int(pool["max_total_num_tokens"] * 0.8)


def test_a_minimal_gemma4_text_config():
    # tests/fixtures/configs/gemma4-global.json: 3 sliding layers of 16 KV heads x 256, one full of 4 x 512;
    # no hidden_size_per_layer_input, so Gemma4TextConfig's defaults apply: per-layer inputs 256 wide over 262,144 rows
    shown = run_json("show", FIXTURES / "configs" / "gemma4-global.json")
    assert shown["kv_bytes_per_token_bf16"] == 3 * 2 * 16 * 256 * 2 + 2 * 4 * 512 * 2
    assert shown["params"]["per_layer_table"] == 262144 * 4 * 256
    assert shown["params"]["per_layer_inputs"] == 5376 * 4 * 256 + 256 + 4 * (2 * 5376 * 256 + 5376)


def test_vllm_holds_both_rotary_caches():
    # the sliding layers' default rope (256 wide) and the full layers' proportional rope, which vLLM builds
    # head-wide (Gemma4RotaryEmbedding: rotary_dim = head_size = 512); 262,144 rows each, bf16
    from kvcalc.engines.weights import allocated, weight_bytes

    w = weight_bytes(get_model("gemma-4-26b-a4b"), "bf16", None)
    assert w.rotary_cache == allocated(262_144 * 512 * 2) + allocated(262_144 * 256 * 2)


def test_gemma4_vision_tower_as_vllm_loads_it():
    # gemma4_mm.py: transformers' Gemma4VisionModel (AutoModel.from_config), whole on every rank, then embed_vision's
    # ReplicatedLinear from the tower's 1,152 to the text's 2,816. The 26B-A4B's tower: 27 layers of q / k / v / o
    # (1,152 x 16 heads x 72), a gated MLP of 4,304, four norms and the q / k norms; a 3 x 16 x 16 patch projection,
    # a 2 x 10,240 position table (transformers 5.25 counts these 569,548,080 parameters), and the std_bias / std_scale
    # buffers of a standardizing tower
    from kvcalc.engines.weights import weight_bytes

    assert VISION_26B == 569_548_080
    spec = get_model("gemma-4-26b-a4b")
    held = VISION_26B + 2 * 1152 + 1152 * 2816
    assert spec.checkpoint.vision_params == (0, held)
    assert weight_bytes(spec, "bf16", None, tp=2).extra == held * 2  # bf16, whole on each rank
    v = run_json("fit", "gemma-4-26b-a4b", "--gpu", "h100", "--engine", "vllm", "--seq", "8192")["vllm"]
    assert not any("vision encoder's weights" in u for u in v["not_sized"])


def test_gemma4_per_layer_embeddings_and_audio_tower_by_hand():
    from kvcalc.engines.vllm.memory import Settings, predict
    from kvcalc.engines.weights import allocated
    from kvcalc.model.hf.reader import spec_from_config
    from kvcalc.model.presets import get_gpu

    spec = spec_from_config(json.loads(PLE.read_text()), "g", PLE.name)
    c = param_counts(spec)
    # Gemma4TextModel: embed_tokens_per_layer (262,144 x 30 x 256), per_layer_model_projection (2,304 -> 30 x 256)
    # and its 256-wide norm; in each layer per_layer_input_gate, per_layer_projection and post_per_layer_input_norm
    assert c.per_layer_table == 262144 * 30 * 256
    assert c.per_layer_inputs == 2304 * 30 * 256 + 256 + 30 * (2 * 2304 * 256 + 2304)
    # the audio tower: 12 layers of 24 h^2 + (kernel 5 + 9) h + h / 8 heads, the 128- and 32-channel 3 x 3 sub-sampling
    # convs with their norms and the (128 // 4) x 32 -> 1,024 projection, output_proj to 1,536 with its bias, then
    # embed_audio's 1,536 -> 2,304; the vision tower: 16 layers of 768 (12 heads x 64), MLP 3,072; embed_vision 768 -> 2,304
    audio = 12 * (24 * 1024**2 + 14 * 1024 + 128) + 9 * 128 + 128 + 9 * 128 * 32 + 32 + 32 * 32 * 1024
    audio += 1536 * 1024 + 1536 + 1536 * 2304
    vision = 16 * (4 * 768 * 768 + 3 * 768 * 3072 + 4 * 768 + 2 * 64) + 3 * 256 * 768 + 2 * 10240 * 768 + 768 * 2304
    assert c.extra == audio + vision
    # transformers 5.25 builds 5,498,049,312 parameters from this file; kvcalc counts the k_norm weights that vLLM
    # builds on the 10 KV-sharing layers too (8 sliding of 256, 2 full of 512), which transformers leaves out
    assert c.total == 5_498_049_312 + 8 * 256 + 2 * 512
    assert c.active_excl_embedding == c.active - c.per_layer_table  # the table is looked up, not multiplied
    # vLLM: the table vocab-parallel, the projection column-parallel, each layer's gate and projection whole; and the
    # per-layer inputs buffer gemma4_mm.py makes at load, max_num_batched_tokens x 30 x 256 x 2 B
    # (PyTorch's allocator books the 35,389,440-B projection its whole 2 MiB-rounded segment)
    w1 = predict(spec, get_gpu("h100"), Settings()).weights
    layer = 2 * 2304 * 256 * 2 + 2304 * 2
    assert w1.per_layer_inputs == 262144 * 30 * 256 * 2 + allocated(2304 * 30 * 256 * 2) + 512 + 30 * layer
    assert allocated(2304 * 30 * 256 * 2) == 17 * 2 * 2**20
    terms = predict(spec, get_gpu("h100"), Settings())
    assert terms.weights_bytes == w1.total + 8192 * 30 * 256 * 2
    text_only = spec.model_copy(update={"architecture": "Gemma4ForCausalLM"})
    assert predict(text_only, get_gpu("h100"), Settings()).weights_bytes == w1.total  # no buffer without the wrapper
    w2 = predict(spec, get_gpu("h100"), Settings(tp=2)).weights
    assert w2.per_layer_inputs == 262144 * 30 * 256 + allocated(2304 * 15 * 256 * 2) + 512 + 30 * layer
    # an L4 (under 70 GiB): vLLM's budget of 2,048 batched tokens sizes the buffer
    fit = run_json("fit", PLE, "--gpu", "l4", "--engine", "vllm", "--seq", "8192")["vllm"]
    l4 = predict(spec, get_gpu("l4"), Settings(max_num_seqs=256, max_num_batched_tokens=2048))
    assert fit["weights_bytes"] == l4.weights_bytes == l4.weights.total + 2048 * 30 * 256 * 2
    # the profiling forward holds the projected per-layer inputs (tokens x 30 x 256, gathered whole) through the layers
    from kvcalc.engines.vllm.memory import forward_peak_bytes

    bare = spec.model_copy(update={"per_layer_input": 0})
    assert forward_peak_bytes(spec, 2, 8192, 2, range(30)) - forward_peak_bytes(bare, 2, 8192, 2, range(30)) == (
        8192 * 30 * 256 * 2
    )
    # llama.cpp from config.json: the table is an input-layer tensor beside token_embd (mapped on the CPU), not a
    # layer's weights
    from kvcalc.engines.llamacpp.buffers import spec_tensors

    rows = {t.name: t.nbytes for t in spec_tensors(spec)}
    assert rows["per_layer_token_embd.weight"] == 262144 * 30 * 256 * 2
    assert rows["blk.0.weights"] == (c.total - c.embedding - c.extra - c.per_layer_table) // 30 * 2
