"""`generate --concurrency/--rate`: the serving simulation (plan/serve.py) run on one deployment,
its steps timed by cost/estimate.step_time (ceiling, estimate and the interval's ends), the KV pool
from the engine's memory model, and the figures as result models."""

from collections.abc import Callable
from functools import lru_cache, partial

from kvcalc.cost.constants import ConstantsMemo
from kvcalc.cost.roofline import ceiling_routing
from kvcalc.cost.step import Deployment, comm_seconds, context_warning, needs_link, stages
from kvcalc.errors import UsageError
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import ModelSpec
from kvcalc.plan.serve import Limits, Load, StepTimer
from kvcalc.plan.serve_bound import request_flop_seconds, tokens_per_s_bound
from kvcalc.plan.serve_launch import launch_limits, pool_fraction, sglang_release, ssm_dtype, state_slots
from kvcalc.plan.serve_pool import default_requests, serving_limits
from kvcalc.plan.serve_stats import ServeStats
from kvcalc.plan.serve_trace import runner
from kvcalc.results import Result


# NOTE: no `from __future__ import annotations` here: Pydantic would compile each annotation string.
class ServeFigures(Result):
    """One simulation's steady-state figures (means unless named otherwise)."""

    ttft_s: float  # queueing included
    ttft_p50_s: float
    ttft_p99_s: float
    tpot_s: float
    itl_s: float
    total_s: float  # end-to-end latency of a request
    tokens_per_s: float  # output tokens per second, all users
    per_user_tokens_per_s: float
    requests_per_s: float
    preemptions: int
    basis: str


class ServeEstimate(ServeFigures):
    interval: dict[str, list[float]]  # name -> [lo, hi]: the simulation with every step at its interval's ends
    server_s: float = 0.0  # the API server's calibrated time, included in each TTFT and latency above


class ServeResult(ServeFigures):
    """Top level: every step at its ceiling (a bound); `estimate`: every step at the estimate."""

    model: str
    gpu: str
    engine: str
    prompt: int
    new: int
    tp: int = 1
    pp: int = 1
    kv_dtype: str = "bf16"  # the cache's element type: --kv-dtype, or the engine's default
    concurrency: int | None = None
    rate: float | None = None
    requests: int
    seed: int | None = None
    range_ratio: float = 1.0  # request lengths uniform in [int(ratio x L), L]; 1: every request alike
    measured_requests: int  # the requests the figures are over
    steady_state: bool = False  # closed loop: figures over the steady state, not the benchmark's whole run
    steps: int
    kv_capacity_tokens: int
    kv_pool: str  # where the capacity comes from
    max_num_seqs: int
    max_num_batched_tokens: int
    estimate: ServeEstimate | None = None
    warnings: list[str] = []
    routed: tuple[int, int] | None = None  # MoE: (experts a layer the ceiling's steps read: k, tokens routed alike; E)


INTERVAL_NAMES = ("ttft_s", "ttft_p50_s", "ttft_p99_s", "tpot_s", "total_s", "tokens_per_s", "per_user_tokens_per_s")


def step_timers(
    spec: ModelSpec, gpu: GpuSpec, dep: Deployment, *, engine: str, dtype: str | None, kv_dtype: str
) -> tuple[StepTimer, StepTimer, StepTimer, StepTimer, str]:
    """(ceiling, estimate, low end, high end) step timers and the estimate's basis: one memoized
    step_time per distinct step, the decoding contexts spread evenly (each c or c + 1)."""
    from kvcalc.cost.fitting import served_view
    from kvcalc.plan.calibration import constants_for
    from kvcalc.plan.serve_steps import prompt_features, uniform_step_time

    staged = stages(spec, dep, dtype)
    consts, basis_line = constants_for(gpu, engine)
    constants = (dict(served_view(consts, engine)), basis_line)  # a served request's steps
    memo: ConstantsMemo = {}  # the constants resolved once per (family, engine, phase, link), for every step

    @lru_cache(maxsize=1 << 12)
    def base(pre: int, context: int, seqs: int):  # noqa: ANN202
        return prompt_features(spec, gpu, dep, pre, context, seqs, dtype, kv_dtype, staged)

    @lru_cache(maxsize=1 << 12)
    def comm(tokens: int) -> float:
        return comm_seconds(spec, dep, tokens, dtype)

    @lru_cache(maxsize=1 << 20)  # NOTE: the run's every step shape, for the estimate, its interval and the ceiling
    def timed(n: int, context_sum: int, pre: int, held: int, seqs: int):  # noqa: ANN202
        context, seqs = (held // seqs if seqs else 0), max(seqs, 1)
        return uniform_step_time(
            spec, gpu, dep, engine=engine, decodes=n, context_sum=context_sum, prefill_tokens=pre,
            prefill_context=context, prefill_seqs=seqs, dtype=dtype, kv_dtype=kv_dtype, staged=staged,
            constants=constants, base=base(pre, context, seqs), comm=comm, memo=memo,
        )  # fmt: skip

    basis = timed(1, 1, 0, 0, 0).basis
    return (
        lambda *a: timed(*a).ceiling_s,
        lambda *a: timed(*a).estimate_s,
        lambda *a: timed(*a).lo_s,
        lambda *a: timed(*a).hi_s,
        basis,
    )


def ceiling_stats(
    ceiling: StepTimer, load: Load, limits: Limits, run: Callable[[StepTimer], ServeStats] | None = None,
    work: Callable[[int, float], float] | None = None,
) -> ServeStats:  # fmt: skip
    """The load's figures with every step at its ceiling, as a bound (cost/fitting.bounded): TTFTs
    (mean, p50, p99) no more than the prompt's own pass, and for a closed loop (whose schedule does not
    depend on step times) TPOT and ITL no more than the same run with only its decode steps timed, its
    tokens/s no more than plan/serve_bound's (`work`: a request's FLOP seconds there). `run`: the load's
    runner (plan/serve_trace.runner), when the caller has one."""
    from kvcalc.cost.fitting import Figures, bounded

    run = run or runner(load, limits)
    s = run(ceiling)
    alone = ceiling(0, 0, load.prompt, 0, 1)
    tpot, itl = s.tpot_s, s.itl_s
    if load.concurrency is not None:

        def decode_only(n: int, context_sum: int, pre: int, held: int, seqs: int) -> float:
            return ceiling(n, context_sum, 0, 0, 0) if n else 0.0

        d = run(decode_only)
        tpot, itl = d.tpot_s, d.itl_s
    fig = Figures(s.ttft_s, s.tpot_s, s.total_s, s.tokens_per_s)
    rate = tokens_per_s_bound(ceiling, load, limits, work) if load.concurrency is not None else None
    f = bounded(fig, alone, load.new, rate, tpot)
    return s._replace(
        ttft_s=f.ttft_s, ttft_p50_s=min(s.ttft_p50_s, alone), ttft_p99_s=min(s.ttft_p99_s, alone),
        tpot_s=f.tpot_s, itl_s=min(s.itl_s, itl), per_user_tokens_per_s=1 / f.tpot_s if f.tpot_s > 0 else 0.0,
        total_s=f.total_s, tokens_per_s=f.tokens_per_s, requests_per_s=f.tokens_per_s / load.new,
    )  # fmt: skip


def _served(s: ServeStats, srv: float) -> ServeStats:
    """What a client sees (cost/fitting.served), p50 and p99 TTFT with the mean."""
    from kvcalc.cost.fitting import Figures, served

    f = served(Figures(s.ttft_s, s.tpot_s, s.total_s, s.tokens_per_s), srv)
    return s._replace(
        ttft_s=f.ttft_s, ttft_p50_s=s.ttft_p50_s + srv, ttft_p99_s=s.ttft_p99_s + srv, total_s=f.total_s,
        tokens_per_s=f.tokens_per_s, requests_per_s=s.requests_per_s * f.tokens_per_s / max(s.tokens_per_s, 1e-300),
    )  # fmt: skip


def _figures(s: ServeStats, basis: str) -> dict:
    return dict(
        ttft_s=s.ttft_s, ttft_p50_s=s.ttft_p50_s, ttft_p99_s=s.ttft_p99_s, tpot_s=s.tpot_s, itl_s=s.itl_s,
        total_s=s.total_s, tokens_per_s=s.tokens_per_s, per_user_tokens_per_s=s.per_user_tokens_per_s,
        requests_per_s=s.requests_per_s, preemptions=s.preemptions, basis=basis,
    )  # fmt: skip


def serve_report(
    spec: ModelSpec,
    gpu: GpuSpec,
    dep: Deployment,
    *,
    prompt: int,
    new: int,
    concurrency: int | None = None,
    rate: float | None = None,
    requests: int | None = None,
    seed: int = 0,
    engine: str = "vllm",
    dtype: str | None = None,
    kv_dtype: str = "bf16",
    estimate: bool = True,
    steady: bool = False,
    range_ratio: float = 1.0,
    max_num_seqs: int | None = None,
    max_batched_tokens: int | None = None,
    mem_fraction_static: float | None = None,
    engine_version: str | None = None,
    max_mamba_cache_size: int | None = None,
    mamba_ssm_dtype: str | None = None,
) -> ServeResult:
    """Serve `requests` requests of prompt + new tokens: closed loop with `concurrency` clients, or
    Poisson arrivals at `rate`/s; the ceiling at the top level, the estimate and its interval beside.
    `max_num_seqs` / `max_batched_tokens`: the engine's scheduler limits as launched (vLLM's --max-num-seqs and
    --max-num-batched-tokens, SGLang's --max-running-requests and --chunked-prefill-size, TensorRT-LLM's
    max_batch_size and max_num_tokens), as the calibration's runs are read with theirs; None: the engine's defaults.
    `mem_fraction_static`: SGLang's --mem-fraction-static (plan/serve_launch.pool_fraction); `engine_version`:
    SGLang's release (plan/serve_launch.sglang_release; None: the default one); `max_mamba_cache_size` /
    `mamba_ssm_dtype`: SGLang's state slots and SSM state dtype for a hybrid (plan/serve_launch).

    A closed loop is read as a benchmark runs it (`vllm bench serve --max-concurrency`, AIPerf,
    InferenceX): every client sends its first request at once, figures over all requests. `steady`:
    the clients spread over a request's life instead, figures over the steady state only. `range_ratio`
    < 1: each request's prompt and new tokens uniform in [int(ratio x L), L] (plan/serve_load.lengths)."""
    if (concurrency is None) == (rate is None):
        raise UsageError("give one of --concurrency (closed loop) or --rate (open loop)")
    if concurrency is not None and concurrency < 1:
        raise UsageError(f"--concurrency must be at least 1, got {concurrency}")
    if rate is not None and not rate > 0:
        raise UsageError(f"--rate must be a positive number of requests per second, got {rate}")
    if new < 1 or prompt < 1:
        raise UsageError("--prompt and --new must be at least 1 token for serving")
    if not 0 <= range_ratio <= 1:
        # NOTE: 0 is SGLang bench_serving's default: each length uniform in [1, L]
        raise UsageError(f"--range-ratio must be from 0 to 1, got {range_ratio}")
    n = requests if requests is not None else default_requests(concurrency)
    if n < 1:
        raise UsageError(f"--requests must be at least 1, got {n}")
    needs_link(dep, gpu)  # a preset without a sourced link cannot time tp x pp > 1 (as the static generate says)
    launch = launch_limits(engine, gpu, prompt, max_num_seqs, max_batched_tokens)
    fraction, slots = pool_fraction(engine, mem_fraction_static), state_slots(engine, max_mamba_cache_size)
    ssm = ssm_dtype(engine, mamba_ssm_dtype)
    limits, pool = serving_limits(
        spec, gpu, dep, engine=engine, dtype=dtype, kv_dtype=kv_dtype, prompt=prompt, new=new, launch=launch,
        mem_fraction_static=fraction, release=sglang_release(engine, engine_version), max_mamba_cache_size=slots,
        mamba_ssm_dtype=ssm,
    )  # fmt: skip
    burst = concurrency is not None and not steady
    load = Load(prompt, new, n, concurrency, rate, seed, burst=burst, range_ratio=range_ratio)
    ceiling, est, lo, hi, basis = step_timers(spec, gpu, dep, engine=engine, dtype=dtype, kv_dtype=kv_dtype)
    run = runner(load, limits)  # a closed loop is scheduled once, for the ceiling, the estimate and its interval
    work = partial(request_flop_seconds, spec, gpu, dep, dtype=dtype, kv_dtype=kv_dtype)
    top = ceiling_stats(ceiling, load, limits, run, work)
    from kvcalc.plan.calibration import refusal_warnings

    too_long = context_warning(spec, prompt + new)  # NOTE: an engine at its default max_model_len rejects it
    warnings = refusal_warnings(engine, gpu.name, spec, dtype, kv_dtype) + ([too_long] if too_long else [])
    if slots is not None or ssm is not None:  # where SGLang does not read its state flags, the answer says so
        from kvcalc.engines.sglang.mamba import size_warnings
        from kvcalc.engines.sglang.release import DEFAULT_RELEASE

        warnings += size_warnings(spec, sglang_release(engine, engine_version) or DEFAULT_RELEASE, slots, ssm)
    from kvcalc.engines.lengths import context_refusal

    if why := context_refusal(spec, engine, prompt + new):  # the server would not take such requests at all
        warnings.append(f"the engine would not serve requests of {prompt + new:,} tokens: they are {why}")
    held = min(limits.pool_holds(prompt + new), limits.max_num_seqs)  # whole requests at once
    if concurrency is not None and concurrency > held:
        warnings.append(f"the engine holds {held:,} requests of {prompt + new:,} tokens at once ({pool}): "
                        f"the other {concurrency - held:,} of {concurrency:,} clients wait for room")  # fmt: skip
    if steady and concurrency is not None and n <= 2 * concurrency:
        warnings.append(f"{n} requests at concurrency {concurrency}: no steady state (needs over {2 * concurrency})")
    result = ServeResult(
        **_figures(top, f"ceiling ({engine} scheduling)"),
        model=spec.name, gpu=gpu.name, engine=engine, prompt=prompt, new=new, tp=dep.tp, pp=dep.pp,
        kv_dtype=kv_dtype, concurrency=concurrency, rate=rate, requests=n, seed=seed if rate is not None or range_ratio < 1 else None,
        range_ratio=range_ratio,
        steady_state=bool(steady and concurrency is not None),
        measured_requests=top.measured, steps=top.steps, kv_capacity_tokens=limits.kv_blocks * limits.block_size,
        kv_pool=pool, max_num_seqs=limits.max_num_seqs, max_num_batched_tokens=limits.max_num_batched_tokens,
        warnings=warnings, routed=ceiling_routing(spec),
    )  # fmt: skip
    if not estimate:
        return result
    from kvcalc.cost.fitting import server_seconds
    from kvcalc.plan.calibration import constants_for
    from kvcalc.plan.serve_steps import prompt_features

    c = constants_for(gpu, engine)[0]
    first = prompt_features(spec, gpu, dep, prompt, 0, 1, dtype, kv_dtype, stages(spec, dep, dtype))
    srv = server_seconds(c, engine, first)
    mid = _served(run(est), srv)
    # NOTE: every step at its low end is the fast end: latencies take their low from it and
    # throughputs their high, and the other way round for the slow end.
    fast = _figures(_served(run(lo), srv), basis)
    slow = _figures(_served(run(hi), srv), basis)
    interval = {k: sorted([fast[k], slow[k]]) for k in INTERVAL_NAMES}
    for k in INTERVAL_NAMES:  # the interval holds the estimate (a queue can turn a step's band non-monotone)
        v = _figures(mid, basis)[k]
        interval[k] = [min(interval[k][0], v), max(interval[k][1], v)]
    if (concurrency or 0) > 1 and "interval.served.lo" in c:
        # NOTE: a TTFT under load holds queueing, whose spread on held-out runs is wider than a step's
        # (scripts/calibrate.py fits it apart: the `served` interval); never below the ceiling's TTFT.
        lo_f, hi_f = c["interval.served.lo"], c["interval.served.hi"]
        for k in ("ttft_s", "ttft_p50_s", "ttft_p99_s"):
            v = getattr(mid, k)
            interval[k] = [min(v, max(getattr(top, k), v * lo_f)), max(v, v * hi_f)]
    est_model = ServeEstimate(**_figures(mid, basis), interval=interval, server_s=srv)
    return result.model_copy(update={"estimate": est_model})
