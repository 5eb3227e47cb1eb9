"""SGLang's single-client TTFT: a small dense model's is its prompt's pass plus the API server's ~15 ms, as public
runs measure it (sgl-cookbook, GPUStack: 18-53 ms for 0.2-4k-token prompts on 3-9B models); a large MoE
deployment's carries, outside the steps, a time per expert its prompt reaches in each MoE layer (moe_server_s.sglang,
fitted on aiconfigurator's and InferenceX's SGLang runs: InferenceX's DeepSeek-R1 on 8 x H200, 1,024-token prompts,
158 ms at 4 clients, aiconfigurator's 260 ms). Until 2026-12-04 a fitted 173 ms per request put every SGLang TTFT
at 190 ms or more (docs/speed.md)."""

import math

import pytest

from kvcalc.api import generate
from kvcalc.cost.calibration_data import CONSTANTS


def _one_client(model, gpu, tp, prompt, engine="sglang"):
    return generate(model, gpu, tp=tp, engine=engine, prompt=prompt, new=256, concurrency=1).estimate


def test_a_small_dense_models_first_token_is_its_prompt_and_the_server():
    est = _one_client("qwen3-8b", "h100", 1, 233)  # GPUStack's Qwen3-8B on one H100: 27.70 ms at 4 clients
    assert est.server_s == 0.015  # no MoE layer, no MoE term
    assert 0.015 < est.ttft_s < 0.050
    longer = _one_client("qwen3-8b", "h100", 1, 4194)  # a longer prompt: the pass grows, the server's time stays
    assert longer.server_s == 0.015
    assert longer.ttft_s - longer.server_s > 5 * (est.ttft_s - est.server_s)


def test_a_moe_prompts_excess_is_per_expert_reached_in_each_moe_layer():
    # DeepSeek-V3 at tp 8: a 1,024-token prompt reaches all 256 experts (256 x (1 - (1 - 8/256)^1024) = 256 less
    # 2e-12) in each of its 58 MoE layers (3 dense of 61); each GPU runs a tp slice of every one
    est = _one_client("deepseek-v3", "h200", 8, 1024)
    reached = 256 * -math.expm1(1024 * math.log1p(-8 / 256))
    assert est.server_s == pytest.approx(0.015 + CONSTANTS["moe_server_s.sglang"] * reached * 58, rel=1e-9)
    # vLLM's fitted server time holds its own: no MoE term
    assert _one_client("deepseek-v3", "h200", 8, 1024, "vllm").server_s == CONSTANTS["server_s.vllm"]


def test_a_large_moe_deployments_first_token_carries_the_excess_its_public_runs_measure():
    # DeepSeek-R1 fp8 on 8 x H200 under SGLang, 1,024 + 1,024 tokens at 4 clients: InferenceX measures 158 ms,
    # aiconfigurator 260 ms (two harnesses); Qwen3.5-397B fp8 on 8 x B200, the same load: aiconfigurator 305 ms.
    # The MoE term carries most of the excess: over 100 ms for each, where a dense model's server time is 15 ms.
    deepseek = generate("deepseek-v3", "h200", tp=8, engine="sglang", prompt=1024, new=1024, concurrency=4)
    assert 0.158 < deepseek.estimate.ttft_s < 0.260 * 1.25
    qwen = generate(
        "qwen3.5-397b-a17b", "b200", tp=8, engine="sglang", dtype="fp8", prompt=1024, new=1024, concurrency=4
    )
    assert 0.305 / 1.25 < qwen.estimate.ttft_s < 0.305 * 1.25
    for run in (deepseek, qwen):
        assert run.estimate.server_s - 0.015 > 0.100
