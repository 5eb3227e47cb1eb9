"""The planner's per-candidate facts (plan/layout.py) and prices (plan/price.py)."""

import pytest
from conftest import run_json

from kvcalc.errors import UsageError
from kvcalc.model.presets import get_gpu, get_model
from kvcalc.plan.layout import command, engine_refusal, layout_facts
from kvcalc.plan.price import parse_prices, usd_per_hour, usd_per_million_tokens


def test_vllm_refusal_and_the_fit_agree():
    facts = layout_facts(get_model("llama-3.1-8b"), get_gpu("l4"))  # seq: vLLM's default, 131,072
    assert facts.seq == 131072 and facts.accepted and not facts.fits
    assert facts.refusal.startswith("To serve at least one request with the models's max seq len (131072)")


def test_a_fitting_layout_has_its_headroom_capacity_and_command():
    spec, gpu = get_model("llama-3.1-70b"), get_gpu("h100")
    facts = layout_facts(spec, gpu, tp=4, seq=32768)
    fit = run_json("fit", "llama-3.1-70b", "--gpu", "h100", "--tp", "4", "--seq", "32k", "--engine", "vllm")
    p = fit["per_gpu"]
    assert facts.fits and facts.refusal is None
    assert facts.headroom_bytes == p["budget_bytes"] - p["weight_bytes"] - p["reserve_bytes"] - p["kv_bytes"]
    assert facts.kv_capacity_tokens == fit["vllm"]["kv_cache_tokens"]
    assert facts.max_concurrency == pytest.approx(fit["vllm"]["max_concurrency"])
    c = facts.command
    assert c.startswith("vllm serve meta-llama/") and "--tensor-parallel-size 4" in c
    assert "--max-model-len 32768" in c and "--gpu-memory-utilization 0.9" in c and "--max-num-seqs 1024" in c


def test_engines_say_what_they_accept():
    v3 = get_model("deepseek-v3")
    assert engine_refusal("vllm", v3, 8, 1, 8, True) is None
    assert "tp x dp" in engine_refusal("vllm", v3, 8, 1, 4, False)
    assert engine_refusal("sglang", v3, 8, 1, 4, True) is None
    assert "divide" in engine_refusal("sglang", v3, 8, 1, 3, False)
    assert "neither" in engine_refusal("llamacpp", v3, 8, 1, 8, False)
    sg = command(
        "sglang",
        "deepseek-ai/DeepSeek-V3",
        tp=8,
        pp=1,
        ep=8,
        dp_attention=True,
        nodes=1,
        seq=8192,
        gpu_util=0.85,
        max_num_seqs=None,
        kv_dtype="bf16",
        quantize=None,
    )
    assert sg == (
        "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --dp 8 --enable-dp-attention "
        "--ep-size 8 --context-length 8192 --mem-fraction-static 0.85"
    )
    vl = command(
        "vllm",
        "m",
        tp=8,
        pp=1,
        ep=8,
        dp_attention=True,
        nodes=1,
        seq=8192,
        gpu_util=0.9,
        max_num_seqs=256,
        kv_dtype="fp8",
        quantize=None,
    )
    assert "--data-parallel-size 8 --tensor-parallel-size 1" in vl and "--enable-expert-parallel" in vl
    assert "--kv-cache-dtype fp8" in vl


def test_prices_are_linear_and_overridable():
    h100 = get_gpu("h100")
    assert usd_per_hour(h100, 8) == pytest.approx(8 * 4.76)
    cheap = parse_prices(["h100=2.0"])
    assert usd_per_hour(h100, 8, cheap) == pytest.approx(16.0)
    assert usd_per_hour(h100, 8, parse_prices(["h100=4.0"])) == pytest.approx(2 * usd_per_hour(h100, 8, cheap))
    # $ per million tokens: $16/h at 1,000 tokens/s = 16 / 3.6 = 4.444...
    assert usd_per_million_tokens(16.0, 1000.0) == pytest.approx(16 / 3.6)
    assert usd_per_million_tokens(32.0, 1000.0) == pytest.approx(2 * usd_per_million_tokens(16.0, 1000.0))
    assert usd_per_hour(get_gpu("h200"), 8) is None  # no sourced price: --price must give it
    with pytest.raises(UsageError):
        parse_prices(["h100"])
    with pytest.raises(UsageError):
        parse_prices(["h100=-1"])


def test_sglang_candidates_use_sglangs_own_pool():
    from kvcalc.plan.sglang import predict

    spec, gpu = get_model("deepseek-v3"), get_gpu("h200")
    facts = layout_facts(spec, gpu, tp=8, ep=8, dp_attention=True, seq=8192, engine="sglang", gpu_util=0.85)
    pool = predict(
        spec, gpu, tp=8, pp=1, seq=8192, batch=1, dtype=None, kv_dtype=None, engine_version=None,
        mem_fraction_static=0.85, chunked_prefill_size=None, page_size=None, max_running_requests=None,
        dp_attention=True, steps=None,
    )  # fmt: skip
    assert facts.kv_capacity_tokens == pool.kv_capacity_tokens and facts.fits == pool.fits
    assert "--mem-fraction-static 0.85" in facts.command and "--enable-dp-attention" in facts.command
