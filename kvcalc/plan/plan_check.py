"""The planner's first option, checked by the serving simulation: the closed form ranks every
candidate in milliseconds; the option that comes out first is then served by plan/serve.py exactly
as `kvcalc generate --concurrency U` serves it (its TTFT p99 included), its figures replace the closed
form's, the goals are decided again on them and the options re-ranked, until the first option is a
simulated one (at most MAX_SIMULATED simulations: each takes a few tenths of a second).

NOTE: with a --ttft-ms goal the cap matters. The closed form's TTFT is a steady-state mean and the goal is
the simulation's p99, over a benchmark's run whose first wave sends every prompt at once. At three simulations
`plan deepseek-r1 --seq 8k --users 256 --tpot-ms 50 --ttft-ms 2000` named 8 x B200 as meeting the goals (the
closed form's mean), which the fourth simulation serves at a 14.7 s p99: no option meets. At twelve a search takes
0.5-3 s (benchmarks/plan.py); where the cap is spent before the first option is a simulated one (`plan llama-3.1-8b
--seq 8k --users 32 --tpot-ms 30 --ttft-ms 500` needs 19, `plan qwen3-30b-a3b --seq 16k --users 128 --ttft-ms 3000`
13), present/plan.py says the first option's verdict is the closed form's mean."""

from kvcalc.plan.closed_loop import PlanEstimate, scaled

MAX_SIMULATED = 12
SIMULATION = "simulation (plan/serve.py), as `kvcalc generate --concurrency U` prints it"


def simulated_estimate(
    spec, gpu, option, *, users: int, prompt: int, new: int, engine: str, gpu_util: float, dtype: str | None,
    kv_dtype: str, release: str | None = None, max_num_seqs: int | None = None,
) -> PlanEstimate:  # noqa: ANN001  # fmt: skip
    """`generate --concurrency U --prompt P --new N` on the option's deployment (the check command it prints):
    the estimate and its interval. SGLang's pool at the fraction its launch command sets (--gpu-util) and `release`;
    `dtype` / `kv_dtype`: the weights and cache as generate's --dtype / --kv-dtype (dtype None: the model's own);
    `max_num_seqs`: the requests the engine runs at once as its command launches it (llama-server's -np)."""
    from kvcalc.engines.kernels import gpu_as_run_by
    from kvcalc.plan.deploy import deployment
    from kvcalc.plan.serve_report import serve_report

    gpu = gpu_as_run_by(gpu, engine)  # as generate takes it (llama.cpp's FP16-accumulate peaks)
    dep = deployment(
        spec, gpu, tp=option.tp, pp=option.pp, interconnect=None, gpu_util=gpu_util, reserve="2GiB",
        ep=option.ep, dp_attention=option.dp_attention,
    )  # fmt: skip
    r = serve_report(
        spec, gpu, dep, prompt=prompt, new=new, concurrency=users, engine=engine, dtype=dtype,
        kv_dtype=kv_dtype, mem_fraction_static=gpu_util if engine == "sglang" else None,
        engine_version=release, max_num_seqs=max_num_seqs,
    )  # fmt: skip
    e = r.estimate
    keep = ("tpot_s", "ttft_s", "ttft_p99_s", "tokens_per_s")
    return PlanEstimate(
        tpot_s=e.tpot_s, ttft_s=e.ttft_s, ttft_p99_s=e.ttft_p99_s, tokens_per_s=e.tokens_per_s,
        interval={k: e.interval[k] for k in keep}, basis=e.basis, method=SIMULATION,
    )  # fmt: skip


def check_first(options: list, simulate, *, judge, rank) -> int:  # noqa: ANN001
    """Simulate options in rank order until the first is a simulated one; `simulate(option)` gives the
    option's simulated estimate for all its users (a KvcalcError: the simulation refuses it),
    `judge(option, estimate)` returns the updated option, `rank` is the sort key. A closed-form option
    that misses only a TTFT goal ranks as if it met it while this runs: the closed form has no tail and
    its mean TTFT is the calibration's weakest figure, so the simulation decides it. Returns the
    simulations run."""
    from kvcalc.errors import KvcalcError

    def unsure(o) -> bool:  # noqa: ANN001
        return o.estimate.method != SIMULATION and bool(o.misses) and all("TTFT" in m for m in o.misses)

    def provisional(o) -> tuple:  # noqa: ANN001
        return rank(o.model_copy(update={"meets": True})) if unsure(o) else rank(o)

    runs = 0
    while options and runs < MAX_SIMULATED:
        options.sort(key=provisional)
        first = options[0]
        if first.estimate.method == SIMULATION:
            break
        runs += 1
        try:
            e = simulate(first)
        except KvcalcError:
            break  # the simulation refuses what the closed form took: keep the closed form
        options[0] = judge(first, e)
    options.sort(key=rank)
    return runs


def replica_simulation(spec, gpus: dict, *, users: int, prompt: int, new: int, engine: str, gpu_util: float,
                       release: str | None = None):  # noqa: ANN001, ANN201  # fmt: skip
    """`simulate` for check_first over the planner's options: the busiest replica served, its tokens/s
    times the replicas'."""

    def simulate(option) -> PlanEstimate:  # noqa: ANN001
        u = -(-users // option.replicas)  # users on the busiest replica
        dtype = None if option.dtype == spec.dtype else option.dtype
        e = simulated_estimate(
            spec, gpus[option.gpu], option, users=u, prompt=prompt, new=new, engine=engine, gpu_util=gpu_util,
            dtype=dtype, kv_dtype=option.kv_dtype, release=release,
        )  # fmt: skip
        return scaled(e, users / u)

    return simulate
