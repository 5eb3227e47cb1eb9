"""Speed on parallel deployments: roofline / generate / fit with --tp and --pp, communication, fit
honesty, and generate's closed-form decode sum checked against the step-by-step loop."""

from __future__ import annotations

import json

import pytest
from conftest import run, run_json
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc.cost.flops import causal_pairs, chunked_pairs, decode_attention_flops, prefill_flops
from kvcalc.cost.kvcache import cache_bytes
from kvcalc.cost.params import compute_params, weight_bytes_read
from kvcalc.cost.roofline import decode_row
from kvcalc.cost.shard import LINKS
from kvcalc.cost.step import Deployment, stages
from kvcalc.model.presets import get_gpu, get_model
from kvcalc.plan.generate import (
    decode_sum,
    forward_flops,
    generate_report,
    sum_causal_pairs,
    sum_chunked_pairs,
    sum_held,
)

# --- acceptance -----------------------------------------------------------------------------


def test_fit_latency_goal_uses_the_gpus():
    four = run_json("fit", "llama-3-70b", "--gpu", "h100", "--gpus", "4", "--seq", "8k", "--tpot-ms", "30")
    eight = run_json("fit", "llama-3-70b", "--gpu", "h100", "--gpus", "8", "--seq", "8k", "--tpot-ms", "30")
    assert four["slo"]["met"] and 0 < four["slo"]["tpot_s"] <= 0.030
    assert eight["slo"]["batch"] > four["slo"]["batch"]
    assert four["tp"] == 4 and eight["tp"] == 8


def test_roofline_steps_shrink_with_tp_but_pay_communication():
    steps = {}
    for n in (1, 2, 4, 8):
        out = run_json("roofline", "llama-3-70b", "--gpu", "h100", "--batch", "1", "--seq", "1k", "--tp", str(n))
        assert out["tp"] == n and out["pp"] == 1
        steps[n] = out["rows"][0]["step_seconds"]
        assert (out["rows"][0]["comm_seconds"] > 0) == (n > 1)
    for n in (2, 4, 8):
        assert steps[1] / n < steps[n] < steps[n // 2]


@pytest.mark.parametrize(
    ("model", "gpu", "tp", "dtype", "kv", "seq", "measured_ms", "low_ms", "high_ms"),
    [
        # NVIDIA NIM 1.8: Llama-3.3-70B fp8 on 2 x H100, 18.6 ms per output token at concurrency 1, 5,000 in / 500 out.
        ("llama-3.1-70b", "h100", 2, "fp8", "bf16", 5250, 18.6, 11, 13),
        # LMDeploy: Llama-2-70B fp16 on 4 x A100-80GB, 29 ms per token at batch 1.
        ("llama-2-70b", "a100", 4, "fp16", "fp16", 2048, 29.0, 17, 19),
    ],
)
def test_ceiling_below_measured_multi_gpu_decode(model, gpu, tp, dtype, kv, seq, measured_ms, low_ms, high_ms):
    out = run_json(
        "roofline",
        model,
        "--gpu",
        gpu,
        "--tp",
        str(tp),
        "--dtype",
        dtype,
        "--kv-dtype",
        kv,
        "--batch",
        "1",
        "--seq",
        str(seq),
    )
    step_ms = out["rows"][0]["step_seconds"] * 1e3
    assert step_ms < measured_ms and low_ms <= step_ms <= high_ms
    assert out["rows"][0]["fits"] is True


def test_allreduce_in_the_step_llama3_70b_tp4():
    # batch 1: 160 all-reduces of 16,384 B over NVLink 4 (see test_parallel): 600.74 us on the step.
    out = run_json("roofline", "llama-3-70b", "--gpu", "h100", "--batch", "1", "--seq", "1k", "--tp", "4")
    row = out["rows"][0]
    assert row["comm_seconds"] == pytest.approx(160 * (3.7e-6 + 24_576 / 450e9))
    assert row["step_seconds"] == pytest.approx(
        max(row["memory_seconds"], row["compute_seconds"]) + row["comm_seconds"]
    )
    # Per GPU: the tp-4 shard (norms whole) plus one token's embedding row, and 2 of 8 KV heads.
    assert row["kv_bytes"] == 1024 * 2 * 80 * 2 * 128 * 2
    assert out["interconnect"].startswith("NVLink 4")


def test_pipeline_adds_sends_and_splits_layers():
    one = run_json("roofline", "llama-3-70b", "--gpu", "h100", "--batch", "1", "--seq", "1k", "--tp", "4")
    two = run_json("roofline", "llama-3-70b", "--gpu", "h100", "--batch", "1", "--seq", "1k", "--tp", "4", "--pp", "2")
    r1, r2 = one["rows"][0], two["rows"][0]
    # Decode latency does not improve with pp: the stages run one after another, plus one send.
    assert r2["step_seconds"] > r1["step_seconds"]
    assert r2["comm_seconds"] == pytest.approx(r1["comm_seconds"] + 3.7e-6 + 16_384 / 450e9)
    # Per GPU: the heavier stage (40 layers + final norm + LM head) holds about half the weights.
    assert r1["weight_bytes"] / 2 < r2["weight_bytes"] < r1["weight_bytes"] * 0.52
    assert r2["kv_bytes"] == r1["kv_bytes"] // 2


def test_recurrent_state_is_read_and_written_each_decode_step():
    # Qwen3-Next-80B-A3B: 36 of its 48 layers are gated-delta-net layers holding 1,097,728 B of state
    # per sequence (bf16); at tp 4 a rank holds a quarter of the heads' state, 36 x 1,097,728 / 4 =
    # 9,879,552 B. A decode step loads every sequence's state and stores the updated one:
    # 2 x 64 x 9,879,552 = 1,264,582,656 B at batch 64, on top of the weights and the KV.
    out = run_json("roofline", "qwen3-next-80b-a3b", "--gpu", "h100", "--batch", "64", "--seq", "4k", "--tp", "4")
    row = out["rows"][0]
    assert row["state_bytes"] == 2 * 64 * 36 * 1_097_728 // 4 == 1_264_582_656
    # the ceiling's weights: the 10 of 512 experts a layer that tokens routed alike reach, not uniform routing's
    least = row["ceiling_weight_bytes"]
    assert least < row["weight_bytes"]
    total = least + row["kv_bytes"] + row["state_bytes"]
    assert row["memory_seconds"] == pytest.approx(total / 3.35e12)
    assert row["arithmetic_intensity"] == pytest.approx(row["flops"] / total)
    # A pure-attention model moves no state.
    dense = run_json("roofline", "llama-3-8b", "--gpu", "h100", "--batch", "64", "--seq", "4k")
    assert dense["rows"][0]["state_bytes"] == 0


def test_interconnect_override():
    pcie = run_json(
        "roofline",
        "llama-3-70b",
        "--gpu",
        "h100",
        "--batch",
        "64",
        "--seq",
        "1k",
        "--tp",
        "8",
        "--interconnect",
        "pcie4",
    )
    nvl = run_json("roofline", "llama-3-70b", "--gpu", "h100", "--batch", "64", "--seq", "1k", "--tp", "8")
    # batch 64: 64 x 8192 x 2 B = 1 MiB per all-reduce; 2 x 7/8 of it over 32 GB/s vs 450 GB/s.
    msg = 64 * 8192 * 2
    assert pcie["rows"][0]["comm_seconds"] == pytest.approx(160 * (3.7e-6 + 2 * 7 / 8 * msg / 32e9))
    assert nvl["rows"][0]["comm_seconds"] == pytest.approx(160 * (3.7e-6 + 2 * 7 / 8 * msg / 450e9))


# --- fit honesty --------------------------------------------------------------------------------


def test_roofline_marks_rows_that_do_not_fit():
    out = run_json("roofline", "llama-3-8b", "--gpu", "h100", "--batch", "1,64", "--seq", "128k")
    assert [r["fits"] for r in out["rows"]] == [True, False]
    assert "1 of 2 rows do not fit on one h100" in out["warnings"][0] and "over by" in out["warnings"][0]
    table = run("roofline", "llama-3-8b", "--gpu", "h100", "--batch", "1,64", "--seq", "128k").stdout
    assert "NO" in table and "over by" in " ".join(table.split())
    big = run_json("roofline", "llama-3.1-405b", "--gpu", "h100", "--batch", "1", "--seq", "8k")
    assert big["rows"][0]["fits"] is False


def test_generate_says_when_it_does_not_fit():
    out = run_json("generate", "deepseek-v3", "--gpu", "h100", status=3)  # printed, exit 3 as fit's
    assert out["fits"] is False and out["tp"] == 1 and out["comm_seconds_per_step"] == 0
    table = run("generate", "deepseek-v3", "--gpu", "h100")  # the table too, on stdout, and no error line
    assert table.exit_code == 3 and "DOES NOT FIT" in table.stdout and "kvcalc: error" not in table.stderr
    ok = run_json("generate", "deepseek-v3", "--gpu", "h200", "--tp", "8")
    assert ok["fits"] is True and ok["comm_seconds_per_step"] > 0 and ok["tp"] == 8


def test_seq_beyond_max_position_embeddings_warns(tmp_path):
    config = {
        "model_type": "llama",
        "num_hidden_layers": 4,
        "hidden_size": 512,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "intermediate_size": 1024,
        "vocab_size": 1000,
        "max_position_embeddings": 4096,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    out = run_json("roofline", str(path), "--gpu", "h100", "--batch", "1", "--seq", "8k")
    assert any("exceeds" in w and "max_position_embeddings 4,096" in w for w in out["warnings"])
    assert not run_json("roofline", str(path), "--gpu", "h100", "--batch", "1", "--seq", "4k")["warnings"]
    assert run_json("generate", str(path), "--gpu", "h100", "--prompt", "4k", "--new", "8")["warnings"]


def test_fit_exit_status_and_lists():
    # 0: fits; 3: does not fit (weights or batch) or misses a goal; always the table and a verdict.
    assert run("fit", "llama-3-8b", "--gpu", "h100").exit_code == 0
    too_big = run("fit", "llama-3-8b", "--gpu", "h100", "--batch", "512")
    assert (
        too_big.exit_code == 3
        and "DOES NOT FIT" in too_big.stdout
        and "largest batch that fits is" in " ".join(too_big.stdout.split())
    )
    assert run("fit", "llama-3-8b", "--gpu", "h100", "--ttft-ms", "0.001").exit_code == 3
    grid = json.loads(
        run("fit", "llama-3-8b", "--gpu", "h100", "--batch", "1,64", "--seq", "8k,32k", "-f", "json").stdout
    )
    rows = grid["rows"]
    assert [(r["batch"], r["seq"]) for r in rows] == [(1, 8192), (64, 8192), (1, 32768), (64, 32768)]
    assert [r["fits"] for r in rows] == [True, False, True, False]
    assert run("fit", "llama-3-8b", "--gpu", "h100", "--batch", "1,64").exit_code == 3


@pytest.mark.parametrize(
    "args",
    [
        ("roofline", "llama-3-70b", "--gpu", "h100", "--gpus", "0"),
        ("roofline", "llama-3-70b", "--gpu", "h100", "--tp", "3"),
        ("generate", "llama-3-70b", "--gpu", "h100", "--pp", "81"),
        ("fit", "llama-3-70b", "--gpu", "h100", "--pp", "0"),
        ("generate", "qwen2.5-7b", "--gpu", "l4", "--gpus", "7"),
        ("roofline", "llama-3-70b", "--gpu", "h100", "--tp", "2", "--interconnect", "warp"),
        ("roofline", "llama-3-70b", "--gpu", "tpu-v4", "--tp", "2"),
    ],
)
def test_bad_deployments_are_one_line(args):
    result = run(*args)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_explain_shows_the_split_and_the_allreduce():
    out = run_json("roofline", "llama-3-70b", "--gpu", "h100", "--batch", "1", "--seq", "1k", "--tp", "4", "--explain")
    text = "\n".join(out["explanation"])
    assert "2 of 8 KV heads" in text and "16 query heads" in text
    assert (
        "2 per layer x 80 layers x (alpha 3.70 µs + 2 x 3/4 x 16,384 B / 450 GB/s) = 160 x 3.75 µs = 600.74 µs" in text
    )


def test_roofline_efficiency_estimate_beside_the_ceiling():
    out = run_json("roofline", "llama-3-8b", "--gpu", "h100", "--batch", "1", "--seq", "1k", "--efficiency", "0.5")
    row = out["rows"][0]
    assert out["mbu"] == out["mfu"] == 0.5
    assert row["estimate_step_seconds"] == pytest.approx(2 * row["step_seconds"])
    assert "estimate" in run("roofline", "llama-3-8b", "--gpu", "h100", "--efficiency", "0.5").stdout


def test_generate_explain_shows_both_terms_of_the_max():
    out = run_json("generate", "llama-3-8b", "--gpu", "h100", "--new", "16", "--explain")
    first = next(line for line in out["explanation"] if "first decode step" in line)
    assert "max(" in first and "B / (bandwidth x 1) =" in first and "FLOPs / (peak x 1) =" in first


# --- generate: closed form against the loop ------------------------------------------------------


def _loop(spec, gpu, dep, batch, prompt, new, kv, mbu=1.0, mfu=1.0):
    """The step-by-step sum generate used to compute, one decode_row per token."""
    compute = gpu.compute_dtype(spec.dtype)
    staged = stages(spec, dep, None)
    util = None if (mbu, mfu) == (1.0, 1.0) else (mbu, mfu)
    total = 0.0
    for t in range(1, new):
        row = decode_row(spec, gpu, batch, prompt + t, None, kv, compute, dep=dep, staged=staged, util=util)
        total += row.estimate_step_seconds if util else row.step_seconds
    return total


def _old_single_gpu_loop(spec, gpu, batch, prompt, new, kv):
    """The original single-GPU loop, independent of step.py: weights + cache bytes vs FLOPs, per token."""
    compute = gpu.compute_dtype(spec.dtype)
    weight = weight_bytes_read(spec, batch)
    if spec.is_moe:  # the ceiling's routing: every token to the same k experts (one token's), a row each untied
        weight = weight_bytes_read(spec, 1) + (batch - 1) * spec.hidden_size * 2
    total = 0.0
    for t in range(1, new):
        nbytes = weight + cache_bytes(spec, batch, prompt + t, kv)
        flops = batch * (2 * compute_params(spec) + decode_attention_flops(spec, prompt + t))
        total += max(nbytes / gpu.bandwidth_bytes_per_s, flops / gpu.peak_flop_per_s(compute))
    return total


@pytest.mark.parametrize(
    ("model", "gpu", "tp", "pp", "batch", "prompt", "new", "util"),
    [
        ("llama-3-8b", "h100", 1, 1, 1, 100, 300, (1.0, 1.0)),
        ("gemma-2-9b", "h100", 1, 1, 4, 3900, 400, (1.0, 1.0)),  # crosses the 4,096 sliding window
        ("gemma-2-9b", "a100", 2, 3, 8, 4000, 200, (0.6, 0.4)),
        ("mixtral-8x7b", "h100", 2, 1, 64, 10, 300, (1.0, 1.0)),
        ("llama-3-8b", "l4", 1, 1, 512, 1, 400, (1.0, 0.3)),  # compute-bound early, memory-bound later
        ("deepseek-v3", "h200", 8, 2, 16, 50, 100, (1.0, 1.0)),
        ("llama-4-scout", "h100", 8, 1, 2, 8100, 200, (1.0, 1.0)),  # crosses the 8,192 attention chunk
        ("llama-3.2-11b-vision", "h100", 2, 2, 4, 10, 100, (1.0, 1.0)),  # cross-attention to image tokens
        ("qwen3-next-80b-a3b", "h100", 4, 2, 64, 4000, 200, (0.8, 0.5)),  # linear-attention state every step
        ("nemotron-h-56b", "h200", 4, 1, 256, 1, 300, (1.0, 1.0)),  # Mamba-2 state, one block per layer
        ("glm-5", "h200", 8, 1, 4, 1950, 300, (1.0, 1.0)),  # DSA: the latent read stops at the top 2,048
        ("deepseek-v3.2", "b200", 8, 2, 64, 2000, 100, (0.7, 0.5)),
    ],
)
def test_closed_form_decode_sum_matches_the_loop(model, gpu, tp, pp, batch, prompt, new, util):
    spec, g = get_model(model), get_gpu(gpu)
    dep = Deployment(tp=tp, pp=pp, link=LINKS["nvlink4"])
    closed = decode_sum(
        spec, g, dep, stages(spec, dep, None), batch=batch, lo=prompt + 1, hi=prompt + new - 1,
        dtype=None, kv_dtype="bf16", compute_dtype=g.compute_dtype(spec.dtype), mbu=util[0], mfu=util[1],
    )  # fmt: skip
    assert closed == pytest.approx(_loop(spec, g, dep, batch, prompt, new, "bf16", *util), rel=1e-12)


def test_closed_form_matches_the_original_single_gpu_loop():
    for model, batch, prompt, new in (
        ("llama-3-8b", 1, 1024, 256),
        ("gemma-2-9b", 8, 4000, 300),
        ("qwen3-30b-a3b", 32, 1, 200),
    ):
        spec, gpu = get_model(model), get_gpu("h100")
        out = generate_report(
            spec, gpu, batch=batch, prompt=prompt, new=new, dtype=None, kv_dtype="bf16",
            compute_dtype=gpu.compute_dtype(spec.dtype), steps=[],
        )  # fmt: skip
        assert out.tpot_s * (new - 1) == pytest.approx(
            _old_single_gpu_loop(spec, gpu, batch, prompt, new, "bf16"), rel=1e-12
        )
        cached = batch * (
            prefill_flops(spec, prompt)
            + sum(2 * compute_params(spec) + decode_attention_flops(spec, prompt + t) for t in range(1, new))
        )
        uncached = batch * sum(forward_flops(spec, prompt + t) for t in range(new))
        assert out.flops_cached == cached and out.lesson.flops_uncached == uncached


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 300), st.integers(0, 300), st.one_of(st.none(), st.integers(1, 200)))
def test_closed_form_series(a, n, window):
    b = a + n
    assert sum_held(window, a, b) == sum(c if window is None else min(c, window) for c in range(a, b + 1))
    assert sum_causal_pairs(window, a, b) == sum(causal_pairs(c, window) for c in range(a, b + 1))
    chunk = window or 7
    assert sum_chunked_pairs(chunk, a, b) == sum(chunked_pairs(c, chunk) for c in range(a, b + 1))


def test_generate_a_million_tokens_is_closed_form(monkeypatch):
    import kvcalc.plan.generate as generate

    # The token-by-token loop took 118 s; the closed form about 0.3 s (timed in benchmarks/bounds.py).
    # Here the operations are counted: two decode steps are costed (the first and the last), not 2^20.
    calls = []
    row = generate.decode_row
    monkeypatch.setattr(generate, "decode_row", lambda *a, **k: calls.append(1) or row(*a, **k))
    out = run_json("generate", "llama-3-8b", "--gpu", "h100", "--new", "1m", status=3)
    assert out["new"] == 1 << 20 and out["tpot_last_s"] > out["tpot_first_s"]
    assert len(calls) == 2


def test_generate_and_fit_plot_step_times(tmp_path):
    pytest.importorskip("matplotlib")
    svg = tmp_path / "generate.svg"
    out = run("generate", "llama-3-8b", "--gpu", "h100", "--new", "4k", "--efficiency", "0.5", "--plot", str(svg))
    assert out.exit_code == 0, out.stderr
    text = svg.read_text()
    assert 'id="tpot-ceiling"' in text and 'id="tpot-estimate (MBU 0.5, MFU 0.5)"' in text
    svg = tmp_path / "fit.svg"
    out = run(
        "fit", "llama-3-70b", "--gpu", "h100", "--tp", "4", "--seq", "8k,32k", "--tpot-ms", "30", "--plot", str(svg)
    )
    assert out.exit_code == 0, out.stderr
    text = svg.read_text()
    assert 'id="tpot-seq 8,192 (ceiling)"' in text and 'id="tpot-seq 32,768 (ceiling)"' in text


def test_fit_explain_shows_the_latency_search_and_its_allreduce():
    out = run_json("fit", "llama-3-70b", "--gpu", "h100", "--gpus", "4", "--seq", "8k", "--tpot-ms", "20", "--explain")
    text = "\n".join(out["explanation"])
    best = out["slo"]["batch"]
    assert f"by bisection: {best:,}" in text and f"batch {best + 1:,}: TPOT" in text
    assert "2 per layer x 80 layers" in text


def test_fit_explain_shows_the_prefill_allreduce_for_a_ttft_goal():
    # A TTFT goal is met or missed by the prompt pass, whose all-reduces carry every prompt token:
    # 1 x 8,192 tokens x 8,192 hidden x 2 B = 134,217,728 B each, 160 of them (one 2 x 3/4 x that / 450 GB/s
    # + 3.7 us = 451.09 us), 72.17 ms in all; the decode step's carry one token, 16,384 B.
    out = run_json(
        "fit", "llama-3-70b", "--gpu", "h100", "--tp", "4", "--seq", "8k", "--ttft-ms", "500", "--explain", "--ceiling"
    )
    text = "\n".join(out["explanation"])
    assert "prefill, 1 x 8,192 tokens: all-reduce" in text and "2 x 3/4 x 134,217,728 B" in text
    assert "= 160 x 451.09 µs = 72.17 ms" in text
    assert "decode step, batch 1: all-reduce" in text and "2 x 3/4 x 16,384 B" in text


def test_generate_explain_counts_the_state_in_the_step_bytes():
    # The first decode step of a 1,024-token prompt runs at context 1,025; its bytes in --explain are
    # roofline's weights + KV + recurrent state for that step (Nemotron-H: 2 x batch x its Mamba state).
    args = ("nemotron-h-56b", "--gpu", "h100", "--tp", "4", "--batch", "8")
    row = run_json("roofline", *args, "--seq", "1025")["rows"][0]
    assert row["state_bytes"] > 0
    text = "\n".join(run_json("generate", *args, "--prompt", "1k", "--explain")["explanation"])
    total = row["weight_bytes"] + row["kv_bytes"] + row["state_bytes"]
    assert f"first decode step (context 1,025): max({total:,} B" in text


def test_roofline_fits_exactly_when_fit_does():
    # Llama-3-8B on one H100 at 4,001 tokens. Budget 85,030,000,000 x 0.9 = 76,527,000,000 B, less
    # 16,060,522,496 B of weights and 2 GiB reserve: 58,318,993,856 B for the cache. A sequence holds
    # 4,001 tokens in 251 blocks of 16 = 4,016 slots x 131,072 B = 526,385,152 B (vLLM pages it), so
    # 110 sequences fit (57,902,366,720 B) and 111 do not (58,428,751,872 B), though 111 x 4,001 tokens
    # unpaged (58,210,516,992 B) would.
    assert 110 * 4016 * 131_072 <= 58_318_993_856 < 111 * 4016 * 131_072
    assert 111 * 4001 * 131_072 <= 58_318_993_856
    fit = json.loads(
        run("fit", "llama-3-8b", "--gpu", "h100", "--seq", "4001", "--batch", "110,111", "-f", "json").stdout
    )
    assert [r["fits"] for r in fit["rows"]] == [True, False] and fit["rows"][0]["max_batch"] == 110
    roof = run_json("roofline", "llama-3-8b", "--gpu", "h100", "--seq", "4001", "--batch", "110,111")
    assert [r["fits"] for r in roof["rows"]] == [True, False]
    # The step still reads only the tokens: 111 x 4,001 x 131,072 B of KV.
    assert roof["rows"][1]["kv_bytes"] == 111 * 4001 * 131_072
    gen = run_json(
        "generate", "llama-3-8b", "--gpu", "h100", "--batch", "111", "--prompt", "3745", "--new", "256", status=3
    )
    assert gen["fits"] is False  # 3,745 + 256 = 4,001 tokens held at the end
