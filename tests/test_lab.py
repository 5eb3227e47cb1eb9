"""kvcalc lab: each premise holds on the tiny float64 decoder, exactly where the claim is exactness."""

import json
import sys

import numpy as np
import pytest
from conftest import run

from kvcalc.lab import checks as lab
from kvcalc.lab.tiny import LabConfig, TinyDecoder


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_past_keys_and_values_are_exactly_unchanged(seed):
    model = TinyDecoder(LabConfig(), seed=seed)
    toks = np.random.default_rng(seed).integers(64, size=13)
    short, longer = model.keys_values(toks[:12]), model.keys_values(toks)
    for a, b in zip(short, longer):
        assert np.array_equal(b.k[:, :12], a.k) and np.array_equal(b.v[:, :12], a.v)
    assert not np.array_equal(longer[0].k[:, 12], longer[0].k[:, 11])


@pytest.mark.parametrize(
    ("kv_heads", "chunks"), [(4, [8] + [1] * 12), (2, [8] + [1] * 12), (1, [8] + [1] * 12), (2, [8, 5, 4, 3])]
)
def test_cached_decoding_matches_full_forward(kv_heads, chunks):
    model = TinyDecoder(LabConfig(n_kv_heads=kv_heads), seed=3)
    toks = np.random.default_rng(3).integers(64, size=20)
    cache, outs, start = [], [], 0
    for size in chunks:
        outs.append(model.forward(toks[start : start + size], cache))
        start += size
    assert np.abs(np.concatenate(outs) - model.forward(toks)).max() <= 1e-12
    assert cache[0].k.shape == (kv_heads, 20, 8)  # the cache holds G heads, not h


def test_top_left_mask_is_wrong_bottom_right_is_right():
    model = TinyDecoder(LabConfig(), seed=0)
    toks = np.random.default_rng(0).integers(64, size=13)
    ref = model.forward(toks)[-1]
    errors = {}
    for mask in ("top-left", "bottom-right"):
        cache = []
        model.forward(toks[:12], cache)
        errors[mask] = np.abs(model.forward(toks[12:], cache, mask=mask)[-1] - ref).max()
    assert errors["top-left"] > 1e-3 and errors["bottom-right"] <= 1e-12


def test_gqa_with_g_equal_h_is_mha_and_grouping_matters():
    check = lab.check_gqa_equals_mha(0)
    assert check.passed and check.value == 0.0
    model = TinyDecoder(LabConfig(n_heads=8, n_kv_heads=2, d_model=64), seed=0)
    assert model.kv_head_of().tolist() == [0, 0, 0, 0, 1, 1, 1, 1]  # j // (h / G)


def test_pooling_similar_heads_loses_much_less():
    check = lab.check_pooling(0)
    assert check.passed
    unrelated, similar = [float(x) for x in check.measured.replace(",", "").split() if x[0].isdigit()]
    assert similar * 10 < unrelated


def test_positions_learned_breaks_rope_keeps():
    check = lab.check_positions(0)
    assert check.passed and check.value > 1e-3


def test_savings_traffic_and_flops():
    check = lab.check_savings(0)
    assert check.passed
    assert check.value == 8_390_656
    assert "copied 8,390,656 positions" in check.measured and "wrote 4,096" in check.measured


def test_cli_json_lists_every_check():
    result = run("lab", "--format", "json")
    out = json.loads(result.stdout)
    assert [c["name"] for c in out["checks"]] == list(lab.CHECKS)
    # NOTE: 'roofline' times this machine's kernels, which a busy machine moves by several times; every
    # other check is exact arithmetic on the tiny model and must pass wherever the suite runs.
    exact = [c for c in out["checks"] if c["name"] != "roofline"]
    for c in out["checks"]:
        assert set(c) >= {"name", "claim", "measured", "value", "passed"}
    assert all(c["passed"] for c in exact), [c["name"] for c in exact if not c["passed"]]
    assert out["passed"] is all(c["passed"] for c in out["checks"])
    assert result.exit_code == (0 if out["passed"] else 1), result.stderr


def test_cli_runs_named_checks_and_bench():
    out = json.loads(run("lab", "causality", "speed", "--format", "json").stdout)
    assert [c["name"] for c in out["checks"]] == ["causality", "speed"]
    assert [r["tokens"] for r in out["bench"]] == [64, 128, 255]
    assert out["bench"][-1]["naive_s_per_token"] > out["bench"][-1]["cached_s_per_token"]


def test_unknown_check():
    result = run("lab", "magic")
    assert result.exit_code != 0 and "unknown lab check 'magic'" in result.stderr


def test_lab_without_numpy_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "numpy", None)
    result = run("lab")
    assert result.exit_code != 0 and result.stdout == ""
    assert "pip install 'kvcalc[lab]'" in result.stderr and result.stderr.count("\n") == 1


def test_cache_arrays_hold_the_formula_and_scale_to_the_70b():
    from kvcalc.lab.tiny import cache_arrays, cache_nbytes

    # The 70B of THEORY.md section 2 (L 80, G 8, d_head 128), bf16 (2 B), 2 sequences x 16 tokens:
    # 2 (K, V) x 80 x 8 x 128 x 16 x 2 B = 5,242,880 B per sequence, 10,485,760 for two.
    caches = [cache_arrays(80, 8, 128, 16, "bf16") for _ in range(2)]
    assert caches[0][0].k.shape == (8, 16, 128) and len(caches[0]) == 80
    assert cache_nbytes(caches) == 10_485_760
    check = lab.check_cache_size(0)
    assert check.passed and check.value == 80 * 2**30
    assert "70b 10,485,760" in check.measured and "70b 32 x 8,192 bf16 80 GiB" in check.measured
    assert "7b 1 x 2,048 fp16 1 GiB" in check.measured and "llama-3-8b 16 x 8,192 bf16 16 GiB" in check.measured
    # the tiny decoder's own float64 cache after 20 tokens: 2 layers x 2 x 4 heads x 20 x 8 x 8 B = 20,480
    assert "the lab decoder's own 20,480 (formula 20,480)" in check.measured


def test_decode_and_prefill_intensities():
    from kvcalc.lab.tiny import Products

    work = Products(64, 8)
    # decode: 2 n^2 FLOPs over 4 (n^2 + 2n) bytes; prefill over 8 columns: 2 n^2 x 8 over 4 (n^2 + 2 x 8 n)
    assert (work.decode_flops(), work.decode_bytes()) == (8_192, 16_896)
    assert (work.prefill_flops(), work.prefill_bytes()) == (65_536, 20_480)
    assert work.decode().shape == (64,) and work.prefill().shape == (64, 8)
    # the lab's sizes: W 4,096 x 4,096 fp32, 512 columns: 17,179,869,184 / 83,886,080 = 204.8 FLOP/B
    big = Products.__new__(Products)
    big.n, big.tokens = 4096, 512
    assert big.prefill_flops() / big.prefill_bytes() == 204.8
    assert big.decode_flops() / big.decode_bytes() == pytest.approx(0.49975, abs=1e-5)


def test_lab_runs_nine_checks():
    assert len(lab.CHECKS) >= 9 and {"cache-size", "roofline"} <= set(lab.CHECKS)
    out = json.loads(run("lab", "roofline", "--format", "json").stdout)
    (check,) = out["checks"]
    assert check["name"] == "roofline" and "0.50 FLOP/B" in check["measured"] and "205 FLOP/B" in check["measured"]
    assert check["value"] > 0
