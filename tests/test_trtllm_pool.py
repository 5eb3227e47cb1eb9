"""TensorRT-LLM's KV pool (engines/trtllm/pool.py): free_gpu_memory_fraction of what the weights and the
profiling peak leave, figures derived by hand for real models, and the serving simulation and the
planner taking it."""

import json

import pytest

import kvcalc
from kvcalc.cost.step import SINGLE, Deployment
from kvcalc.engines.trtllm import pool as trt
from kvcalc.model.presets import get_gpu, get_model
from kvcalc.plan.layout import layout_facts
from kvcalc.plan.serve_pool import serving_limits
from kvcalc.units import fmt_bytes
from tests.conftest import run, run_json

GIB = 2**30


def test_llama_3_1_8b_on_one_h100_by_hand():
    # H100 preset: 85,030,000,000 bytes. Llama-3.1-8B bf16: 8,030,261,248 parameters x 2 bytes.
    # KV of a 32-token block: 32 x 2 (K, V) x 32 layers x 8 KV heads x 128 x 2 bytes = 4 MiB.
    p = trt.predict(get_model("llama-3.1-8b"), get_gpu("h100"), SINGLE, dtype=None, kv_dtype="bf16")
    left = 85_030_000_000 - 16_060_522_496 - 2 * GIB  # 66,821,993,856
    assert p.kv_bytes == int(0.9 * left) == 60_139_794_470
    assert p.blocks == 60_139_794_470 // (4 * 2**20) == 14_338
    assert p.tokens == 14_338 * 32
    # vLLM's rule (0.9 of the whole GPU, less weights and reserve) would keep 13,904 such blocks.
    assert (int(0.9 * 85_030_000_000) - 2 * GIB - 16_060_522_496) // (4 * 2**20) == 13_904


def test_deepseek_v3_fp8_on_four_b200_keeps_a_tenth_of_what_weights_leave():
    # B200 preset 191,501,854,310 bytes; DeepSeek-V3 fp8 at tp 4 holds 168,993,141,248 bytes a GPU (the routers'
    # correction biases, 58 x 256, whole on each rank, among them).
    # MLA's latent, whole on every rank: 61 layers x (512 + 64) x 1 byte (fp8) = 35,136 bytes a token.
    spec, gpu = get_model("deepseek-v3"), get_gpu("b200")
    p = trt.predict(spec, gpu, Deployment(tp=4), dtype="fp8", kv_dtype="fp8")
    kv = int(0.9 * (191_501_854_310 - 168_993_141_248 - 2 * GIB))
    assert p.kv_bytes == kv and p.blocks == kv // (32 * 35_136) == 16_298
    # At tp 8 a token's latent is the same 35,136 bytes: only the weights a GPU holds shrink.
    p8 = trt.predict(spec, gpu, Deployment(tp=8), dtype="fp8", kv_dtype="fp8")
    assert p8.blocks == p8.kv_bytes // (32 * 35_136) == 83_521


def test_the_fraction_is_of_what_is_left():
    # Whatever the fraction, the pool never exceeds what the weights and the reserve leave, and
    # reaches all of it at 1.0; nothing left gives no pool rather than a negative one.
    assert trt.kv_memory(100, 40, 10, 1.0) == 50 and trt.kv_memory(100, 40, 10, 0.5) == 25
    assert trt.kv_memory(100, 95, 10) == 0


def test_the_serving_simulation_takes_trtllms_pool():
    spec, gpu = get_model("deepseek-v3"), get_gpu("b200")
    dep = Deployment(tp=4)
    limits, pool = serving_limits(
        spec, gpu, dep, engine="trtllm", dtype="fp8", kv_dtype="fp8", prompt=8192, new=1024
    )  # fmt: skip
    assert (limits.kv_blocks, limits.block_size) == (16_298, 32)
    assert (limits.max_num_seqs, limits.max_num_batched_tokens) == (2048, 8192 + 2048)  # raised for the prompts
    assert "521,536 tokens" in pool and "free_gpu_memory_fraction 0.9" in pool


def test_the_planner_counts_users_in_trtllms_pool():
    spec, gpu = get_model("llama-3.1-8b"), get_gpu("h100")
    f = layout_facts(spec, gpu, engine="trtllm", kv_dtype="bf16", seq=8192)
    assert f.kv_capacity_tokens == 14_338 * 32
    assert f.max_concurrency == pytest.approx(14_338 / 256)  # 8,192 tokens: 256 blocks each
    assert "TensorRT-LLM" in f.accounting and f.fits


def _row(stdout: str) -> dict:
    d = json.loads(stdout)
    return d[0] if isinstance(d, list) else d


def test_fit_with_engine_trtllm_answers_in_its_pool():
    import kvcalc

    # --reserve 2GiB: the pool of the hand figure above, 14,338 blocks; 8,192-token requests take 256 each
    args = ("fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "trtllm", "--seq", "8k", "--reserve", "2GiB")
    r = _row(run(*args, "--format", "json").stdout)
    assert (r["kv_capacity_tokens"], r["capacity_basis"]) == (14_338 * 32, "TensorRT-LLM 1.x")
    assert r["max_concurrency"] == pytest.approx(14_338 / 256) and r["ok"]
    assert "fits on one h100 under TensorRT-LLM 1.x (56.01x concurrency" in r["verdict"]
    # the Python API answers alike
    api = kvcalc.fit("llama-3.1-8b", "h100", seq=8192, engine="trtllm", reserve="2GiB")
    assert (api.kv_capacity_tokens, api.verdict) == (r["kv_capacity_tokens"], r["verdict"])
    # a latency goal is still decided (on the estimate), memory on the pool
    miss = run(*args, "--tpot-ms", "1", "--format", "json")
    verdict = _row(miss.stdout)["verdict"]
    assert miss.exit_code == 3 and "under TensorRT-LLM 1.x (56.01x concurrency" in verdict
    assert "but misses TPOT 1 ms" in verdict and "(estimate, trtllm)" in verdict
    # 57 such requests are more than the pool holds: one clear verdict and exit status 3
    out = run(*args, "-b", "57", "--format", "json")
    assert out.exit_code == 3 and "DOES NOT FIT under TensorRT-LLM 1.x" in _row(out.stdout)["verdict"]


def test_fit_names_every_engine_it_knows_when_given_another():
    out = run("fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "foo")
    assert out.exit_code == 2 and "vllm, sglang, trtllm, llamacpp, none" in out.stderr


def test_trtllms_auto_kv_dtype_follows_the_checkpoint():
    # minimax-m2.7-nvfp4's quantization_config declares an fp8 KV cache (kv_cache_scheme 8-bit float):
    # TensorRT-LLM's "auto" caches in fp8 there, and in the served 16-bit type elsewhere
    from kvcalc.plan.kv_auto import auto_kv_dtype

    minimax, llama = get_model("minimax-m2.7-nvfp4"), get_model("llama-3.1-8b")
    assert trt.auto_kv_dtype(minimax) == "fp8" and trt.auto_kv_dtype(llama) == "bf16"
    assert auto_kv_dtype(minimax, get_gpu("b200"), "trtllm", None) == "fp8"
    # fit names the dtype it sized the pool in
    r = run_json("fit", "minimax-m2.7-nvfp4", "--gpu", "b200", "--tp", "4", "--engine", "trtllm", "--seq", "8k")
    (r,) = r if isinstance(r, list) else [r]
    assert r["kv_dtype"] == "fp8"


def test_trtllm_has_no_build_for_amd_apple_or_gaudi():
    from kvcalc.engines.kernels import gpu_refusal
    from kvcalc.plan.layout import engine_refusal

    assert [gpu_refusal("trtllm", g) is None for g in ("h100", "b200", "l40s", "a100")] == [True] * 4
    assert all("NVIDIA GPUs only" in gpu_refusal("trtllm", g) for g in ("mi300x", "mi355x", "m2-ultra", "gaudi3"))
    assert gpu_refusal("vllm", "mi300x") is None and gpu_refusal("sglang", "mi300x") is None
    assert "NVIDIA GPUs only" in engine_refusal("trtllm", get_model("llama-3.1-8b"), 1, 1, 1, False, "mi300x")
    # an estimate there says what it is: the basis it prints with every figure
    for args in (("generate", "--concurrency", "8"), ("generate",)):
        d = run_json(args[0], "llama-3.1-8b", "--gpu", "mi300x", "--engine", "trtllm", *args[1:])
        assert "NOT A REAL DEPLOYMENT: TensorRT-LLM runs on NVIDIA GPUs only" in d["estimate"]["basis"], args
    # and the bound alone (--ceiling: no estimate, no basis) carries it as a warning, CLI and API alike
    for args in (("generate", "--concurrency", "8"), ("generate",), ("roofline",)):
        d = run_json(args[0], "llama-3.1-8b", "--gpu", "mi300x", "--engine", "trtllm", "--ceiling", *args[1:])
        assert "estimate" not in d or d["estimate"] is None, args
        assert any("not a real deployment: TensorRT-LLM runs on NVIDIA GPUs only" in w for w in d["warnings"]), args
        on_h100 = run_json(args[0], "llama-3.1-8b", "--gpu", "h100", "--engine", "trtllm", "--ceiling", *args[1:])
        assert not any("real deployment" in w for w in on_h100["warnings"]), args
    for call in (kvcalc.generate, kvcalc.roofline):
        assert "NVIDIA GPUs only" in " ".join(call("llama-3.1-8b", "mi300x", engine="trtllm", ceiling=True).warnings)
    # fit's verdict refuses it (exit status 3, the figures still printed)
    out = run("fit", "llama-3.1-8b", "--gpu", "mi300x", "--engine", "trtllm", "--seq", "8k")
    assert out.exit_code == 3 and "TensorRT-LLM would not start on one mi300x" in out.stdout


def test_dp_attention_gives_every_rank_a_pool_of_its_own():
    # enable_attention_dp: each of the 8 ranks keeps its own requests' KV in its own pool, so the replica holds
    # 8 times one rank's (the serving simulation's limits are scaled the same way, plan/serve_report.py)
    spec, gpu = get_model("deepseek-v3"), get_gpu("h200")
    one = trt.predict(spec, gpu, Deployment(tp=8, ep=8, dp_attention=True), dtype=None, kv_dtype="bf16")
    args = ("--gpu", "h200", "--tp", "8", "--ep", "8", "--dp-attention", "--engine", "trtllm", "--seq", "8k")
    r = _row(run("fit", "deepseek-v3", *args, "--reserve", "2GiB", "--format", "json").stdout)
    assert r["kv_capacity_tokens"] == 8 * one.tokens
    assert r["max_concurrency"] == pytest.approx(8 * one.blocks / 256)
    facts = layout_facts(spec, gpu, tp=8, ep=8, dp_attention=True, engine="trtllm", seq=8192, kv_dtype="bf16")
    assert facts.kv_capacity_tokens == 8 * one.tokens


def test_a_latency_goal_under_trtllms_pool_reaches_what_the_pool_holds():
    # Llama-3.1-70B on 4 x H100 at 8k: kvcalc's own arithmetic holds 54 requests, TensorRT-LLM's pool 60.87;
    # TPOT 40 ms holds past both, so the goal is met up to the 60 the engine really holds, the largest batch quoted
    import kvcalc

    r = kvcalc.fit("llama-3.1-70b", "h100", tp=4, seq=8192, engine="trtllm", tpot_ms=40)
    assert r.max_batch == 60 and r.max_concurrency == pytest.approx(60.87, abs=0.01)
    assert r.slo is not None and r.slo.batch == 60 and r.ok
    assert "meets TPOT 40 ms (estimate, trtllm) up to batch 60" in r.verdict


def test_where_trtllms_pool_holds_what_kvcalcs_bytes_do_not_the_sheet_shows_the_pool():
    # Llama-3.1-70B on 4 x H100, 60 x 8k: kvcalc's bytes (vLLM's reserve, no 0.9 of the rest) are over vLLM's
    # budget, TensorRT-LLM's pool holds 15,583 blocks of 32 (498,656 tokens): 15,583 // 256 = 60 requests of 8k
    # and, at batch 60, 15,583 // 60 = 259 blocks = 8,288 tokens each. The pool decides, and the sheet shows its
    # arithmetic (0.9 of what the weights and the reserve leave), not vLLM's "budget = GPU x 0.9" row.
    out = run(
        "fit", "llama-3.1-70b", "--gpu", "h100", "--tp", "4", "--seq", "8k", "--batch", "60", "--engine", "trtllm"
    )
    assert out.exit_code == 0
    r = json.loads(run("fit", "llama-3.1-70b", "--gpu", "h100", "--tp", "4", "--seq", "8k", "--batch", "60",
                       "--engine", "trtllm", "--format", "json").stdout)  # fmt: skip
    row = r[0] if isinstance(r, list) else r
    blocks = row["kv_capacity_tokens"] // 32
    assert blocks == 15_583 and row["max_batch"] == blocks // 256 == 60 and row["fits"]
    assert row["max_seq"] == (blocks // 60) * 32 == 8_288
    gpu = row["per_gpu"]
    left = gpu["capacity_bytes"] - gpu["weight_bytes"] - gpu["reserve_bytes"]
    pool = int(0.9 * left)
    assert (
        pool // (32 * 80 * 2 * 2 * 128 * 2) == blocks
    )  # a block: 32 tokens x 80 layers x K, V x 2 of 8 heads x 128 x 2 B
    (line,) = [x for x in out.stdout.splitlines() if x.strip().startswith("KV pool")]
    assert fmt_bytes(pool) in line and "0.9 (free_gpu_memory_fraction) x left: 498,656 tokens, fits" in line
    assert "budget" not in out.stdout.split("Verdict")[0]
    assert "Largest context at batch 60 (TensorRT-LLM 1.x's pool): 8,288 tokens." in out.stdout


def test_fit_under_trtllm_pages_the_batch_in_its_blocks_of_32():
    # a 8,001-token sequence holds 251 blocks of 32 (8,032 slots) in TensorRT-LLM's pool, not 501 of vLLM's 16
    r = _row(run("fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "trtllm", "--seq", "8001", "-f", "json").stdout)
    assert r["block_size"] == 32 and r["per_gpu"]["kv_bytes"] == 8_032 * 32 * 8 * 128 * 2 * 2
    out = run("fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "trtllm", "--block-size", "64")
    assert out.exit_code == 2 and "blocks of 32 tokens" in out.stderr


def test_the_python_apis_fit_pages_trtllms_pool_alike():
    r = kvcalc.fit("llama-3.1-8b", "h100", engine="trtllm", seq=8001)
    assert r.block_size == 32 and r.per_gpu.kv_bytes == 8_032 * 32 * 8 * 128 * 2 * 2


def test_an_architecture_trtllms_pytorch_backend_does_not_register_is_said_so():
    # tensorrt_llm/_torch/models registers no GraniteForCausalLM (its docs: "supported via the AutoDeploy backend");
    # AutoModelForCausalLM.from_config raises "Unknown architecture for AutoModelForCausalLM: <name>"
    r = run("fit", "granite-3.3-8b", "--gpu", "h100", "--engine", "trtllm")
    assert r.exit_code == 2 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1
    assert "Unknown architecture for AutoModelForCausalLM: GraniteForCausalLM" in r.stderr
    # a speed is still given, for a deployment that cannot be made as stated
    out = run_json("generate", "granite-3.3-8b", "--gpu", "h100", "--engine", "trtllm", "--concurrency", "4")
    assert out["estimate"]["tpot_s"] > 0
    assert any("TensorRT-LLM would not start: ValueError: Unknown architecture" in w for w in out["warnings"])
    # a registered one (LlamaForCausalLM) is neither refused nor warned of; vLLM serves Granite
    ok = run_json("generate", "llama-3.1-8b", "--gpu", "h100", "--engine", "trtllm", "--concurrency", "4")
    assert not any("Unknown architecture" in w for w in ok["warnings"])
    assert run("fit", "granite-3.3-8b", "--gpu", "h100", "--engine", "vllm").exit_code == 0
