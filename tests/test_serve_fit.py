"""Closed-loop runs as weighted steps (plan/serve_fit.py, plan/serve_trace.trace): the calibration fits the
step model through the same simulation `generate --concurrency` prints, so the weighted sums must be
that simulation's figures, and a fit on synthetic runs must recover the constants that made them."""

import pytest

from kvcalc.cost.estimate import time_of
from kvcalc.cost.fitting import (
    IncrementalLoss,
    Point,
    Setup,
    figures,
    fit,
    loss,
    predict,
    served_view,
    server_seconds,
    setup_features,
)
from kvcalc.cost.shard import link_for
from kvcalc.cost.step import Deployment
from kvcalc.engines.kernels import gpu_as_run_by
from kvcalc.model.presets import get_gpu, get_model
from kvcalc.plan.calibration import constants_for
from kvcalc.plan.serve import Limits, Load, simulate
from kvcalc.plan.serve_fit import run_features
from kvcalc.plan.serve_report import default_requests, serve_report, serving_limits, step_timers
from kvcalc.plan.serve_trace import trace

BIG = Limits(max_num_seqs=1024, max_num_batched_tokens=100, kv_blocks=10**6)


def test_a_prompt_chunk_one_token_short_is_still_a_prompt():
    # Budget 100, prompts of 100, two clients sent together. Step 0 computes client 1's prompt and
    # samples its first token. Step 1 decodes client 1 (one token of the budget) and computes 99 of
    # client 2's 100 prompt tokens: one short, so no token is sampled for client 2 yet. Step 2
    # computes its last prompt token and samples its first token: first token at step clock 3.
    tr = trace(Load(prompt=100, new=10, requests=2, concurrency=2, burst=True), BIG)
    assert tr.requests == [(0, 1, 10, 10), (0, 3, 12, 10)]
    assert tr.steps[:3] == [(0, 0, 100, 0, 1, 1, 0), (1, 101, 99, 0, 1, 1, 1), (1, 102, 1, 99, 1, 1, 2)]


def test_an_open_loop_has_no_trace():
    with pytest.raises(ValueError, match="closed loop"):
        trace(Load(prompt=10, new=5, requests=3, rate=1.0), BIG)


@pytest.mark.parametrize(
    "model, gpu, tp, engine, c, prompt, new",
    [
        ("llama-3.1-70b", "h200", 4, "vllm", 64, 1024, 1024),
        ("llama-3.1-8b", "h100", 1, "sglang", 96, 8192, 256),
        ("qwen3-32b", "b200", 2, "trtllm", 16, 1024, 2048),
        ("llama-3.1-8b", "h100", 1, "vllm", 1, 1000, 100),
    ],
)
def test_weighted_steps_are_the_simulations_figures(model, gpu, tp, engine, c, prompt, new):
    spec, g = get_model(model), get_gpu(gpu)
    dep = Deployment(tp=tp, link=link_for(g))
    sf = run_features(spec, g, dep, Setup(None, c, prompt, new), engine=engine, dtype=None, kv_dtype="bf16")
    consts, _ = constants_for(g, engine)
    served = served_view(consts, engine)  # a served request's steps, as generate --concurrency times them
    fig = figures(sf, lambda f: time_of(f, served, engine), served, engine)
    limits, _ = serving_limits(spec, g, dep, engine=engine, dtype=None, kv_dtype="bf16", prompt=prompt, new=new)
    _, est, _, _, _ = step_timers(spec, g, dep, engine=engine, dtype=None, kv_dtype="bf16")
    s = simulate(est, Load(prompt, new, default_requests(c), concurrency=c, burst=True), limits)
    srv = server_seconds(consts, engine)  # the API server's time, on every served request's TTFT
    assert 0 < srv < 0.5
    # generate --concurrency prints that simulation, with the server's time on each request
    r = serve_report(spec, g, dep, prompt=prompt, new=new, concurrency=c, engine=engine)
    assert r.estimate.ttft_s == pytest.approx(s.ttft_s + srv, rel=1e-9)
    assert r.estimate.tpot_s == pytest.approx(s.tpot_s, rel=1e-9)
    assert r.estimate.tokens_per_s == pytest.approx(s.tokens_per_s * s.total_s / (s.total_s + srv), rel=1e-9)
    # Steps grouped by shape and timed at each group's mean: within half a percent of step by step.
    assert fig.ttft_s == pytest.approx(r.estimate.ttft_s, rel=5e-3)
    assert fig.tpot_s == pytest.approx(r.estimate.tpot_s, rel=5e-3)
    assert fig.total_s == pytest.approx(r.estimate.total_s, rel=5e-3)
    assert fig.tokens_per_s == pytest.approx(r.estimate.tokens_per_s, rel=5e-3)


def test_fit_through_the_simulation_recovers_synthetic_constants():
    g = get_gpu("h100")
    truth, _ = constants_for(g, "vllm")
    truth = dict(truth)
    made = {"step_s.vllm": 700e-6, "prefill_layer_s.vllm": 60e-6, "bw_eff.hopper": 0.7}
    truth.update(made)
    points = []
    for model in ("llama-3.1-8b", "qwen3-32b"):
        spec = get_model(model)
        for c in (1, 8, 64):
            for prompt in (256, 4096):
                sf = run_features(spec, g, Deployment(), Setup(None, c, prompt, 64), engine="vllm", dtype=None,
                                  kv_dtype="bf16")  # fmt: skip
                for metric in ("tpot_ms", "ttft_ms"):
                    points.append(Point(sf, "vllm", metric, predict(sf, metric, truth, "vllm")))
    start = dict(truth)
    start.update({"step_s.vllm": 300e-6, "prefill_layer_s.vllm": 20e-6, "bw_eff.hopper": 0.5})
    got = fit(points, start, list(made), sweeps=40)
    for name, value in made.items():
        assert got[name] == pytest.approx(value, rel=0.05), name


def test_a_fit_stops_the_kv_reads_efficiency_at_its_floor():
    # Long-context decode made at kv_eff 0.5, below any decode attention kernel measured at the margin
    # (cost/fitting.FLOORS): the fit goes down to the floor and no further, though the points ask for less.
    from kvcalc.cost.fitting import FLOORS

    g = get_gpu("h100")
    truth = dict(constants_for(g, "vllm")[0])
    truth["kv_eff"] = 0.5
    points = []
    for b in (16, 64):
        for prompt in (8192, 16384):
            sf = setup_features(get_model("llama-3.1-8b"), g, Deployment(), Setup(b, None, prompt, 64), None, "bf16")
            points.append(Point(sf, "vllm", "tpot_ms", predict(sf, "tpot_ms", truth, "vllm")))
    assert FLOORS["kv_eff"] > 0.5
    _assert_fit_stops_at_floor(points, truth, "kv_eff", 0.85)


def _assert_fit_stops_at_floor(points: list[Point], truth: dict[str, float], name: str, start: float) -> None:
    """Points made with `truth`, whose `name` lies under its floor: fitted from `start`, `name` goes down to the floor
    and no further, though the points ask for less."""
    from kvcalc.cost.fitting import floor_of

    got = fit(points, {**truth, name: start}, [name], sweeps=30)
    assert got[name] == floor_of(name) > 0
    assert loss(points, truth) < loss(points, got)  # the points did ask for less


def test_a_fit_stops_the_bytes_per_materialized_score_at_its_floor():
    # llama.cpp prompts without flash attention (scores through memory, micro-batches of 512) made at 4 bytes per
    # score, under the graph's own four f32 passes (cost/fitting.FLOORS): the fit stops at the floor.
    from kvcalc.cost.fitting import FLOORS

    g = gpu_as_run_by(get_gpu("rtx-4090"), "llamacpp")
    truth = dict(constants_for(g, "llamacpp")[0])
    truth["score_bytes.llamacpp"] = 4.0
    points = []
    for prompt in (2048, 4096, 8192):
        sf = setup_features(
            get_model("llama-3-8b"), g, Deployment(), Setup(1, None, prompt, 16), "fp16", "bf16", 512, 512
        )
        assert sf.first.scores > 0
        points.append(Point(sf, "llamacpp", "ttft_ms", predict(sf, "ttft_ms", truth, "llamacpp")))
    assert FLOORS["score_bytes.llamacpp"] == 16.0
    _assert_fit_stops_at_floor(points, truth, "score_bytes.llamacpp", 24.0)


def test_the_incremental_loss_is_the_loss_after_any_one_constant_moves():
    # fit() re-times only the setups that read the constant it tries; a setup that reads it but is left
    # out would keep its old term. Mixed points: two engines, two GPU families, static and served,
    # tp 1 and tp 2, TRT-LLM's served prompt cost. Each constant moved alone must give loss() exactly.
    points = []
    for gpu, engine in (("h100", "trtllm"), ("b200", "sglang")):
        g = get_gpu(gpu)
        consts, _ = constants_for(g, engine)
        for tp in (1, 2):
            dep = Deployment(tp=tp, link=link_for(g) if tp > 1 else None)
            spec = get_model("llama-3.1-8b")
            static = setup_features(spec, g, dep, Setup(8, None, 1024, 128), None, "bf16")
            served = run_features(spec, g, dep, Setup(None, 8, 1024, 64), engine=engine, dtype=None, kv_dtype="bf16")
            for sf in (static, served):
                for metric in ("tpot_ms", "ttft_ms"):
                    points.append(Point(sf, engine, metric, 1.3 * predict(sf, metric, consts, engine)))
    c = {**constants_for(get_gpu("h100"), "trtllm")[0], "prefill_layer_s.trtllm.served": 200e-6}
    inc = IncrementalLoss(points, c)
    assert inc.total == loss(points, c) > 0
    read = [n for n in c if inc.readers.get(n)]
    assert {"bw_eff.hopper", "bw_eff.blackwell", "step_s.trtllm", "prefill_layer_s.trtllm.served"} <= set(read)
    for name in read:
        moved = {**c, name: c[name] * 1.7}
        total, _ = inc.trial(moved, name)
        assert total == loss(points, moved), name
    # a constant of the other family re-times none of these: bw_eff.hopper is not read by the B200 setups
    assert len(inc.readers["bw_eff.hopper"]) == 4


def test_served_steps_take_the_servers_constants_and_static_batches_do_not():
    # prefill_layer_s.<engine>.served prices a served request's prompt steps; an offline static
    # batch keeps prefill_layer_s.<engine>. 80 layers x 1 ms more on each prompt step of Llama-3.1-70B.
    g, spec = get_gpu("h100"), get_model("llama-3.1-70b")
    base, _ = constants_for(g, "trtllm")
    now = served_view(base, "trtllm")["prefill_layer_s.trtllm"]
    slow = {**base, "prefill_layer_s.trtllm.served": now + 1e-3}
    dep = Deployment(tp=4, link=link_for(g))
    static = setup_features(spec, g, dep, Setup(1, None, 2048, 64), None, "bf16")
    assert predict(static, "ttft_ms", slow, "trtllm") == predict(static, "ttft_ms", base, "trtllm")
    one = run_features(spec, g, dep, Setup(None, 1, 2048, 64), engine="trtllm", dtype=None, kv_dtype="bf16")
    # concurrency 1: one prompt step, alone
    assert predict(one, "ttft_ms", slow, "trtllm") - predict(one, "ttft_ms", base, "trtllm") == pytest.approx(80.0)
    assert predict(one, "tpot_ms", slow, "trtllm") == pytest.approx(predict(one, "tpot_ms", base, "trtllm"))


def test_the_shipped_fit_keeps_efficiencies_and_latencies_physical():
    # Efficiencies are fractions of a rated figure (at most 1); an all-reduce's latency is no lower than
    # the fastest small all-reduce measured (cost/fitting.FLOORS). Fitted constants that crossed these
    # would be knobs, not the mechanism they name.
    from kvcalc.cost.calibration import STARTING
    from kvcalc.cost.calibration_data import CONSTANTS
    from kvcalc.cost.fitting import _CAPPED, CAPS, CEILINGS, FLOORS, floor_of

    assert FLOORS["ar_alpha_s"] == 3.7e-6 and CAPS["mfu"] == 0.91
    # and no slower over NVLink than NCCL's over PCIe between two cards
    assert CEILINGS["ar_alpha_s.nvlink"] == STARTING["ar_alpha_s.pcie"] == 7.5e-6
    assert FLOORS["ar_alpha_s"] <= CONSTANTS["ar_alpha_s.nvlink"] <= CEILINGS["ar_alpha_s.nvlink"]
    for name, value in CONSTANTS.items():
        base = name.split(".")[0]
        if base in _CAPPED:
            assert 0 < value <= CAPS.get(base, 1.0), name
        assert value >= floor_of(name), name
