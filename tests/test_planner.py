"""fit / generate / --engine vllm: hand-derived figures, vLLM's logged numbers, and clear refusals."""

import json
import math
import re
from fractions import Fraction

import pytest
from conftest import GiB, run, run_json, shared_path

from kvcalc.plan.generate import concat_positions

H100_CAPACITY = 85_030_000_000  # gpu_presets/h100.yaml: 79.19 GiB, as vLLM 0.19 saw it


def test_llama3_70b_on_two_h100_at_8k():
    # --engine none: the bare arithmetic with the flat 2 GiB reserve (test_plain_fit_reserve_is_vllms: the default)
    out = run_json("fit", "llama-3-70b", "--gpu", "h100", "--gpus", "2", "--seq", "8k", "--engine", "none")
    # params: embeddings 2 x 128,256 x 8,192 + 80 x (attention 150,994,944 + MLP 3 x 8,192 x 28,672) + 161 norms x 8,192
    params = 2 * 128256 * 8192 + 80 * (2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672) + 161 * 8192
    assert params == 70_553_706_496
    per_gpu = out["per_gpu"]
    # bf16, the matrices, embedding and LM head split over 2 ranks; the 161 norms whole on each
    weights = (params - 161 * 8192) * 2 // 2 + 161 * 8192 * 2
    assert per_gpu["weight_bytes"] == weights == 70_555_025_408
    assert out["kv_heads_per_rank"] == 4 and not out["kv_heads_replicated"]
    kv_per_token_per_rank = 80 * 2 * 4 * 128 * 2
    assert kv_per_token_per_rank == 163_840
    assert per_gpu["kv_bytes"] == 8192 * kv_per_token_per_rank
    budget = int(H100_CAPACITY * 0.9)
    assert per_gpu["budget_bytes"] == budget and per_gpu["reserve_bytes"] == 2 * GiB
    available = budget - weights - 2 * GiB
    assert out["max_batch"] == available // (8192 * kv_per_token_per_rank) == 2
    assert out["fits"] is True
    assert out["kv_capacity_tokens"] == available // (16 * kv_per_token_per_rank) * 16
    assert out["max_concurrency"] == pytest.approx(available / (8192 * kv_per_token_per_rank))


def test_plain_fit_reserve_is_vllms():
    # Issue 20: the README's 2 x H100 example gave 23,328 tokens with a flat 2 GiB where vLLM 0.19 gives
    # 9,824 (9,808 since the preset carries Meta-Llama-3-70B's max_position_embeddings, 8,192, and vLLM's
    # rotary cos/sin cache is sized: one 16-token block less). Without --reserve or --engine, fit keeps what
    # vLLM keeps beside the weights on this layout (profiling peak + non-torch memory, 1.85 GiB of NCCL NVLS
    # buffers at tp 2 on NVSwitch).
    plain = run_json("fit", "llama-3-70b", "--gpu", "h100", "--gpus", "2", "--seq", "8k")
    vllm = run_json("fit", "llama-3-70b", "--gpu", "h100", "--gpus", "2", "--seq", "8k", "--engine", "vllm")
    assert plain["per_gpu"]["reserve_bytes"] == vllm["vllm"]["profile_peak_bytes"] + vllm["vllm"]["non_torch_bytes"]
    # the plain fit's weights are the parameters; vLLM's as loaded hold its 2 MiB rotary cos/sin cache too (8,192
    # positions x 128 x bf16), one 16-token block (80 layers x 2 KV heads x 128 x 2 x 2 B a token = 1.25 MiB)
    assert plain["kv_capacity_tokens"] == 9824 and vllm["vllm"]["kv_cache_tokens"] == 9808
    assert "vLLM 0.19" in plain["accounting"]
    bare = run_json("fit", "llama-3-70b", "--gpu", "h100", "--gpus", "2", "--seq", "8k", "--engine", "none")
    assert bare["kv_capacity_tokens"] == 23328 and bare["per_gpu"]["reserve_bytes"] == 2 * GiB


def test_tp_beyond_kv_heads_replicates():
    naive = run_json("cache", "llama-3-70b", "--seq", "8k", "--tp", "1")["total_bytes"] / 16
    out = run_json("fit", "llama-3-70b", "--gpu", "h200", "--tp", "16", "--seq", "8k")
    assert out["kv_heads_per_rank"] == 1 and out["kv_heads_replicated"] is True
    assert out["per_gpu"]["kv_bytes"] == 2 * naive == 8192 * 80 * 2 * 1 * 128 * 2
    table = run("fit", "llama-3-70b", "--gpu", "h200", "--tp", "16").stdout
    assert "Replicated KV heads" in table


def test_deepseek_v3_keeps_whole_latent_per_rank():
    tp1 = run_json("cache", "deepseek-v3", "--seq", "8k")
    tp8 = run_json("fit", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--seq", "8k", "--kv-dtype", "bf16")
    assert tp8["per_gpu"]["kv_bytes"] == tp1["total_bytes"] == 8192 * 61 * (512 + 64) * 2
    assert tp8["kv_heads_replicated"] is False


def test_tp_must_divide_query_heads():
    result = run("fit", "llama-3-70b", "--gpu", "h100", "--tp", "3")
    assert result.exit_code != 0
    assert (
        "tensor parallelism 3 does not divide llama-3-70b's 64 query heads (allowed: 1, 2, 4, 8, 16, 32, 64)"
        in result.stderr
    )


def test_model_that_does_not_fit_says_so():
    # One behaviour for "does not fit": the table, a verdict saying what is over and by how much, exit 3.
    result = run("fit", "llama-3-70b", "--gpu", "h100", "--engine", "none")
    assert result.exit_code == 3 and result.stderr == ""
    assert "DOES NOT FIT" in result.stdout
    assert (
        "DOES NOT FIT on one h100: weights 131.42 GiB + reserve 2 GiB per GPU exceed the 71.27 GiB budget"
        in " ".join(result.stdout.split())
    )
    out = json.loads(run("fit", "llama-3-70b", "--gpu", "h100", "--format", "json").stdout)
    assert out["fits"] is False and out["ok"] is False and out["verdict"].startswith("DOES NOT FIT")


def test_block_rounding():
    one = run_json("fit", "llama-3-8b", "--gpu", "h100", "--seq", "17")["per_gpu"]["kv_bytes"]
    assert one == 32 * 131072  # 17 tokens take two blocks of 16
    assert (
        run_json("fit", "llama-3-8b", "--gpu", "h100", "--seq", "17", "--block-size", "1")["per_gpu"]["kv_bytes"]
        == 17 * 131072
    )


def test_mixtral_decode_bytes_follow_the_expert_formula():
    expert_bytes = 3 * 4096 * 14336 * 2
    lm_head, attention = 32000 * 4096, 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024)
    router, norms = 32 * 4096 * 8, 65 * 4096

    def expected(batch):
        dense = (batch * 4096 + lm_head + attention + router + norms) * 2  # B embedding rows + the rest, bf16
        experts = 32 * 8 * (1 - (1 - Fraction(2, 8)) ** batch) * expert_bytes
        return dense + math.ceil(experts)

    out = run_json("roofline", "mixtral-8x7b", "--gpu", "h100", "--batch", "1,64")
    b1, b64 = out["rows"]
    assert (
        b1["weight_bytes"] == expected(1) == (4096 + lm_head + attention + router + norms) * 2 + 32 * 2 * expert_bytes
    )
    assert b64["weight_bytes"] == expected(64)
    dense64 = (64 * 4096 + lm_head + attention + router + norms) * 2
    assert (b64["weight_bytes"] - dense64) / (32 * 8 * expert_bytes) > 0.9999  # batch 64 reaches nearly all 8 experts
    # The ceiling reads the 2 experts a layer of tokens routed alike (identical prompts), the fewest any step reads
    assert b1["ceiling_weight_bytes"] is None
    assert b64["ceiling_weight_bytes"] == dense64 + 32 * 2 * expert_bytes
    assert b64["step_seconds"] >= (dense64 + 32 * 2 * expert_bytes + b64["kv_bytes"]) / 3.35e12
    assert b64["step_seconds"] < (b64["weight_bytes"] + b64["kv_bytes"]) / 3.35e12


def test_identical_prompts_do_not_beat_the_moe_ceiling():
    # TensorRT-LLM 0.9's perf table: Mixtral 8x7B fp16 on 2 x A100, batch 32, 2,048 + 2,048 tokens, 801 output
    # tokens/s per GPU (1,602 in all). gptSessionBenchmark sends every sequence the same pad token, so every token
    # routes to the same 2 experts; read as uniform routing (all 8 experts a step), the ceiling was 1,157 tokens/s.
    out = run_json(
        "generate", "mixtral-8x7b", "--gpu", "a100", "--tp", "2", "--batch", "32", "--prompt", "2048", "--new", "2048"
    )
    assert out["tokens_per_s"] > 1602
    est = out["estimate"]
    assert est["tokens_per_s"] < out["tokens_per_s"] and est["tpot_s"] > out["tpot_s"]
    assert out["routed"] == [2, 8]  # the ceiling's experts a layer, of the 8


def test_generate_explains_the_bytes_its_ceiling_and_its_what_if_read():
    # --explain's decode line shows the bytes the figure beside it divides: the ceiling's (2 experts a layer for
    # Mixtral, its tokens routed alike) or, under --mbu, the bytes uniform routing moves
    gen = ("generate", "mixtral-8x7b", "--gpu", "h100", "--tp", "2", "--batch", "32", "--prompt", "2k", "--new", "2k")
    row = run_json("roofline", *gen[1:6], "--batch", "32", "--seq", "2049")["rows"][0]
    ceiling = row["ceiling_weight_bytes"] + row["kv_bytes"]
    moved = row["weight_bytes"] + row["kv_bytes"]
    for extra, lead, nbytes, bw in (
        ((), "[ceiling]", ceiling, 3.35e12),
        (("--mbu", "0.5"), "[estimate (MBU", moved, 1.675e12),
    ):
        lines = run_json(*gen, *extra, "--explain")["explanation"]
        first = next(line for line in lines if line.startswith(f"{lead}") and "first decode step" in line)
        found = re.search(r"max\(([\d,]+) B / \(bandwidth x [\d.]+\) = ([\d.]+) ms", first)
        assert int(found.group(1).replace(",", "")) == nbytes
        assert float(found.group(2)) == pytest.approx(nbytes / bw * 1e3, abs=0.006)
    assert ceiling < moved


def test_every_speed_table_says_how_a_moe_ceiling_routes():
    note = "the ceiling routes every token to the same 8 of 128 experts a layer"
    base = ("generate", "qwen3-30b-a3b", "--gpu", "h100", "--prompt", "1k", "--new", "64")
    for extra in (("--batch", "4"), ("--concurrency", "4")):
        assert note in run(*base, *extra).stdout
        assert run_json(*base, *extra)["routed"] == [8, 128]
    assert (
        "counts only the 8 that tokens routed alike reach" in run("roofline", "qwen3-30b-a3b", "--gpu", "h100").stdout
    )
    dense = run_json("generate", "llama-3-8b", "--gpu", "h100", "--prompt", "1k", "--new", "64", "--concurrency", "4")
    assert dense["routed"] is None and "experts a layer" not in run("roofline", "llama-3-8b", "--gpu", "h100").stdout


def test_mxfp4_experts_for_gpt_oss():
    show = run_json("show", "gpt-oss-120b")
    p = show["params"]
    out = run_json("fit", "gpt-oss-120b", "--gpu", "h100", "--seq", "8k")
    expected = math.ceil(Fraction(p["total"] - p["experts"]) * 2 + Fraction(p["experts"]) * Fraction(17, 32))
    assert out["per_gpu"]["weight_bytes"] == expected
    assert 60 * GiB < expected < 66 * GiB  # fits on one 80 GB GPU, as published


def test_generate_figures():
    out = run_json("generate", "7b", "--gpu", "a100", "--prompt", "1024", "--new", "3")
    # prefill 1,024 tokens: FLOPs 2N x 1,024 + 4 x L x h x d per pair of the causal triangle (1,024 x 1,025 / 2)
    flops = 2 * 7 * 10**9 * 1024 + 4 * 32 * 32 * 128 * (1024 * 1025 // 2)
    bytes_ = 14 * 10**9 + 1024 * 524288
    assert out["ttft_s"] == pytest.approx(max(flops / 312e12, bytes_ / 2.039e12))
    step = [(14 * 10**9 + (1024 + t) * 524288) / 2.039e12 for t in (1, 2)]  # memory-bound decode steps
    assert out["tpot_first_s"] == pytest.approx(step[0]) and out["tpot_last_s"] == pytest.approx(step[1])
    assert out["total_s"] == pytest.approx(out["ttft_s"] + sum(step))
    assert out["tokens_per_s"] == pytest.approx(3 / out["total_s"])
    assert out["lesson"] is None  # the teaching figures are --explain's (issue 23)
    assert out["basis"] == "ceiling"


def test_generate_estimate_is_labelled_and_slower():
    out = run_json("generate", "llama-3-8b", "--gpu", "h100", "--prompt", "512", "--new", "64", "--efficiency", "0.5")
    est = out["what_if"]  # --efficiency is a what-if; "estimate" is the calibrated one
    assert est["basis"] == "estimate (MBU 0.5, MFU 0.5)" and out["basis"] == "ceiling"
    assert est["tpot_s"] == pytest.approx(2 * out["tpot_s"])
    table = run("generate", "llama-3-8b", "--gpu", "h100", "--mbu", "0.8").stdout
    assert "ceiling" in table and "estimate (MBU 0.8, MFU 1)" in table


def test_theory_concatenation_traffic():
    # THEORY §1: producing 4,096 tokens by concatenation moves 1 + 2 + ... + 4,096 positions; preallocated: 4,096.
    assert concat_positions(0, 4096) == 8_390_656
    assert concat_positions(0, 4096) / 4096 == pytest.approx(2048, rel=0.001)
    out = run_json("generate", "7b", "--gpu", "a100", "--prompt", "1", "--new", "4096", "--explain")["lesson"]
    assert out["concat_positions_copied"] == 8_390_656 + 4096  # each copy also carries the one prompt token
    assert out["prealloc_positions_written"] == 4096


def test_uncached_flops_recompute_every_prefix():
    out = run_json("generate", "7b", "--gpu", "a100", "--prompt", "1", "--new", "4096", "--explain")
    n, lhd = 7 * 10**9, 32 * 32 * 128
    # without a cache token t needs a forward over its whole prefix of k = 1 .. 4,096 tokens:
    # 2N·k + 4·L·h·d per causal pair, k(k+1)/2 pairs
    assert out["lesson"]["flops_uncached"] == sum(2 * n * k + 4 * lhd * (k * (k + 1) // 2) for k in range(1, 4097))
    # with one: the 1-token prefill, then 4,095 steps of 2N + 4·L·h·d·(context)
    assert out["flops_cached"] == (2 * n + 4 * lhd) + sum(2 * n + 4 * lhd * (1 + t) for t in range(1, 4096))


def test_tpot_goal_search():
    out = run_json("fit", "llama-3-8b", "--gpu", "h100", "--seq", "8k", "--tpot-ms", "20", "--ceiling")
    slo = out["slo"]
    assert slo["tpot_s"] <= 0.020 and slo["batch"] <= out["max_batch"]
    over = run_json("fit", "llama-3-8b", "--gpu", "h100", "--seq", "8k", "--batch", str(slo["batch"] + 1))
    assert over["fits"] is True  # the limit was latency, not memory
    # one more sequence breaks the goal: 14.96 GiB of weights + (b+1) x 1 GiB of KV over 3.35 TB/s
    weights = 8_030_261_248 * 2
    assert (weights + (slo["batch"] + 1) * 8192 * 131072) / 3.35e12 > 0.020
    assert slo["tokens_per_s"] == pytest.approx(slo["batch"] / slo["tpot_s"])


def test_slo_no_batch_meets():
    # The table is kept, the verdict says the goal is missed and by what, and the exit status is 3.
    result = run("fit", "llama-3-8b", "--gpu", "h100", "--tpot-ms", "1", "--ceiling")
    assert result.exit_code == 3 and result.stderr == ""
    text = " ".join(result.stdout.split())
    # batch 1: (15,009,857,536 B of weights read + 8,192 x 131,072 B of KV) / 3.35 TB/s = 4.80 ms
    assert "fits on one h100 but misses TPOT 1 ms: batch 1 takes TPOT 4.80 ms (ceiling)" in text
    out = json.loads(run("fit", "llama-3-8b", "--gpu", "h100", "--tpot-ms", "1", "--format", "json").stdout)
    assert out["slo"]["met"] is False and out["slo"]["batch"] == 0 and out["fits"] is True and out["ok"] is False


# vLLM 0.19.0 start-up logs (llm-d-incubation/llm-d-planner PR #205, accuracy/results/v0.19.0/logs, H100 80GB,
# gpu_memory_utilization 0.95, max_model_len 8192, block 16): model, tp, kv dtype, logged "Available KV cache
# memory" (GiB), "GPU KV cache size" (tokens), "Maximum concurrency for 8,192 tokens per request",
# and by hand: page bytes per layer x layers per group, number of groups.
VLLM_LOGS = [
    ("meta-llama/Llama-3.1-8B-Instruct", 1, "bf16", "58.11", 476_016, "58.11", 16 * 8 * 2 * 128 * 2 * 32, 1),
    ("meta-llama/Llama-3.1-8B-Instruct", 4, "bf16", "67.44", 2_209_792, "269.75", 16 * 2 * 2 * 128 * 2 * 32, 1),
    ("Qwen/Qwen2.5-7B-Instruct", 1, "fp8", "58.53", 2_192_000, "267.58", 16 * 4 * 2 * 128 * 1 * 28, 1),
    ("deepseek-ai/DeepSeek-V2-Lite-Chat", 1, "bf16", "43.61", 1_505_552, "183.78", 16 * 576 * 2 * 27, 1),
    ("google/gemma-2-2b-it", 1, "bf16", "66.47", 670_160, "81.73", 16 * 4 * 2 * 256 * 2 * 13, 2),
]


def _vllm(model, tp, kv, memory):
    return run_json(
        "fit",
        model,
        "--gpu",
        "h100",
        "--tp",
        tp,
        "--kv-dtype",
        kv,
        "--seq",
        "8192",
        "--gpu-util",
        "0.95",
        "--engine",
        "vllm",
        "--kv-memory",
        memory,
    )["vllm"]


@pytest.mark.parametrize(("model", "tp", "kv", "gib", "tokens", "concurrency", "block_bytes", "groups"), VLLM_LOGS)
def test_vllm_reproduces_logged_figures(model, tp, kv, gib, tokens, concurrency, block_bytes, groups):
    # The log rounds the memory to 0.01 GiB: the logged token count lies between kvcalc's at either end.
    low = _vllm(model, tp, kv, f"{float(gib) - 0.005:.3f}GiB")
    high = _vllm(model, tp, kv, f"{float(gib) + 0.005:.3f}GiB")
    assert low["kv_cache_tokens"] <= tokens <= high["kv_cache_tokens"]
    assert high["kv_cache_tokens"] - low["kv_cache_tokens"] <= (GiB // 100 // block_bytes + 1) * 16
    # With the exact memory those blocks take, kvcalc prints vLLM's own lines verbatim.
    blocks = tokens // 16 * groups
    exact = _vllm(model, tp, kv, str(blocks * block_bytes))
    assert exact["num_blocks"] == blocks
    assert f"GPU KV cache size: {tokens:,} tokens" in exact["log_lines"]
    assert f"Maximum concurrency for 8,192 tokens per request: {concurrency}x" in exact["log_lines"]
    assert f"Available KV cache memory: {gib} GiB" in exact["log_lines"]


def test_vllm_lines_parse_from_the_shared_logs():
    logs = json.loads(shared_path("reference", "vllm_logs.json").read_text())
    assert len(logs) == len(VLLM_LOGS)
    for entry, (model, tp, kv, gib, tokens, concurrency, *_) in zip(logs, VLLM_LOGS):
        lines = entry["log_lines"]
        assert entry["model_id"] == model and entry["tensor_parallel_size"] == tp
        assert f"Available KV cache memory: {gib} GiB" in lines["available_kv_memory"][0]
        assert re.search(rf"GPU KV cache size: {tokens:,} tokens", lines["kv_cache_size_tokens"][0])
        assert f"per request: {concurrency}x" in lines["max_concurrency"][0]


def test_vllm_table_prints_its_wording():
    out = run(
        "fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm", "--kv-memory", "58.11GiB", "--seq", "8192"
    ).stdout
    assert (
        "vLLM 0.19 accounting" in out and "GPU KV cache size: " in out and "Maximum concurrency for 8,192 tokens" in out
    )


def test_a_batch_beyond_the_latency_goal_is_not_ok():
    # Llama-3-8B on one H100 at 8k tokens: memory holds 54 sequences. A decode step at batch b reads
    # the weights less the input table, (8,030,261,248 - 128,256 x 4,096) x 2 B = 15,009,849,344 B, plus
    # b embedding rows of 8,192 B and b x 8,192 x 131,072 B of KV, at 3.35 TB/s (memory-bound):
    # b = 48 takes 19.87 ms, b = 49 20.19 ms. So --batch 52 fits in memory but misses TPOT 20 ms:
    # not ok, exit 3, and the verdict names the batch that meets the goal.
    def step(b):
        return (15_009_849_344 + b * 8192 + b * 8192 * 131_072) / 3.35e12

    assert step(48) < 0.020 < step(49)
    result = run("fit", "llama-3-8b", "--gpu", "h100", "--seq", "8k", "--batch", "52", "--tpot-ms", "20", "--ceiling")
    assert result.exit_code == 3 and result.stderr == ""
    out = json.loads(
        run(
            "fit",
            "llama-3-8b",
            "--gpu",
            "h100",
            "--seq",
            "8k",
            "--batch",
            "52",
            "--tpot-ms",
            "20",
            "--ceiling",
            "-f",
            "json",
        ).stdout
    )
    assert out["fits"] is True and out["max_batch"] == 54 and out["slo"]["batch"] == 48 and out["slo"]["met"]
    assert out["ok"] is False
    assert "batch 52 misses TPOT 20 ms" in out["verdict"] and "48" in out["verdict"]
    # Within the goal's batch the combination is ok; in a grid only the rows beyond it are not.
    assert (
        run(
            "fit", "llama-3-8b", "--gpu", "h100", "--seq", "8k", "--batch", "48", "--tpot-ms", "20", "--ceiling"
        ).exit_code
        == 0
    )
    grid = run("fit", "llama-3-8b", "--gpu", "h100", "--seq", "8k", "--batch", "1,52", "--tpot-ms", "20", "--ceiling")
    assert grid.exit_code == 3 and "1 of 2 do not" in " ".join(grid.stdout.split())


def test_a_batch_beyond_a_ttft_goal_names_the_ttft_where_it_is_met():
    out = json.loads(
        run(
            "fit", "llama-3-8b", "--gpu", "h100", "--seq", "8k", "--batch", "52", "--ttft-ms", "900", "-f", "json"
        ).stdout
    )
    best = out["slo"]["batch"]
    assert out["ok"] is False and 1 <= best < 52
    assert (
        f"the largest batch that meets it is {best:,} (TTFT {out['slo']['ttft_s'] * 1e3:.2f} ms there" in out["verdict"]
    )
    assert "TPOT" not in out["verdict"]
