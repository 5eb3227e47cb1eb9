"""kvcalc as a Python library: the commands as functions that return the result models `--format json` prints.

    import kvcalc
    r = kvcalc.cache("llama-3-8b", batch=16, seq="8k")      # CacheResult
    r.total_bytes                                            # 17179869184
    kvcalc.roofline("7b", "a100", batch=[1, 64]).rows       # RooflineResult, one row per batch x seq

Numbers take what the command line takes (16, "8k", "1..64", "1,8,64") or Python ints and lists;
a list or range gives a list of results where the command would print several. Models and GPUs are
preset names, aliases, config.json paths or hub ids (or ModelSpec / GpuSpec objects). Bad input raises
a kvcalc.errors.KvcalcError with the message the CLI would print. Each function is a thin call into
the same core function its command uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Union

from kvcalc.errors import UsageError
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import ModelSpec
from kvcalc.units import FIT_MAX_ROWS, KV_DTYPES, MAX_ROWS, check_grid, normalize_dtype, parse_count, parse_range

if TYPE_CHECKING:  # each result model lives beside the core function that returns it
    from kvcalc.cost.roofline import RooflineResult
    from kvcalc.plan.fit import FitResult
    from kvcalc.plan.generate import GenerateResult
    from kvcalc.plan.serve_report import ServeResult
    from kvcalc.plan.variants import CompareResult
    from kvcalc.results import CacheResult

Counts = Union[int, str, "list[int]"]

__all__ = ["cache", "roofline", "fit", "generate", "compare"]


def _counts(value: Counts, what: str) -> list[int]:
    if isinstance(value, bool):
        raise UsageError(f"{what} must be a count, got {value!r}")
    if isinstance(value, int):
        return [parse_count(str(value), what)]
    if isinstance(value, (list, tuple, range)):
        if len(value) > MAX_ROWS:  # NOTE: before iterating: range(1, 10**9) would take minutes
            raise UsageError(
                f"{what} has {len(value):,} values, more than the {MAX_ROWS:,} kvcalc computes in one run",
                hint="use fewer values or a coarser range",
            )
        return sorted({v for item in value for v in _counts(item, what)})
    return parse_range(str(value), what)


def _count(value: int | str, what: str) -> int:
    values = _counts(value, what)
    if len(values) != 1:
        raise UsageError(f"{what} takes one value here, got {len(values)}")
    return values[0]


def _counts_nonempty(value: Counts, what: str) -> list[int]:
    values = _counts(value, what)
    if not values:  # NOTE: an empty list would silently give no results
        raise UsageError(f"{what} is empty", hint="e.g. 16, a list [1, 8, 64] or a range '1..64'")
    return values


def _model(model: str | ModelSpec, overrides: dict[str, Any]) -> ModelSpec:
    import os

    if isinstance(model, ModelSpec):
        from kvcalc.model.resolve import override

        return override(model, overrides)
    if not isinstance(model, (str, os.PathLike)):
        raise UsageError(f"model must be a preset name, hub id, path or ModelSpec, got {model!r}")
    from kvcalc.plan.inputs import resolve

    return resolve(os.fspath(model), overrides).spec


def _gpus(gpu: str | GpuSpec | list) -> list[GpuSpec]:
    from kvcalc.model.presets import get_gpu
    from kvcalc.units import parse_names

    if isinstance(gpu, GpuSpec):
        return [gpu]
    if isinstance(gpu, (list, tuple)):
        return [g for item in gpu for g in _gpus(item)]
    if not isinstance(gpu, str):
        raise UsageError(f"gpu must be a preset name, FILE.yaml or GpuSpec, got {gpu!r}")
    return [get_gpu(name) for name in parse_names(gpu, "gpu")]


def _some_gpus(gpu: str | GpuSpec | list) -> list[GpuSpec]:
    gpus = _gpus(gpu)
    if not gpus:  # an empty list would give no result and no error
        raise UsageError("gpu is empty", hint="a preset name such as 'h100', or a list ['a100', 'h100']")
    return gpus


def _one_gpu(gpu: str | GpuSpec, command: str) -> GpuSpec:
    gpus = _gpus(gpu)
    if len(gpus) != 1:
        raise UsageError(f"{command} takes one gpu, got {len(gpus)}", hint="roofline compares several")
    return gpus[0]


def _link(interconnect: str | None) -> str | None:
    return None if interconnect is None else str(interconnect)


def _reserve(reserve: str | int) -> str:
    # NOTE: a bool is an int to Python, and a float of bytes is not a whole count: both are refused here
    # rather than becoming 1 byte or a truncated figure.
    if isinstance(reserve, bool) or not isinstance(reserve, (int, str)):
        raise UsageError(f"reserve must be a size such as '2GiB' or a whole number of bytes, got {reserve!r}")
    return str(reserve)


def _deployment(spec, gpu, tp: int, pp: int, interconnect, gpu_util: float, reserve: str | int):  # noqa: ANN001, ANN202
    """The GPUs a roofline or generate call describes, checked as the CLI's --tp/--pp/--interconnect are."""
    from kvcalc.plan.deploy import deployment

    return deployment(
        spec,
        gpu,
        tp=_count(tp, "tp"),
        pp=_count(pp, "pp"),
        interconnect=_link(interconnect),
        gpu_util=gpu_util,
        reserve=_reserve(reserve),
    )


def _overrides(**given: Any) -> dict[str, Any]:
    from kvcalc.plan.inputs import what_ifs as check

    window = given.pop("window")
    # NOTE: the CLI's checks expect ints (Typer parsed them); here they may be text or a bool.
    given = {k: None if v is None or k == "dtype" else _count(v, k) for k, v in given.items()} | {
        "dtype": given["dtype"]
    }
    return check(**given, window=None if window is None else str(window))


def cache(
    model: str | ModelSpec,
    *,
    batch: Counts = 1,
    seq: Counts = 4096,
    kv_dtype: str = "bf16",
    tp: int = 1,
    gpu: str | GpuSpec | None = None,
    layers: int | None = None,
    kv_heads: int | None = None,
    head_dim: int | None = None,
    window: int | str | None = None,
    dtype: str | None = None,
) -> CacheResult | list[CacheResult]:
    """KV cache of `model` for batch x seq tokens (`kvcalc cache`); one result per (seq, batch)."""
    from kvcalc.cost.kvcache import cache_report, check_tp, with_gpu_share

    batches, seqs = _counts_nonempty(batch, "batch"), _counts_nonempty(seq, "seq")
    check_grid("cache batch x seq", len(batches), len(seqs))
    kv = normalize_dtype(kv_dtype, KV_DTYPES)
    overrides = _overrides(layers=layers, kv_heads=kv_heads, head_dim=head_dim, window=window, dtype=dtype)
    spec = _model(model, overrides)
    tp = _count(tp, "tp")
    check_tp(spec, tp)
    gpus = _some_gpus(gpu) if gpu is not None else []
    if len(gpus) > 1:
        raise UsageError("cache takes one gpu")
    from kvcalc.plan.inputs import with_context_warning

    results = [with_context_warning(cache_report(spec, b, s, kv, tp), spec) for s in seqs for b in batches]
    if gpus:
        results = [with_gpu_share(r, gpus[0]) for r in results]
    return results[0] if len(results) == 1 else results


def roofline(
    model: str | ModelSpec,
    gpu: str | GpuSpec | list,
    *,
    batch: Counts = "1..64",
    seq: Counts = 1024,
    kv_dtype: str = "bf16",
    dtype: str | None = None,
    layers: int | None = None,
    kv_heads: int | None = None,
    head_dim: int | None = None,
    window: int | str | None = None,
    tp: int = 1,
    pp: int = 1,
    interconnect: str | None = None,
    gpu_util: float = 0.9,
    reserve: str = "2GiB",
    efficiency: float | None = None,
    mbu: float | None = None,
    mfu: float | None = None,
    engine: str = "vllm",
    ceiling: bool = False,
) -> RooflineResult | list[RooflineResult]:
    """Decode roofline of `model` on `gpu` (`kvcalc roofline`): one result per GPU, a row per batch x seq;
    with tp / pp, bytes and FLOPs per GPU and the deployment's communication; with efficiency (or
    mbu / mfu) a what-if beside each ceiling; each row also carries the estimate calibrated for `engine`
    (vllm, sglang, trtllm, llamacpp) unless ceiling=True."""
    from kvcalc.cost.roofline import roofline_report
    from kvcalc.plan.deploy import utilization

    batches, seqs = _counts_nonempty(batch, "batch"), _counts_nonempty(seq, "seq")
    gpus = _some_gpus(gpu)
    check_grid("roofline batch x seq x gpu", len(batches), len(seqs), len(gpus))
    kv = normalize_dtype(kv_dtype, KV_DTYPES)
    overrides = _overrides(layers=layers, kv_heads=kv_heads, head_dim=head_dim, window=window, dtype=dtype)
    spec = _model(model, overrides)
    deps = [_deployment(spec, g, tp, pp, interconnect, gpu_util, reserve) for g in gpus]
    util = utilization(efficiency, mbu, mfu)
    from kvcalc.plan.estimated import engine_for_estimate

    est = engine_for_estimate(engine, ceiling)
    results = [
        roofline_report(spec, g, batches, seqs, overrides.get("dtype"), kv, dep=d, util=util, engine=est)
        for g, d in zip(gpus, deps)
    ]
    return results[0] if len(results) == 1 else results


def fit(
    model: str | ModelSpec,
    gpu: str | GpuSpec,
    *,
    seq: Counts = "8k",
    batch: Counts = 1,
    tp: int = 1,
    pp: int = 1,
    kv_dtype: str = "bf16",
    dtype: str | None = None,
    gpu_util: float = 0.9,
    reserve: str | int = "2GiB",
    block_size: int = 16,
    engine: str | None = None,
    engine_version: str | None = None,
    mem_fraction_static: float | None = None,
    chunked_prefill_size: int | None = None,
    page_size: int | None = None,
    max_running_requests: int | None = None,
    dp_attention: bool = False,
) -> FitResult | list[FitResult]:
    """Does `model` fit on `tp` x `gpu` at batch x seq (`kvcalc fit` without latency goals); lists or
    ranges give one result per (seq, batch), as the command's rows. engine="sglang" adds SGLang's own
    pool (result.sglang, `fit --engine sglang`), which then decides `ok`; `kv_dtype` stays kvcalc's
    (SGLang's pool takes the model dtype, its `auto`)."""
    from kvcalc.cost.kvcache import check_tp
    from kvcalc.plan.deploy import deployment, ranks
    from kvcalc.plan.fit import fit_report

    gpu_spec = _one_gpu(gpu, "fit")
    overrides = _overrides(layers=None, kv_heads=None, head_dim=None, window=None, dtype=dtype)
    spec = _model(model, overrides)
    tp, pp = ranks(_count(tp, "tp"), None, _count(pp, "pp"))
    check_tp(spec, tp)
    dep = deployment(spec, gpu_spec, tp=tp, pp=pp, interconnect=None, gpu_util=gpu_util, reserve=_reserve(reserve))
    block_size = _count(block_size, "block_size")
    seqs, batches = _counts_nonempty(seq, "seq"), _counts_nonempty(batch, "batch")
    check_grid("fit batch x seq", len(batches), len(seqs), limit=FIT_MAX_ROWS)
    kv = normalize_dtype(kv_dtype, KV_DTYPES)
    results = [
        fit_report(
            spec,
            gpu_spec,
            tp=tp,
            seq=s,
            batch=b,
            dtype=overrides.get("dtype"),
            kv_dtype=kv,
            gpu_util=dep.gpu_util,
            reserve_bytes=dep.reserve_bytes,
            block_size=block_size,
            pp=pp,
        )
        for s in seqs
        for b in batches
    ]
    from kvcalc.plan.fit import verdict
    from kvcalc.plan.sglang import check_options

    sglang = check_options(
        engine if engine is None or engine.lower() == "sglang" else _no_engine(engine),
        engine_version=engine_version,
        mem_fraction_static=mem_fraction_static,
        chunked_prefill_size=chunked_prefill_size,
        page_size=page_size,
        max_running_requests=max_running_requests,
        dp_attention=dp_attention,
    )
    for r in results if sglang else ():
        r.ok, r.verdict = verdict(r)
        if sglang:
            from kvcalc.plan import sglang as cli_sglang

            r.sglang = cli_sglang.predict(
                spec, gpu_spec, tp=tp, pp=pp, seq=r.seq, batch=r.batch, dtype=overrides.get("dtype"), kv_dtype=None,
                engine_version=engine_version, mem_fraction_static=mem_fraction_static,
                chunked_prefill_size=chunked_prefill_size, page_size=page_size,
                max_running_requests=max_running_requests, dp_attention=dp_attention, steps=None,
            )  # fmt: skip
            r.ok, r.verdict = cli_sglang.verdict(r)
    return results[0] if len(results) == 1 else results


def _no_engine(engine: str) -> None:
    raise UsageError(f"unknown engine '{engine}' for kvcalc.fit", hint="supported: sglang")


def generate(
    model: str | ModelSpec,
    gpu: str | GpuSpec,
    *,
    prompt: int | str = "1k",
    new: int | str = 256,
    batch: int | str = 1,
    kv_dtype: str = "bf16",
    dtype: str | None = None,
    efficiency: float | None = None,
    mbu: float | None = None,
    mfu: float | None = None,
    tp: int = 1,
    pp: int = 1,
    interconnect: str | None = None,
    gpu_util: float = 0.9,
    reserve: str = "2GiB",
    engine: str = "vllm",
    ceiling: bool = False,
    concurrency: int | None = None,
    rate: float | None = None,
    requests: int | None = None,
    seed: int = 0,
) -> GenerateResult | ServeResult:
    """Time to first token, per output token and in total (`kvcalc generate`): the ceilings at the top
    level and `estimate`, calibrated for `engine` (vllm, sglang, trtllm, llamacpp), unless ceiling=True.
    With efficiency (or mbu / mfu) the figures are that what-if instead, as the command's `what_if`.
    With `concurrency` (closed loop) or `rate` (Poisson arrivals, requests/s): a ServeResult, continuous
    batching simulated over `requests` requests (`generate --concurrency`)."""
    from kvcalc.model.formats import matmul_dtype
    from kvcalc.plan.deploy import utilization
    from kvcalc.plan.generate import generate_report

    what_if = utilization(efficiency, mbu, mfu)
    util = what_if or (1.0, 1.0)  # as --efficiency / --mbu / --mfu; None: the ceiling
    from kvcalc.plan.estimated import engine_for_estimate

    est = engine_for_estimate(engine, ceiling)
    gpu_spec = _one_gpu(gpu, "generate")
    overrides = _overrides(layers=None, kv_heads=None, head_dim=None, window=None, dtype=dtype)
    spec = _model(model, overrides)
    dep = _deployment(spec, gpu_spec, tp, pp, interconnect, gpu_util, reserve)
    if concurrency is not None or rate is not None:
        from kvcalc.plan.serve_report import serve_report

        if concurrency is not None and rate is not None:
            raise UsageError("give concurrency (closed loop) or rate (open loop), not both")
        d = overrides.get("dtype")
        kv = normalize_dtype(kv_dtype, KV_DTYPES)
        load = dict(concurrency=concurrency, rate=rate, requests=requests, seed=seed)
        return serve_report(
            spec,
            gpu_spec,
            dep,
            prompt=_count(prompt, "prompt"),
            new=_count(new, "new"),
            dtype=d,
            kv_dtype=kv,
            engine=engine,
            estimate=not ceiling,
            **load,
        )
    return generate_report(
        spec,
        gpu_spec,
        batch=_count(batch, "batch"),
        prompt=_count(prompt, "prompt"),
        new=_count(new, "new"),
        dtype=overrides.get("dtype"),
        kv_dtype=normalize_dtype(kv_dtype, KV_DTYPES),
        compute_dtype=gpu_spec.compute_dtype(matmul_dtype(spec, overrides.get("dtype"))),
        mbu=util[0],
        mfu=util[1],
        dep=dep,
        engine=None if what_if else est,
    )


def compare(
    *items: str,
    model: str = "70b",
    batch: Counts = 32,
    seq: Counts = 8192,
    kv_dtype: str = "bf16",
) -> CompareResult | list[CompareResult]:
    """KV cache of attention variants (mha, gqa:8, mla, swa:4096, +fp8) or models side by side (`kvcalc compare`)."""
    from kvcalc.plan.variants import apply_variant, compare_report, is_variant, split_dtype

    items = tuple(i for item in items for i in (item if isinstance(item, (list, tuple)) else [item]))
    if not items:
        raise UsageError("compare needs at least one variant or model")
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise UsageError(f"compare takes variant or model names, got {item!r}", hint="e.g. 'mha', 'gqa:8', 'mla'")
    batches, seqs = _counts_nonempty(batch, "batch"), _counts_nonempty(seq, "seq")
    check_grid("compare batch x seq x items", len(batches), len(seqs), len(items))
    default_kv = normalize_dtype(kv_dtype, KV_DTYPES)
    variants = [is_variant(item) for item in items]
    base = _model(model, {}) if any(variants) else None
    rows = []
    for item, variant in zip(items, variants):
        text, item_kv = split_dtype(item)
        spec = apply_variant(base, item) if variant else _model(text, {})
        rows.append((item, spec, item_kv or default_kv))
    results = [compare_report(rows, b, s, base.name if base else None) for s in seqs for b in batches]
    return results[0] if len(results) == 1 else results
