"""Vectors beside the matrices: query/key norms, a second norm after each sub-block, attention sinks, router
biases and the shared-expert gate (kvcalc/model/hf/vectors.py). With them a count is the checkpoint's to the
parameter: the totals below are the published safetensors totals of each hub repository.

Before these were counted the counts fell short by exactly these vectors (Qwen3-8B by 36 x 2 x 128 = 9,216,
gpt-oss-120b by 36 x (128 + 64) = 6,912, Gemma 2 9B by 42 x 2 x 3,584 = 301,056); that every shortfall was
exactly the vectors' size is how the published figures check the family facts.
"""

import json

import pytest
from conftest import FIXTURES

from kvcalc.cost.params import param_counts, weight_bytes_resident
from kvcalc.cost.shard import rank_weight_bytes_resident
from kvcalc.engines.weights import weight_bytes
from kvcalc.model.hf.reader import spec_from_config
from kvcalc.model.presets import get_model

REAL = FIXTURES / "real_configs"


@pytest.mark.parametrize(
    "preset, published",
    [
        ("qwen3-4b", 4_022_468_096),  # Qwen/Qwen3-4B
        ("qwen3-8b", 8_190_735_360),  # Qwen/Qwen3-8B
        ("qwen3-14b", 14_768_307_200),  # Qwen/Qwen3-14B
        ("qwen3-32b", 32_762_123_264),  # Qwen/Qwen3-32B
        ("qwen3-30b-a3b", 30_532_122_624),  # Qwen/Qwen3-30B-A3B
        ("qwen3-235b-a22b", 235_093_634_560),  # Qwen/Qwen3-235B-A22B
        ("gpt-oss-20b", 20_914_757_184),  # openai/gpt-oss-20b
        ("gpt-oss-120b", 116_829_156_672),  # openai/gpt-oss-120b
        ("deepseek-v3", 671_026_419_200),  # deepseek-ai/DeepSeek-V3's main model (the MTP module aside)
        ("kimi-k2", 1_026_408_232_448),  # moonshotai/Kimi-K2-Instruct
        ("gemma-2-2b", 2_614_341_888),  # google/gemma-2-2b
        ("gemma-2-9b", 9_241_705_984),  # google/gemma-2-9b
        ("gemma-2-27b", 27_227_128_320),  # google/gemma-2-27b
        ("gemma-3-27b", 27_432_406_640),  # google/gemma-3-27b-it, its vision tower included
        ("gemma-3-4b", 4_300_079_472),  # google/gemma-3-4b-it, its vision tower included
        ("llama-3.2-11b-vision", 10_670_220_835),  # meta-llama/Llama-3.2-11B-Vision
        # pre-Llama: LayerNorm biases, linear biases, parallel blocks (vectors._legacy_fields)
        ("bloom-7b1", 7_069_016_064),  # bigscience/bloom-7b1
        ("starcoder2-7b", 7_173_923_840),  # bigcode/starcoder2-7b
        ("gpt-j-6b", 6_050_882_784),  # EleutherAI/gpt-j-6b
        ("command-r", 34_980_831_232),  # CohereForAI/c4ai-command-r-v01
    ],
)
def test_totals_are_the_checkpoints(preset, published):
    assert param_counts(get_model(preset)).total == published


@pytest.mark.parametrize(
    "preset, published",
    [
        ("llama-2-7b", 6_738_415_616),
        ("llama-2-13b", 13_015_864_320),
        ("llama-2-70b", 68_976_648_192),
        ("llama-3.1-8b", 8_030_261_248),
        ("llama-3.1-70b", 70_553_706_496),
        ("llama-3.1-405b", 405_853_388_800),
        ("llama-3.2-1b", 1_235_814_400),
        ("llama-3.2-3b", 3_212_749_824),
        ("llama-4-scout", 108_641_793_536),  # its vision tower included
        ("llama-4-maverick", 401_583_781_376),  # its vision tower included
        ("mistral-7b-v0.3", 7_248_023_552),
        ("mistral-small-24b", 23_572_403_200),
        ("mixtral-8x7b", 46_702_792_704),
        ("mixtral-8x22b", 140_620_634_112),
        ("qwen2-7b", 7_615_616_512),
        ("qwen2.5-3b", 3_085_938_688),
        ("qwen2.5-7b", 7_615_616_512),
        ("qwen2.5-14b", 14_770_033_664),
        ("qwen2.5-32b", 32_763_876_352),
        ("qwen2.5-72b", 72_706_203_648),
        ("phi-3-mini", 3_821_079_552),
        ("phi-4", 14_659_507_200),
        ("smollm2-135m", 134_515_008),
        ("deepseek-v2-lite", 15_706_484_224),
    ],
)
def test_families_without_vectors_are_exact_too(preset, published):
    # the controls: no vectors beyond the pre-norms, and the same published safetensors totals
    assert param_counts(get_model(preset)).total == published


@pytest.mark.parametrize("preset, published", [("qwen3-0.6b", 751_632_384), ("qwen3-1.7b", 2_031_739_904)])
def test_tied_qwen3_totals_plus_the_stored_head(preset, published):
    # These checkpoints store lm_head.weight beside the tied embedding, and the hub counts it; kvcalc counts a tied
    # table once (it is one tensor in memory), so its total is the published one less vocab x hidden.
    counts = param_counts(get_model(preset))
    assert counts.lm_head == 0
    assert counts.total + counts.embedding == published


def test_head_and_full_width_qk_norms():
    # Qwen3-8B: one 128-wide q_norm and k_norm in each of 36 layers; two 4,096 norms a layer and the final one
    assert param_counts(get_model("qwen3-8b")).norms == (2 * 36 + 1) * 4096 + 36 * 2 * 128
    # OLMo 3 (Olmo3Attention): q_norm over 40 heads x 128, k_norm over 8 KV heads x 128, in each of 64 layers
    assert param_counts(get_model("olmo-3.1-32b")).norms == (2 * 64 + 1) * 5120 + 64 * (40 + 8) * 128


def test_sandwich_norms_gemma():
    # Gemma2DecoderLayer: input, post_attention, pre_feedforward and post_feedforward norms: 4 x 3,584 a layer
    assert param_counts(get_model("gemma-2-9b")).norms == (4 * 42 + 1) * 3584


def test_shared_expert_gate_qwen3_next():
    # Qwen3NextSparseMoeBlock: shared expert of 512 (gate, up, down) and shared_expert_gate (2,048 -> 1) in 48 layers
    counts = param_counts(get_model("qwen3-next-80b-a3b"))
    assert counts.shared_experts == 48 * (3 * 2048 * 512 + 2048)


def _spec(name: str, **change):
    raw = json.loads((REAL / f"{name}.json").read_text())
    return spec_from_config({**raw, **change}, name, f"{name}/config.json")


def test_flags_decide_where_the_family_makes_them_optional():
    # vLLM deepseek_v2.py builds e_score_correction_bias only for topk_method noaux_tc
    assert _spec("kimi-k2-instruct").router_bias
    assert not _spec("kimi-k2-instruct", topk_method="greedy").router_bias
    # MiniMax-M2: use_routing_bias and use_qk_norm (over all heads, qk_norm_type per_layer)
    m2 = _spec("minimax-m2.5")
    assert (m2.router_bias, m2.qk_norm) == (True, "full")
    off = _spec("minimax-m2.5", use_routing_bias=False, use_qk_norm=False)
    assert (off.router_bias, off.qk_norm) == (False, None)
    # one count's difference is the vectors' size: 62 MoE layers x 256 experts, 62 x (48 + 8) x 128
    assert param_counts(m2).total - param_counts(off).total == 62 * 256 + 62 * (48 + 8) * 128


def test_mimo_sinks_on_sliding_layers_only():
    spec = get_model("mimo-v2-flash")
    assert spec.attention_sinks == "sliding"
    without = spec.model_copy(update={"attention_sinks": None})
    # 39 sliding layers x 64 query heads; the 9 full layers have none
    assert param_counts(spec).attention - param_counts(without).attention == 39 * 64


def test_engines_hold_the_vectors():
    # bf16 bytes follow the count: the vectors are in what kvcalc and vLLM's figure hold
    spec = get_model("qwen3-8b")
    plain = spec.model_copy(update={"qk_norm": None})
    assert weight_bytes_resident(spec, "bf16") - weight_bytes_resident(plain, "bf16") == 36 * 2 * 128 * 2
    assert rank_weight_bytes_resident(spec, tp=2) - rank_weight_bytes_resident(plain, tp=2) == 36 * 2 * 128 * 2
    vllm = weight_bytes(spec, "bf16", None).norms - weight_bytes(plain, "bf16", None).norms
    assert vllm == 36 * 2 * 128 * 2
    # gpt-oss-120b's sinks split with the heads under tp 8: 8 of 64 a rank, each layer a tensor of its own
    oss = get_model("gpt-oss-120b")
    no_sinks = oss.model_copy(update={"attention_sinks": None})
    assert weight_bytes(oss, "bf16", None, tp=8).attention - weight_bytes(no_sinks, "bf16", None, tp=8).attention == (
        36 * 512
    )


def test_gptj_by_hand():
    # GPTJBlock: one LayerNorm (weight and bias) before attention and MLP side by side; q, k, v, out_proj without
    # bias; fc_in and fc_out with; ln_f; an LM head with a bias. 28 layers, hidden 4,096, MLP 16,384, vocab 50,400.
    counts = param_counts(get_model("gpt-j-6b"))
    assert counts.norms == (28 + 1) * 2 * 4096
    assert counts.attention == 28 * 4 * 4096 * 4096
    assert counts.dense_mlp == 28 * (2 * 4096 * 16384 + 16384 + 4096)
    assert counts.lm_head == 50400 * 4096 + 50400


def test_bloom_by_hand():
    # BloomBlock: two LayerNorms, query_key_value and dense with biases, dense_h_to_4h / dense_4h_to_h with biases;
    # word_embeddings_layernorm and ln_f; tied head. 30 layers, hidden 4,096, vocab 250,880.
    counts = param_counts(get_model("bloom-7b1"))
    assert counts.norms == (2 * 30 + 2) * 2 * 4096
    assert counts.attention == 30 * (4 * 4096 * 4096 + 4 * 4096)
    assert counts.dense_mlp == 30 * (2 * 4096 * 16384 + 16384 + 4096)
    assert counts.lm_head == 0 and counts.embedding == 250880 * 4096


@pytest.mark.parametrize(
    "preset, published",
    [
        ("qwen2-vl-2b", 2_208_985_600),  # Qwen/Qwen2-VL-2B-Instruct
        ("qwen2.5-vl-7b", 8_292_166_656),  # Qwen/Qwen2.5-VL-7B-Instruct
        ("qwen3-vl-2b", 2_127_532_032),  # Qwen/Qwen3-VL-2B-Instruct
        ("qwen3-vl-4b", 4_437_815_808),  # Qwen/Qwen3-VL-4B-Instruct
        ("qwen3-vl-8b", 8_767_123_696),  # Qwen/Qwen3-VL-8B-Instruct
        ("qwen3-vl-30b-a3b", 31_070_754_032),  # Qwen/Qwen3-VL-30B-A3B-Instruct
    ],
)
def test_qwen_vl_totals_with_their_vision_towers(preset, published):
    assert param_counts(get_model(preset)).total == published


def test_qwen2_vl_tower_by_hand():
    # Qwen2-VL-2B's vision_config: embed_dim 1,280, depth 32, mlp_ratio 4, patches 14 x 14 x 2 frames x 3 channels,
    # merger of 2 x 2 patches (5,120 wide) into the text's 1,536. vLLM splits qkv, fc1 (with their biases), proj and
    # fc2 and the merger's two matrices; LayerNorms (weight and bias), the Conv3d and the row-parallel biases stay whole.
    from kvcalc.model.hf.towers import vision_params

    raw = json.loads((REAL / "qwen2-vl-2b.json").read_text())
    d, inter, wide = 1280, 5120, 5120
    split = 32 * (3 * d * d + 3 * d + d * d + 2 * inter * d + inter) + wide * wide + wide + wide * 1536
    replicated = 32 * (4 * d + d + d) + 3 * 2 * 14 * 14 * d + 1536 + 2 * d
    assert vision_params(raw, raw) == (split, replicated)
    assert param_counts(get_model("qwen2-vl-2b")).extra == split + replicated == 665_271_296


def test_glm45_with_its_mtp_layer_is_the_published_total():
    # zai-org/GLM-4.5 holds 358,337,791,296 parameters with its multi-token-prediction layer (layer 92), which
    # kvcalc leaves out of the model's count. That layer is one more MoE decoder layer (query/key norms, router
    # correction bias and all), eh_proj (2 x 5,120 -> 5,120), enorm, hnorm and shared_head.norm, and its own copies
    # of the embedding and LM head (2 x 151,552 x 5,120): with it the count is the published one to the parameter.
    from kvcalc.cost.params import (
        attention_params,
        expert_params,
        layer_norm_params,
        router_params,
        shared_expert_params,
    )

    spec = get_model("glm-4.5")
    run, h = spec.expanded_layers()[-1], spec.hidden_size
    layer = attention_params(spec, run) + layer_norm_params(spec, run, True)
    layer += spec.experts * expert_params(spec) + router_params(spec) + shared_expert_params(spec)
    mtp = layer + 2 * h * h + 3 * h + 2 * 151_552 * h
    assert param_counts(spec).total + mtp == 358_337_791_296
