"""`kvcalc generate` (registered on cli.app): a static batch end to end, ceiling and calibrated estimate."""

from typing import Annotated, Optional

import typer

from kvcalc.cli.common import (
    EXIT_DOES_NOT_FIT,
    DtypeOpt,
    EncoderSeqOpt,
    EngineKvDtypeOpt,
    ExplainOpt,
    Fmt,
    FmtOpt,
    HeadDimOpt,
    ImagesOpt,
    KvHeadsOpt,
    LayersOpt,
    ModelArg,
    PlotOpt,
    PlotSizeOpt,
    WindowOpt,
    _complete_gpus,
    _draw,
    _emit,
    _gpu,
    _plot_ready,
    app,
    flags,
)
from kvcalc.cli.deploy import (
    EffOpt,
    EpOpt,
    GpusOpt,
    GpusPerNodeOpt,
    GpuUtilOpt,
    InterconnectOpt,
    MbuOpt,
    MfuOpt,
    NodesOpt,
    PpOpt,
    TpOpt,
)
from kvcalc.cli.estimating import CeilingOpt, EngineOpt
from kvcalc.cli.serve import (
    ConcurrencyOpt,
    MaxSeqsOpt,
    MaxTokensOpt,
    MemFractionServeOpt,
    RangeRatioOpt,
    RateOpt,
    RequestsOpt,
    SeedOpt,
    SteadyOpt,
)
from kvcalc.cli.sglang import DpAttentionOpt, MaxMambaOpt, ServedVersionOpt, SsmDtypeOpt
from kvcalc.errors import UsageError
from kvcalc.plan.deploy import deployment, ranks, utilization
from kvcalc.plan.inputs import cross_overrides, resolve, served_options, what_ifs
from kvcalc.units import KV_DTYPES, normalize_dtype, parse_count

GpuOpt = Annotated[
    str, typer.Option("--gpu", "-g", help="GPU preset (kvcalc gpus lists them).", autocompletion=_complete_gpus)
]


@app.command()
def generate(
    model: ModelArg,
    gpu: GpuOpt,
    prompt: Annotated[
        str,
        typer.Option(
            "--prompt",
            "-p",
            help="Prompt tokens per sequence (default 7,936: with 256 new, the 8,192-token default context).",
        ),
    ] = "7936",
    new: Annotated[str, typer.Option("--new", "-n", help="Tokens to generate per sequence (default 256).")] = "256",
    batch: Annotated[str, typer.Option("--batch", "-b", help="Sequences generated together.")] = "1",
    kv_dtype: EngineKvDtypeOpt = None,
    tp: TpOpt = None,
    gpus: GpusOpt = None,
    pp: PpOpt = None,
    interconnect: InterconnectOpt = None,
    ep: EpOpt = None,
    dp_attention: DpAttentionOpt = False,
    nodes: NodesOpt = None,
    gpus_per_node: GpusPerNodeOpt = None,
    gpu_util: GpuUtilOpt = None,
    reserve: Annotated[
        Optional[str],
        typer.Option(
            "--reserve",
            help="Per-GPU memory kept for activations, CUDA graphs and buffers (default 2GiB); in a served run "
            "TensorRT-LLM's profiling peak: vLLM and SGLang size their pools by their own terms.",
        ),
    ] = None,
    efficiency: EffOpt = None,
    mbu: MbuOpt = None,
    mfu: MfuOpt = None,
    engine: EngineOpt = None,
    ceiling: CeilingOpt = False,
    fmt: FmtOpt = Fmt.table,
    explain: ExplainOpt = False,
    plot: PlotOpt = None,
    plot_size: PlotSizeOpt = None,
    layers: LayersOpt = None,
    kv_heads: KvHeadsOpt = None,
    head_dim: HeadDimOpt = None,
    window: WindowOpt = None,
    dtype: DtypeOpt = None,
    images: ImagesOpt = None,
    encoder_seq: EncoderSeqOpt = None,
    concurrency: ConcurrencyOpt = None,
    rate: RateOpt = None,
    requests: RequestsOpt = None,
    seed: SeedOpt = 0,
    steady_state: SteadyOpt = False,
    range_ratio: RangeRatioOpt = 1.0,
    max_num_seqs: MaxSeqsOpt = None,
    max_batched_tokens: MaxTokensOpt = None,
    mem_fraction_static: MemFractionServeOpt = None,
    max_mamba_cache_size: MaxMambaOpt = None,
    mamba_ssm_dtype: SsmDtypeOpt = None,
    engine_version: ServedVersionOpt = None,
) -> None:
    """End to end: time to first token, time per output token as the context grows, total time and tokens/s:
    the ceiling (a bound) and the estimate calibrated on public runs of --engine, with its 80% interval
    (--ceiling: the bound alone; --efficiency/--mbu/--mfu: a what-if beside them). --explain adds the
    arithmetic and the lesson: what the KV cache saves in FLOPs and in copies against growing it by concatenation.

    With --tp/--pp every step is per GPU plus its all-reduces and pipeline sends; `fits` says whether
    weights + the KV of prompt + new tokens + --reserve fit each GPU's capacity x --gpu-util, and, --engine
    given (vllm, sglang, trtllm), whether it would start on the layout and hold the batch at once. A batch that
    does not fit is still printed, and the exit status is 3, as `fit`'s for a setup that does not fit.

    With --concurrency C (closed loop) or --rate R (Poisson arrivals), requests are served by continuous
    batching as --engine schedules them (vllm: prompt chunks mixed with decodes; sglang: a step either
    prefills, pausing the decodes, or decodes; trtllm: whole prompts beside the decodes, admitted only if
    prompt + new fit, no preemption): TTFT mean/p50/p99 with queueing, TPOT, ITL, tokens/s per user and in
    all, requests/s; the ceiling beside the estimate and its 80% interval. --concurrency 1..256 --plot
    draws tokens/s per user against tokens/s in all."""
    from kvcalc.plan.generate import generate_report
    from kvcalc.present.serving import generate_sheet

    named, engine = engine is not None, engine or "vllm"  # named: its pool decides whether a static batch fits
    from kvcalc.plan.serve_launch import gpu_util_for, sglang_release

    release = sglang_release(engine, engine_version)  # SGLang's alone, checked before anything is read
    n_tp, n_pp = ranks(tp, gpus, pp)
    _plot_ready(plot, plot_size)
    overrides = {**what_ifs(layers, kv_heads, head_dim, window, dtype), **cross_overrides(images, encoder_seq)}
    util = utilization(efficiency, mbu, mfu)
    spec = resolve(model, overrides).spec
    from kvcalc.engines.kernels import gpu_as_run_by
    from kvcalc.plan.kv_auto import auto_kv_dtype

    gpu_util = gpu_util_for(engine, gpu_util)
    gpu_spec = gpu_as_run_by(_gpu(gpu), engine)
    given = normalize_dtype(kv_dtype, KV_DTYPES) if kv_dtype is not None else None
    kv = given or auto_kv_dtype(spec, gpu_spec, engine, overrides.get("dtype"))
    args = dict(
        batch=parse_count(batch, "--batch"),
        prompt=parse_count(prompt, "--prompt"),
        new=parse_count(new, "--new"),
        dtype=overrides.get("dtype"),
        kv_dtype=kv,
    )
    dep = deployment(
        spec,
        gpu_spec,
        tp=n_tp,
        pp=n_pp,
        interconnect=interconnect,
        gpu_util=gpu_util,
        reserve=reserve if reserve is not None else "2GiB",
        ep=ep,
        dp_attention=dp_attention,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
    )
    if concurrency is not None or rate is not None:
        from kvcalc.cli.serve import serve_generate

        return serve_generate(
            spec, gpu_spec, dep, concurrency=concurrency, rate=rate, requests=requests, seed=seed, range_ratio=range_ratio,
            prompt=args["prompt"], new=args["new"], batch_given=args["batch"] != 1, util=util, engine=engine,
            ceiling=ceiling, dtype=args["dtype"], kv_dtype=kv, fmt=fmt, plot=plot, plot_size=plot_size,
            steady=steady_state, max_num_seqs=max_num_seqs, max_batched_tokens=max_batched_tokens,
            mem_fraction_static=mem_fraction_static, reserve_given=reserve is not None, engine_version=release,
            max_mamba_cache_size=max_mamba_cache_size, mamba_ssm_dtype=mamba_ssm_dtype,
        )  # fmt: skip
    launch, served = served_options(
        max_num_seqs=max_num_seqs, max_batched_tokens=max_batched_tokens, mem_fraction_static=mem_fraction_static,
        max_mamba_cache_size=max_mamba_cache_size, mamba_ssm_dtype=mamba_ssm_dtype, requests=requests, range_ratio=range_ratio, steady_state=steady_state,
    )  # fmt: skip
    if launch:
        raise UsageError(
            f"{flags(launch)} {'is' if len(launch) == 1 else 'are'} a serving engine's launch "
            f"{'flag' if len(launch) == 1 else 'flags'}",
            hint="give --concurrency or --rate; a static --batch runs its sequences together",
        )
    if served:
        raise UsageError(
            f"{flags(served)} {'describes' if len(served) == 1 else 'describe'} a served run's requests",
            hint="give --concurrency or --rate; a static --batch is one batch of alike sequences",
        )
    from kvcalc.model.formats import matmul_dtype

    compute = gpu_spec.compute_dtype(matmul_dtype(spec, overrides.get("dtype")))
    steps: list[str] | None = [] if explain else None
    from kvcalc.cli.estimating import engine_for_estimate

    est_engine = engine_for_estimate(engine, ceiling)
    results = [
        generate_report(
            spec,
            gpu_spec,
            **args,
            compute_dtype=compute,
            steps=steps,
            dep=dep,
            engine=est_engine,
            deployed_on=engine,
            ask_pool=named,
            engine_version=release,
        )
    ]
    if util:
        results.append(
            generate_report(
                spec,
                gpu_spec,
                **args,
                compute_dtype=compute,
                mbu=util[0],
                mfu=util[1],
                steps=steps,
                dep=dep,
                deployed_on=engine,
                ask_pool=named,
                engine_version=release,
            )
        )
    payload = results[0].model_dump(mode="json")
    if util:
        payload["what_if"] = results[1].model_dump(mode="json")  # --efficiency/--mbu/--mfu
    csv_rows = [r.model_dump() for r in results]  # to_csv: the estimate's figures as columns, the warnings one cell
    _emit(fmt, payload, [generate_sheet(results)], csv_rows, steps)

    def chart():  # noqa: ANN202
        from kvcalc.cost.roofline import decode_row
        from kvcalc.cost.step import stages
        from kvcalc.present.chart_serving import generate_chart, sample

        first = results[0]
        staged = stages(spec, dep, overrides.get("dtype"))
        contexts = sample(first.prompt + 1, max(first.prompt + first.new - 1, first.prompt + 1))
        lines = []
        for r in results:
            u = None if r.basis == "ceiling" else (r.mbu, r.mfu)
            rows = [
                decode_row(spec, gpu_spec, first.batch, c, args["dtype"], kv, compute, dep=dep, staged=staged, util=u)
                for c in contexts
            ]
            lines.append((r.basis, contexts, [row.estimate_step_seconds or row.step_seconds for row in rows]))
        where = f"{dep.gpus} x {gpu_spec.name}" if dep.gpus > 1 else gpu_spec.name
        return generate_chart(f"Decode steps: {spec.name} on {where}, batch {first.batch:,}", lines)

    _draw(plot, chart, plot_size)
    if not results[0].fits:  # printed, but not a run that can happen: exit as `fit` does for such a setup
        raise typer.Exit(EXIT_DOES_NOT_FIT)
