"""Weight-only quantization in the estimate (cost/step.dequant_share, estimate.time_of's dequant_eff): weights
stored in a format the GPU has no tensor-core rate for are widened to 16 bits in the kernel, and such GEMVs
stream at a lower fraction of the bandwidth than 16-bit or native-format weights."""

from fractions import Fraction

import pytest

from kvcalc.cost.calibration import STARTING
from kvcalc.cost.constants import step_constants
from kvcalc.cost.estimate import features, time_of
from kvcalc.cost.shard import link_for
from kvcalc.cost.step import Deployment, dequant_share, stages
from kvcalc.model.presets import get_gpu, get_model


def test_int4_llama_share_is_its_linear_layers_over_all_it_reads():
    """Llama-3.1-70B at --dtype int4 (w4a16, 4 bits + a 2-byte scale per 128 = 33/64 B a weight), one GPU,
    one token: the decoder's linear layers (and norms, counted in the linear format) are the widened bytes;
    the bf16 LM head, one embedding row and the final norm are not."""
    spec = get_model("llama-3.1-70b")
    h, inter, vocab, kv = 8192, 28672, 128256, 8 * 128
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * inter + 2 * h  # q, o; k, v; gate, up, down; two norms
    narrow = Fraction(80 * per_layer * 33, 64)
    ends = 2 * (vocab * h + h + h)  # LM head, final norm, the token's embedding row: bf16
    share = dequant_share(spec, get_gpu("h100"), stages(spec, Deployment(), "int4"), 1)
    assert share == pytest.approx(float(narrow / (narrow + ends)), rel=1e-9)
    assert 0.94 < share < 0.95


@pytest.mark.parametrize(
    "model,dtype,gpu,widened",
    [
        ("llama-3.1-70b", "fp8", "h100", False),  # w8a8 fp8: Hopper's fp8 rate
        ("llama-3.1-70b", "fp8", "a100", True),  # no fp8 rate on Ampere: Marlin widens it
        ("llama-3.1-70b", None, "h100", False),  # bf16
        ("llama-3.1-70b", "nvfp4", "b200", False),  # Blackwell's fp4 rate
        ("llama-3.1-70b", "nvfp4", "h200", True),
        ("gpt-oss-120b", None, "h200", True),  # mxfp4 experts on Hopper: Marlin / Triton w4a16
        ("gpt-oss-120b", None, "b200", False),  # block-scaled fp4 MMA takes mxfp4 as stored
        ("llama-3.1-70b", "int4", "b200", True),  # integer weight-only: widened everywhere
    ],
)
def test_which_weights_are_widened(model, dtype, gpu, widened):
    spec = get_model(model)
    share = dequant_share(spec, get_gpu(gpu), stages(spec, Deployment(), dtype), 4)
    assert (share > 0) == widened


def test_gpt_oss_share_is_the_experts_and_grows_with_the_experts_reached():
    """gpt-oss keeps attention, router and LM head bf16: the widened share is its mxfp4 experts', which grows
    as more tokens reach more experts, toward all of them."""
    spec, gpu = get_model("gpt-oss-120b"), get_gpu("h100")
    staged = stages(spec, Deployment(), None)
    shares = [dequant_share(spec, gpu, staged, t) for t in (1, 4, 16, 64, 4096)]
    assert shares == sorted(shares) and shares[0] < 0.5 < shares[-1] < 1


def test_widened_weights_cost_their_bytes_over_dequant_eff():
    """A memory-bound step: the widened share of the weights takes 1 / dequant_eff of their time, the rest
    unchanged; with dequant_eff 1 nothing changes, and the ceiling is never beaten."""
    spec, gpu = get_model("llama-3.1-70b"), get_gpu("a100")
    dep = Deployment(tp=2, link=link_for(gpu))
    f = features(spec, gpu, dep, decode_contexts=[512], dtype="fp8")
    assert f.dequant > 0.9
    c = dict(STARTING)
    plain = time_of(f._replace(dequant=0.0), c)
    widened = time_of(f, c)
    k = step_constants(c, f.family, "vllm", False, f.link)  # the constants time_of resolves for this step
    weights = f.stage_bytes[0][0] / (f.bandwidth * k.bw_eff)
    assert widened - plain == pytest.approx(weights * f.dequant * (1 / k.dequant_eff - 1), rel=1e-9)
    assert time_of(f, {**c, "dequant_eff": 1.0}) == plain
    assert widened > plain >= f.ceiling_s


def test_llamacpp_keeps_its_quantized_kernels_in_its_own_efficiency():
    """llama.cpp's GGUF steps (plan/llamacpp_speed) are timed with bw_eff.<family>.llamacpp alone: a
    quantized step through the estimate takes the same time whatever the shared dequant_eff."""
    spec, gpu = get_model("llama-3-8b"), get_gpu("rtx-4090")
    f = features(spec, gpu, Deployment(), decode_contexts=[512], dtype="int4")
    c = dict(STARTING)
    assert f.dequant > 0
    assert time_of(f, c, "llamacpp") == time_of(f, {**c, "dequant_eff": 0.3}, "llamacpp")
    assert time_of(f, c, "vllm") < time_of(f, {**c, "dequant_eff": 0.3}, "vllm")
