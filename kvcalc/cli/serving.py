"""The serving planner's commands: `kvcalc fit` and `kvcalc generate` (registered on cli.app)."""

from typing import Annotated, Optional

import typer

from kvcalc.cli.common import (
    DtypeOpt,
    EncoderSeqOpt,
    ExplainOpt,
    Fmt,
    FmtOpt,
    HeadDimOpt,
    ImagesOpt,
    KvDtypeOpt,
    KvHeadsOpt,
    LayersOpt,
    ModelArg,
    PlotOpt,
    PlotSizeOpt,
    WindowOpt,
    _check_planner,
    _complete_gpus,
    _complete_kv_dtypes,
    _draw,
    _dump,
    _emit,
    _gpu,
    _plot_ready,
    app,
)
from kvcalc.cli.deploy import EffOpt, GpusOpt, GpuUtilOpt, InterconnectOpt, MbuOpt, MfuOpt, PpOpt, ReserveOpt, TpOpt
from kvcalc.cli.estimating import CeilingOpt, EngineOpt
from kvcalc.cli.serve import ConcurrencyOpt, RateOpt, RequestsOpt, SeedOpt
from kvcalc.cli.sglang import (
    ChunkedPrefillOpt,
    DpAttentionOpt,
    EngineVersionOpt,
    MaxRunningOpt,
    MemFractionOpt,
    PageSizeOpt,
)
from kvcalc.errors import UsageError
from kvcalc.plan.deploy import deployment, ranks, utilization
from kvcalc.plan.inputs import cross_overrides, resolve, what_ifs
from kvcalc.units import FIT_MAX_ROWS, KV_DTYPES, check_grid, normalize_dtype, parse_count, parse_range

GpuOpt = Annotated[
    str, typer.Option("--gpu", "-g", help="GPU preset (kvcalc gpus lists them).", autocompletion=_complete_gpus)
]
# Exit status of `kvcalc fit`, documented in its --help and the README.
EXIT_FITS = 0  # every combination fits and meets the latency goals given
EXIT_DOES_NOT_FIT = 3  # some combination does not fit, or misses a goal (the table is still printed)


@app.command()
def fit(
    model: ModelArg,
    gpu: GpuOpt,
    gpus: GpusOpt = None,
    tp: TpOpt = None,
    pp: PpOpt = None,
    interconnect: InterconnectOpt = None,
    seq: Annotated[
        str, typer.Option("--seq", "-s", help="Tokens per request (prompt + output): 8k, or a list/range.")
    ] = "8k",
    batch: Annotated[
        str, typer.Option("--batch", "-b", help="Concurrent sequences to check: 16, a list 1,8,64 or a range.")
    ] = "1",
    kv_dtype: Annotated[
        Optional[str],
        typer.Option(
            "--kv-dtype",
            help=f"Cache element type: {', '.join(KV_DTYPES)} (default bf16; with --engine vllm, vLLM's auto: the model dtype).",
            autocompletion=_complete_kv_dtypes,
        ),
    ] = None,
    gpu_util: GpuUtilOpt = 0.9,
    reserve: Annotated[
        Optional[str],
        typer.Option("--reserve", help="Per-GPU memory kept for activations, CUDA graphs and buffers (default 2GiB)."),
    ] = None,
    block_size: Annotated[
        int,
        typer.Option("--block-size", help="Paged-attention block in tokens; each sequence rounds up to whole blocks."),
    ] = 16,
    engine: Annotated[
        Optional[str], typer.Option("--engine", help="Also print an engine's own start-up figures: vllm, sglang.")
    ] = None,
    engine_version: EngineVersionOpt = None,
    mem_fraction_static: MemFractionOpt = None,
    chunked_prefill_size: ChunkedPrefillOpt = None,
    page_size: PageSizeOpt = None,
    max_running_requests: MaxRunningOpt = None,
    dp_attention: DpAttentionOpt = False,
    kv_memory: Annotated[
        Optional[str],
        typer.Option("--kv-memory", help="Available KV memory per GPU as the engine logged it, e.g. 52.79GiB."),
    ] = None,
    max_batched_tokens: Annotated[
        Optional[int],
        typer.Option(
            "--max-batched-tokens",
            help="vLLM max_num_batched_tokens: profiling run, windows (default: vLLM's for the GPU, 8192 or 2048).",
        ),
    ] = None,
    max_num_seqs: Annotated[
        Optional[int],
        typer.Option(
            "--max-num-seqs", help="vLLM max_num_seqs, sampler warm-up rows (default: vLLM's for the GPU, 1024 or 256)."
        ),
    ] = None,
    tpot_ms: Annotated[
        Optional[float],
        typer.Option("--tpot-ms", help="Find the largest batch whose time per output token meets this."),
    ] = None,
    ttft_ms: Annotated[
        Optional[float], typer.Option("--ttft-ms", help="Find the largest batch whose time to first token meets this.")
    ] = None,
    prompt: Annotated[
        Optional[str],
        typer.Option(
            "--prompt",
            help="Prompt tokens for --ttft-ms (default: --seq); the concurrency search's requests are --prompt + "
            "the rest of --seq (default: half and half).",
        ),
    ] = None,
    efficiency: EffOpt = None,
    mbu: MbuOpt = None,
    mfu: MfuOpt = None,
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
) -> None:
    """Does MODEL fit on GPUs at batch x seq? Largest batch and context, KV capacity, concurrency, latency goals.

    Per GPU: its weights (1/tp of the matrices; its pipeline stage's layers with --pp) + KV cache of
    one rank (paged) + SSM state + --reserve must stay within capacity x --gpu-util. --reserve
    (default 2 GiB) stands for what vLLM calls non-KV memory beyond the weights: the activation peak
    of a max_num_batched_tokens forward, CUDA graphs and communication buffers (2.1-2.5 GiB in vLLM
    0.19 logs of 7-16B models on one H100; ~4 GiB at tp 4). --batch and --seq take lists and ranges:
    one row per combination.

    Always prints the table and a verdict. Exit status: 0 when every combination fits (and meets
    --tpot-ms / --ttft-ms), 3 when one does not fit or misses a goal, 2 for a usage error.
    """
    from kvcalc.cli import vllm as cli_vllm
    from kvcalc.plan import sglang as cli_sglang
    from kvcalc.plan.fit import fit_report, verdict
    from kvcalc.present.serving import fit_grid_sheet, fit_sheet

    _check_planner(tp=tp, gpus=gpus, tpot_ms=tpot_ms, ttft_ms=ttft_ms, max_batched_tokens=max_batched_tokens)
    _plot_ready(plot, plot_size)
    n_tp, n_pp = ranks(tp, gpus, pp)
    seqs, batches = parse_range(seq, "--seq"), parse_range(batch, "--batch")
    check_grid("fit --batch x --seq", len(batches), len(seqs), limit=FIT_MAX_ROWS)
    if block_size < 1:
        raise UsageError(f"--block-size must be at least 1, got {block_size}")
    kv = normalize_dtype(kv_dtype, KV_DTYPES) if kv_dtype is not None else None
    util = utilization(efficiency, mbu, mfu)
    overrides = {**what_ifs(layers, kv_heads, head_dim, window, dtype), **cross_overrides(images, encoder_seq)}
    spec = resolve(model, overrides).spec
    gpu_spec = _gpu(gpu)
    is_sglang = cli_sglang.check_options(
        engine,
        engine_version=engine_version,
        mem_fraction_static=mem_fraction_static,
        chunked_prefill_size=chunked_prefill_size,
        page_size=page_size,
        max_running_requests=max_running_requests,
        dp_attention=dp_attention,
    )
    sglang_kv = kv  # None: SGLang's auto, the model dtype
    if kv is None:
        kv = cli_vllm.auto_kv_dtype(spec, gpu_spec, engine, overrides.get("dtype"))
    is_vllm, kv_logged, max_num_seqs, max_batched_tokens = cli_vllm.check_options(
        None if is_sglang else engine, kv_memory, block_size, reserve, n_pp, max_num_seqs, max_batched_tokens, gpu_spec
    )
    dep = deployment(
        spec,
        gpu_spec,
        tp=n_tp,
        pp=n_pp,
        interconnect=interconnect,
        gpu_util=gpu_util,
        reserve=reserve if reserve is not None else "2GiB",
    )
    steps: list[str] | None = [] if explain else None
    terms = None
    if is_vllm and kv_logged is None:
        # vLLM's own terms stand in for --reserve, so fit's budget and vLLM's lines agree.
        terms = cli_vllm.predict_terms(
            spec,
            gpu_spec,
            dtype=overrides.get("dtype"),
            gpu_util=dep.gpu_util,
            tp=n_tp,
            pp=n_pp,
            max_num_seqs=max_num_seqs,
            max_batched_tokens=max_batched_tokens,
            steps=steps,
        )
    reserve_bytes = terms.profile_peak_bytes + terms.non_torch_bytes if terms else dep.reserve_bytes
    goals = tpot_ms is not None or ttft_ms is not None
    prompt_tokens = parse_count(prompt, "--prompt") if prompt is not None else None
    from kvcalc.cost.step import stages

    staged = stages(spec, dep, overrides.get("dtype"))
    slos: dict[int, object] = {}  # the latency search depends on the context, not on --batch
    results = []
    for s in seqs:
        for b in batches:
            if steps is not None and len(seqs) * len(batches) > 1:
                steps.append(f"batch {b:,} x {s:,} tokens:")
            result = fit_report(
                spec,
                gpu_spec,
                tp=n_tp,
                pp=n_pp,
                seq=s,
                batch=b,
                dtype=overrides.get("dtype"),
                kv_dtype=kv,
                gpu_util=dep.gpu_util,
                reserve_bytes=reserve_bytes,
                block_size=block_size,
                steps=steps,
                weights_per_gpu=terms.weights_bytes if terms else None,
                staged=staged,
            )
            per = result.per_gpu
            available = per.budget_bytes - per.weight_bytes - per.reserve_bytes
            if is_vllm and (kv_logged is not None or available > 0):
                result.vllm = cli_vllm.figures(
                    spec,
                    terms,
                    kv_logged,
                    available,
                    kv_dtype=kv,
                    tp=n_tp,
                    seq=s,
                    block_size=block_size,
                    max_batched_tokens=max_batched_tokens,
                    steps=steps,
                )
            if goals and s in slos:
                result.slo = slos[s]
            elif goals:
                from kvcalc.plan.slo import largest_batch

                result.slo = slos[s] = largest_batch(
                    spec,
                    gpu_spec,
                    result,
                    tpot_ms=tpot_ms,
                    ttft_ms=ttft_ms,
                    prompt=prompt_tokens or s,
                    dtype=overrides.get("dtype"),
                    kv_dtype=kv,
                    mbu=util[0] if util else 1.0,
                    mfu=util[1] if util else 1.0,
                    dep=dep,
                    steps=steps,
                    engine=None if ceiling else (engine or "vllm"),
                )
            result.ok, result.verdict = verdict(result)
            if is_sglang:
                result.sglang = cli_sglang.predict(
                    spec,
                    gpu_spec,
                    tp=n_tp,
                    pp=n_pp,
                    seq=s,
                    batch=b,
                    dtype=overrides.get("dtype"),
                    kv_dtype=sglang_kv,
                    engine_version=engine_version,
                    mem_fraction_static=mem_fraction_static,
                    chunked_prefill_size=chunked_prefill_size,
                    page_size=page_size,
                    max_running_requests=max_running_requests,
                    dp_attention=dp_attention,
                    steps=steps,
                )
                result.ok, result.verdict = cli_sglang.verdict(result)
            results.append(result)
    if goals:
        from kvcalc.cli.serve import concurrency_searches

        concurrency_searches(results, spec, gpu_spec, dep, prompt_tokens, tpot_ms, ttft_ms, engine, overrides, kv)
    sheets = [fit_sheet(results[0])] if len(results) == 1 else [fit_grid_sheet(results)]
    _emit(fmt, _dump(results), sheets, [_fit_csv_row(r) for r in results], steps)

    def chart():  # noqa: ANN202
        from kvcalc.cost.roofline import decode_row
        from kvcalc.cost.step import stages
        from kvcalc.model.formats import matmul_dtype
        from kvcalc.present.chart_serving import fit_chart, sample

        staged = stages(spec, dep, overrides.get("dtype"))
        compute = gpu_spec.compute_dtype(matmul_dtype(spec, overrides.get("dtype")))
        top = max(max(batches), max(r.max_batch for r in results), 1)
        xs = [b for b in sample(0, round(top.bit_length() * 8)) if b] or [1]
        grid = sorted({max(1, min(top, round(2 ** (x / 8)))) for x in xs})
        lines = []
        for s in seqs:
            times = [
                decode_row(
                    spec, gpu_spec, b, s, overrides.get("dtype"), kv, compute, dep=dep, staged=staged
                ).step_seconds
                for b in grid
            ]
            lines.append((f"seq {s:,} (ceiling)", grid, times))
            if not ceiling and util is None:  # what the verdict decides on, with its 80% interval
                from kvcalc.cost.estimate import step_time

                est = [
                    step_time(
                        spec, gpu_spec, dep, engine=engine or "vllm", decode_contexts=[s] * b,
                        dtype=overrides.get("dtype"), kv_dtype=kv, staged=staged,
                    )
                    for b in grid
                ]  # fmt: skip
                lines.append((f"seq {s:,} (estimate, {engine or 'vllm'})", grid, [t.estimate_s for t in est]))
                lines.append((f"seq {s:,} estimate 80% low", grid, [t.lo_s for t in est]))
                lines.append((f"seq {s:,} estimate 80% high", grid, [t.hi_s for t in est]))
            elif util is not None:
                u = decode_row
                lines.append(
                    (
                        f"seq {s:,} (what-if MBU {util[0]:g}, MFU {util[1]:g})",
                        grid,
                        [
                            u(
                                spec,
                                gpu_spec,
                                b,
                                s,
                                overrides.get("dtype"),
                                kv,
                                compute,
                                dep=dep,
                                staged=staged,
                                util=util,
                            ).estimate_step_seconds
                            for b in grid
                        ],
                    )
                )
        where = f"{dep.gpus} x {gpu_spec.name}" if dep.gpus > 1 else gpu_spec.name
        return fit_chart(f"Time per output token: {spec.name} on {where}", lines, tpot_ms, grid)

    _draw(plot, chart, plot_size)
    if not all(r.ok for r in results):
        raise typer.Exit(EXIT_DOES_NOT_FIT)


def _fit_csv_row(result) -> dict:  # noqa: ANN001
    row = {
        k: v
        for k, v in result.model_dump().items()
        if k not in ("per_gpu", "vllm", "sglang", "slo", "warnings", "concurrency_slo")
    }
    row.update({f"per_gpu_{k}": v for k, v in result.per_gpu.model_dump().items()})
    if result.concurrency_slo is not None:
        row["slo_concurrency"] = result.concurrency_slo.concurrency
        row["slo_ceiling_concurrency"] = result.concurrency_slo.ceiling_concurrency
    return row


@app.command()
def generate(
    model: ModelArg,
    gpu: GpuOpt,
    prompt: Annotated[str, typer.Option("--prompt", "-p", help="Prompt tokens per sequence.")] = "1k",
    new: Annotated[str, typer.Option("--new", "-n", help="Tokens to generate per sequence.")] = "256",
    batch: Annotated[str, typer.Option("--batch", "-b", help="Sequences generated together.")] = "1",
    kv_dtype: KvDtypeOpt = "bf16",
    tp: TpOpt = None,
    gpus: GpusOpt = None,
    pp: PpOpt = None,
    interconnect: InterconnectOpt = None,
    gpu_util: GpuUtilOpt = 0.9,
    reserve: ReserveOpt = "2GiB",
    efficiency: EffOpt = None,
    mbu: MbuOpt = None,
    mfu: MfuOpt = None,
    engine: EngineOpt = "vllm",
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
) -> None:
    """End to end: time to first token, time per output token as the context grows, total time and tokens/s:
    the ceiling (a bound) and the estimate calibrated on public runs of --engine, with its 80% interval
    (--ceiling: the bound alone; --efficiency/--mbu/--mfu: a what-if beside them), and what the KV cache saves.

    With --tp/--pp every step is per GPU plus its all-reduces and pipeline sends; `fits` says whether
    weights + the KV of prompt + new tokens + --reserve fit each GPU's capacity x --gpu-util.

    With --concurrency C (closed loop) or --rate R (Poisson arrivals), requests are served by continuous
    batching as vLLM schedules them: TTFT mean/p50/p99 with queueing, TPOT, ITL, tokens/s per user and in
    all, requests/s; the ceiling beside the estimate and its 80% interval. --concurrency 1..256 --plot
    draws tokens/s per user against tokens/s in all."""
    from kvcalc.plan.generate import generate_report
    from kvcalc.present.serving import generate_sheet

    n_tp, n_pp = ranks(tp, gpus, pp)
    _plot_ready(plot, plot_size)
    overrides = {**what_ifs(layers, kv_heads, head_dim, window, dtype), **cross_overrides(images, encoder_seq)}
    kv = normalize_dtype(kv_dtype, KV_DTYPES)
    util = utilization(efficiency, mbu, mfu)
    args = dict(
        batch=parse_count(batch, "--batch"),
        prompt=parse_count(prompt, "--prompt"),
        new=parse_count(new, "--new"),
        dtype=overrides.get("dtype"),
        kv_dtype=kv,
    )
    spec = resolve(model, overrides).spec
    gpu_spec = _gpu(gpu)
    dep = deployment(spec, gpu_spec, tp=n_tp, pp=n_pp, interconnect=interconnect, gpu_util=gpu_util, reserve=reserve)
    if concurrency is not None or rate is not None:
        from kvcalc.cli.serve import serve_generate

        return serve_generate(
            spec, gpu_spec, dep, concurrency=concurrency, rate=rate, requests=requests, seed=seed,
            prompt=args["prompt"], new=args["new"], batch_given=args["batch"] != 1, util=util, engine=engine,
            ceiling=ceiling,
            dtype=args["dtype"], kv_dtype=kv, fmt=fmt, plot=plot, plot_size=plot_size,
        )  # fmt: skip
    from kvcalc.model.formats import matmul_dtype

    compute = gpu_spec.compute_dtype(matmul_dtype(spec, overrides.get("dtype")))
    steps: list[str] | None = [] if explain else None
    from kvcalc.cli.estimating import engine_for_estimate

    est_engine = engine_for_estimate(engine, ceiling)
    results = [generate_report(spec, gpu_spec, **args, compute_dtype=compute, steps=steps, dep=dep, engine=est_engine)]
    if util:
        results.append(
            generate_report(
                spec, gpu_spec, **args, compute_dtype=compute, mbu=util[0], mfu=util[1], steps=steps, dep=dep
            )
        )
    payload = results[0].model_dump(mode="json")
    if util:
        payload["what_if"] = results[1].model_dump(mode="json")  # --efficiency/--mbu/--mfu
    _emit(fmt, payload, [generate_sheet(results)], [r.model_dump() for r in results], steps)

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
