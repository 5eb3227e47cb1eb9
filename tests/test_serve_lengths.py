"""Request lengths drawn as a benchmark client draws them (plan/serve_load.lengths, `generate
--range-ratio`): SGLang's and InferenceX's bench_serving take each request's prompt and output
lengths uniformly from [int(ratio x L), L]. InferenceX runs ratio 0.8, and most of the public
closed-loop points (benchmarks/calibration/points.csv, column range_ratio) come from it."""

import importlib.util

import pytest
from conftest import run, run_json

from kvcalc.cost.estimate import time_of
from kvcalc.cost.fitting import Setup, figures, served_view
from kvcalc.cost.shard import link_for
from kvcalc.cost.step import Deployment
from kvcalc.model.presets import get_gpu, get_model
from kvcalc.plan.calibration import constants_for
from kvcalc.plan.serve import Limits, Load, simulate
from kvcalc.plan.serve_fit import run_features
from kvcalc.plan.serve_load import lengths
from kvcalc.plan.serve_policies import SglangPolicy, TrtllmPolicy
from kvcalc.plan.serve_report import serve_report
from kvcalc.plan.serve_trace import trace

BIG = Limits(max_num_seqs=1024, max_num_batched_tokens=8192, kv_blocks=10**6)


def test_every_request_alike_by_default():
    assert lengths(Load(1024, 512, 5)) == [(1024, 512)] * 5


def test_lengths_are_uniform_in_the_benchmarks_range():
    got = lengths(Load(1024, 1000, 4000, concurrency=8, range_ratio=0.8, seed=3))
    prompts, news = [p for p, _ in got], [n for _, n in got]
    # bench_serving: np.random.randint(int(L x ratio), L + 1): both ends included
    assert min(prompts) == int(1024 * 0.8) == 819 and max(prompts) == 1024
    assert min(news) == 800 and max(news) == 1000
    # uniform on [819, 1024]: mean 921.5, standard error of 4,000 draws about 0.9 tokens
    assert sum(prompts) / len(prompts) == pytest.approx(921.5, abs=5)
    assert sum(news) / len(news) == pytest.approx(900, abs=5)
    # seeded: the same seed gives the same requests, another seed others
    assert got == lengths(Load(1024, 1000, 4000, concurrency=8, range_ratio=0.8, seed=3))
    assert got != lengths(Load(1024, 1000, 4000, concurrency=8, range_ratio=0.8, seed=4))


@pytest.mark.parametrize("policy", [None, SglangPolicy, TrtllmPolicy])
def test_each_request_is_served_its_own_lengths(policy):
    # A pool that never binds: every prompt token is computed once and every request gets exactly
    # the new tokens drawn for it, whichever scheduler runs it.
    load = Load(300, 120, 96, concurrency=16, burst=True, range_ratio=0.5, seed=1)
    tr = trace(load, BIG._replace(policy=policy))
    drawn = lengths(load)
    assert sum(pre * k for _, _, pre, _, _, k, _ in tr.steps) == sum(p for p, _ in drawn)
    assert sorted(n for *_, n in tr.requests) == sorted(n for _, n in drawn)


def linear(n, context_sum, pre, held, seqs):  # a step: 1 ms + 1 us a context token + 10 us a prompt token
    return 1e-3 + 1e-6 * context_sum + 1e-5 * pre


@pytest.mark.parametrize("policy", [None, SglangPolicy, TrtllmPolicy])
def test_shorter_requests_decode_faster_and_spread_the_prompts(policy):
    limits = BIG._replace(policy=policy)
    alike = simulate(linear, Load(2000, 500, 320, concurrency=32, burst=True), limits)
    drawn = simulate(linear, Load(2000, 500, 320, concurrency=32, burst=True, range_ratio=0.8), limits)
    # contexts about 10% shorter: each decode step reads less
    assert drawn.tpot_s < alike.tpot_s
    # Requests alike finish together and their clients' next prompts arrive within a step of each other
    # (the turnaround splits a wave only a step at a time): the lengths drawn apart spread them far
    # more, so fewer prompts queue behind one another.
    assert drawn.ttft_s < alike.ttft_s


def test_the_calibration_reads_a_run_with_its_lengths():
    # scripts/calibrate.py fits InferenceX's points through run_features with Setup.range_ratio 0.8:
    # its weighted sums must be what generate --concurrency --range-ratio 0.8 prints.
    spec, g = get_model("llama-3.1-70b"), get_gpu("h200")
    dep = Deployment(tp=4, link=link_for(g))
    sf = run_features(spec, g, dep, Setup(None, 32, 1024, 1024, 0.8), engine="vllm", dtype=None, kv_dtype="bf16")
    served = served_view(constants_for(g, "vllm")[0], "vllm")
    fig = figures(sf, lambda f: time_of(f, served, "vllm"), served, "vllm")
    r = serve_report(spec, g, dep, prompt=1024, new=1024, concurrency=32, range_ratio=0.8).estimate
    assert fig.ttft_s == pytest.approx(r.ttft_s, rel=5e-3)
    assert fig.tpot_s == pytest.approx(r.tpot_s, rel=5e-3)
    assert fig.total_s == pytest.approx(r.total_s, rel=5e-3)
    # Requests alike are prefilled in waves while nobody decodes: the wait is TTFT. Drawn apart, the
    # prompts land between other requests' decodes: TTFT falls, and TPOT carries the prompt chunks.
    alike = serve_report(spec, g, dep, prompt=1024, new=1024, concurrency=32).estimate
    assert r.ttft_s < 0.6 * alike.ttft_s
    assert r.tpot_s > alike.tpot_s


def test_cli_range_ratio():
    out = run_json("generate", "llama-3-8b", "--gpu", "h100", "--concurrency", "16", "--prompt", "512", "--new", "256",
                   "--range-ratio", "0.8", "--seed", "2")  # fmt: skip
    assert out["range_ratio"] == 0.8 and out["seed"] == 2
    alike = run_json(
        "generate", "llama-3-8b", "--gpu", "h100", "--concurrency", "16", "--prompt", "512", "--new", "256"
    )
    assert alike["range_ratio"] == 1.0 and alike["seed"] is None
    assert out["estimate"]["ttft_s"] < alike["estimate"]["ttft_s"]
    text = run("generate", "llama-3-8b", "--gpu", "h100", "--concurrency", "16", "--prompt", "512", "--new", "256",
               "--range-ratio", "0.8")  # fmt: skip
    assert "prompts 409-512 tokens, 204-256 new" in " ".join(text.stdout.split())


@pytest.mark.parametrize("bad", ["1.5", "-0.2"])
def test_cli_range_ratio_out_of_range_is_one_line(bad):
    r = run("generate", "llama-3-8b", "--gpu", "h100", "--concurrency", "4", "--range-ratio", bad)
    assert r.exit_code != 0 and r.exception is None or isinstance(r.exception, SystemExit)
    assert "Traceback" not in r.stderr and "range-ratio" in r.stderr


def test_range_ratio_zero_is_sglangs_default_from_one_token_up():
    # sglang.bench_serving's --random-range-ratio defaults to 0: each length uniform in [1, L]
    from kvcalc.plan.serve_load import lengths

    drawn = lengths(Load(prompt=1000, new=500, requests=400, concurrency=8, range_ratio=0.0))
    prompts, news = [p for p, _ in drawn], [n for _, n in drawn]
    assert min(prompts) >= 1 and max(prompts) <= 1000 and min(news) >= 1 and max(news) <= 500
    assert min(prompts) < 100 and max(prompts) > 900  # the whole range, not [0.8 L, L]
    assert 450 < sum(prompts) / len(prompts) < 550  # mean about (1 + L) / 2
    r = run("generate", "llama-3-8b", "--gpu", "h100", "--concurrency", "4", "--range-ratio", "0",
            "--prompt", "1000", "--new", "500", "--format", "json")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    import json

    assert json.loads(r.stdout)["estimate"]["tpot_s"] > 0


def test_inferencex_rows_are_in_the_points_with_their_client():
    # benchmarks/calibration/inferencex_rows.json (InferenceX's DeepSeek-R1 runs on B200/B300/MI300X/
    # MI325X/MI355X) becomes points.csv rows: TTFT and TPOT in ms, the layout, the client's 0.8 range.
    import csv
    import json
    from pathlib import Path

    cal = Path(__file__).resolve().parent.parent / "benchmarks" / "calibration"
    data = json.loads((cal / "inferencex_rows.json").read_text())
    points = {r["id"]: r for r in csv.DictReader(open(cal / "points.csv", newline=""))}
    row = next(x for x in data["rows"] if x["hardware"] == "mi300x" and x["conc"] == 4 and x["isl"] == 1024 == x["osl"])
    ttft, tpot = (
        points["ix-mi300x-sglang-fp8-tp8ep1-1024-1024-c4-ttft"],
        points["ix-mi300x-sglang-fp8-tp8ep1-1024-1024-c4-tpot"],
    )
    assert float(ttft["value"]) == pytest.approx(1000 * row["metrics"]["mean_ttft"])
    assert float(tpot["value"]) == pytest.approx(1000 * row["metrics"]["mean_tpot"])
    assert (tpot["model"], tpot["gpu"], tpot["engine"], tpot["tp"], tpot["ep"]) == (
        "deepseek-v3",
        "mi300x",
        "sglang",
        "8",
        "1",
    )
    assert tpot["range_ratio"] == "0.8" and tpot["concurrency"] == "4" and tpot["dtype"] == "fp8"
    imported = [r for r in points.values() if r["id"].startswith("ix-") and r["gpu"] != "h200"]
    # every row but MI355X's MXFP4 ones (kvcalc multiplies mxfp4 in 16-bit; AMD's run it in fp4), less the
    # figures aiconfigurator's dump of InferenceX's database also holds (read from the dump alone)
    skipped = sum(1 for x in data["rows"] if x["hardware"] == "mi355x" and x["precision"] == "fp4")
    dump = [r for r in points.values() if r["source"] == "github.com/ai-dynamo/aiconfigurator"]

    runs: dict[tuple, list[dict[str, float]]] = {}  # the dump's runs by configuration: [{metric: value}]
    by_id: dict[str, dict[str, float]] = {}
    for r in dump:
        config = (r["gpu"], r["engine"], r["tp"], r["ep"], r["dp_attention"], r["dtype"], r["concurrency"], r["prompt"])
        figures = by_id.setdefault(r["id"].rpartition(":")[0], {})
        if not figures:
            runs.setdefault(config + (r["new"],), []).append(figures)
        figures[r["metric"]] = float(r["value"])
    spec = importlib.util.spec_from_file_location(
        "inferencex_launch", cal.parent.parent / "scripts" / "inferencex_launch.py"
    )
    assert spec and spec.loader
    launch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launch)
    layout = launch.script_layout

    def in_dump(x: dict) -> int:  # the row's figures that a dump run of its layout holds, all of them agreeing
        dtype = "fp8" if x["precision"] == "fp8" else "nvfp4"
        engine = {"trt": "trtllm"}.get(x["framework"], x["framework"])
        ep, dp = x["decode_ep"], x["decode_dp_attention"]
        if (ep, dp) == (1, False):  # as the importer reads it: the layout the run's launch script chose
            args = (engine, "deepseek-v3", x["hardware"], dtype, x["isl"], x["osl"], x["decode_tp"], x["conc"])
            ep, dp = layout(*args, x["date"]) or (ep, dp)
        config = (x["hardware"], engine, str(x["decode_tp"]), str(ep), str(int(dp)), dtype, str(x["conc"]))
        mine = {"ttft_ms": 1000 * x["metrics"]["mean_ttft"], "tpot_ms": 1000 * x["metrics"]["mean_tpot"]}
        for figures in runs.get(config + (str(x["isl"]), str(x["osl"])), []):
            both = mine.keys() & figures.keys()
            if all(figures[k] == pytest.approx(mine[k], rel=1e-4) for k in both):
                return len(both)
        return 0

    kept = [x for x in data["rows"] if not (x["hardware"] == "mi355x" and x["precision"] == "fp4")]
    twice = sum(in_dump(x) for x in kept)
    assert twice > 0 and len(imported) == 2 * (len(data["rows"]) - skipped) - twice
