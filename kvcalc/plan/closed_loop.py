"""The calibrated estimate of U closed-loop users on one deployment, in closed form: the steady state
the calibration itself scores (cost/fitting.py: each token a decode step of the U sequences plus the
prompts that arrive per step, amortized; TTFT a prompt pass, half a step and the fitted queueing),
with the 80% interval of the step model. Used by the planner, where the serving simulation
(plan/serve.py, `generate --concurrency U`) would take seconds per option at long contexts."""

from kvcalc.results import Result


# NOTE: no `from __future__ import annotations`: Pydantic would compile each annotation string.
class PlanEstimate(Result):
    """What a run of U closed-loop users is predicted to measure (not a bound)."""

    tpot_s: float  # mean time per output token
    ttft_s: float  # mean time to first token, queueing behind arriving prompts included
    ttft_p99_s: float | None = None  # the closed form has no tail: `check` (generate --concurrency) simulates it
    tokens_per_s: float  # output tokens per second, all users
    interval: dict[str, list[float]]  # 80% interval per figure: [lo, hi]
    basis: str
    method: str = "closed form (cost/fitting.py's steady state), not the simulation"


def closed_loop_estimate(
    spec,  # noqa: ANN001
    gpu,  # noqa: ANN001
    dep,  # noqa: ANN001
    *,
    users: int,
    prompt: int,
    new: int,
    dtype: str | None,
    kv_dtype: str,
    engine: str,
) -> PlanEstimate:
    """U users each sending prompt + new tokens and their next request when the last one ends. The
    interval's ends scale the prefill and decode steps by the calibration's factors and never pass
    the ceiling (a run cannot beat it)."""
    from kvcalc.cost.fitting import Setup, setup_features
    from kvcalc.engines.kernels import gpu_as_run_by, prompt_chunk
    from kvcalc.plan.calibration import constants_for

    gpu, chunk = gpu_as_run_by(gpu, engine), prompt_chunk(engine)
    sf = setup_features(spec, gpu, dep, Setup(None, users, prompt, new), dtype, kv_dtype, chunk)
    return estimate_of(sf, constants_for(gpu, engine), engine)


def estimate_of(sf, calibration, engine: str) -> PlanEstimate:  # noqa: ANN001
    """The closed-loop estimate of a setup's steps (cost/fitting.SetupFeatures) with (constants, basis)."""
    from kvcalc.cost.estimate import time_of
    from kvcalc.cost.fitting import figures, served_view

    c, basis = calibration
    c = served_view(c, engine)  # served users: the engine's server's step costs where fitted apart
    users, new = sf.setup.concurrency or 1, sf.setup.new
    est = figures(sf, lambda f: time_of(f, c, engine), c, engine)
    ceil = figures(sf, lambda f: f.ceiling_s, {}, "")
    phase = "served" if users > 1 and "interval.served.lo" in c else "prefill"  # queueing's wider spread
    plo, phi = c.get(f"interval.{phase}.lo", 0.8), c.get(f"interval.{phase}.hi", 1.25)
    dlo, dhi = c.get("interval.decode.lo", 0.8), c.get("interval.decode.hi", 1.25)
    ttft = [min(est.ttft_s, max(ceil.ttft_s, est.ttft_s * plo)), max(est.ttft_s, est.ttft_s * phi)]
    tpot = [min(est.tpot_s, max(ceil.tpot_s, est.tpot_s * dlo)), max(est.tpot_s, est.tpot_s * dhi)]
    n = max(new - 1, 0)
    out = users * max(new, 1)
    fast, slow = ttft[0] + n * tpot[0], ttft[1] + n * tpot[1]
    return PlanEstimate(
        tpot_s=est.tpot_s,
        ttft_s=est.ttft_s,
        tokens_per_s=est.tokens_per_s,
        interval={
            "tpot_s": tpot,
            "ttft_s": ttft,
            "tokens_per_s": [min(out / slow, est.tokens_per_s), max(out / fast, est.tokens_per_s)],
        },
        basis=basis,
    )


def scaled(e: PlanEstimate, factor: float) -> PlanEstimate:
    """A replica's estimate for all replicas: latencies as they are, tokens/s times `factor`
    (users / users of the busiest replica)."""
    if factor == 1:
        return e
    lo, hi = e.interval["tokens_per_s"]
    interval = {**e.interval, "tokens_per_s": [lo * factor, hi * factor]}
    return e.model_copy(update=dict(tokens_per_s=e.tokens_per_s * factor, interval=interval))
