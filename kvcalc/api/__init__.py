"""kvcalc as a Python library: the commands as functions that return the result models `--format json` prints.

    import kvcalc
    r = kvcalc.cache("llama-3-8b", batch=16, seq="8k")      # CacheResult
    r.total_bytes                                            # 17179869184
    kvcalc.roofline("7b", "a100", batch=[1, 64]).rows       # RooflineResult, one row per batch x seq

Numbers take what the command line takes (16, "8k", "1..64", "1,8,64") or Python ints and lists; a list or
range gives a list of results where the command would print several. Models and GPUs are preset names, aliases,
config.json paths or hub ids (or ModelSpec / GpuSpec objects). Bad input raises a kvcalc.errors.KvcalcError with
the message the CLI would print. Each function is a thin call into the same core function its command uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.api.args import (
    Counts,
    as_block_size,
    as_count,
    as_counts_nonempty,
    as_deployment,
    as_link,
    as_model,
    as_one_gpu,
    as_overrides,
    as_reserve,
    as_some_gpus,
    check_goals,
    check_static,
)
from kvcalc.errors import UsageError
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import ModelSpec
from kvcalc.plan.kv_auto import auto_kv_dtype
from kvcalc.units import (
    DEFAULT_GPU_UTIL,
    DEFAULT_NEW,
    DEFAULT_SEQ,
    FIT_MAX_ROWS,
    KV_DTYPES,
    check_grid,
    normalize_dtype,
    parse_count,
)

if TYPE_CHECKING:  # each result model lives beside the core function that returns it
    from kvcalc.cost.roofline import RooflineResult
    from kvcalc.plan.fit import FitResult
    from kvcalc.plan.generate import GenerateResult
    from kvcalc.plan.planner import PlanResult
    from kvcalc.plan.serve_report import ServeResult
    from kvcalc.plan.variants import CompareResult
    from kvcalc.results import CacheResult

__all__ = ["cache", "roofline", "fit", "generate", "compare", "plan"]


def cache(
    model: str | ModelSpec,
    *,
    batch: Counts = 1,
    seq: Counts = DEFAULT_SEQ,
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

    batches, seqs = as_counts_nonempty(batch, "batch"), as_counts_nonempty(seq, "seq")
    check_grid("cache batch x seq", len(batches), len(seqs))
    kv = normalize_dtype(kv_dtype, KV_DTYPES)
    overrides = as_overrides(layers=layers, kv_heads=kv_heads, head_dim=head_dim, window=window, dtype=dtype)
    spec = as_model(model, overrides)
    tp = as_count(tp, "tp")
    check_tp(spec, tp)
    gpus = as_some_gpus(gpu) if gpu is not None else []
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
    seq: Counts = DEFAULT_SEQ,
    kv_dtype: str | None = None,
    dtype: str | None = None,
    layers: int | None = None,
    kv_heads: int | None = None,
    head_dim: int | None = None,
    window: int | str | None = None,
    tp: int = 1,
    pp: int = 1,
    interconnect: str | None = None,
    gpu_util: float = DEFAULT_GPU_UTIL,
    reserve: str = "2GiB",
    ep: int | None = None,
    dp_attention: bool = False,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    efficiency: float | None = None,
    mbu: float | None = None,
    mfu: float | None = None,
    engine: str | None = None,
    ceiling: bool = False,
    engine_version: str | None = None,
) -> RooflineResult | list[RooflineResult]:
    """Decode roofline of `model` on `gpu` (`kvcalc roofline`): one result per GPU, a row per batch x seq; with tp /
    pp, bytes and FLOPs per GPU and the deployment's communication; with efficiency (or mbu / mfu) a what-if beside
    each ceiling; rows carry the `engine`'s calibrated estimate unless ceiling. kv_dtype None: the engine's auto;
    engine_version: SGLang's release for its pool."""
    from kvcalc.cost.roofline import roofline_report
    from kvcalc.plan.calibration import calibration_for
    from kvcalc.plan.deploy import utilization
    from kvcalc.plan.engine_memory import engine_rows
    from kvcalc.plan.serve_launch import sglang_release

    batches, seqs = as_counts_nonempty(batch, "batch"), as_counts_nonempty(seq, "seq")
    from kvcalc.engines.kernels import gpu_as_run_by
    from kvcalc.engines.names import engine_name

    named, engine = engine is not None, engine_name(engine or "vllm")[0]  # as --engine; named: its pool is asked
    release = sglang_release(engine, engine_version)
    gpus = [gpu_as_run_by(g, engine) for g in as_some_gpus(gpu)]
    check_grid("roofline batch x seq x gpu", len(batches), len(seqs), len(gpus))
    overrides = as_overrides(layers=layers, kv_heads=kv_heads, head_dim=head_dim, window=window, dtype=dtype)
    spec = as_model(model, overrides)
    kv_given = normalize_dtype(kv_dtype, KV_DTYPES) if kv_dtype is not None else None
    layout = dict(ep=ep, dp_attention=dp_attention, nodes=nodes, gpus_per_node=gpus_per_node)
    deps = [as_deployment(spec, g, tp, pp, interconnect, gpu_util, reserve, **layout) for g in gpus]
    util, est = utilization(efficiency, mbu, mfu), None if ceiling else engine  # step_time checks the name
    results = [
        roofline_report(
            spec,
            g,
            batches,
            seqs,
            overrides.get("dtype"),
            kv_given or auto_kv_dtype(spec, g, engine, overrides.get("dtype")),
            dep=d,
            util=util,
            engine=est,
            calibration=calibration_for(g, est),
        )  # fmt: skip
        for g, d in zip(gpus, deps)
    ]
    for r, g, d in zip(results, gpus, deps):
        engine_rows(r, spec, g, d, engine, overrides.get("dtype"), pool=named, release=release)
    return results[0] if len(results) == 1 else results


def fit(
    model: str | ModelSpec,
    gpu: str | GpuSpec,
    *,
    seq: Counts | None = None,
    batch: Counts = 1,
    tp: int = 1,
    pp: int = 1,
    kv_dtype: str | None = None,
    dtype: str | None = None,
    gpu_util: float = DEFAULT_GPU_UTIL,
    reserve: str | int | None = None,
    block_size: int = 16,
    engine: str | None = None,
    tpot_ms: float | None = None,
    ttft_ms: float | None = None,
    prompt: int | str | None = None,
    efficiency: float | None = None,
    mbu: float | None = None,
    mfu: float | None = None,
    kv_memory: str | None = None,
    max_num_seqs: int | None = None,
    max_batched_tokens: int | None = None,
    ep: int | None = None,
    dp_attention: bool = False,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    interconnect: str | None = None,
    engine_version: str | None = None,
    mem_fraction_static: float | None = None,
    chunked_prefill_size: int | None = None,
    page_size: int | None = None,
    max_running_requests: int | None = None,
    max_mamba_cache_size: int | None = None,
    mamba_ssm_dtype: str | None = None,
    ceiling: bool = False,
) -> FitResult | list[FitResult]:
    """Does `model` fit on `tp` x `gpu` at batch x seq (`kvcalc fit`, every option alike): engine="vllm" for
    vLLM 0.19's accounting and start-up check (seq then defaults to vLLM's max_model_len for the config),
    "sglang" / "trtllm" for SGLang's (result.sglang) / TensorRT-LLM's own pool, which then decides `ok`, "none"
    for the bare arithmetic with a flat reserve. tpot_ms / ttft_ms: latency goals decided on the engine's
    calibrated estimate (ceiling=True: the bound alone; efficiency / mbu / mfu: a what-if). Lists or ranges
    give one result per (seq, batch), as the command's rows."""
    from kvcalc.plan import sglang as plan_sglang
    from kvcalc.plan import vllm_fit
    from kvcalc.plan.deploy import deployment, ranks, utilization
    from kvcalc.plan.fitrun import fit_rows, goal_engine

    check_goals(tpot_ms, ttft_ms, prompt=prompt, ceiling=ceiling, efficiency=efficiency, mbu=mbu, mfu=mfu)
    engine_none = engine is not None and str(engine).lower() == "none"
    engine = None if engine_none else engine
    gpu_spec = as_one_gpu(gpu, "fit")
    overrides = as_overrides(layers=None, kv_heads=None, head_dim=None, window=None, dtype=dtype)
    spec = as_model(model, overrides)
    tp, pp = ranks(as_count(tp, "tp"), None, as_count(pp, "pp"))
    block_size = as_block_size(block_size, engine)
    batches = as_counts_nonempty(batch, "batch")
    kv = normalize_dtype(kv_dtype, KV_DTYPES) if kv_dtype is not None else None
    util = utilization(efficiency, mbu, mfu)
    sglang_options = dict(  # SGLang's own options, checked here and taken by its pool below
        engine_version=engine_version, mem_fraction_static=mem_fraction_static,
        chunked_prefill_size=chunked_prefill_size, page_size=page_size,
        max_running_requests=max_running_requests, max_mamba_cache_size=max_mamba_cache_size,
        mamba_ssm_dtype=mamba_ssm_dtype, dp_attention=dp_attention,
    )  # fmt: skip
    sglang = plan_sglang.check_options(engine, **sglang_options)
    kv_given, kv = kv, kv or auto_kv_dtype(spec, gpu_spec, engine, overrides.get("dtype"))
    trtllm = engine is not None and str(engine).lower() == "trtllm"
    is_vllm, kv_logged, max_num_seqs, max_batched_tokens = vllm_fit.check_options(
        None if sglang or trtllm else engine,
        kv_memory,
        block_size,
        None if reserve is None else as_reserve(reserve),
        pp,
        max_num_seqs,
        max_batched_tokens,
        gpu_spec,
    )
    if is_vllm:
        vllm_fit.refuse_architecture(spec)
        vllm_fit.check_layout(tp, ep, dp_attention)
    seqs = as_counts_nonempty(seq, "seq") if seq is not None else vllm_fit.default_seqs(spec, is_vllm)
    check_grid("fit batch x seq", len(batches), len(seqs), limit=FIT_MAX_ROWS)
    dep = deployment(
        spec,
        gpu_spec,
        tp=tp,
        pp=pp,
        interconnect=as_link(interconnect),
        gpu_util=gpu_util,
        reserve=as_reserve(reserve) if reserve is not None else "2GiB",
        ep=ep,
        dp_attention=dp_attention,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
    )
    results = fit_rows(
        spec,
        gpu_spec,
        dep,
        seqs=seqs,
        batches=batches,
        dtype=overrides.get("dtype"),
        kv_dtype=kv,
        block_size=block_size,
        is_vllm=is_vllm,
        kv_logged=kv_logged,
        max_num_seqs=max_num_seqs,
        max_batched_tokens=max_batched_tokens,
        reserve_given=reserve is not None or engine_none,
        tpot_ms=tpot_ms,
        ttft_ms=ttft_ms,
        prompt=parse_count(prompt, "prompt") if prompt is not None else None,
        util=util,
        pool="sglang" if sglang else "trtllm" if trtllm else None,
        sglang={**sglang_options, "kv_dtype": kv_given, "context_given": seq is not None},
        estimate_engine=goal_engine(engine, ceiling),
    )
    return results[0] if len(results) == 1 else results


def generate(
    model: str | ModelSpec,
    gpu: str | GpuSpec,
    *,
    prompt: int | str = DEFAULT_SEQ - DEFAULT_NEW,
    new: int | str = DEFAULT_NEW,
    batch: int | str = 1,
    kv_dtype: str | None = None,
    dtype: str | None = None,
    efficiency: float | None = None,
    mbu: float | None = None,
    mfu: float | None = None,
    tp: int = 1,
    pp: int = 1,
    interconnect: str | None = None,
    gpu_util: float = DEFAULT_GPU_UTIL,
    reserve: str | int | None = None,
    ep: int | None = None,
    dp_attention: bool = False,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    engine: str | None = None,
    ceiling: bool = False,
    concurrency: int | None = None,
    rate: float | None = None,
    requests: int | None = None,
    seed: int = 0,
    steady_state: bool = False,
    range_ratio: float = 1.0,
    max_num_seqs: int | None = None,
    max_batched_tokens: int | None = None,
    mem_fraction_static: float | None = None,
    engine_version: str | None = None,
    max_mamba_cache_size: int | None = None,
    mamba_ssm_dtype: str | None = None,
) -> GenerateResult | ServeResult:
    """Time to first token, per output token and in total (`kvcalc generate`): ceilings, and `estimate` for `engine`
    unless ceiling; with efficiency (or mbu / mfu) that what-if instead. With `concurrency` (closed loop) or `rate`
    (Poisson arrivals), requests are served as the engine schedules them: a ServeResult, a benchmark's whole run unless
    `steady_state`; `range_ratio` < 1 draws lengths from [ratio x L, L]; `max_num_seqs` / `max_batched_tokens` (SGLang's
    `mem_fraction_static`): launch flags; `engine_version`: SGLang's release; `reserve` (2 GiB): TensorRT-LLM's alone
    when served. kv_dtype None: auto."""
    from kvcalc.model.formats import matmul_dtype
    from kvcalc.plan.deploy import utilization
    from kvcalc.plan.generate import generate_report

    util = (what_if := utilization(efficiency, mbu, mfu)) or (1.0, 1.0)  # as --efficiency / --mbu / --mfu
    from kvcalc.engines.kernels import gpu_as_run_by
    from kvcalc.engines.names import engine_name
    from kvcalc.plan.serve_launch import check_reserve, sglang_release

    named, engine = engine is not None, engine_name(engine or "vllm")[0]  # as --engine; named: its pool is asked
    release = sglang_release(engine, engine_version)
    gpu_spec = gpu_as_run_by(as_one_gpu(gpu, "generate"), engine)
    overrides = as_overrides(layers=None, kv_heads=None, head_dim=None, window=None, dtype=dtype)
    spec = as_model(model, overrides)
    layout = dict(ep=ep, dp_attention=dp_attention, nodes=nodes, gpus_per_node=gpus_per_node)
    reserve_given, reserve = reserve is not None, "2GiB" if reserve is None else reserve  # served: TRT-LLM's alone
    dep = as_deployment(spec, gpu_spec, tp, pp, interconnect, gpu_util, reserve, **layout)
    kv_dtype = kv_dtype or auto_kv_dtype(spec, gpu_spec, engine, overrides.get("dtype"))
    # SGLang's pool flags, as launched: a served run reads them, a static batch refuses them
    pool = dict(mem_fraction_static=mem_fraction_static, max_mamba_cache_size=max_mamba_cache_size,
                mamba_ssm_dtype=mamba_ssm_dtype)  # fmt: skip
    if concurrency is not None or rate is not None:
        from kvcalc.api.serving import serve

        check_reserve(engine, reserve_given)
        return serve(spec, gpu_spec, dep, overrides.get("dtype"), kv_dtype, engine, ceiling, what_if,
                      batch, (prompt, new, concurrency, rate, requests, seed, max_num_seqs, max_batched_tokens, release),
                      steady_state, range_ratio, pool)  # fmt: skip
    check_static(max_num_seqs=max_num_seqs, max_batched_tokens=max_batched_tokens, **pool, requests=requests,
                 range_ratio=range_ratio, steady_state=steady_state)  # fmt: skip
    return generate_report(
        spec, gpu_spec, batch=as_count(batch, "batch"), prompt=as_count(prompt, "prompt"), new=as_count(new, "new"),
        dtype=overrides.get("dtype"), kv_dtype=normalize_dtype(kv_dtype, KV_DTYPES),
        compute_dtype=gpu_spec.compute_dtype(matmul_dtype(spec, overrides.get("dtype"))), mbu=util[0], mfu=util[1],
        dep=dep, engine=None if what_if or ceiling else engine,  # static_estimate checks the name
        deployed_on=engine, ask_pool=named, engine_version=release,
    )  # fmt: skip


def compare(
    *items: str,
    model: str = "70b",
    batch: Counts = 32,
    seq: Counts = DEFAULT_SEQ,
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
    batches, seqs = as_counts_nonempty(batch, "batch"), as_counts_nonempty(seq, "seq")
    check_grid("compare batch x seq x items", len(batches), len(seqs), len(items))
    default_kv = normalize_dtype(kv_dtype, KV_DTYPES)
    variants = [is_variant(item) for item in items]
    base = as_model(model, {}) if any(variants) else None
    rows = []
    for item, variant in zip(items, variants):
        text, item_kv = split_dtype(item)
        spec = apply_variant(base, item) if variant else as_model(text, {})
        rows.append((item, spec, item_kv or default_kv))
    results = [compare_report(rows, b, s, base.name if base else None) for s in seqs for b in batches]
    return results[0] if len(results) == 1 else results


def plan(
    model: str | ModelSpec,
    seq: int | str,
    users: int,
    *,
    tpot_ms: float | None = None,
    ttft_ms: float | None = None,
    prompt: int | str | None = None,
    new: int | str | None = None,
    gpu: str | GpuSpec | list[str | GpuSpec] | None = None,
    max_gpus: int = 8,
    dtype: str | list[str] | None = None,
    kv_dtype: str | list[str] | None = None,
    engine: str = "vllm",
    price: dict[str, float] | str | list[str] | None = None,
    gpu_util: float = DEFAULT_GPU_UTIL,
    engine_version: str | None = None,
) -> PlanResult:
    """The cheapest deployment serving `users` at `seq` tokens within tpot_ms / ttft_ms (`kvcalc plan`):
    options ranked by $ per million output tokens, the cheapest meeting the goals first, and the rejected
    families. gpu: names ('h100,h200' or a list) or GpuSpecs (default plan/planner.DEFAULT_GPUS); price:
    {"h200": 3.5}, "h200=3.5" or a list of such; dtype / kv_dtype: the dtypes to try; engine_version: SGLang's."""
    from kvcalc.plan.plan_inputs import plan_from_inputs

    return plan_from_inputs(
        model, seq, users, tpot_ms=tpot_ms, ttft_ms=ttft_ms, prompt=prompt, new=new, gpu=gpu, max_gpus=max_gpus,
        dtype=dtype, kv_dtype=kv_dtype, engine=engine, price=price, gpu_util=gpu_util, engine_version=engine_version,
    )  # fmt: skip
