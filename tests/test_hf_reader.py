"""config.json families -> the right cache, by hand: one fixture per family, two context lengths each."""

import json

import pytest
from conftest import FIXTURES, run, run_json

CONFIGS = FIXTURES / "configs"

# (fixture, short context, its total bytes, long context beyond any window, its total bytes), batch 1, bf16.
# Each figure is 2 (K, V) x KV heads x head dim x 2 B per layer per token, summed by hand over the layers
# that hold tokens, times the tokens each holds (min(S, W) for windowed layers).
FAMILIES = [
    # llama, num_key_value_heads absent -> MHA: 4 layers x 8 heads x d 32 (256/8): 4,096 B/token
    ("llama2-mha", 100, 100 * 4096, 10_000, 10_000 * 4096),
    # qwen3: explicit head_dim 64 wins over 256/8 = 32: 4 x 2 x 64 x 2 x 2 = 2,048 B/token
    ("qwen3-headdim", 100, 100 * 2048, 5000, 5000 * 2048),
    # gemma3 text_config without head counts -> class defaults 4 KV heads, d 256: 4,096 B/layer/token;
    # 12 layers, every 6th global: 10 sliding (W 1,024) + 2 full
    ("gemma3-nested", 512, 12 * 4096 * 512, 8192, 10 * 4096 * 1024 + 2 * 4096 * 8192),
    # mistral v0.1 style: every layer slides over 64; 2 KV heads x d 32: 256 B/layer/token
    ("mistral-sliding", 32, 4 * 256 * 32, 1000, 4 * 256 * 64),
    # qwen2 use_sliding_window: only layers >= max_window_layers (4) of 6 slide
    ("qwen2-sliding", 32, 6 * 256 * 32, 1000, 4 * 256 * 1000 + 2 * 256 * 64),
    # qwen2_moe as transformers 5 saves it: sliding_window 0 when use_sliding_window is false (Qwen2MoeConfig
    # writes 0, not None), every layer full; 2 KV heads x d 32 (256/8): 256 B/layer/token
    ("qwen2moe-v5-saved", 32, 4 * 256 * 32, 10_000, 4 * 256 * 10_000),
    # gemma2: even layers slide (W 64); 2 KV heads x d 128: 1,024 B/layer/token
    ("gemma2-alternating", 32, 6 * 1024 * 32, 1000, 3 * 1024 * 1000 + 3 * 1024 * 64),
    # gpt-oss layer_types: sliding (W 16) / full alternating; 2 x 32: 256 B/layer/token
    ("gptoss-layer-types", 8, 4 * 256 * 8, 100, 2 * 256 * 100 + 2 * 256 * 16),
    # llama4: chunked (C 128) except every 4th layer (global); 2 x 32: 256 B/layer/token
    ("llama4-chunked", 100, 8 * 256 * 100, 1000, 6 * 256 * 128 + 2 * 256 * 1000),
    # MLA: (kv_lora_rank 64 + rope 16) x 2 B = 160 B/layer/token, 4 layers
    ("deepseek-mla", 100, 4 * 160 * 100, 10_000, 4 * 160 * 10_000),
    # qwen3-next: full attention every 4th of 8 layers; 2 x 64 heads: 512 B/layer/token
    ("qwen3next-hybrid", 100, 2 * 512 * 100, 10_000, 2 * 512 * 10_000),
    # nemotron-h "M-M*-*": 2 attention layers, 2 KV heads x attention_head_dim 32
    ("nemotronh-hybrid", 100, 2 * 256 * 100, 10_000, 2 * 256 * 10_000),
    # falcon-h1: attention in all 4 layers (a Mamba-2 mixer beside each); 2 KV heads x d 32 (256/8): 256 B/layer/token
    ("falcon-h1", 100, 4 * 256 * 100, 10_000, 4 * 256 * 10_000),
    # minimax (MiniMax-01): attn_type_list 0 lightning, 1 full -> layers 1 and 3; 8 KV heads x d 32: 1,024 B/layer/token
    ("minimax-lightning", 100, 2 * 1024 * 100, 10_000, 2 * 1024 * 10_000),
    # jamba: attention at i % 4 == 2 -> layers 2 and 6; 1 KV head x d 32 (128/4): 128 B/layer/token
    ("jamba-hybrid", 100, 2 * 128 * 100, 10_000, 2 * 128 * 10_000),
    # nemotron-nas block_configs: KV heads 8/4, no-op, 8/8, 8/2 -> 2 + 1 + 4 = 7 heads x d 32 x 2 x 2 B
    ("nemotron-nas", 100, 7 * 128 * 100, 10_000, 7 * 128 * 10_000),
    # mllama: layers 1 and 3 of 5 are cross-attention; by default one image of 4 tiles x (40^2 + 1)
    # = 6,404 tokens (vision_config defaults: 560 px, 14 px patches) sits in each cross layer
    ("mllama-cross", 100, 3 * 256 * 100 + 2 * 256 * 6404, 10_000, 3 * 256 * 10_000 + 2 * 256 * 6404),
    # gpt2: n_layer 3, n_head 4, n_embd 128 -> MHA, d 32
    ("gpt2-legacy", 100, 3 * 4 * 32 * 2 * 2 * 100, 1000, 3 * 4 * 32 * 2 * 2 * 1000),
    # bigcode multi_query -> 1 KV head
    ("bigcode-mqa", 100, 3 * 1 * 32 * 2 * 2 * 100, 1000, 3 * 1 * 32 * 2 * 2 * 1000),
    # falcon new_decoder_architecture -> num_kv_heads 4, d 16 (256/16)
    ("falcon-newarch", 100, 3 * 4 * 16 * 2 * 2 * 100, 1000, 3 * 4 * 16 * 2 * 2 * 1000),
    # falcon legacy multi_query -> 1 KV head
    ("falcon-mq", 100, 3 * 1 * 16 * 2 * 2 * 100, 1000, 3 * 1 * 16 * 2 * 2 * 1000),
    # mpt attn_config.kv_n_heads 2, d 32 (256/8)
    ("mpt-gqa", 100, 3 * 2 * 32 * 2 * 2 * 100, 1000, 3 * 2 * 32 * 2 * 2 * 1000),
    # mpt multihead_attention ignores attn_config's kv_n_heads default (1): MHA, 8 heads x d 32
    ("mpt-mha-default-kv", 100, 3 * 8 * 32 * 2 * 2 * 100, 1000, 3 * 8 * 32 * 2 * 2 * 1000),
    # bloom n_head 8 MHA, d 32
    ("bloom-legacy", 100, 3 * 8 * 32 * 2 * 2 * 100, 1000, 3 * 8 * 32 * 2 * 2 * 1000),
    # chatglm multi_query_group_num 2, kv_channels 32
    ("chatglm-mq", 100, 3 * 2 * 32 * 2 * 2 * 100, 1000, 3 * 2 * 32 * 2 * 2 * 1000),
    # qwen 1: MHA, kv_channels 32
    ("qwen1-kvchannels", 100, 3 * 8 * 32 * 2 * 2 * 100, 1000, 3 * 8 * 32 * 2 * 2 * 1000),
    # unknown model_type with every needed field: generic llama rules, 4 KV heads x d 32
    ("unknown-llamalike", 100, 4 * 4 * 32 * 2 * 2 * 100, 1000, 4 * 4 * 32 * 2 * 2 * 1000),
]


@pytest.mark.parametrize(("name", "short", "short_bytes", "long", "long_bytes"), FAMILIES)
def test_family_cache_by_hand(name, short, short_bytes, long, long_bytes):
    path = CONFIGS / f"{name}.json"
    assert run_json("cache", path, "--seq", short)["total_bytes"] == short_bytes
    assert run_json("cache", path, "--seq", long)["total_bytes"] == long_bytes


def test_batch_multiplies_and_source_is_file():
    out = run_json("cache", CONFIGS / "llama2-mha.json", "--batch", "3", "--seq", "100")
    assert out["total_bytes"] == 3 * 100 * 4096
    shown = run_json("show", CONFIGS / "llama2-mha.json")
    assert shown["source"] == "file" and shown["spec"]["name"] == "llama2-mha"


def test_folder_holding_config(tmp_path):
    folder = tmp_path / "my-finetune"
    folder.mkdir()
    (folder / "config.json").write_text((CONFIGS / "qwen3-headdim.json").read_text())
    out = run_json("cache", folder, "--seq", "100")
    assert out["total_bytes"] == 100 * 2048 and out["model"] == "my-finetune"


@pytest.mark.parametrize(
    ("name", "per_layer_state", "layers"),
    [
        # Gated DeltaNet: 4 v-heads x 32 x 32 state + 3 conv steps x (2 x 64 keys + 128 values), bf16
        ("qwen3next-hybrid", (4 * 32 * 32 + 3 * (2 * 64 + 128)) * 2, 6),
        # Mamba-2: 8 heads x 16 x 16 state + 3 conv steps x (128 + 2 x 2 groups x 16)
        ("nemotronh-hybrid", (8 * 16 * 16 + 3 * (128 + 2 * 2 * 16)) * 2, 2),
        # Mamba-1: d_inner 256 x d_state 8 + 3 conv steps x 256
        ("jamba-hybrid", (256 * 8 + 3 * 256) * 2, 6),
        # MiniMax-01's lightning attention: one 32 x 32 state per head, 8 heads, no conv window
        ("minimax-lightning", 8 * 32 * 32 * 2, 2),
        # Falcon-H1's mixer beside every attention layer: 8 heads x 64 x 16 + 3 conv steps x (512 + 2 x 16)
        ("falcon-h1", (8 * 64 * 16 + 3 * (512 + 2 * 16)) * 2, 4),
    ],
)
def test_constant_state_is_separate(name, per_layer_state, layers):
    short = run_json("cache", CONFIGS / f"{name}.json", "--seq", "10", "--batch", "2")
    long = run_json("cache", CONFIGS / f"{name}.json", "--seq", "10000", "--batch", "2")
    assert short["state_bytes"] == long["state_bytes"] == 2 * layers * per_layer_state
    assert long["total_bytes"] == 1000 * short["total_bytes"]  # state is not in total_bytes


def test_weight_dtypes_from_quantization_config():
    assert run_json("show", CONFIGS / "gptq-int4.json")["spec"]["dtype"] == "int4"
    assert run_json("show", CONFIGS / "deepseek-mla.json")["spec"]["dtype"] == "fp8"
    oss = run_json("show", CONFIGS / "gptoss-layer-types.json")["spec"]
    assert (oss["dtype"], oss["expert_dtype"]) == ("bf16", "mxfp4")
    assert run_json("show", CONFIGS / "llama2-mha.json")["spec"]["dtype"] == "fp16"


def test_params_by_hand_for_a_tiny_llama():
    # embeddings 2 x 1000 x 256; per layer attention 4 x 256 x 256 + gated MLP 3 x 256 x 512; norms 9 x 256
    expected = 2 * 1000 * 256 + 4 * (4 * 256 * 256 + 3 * 256 * 512) + 9 * 256
    assert run_json("show", CONFIGS / "llama2-mha.json")["params"]["total"] == expected == 3_135_744


def test_window_override_answers_an_unread_sliding_type():
    # --window says every layer slides: 4 layers x 4 KV heads x 32 x 2 x 2 B = 2,048 B per token, W 16
    out = run_json("cache", CONFIGS / "unknown-sliding.json", "--window", "16", "--seq", "1000")
    assert out["total_bytes"] == 4 * 512 * 16


def test_overrides_fill_and_change():
    out = run_json("cache", CONFIGS / "llama2-mha.json", "--kv-heads", "2", "--seq", "100")
    assert out["total_bytes"] == 100 * 4096 // 4
    out = run_json("cache", CONFIGS / "mistral-sliding.json", "--window", "16", "--seq", "1000")
    assert out["total_bytes"] == 4 * 256 * 16


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("marian-encdec", "'marian' is an encoder-decoder kvcalc does not read yet"),
        ("unknown-sliding", "sliding_window 64 in a 'mystery' config without layer_types: which layers slide"),
        (
            "unknown-missing",
            "no num_hidden_layers / n_layer / n_layers / num_layers in config.json (pass --layers to supply it)",
        ),
    ],
)
def test_refusals_name_file_and_field(name, message):
    result = run("cache", CONFIGS / f"{name}.json")
    assert result.exit_code != 0 and result.stdout == ""
    assert f"{name}.json: " in result.stderr and message in result.stderr
    assert result.stderr.count("\n") == 1


def test_malformed_json_names_line(tmp_path):
    result = run("cache", CONFIGS / "bad")
    assert result.exit_code != 0
    assert "bad/config.json: malformed JSON at line 3" in result.stderr


def test_json_nested_past_the_parser_limit_is_refused_not_a_crash(tmp_path):
    # json raises RecursionError (not a JSONDecodeError) past ~1,000 levels: that was "internal error"
    path = tmp_path / "config.json"
    path.write_text('{"num_hidden_layers": ' + "[" * 100_000 + "]" * 100_000 + "}")
    result = run("cache", path)
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == f"kvcalc: error: {path}: not a model config: JSON nested too deeply to read\n"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_attention_heads": "eight"}, "field num_attention_heads must be an integer, got 'eight'"),
        ({"num_hidden_layers": 0}, "field num_hidden_layers must be positive, got 0"),
        ({"num_key_value_heads": 3}, "num_attention_heads (8) is not divisible by the KV heads (3)"),
        ({"hidden_size": -256}, "field hidden_size must be positive, got -256"),
    ],
)
def test_wrong_values_name_the_field(tmp_path, change, message):
    config = {**json.loads((CONFIGS / "llama2-mha.json").read_text()), **change}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = run("cache", path)
    assert result.exit_code != 0 and f"{path}: " in result.stderr and message in result.stderr


@pytest.mark.parametrize(
    ("change", "message"),
    [
        # each of these reached the arithmetic and ended as "internal error: TypeError" (or a hang on memory)
        ({"num_experts": "x"}, "field num_experts must be a non-negative integer, got 'x'"),
        ({"attn_layer_period": "auto"}, "field attn_layer_period must be a positive integer, got 'auto'"),
        ({"interleave_moe_layer_step": 0}, "field interleave_moe_layer_step must be a positive integer, got 0"),
        ({"layer_types": "full_attention"}, "field layer_types must be a list, got 'full_attention'"),
        ({"mlp_layer_types": [1, 2, 3, 4]}, "field mlp_layer_types must list names, got [1, 2, 3, 4]"),
        ({"mamba_ssm_cache_dtype": 4}, "field mamba_ssm_cache_dtype must be a string, got 4"),
        ({"model_type": ["llama"]}, "field model_type must be a string, got ['llama']"),
        ({"ffn_config": -1}, "field ffn_config must be an object, got -1"),
        ({"num_hidden_layers": 10**12}, "1,000,000,000,000 layers is not a model kvcalc can lay out"),
        # found by inserting every field the reader reads into transformers 5.25's default configs
        ({"num_experts": [{"x": 1}]}, "field num_experts must list non-negative integers, got [{'x': 1}]"),
        ({"moe_num_shared_experts": "x"}, "field moe_num_shared_experts must be a non-negative integer, got 'x'"),
    ],
)
def test_wrongly_typed_fields_are_refused_by_name(tmp_path, change, message):
    config = {**json.loads((CONFIGS / "llama2-mha.json").read_text()), **change}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = run("cache", path)
    assert result.exit_code == 1 and message in result.stderr and "internal error" not in result.stderr
    assert result.stderr.count("\n") == 1


def test_a_llamacpp_quant_applies_to_a_config_as_to_its_preset():
    # --dtype q4_k_m is priced per tensor beside the spec (model/gguf/mix.py); it had been refused for a
    # config.json as an unknown element type, while the preset built from the same file took it
    args = ("roofline", "--gpu", "h100", "--dtype", "q4_k_m", "--batch", "1", "--seq", "8192")
    by_file = run_json(args[0], FIXTURES / "real_configs" / "llama-3.1-70b.json", *args[1:])
    by_preset = run_json(args[0], "llama-3.1-70b", *args[1:])
    assert by_file["rows"] == by_preset["rows"] and by_file["rows"][0]["weight_bytes"] > 0


def test_a_minimax_m3_config_without_its_dense_width_gets_its_cache():
    # 4 layers, the last 3 sparse: K and V of 4 heads x 128 everywhere, a bf16 index key of 128 on the sparse ones;
    # without dense_intermediate_size the parameters are unknown, the cache is answered (tests/test_minimax_m3.py)
    out = run_json("cache", CONFIGS / "minimax-m3-sparse.json", "--seq", "100")
    assert out["bytes_per_token"] == 4 * 2 * 4 * 128 * 2 + 3 * 128 * 2
    assert "dense_intermediate_size" in run_json("show", CONFIGS / "minimax-m3-sparse.json")["spec"]["params_unknown"]


@pytest.mark.parametrize(
    ("fixture", "change", "message"),
    [
        # found by mutating fixture configs: each ended as "internal error: TypeError" where the engine's weights
        # were sized (fit / generate under vLLM)
        ("gptq-int4.json", {"group_size": "abc"}, "quant_method 'gptq' is not understood (group_size='abc'"),
        ("llama2-mha.json", {"vocab_size": None}, "parameters unknown: no vocab_size"),
        ("deepseek-mla.json", {"weight_block_size": {"x": 1}}, "weight_block_size={'x': 1} (two whole numbers)"),
    ],
)
def test_engine_weights_refuse_a_config_by_field(tmp_path, fixture, change, message):
    config = json.loads((CONFIGS / fixture).read_text())
    if {"group_size", "weight_block_size"} & set(change):
        config["quantization_config"] = {**config["quantization_config"], **change}
    else:
        config.update(change)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = run("fit", path, "--gpu", "h100", "--engine", "vllm")
    assert result.exit_code == 1 and message in result.stderr and "internal error" not in result.stderr
    assert result.stderr.count("\n") == 1


def test_a_compressed_tensors_group_of_zero_is_refused_by_field(tmp_path):
    # Kimi-K2.5's int4 experts (config_groups.group_0.weights.group_size 32) with the group set to 0: it had reached
    # the weight bytes as a division by zero
    config = json.loads((FIXTURES / "real_configs" / "kimi-k2.5.json").read_text())
    quant = config.get("quantization_config") or config["text_config"]["quantization_config"]
    quant["config_groups"]["group_0"]["weights"]["group_size"] = 0
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = run("fit", path, "--gpu", "h100", "--tp", "8", "--engine", "vllm")
    assert result.exit_code == 1 and "internal error" not in result.stderr and result.stderr.count("\n") == 1
    assert "quant_method 'compressed-tensors' is not understood (group_size: Input should be greater than 0)" in (
        result.stderr
    )
