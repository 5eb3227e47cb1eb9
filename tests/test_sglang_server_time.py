"""SGLang's single-client TTFT: a small dense model's is its prompt's pass plus the API server's ~15 ms, as public
runs measure it (sgl-cookbook, GPUStack: 18-53 ms for 0.2-4k-token prompts on 3-9B models), while a large MoE
deployment's carries the per-layer and per-expert prompt costs its runs measure (InferenceX's DeepSeek-R1 on 8 x
H200 under SGLang, 1,024-token prompts: 158 ms at 4 clients; the cookbook's Kimi-K2.5 on 8 x H200: 177 ms at one).
Until 2026-12-04 a fitted 173 ms per request put every SGLang TTFT at 190 ms or more (docs/speed.md)."""

import pytest

from kvcalc.api import generate


def _one_client(model, gpu, tp, prompt):
    return generate(model, gpu, tp=tp, engine="sglang", prompt=prompt, new=256, concurrency=1).estimate


def test_a_small_dense_models_first_token_is_its_prompt_and_the_server():
    est = _one_client("qwen3-8b", "h100", 1, 233)  # GPUStack's Qwen3-8B on one H100: 27.70 ms at 4 clients
    assert est.server_s == 0.015
    assert 0.015 < est.ttft_s < 0.050
    longer = _one_client("qwen3-8b", "h100", 1, 4194)  # a longer prompt: the pass grows, the server's time stays
    assert longer.ttft_s - longer.server_s > 5 * (est.ttft_s - est.server_s)


@pytest.mark.parametrize(("model", "gpu", "measured"), [("deepseek-v3", "h200", 0.158), ("kimi-k2.5", "h200", 0.177)])
def test_a_large_moe_deployments_first_token_carries_its_prompt_costs(model, gpu, measured):
    est = _one_client(model, gpu, 8, 1024 if model == "deepseek-v3" else 610)
    assert est.server_s == 0.015
    assert measured / 1.5 < est.ttft_s < measured * 1.5  # within the spread of the public runs
