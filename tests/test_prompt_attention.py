"""A prompt's attention in the estimate (cost/estimate.time_of): flash attention multiplies Q, K and V in the
KV cache's format (16 bits, or fp8 with an fp8 cache: FlashAttention-3's and TensorRT-LLM's FP8 attention),
not in the weights' (fp8 or fp4 GEMMs), so with weights faster than the cache its FLOPs take the slower rate."""

import pytest

from kvcalc.cost.calibration import STARTING
from kvcalc.cost.constants import step_constants
from kvcalc.cost.estimate import attention_rate, features, time_of
from kvcalc.cost.shard import link_for
from kvcalc.cost.step import Deployment, chunk_attention_flops, stage_prefill_flops, stages
from kvcalc.model.presets import get_gpu, get_model


def test_llama_prompt_attention_flops_by_hand():
    """Llama-3.1-8B (32 layers, 32 query heads of 128), one 1,024-token prompt: 4 x heads x head_dim FLOPs
    (QK and PV, a multiply-add each) per causal query-key pair, 1,024 x 1,025 / 2 pairs."""
    staged = stages(get_model("llama-3.1-8b"), Deployment(), None)
    pairs = 1024 * 1025 // 2
    assert chunk_attention_flops(staged[0], 1, 0, 1024) == 32 * 4 * 32 * 128 * pairs


def test_a_chunk_after_cached_tokens_is_the_difference_of_two_passes():
    """Chunked prefill: 512 tokens after 1,536 cached ones cost the pairs of 2,048 less those of 1,536, for
    each of 3 sequences; the rest of stage_prefill_flops' difference is the body's GEMMs."""
    staged = stages(get_model("llama-3.1-8b"), Deployment(), None)
    st = staged[0]
    att = chunk_attention_flops(st, 3, 1536, 512)
    assert att == 3 * (chunk_attention_flops(st, 1, 0, 2048) - chunk_attention_flops(st, 1, 0, 1536))
    body = stage_prefill_flops(st, 3, 2048) - stage_prefill_flops(st, 3, 1536)
    assert body - att == 3 * 2 * (st.compute_params - st.lm_head_params) * 512


@pytest.mark.parametrize(
    "gpu,dtype,kv,rate",
    [
        ("h100", "fp8", "bf16", "bf16"),  # fp8 GEMMs beside a 16-bit cache: attention at the 16-bit rate
        ("h100", "fp8", "fp8", "fp8"),  # an fp8 cache: FP8 attention, as fast as the GEMMs
        ("b200", "nvfp4", "fp8", "fp8"),  # fp4 GEMMs, fp8 attention
        ("b200", "nvfp4", "bf16", "bf16"),
        ("h100", None, "fp8", "bf16"),  # bf16 weights: never above the step's own peak
        ("a100", "fp8", "fp8", "bf16"),  # no fp8 rate on Ampere
    ],
)
def test_attention_rate_is_the_caches_format_never_above_the_steps_peak(gpu, dtype, kv, rate):
    spec, g = get_model("llama-3.1-70b"), get_gpu(gpu)
    f = features(spec, g, Deployment(tp=8, link=link_for(g)), prefill_tokens=2048, dtype=dtype, kv_dtype=kv)
    assert f.attention_peak == g.peak_flop_per_s(rate) == attention_rate(g, kv, f.peak)
    assert f.attention_peak <= f.peak


def test_a_slower_attention_adds_its_flops_at_the_rate_gap_and_keeps_the_ceiling():
    """Llama-3.1-70B fp8 on one H100 (a compute-bound 4,096-token prompt): with a bf16 cache its attention FLOPs
    take peak / attention_peak times as long as at the fp8 rate, the GEMMs unchanged; with an fp8 cache the two
    rates agree. The ceiling stays the FLOPs at the step's peak, and the estimate is never below it."""
    spec, gpu = get_model("llama-3.1-70b"), get_gpu("h100")
    c = dict(STARTING)
    slow = features(spec, gpu, Deployment(), prefill_tokens=4096, dtype="fp8", kv_dtype="bf16")
    fast = slow._replace(attention_peak=slow.peak)
    assert slow.ceiling_s == fast.ceiling_s
    att = slow.prompt_attention[0]
    k = step_constants(c, slow.family, "vllm", True, slow.link)  # the constants time_of resolves for this step
    pad = (slow.tokens + k.fill) / slow.tokens
    extra = att * (slow.peak / slow.attention_peak - 1) * pad / (slow.peak * k.mfu)
    assert slow.peak / slow.attention_peak == pytest.approx(2.0, rel=1e-3)  # H100: 1,979 against 989 TFLOP/s
    assert time_of(slow, c) - time_of(fast, c) == pytest.approx(extra, rel=1e-9)
    assert time_of(slow, c) > time_of(fast, c) >= fast.ceiling_s
    cached = features(spec, gpu, Deployment(), prefill_tokens=4096, dtype="fp8", kv_dtype="fp8")
    assert time_of(cached, c) < time_of(slow, c)


def test_decode_steps_carry_no_prompt_attention():
    spec, gpu = get_model("llama-3.1-70b"), get_gpu("h100")
    f = features(spec, gpu, Deployment(), decode_contexts=[4096] * 8, dtype="fp8", kv_dtype="bf16")
    assert f.prompt_attention == () and f.attention_peak == 0.0
