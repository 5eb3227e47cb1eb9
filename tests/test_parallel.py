"""Parallel deployments: valid splits, one rank's shard, the pipeline split, communication (kvcalc/parallel.py)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from conftest import run, run_json
from hypothesis import given
from hypothesis import strategies as st

from kvcalc.cost.kvcache import bytes_per_token
from kvcalc.cost.params import compute_params, weight_bytes_read, weight_bytes_resident
from kvcalc.cost.shard import (
    LINKS,
    allreduce_seconds,
    allreduce_wire_bytes,
    allreduces_per_step,
    check_pp,
    check_tp,
    parse_interconnect,
    pp_indices,
    pp_partition,
    rank_compute_params,
    rank_weight_bytes_read,
    rank_weight_bytes_resident,
    valid_tp,
)
from kvcalc.errors import UsageError
from kvcalc.model.presets import MODEL_DIR, get_model, preset_names


def test_llama3_70b_weights_per_gpu_tp2_and_tp8():
    # Llama-3-70B: 80 layers, hidden 8192, 64 query heads, 8 KV heads, head dim 128, MLP 28672,
    # vocab 128256, untied, bf16 (2 B). Per layer at tp t (t <= 8):
    #   Q and O 2 x 8192 x 64 x 128 / t, K and V 2 x 8192 x 128 x (8 / t), MLP 3 x 8192 x 28672 / t,
    #   two norms 2 x 8192 whole; plus embedding and LM head 2 x 128256 x 8192 / t and the final norm 8192.
    spec = get_model("llama-3-70b")
    tp2 = 80 * (134_217_728 // 2 + 16_777_216 // 2 + 704_643_072 // 2 + 16_384) + 2 * 128_256 * 8192 // 2 + 8192
    assert tp2 == 35_277_512_704
    assert rank_weight_bytes_resident(spec, tp=2) == 2 * tp2 == 70_555_025_408
    tp8 = 80 * (134_217_728 // 8 + 16_777_216 // 8 + 704_643_072 // 8 + 16_384) + 2 * 128_256 * 8192 // 8 + 8192
    assert rank_weight_bytes_resident(spec, tp=8) == 2 * tp8 == 17_640_734_720
    # KV per GPU: 2 (K, V) x 80 layers x (8 / t) heads x 128 x 2 B per token.
    assert bytes_per_token(spec, "bf16", 2) == 2 * 80 * 4 * 128 * 2 == 163_840
    assert bytes_per_token(spec, "bf16", 8) == 2 * 80 * 1 * 128 * 2 == 40_960


def test_deepseek_v3_tp8_latent_whole_experts_split():
    # DeepSeek-V3 (fp8 block-scaled: 1 B a weight plus one 4-byte scale per 128 x 128 block, so
    # 1 + 4/16384 B per linear parameter; embedding and LM head stay bf16): hidden 7168, 128 heads,
    # q_lora 1536, kv_lora 512, rope 64, nope 128, v 128.
    # MLA on one rank: replicated q_a (7168 x 1536 + 1536 norm) and kv_a (7168 x 576 + 512 norm) = 15,140,864;
    # split: q_b 1536 x 128 x 192 + kv_b 512 x 128 x 256 + o 128 x 128 x 7168 = 171,966,464, / 8 = 21,495,808.
    mla = 7168 * 1536 + 1536 + 7168 * 576 + 512 + (1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * 7168) // 8
    assert mla == 36_636_672
    dense_mlp = 3 * 7168 * 18432 // 8  # first 3 layers
    # MoE layers (58): router 7168 x 256 and its correction bias (256) whole, shared expert 3 x 7168 x 2048 / 8,
    # 256 experts each / 8.
    moe = 7169 * 256 + 3 * 7168 * 2048 // 8 + 256 * 3 * 7168 * 2048 // 8
    linear = 61 * (mla + 2 * 7168) + 3 * dense_mlp + 58 * moe  # parameters in the fp8 format
    ends = 2 * 129_280 * 7168 // 8 + 7168  # embedding and LM head / 8, final norm: parameters in bf16
    expected = Fraction(linear) * (1 + Fraction(4, 128 * 128)) + 2 * ends
    spec = get_model("deepseek-v3")
    assert rank_weight_bytes_resident(spec, tp=8) == math.ceil(expected) == 85_032_675_816
    # The latent is cached whole on every rank: 61 x (512 + 64) x 2 B per token at tp 1 and at tp 8.
    assert bytes_per_token(spec, "bf16", 8) == bytes_per_token(spec, "bf16", 1) == 61 * 576 * 2


def test_mixtral_tp2_each_rank_half_of_every_expert():
    # Mixtral-8x7B bf16: 32 layers, hidden 4096, 32 heads, 8 KV heads, head 128, 8 experts of 3 x 4096 x 14336.
    per_layer = 2 * 4096 * 32 * 128 // 2 + 2 * 4096 * 128 * 4 + 2 * 4096 + 4096 * 8 + 8 * 3 * 4096 * 14336 // 2
    expected = 2 * (32 * per_layer + 2 * 32_000 * 4096 // 2 + 4096)
    spec = get_model("mixtral-8x7b")
    assert rank_weight_bytes_resident(spec, tp=2) == expected == 46_704_107_520
    # One token reaches 2 of 8 experts per layer; each rank reads its half of those two.
    read_one = rank_weight_bytes_read(spec, 1, tp=2)
    dense = 2 * (32 * (per_layer - 8 * 3 * 4096 * 14336 // 2) + 4096 * 1 // 2 + 32_000 * 4096 // 2 + 4096)
    assert read_one == dense + 2 * 32 * 2 * 3 * 4096 * 14336 // 2


@pytest.mark.parametrize("name", preset_names(MODEL_DIR))
def test_one_rank_one_stage_is_the_whole_model(name):
    # params.py counts the model independently (by component); one rank of one stage must hold,
    # read and multiply exactly that. This caught the output gate of Qwen3-Next / Qwen3.5 and the
    # k/v projections of Hunyuan's KV-sharing layers (see the two tests below).
    spec = get_model(name)
    assert rank_weight_bytes_resident(spec) == weight_bytes_resident(spec)
    for tokens in (1, 7, 512):
        assert rank_weight_bytes_read(spec, tokens) == weight_bytes_read(spec, tokens)
    assert rank_compute_params(spec) == compute_params(spec)


def test_qwen3_next_output_gate_is_split_like_q():
    # Qwen3-Next-80B-A3B: q_proj is 2 x 16 heads x 256 wide (queries and a per-head output gate,
    # transformers Qwen3NextAttention), split by heads. Its 12 full-attention layers (every 4th of
    # 48) at tp 2 each hold 2048 x 16 x 256 / 2 = 4,194,304 gate parameters per rank, bf16:
    # 12 x 4,194,304 x 2 B = 100,663,296 B more than the same model without the gate.
    spec = get_model("qwen3-next-80b-a3b")
    plain = spec.model_copy(update={"attn_output_gate": False})
    gate = 12 * 2048 * 16 * 256 // 2 * 2
    assert gate == 100_663_296
    assert rank_weight_bytes_resident(spec, tp=2) - rank_weight_bytes_resident(plain, tp=2) == gate
    # FLOPs: one token multiplies through the gate slice too.
    assert rank_compute_params(spec, tp=2) - rank_compute_params(plain, tp=2) == gate // 2


def test_hunyuan_kv_sharing_layers_hold_no_kv_projections():
    # Hunyuan-Large: 32 of its 64 layers reuse the previous layer's K and V (cross-layer attention),
    # so they have no k_proj / v_proj. At tp 4 a KV-computing layer holds 2 x 6400 x (8 / 4) x 80
    # = 2,048,000 k/v parameters per rank; the sharing ones none: 32 x 2,048,000 x 2 B = 131,072,000 B
    # less than if every layer computed its own K and V.
    spec = get_model("hunyuan-large")
    unshared = spec.model_copy(
        update={"layer_pattern": [r.model_copy(update={"kv_shared": False}) for r in spec.layer_pattern]}
    )
    assert sum(r.kv_shared for r in spec.expanded_layers()) == 32
    assert rank_weight_bytes_resident(unshared, tp=4) - rank_weight_bytes_resident(spec, tp=4) == 131_072_000


@pytest.mark.parametrize("name", ["llama-3-70b", "mixtral-8x7b", "qwen3-30b-a3b"])
def test_stages_hold_the_layers_once(name):
    # Untied models: the pipeline stages together hold exactly the whole model.
    spec = get_model(name)
    for pp in (2, 3, 4):
        assert sum(rank_weight_bytes_resident(spec, 1, s, pp) for s in range(pp)) == pytest.approx(
            weight_bytes_resident(spec), abs=pp
        )


def test_pp_split_of_an_odd_layer_count():
    # vLLM get_pp_indices: 61 // 4 = 15 each, remainder 1 to the stage before the last.
    assert pp_partition(61, 4) == [15, 15, 16, 15]
    assert pp_partition(5, 2) == [3, 2]  # the remainder never goes to the last stage
    assert pp_partition(80, 3) == [27, 27, 26]
    assert pp_indices(61, 2, 4) == (30, 46)


@given(st.integers(1, 200), st.integers(1, 64))
def test_pp_partition_laws(layers, pp):
    if pp > layers:
        with pytest.raises(UsageError):
            pp_partition(layers, pp)
        return
    parts = pp_partition(layers, pp)
    assert sum(parts) == layers and max(parts) - min(parts) <= 1 and parts[-1] == layers // pp
    assert [pp_indices(layers, r, pp) for r in range(pp)] == [(sum(parts[:r]), sum(parts[: r + 1])) for r in range(pp)]


def test_tp_validity_follows_vllm():
    llama8b = get_model("llama-3-8b")  # 32 query heads, 8 KV heads
    assert valid_tp(llama8b) == [1, 2, 4, 8, 16, 32]
    for bad in (3, 6, 0):
        with pytest.raises(UsageError):
            check_tp(llama8b, bad)
    check_tp(llama8b, 16)  # a multiple of the 8 KV heads: each replicated twice
    qwen = get_model("qwen2.5-7b")  # 28 query heads, 4 KV heads
    with pytest.raises(UsageError, match="KV heads"):
        check_tp(qwen, 7)  # divides 28 but neither divides 4 nor is a multiple of it
    check_tp(get_model("deepseek-v3"), 128)  # MLA: only the query heads constrain it
    with pytest.raises(UsageError, match="exceeds"):
        check_pp(llama8b, 33)


def test_allreduce_llama3_70b_tp4_nvlink4():
    # One decode step at batch 1: each all-reduce carries 1 x 8192 hidden x 2 B = 16,384 B; a ring
    # sends 2 x 3/4 of it = 24,576 B each way over NVLink 4's 450 GB/s one direction, after alpha 3.7 us.
    link = LINKS["nvlink4"]
    assert allreduce_wire_bytes(16_384, 4) == 24_576
    one = allreduce_seconds(16_384, 4, link)
    assert one == pytest.approx(3.7e-6 + 24_576 / 450e9)
    # Two per layer (after attention, after the MLP), 80 layers: 160 x 3.7546 us = 600.7 us per step.
    assert 160 * one == pytest.approx(600.74e-6, rel=1e-4)
    assert allreduce_seconds(16_384, 1, link) == 0.0


def test_parse_interconnect():
    assert parse_interconnect("NVLink4").bandwidth_bytes_per_s == 450e9
    assert parse_interconnect("200GB/s").bandwidth_bytes_per_s == 200e9
    with pytest.raises(UsageError):
        parse_interconnect("warp-drive")


@pytest.mark.parametrize(
    "args",
    [
        ("cache", "llama-3-8b", "--tp", "3"),
        ("fit", "qwen2.5-7b", "--gpu", "l4", "--gpus", "7"),
        ("fit", "llama-3-70b", "--gpu", "h100", "--tp", "3"),
    ],
)
def test_invalid_split_is_one_line(args):
    result = run(*args)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_max_position_embeddings_read_from_config():
    from kvcalc.model.hf.reader import spec_from_config

    config = {
        "model_type": "llama",
        "num_hidden_layers": 2,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "max_position_embeddings": 8192,
    }
    assert spec_from_config(config, "t", "t.json").max_position_embeddings == 8192
    assert spec_from_config({**config, "max_position_embeddings": None}, "t", "t.json").max_position_embeddings is None


def test_allreduces_follow_the_blocks_a_layer_has():
    # Megatron-style tensor parallelism all-reduces after each row-parallel block: attention, then MLP.
    assert allreduces_per_step(get_model("llama-3-70b")) == 2 * 80
    # Nemotron-H-56B: each of its 118 layers is ONE block (Mamba-2, attention or MLP; vLLM
    # nemotron_h.py gives each one RowParallelLinear), so 118 all-reduces, not 236.
    spec = get_model("nemotron-h-56b")
    assert all(
        (r.mixer_params != 0 or r.kind.value == "full") != bool(r.intermediate_size) for r in spec.expanded_layers()
    )
    assert allreduces_per_step(spec) == 118
    # Whisper-tiny's 4 decoder layers: self-attention, cross-attention and MLP, 3 each (kvcalc
    # models each as a self-attention layer without MLP and a cross-attention layer with one).
    assert allreduces_per_step(get_model("whisper-tiny")) == 4 * 3
    # The count is remembered per spec object; a what-if copy is counted anew, not read from the memo.
    llama = get_model("llama-3-70b")
    assert allreduces_per_step(llama.with_changes(num_layers=40)) == 2 * 40
    assert allreduces_per_step(llama) == 2 * 80
    # In the step: batch 1 on 4 x H100 moves 8192 x 2 B = 16,384 B per all-reduce,
    # alpha 3.7 us + 2 x 3/4 x 16,384 B / 450 GB/s each.
    out = run_json("roofline", "nemotron-h-56b", "--gpu", "h100", "--batch", "1", "--seq", "1k", "--tp", "4")
    assert out["rows"][0]["comm_seconds"] == pytest.approx(118 * (3.7e-6 + 24_576 / 450e9))


def test_allreduce_message_in_the_dtype_the_matmuls_run_at():
    # Whisper-tiny is an fp32 checkpoint (hidden 384, 12 all-reduces a step: 4 decoder layers x
    # self-attention, cross-attention, MLP). Run in fp32 a batch of 64 sends 64 x 384 x 4 = 98,304 B
    # per all-reduce; given --dtype bf16 the activations are bf16, 49,152 B. At tp 2 a ring sends
    # 2 x 1/2 of the message over NVLink 4's 450 GB/s, after alpha 3.7 us.
    for dtype, message in ((None, 98_304), ("bf16", 49_152)):
        args = ("--dtype", dtype) if dtype else ()
        out = run_json("roofline", "whisper-tiny", "--gpu", "h100", "--tp", "2", "--batch", "64", "--seq", "100", *args)
        assert out["rows"][0]["comm_seconds"] == pytest.approx(12 * (3.7e-6 + message / 450e9))


def test_full_mesh_links_limit_a_small_tensor_parallel_group():
    # MI300X boards are a switchless full mesh: 7 Infinity Fabric links of 64 GB/s each way, one to
    # each peer (../shared/reference/gpus.yaml: 896 GB/s bidirectional aggregate, 64 GB/s per peer
    # each way). A tp group of t GPUs uses the t - 1 links to its members: 64 GB/s at tp 2, 192 at
    # tp 4, all 448 at tp 8. Llama-3-70B at batch 64 all-reduces 64 x 8192 x 2 = 1,048,576 B, 160 times.
    msg = 64 * 8192 * 2
    for tp, bandwidth in ((2, 64e9), (4, 192e9), (8, 448e9)):
        out = run_json("roofline", "llama-3-70b", "--gpu", "mi300x", "--tp", str(tp), "--batch", "64", "--seq", "1k")
        assert out["rows"][0]["comm_seconds"] == pytest.approx(160 * (3.7e-6 + 2 * (tp - 1) / tp * msg / bandwidth))
    # Behind a switch (NVLink 4 on H100) every group size gets the whole 450 GB/s.
    assert LINKS["nvlink4"].group_bandwidth(2) == LINKS["nvlink4"].group_bandwidth(8) == 450e9
    assert LINKS["infinity-fabric"].group_bandwidth(2) == pytest.approx(64e9)


def test_quantized_dtype_keeps_embedding_and_lm_head_16_bit():
    # vLLM's --quantization fp8 (and llm-compressor checkpoints) quantize the LinearBase layers; the
    # vocabulary-parallel embedding and LM head stay in the activation dtype. Llama-3-8B: hidden 4096,
    # 32 layers, 32 heads, 8 KV heads x 128, MLP 14336, vocabulary 128256, untied.
    spec = get_model("llama-3-8b")
    attention = 4096 * (4096 + 2 * 1024) + 4096 * 4096  # q, k, v and o
    linear = 32 * (attention + 3 * 4096 * 14336 + 2 * 4096)  # with the layers' two norms
    assert linear == 6_979_584_000
    ends = 2 * 128_256 * 4096 + 4096  # embedding, LM head, final norm
    # fp8 (per-channel scales, one per output row: not counted): 1 B per linear parameter.
    assert rank_weight_bytes_resident(spec, dtype="fp8") == linear + 2 * ends == 9_080_938_496
    assert weight_bytes_resident(spec, "fp8") == 9_080_938_496
    # One decode token reads every linear weight, the LM head, its embedding row and the final norm.
    read = linear + 2 * (128_256 * 4096 + 4096 + 4096)
    assert rank_weight_bytes_read(spec, 1, dtype="fp8") == weight_bytes_read(spec, 1, "fp8") == read == 8_030_273_536
    # int4 as GPTQ/AWQ store it: 0.5 B per weight plus a 2-byte scale per 128 = 0.515625 B.
    assert weight_bytes_resident(spec, "int4") == linear * 33 // 64 + 2 * ends == 5_700_202_496
    # A float dtype applies to every weight.
    assert weight_bytes_resident(spec, "bf16") == 2 * (linear + ends)
    assert weight_bytes_resident(spec, "fp32") == 4 * (linear + ends)


def test_kv_sharing_layers_hold_no_cache_but_read_their_source():
    # Hunyuan-Large (cross-layer attention, factor 2): 64 layers, 8 KV heads x 80, half of the layers
    # reuse the previous layer's K and V. At tp 8 a rank holds 1 KV head: per token 32 caching layers
    # x 2 x 80 x 2 B = 10,240 B held, but all 64 layers attend, so a decode step reads 20,480 B a token.
    spec = get_model("hunyuan-large")
    assert bytes_per_token(spec, "bf16", 8) == 32 * 2 * 80 * 2 == 10_240
    out = run_json("roofline", "hunyuan-large", "--gpu", "h100", "--tp", "8", "--seq", "8k")
    assert out["rows"][0]["kv_bytes"] == 64 * 2 * 80 * 2 * 8192 == 167_772_160
    assert "reading an earlier layer's K and V" in run("show", "hunyuan-large").stdout


def test_divisors_by_hand_and_for_a_header_of_ten_billion_heads():
    from kvcalc.cost.kvcache import _divisors

    assert _divisors(1) == [1] and _divisors(12) == [1, 2, 3, 4, 6, 12] and _divisors(49) == [1, 7, 49]
    assert _divisors(64) == [2**k for k in range(7)] and _divisors(97) == [1, 97]
    # 10^10 = 2^10 x 5^10: 11 x 11 divisors (a GGUF header's head_count had taken the counting loop minutes)
    big = _divisors(10**10)
    assert len(big) == 121 and big[:4] == [1, 2, 4, 5] and big[-1] == 10**10
    assert all(10**10 % d == 0 for d in big) and big == sorted(set(big))
