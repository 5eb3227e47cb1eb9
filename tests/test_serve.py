"""Serving under load (plan/serve.py, `generate --concurrency/--rate`): the scheduler's laws on
synthetic step timers whose figures can be derived by hand, and the real deployment path against
the static path it must agree with."""

import json

import pytest
from conftest import run, run_json

from kvcalc.cost.step import SINGLE, stages
from kvcalc.model.presets import get_gpu, get_model
from kvcalc.plan.serve import Limits, Load, run_seconds, simulate, turnaround_steps
from kvcalc.plan.serve_policies import SglangPolicy, TrtllmPolicy
from kvcalc.plan.serve_report import serve_report
from kvcalc.plan.serve_stats import percentile
from kvcalc.plan.serve_trace import replay, runner, trace


def step_time(spec, gpu, dep, **kw):  # noqa: ANN001, ANN003, ANN201
    """cost.estimate.step_time with the constants the commands use: the shipped fit, passed in as plan/ passes it."""
    from kvcalc.cost.estimate import step_time as pure
    from kvcalc.plan.calibration import constants_for

    kw.setdefault("calibration", constants_for(gpu, kw.get("engine", "vllm")))
    return pure(spec, gpu, dep, **kw)


BIG = Limits(max_num_seqs=1024, max_num_batched_tokens=8192, kv_blocks=10**6)


def unit(n, context_sum, pre, held, seqs):  # every step one second, whatever it holds
    return 1.0


def linear(n, context_sum, pre, held, seqs):  # a step: 1 ms + 1 us a context token + 10 us a prompt token
    return 1e-3 + 1e-6 * context_sum + 1e-5 * pre


# --- hand-derived figures ------------------------------------------------------------------


def test_one_second_steps_closed_loop():
    # Budget enough for every prompt: step 1 prefills all C prompts and samples their first tokens,
    # then new - 1 decode steps: TTFT 1 s, TPOT 1 s, a request new seconds, C / new requests/s.
    s = simulate(unit, Load(prompt=100, new=10, requests=40, concurrency=4, turnaround=False), BIG)
    assert (s.ttft_s, s.ttft_p99_s, s.tpot_s, s.total_s) == (1.0, 1.0, 1.0, 10.0)
    assert s.requests_per_s == pytest.approx(4 / 10)
    assert s.tokens_per_s == pytest.approx(4.0) and s.per_user_tokens_per_s == 1.0
    assert s.steps == 10 * 40 // 4 and s.preemptions == 0


def test_chunked_prefill_takes_one_step_per_budget():
    # A 20,000-token prompt with an 8,192-token budget: chunks of 8,192, 8,192 and 3,616 tokens.
    s = simulate(unit, Load(prompt=20_000, new=5, requests=1, concurrency=1), BIG)
    assert s.ttft_s == 3.0 and s.total_s == 3.0 + 4


def test_max_num_seqs_queues_the_rest():
    # 4 clients, 2 seats; the first requests are cut to 2, 3, 4 and 5 tokens (spread over a request's
    # life). The first two start at step 1 and end at steps 2 and 3; the others take their seats at
    # steps 3 and 4: TTFTs 1, 1, 3, 4.
    limits = BIG._replace(max_num_seqs=2)
    s = simulate(unit, Load(prompt=10, new=5, requests=4, concurrency=4, turnaround=False), limits)
    assert (s.ttft_s, s.ttft_p50_s) == (2.25, 2.0)
    assert percentile([1, 1, 6, 6], 50) == 3.5


def test_preemption_when_the_pool_is_full():
    # 8 clients with requests of 32 + 64 tokens: in blocks of 16 each needs 6 at the end; 24 blocks hold
    # 4 whole requests. All are admitted on their 2-block prompts and then outgrow the pool.
    limits = Limits(max_num_seqs=64, max_num_batched_tokens=8192, kv_blocks=24, block_size=16)
    s = simulate(unit, Load(prompt=32, new=64, requests=40, concurrency=8), limits)
    assert s.preemptions > 0
    roomy = simulate(unit, Load(prompt=32, new=64, requests=40, concurrency=8), BIG)
    assert roomy.preemptions == 0
    assert s.total_s > roomy.total_s  # recomputed prompts and the wait cost time


def curved(n, context_sum, pre, held, seqs):  # a step whose time is not linear in what it holds
    return 2e-3 + 3e-6 * n + max(1e-9 * context_sum, 4e-7 * n) + 2e-5 * pre + 1e-9 * held * max(seqs, 1)


@pytest.mark.parametrize("policy", [None, SglangPolicy, TrtllmPolicy])
@pytest.mark.parametrize(
    ("load", "blocks"),
    [
        (Load(prompt=300, new=40, requests=60, concurrency=12, burst=True), 10**6),
        (Load(prompt=300, new=40, requests=60, concurrency=12), 10**6),  # clients spread, steady state
        (Load(prompt=300, new=40, requests=60, concurrency=12, burst=True, range_ratio=0.5), 10**6),
        (Load(prompt=64, new=96, requests=80, concurrency=16, burst=True), 40),  # the pool binds: preemptions
    ],
)
def test_a_replayed_trace_is_the_simulation_exactly(policy, load, blocks):
    """A closed loop's schedule does not depend on step times, so replaying its trace under any timer
    gives simulate's figures to the last bit (serve_report times the ceiling, the estimate and its
    interval from one schedule)."""
    limits = Limits(max_num_seqs=64, max_num_batched_tokens=1024, kv_blocks=blocks, block_size=16, policy=policy)
    tr = trace(load, limits)
    for timer in (unit, linear, curved):
        assert replay(tr, timer, load) == simulate(timer, load, limits)
        assert runner(load, limits)(timer) == simulate(timer, load, limits)
    if blocks == 40 and policy is None:
        assert tr.preemptions > 0  # vLLM preempts by recompute; the others admit against the pool


def test_a_decode_run_as_long_as_the_pool_allows_schedules_as_steps_one_at_a_time(monkeypatch):
    """vLLM's decode runs last until the pool's next block shortage (_Engine._room); taken one step at a
    time instead, every request arrives, gets its first token and finishes at the same step, with the
    same preemptions: a run only sums the steps' times."""
    from kvcalc.plan import serve

    limits = Limits(max_num_seqs=64, max_num_batched_tokens=1024, kv_blocks=40, block_size=16)
    load = Load(prompt=64, new=96, requests=80, concurrency=16, burst=True)
    runs = trace(load, limits)
    monkeypatch.setattr(serve._Engine, "_room", lambda self, k: 1)
    steps = trace(load, limits)
    assert runs.requests == steps.requests and runs.preemptions == steps.preemptions > 0
    assert len(runs.steps) < len(steps.steps)  # the same steps, fewer entries


def test_an_open_loop_runner_simulates_each_timer():
    load = Load(prompt=100, new=20, requests=30, rate=5.0, seed=3)
    assert runner(load, BIG)(linear) == simulate(linear, load, BIG)
    with pytest.raises(ValueError, match="open loop"):
        trace(load, BIG)


def test_a_request_larger_than_the_pool_is_refused():
    with pytest.raises(ValueError):
        simulate(unit, Load(prompt=100, new=10, requests=1, concurrency=1), BIG._replace(kv_blocks=2))


def test_a_deployment_vllm_would_not_start_says_so():
    # DeepSeek-V3 (671B, fp8) on 8 x H100: its 79.55 GiB of weights a GPU exceed vLLM's 0.9 x 79.19 GiB budget
    # exit status 3, as `fit` exits for a setup that does not fit (2 is a malformed command line)
    r = run("generate", "deepseek-v3", "--gpu", "h100", "--tp", "8", "--concurrency", "4", "--format", "json")
    assert r.exit_code == 3 and r.stdout == ""
    assert "vLLM 0.19 would not start: No available memory for the cache blocks (weights 79.55 GiB" in r.stderr
    assert "of 71.27 GiB at --gpu-util 0.9" in r.stderr and "Traceback" not in r.stderr
    # TensorRT-LLM starts there with no pool to speak of: one request of 8,192 tokens does not fit it, also exit 3
    r = run("generate", "deepseek-v3", "--gpu", "h100", "--engine", "trtllm", "--concurrency", "4", "-f", "json")
    assert r.exit_code == 3 and r.stdout == "" and "one request of 8,192 tokens does not fit the KV pool" in r.stderr


@pytest.mark.parametrize("k", [1, 2, 3, 7, 64, 1000, 4097])
def test_jumped_runs_sum_like_step_by_step(k):
    # A max of a memory line and a compute line, plus a constant: the kink sits inside the run.
    def kinked(n, s, *_):
        return 2e-4 + max(1e-3 + 1e-7 * s, 4e-8 * s)

    exact = sum(kinked(8, 8 * 100 + 8 * i) for i in range(k))
    assert run_seconds(kinked, 8, 800, k) == pytest.approx(exact, rel=1e-12)


def test_littles_law_in_steady_state():
    for c in (1, 8, 64):
        s = simulate(linear, Load(prompt=500, new=200, requests=12 * c, concurrency=c), BIG)
        assert s.requests_per_s * s.total_s == pytest.approx(c, rel=0.02)


def test_open_loop_at_a_tiny_rate_is_one_request_alone():
    alone = simulate(linear, Load(prompt=500, new=200, requests=1, concurrency=1), BIG)
    s = simulate(linear, Load(prompt=500, new=200, requests=30, rate=1e-4, seed=1), BIG)  # gaps of hours
    assert s.ttft_p99_s == pytest.approx(alone.ttft_s, rel=1e-9)  # arrival times of hours: float rounding
    assert s.tpot_s == pytest.approx(alone.tpot_s, rel=1e-9)


def test_open_loop_is_deterministic_for_a_seed():
    load = Load(prompt=500, new=200, requests=300, rate=40.0, seed=7)
    assert simulate(linear, load, BIG) == simulate(linear, load, BIG)
    assert simulate(linear, load._replace(seed=8), BIG) != simulate(linear, load, BIG)


def test_open_loop_queues_when_arrivals_outpace_service():
    light = simulate(linear, Load(prompt=500, new=200, requests=200, rate=1.0), BIG)
    heavy = simulate(linear, Load(prompt=500, new=200, requests=200, rate=200.0), BIG)
    assert heavy.ttft_p99_s > light.ttft_p99_s and heavy.tpot_s > light.tpot_s


# --- the real deployment path --------------------------------------------------------------


@pytest.fixture(scope="module")
def llama():
    return get_model("llama-3-8b"), get_gpu("h100")


def test_concurrency_one_equals_batch_one(llama):
    from kvcalc.plan.generate import generate_report

    spec, gpu = llama
    r = serve_report(spec, gpu, SINGLE, prompt=1024, new=256, concurrency=1)
    static = generate_report(
        spec, gpu, batch=1, prompt=1024, new=256, dtype=None, kv_dtype="bf16", compute_dtype="bf16"
    )
    assert r.ttft_s == pytest.approx(static.ttft_s, rel=1e-9)
    assert r.tpot_s == pytest.approx(static.tpot_s, rel=1e-9)
    assert r.total_s == pytest.approx(static.total_s, rel=1e-9)
    # The estimate: the same steps, each at step_time's estimate.
    staged = stages(spec, SINGLE, None)
    prefill = step_time(spec, gpu, SINGLE, prefill_tokens=1024, staged=staged)
    decodes = [step_time(spec, gpu, SINGLE, decode_contexts=[c], staged=staged).estimate_s for c in range(1025, 1280)]
    from kvcalc.cost.fitting import server_seconds
    from kvcalc.plan.calibration import constants_for

    srv = server_seconds(constants_for(gpu, "vllm")[0], "vllm")  # the API server's time, once per request
    assert r.estimate.ttft_s == pytest.approx(prefill.estimate_s + srv, rel=1e-9)
    assert r.estimate.tpot_s == pytest.approx(sum(decodes) / 255, rel=1e-6)
    est = generate_report(
        spec, gpu, batch=1, prompt=1024, new=256, dtype=None, kv_dtype="bf16", compute_dtype="bf16", engine="vllm"
    ).estimate
    # one served client is the static batch of one plus the API server's time on its first token
    assert r.estimate.server_s == srv
    assert r.estimate.ttft_s == pytest.approx(est.ttft_s + srv, rel=1e-9)
    assert r.estimate.tpot_s == pytest.approx(est.tpot_s, rel=2e-3)  # step by step vs at the mean context


def test_more_concurrency_never_helps_a_user(llama):
    spec, gpu = llama
    rows = [serve_report(spec, gpu, SINGLE, prompt=1024, new=128, concurrency=c) for c in (1, 4, 16, 64, 256)]
    for a, b in zip(rows, rows[1:]):
        assert b.ttft_p99_s >= a.ttft_p99_s and b.estimate.ttft_p99_s >= a.estimate.ttft_p99_s
        assert b.per_user_tokens_per_s <= a.per_user_tokens_per_s
        assert b.tokens_per_s >= a.tokens_per_s  # the ceiling's throughput grows with the batch
    for r in rows:
        # The ceiling is a bound: the estimate never serves a user faster, nor the fleet.
        assert r.estimate.per_user_tokens_per_s <= r.per_user_tokens_per_s
        assert r.estimate.tokens_per_s <= r.tokens_per_s
        lo, hi = r.estimate.interval["tpot_s"]
        assert lo <= r.estimate.tpot_s <= hi


def test_the_pool_is_vllms(llama):
    spec, gpu = llama
    r = serve_report(spec, gpu, SINGLE, prompt=1024, new=128, concurrency=2)
    fit = run_json("fit", "llama-3-8b", "--gpu", "h100", "--engine", "vllm", "--seq", "1152")
    assert r.kv_capacity_tokens == fit["vllm"]["kv_cache_tokens"]
    assert (r.max_num_seqs, r.max_num_batched_tokens) == (1024, 8192)


def test_a_full_pool_preempts_in_a_real_deployment():
    # Llama-3-70B in fp8 on two H100s: about 97k tokens of pool; 256 clients of 4k + 4k tokens want 2M.
    spec = get_model("llama-3-70b")
    from kvcalc.plan.deploy import deployment

    dep = deployment(spec, get_gpu("h100"), tp=2, pp=1, interconnect=None, gpu_util=0.9, reserve="2GiB")
    r = serve_report(spec, get_gpu("h100"), dep, prompt=4096, new=4096, concurrency=256, requests=600, dtype="fp8")
    assert r.preemptions > 0 and r.estimate.preemptions > 0


def test_the_ceilings_tokens_per_s_counts_only_the_requests_the_pool_holds():
    """A closed loop's throughput bound decodes no more requests a step than the engine runs at once: max_num_seqs,
    and the requests its pool holds at their shortest prompt and a token (plan/serve_bound.py). 40 blocks of 16
    tokens hold 40 // 7 = 5 requests of 100 + 1 tokens; with every step 1 s, 49 of a request's 50 tokens come from
    decode steps of at most 5: no more than 50 / 49 x 5 tokens a second, where 64 clients' 50 tokens over a 1 s
    prompt pass and 49 decode steps had promised 64."""
    from kvcalc.plan.serve import decoding_at_once
    from kvcalc.plan.serve_report import ceiling_stats

    limits = Limits(max_num_seqs=1024, max_num_batched_tokens=8192, kv_blocks=40, block_size=16)
    load = Load(100, 50, 640, concurrency=64, burst=True)
    assert decoding_at_once(load, limits) == 5
    assert decoding_at_once(load._replace(range_ratio=0.5), limits) == 40 // 4  # 50 + 1 tokens: 4 blocks
    assert decoding_at_once(load, limits._replace(max_num_seqs=3)) == 3
    assert decoding_at_once(load._replace(concurrency=2), limits) == 2
    s = ceiling_stats(unit, load, limits)
    assert s.preemptions > 0 and simulate(unit, load, limits).tokens_per_s <= s.tokens_per_s
    assert s.tokens_per_s == pytest.approx(50 / 49 * 5)


def test_no_simulated_schedule_outruns_the_throughput_bound():
    """plan/serve_bound's tokens/s holds for any schedule, so for the simulation's own under every scheduler:
    closed loops of many shapes and pools, steps timed by a linear timer (1 ms + 1 us a context token + 10 us a prompt
    token), with prompts that share the steps with decodes (vLLM) or run apart (SGLang, TensorRT-LLM)."""
    import random

    from kvcalc.plan.serve_bound import tokens_per_s_bound

    rng = random.Random(11)
    for _ in range(40):
        load = Load(
            prompt=rng.randint(1, 600), new=rng.randint(1, 120), requests=rng.randint(5, 120),
            concurrency=rng.randint(1, 48), burst=rng.random() < 0.5, range_ratio=rng.choice([1.0, 0.5]),
        )  # fmt: skip
        need = -(-(load.prompt + load.new) // 16)
        limits = Limits(
            max_num_seqs=rng.choice([2, 16, 1024]), max_num_batched_tokens=rng.choice([1024, 8192]),
            kv_blocks=rng.randint(need + 1, need * 30), policy=rng.choice([None, SglangPolicy, TrtllmPolicy]),
        )  # fmt: skip
        bound = tokens_per_s_bound(linear, load, limits)
        assert bound is None if load.new == 1 else simulate(linear, load, limits).tokens_per_s <= bound * (1 + 1e-9)


def test_one_token_requests_keep_the_simulated_ceiling_where_no_flops_bound_applies():
    # expert parallelism: no FLOPs bound (a rank's share follows the routing), and no decode step to bound
    r = run_json(
        "generate", "qwen3-30b-a3b", "--gpu", "h100", "--tp", "2", "--ep", "2", "--concurrency", "8", "--new", "1"
    )
    assert 0 < r["estimate"]["tokens_per_s"] <= r["tokens_per_s"] < float("inf")


def test_a_pool_bound_deployments_ceiling_is_its_pools():
    """Llama-3-70B in bf16 on two H100s under vLLM 0.19 keeps 9,808 tokens of pool: 9 requests of 1,024 + 1
    tokens (613 blocks // 65). 64 clients of 1,024 + 1,024 tokens: no step decodes more than 9, and a step of 9
    over 1,024 tokens each reads each GPU's 34,752,176,128 parameters in bf16 and 9 x 1,024 x 163,840 B of KV at
    3.35 TB/s, 21.2 ms (its all-reduces on top): about 9 x 1,024 / 1,023 tokens in 21.2 ms, 425 tokens/s. Counting
    every client as decoding had promised 64 clients' worth."""
    r = run_json(
        "generate", "llama-3-70b", "--gpu", "h100", "--tp", "2", "--concurrency", "64", "--prompt", "1k", "--new", "1k"
    )  # fmt: skip
    assert (r["kv_capacity_tokens"], r["new"]) == (9808, 1024)
    step = (2 * 34_752_176_128 + 9 * 1024 * 163_840) / 3.35e12
    assert 0.95 * 9 * 1024 / 1023 / step <= r["tokens_per_s"] <= 9 * 1024 / 1023 / step
    assert r["tokens_per_s"] < 64 * 1024 / (r["ttft_s"] + 1023 * r["tpot_s"]) / 4
    assert r["estimate"]["tokens_per_s"] <= r["tokens_per_s"]


def test_cli_json_fields():
    out = run_json("generate", "llama-3-8b", "--gpu", "h100", "--concurrency", "8", "--new", "64")
    assert out["concurrency"] == 8 and out["basis"].startswith("ceiling")
    est = out["estimate"]
    for key in ("ttft_s", "ttft_p50_s", "ttft_p99_s", "tpot_s", "total_s", "tokens_per_s", "basis"):
        assert key in est
    assert set(est["interval"]) >= {"ttft_s", "tpot_s", "total_s", "tokens_per_s"}
    assert est["tpot_s"] >= out["tpot_s"]


def test_cli_sweep_and_bad_input():
    sweep = run_json("generate", "llama-3-8b", "--gpu", "h100", "--concurrency", "1..8", "--new", "32")
    assert [r["concurrency"] for r in sweep["rows"]] == [1, 2, 4, 8]
    for args, words in (
        (["--concurrency", "4", "--rate", "2"], "not both"),
        (["--concurrency", "4", "--batch", "8"], "static batch"),
        (["--concurrency", "4", "--plot", "-"], "sweep"),
        (["--rate", "0"], "positive"),
    ):
        result = run("generate", "llama-3-8b", "--gpu", "h100", *args, "--format", "json")
        assert result.exit_code != 0 and result.stdout == ""
        assert words in result.stderr and "Traceback" not in result.stderr
    assert json.loads(run("generate", "llama-3-8b", "--gpu", "h100", "--rate", "2", "-f", "json").stdout)["seed"] == 0


@pytest.mark.parametrize(
    ("model", "tp", "pp", "ep", "dp"),
    [
        ("llama-3-8b", 1, 1, 1, False),
        ("gemma-2-9b", 1, 1, 1, False),
        ("qwen3-30b-a3b", 2, 1, 1, False),
        ("llama-3-70b", 2, 2, 1, False),
        ("deepseek-v3", 8, 1, 8, True),  # the all-to-all and DP-attention's per-rank sequences follow the step
    ],
)
def test_uniform_steps_are_step_time(model, tp, pp, ep, dp):
    # The fast path must give estimate.step_time's figures for the same contexts, exactly.
    from kvcalc.plan.deploy import deployment
    from kvcalc.plan.serve_steps import uniform_step_time

    spec, gpu = get_model(model), get_gpu("h200" if ep > 1 else "h100")
    dep = deployment(spec, gpu, tp=tp, pp=pp, interconnect=None, gpu_util=0.9, reserve="2GiB", ep=ep, dp_attention=dp)
    staged = stages(spec, dep, None)
    for n, total, pre, held, seqs in [(0, 0, 1024, 0, 1), (1, 1025, 0, 0, 0), (37, 37 * 5000 + 11, 700, 300, 3)]:
        c, r = divmod(total, n) if n else (0, 0)
        want = step_time(
            spec, gpu, dep, decode_contexts=[c] * (n - r) + [c + 1] * r, prefill_tokens=pre,
            prefill_context=held // max(seqs, 1), prefill_seqs=max(seqs, 1), staged=staged,
        )  # fmt: skip
        got = uniform_step_time(
            spec, gpu, dep, engine="vllm", decodes=n, context_sum=total, prefill_tokens=pre,
            prefill_context=held // max(seqs, 1), prefill_seqs=max(seqs, 1), dtype=None, kv_dtype="bf16",
            staged=staged,
        )  # fmt: skip
        assert got == want


def test_concurrency_search_finds_the_edge(llama):
    from kvcalc.plan.serve import simulate
    from kvcalc.plan.serve_pool import serving_limits
    from kvcalc.plan.serve_report import step_timers
    from kvcalc.plan.serve_search import largest_concurrency

    spec, gpu = llama
    found = largest_concurrency(spec, gpu, SINGLE, prompt=512, new=256, tpot_ms=12.0, ttft_ms=None)
    assert found.decided_on == "estimate" and 1 < found.concurrency < found.searched_up_to
    assert found.ceiling_concurrency >= found.concurrency  # the ceiling only proves a miss
    limits, _ = serving_limits(spec, gpu, SINGLE, engine="vllm", dtype=None, kv_dtype="bf16", prompt=512, new=256)
    estimate = step_timers(spec, gpu, SINGLE, engine="vllm", dtype=None, kv_dtype="bf16")[1]
    c = found.concurrency
    at = simulate(estimate, Load(512, 256, 4 * c, concurrency=c, burst=True), limits)
    past = simulate(estimate, Load(512, 256, 4 * (c + 1), concurrency=c + 1, burst=True), limits)
    assert at.tpot_s * 1e3 <= 12.0 < past.tpot_s * 1e3
    assert f"up to concurrency {found.concurrency}" in found.message and "(estimate)" in found.message


def test_fit_reports_the_concurrency_search():
    out = run_json("fit", "llama-3-8b", "--gpu", "h100", "--seq", "1k", "--tpot-ms", "12")
    c = out["concurrency_slo"]
    assert (c["prompt"], c["new"], c["decided_on"]) == (512, 512, "estimate")
    assert c["ceiling_concurrency"] >= c["concurrency"] >= 1


def test_the_sweep_chart_draws_ceiling_band_and_estimate(llama):
    from kvcalc.present.chart_serving import serving_chart

    spec, gpu = llama
    rows = [serve_report(spec, gpu, SINGLE, prompt=512, new=64, concurrency=c) for c in (1, 4, 16)]
    chart = serving_chart("t", rows)
    kinds = {s.gid: s for s in chart.series}
    assert kinds["serving-ceiling"].x == [r.tokens_per_s for r in rows]
    assert kinds["serving-band"].kind == "band" and kinds["serving-band"].x[0] == kinds["serving-band"].x[-1]
    assert kinds["serving-estimate"].y == [r.estimate.per_user_tokens_per_s for r in rows]


def test_a_burst_start_is_the_benchmarks_whole_run():
    # Every client's first request whole and sent at once, figures over all requests: with one-second
    # steps and room for every prompt, each wave of 4 runs 10 steps in lockstep (no client turnaround).
    s = simulate(unit, Load(prompt=100, new=10, requests=12, concurrency=4, burst=True, turnaround=False), BIG)
    assert s.measured == 12 and (s.ttft_s, s.total_s, s.duration_s) == (1.0, 10.0, 30.0)
    steady = simulate(unit, Load(prompt=100, new=10, requests=12, concurrency=4), BIG)
    assert steady.measured < 12


def test_turnaround_steps_are_a_fair_coin():
    # The golden-ratio sequence: requests 0..7 miss 0, 1, 0, 1, 0, 0, 1, 0 steps; half of many miss one.
    assert [turnaround_steps(i) for i in range(8)] == [0, 1, 0, 1, 0, 0, 1, 0]
    assert sum(turnaround_steps(i) for i in range(10_000)) == pytest.approx(5_000, abs=10)


@pytest.mark.parametrize("policy", [None, SglangPolicy, TrtllmPolicy])
def test_a_request_that_misses_a_step_waits_for_it(policy):
    # 2 clients at once, prompts of 10, one new token (a request ends on its prompt's step), one-second
    # steps. Request 0 reaches the queue at once and runs in step 1; request 1 misses a step (turnaround
    # 1) and runs in step 2 with request 2, which request 0's client sent as step 1 ended; request 3
    # misses a step, but the engine has nothing else to do and takes it at once: step 3. TTFTs 1, 2, 1,
    # 1: mean 1.25 s. Without the turnaround both pairs run together: every TTFT 1 s.
    limits = BIG._replace(policy=policy)
    s = simulate(unit, Load(prompt=10, new=1, requests=4, concurrency=2, burst=True), limits)
    assert (s.ttft_s, s.ttft_p50_s, s.steps) == (1.25, 1.0, 3)
    s = simulate(unit, Load(prompt=10, new=1, requests=4, concurrency=2, burst=True, turnaround=False), limits)
    assert (s.ttft_s, s.steps) == (1.0, 2)


def test_identical_requests_drift_apart():
    # 8 clients of identical requests sent at once: with no turnaround every prompt step holds all 8
    # prompts for the whole run; with it, requests that miss a step split the waves, and the prompt
    # steps a request meets hold fewer prompts (a real fixed-length run does not stay in lockstep).
    limits = Limits(1024, 8192, 12_000, 16)

    def prompts_met(load):  # the mean, over requests, of the prompts in the step that holds theirs
        steps = [st[4] for st in trace(load, limits).steps if st[2]]
        return sum(n * n for n in steps) / sum(steps)

    assert prompts_met(Load(1024, 1024, 80, concurrency=8, burst=True, turnaround=False)) == 8
    assert prompts_met(Load(1024, 1024, 80, concurrency=8, burst=True)) < 4


def test_the_pool_is_sglangs_with_engine_sglang(llama):
    spec, gpu = llama
    r = serve_report(spec, gpu, SINGLE, prompt=1024, new=128, concurrency=2, engine="sglang")
    fit = run_json("fit", "llama-3-8b", "--gpu", "h100", "--engine", "sglang", "--seq", "1152", "--kv-dtype", "bf16")
    assert r.kv_capacity_tokens == fit["sglang"]["kv_capacity_tokens"]
    assert (r.max_num_seqs, r.max_num_batched_tokens) == (
        fit["sglang"]["max_running_requests"],
        fit["sglang"]["chunked_prefill_size"],
    )


def test_the_ceilings_tpot_under_load_is_its_decode_steps_alone():
    """aiconfigurator measured Llama-3.1-8B fp8 on one H200 under vLLM at 64 clients of 2,000 + 100
    tokens: 9.74 ms per output token (silicon_sample.csv, row ..._2000x100_c64_tp1_epnone_2). Mixing
    every client's prompt into the decode steps at the GPU's peak gives 11.1 ms, so the measured run did
    not mix them that way; the bound is the same schedule's decode steps without their prompt tokens,
    about a static batch of 64 at the mean context (hand check: 8.0 GB of weights + 64 x 2,050 tokens
    x 64 KiB of fp8 KV at 4.8 TB/s is about 3.5 ms)."""
    from kvcalc.plan.generate import generate_report
    from kvcalc.plan.serve_pool import serving_limits
    from kvcalc.plan.serve_report import step_timers

    spec, gpu = get_model("llama-3.1-8b"), get_gpu("h200")
    kw = dict(dtype="fp8", kv_dtype="fp8")
    r = serve_report(spec, gpu, SINGLE, prompt=2000, new=100, concurrency=64, **kw)
    assert r.tpot_s <= 9.74e-3
    static = generate_report(spec, gpu, batch=64, prompt=2000, new=100, compute_dtype="fp8", **kw)
    assert r.tpot_s == pytest.approx(static.tpot_s, rel=0.03)
    # the prompts' steps are left out of the TPOT bound only: with them the same schedule is slower
    limits, _ = serving_limits(spec, gpu, SINGLE, engine="vllm", prompt=2000, new=100, **kw)
    ceiling = step_timers(spec, gpu, SINGLE, engine="vllm", **kw)[0]
    mixed = simulate(ceiling, Load(2000, 100, 640, concurrency=64, burst=True), limits)
    assert mixed.tpot_s > 2.5 * r.tpot_s
    assert r.itl_s <= r.tpot_s * 1.001 and r.per_user_tokens_per_s == pytest.approx(1 / r.tpot_s)
    # tokens/s no more than the FLOPs allow (plan/serve_bound.py): each request's 2,000-token prompt pass,
    # 2 x (7,504,924,672 - 525,336,576 LM head) x 2,000 + 2 x 525,336,576 + 32 layers x 4 x 4,096 x 2,001,000 pairs,
    # and 99 decode tokens over 2,000 cached, 2 x 7,504,924,672 + 32 x 4 x 4,096 x 2,000 each: 30.56 TFLOP, 15.44 ms
    # at the H200's 1,978.9 fp8 TFLOP/s. The same schedule's mixed TPOT (11.1 ms) had given 5.7k tokens/s, below
    # what aiconfigurator's measured TTFT and TPOT imply for such runs.
    flops = 2 * (7_504_924_672 - 525_336_576) * 2000 + 2 * 525_336_576 + 32 * 4 * 4096 * 2_001_000
    flops += 99 * (2 * 7_504_924_672 + 32 * 4 * 4096 * 2000)
    assert r.tokens_per_s == pytest.approx(100 / (flops / 1978.9e12), rel=1e-6)
    assert r.tokens_per_s > 64 * 100 / (r.ttft_s + 99 * mixed.tpot_s)
    # the estimate is never faster than the bound
    assert r.estimate.tpot_s >= r.tpot_s


def test_the_fitted_ceiling_agrees_with_the_printed_one():
    """The calibration's ceiling of a closed loop (cost/fitting via plan/serve_fit) is the one
    generate --concurrency prints, TPOT bound included."""
    from kvcalc.cost.fitting import Setup, ceiling
    from kvcalc.plan.serve_fit import run_features

    spec, gpu = get_model("llama-3.1-8b"), get_gpu("h200")
    r = serve_report(spec, gpu, SINGLE, prompt=2000, new=100, concurrency=64, dtype="fp8", kv_dtype="fp8")
    sf = run_features(spec, gpu, SINGLE, Setup(None, 64, 2000, 100), engine="vllm", dtype="fp8", kv_dtype="fp8")
    assert ceiling(sf, "tpot_ms") / 1000 == pytest.approx(r.tpot_s, rel=0.02)
    assert ceiling(sf, "ttft_ms") / 1000 == pytest.approx(r.ttft_s, rel=0.02)
    assert ceiling(sf, "output_tok_s_total") == pytest.approx(r.tokens_per_s, rel=0.02)  # plan/serve_bound's, alike


def test_preempting_the_newest_in_aggregate_is_the_slow_way():
    """A step whose decoders outgrow the pool preempts the newest running requests; the engine finds them
    from the end without listing every decoder (plan/serve._Engine._preempt_newest). Closed loops of many
    shapes, the pool from one request's blocks to forty: the same schedule (steps, preemptions, requests)
    and the same figures, up to the order of float sums, as the slow way's request-by-request loop."""
    import math
    import random

    from kvcalc.plan.serve import _Engine

    rng, preempting = random.Random(7), 0
    for _ in range(60):
        bs = rng.choice([1, 4, 16])
        load = Load(
            prompt=rng.randint(1, 400), new=rng.randint(2, 200), requests=rng.randint(5, 150),
            concurrency=rng.randint(1, 64), burst=rng.random() < 0.5, range_ratio=rng.choice([1.0, 0.5]),
        )  # fmt: skip
        need = -(-(load.prompt + load.new) // bs)
        limits = Limits(
            max_num_seqs=rng.choice([4, 64, 1024]), max_num_batched_tokens=rng.choice([64, 512, 8192]),
            kv_blocks=rng.randint(need + 1, need * 40), block_size=bs,
        )  # fmt: skip
        fast = simulate(curved, load, limits)
        try:
            _Engine.aggregate_preemption = False
            slow = simulate(curved, load, limits)
        finally:
            _Engine.aggregate_preemption = True
        assert (fast.steps, fast.preemptions, fast.measured) == (slow.steps, slow.preemptions, slow.measured)
        assert all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(fast, slow))
        preempting += fast.preemptions > 0
    assert preempting >= 12  # the pool bound in a good share of them (16 of 60 with this seed)


def test_fit_with_a_latency_goal_still_gives_the_verdict_when_nothing_fits():
    # Llama-3.1-70B in bf16 on one RTX 4090: not one 32k request fits, so there is no concurrency to search; the
    # memory verdict answers (exit 3), where the search had stopped fit with a usage error
    result = run("fit", "llama-3.1-70b", "--gpu", "rtx-4090", "--seq", "32k", "--tpot-ms", "30", "--format", "json")
    assert result.exit_code == 3 and result.stderr == ""
    out = json.loads(result.stdout)
    assert out["fits"] is False and out["max_batch"] == 0 and out["concurrency_slo"] is None


def test_a_concurrency_sweep_writes_one_csv_row_a_level_with_every_interval():
    # one client's run has a TTFT p50 and its interval as every other level's does: the sweep's CSV has one
    # header for all its rows (it had raised on the p50 interval only the later rows had)
    import csv
    import io

    r = run("generate", "llama-3.1-8b", "--gpu", "h100", "--prompt", "1024", "--new", "128", "--concurrency", "1..8",
            "--format", "csv")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [row["concurrency"] for row in rows] == ["1", "2", "4", "8"]
    for row in rows:
        lo, mid, hi = (float(row[f"estimate.ttft_p50_s{s}"]) for s in (".lo", "", ".hi"))
        assert lo <= mid <= hi
    alone = run_json(
        "generate", "llama-3.1-8b", "--gpu", "h100", "--prompt", "1024", "--new", "128", "--concurrency", "1"
    )
    assert set(alone["estimate"]["interval"]) >= {
        "ttft_s",
        "ttft_p50_s",
        "ttft_p99_s",
        "tpot_s",
        "total_s",
        "tokens_per_s",
    }


def test_sheet_rates_keep_their_figures_when_small():
    from kvcalc.present.serve_sheet import _cell

    # 2 requests in 64 s is 0.03125 requests/s: not "0.0"; larger rates keep one decimal, counts none
    assert (_cell(2 / 64, False), _cell(4.8, False), _cell(2167.71, False), _cell(0.0, False), _cell(3, False)) == (
        "0.0312",
        "4.8",
        "2,167.7",
        "0.0",
        "3",
    )


def test_a_sweep_on_several_gpus_names_its_layout_whole():
    out = run("generate", "7b", "--gpu", "a100", "--tp", "2", "--concurrency", "1..2", "--prompt", "512", "--new", "64")
    assert out.exit_code == 0, out.output
    # the layout's own comma once cut the title at "(tp 2"
    assert out.stdout.splitlines()[0] == "Serving sweep: 7b on 2 x a100 (tp 2, pp 1), 512 + 64 tokens a request"
