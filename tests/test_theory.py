"""Every worked figure of THEORY.md, reproduced through the CLI's JSON."""

import pytest
from conftest import GiB, MiB, run_json


def test_llama2_7b_half_a_mib_per_token():
    out = run_json("cache", "llama-2-7b", "--kv-dtype", "bf16")
    assert out["bytes_per_token"] == 524_288 == MiB // 2


def test_llama_7b_2048_tokens_fp16_is_1_gib():
    out = run_json("cache", "7b", "--seq", "2048", "--kv-dtype", "fp16")
    assert out["total_bytes"] == 1 * GiB


def test_llama3_8b_batch16_8k_is_16_gib():
    out = run_json("cache", "meta-llama/Meta-Llama-3-8B", "--batch", "16", "--seq", "8192")
    assert out["total_bytes"] == 16 * GiB == 17_179_869_184
    assert out["bytes_per_token"] == 128 * 1024
    assert (out["model"], out["batch"], out["seq"], out["kv_dtype"]) == ("llama-3-8b", 16, 8192, "bf16")


@pytest.mark.parametrize(("variant", "gib", "kv_heads"), [("gqa", 80, 8), ("mha", 640, 64), ("mqa", 10, 1)])
def test_70b_gqa_mha_mqa(variant, gib, kv_heads):
    out = run_json("compare", variant)
    row = out["rows"][0]
    assert row["total_bytes"] == gib * GiB
    assert row["kv_heads"] == kv_heads


def test_compare_default_is_theory_table_and_ratios():
    out = run_json("compare", "mha", "gqa", "mqa")
    assert [r["total_bytes"] for r in out["rows"]] == [640 * GiB, 80 * GiB, 10 * GiB]
    assert [r["ratio"] for r in out["rows"]] == [1.0, 0.125, 1 / 64]
    assert (out["batch"], out["seq"]) == (32, 8192)


def test_70b_bf16_weights_about_130_gib():
    out = run_json("roofline", "70b", "--gpu", "h100", "--batch", "1")
    assert out["rows"][0]["weight_bytes"] == 140 * 10**9
    assert round(out["rows"][0]["weight_bytes"] / GiB) == 130


def test_deepseek_v2_mla_576_elements_and_56_9x():
    out = run_json("cache", "deepseek-v2")
    (layer,) = out["layers"]
    assert layer["kind"] == "mla" and layer["elements_per_token"] == 576
    cmp = run_json("compare", "mha", "mla", "--model", "deepseek-v2")
    mha, mla = cmp["rows"]
    assert mha["bytes_per_token"] == 2 * 128 * 128 * 2 * 60
    assert mha["bytes_per_token"] / mla["bytes_per_token"] == pytest.approx(32768 / 576)
    assert round(32768 / 576, 1) == 56.9


def test_mistral_window_caps_the_cache():
    at_window = run_json("cache", "mistral-7b", "--seq", "4096")
    beyond = run_json("cache", "mistral-7b", "--seq", "32k")
    assert at_window["total_bytes"] == beyond["total_bytes"] == 4096 * 32 * 2 * 8 * 128 * 2


def test_kv_quantization_halves_and_quarters():
    bf16 = run_json("cache", "llama-3-8b", "--seq", "8k")["total_bytes"]
    assert run_json("cache", "llama-3-8b", "--seq", "8k", "--kv-dtype", "fp8")["total_bytes"] * 2 == bf16
    assert run_json("cache", "llama-3-8b", "--seq", "8k", "--kv-dtype", "int8")["total_bytes"] * 2 == bf16
    assert run_json("cache", "llama-3-8b", "--seq", "8k", "--kv-dtype", "int4")["total_bytes"] * 4 == bf16


def _rows():
    out = run_json("roofline", "7b", "--gpu", "a100", "--batch", "1,8,64", "--seq", "1024,4096")
    return out, {(r["batch"], r["seq"]): r for r in out["rows"]}


def test_7b_on_a100_ridge_and_ceilings():
    out, rows = _rows()
    assert out["ridge_flop_per_byte"] == pytest.approx(153, abs=0.5)
    assert out["gpu"] == "a100"
    b1 = rows[(1, 1024)]
    assert b1["weight_bytes"] == 14_000_000_000
    assert b1["tokens_per_s"] == pytest.approx(140, abs=0.5)
    assert b1["arithmetic_intensity"] == pytest.approx(1.0, abs=0.01)
    assert b1["bound"] == "memory"
    assert rows[(8, 1024)]["tokens_per_s"] == pytest.approx(892, abs=0.5)


def test_7b_batch64_4k_kv_dominates_and_intensity_falls():
    _, rows = _rows()
    r = rows[(64, 4096)]
    assert r["kv_bytes"] == 128 * GiB
    assert r["kv_bytes"] / r["weight_bytes"] == pytest.approx(10, rel=0.02)  # "ten times the weights (13 GiB)"
    assert round(r["weight_bytes"] / GiB) == 13
    assert r["arithmetic_intensity"] == pytest.approx(6.8, abs=0.05)
    # FLOPs = B x (2N + 4·L·h·d·S)
    assert r["flops"] == 64 * (2 * 7 * 10**9 + 4 * 32 * 32 * 128 * 4096)
