"""The calibrated estimate of a static batch (generate) and of one decode step (roofline, fit), with
its 80% interval: the step model of cost/estimate.py composed into TTFT, TPOT, total time and
tokens/s exactly as the calibration scores them (cost/fitting.py), so what is printed is what was
validated."""

from kvcalc.cost.step import Deployment, Stage
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import ModelSpec
from kvcalc.results import Result


# NOTE: no `from __future__ import annotations`: Pydantic would compile every annotation string at import.
class Estimate(Result):
    """Calibrated figures: what a run is predicted to measure, not a bound."""

    engine: str
    ttft_s: float
    tpot_s: float  # mean over the decode steps
    total_s: float  # static batch: until the whole batch is done
    tokens_per_s: float  # output tokens over all sequences / total_s, prefill included
    basis: str
    interval: dict[str, list[float]]  # 80% interval per figure: [lo, hi]


def engine_for_estimate(engine: str, ceiling: bool, nearest: bool = True) -> str | None:
    """The engine to estimate for (engines/names.engine_name's reading of the name), None with --ceiling;
    an unknown name is a usage error, and so is a stand-in (lmdeploy, tgi) where nearest=False."""
    from kvcalc.engines.names import engine_name

    name, _ = engine_name(str(engine), nearest)
    return None if ceiling else name


def _factors(c: dict, phase: str) -> tuple[float, float]:
    return c.get(f"interval.{phase}.lo", 0.8), c.get(f"interval.{phase}.hi", 1.25)


def static_estimate(
    spec: ModelSpec,
    gpu: GpuSpec,
    dep: Deployment,
    *,
    batch: int,
    prompt: int,
    new: int,
    dtype: str | None,
    kv_dtype: str,
    engine: str = "vllm",
) -> Estimate:
    """A static batch: one prefill of batch x prompt tokens, then new - 1 decode steps (timed at the
    mean context, prompt + new / 2, as the calibration does). The interval's ends never pass the
    ceiling (a run cannot beat it)."""
    from kvcalc.cost.estimate import ENGINES, time_of
    from kvcalc.cost.fitting import Setup, figures, setup_features
    from kvcalc.plan.calibration import constants_for

    if engine not in ENGINES:
        from kvcalc.errors import UsageError

        raise UsageError(f"unknown engine '{engine}'", hint=f"one of {', '.join(ENGINES)}")
    from kvcalc.engines.kernels import gpu_as_run_by, prompt_chunk

    c, basis = constants_for(gpu, engine)
    gpu, chunk = gpu_as_run_by(gpu, engine), prompt_chunk(engine)
    sf = setup_features(spec, gpu, dep, Setup(batch, None, prompt, new), dtype, kv_dtype, chunk)
    est = figures(sf, lambda f: time_of(f, c, engine), c, engine)
    ceil = figures(sf, lambda f: f.ceiling_s, {}, "")
    plo, phi = _factors(c, "prefill")
    dlo, dhi = _factors(c, "decode")
    n = max(new - 1, 0)

    def total(ttft: float, tpot: float) -> float:
        return ttft + n * tpot

    ttft = [max(ceil.ttft_s, est.ttft_s * plo), est.ttft_s * phi]
    tpot = [max(ceil.tpot_s, est.tpot_s * dlo), est.tpot_s * dhi]
    tot = [max(ceil.total_s, total(ttft[0], tpot[0])), total(ttft[1], tpot[1])]
    users = batch * max(new, 1)
    return Estimate(
        engine=engine,
        ttft_s=est.ttft_s,
        tpot_s=est.tpot_s,
        total_s=est.total_s,
        tokens_per_s=est.tokens_per_s,
        basis=basis,
        interval={
            "ttft_s": [min(ttft[0], est.ttft_s), ttft[1]],
            "tpot_s": [min(tpot[0], est.tpot_s), tpot[1]],
            "total_s": [min(tot[0], est.total_s), tot[1]],
            "tokens_per_s": [users / tot[1], max(est.tokens_per_s, users / tot[0])],
        },
    )


def decode_estimate(
    spec: ModelSpec,
    gpu: GpuSpec,
    dep: Deployment,
    *,
    batch: int,
    context: int,
    dtype: str | None,
    kv_dtype: str,
    engine: str = "vllm",
    staged: tuple[Stage, ...] | None = None,
) -> tuple[float, float, float, str]:
    """One decode step of `batch` sequences at `context` tokens: (estimate, lo, hi, basis) in seconds."""
    from kvcalc.cost.estimate import step_time
    from kvcalc.plan.calibration import constants_for

    t = step_time(
        spec,
        gpu,
        dep,
        engine=engine,
        decode_batch=batch,
        decode_context=context,
        dtype=dtype,
        kv_dtype=kv_dtype,
        staged=staged,
        calibration=constants_for(gpu, engine),
    )
    return t.estimate_s, t.lo_s, t.hi_s, t.basis


def decode_lines(
    spec: ModelSpec,
    gpu: GpuSpec,
    dep: Deployment,
    batches: list[int],
    context: int,
    engine: str,
    dtype: str | None,
    kv_dtype: str,
    staged: tuple[Stage, ...],
    util: tuple[float, float] | None = None,
) -> list[tuple[str, list[int], list[float]]]:
    """Chart lines of decode step time against batch at one context, beside the ceiling's: the
    calibrated estimate and its 80% interval, or with `util` (--efficiency/--mbu/--mfu) that what-if."""
    if util is not None:
        from kvcalc.cost.roofline import decode_row
        from kvcalc.model.formats import matmul_dtype

        compute = gpu.compute_dtype(matmul_dtype(spec, dtype))
        rows = [
            decode_row(spec, gpu, b, context, dtype, kv_dtype, compute, dep=dep, staged=staged, util=util)
            for b in batches
        ]
        label = f"seq {context:,} (what-if MBU {util[0]:g}, MFU {util[1]:g})"
        return [(label, batches, [r.estimate_step_seconds or r.step_seconds for r in rows])]
    from kvcalc.cost.estimate import step_time
    from kvcalc.plan.calibration import constants_for

    kw = dict(engine=engine, dtype=dtype, kv_dtype=kv_dtype, staged=staged, decode_context=context)
    kw["calibration"] = constants_for(gpu, engine)
    est = [step_time(spec, gpu, dep, decode_batch=b, **kw) for b in batches]  # type: ignore[arg-type]
    return [
        (f"seq {context:,} (estimate, {engine})", batches, [t.estimate_s for t in est]),
        (f"seq {context:,} estimate 80% low", batches, [t.lo_s for t in est]),
        (f"seq {context:,} estimate 80% high", batches, [t.hi_s for t in est]),
    ]
