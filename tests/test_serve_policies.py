"""SGLang's and TensorRT-LLM's schedulers in the serving simulation (plan/serve_policies.py): figures
derived by hand on synthetic step timers, the laws every policy keeps, and the engine defaults
serve_report picks. vLLM's figures are pinned in tests/test_serve.py."""

import pytest

from kvcalc.cost.step import SINGLE
from kvcalc.model.presets import get_gpu, get_model
from kvcalc.plan.serve import Limits, Load, run_seconds, simulate
from kvcalc.plan.serve_policies import SglangPolicy, TrtllmPolicy
from kvcalc.plan.serve_report import serve_report
from kvcalc.plan.serve_trace import trace

BIG = Limits(max_num_seqs=1024, max_num_batched_tokens=8192, kv_blocks=10**6, block_size=1)


def unit(n, context_sum, pre, held, seqs):  # every step one second, whatever it holds
    return 1.0


def linear(n, context_sum, pre, held, seqs):  # 1 ms + 1 us a context token + 10 us a prompt token
    return 1e-3 + 1e-6 * context_sum + 1e-5 * pre


# --- SGLang: a step is a prefill batch or a decode batch --------------------------------------


def test_sglang_pauses_the_decodes_for_every_prefill():
    # 4 clients spread over a request's life, prompts of 100, 10 new tokens, one-second steps. A request
    # takes its prefill step (TTFT 1 s), then 9 decode steps; the 3 other clients' prefills fall inside
    # those and pause it: 12 steps for 9 tokens, TPOT 4/3 s, a request 13 s, 4 requests per 13 s.
    load = Load(prompt=100, new=10, requests=40, concurrency=4, turnaround=False)
    s = simulate(unit, load, BIG._replace(policy=SglangPolicy))
    assert s.ttft_s == s.ttft_p99_s == 1.0
    assert s.tpot_s == pytest.approx(12 / 9) and s.total_s == pytest.approx(13.0)
    assert s.requests_per_s == pytest.approx(4 / 13)
    # vLLM mixes the prompt into a decode step: nobody waits (tests/test_serve.py).
    v = simulate(unit, load, BIG)
    assert (v.ttft_s, v.tpot_s, v.total_s) == (1.0, 1.0, 10.0)


def test_sglang_ttft_is_one_prefill_step_alone_when_a_seat_is_free():
    # A closed loop sends at a finish; the next step prefills that prompt alone: 1 ms + 500 x 10 us.
    load = Load(prompt=500, new=200, requests=96, concurrency=8, turnaround=False)
    s = simulate(linear, load, BIG._replace(policy=SglangPolicy))
    assert s.ttft_p50_s == pytest.approx(6e-3, rel=1e-9) and s.ttft_p99_s == pytest.approx(6e-3, rel=1e-9)
    v = simulate(linear, load, BIG)
    assert v.ttft_s > 6e-3  # vLLM's prompt shares its step with 7 decodes


def test_sglang_reserves_max_new_tokens_for_each_admitted_prompt():
    # A 384-token pool, requests of 32 + 64: each admitted prompt reserves 32 + 64 = 96 tokens, and the
    # fourth would need 96 < 384 - 3 x 96 = 96: NO_TOKEN, so three run at a time (TRT-LLM runs four).
    # 8 clients at once: 3 + 3 + 2 requests in 3 rounds of 64 steps; TTFTs 1, 65, 129 and totals 64,
    # 128, 192 (mean 57 and 120); nobody is retracted.
    s = simulate(unit, Load(32, 64, 8, concurrency=8, burst=True), Limits(64, 8192, 384, 1, SglangPolicy))
    assert (s.ttft_s, s.total_s, s.preemptions, s.steps) == (57.0, 120.0, 0, 192)


def test_sglang_chunks_a_long_prompt():
    # 20,000 tokens with chunked_prefill_size 8,192: chunks of 8,192, 8,192 and 3,616, then 4 decodes.
    s = simulate(unit, Load(prompt=20_000, new=5, requests=1, concurrency=1), BIG._replace(policy=SglangPolicy))
    assert (s.ttft_s, s.total_s) == (3.0, 7.0)


def test_sglang_max_prefill_tokens_caps_a_prefill_batch():
    # 8 clients at once, prompts of 8,000: with chunked_prefill_size and max_prefill_tokens 32,768 a prefill
    # batch takes four whole prompts (32,000 tokens), so the 8 first tokens come after 2 steps, not the
    # default budgets' 8 (max_prefill_tokens 16,384 stops a second prompt once 8,192 are chunked in).
    load = Load(prompt=8000, new=3, requests=8, concurrency=8, burst=True)
    wide = BIG._replace(policy=SglangPolicy, max_num_batched_tokens=32768, max_prefill_tokens=32768)
    assert simulate(unit, load, wide).ttft_s == (1 + 2) / 2
    default = simulate(unit, load, BIG._replace(policy=SglangPolicy))
    assert default.ttft_s == sum(range(1, 9)) / 8


def test_sglang_reads_new_requests_every_recv_interval_decode_iterations():
    # --scheduler-recv-interval N: a request that reached the scheduler waits until N decode iterations have
    # passed since its last read (or a prefill ran), then takes its prefill step: at most N + 1 one-second
    # steps. 8 clients spread over 200 new tokens finish one every 25 decodes: N = 10 never delays a read,
    # N = 30 holds each new request back: the TTFT grows with N and stays within N + 1 steps.
    load = Load(prompt=100, new=200, requests=400, concurrency=8, turnaround=False)
    sg = BIG._replace(policy=SglangPolicy)
    runs = {n: simulate(unit, load, sg._replace(recv_interval=n)) for n in (1, 10, 30)}
    assert runs[1].ttft_s == runs[10].ttft_s == 1.0 == simulate(unit, load, sg).ttft_s
    assert 1.0 < runs[30].ttft_s <= 30 + 1 and runs[30].ttft_p99_s <= 30 + 1
    assert runs[30].requests_per_s < runs[1].requests_per_s


def test_sglang_retracts_when_the_decayed_reservation_overcommits():
    # new_token_ratio decays to 0.098 over 600 decode steps, so admission overcommits a small pool and
    # the decode batch must retract; TRT-LLM's whole-request promise never does.
    load = Load(prompt=100, new=500, requests=640, concurrency=64)
    s = simulate(unit, load, Limits(1024, 8192, 20_000, 1, SglangPolicy))
    t = simulate(unit, load, Limits(1024, 8192, 20_000, 1, TrtllmPolicy))
    assert s.preemptions > 0 and t.preemptions == 0
    assert s.measured > 0 and t.measured > 0


# --- TensorRT-LLM: GUARANTEED_NO_EVICT, whole prompts beside the decodes ----------------------


def test_trtllm_queues_what_would_not_fit_to_the_end_and_never_preempts():
    # 24 blocks of 16; a request of 32 + 64 tokens is promised 6 blocks: 4 run, the other 4 queue until
    # the first 4 finish at step 64 and enter at step 65. TTFTs 1 and 65 (mean 33), totals 64 and 128.
    limits = Limits(64, 8192, 24, 16, TrtllmPolicy)
    s = simulate(unit, Load(32, 64, 8, concurrency=8, burst=True), limits)
    assert (s.ttft_s, s.total_s, s.preemptions, s.steps) == (33.0, 96.0, 0, 128)
    assert max(step[0] + step[4] for step in trace(Load(32, 64, 8, concurrency=8, burst=True), limits).steps) == 4
    v = simulate(unit, Load(32, 64, 8, concurrency=8, burst=True), limits._replace(policy=None))
    assert v.preemptions > 0  # vLLM admits all 8 on their prompts and preempts as they grow


def test_trtllm_runs_prompts_and_decodes_in_one_step():
    # As vLLM with a budget that holds every prompt: a prompt is one step beside the decodes, no pause.
    load = Load(prompt=100, new=10, requests=40, concurrency=4, turnaround=False)
    s = simulate(unit, load, BIG._replace(policy=TrtllmPolicy))
    assert (s.ttft_s, s.tpot_s, s.total_s) == (1.0, 1.0, 10.0)


def test_trtllm_takes_whole_prompts_within_max_num_tokens():
    # Budget 250: 2 decodes + one 200-token prompt fit (202), a second prompt would not (402): the 4
    # clients' first prompts enter one a step, TTFTs 1, 2, 3, 4.
    s = simulate(unit, Load(200, 10, 4, concurrency=4, burst=True), Limits(64, 250, 10**6, 1, TrtllmPolicy))
    assert s.ttft_s == pytest.approx(2.5)


# --- laws every policy keeps --------------------------------------------------------------------


@pytest.mark.parametrize("policy", [SglangPolicy, TrtllmPolicy])
def test_littles_law_in_steady_state(policy):
    for c in (1, 8, 64):
        s = simulate(linear, Load(prompt=500, new=200, requests=12 * c, concurrency=c), BIG._replace(policy=policy))
        assert s.requests_per_s * s.total_s == pytest.approx(c, rel=0.03)


@pytest.mark.parametrize("policy", [SglangPolicy, TrtllmPolicy])
def test_concurrency_one_is_one_request_alone(policy):
    # One prefill step of 1,000 tokens, then 99 decode steps from context 1,001.
    s = simulate(linear, Load(prompt=1000, new=100, requests=5, concurrency=1), BIG._replace(policy=policy))
    assert s.ttft_s == pytest.approx(1e-3 + 1e-2, rel=1e-9)
    assert s.tpot_s == pytest.approx(run_seconds(linear, 1, 1001, 99) / 99, rel=1e-9)


@pytest.mark.parametrize("policy", [SglangPolicy, TrtllmPolicy])
@pytest.mark.parametrize("pool", [20_000, 10**6])
def test_trace_times_every_request_as_simulate_does(policy, pool):
    # The schedule does not depend on step times: the trace's steps, timed afterwards, give simulate's TTFTs.
    load, limits = Load(300, 400, 320, concurrency=32, burst=True), Limits(1024, 2048, pool, 1, policy)
    tr = trace(load, limits)
    ends, t = {}, 0.0
    for n, contexts, pre, held, seqs, k, clock in tr.steps:
        t += run_seconds(linear, n, contexts, k) if k > 1 else linear(n, contexts, pre, held, seqs)
        ends[clock + k] = t
    ends[0] = 0.0
    ttft = sum(ends[f] - ends[a] for a, f, _, _ in tr.requests) / len(tr.requests)
    assert simulate(linear, load, limits).ttft_s == pytest.approx(ttft, rel=1e-9)


@pytest.mark.parametrize("policy", [SglangPolicy, TrtllmPolicy])
def test_open_loop_queues_when_arrivals_outpace_service(policy):
    limits = BIG._replace(policy=policy)
    light = simulate(linear, Load(prompt=500, new=200, requests=200, rate=1.0), limits)
    heavy = simulate(linear, Load(prompt=500, new=200, requests=200, rate=200.0), limits)
    assert heavy.ttft_p99_s > light.ttft_p99_s and heavy.tpot_s > light.tpot_s
    assert simulate(linear, Load(500, 200, 200, rate=40.0, seed=3), limits) == simulate(
        linear, Load(500, 200, 200, rate=40.0, seed=3), limits
    )


# --- the engines' defaults on a real deployment ----------------------------------------------------


def test_serve_report_schedules_each_engine_its_own_way():
    spec, gpu = get_model("llama-3-8b"), get_gpu("h100")
    runs = {
        e: serve_report(spec, gpu, SINGLE, prompt=1024, new=256, concurrency=64, engine=e, steady=True)
        for e in ("vllm", "sglang", "trtllm")
    }
    t = runs["trtllm"]
    assert (t.max_num_seqs, t.max_num_batched_tokens, t.preemptions) == (2048, 8192, 0)
    assert "GUARANTEED_NO_EVICT" in t.kv_pool
    # In the steady state (clients spread), SGLang pauses the decodes for each prefill: at the ceiling
    # its TPOT is longer than vLLM's. (Its shorter TTFT, the prompt alone, is pinned on the simulation
    # above: the ceiling's TTFT is bounded by the prompt's own pass for both.)
    s, v = runs["sglang"], runs["vllm"]
    assert s.tpot_s > v.tpot_s and s.ttft_s <= v.ttft_s


def test_trtllm_raises_max_num_tokens_for_long_prompts():
    spec, gpu = get_model("llama-3-8b"), get_gpu("h100")
    r = serve_report(spec, gpu, SINGLE, prompt=8192, new=128, concurrency=16, engine="trtllm", estimate=False)
    assert r.max_num_batched_tokens == 8192 + 2048 and "raised" in r.kv_pool


def test_launch_flags_set_the_limits_a_run_was_started_with():
    # A calibration run's launch flags (scripts/inferencex_launch.py) replace the engine's defaults; a
    # TensorRT-LLM --max_num_tokens so set is not raised for long prompts, and SGLang's server-wide
    # seats and chunk are split over its DP-attention ranks as SGLang splits them (the replica's limits
    # are the ranks' sum again), its max_prefill_tokens each rank's own.
    from kvcalc.cost.step import Deployment
    from kvcalc.plan.serve_pool import serving_limits

    spec, gpu = get_model("llama-3-8b"), get_gpu("h100")
    kw = dict(dtype=None, kv_dtype="bf16", prompt=8192, new=128)
    launched = dict(launch={"max_num_batched_tokens": 8192 + 64}, pool_flags=False)  # its pool flags are not known
    trt, pool = serving_limits(spec, gpu, SINGLE, engine="trtllm", **launched, **kw)
    assert trt.max_num_batched_tokens == 8256 and "raised" not in pool and "launched with" in pool
    dsv3, dp = get_model("deepseek-v3"), Deployment(tp=8, ep=8, dp_attention=True)
    flags = {"max_num_seqs": 128, "max_num_batched_tokens": 32768, "max_prefill_tokens": 32768}
    sg, _ = serving_limits(dsv3, get_gpu("h200"), dp, engine="sglang", launch=flags, pool_flags=False, **kw)
    assert (sg.max_num_seqs, sg.max_num_batched_tokens, sg.max_prefill_tokens) == (128, 32768, 8 * 32768)
    # launched at SGLang's defaults, each of the 8 ranks still admits its own 16,384 prompt tokens a prefill batch
    default, _ = serving_limits(dsv3, get_gpu("h200"), dp, engine="sglang", **kw)
    assert default.max_prefill_tokens == 8 * 16384
    one, _ = serving_limits(dsv3, get_gpu("h200"), Deployment(tp=8, ep=8), engine="sglang", **kw)
    assert one.max_prefill_tokens == 16384
