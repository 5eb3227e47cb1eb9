"""Property tests (hypothesis) for the laws the arithmetic must obey."""

from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc.cost.kvcache import cache_bytes, kv_heads_per_rank
from kvcalc.cost.roofline import decode_row
from kvcalc.model.presets import get_gpu, get_model
from kvcalc.model.spec import LayerKind, LayerRun, ModelSpec

dims = st.fixed_dictionaries(
    {
        "num_layers": st.integers(2, 96),
        "head_dim": st.sampled_from([32, 64, 80, 96, 128, 256]),
        "groups": st.integers(1, 16),
        "group_size": st.integers(1, 8),
    }
)
batches = st.integers(1, 256)
seqs = st.integers(1, 1 << 20)
kv_dtypes = st.sampled_from(["fp32", "bf16", "fp16", "fp8", "int8", "int4"])


def make(d, kv_heads=None, pattern=()):
    heads = d["groups"] * d["group_size"]
    return ModelSpec(
        name="m",
        num_layers=d["num_layers"],
        hidden_size=heads * d["head_dim"],
        num_heads=heads,
        num_kv_heads=kv_heads or d["groups"],
        head_dim=d["head_dim"],
        vocab_size=1000,
        layer_pattern=list(pattern),
    )


@given(dims, batches, seqs, kv_dtypes, st.integers(2, 9))
def test_linear_in_batch(d, b, s, kv, k):
    m = make(d)
    assert cache_bytes(m, k * b, s, kv) == k * cache_bytes(m, b, s, kv)


@given(dims, batches, st.integers(1, 4096), kv_dtypes, st.integers(2, 9), st.integers(4096 * 9, 1 << 20))
def test_linear_in_seq_below_every_window(d, b, s, kv, k, window):
    m = make(d, pattern=[LayerRun(kind=LayerKind.SLIDING, window_tokens=window), LayerRun()])
    assert k * s <= window
    assert cache_bytes(m, b, k * s, kv) == k * cache_bytes(m, b, s, kv)


@given(dims, batches, seqs, kv_dtypes)
def test_formula_2_L_G_d_B_S_b(d, b, s, kv):
    m = make(d)
    bits = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}[kv]
    assert cache_bytes(m, b, s, kv) == 2 * d["num_layers"] * d["groups"] * d["head_dim"] * b * s * bits // 8


@given(dims, batches, seqs)
def test_gqa_with_g_equal_h_is_mha(d, b, s):
    heads = d["groups"] * d["group_size"]
    gqa = make(d, kv_heads=heads)
    mha = ModelSpec(
        name="mha",
        num_layers=d["num_layers"],
        hidden_size=heads * d["head_dim"],
        num_heads=heads,
        head_dim=d["head_dim"],
        vocab_size=1000,
    )
    assert mha.num_kv_heads is None and mha.kv_heads == heads
    assert cache_bytes(gqa, b, s, "bf16") == cache_bytes(mha, b, s, "bf16")


@given(dims, batches, seqs)
def test_fp8_is_half_bf16_and_int4_a_quarter(d, b, s):
    m = make(d)
    bf16 = cache_bytes(m, b, s, "bf16")
    assert 2 * cache_bytes(m, b, s, "fp8") == bf16
    assert 4 * cache_bytes(m, b, s, "int4") == bf16
    assert isinstance(bf16, int)


@given(dims, st.integers(1, 65536), st.integers(1, 1 << 20), batches)
def test_sliding_layer_never_holds_more_than_w(d, window, s, b):
    m = make(d, pattern=[LayerRun(kind=LayerKind.SLIDING, window_tokens=window)])
    assert cache_bytes(m, b, s, "bf16") <= cache_bytes(m, b, window, "bf16")
    assert cache_bytes(m, b, s, "bf16") == cache_bytes(m, b, min(s, window), "bf16")


@given(st.integers(1, 128), st.integers(1, 64))
def test_tp_never_below_one_head_per_rank(kv_heads, tp):
    per_rank = kv_heads_per_rank(kv_heads, tp)
    assert per_rank >= 1
    assert per_rank * tp >= kv_heads or kv_heads % tp != 0


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["7b", "llama-3-8b", "mixtral-8x7b", "gemma-2-9b", "deepseek-v3", "gpt-oss-20b"]),
    st.sampled_from(["a100", "h100", "l4", "mi300x", "t4"]),
    st.integers(1, 1024),
    st.integers(1, 1 << 17),
)
def test_throughput_never_above_either_roof(name, gpu_name, b, s):
    model, gpu = get_model(name), get_gpu(gpu_name)
    compute = gpu.compute_dtype(model.dtype)
    row = decode_row(model, gpu, b, s, None, "bf16", compute)
    bandwidth_roof = gpu.bandwidth_bytes_per_s * row.arithmetic_intensity  # FLOP/s the bytes allow
    attained = row.flops / row.step_seconds
    assert attained <= gpu.peak_flop_per_s(compute) * (1 + 1e-12)
    assert attained <= bandwidth_roof * (1 + 1e-12)
    assert row.tokens_per_s == b / row.step_seconds
