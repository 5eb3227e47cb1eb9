"""The Python API's serving path: generate(concurrency=... or rate=...) checked as `generate --concurrency/--rate`
checks its options, then the serving simulation (plan/serve_report.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.api.args import as_count
from kvcalc.errors import UsageError
from kvcalc.units import KV_DTYPES, normalize_dtype

if TYPE_CHECKING:
    from kvcalc.plan.serve_report import ServeResult


def serve(
    spec,
    gpu,
    dep,
    dtype,
    kv_dtype,
    engine,
    ceiling,
    what_if,
    batch,
    load,
    steady=False,
    range_ratio=1.0,
    pool=None,
) -> ServeResult:  # noqa: ANN001
    """generate's serving path, checked as `generate --concurrency/--rate` checks its options. `load`: the requests and
    the scheduler's launch flags; `pool`: SGLang's pool flags as launched (serve_report's
    mem_fraction_static, max_mamba_cache_size, mamba_ssm_dtype)."""
    from kvcalc.plan.serve_report import serve_report

    prompt, new, concurrency, rate, requests, seed, max_num_seqs, max_batched_tokens, release = load
    if concurrency is not None and rate is not None:
        raise UsageError("give concurrency (closed loop) or rate (open loop), not both")
    if what_if:
        raise UsageError("efficiency/mbu/mfu are static-batch what-ifs", hint="serving uses the calibrated estimate")
    if batch != 1:
        raise UsageError("batch is a static batch; concurrency and rate serve requests as they come")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float))):
        raise UsageError(f"rate must be a number of requests per second, got {rate!r}")
    return serve_report(
        spec,
        gpu,
        dep,
        prompt=as_count(prompt, "prompt"),
        new=as_count(new, "new"),
        concurrency=None if concurrency is None else as_count(concurrency, "concurrency"),
        rate=None if rate is None else float(rate),
        requests=None if requests is None else as_count(requests, "requests"),
        seed=as_count(seed, "seed") if seed else 0,
        engine=engine, dtype=dtype, kv_dtype=normalize_dtype(kv_dtype, KV_DTYPES), estimate=not ceiling, steady=steady,
        range_ratio=float(range_ratio), max_num_seqs=max_num_seqs, max_batched_tokens=max_batched_tokens,
        engine_version=release, **(pool or {}),
    )  # fmt: skip
