"""Latency goals: the largest batch that meets a time-per-output-token or time-to-first-token target
on a (possibly parallel) deployment, among the batches that fit in memory."""

from __future__ import annotations

from kvcalc.cost.roofline import decode_row, prefill_row
from kvcalc.cost.step import SINGLE, Deployment, needs_link, stages
from kvcalc.errors import UsageError
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import ModelSpec
from kvcalc.plan.fit import FitResult, SloResult, largest_satisfying


def largest_batch(
    spec: ModelSpec,
    gpu: GpuSpec,
    fit: FitResult,
    *,
    tpot_ms: float | None,
    ttft_ms: float | None,
    prompt: int,
    dtype: str | None,
    kv_dtype: str,
    mbu: float,
    mfu: float,
    dep: Deployment = SINGLE,
    steps: list[str] | None = None,
    engine: str | None = None,
) -> SloResult:
    """Never refuses: when no batch meets the goals (or none fits), `met` is False and the figures
    are batch 1's, so the verdict can say by how much the goal is missed. With `engine` (and no
    mbu / mfu what-if) the calibrated estimate decides, and `ceiling_batch` says what the bound allows:
    a ceiling can only prove a miss. The batches searched are those memory holds (fit.max_batch: the engine's
    own pool where one is named)."""
    for name, value in (("--tpot-ms", tpot_ms), ("--ttft-ms", ttft_ms)):
        if value is not None and value <= 0:
            raise UsageError(f"{name} must be positive, got {value:g}")
    from kvcalc.model.formats import matmul_dtype

    compute = gpu.compute_dtype(matmul_dtype(spec, dtype))
    needs_link(dep, gpu)
    staged = stages(spec, dep, dtype)
    util = None if mbu == 1.0 and mfu == 1.0 else (mbu, mfu)

    def seconds(row) -> float:  # noqa: ANN001
        return row.estimate_step_seconds if util else row.step_seconds

    def tpot_bound(b: int) -> float:
        return seconds(decode_row(spec, gpu, b, fit.seq, dtype, kv_dtype, compute, dep=dep, staged=staged, util=util))

    def ttft_bound(b: int) -> float:
        return seconds(prefill_row(spec, gpu, b, prompt, dtype, kv_dtype, compute, dep=dep, staged=staged, util=util))

    tpot, ttft = tpot_bound, ttft_bound
    calibrated = engine is not None and util is None
    if calibrated:
        from kvcalc.cost.estimate import step_time
        from kvcalc.plan.calibration import constants_for

        constants = constants_for(gpu, engine)

        def tpot(b: int) -> float:
            kw = dict(engine=engine, dtype=dtype, kv_dtype=kv_dtype, staged=staged, calibration=constants)
            return step_time(spec, gpu, dep, decode_batch=b, decode_context=fit.seq, **kw).estimate_s  # type: ignore[arg-type]

        def ttft(b: int) -> float:
            kw = dict(engine=engine, dtype=dtype, kv_dtype=kv_dtype, staged=staged, calibration=constants)
            return step_time(spec, gpu, dep, prefill_tokens=b * prompt, prefill_seqs=b, **kw).estimate_s  # type: ignore[arg-type]

    def meets(b: int, tp_, tt_) -> bool:  # noqa: ANN001
        return (tpot_ms is None or tp_(b) * 1e3 <= tpot_ms) and (ttft_ms is None or tt_(b) * 1e3 <= ttft_ms)

    def ok(b: int) -> bool:
        return meets(b, tpot, ttft)

    limit = fit.max_batch
    best = largest_satisfying(limit, ok)
    ceiling_batch = largest_satisfying(limit, lambda b: meets(b, tpot_bound, ttft_bound)) if calibrated else None
    basis = (
        f"estimate, {engine}" if calibrated else "ceiling" if util is None else f"estimate (MBU {mbu:g}, MFU {mfu:g})"
    )
    batch = max(best, 1)
    step = tpot(batch)
    if steps is not None:
        from kvcalc.cost.roofline import comm_lines
        from kvcalc.units import fmt_seconds

        goals = " and ".join(
            f"{label} <= {v:g} ms" for label, v in (("TPOT", tpot_ms), ("TTFT", ttft_ms)) if v is not None
        )
        steps.append(
            f"latency goal ({basis}, {dep.tp} x {dep.pp} GPUs): the largest batch up to {limit:,} (memory) with "
            f"{goals}, by bisection: {best:,}"
        )
        for b in dict.fromkeys(x for x in (batch, best + 1) if 1 <= x <= max(limit, 1)):
            figures = [f"TPOT {fmt_seconds(tpot(b))}"] + (
                [f"TTFT {fmt_seconds(ttft(b))}"] if ttft_ms is not None else []
            )
            steps.append(f"  batch {b:,}: {', '.join(figures)}")
        steps += [f"  decode step, batch {batch:,}:{line[1:]}" for line in comm_lines(spec, dep, batch, dtype)]
        if ttft_ms is not None:
            # The prompt pass all-reduces batch x prompt tokens of activations, not one token's.
            lines = comm_lines(spec, dep, batch * prompt, dtype)
            steps += [f"  prefill, {batch:,} x {prompt:,} tokens:{line[1:]}" for line in lines]
    return SloResult(
        tpot_ms=tpot_ms,
        ttft_ms=ttft_ms,
        batch=best,
        tpot_s=step,
        ttft_s=ttft(batch) if ttft_ms is not None else None,
        tokens_per_s=best / step,
        basis=basis,
        met=best > 0,
        ceiling_batch=ceiling_batch,
    )
