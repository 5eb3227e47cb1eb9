"""Latency goals: the largest batch that meets a time-per-output-token or time-to-first-token target."""

from __future__ import annotations

from kvcalc.errors import UsageError
from kvcalc.fit import largest_satisfying
from kvcalc.generate import decode_step_seconds, prefill_seconds
from kvcalc.results import FitResult, SloResult
from kvcalc.specs import GpuSpec, ModelSpec


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
) -> SloResult:
    from kvcalc.weights import matmul_dtype

    compute = gpu.compute_dtype(matmul_dtype(spec, dtype))

    def tpot(b: int) -> float:
        return decode_step_seconds(spec, gpu, b, fit.seq, dtype, kv_dtype, compute, mbu, mfu)

    def ttft(b: int) -> float:
        return prefill_seconds(spec, gpu, b, prompt, dtype, kv_dtype, compute, mbu, mfu)

    def ok(b: int) -> bool:
        return (tpot_ms is None or tpot(b) * 1e3 <= tpot_ms) and (ttft_ms is None or ttft(b) * 1e3 <= ttft_ms)

    for name, value in (("--tpot-ms", tpot_ms), ("--ttft-ms", ttft_ms)):
        if value is not None and value <= 0:
            raise UsageError(f"{name} must be positive, got {value:g}")
    best = largest_satisfying(fit.max_batch, ok)
    basis = "ceiling" if mbu == 1.0 and mfu == 1.0 else f"estimate (MBU {mbu:g}, MFU {mfu:g})"
    if best == 0:
        goals = " and ".join(
            f"{label} {value:g} ms (batch 1: {f(1) * 1e3:.2f} ms, {basis})"
            for label, value, f in (("TPOT", tpot_ms, tpot), ("TTFT", ttft_ms, ttft))
            if value is not None
        )
        raise UsageError(
            f"no batch of {spec.name} on {gpu.name} meets {goals}",
            hint="relax the goal, add GPUs, or quantize weights and cache",
        )
    step = tpot(best)
    return SloResult(
        tpot_ms=tpot_ms,
        ttft_ms=ttft_ms,
        batch=best,
        tpot_s=step,
        ttft_s=ttft(best) if ttft_ms is not None else None,
        tokens_per_s=best / step,
        basis=basis,
    )
