"""The calibrated estimate's laws (cost/estimate.py, cost/fitting.py): never faster than the ceiling,
monotone in batch and context, concurrency 1 equal to batch 1, an interval around the estimate, and a
fit that recovers the constants synthetic points were made with."""

import math

import pytest

import kvcalc
from kvcalc.cost.estimate import ENGINES, time_of
from kvcalc.cost.fitting import Point, Setup, fit, predict, server_seconds, setup_features
from kvcalc.cost.shard import link_for
from kvcalc.cost.step import Deployment
from kvcalc.hardware.family import gpu_family
from kvcalc.model.presets import get_gpu, get_model
from kvcalc.plan.calibration import constants_for
from tests.conftest import run, run_json


def step_time(spec, gpu, dep, **kw):  # noqa: ANN001, ANN003, ANN201
    """cost.estimate.step_time with the constants the commands use: the shipped fit, passed in as plan/ passes it."""
    from kvcalc.cost.estimate import step_time as pure
    from kvcalc.plan.calibration import constants_for

    kw.setdefault("calibration", constants_for(gpu, kw.get("engine", "vllm")))
    return pure(spec, gpu, dep, **kw)


CASES = [  # dense GQA, MoE with MLA, sliding window, MoE, a tiny model; 1 and several GPUs
    ("llama-3-8b", "h100", 1, 1, None),
    ("llama-3.1-70b", "h200", 4, 1, "fp8"),
    ("deepseek-v3", "h200", 8, 1, None),
    ("gemma-2-9b", "a100", 1, 1, None),
    ("gpt-oss-120b", "h100", 1, 1, None),
    ("smollm2-135m", "rtx-4090", 1, 1, None),
    ("llama-3-70b", "rtx-4090", 2, 1, "int4"),
    ("llama-3-70b", "h100", 2, 2, None),
    ("glm-5", "b200", 8, 1, "fp8"),  # MLA with a DeepSeek Sparse Attention indexer
]


def _dep(gpu, tp, pp):
    return Deployment(tp=tp, pp=pp, link=link_for(gpu))


@pytest.mark.parametrize("model,gpu,tp,pp,dtype", CASES)
@pytest.mark.parametrize("engine", ENGINES)
def test_estimate_never_beats_the_ceiling_and_grows_with_batch_and_context(model, gpu, tp, pp, dtype, engine):
    spec, g = get_model(model), get_gpu(gpu)
    dep = _dep(g, tp, pp)
    last = 0.0
    for batch in (1, 2, 8, 32, 128):
        times = [
            step_time(spec, g, dep, engine=engine, decode_contexts=[ctx] * batch, dtype=dtype)
            for ctx in (128, 1024, 8192, 32768)
        ]
        for t in times:
            assert t.estimate_s >= t.ceiling_s > 0
            assert t.lo_s <= t.estimate_s <= t.hi_s and t.lo_s >= t.ceiling_s
        assert [t.estimate_s for t in times] == sorted(t.estimate_s for t in times)  # context
        assert times[0].estimate_s >= last  # batch
        last = times[0].estimate_s
    pre = [step_time(spec, g, dep, engine=engine, prefill_tokens=n, dtype=dtype) for n in (16, 512, 4096)]
    assert all(p.estimate_s >= p.ceiling_s for p in pre)
    assert [p.estimate_s for p in pre] == sorted(p.estimate_s for p in pre)


def test_roofline_ceiling_is_the_step_times_ceiling():
    # the estimate sits beside exactly the bound the roofline prints
    out = run_json("roofline", "llama-3.1-70b", "--gpu", "h100", "--tp", "4", "--batch", "1,16", "--seq", "2k")
    for row in out["rows"]:
        spec, g = get_model("llama-3.1-70b"), get_gpu("h100")
        t = step_time(spec, g, _dep(g, 4, 1), decode_contexts=[row["seq"]] * row["batch"])
        assert row["step_seconds"] == pytest.approx(t.ceiling_s, rel=1e-9)
        assert row["estimate"]["step_s"] == pytest.approx(t.estimate_s, rel=1e-9)
        lo, hi = row["estimate"]["interval_s"]
        assert row["step_seconds"] <= lo <= row["estimate"]["step_s"] <= hi
    assert out["engine"] == "vllm" and out["estimate_basis"].startswith("estimate")
    assert "estimate" not in run_json("roofline", "llama-3-8b", "--gpu", "h100", "--batch", "1", "--ceiling")["rows"][
        0
    ] or (
        run_json("roofline", "llama-3-8b", "--gpu", "h100", "--batch", "1", "--ceiling")["rows"][0]["estimate"] is None
    )


def test_generate_json_has_the_estimate_beside_the_top_level_ceiling():
    out = run_json("generate", "llama-3-8b", "--gpu", "h100", "--batch", "4", "--prompt", "1k", "--new", "128")
    est = out["estimate"]
    assert set(est) >= {"ttft_s", "tpot_s", "total_s", "tokens_per_s", "basis", "interval"}
    for name, better in (("ttft_s", min), ("tpot_s", min), ("total_s", min), ("tokens_per_s", max)):
        lo, hi = est["interval"][name]
        assert lo <= est[name] <= hi
        assert better(out[name], est[name]) == out[name]  # the ceiling is never worse than the estimate
        assert better(out[name], lo if name != "tokens_per_s" else hi) == out[name]  # nor than the interval
    # total and tokens/s as the issue defines them: the whole static batch, prefill included
    assert est["total_s"] == pytest.approx(est["ttft_s"] + 127 * est["tpot_s"])
    assert est["tokens_per_s"] == pytest.approx(4 * 128 / est["total_s"])
    assert run_json("generate", "llama-3-8b", "--gpu", "h100", "--ceiling")["estimate"] is None
    assert kvcalc.generate("llama-3-8b", "h100", engine="sglang").estimate.engine == "sglang"
    assert kvcalc.generate("llama-3-8b", "h100", ceiling=True).estimate is None


def test_unknown_engine_is_one_line():
    # (tgi is read as vllm, the nearest: tests/test_engine_names.py)
    r = run("generate", "llama-3-8b", "--gpu", "h100", "--engine", "exllama")
    assert r.exit_code != 0 and "unknown engine 'exllama'" in r.stderr and "Traceback" not in r.stderr


def test_concurrency_one_is_batch_one():
    spec, g = get_model("llama-3-8b"), get_gpu("h100")
    c, _ = constants_for(g, "vllm")
    one = setup_features(spec, g, Deployment(), Setup(None, 1, 1024, 256), None, "bf16")
    batch = setup_features(spec, g, Deployment(), Setup(1, None, 1024, 256), None, "bf16")
    assert predict(one, "tpot_ms", c, "vllm") == predict(batch, "tpot_ms", c, "vllm")
    # the same steps; one served client's first token also waits on the API server (an offline batch has none)
    srv_ms = server_seconds(c, "vllm") * 1000
    assert srv_ms > 0
    assert predict(one, "ttft_ms", c, "vllm") == pytest.approx(predict(batch, "ttft_ms", c, "vllm") + srv_ms, rel=1e-12)
    assert predict(one, "e2e_latency_s", c, "vllm") == pytest.approx(
        predict(batch, "e2e_latency_s", c, "vllm") + srv_ms / 1000, rel=1e-12
    )


def test_pcie_all_reduce_is_not_nvlink():
    # NCCL over PCIe costs tens of µs per small all-reduce (speed_facts §2.4: 42 µs on 8 L40S); the
    # calibrated link term charges PCIe more than NVLink for the same message and group.
    g = get_gpu("rtx-4090")
    c, _ = constants_for(g, "vllm")
    assert c["ar_alpha_s.pcie"] >= c.get("ar_alpha_s.nvlink", c["ar_alpha_s"])  # the fit's ceiling (fitting.CEILINGS)
    assert c["ar_alpha_tp.pcie"] > c.get("ar_alpha_tp.nvlink", c["ar_alpha_tp"])  # and it grows faster with the ranks


def test_a_prompts_all_reduce_past_the_custom_all_reduce_runs_at_nccls_bandwidth():
    # Messages up to 8 MiB go through the engines' custom all-reduce (vLLM's max_size), larger ones through NCCL:
    # each its own achieved share of the link (ar_bw_eff, ar_bw_eff_large). Llama-3.1-70B at tp 8 on H200: a
    # 512-token prompt's activations are 8 MiB (512 x 8,192 x 2 B), a 513-token prompt's just over; a calibration
    # without the large term (a user's, saved before it) prices both at ar_bw_eff.
    from kvcalc.cost.constants import CUSTOM_ALLREDUCE_MAX
    from kvcalc.cost.estimate import features

    spec, g = get_model("llama-3.1-70b"), get_gpu("h200")
    dep = _dep(g, 8, 1)
    c, _ = constants_for(g, "vllm")
    assert CUSTOM_ALLREDUCE_MAX == 512 * spec.hidden_size * 2 == 8 << 20
    f512, f513 = (features(spec, g, dep, prefill_tokens=n) for n in (512, 513))
    e_small, e_large = c["ar_bw_eff.nvlink"], c["ar_bw_eff_large.nvlink"]
    halved = {**c, "ar_bw_eff_large.nvlink": e_large / 2}
    assert time_of(f512, halved, "vllm") == time_of(f512, c, "vllm")  # 8 MiB: the custom all-reduce's
    # 513 tokens: 160 all-reduces (2 a layer), each 2 x 7/8 of the message over the 450 GB/s each way, at half the share
    wire = 160 * 2 * 7 / 8 * 513 * 8192 * 2 / 450e9
    assert time_of(f513, halved, "vllm") - time_of(f513, c, "vllm") == pytest.approx(wire / e_large, rel=1e-9)
    old = {k: v for k, v in c.items() if not k.startswith("ar_bw_eff_large")}
    assert time_of(f513, old, "vllm") - time_of(f513, c, "vllm") == pytest.approx(wire * (1 / e_small - 1 / e_large))


def test_family_comes_from_the_preset():
    assert [gpu_family(get_gpu(n)) for n in ("a100", "rtx-4090", "h200", "b200", "mi300x")] == [
        "ampere",
        "ada",
        "hopper",
        "blackwell",
        "cdna3",
    ]
    # the workstation and Chinese-market cards of a family: RTX A6000 is GA102 (a 3090's die), L20 AD102
    assert [gpu_family(get_gpu(n)) for n in ("rtx-a6000", "l20", "rtx-pro-6000")] == [
        "ampere",
        "ada",
        "blackwell",
    ]


def test_fit_recovers_the_constants_that_made_synthetic_points():
    truth, _ = constants_for("h100", "vllm")
    truth = dict(truth)
    made = {"bw_eff.hopper": 0.71, "step_s.vllm": 420e-6, "prefill_layer_s.vllm": 90e-6, "mfu.hopper": 0.52}
    truth.update(made)
    g = get_gpu("h100")
    points = []
    for model in ("llama-3-8b", "qwen3-32b"):
        spec = get_model(model)
        for batch in (1, 4, 16, 64):
            for prompt in (128, 2048):
                sf = setup_features(spec, g, Deployment(), Setup(batch, None, prompt, 128), None, "bf16")
                for metric in ("tpot_ms", "ttft_ms"):
                    points.append(Point(sf, "vllm", metric, predict(sf, metric, truth, "vllm")))
    start = dict(truth)
    start.update({"bw_eff.hopper": 0.5, "step_s.vllm": 200e-6, "prefill_layer_s.vllm": 30e-6, "mfu.hopper": 0.8})
    got = fit(points, start, list(made), sweeps=40)
    for name, value in made.items():
        assert got[name] == pytest.approx(value, rel=0.05), name


def test_time_of_is_the_step_estimate():
    spec, g = get_model("qwen3-32b"), get_gpu("h200")
    from kvcalc.cost.estimate import features

    c, _ = constants_for(g, "trtllm")
    f = features(spec, g, Deployment(), decode_contexts=[3000] * 12)
    t = step_time(spec, g, Deployment(), engine="trtllm", decode_contexts=[3000] * 12)
    assert time_of(f, c, "trtllm") == t.estimate_s and not math.isnan(t.estimate_s)


def test_calibrate_reads_a_vllm_result_saves_and_later_estimates_say_so(tmp_path, monkeypatch):
    import json

    monkeypatch.setenv("KVCALC_PRESETS", str(tmp_path))
    # the fields `vllm bench serve --save-result` writes (vllm/benchmarks/serve.py), three concurrencies
    files = []
    for conc, ttft, tpot in ((1, 22.0, 7.9), (8, 55.0, 8.8), (32, 140.0, 11.5)):
        f = tmp_path / f"vllm-c{conc}.json"
        f.write_text(
            json.dumps(
                {
                    "model_id": "meta-llama/Meta-Llama-3-8B",
                    "max_concurrency": conc,
                    "completed": 100,
                    "total_input_tokens": 102400,
                    "total_output_tokens": 25600,
                    "mean_ttft_ms": ttft,
                    "mean_tpot_ms": tpot,
                }
            )  # fmt: skip
        )
        files.append(str(f))
    out = run_json("calibrate", *files, "--gpu", "h100", "--engine", "vllm")
    assert out["points"] == 6 and out["gpu"] == "h100"
    assert out["error_after"]["tpot_ms"] <= out["error_before"]["tpot_ms"]
    assert out["error_after"]["tpot_ms"] < 0.1
    assert (tmp_path / "calibration" / "h100--vllm.json").exists()
    est = run_json("generate", "llama-3-8b", "--gpu", "h100")["estimate"]
    assert "your calibration for h100 + vllm" in est["basis"]
    # another engine on the same GPU keeps the shipped fit
    assert (
        "your calibration"
        not in run_json("generate", "llama-3-8b", "--gpu", "h100", "--engine", "sglang")["estimate"]["basis"]
    )


def test_calibrate_reads_what_sglang_and_aiperf_files_say_of_the_setup(tmp_path):
    """SGLang's bench_serving (sglang/benchmark/serving.py of 0.5.23) appends one JSON object a run with the
    server's /get_server_info under server_info: the model, the engine and tp come from it. AIPerf's
    profile_export_aiperf.json (its docs, working-with-profile-exports.md) names the model in
    input_config.endpoint.model_names and the concurrency in input_config.loadgen, and with --gpu-telemetry the
    GPU ('NVIDIA H100 80GB HBM3' is the h100 preset). The command line still wins over the file."""
    import json

    from kvcalc.cli.calibrate import read_runs

    sgl = tmp_path / "sglang.jsonl"
    rows = [
        dict(
            backend="sglang",
            max_concurrency=c,
            random_range_ratio=1.0,
            completed=80,
            total_input_tokens=80 * 1024,
            total_output_tokens=80 * 256,
            mean_ttft_ms=ttft,
            mean_tpot_ms=tpot,
            concurrency=c * 0.97,
            server_info={"model_path": "meta-llama/Meta-Llama-3-8B", "tp_size": 2, "mem_fraction_static": 0.8},
        )  # fmt: skip
        for c, ttft, tpot in ((1, 20.0, 5.1), (16, 60.0, 6.4))
    ]
    sgl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    runs = read_runs([sgl], {"gpu": "h100", "engine": None, "model": None, "tp": None})
    assert [(r["model"], r["engine"], r["tp"], r["concurrency"], r["prompt"], r["new"]) for r in runs] == [
        ("meta-llama/Meta-Llama-3-8B", "sglang", 2, c, 1024, 256) for c in (1, 16)
    ]
    given = {"gpu": "h100", "engine": "vllm", "model": "7b", "tp": 4}
    assert read_runs([sgl], given)[0] == runs[0] | given
    out = run_json("calibrate", str(sgl), "--gpu", "h100", "--no-save")
    assert (out["engine"], out["gpu"], out["points"]) == ("sglang", "h100", 4)

    aiperf = tmp_path / "profile_export_aiperf.json"
    gpus = {f"gpu_{i}": {"gpu_index": i, "gpu_name": "NVIDIA H100 80GB HBM3", "metrics": {}} for i in range(2)}
    aiperf.write_text(
        json.dumps(
            {
                "time_to_first_token": {"unit": "ms", "avg": 48.2, "p50": 45.0},
                "inter_token_latency": {"unit": "ms", "avg": 7.6},
                "input_sequence_length": {"unit": "tokens", "avg": 2000.0},
                "output_sequence_length": {"unit": "tokens", "avg": 199.6},
                "telemetry_data": {"endpoints": {"localhost:9401": {"gpus": gpus}}},
                "input_config": {
                    "endpoint": {"model_names": ["meta-llama/Meta-Llama-3-8B"], "type": "chat", "streaming": True},
                    "loadgen": {"concurrency": 8, "request_rate_mode": "concurrency_burst"},
                },
            }
        )
    )
    (one,) = read_runs([aiperf], {"gpu": None, "engine": "vllm", "model": None, "tp": None})
    assert (one["gpu"], one["model"], one["concurrency"], one["prompt"], one["new"], one["tp"]) == (
        "h100", "meta-llama/Meta-Llama-3-8B", 8, 2000, 200, 1
    )  # fmt: skip
    # two kinds of GPU: the file names none
    aiperf.write_text(aiperf.read_text().replace("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", 1))
    r = run("calibrate", str(aiperf), "--engine", "vllm", "--no-save")
    assert r.exit_code != 0 and "no gpu (give --gpu)" in r.stderr and "Traceback" not in r.stderr


def test_calibrate_bad_file_is_one_line_naming_it(tmp_path):
    bad = tmp_path / "run.csv"
    bad.write_text("model,gpu,ttft_ms\nllama-3-8b,h100,20\n")
    r = run("calibrate", str(bad))
    assert r.exit_code != 0 and str(bad) in r.stderr and "missing column prompt, new" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    ("cells", "message"),
    [
        # each had ended as an internal error inside the fit (found by mutating benchmark files)
        ({"concurrency": "-1"}, "concurrency: Input should be greater than or equal to 1"),
        ({"tpot_ms": "-1"}, "tpot_ms: Input should be greater than 0"),
        ({"ttft_ms": "inf"}, "ttft_ms: Input should be a finite number"),
        ({"prompt": "0"}, "prompt: Input should be greater than or equal to 1"),
    ],
)
def test_calibrate_values_out_of_range_are_one_line_naming_file_and_field(tmp_path, cells, message):
    row = {"model": "llama-3-8b", "gpu": "h100", "tp": "1", "engine": "vllm", "prompt": "1024", "new": "256",
           "concurrency": "8", "ttft_ms": "40", "tpot_ms": "8"}  # fmt: skip
    bad = tmp_path / "runs.csv"
    bad.write_text(",".join(row) + "\n" + ",".join({**row, **cells}.values()) + "\n")
    r = run("calibrate", str(bad), "--no-save")
    assert r.exit_code == 2 and r.stderr.startswith(f"kvcalc: error: {bad}: {message}") and r.stderr.count("\n") == 1


def test_calibrate_reads_no_gpu_from_telemetry_of_another_shape(tmp_path):
    import json

    # AIPerf's telemetry_data.endpoints as a list, and a gpu_name that is not a name: no GPU read (give --gpu)
    doc = {
        "time_to_first_token": {"avg": 48.2}, "inter_token_latency": {"avg": 7.6},
        "input_sequence_length": {"avg": 2000.0}, "output_sequence_length": {"avg": 200.0},
        "input_config": {"endpoint": {"model_names": ["meta-llama/Meta-Llama-3-8B"]}, "loadgen": {"concurrency": 8}},
    }  # fmt: skip
    for telemetry in ({"endpoints": [1, 2]}, {"endpoints": {"a": {"gpus": {"g": {"gpu_name": {"x": 1}}}}}}):
        f = tmp_path / "aiperf.json"
        f.write_text(json.dumps({**doc, "telemetry_data": telemetry}))
        r = run("calibrate", str(f), "--engine", "vllm", "--no-save")
        assert r.exit_code == 2 and f"{f}: no gpu (give --gpu)" in r.stderr and "internal error" not in r.stderr


def test_fit_latency_goal_decides_on_the_estimate_and_names_the_ceiling():
    # issue 19: a ceiling can only prove a miss, so the verdict's batch is the estimate's
    out = run_json("fit", "llama-3.1-70b", "--gpu", "h100", "--tp", "4", "--seq", "8k", "--tpot-ms", "30")
    slo = out["slo"]
    bound = run_json(
        "fit", "llama-3.1-70b", "--gpu", "h100", "--tp", "4", "--seq", "8k", "--tpot-ms", "30", "--ceiling"
    )
    assert slo["basis"] == "estimate, vllm" and bound["slo"]["basis"] == "ceiling"
    assert slo["ceiling_batch"] == bound["slo"]["batch"] >= slo["batch"] >= 1
    assert (
        f"(estimate, vllm) up to batch {slo['batch']:,}; the ceiling would allow {slo['ceiling_batch']:,}"
        in out["verdict"]
    )
    spec, g = get_model("llama-3.1-70b"), get_gpu("h100")
    t = step_time(spec, g, _dep(g, 4, 1), decode_batch=slo["batch"], decode_context=8192)
    assert (
        t.estimate_s * 1e3
        <= 30
        < step_time(spec, g, _dep(g, 4, 1), decode_batch=slo["batch"] + 1, decode_context=8192).estimate_s * 1e3
    )


def test_a_moe_prompts_expert_gemms_get_its_tokens_times_top_k_over_experts_rows():
    """Hand-derived for DeepSeek-V3 (58 MoE layers of 256 experts, top 8, each a gated MLP of
    7168 x 2048): a 1,024-token prompt at tp 8 gives each expert 32 rows, reaches every expert, and
    its routed GEMMs are 2 x 1,024 x 58 x 8 x 3 x 7168 x 2048 / 8 FLOPs on one GPU."""
    from kvcalc.cost.estimate import expert_gemms

    spec = get_model("deepseek-v3")
    flops, rows, reached = expert_gemms(spec, Deployment(tp=8), 1024)
    assert flops == 2 * 1024 * 58 * 8 * 3 * 7168 * 2048 / 8
    assert rows == 32 and reached == pytest.approx(256, abs=1e-6)
    # a decode step of 4 sequences reaches 256 (1 - (1 - 8/256)^4) experts; expert parallelism runs 1/ep of them,
    # each whole instead of a 1/tp slice: as many slices as tensor parallelism
    _, rows4, reached4 = expert_gemms(spec, Deployment(tp=8, ep=8), 4)
    assert rows4 == 4 * 8 / 256 and reached4 == pytest.approx(256 * (1 - (1 - 8 / 256) ** 4))
    assert expert_gemms(spec, Deployment(tp=8, ep=4), 4) == expert_gemms(spec, Deployment(tp=8), 4)
    assert expert_gemms(get_model("llama-3-8b"), Deployment(), 1024) == (0.0, 0.0, 0.0)


def test_a_moe_prompt_pays_for_thin_expert_gemms_and_per_expert_launches():
    """The same step priced as if its expert GEMMs were as full as a dense one's is faster; the per-expert
    cost adds exactly MoE layers x experts reached x moe_prefill_expert_s."""
    from kvcalc.cost.estimate import features

    spec, g = get_model("qwen3-235b-a22b-fp8"), get_gpu("h100")
    dep = Deployment(tp=4, link=link_for(g))
    c, _ = constants_for(g, "trtllm")
    f = features(spec, g, dep, prefill_tokens=4096, dtype="fp8")  # compute-bound: the GEMMs' fill shows
    flops, rows, reached = f.experts
    assert rows == 4096 * 8 / 128 and reached == pytest.approx(128, abs=1e-6)
    moe_layers = f.stage_bytes[0][6]
    per_expert = c.get("moe_prefill_expert_s.trtllm", c["moe_prefill_expert_s"])
    no_launch = f._replace(experts=(flops, rows, 0.0))
    assert time_of(f, c, "trtllm") - time_of(no_launch, c, "trtllm") == pytest.approx(moe_layers * reached * per_expert)
    as_dense = no_launch._replace(experts=(0.0, 0.0, 0.0))
    assert time_of(as_dense, c, "trtllm") < time_of(no_launch, c, "trtllm")
    # decode steps keep their CUDA graphs and GEMV-like kernels: neither term applies there
    d = features(spec, g, dep, decode_contexts=[2048] * 64, dtype="fp8")
    assert time_of(d, c, "trtllm") == time_of(d._replace(experts=(0.0, 0.0, 0.0)), c, "trtllm")


def test_an_engine_build_after_a_dot_takes_its_own_constants_then_the_engines():
    """`llamacpp.legacy` (the calibration's 2023 / May 2024 llama-bench runs) reads `name.llamacpp.legacy`,
    then `name.llamacpp`, then the shared value, for every engine-keyed term."""
    from kvcalc.cost.estimate import features

    spec, g = get_model("llama-2-7b"), get_gpu("rtx-4090")
    c, _ = constants_for(g, "llamacpp")
    decode = features(spec, g, Deployment(), decode_contexts=[64], dtype="q4_0")
    prompt = features(spec, g, Deployment(), prefill_tokens=512, dtype="q4_0")
    bare = {k: v for k, v in c.items() if not k.endswith(".legacy")}
    for f in (decode, prompt):
        assert time_of(f, bare, "llamacpp.legacy") == time_of(f, bare, "llamacpp")
    slower = dict(bare, **{"step_s.llamacpp.legacy": bare["step_s.llamacpp"] + 1e-3})
    assert time_of(decode, slower, "llamacpp.legacy") == pytest.approx(time_of(decode, bare, "llamacpp") + 1e-3)
    assert time_of(decode, slower, "llamacpp") == time_of(decode, bare, "llamacpp")
    # a FLOP efficiency keyed family x engine x build: the legacy prompt (FP16 cuBLAS on dequantized
    # blocks) at half today's efficiency spends longer on its GEMMs, decode (bandwidth-bound) alone
    mfu = bare.get("mfu.ada.llamacpp", bare["mfu"])
    half = dict(bare, **{"mfu.ada.llamacpp.legacy": mfu / 2})
    assert time_of(prompt, half, "llamacpp.legacy") > time_of(prompt, bare, "llamacpp")
    assert time_of(decode, half, "llamacpp.legacy") == time_of(decode, bare, "llamacpp")


def test_a_sparse_attention_indexer_costs_its_kernels_per_layer_and_step():
    """Each layer with a DSA indexer of its own adds index_layer_s to every step, decode or prompt, at any
    batch: GLM-5 has one on all 78 layers, GLM-5.2 on 21 (the rest reuse an earlier top-k), DeepSeek-V3 none."""
    from kvcalc.cost.estimate import features

    g, dep = get_gpu("b200"), Deployment(tp=8, link=link_for(get_gpu("b200")))
    c, _ = constants_for(g, "sglang")
    per_layer = c.get("index_layer_s.sglang", c["index_layer_s"])
    counts = {m: features(get_model(m), g, dep, decode_contexts=[1024] * 4, dtype="fp8").index_layers
              for m in ("glm-5", "glm-5.2", "deepseek-v3")}  # fmt: skip
    assert counts == {"glm-5": 78, "glm-5.2": 21, "deepseek-v3": 0}
    for kw in ({"decode_contexts": [1024] * 4}, {"decode_contexts": [8192] * 64}, {"prefill_tokens": 4096}):
        f = features(get_model("glm-5"), g, dep, dtype="fp8", **kw)
        bare = f._replace(index_layers=0)
        assert time_of(f, c, "sglang") - time_of(bare, c, "sglang") == pytest.approx(78 * per_layer)


def test_a_prompt_over_pipeline_stages_never_beats_its_ceiling():
    """With pp > 1 a prompt fed in chunks keeps every stage busy at once: its ceiling is the busiest stage's
    (it had been the stages' sum, which the pipelined estimate of 8 x 32k prompts over 4 stages undercut,
    16.2 s under 47.7 s). One chunk cannot overlap: its estimate stays the stages' sum, above that bound."""
    for kw in ({"batch": 8, "prompt": "32k"}, {"batch": 1, "prompt": "32k"}, {"batch": 1, "prompt": 512}):
        r = kvcalc.generate("llama-3-70b", "h100", pp=4, new=128, **kw)
        assert r.estimate.ttft_s >= r.ttft_s and r.estimate.total_s >= r.total_s, kw
    one = kvcalc.generate("llama-3-70b", "h100", pp=4, prompt=512, new=2)
    busiest = kvcalc.generate("llama-3-70b", "h100", pp=1, prompt=512, new=2, ceiling=True).ttft_s / 4
    assert one.ttft_s == pytest.approx(busiest, rel=0.1) and one.estimate.ttft_s > 4 * one.ttft_s


def test_per_layer_costs_count_blocks_and_the_layers_that_run_experts():
    # Nemotron-3-Nano's 52 layers are each ONE sub-block: 23 Mamba-2 (M), 23 MoE (E), 6 attention (*) in its
    # hybrid_override_pattern, so their per-layer kernel costs are those of 26 transformer blocks, and only
    # the 23 E layers route experts (all 52 had been charged a MoE layer's cost: TPOT at one client on
    # 2 x B200 read 4.5 ms, measured 2.91 ms by Vultr's cookbook, benchmarks/holdout). Nemotron Super 49B:
    # 49 attention + MLP layers, 31 whose attention is a no-op (MLP only): 49 + 31 / 2 = 64.5 blocks.
    from collections import Counter

    from kvcalc.cost.estimate import _layer_counts
    from kvcalc.cost.step import SINGLE, stages

    nano = get_model("nemotron-3-nano-30b-a3b")
    assert Counter(nano.sub_blocks()) == {1: 52}
    assert _layer_counts(nano, stages(nano, SINGLE, None)[0]) == (26.0, 6, 23)
    nas = get_model("llama-3.3-nemotron-super-49b")
    assert _layer_counts(nas, stages(nas, SINGLE, None)[0]) == (64.5, 49, 0)
    # a transformer's layers are whole blocks; DeepSeek-V3's first 3 are dense, 58 route experts
    v3 = get_model("deepseek-v3")
    assert _layer_counts(v3, stages(v3, SINGLE, None)[0]) == (61.0, 61, 58)
