"""The serving planner's command `kvcalc fit` (registered on cli.app; `generate` is in cli/generating.py)."""

from typing import Annotated, Optional

import typer

from kvcalc.cli import llamacpp as lcpp
from kvcalc.cli import llamacpp_flags as lcpp_flags
from kvcalc.cli.common import (
    EXIT_DOES_NOT_FIT,
    DtypeOpt,
    EncoderSeqOpt,
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
    _check_planner,
    _complete_gpus,
    _complete_kv_dtypes,
    _draw,
    _dump,
    _emit,
    _gpu,
    _gpu_names,
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
from kvcalc.cli.estimating import CeilingOpt
from kvcalc.cli.sglang import (
    ChunkedPrefillOpt,
    DpAttentionOpt,
    EngineVersionOpt,
    MaxMambaOpt,
    MaxRunningOpt,
    MemFractionOpt,
    PageSizeOpt,
    SsmDtypeOpt,
)
from kvcalc.errors import UsageError
from kvcalc.plan.deploy import deployment, ranks, utilization
from kvcalc.plan.inputs import cross_overrides, resolve, unread_goal_options, what_ifs
from kvcalc.units import DEFAULT_SEQ, FIT_MAX_ROWS, KV_DTYPES, check_grid, normalize_dtype, parse_count, parse_range

GpuOpt = Annotated[
    str, typer.Option("--gpu", "-g", help="GPU preset (kvcalc gpus lists them).", autocompletion=_complete_gpus)
]
FitGpuOpt = Annotated[
    str,
    typer.Option(
        "--gpu",
        "-g",
        help="GPU preset, or a comma list (h100,h200,mi300x): one block of rows per GPU (kvcalc gpus lists them).",
        autocompletion=_complete_gpus,
    ),
]


@app.command()
def fit(
    model: ModelArg,
    gpu: FitGpuOpt,
    gpus: GpusOpt = None,
    tp: TpOpt = None,
    pp: PpOpt = None,
    interconnect: InterconnectOpt = None,
    ep: EpOpt = None,
    nodes: NodesOpt = None,
    gpus_per_node: GpusPerNodeOpt = None,
    seq: Annotated[
        Optional[str],
        typer.Option(
            "--seq",
            "-s",
            help="Tokens per request (prompt + output): 8k, or a list/range (default 8k = 8,192, every command's; "
            "with --engine vllm, vLLM's default max_model_len, as vLLM derives it from config.json). Under "
            "--engine vllm / sglang it is the server's max_model_len / context_length.",
        ),
    ] = None,
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
    gpu_util: GpuUtilOpt = None,
    reserve: Annotated[
        Optional[str],
        typer.Option(
            "--reserve",
            help="Per-GPU memory kept for activations, CUDA graphs and buffers (default: vLLM 0.19's activation "
            "peak + non-torch memory for the layout; 2GiB with --engine none).",
        ),
    ] = None,
    block_size: Annotated[
        int,
        typer.Option("--block-size", help="Paged-attention block in tokens; each sequence rounds up to whole blocks."),
    ] = 16,
    engine: Annotated[
        Optional[str],
        typer.Option(
            "--engine",
            help="vllm or sglang: the engine's own accounting and start-up figures (vllm: its refusals too); "
            "trtllm: TensorRT-LLM's pool (--gpu-util as free_gpu_memory_fraction of what weights and the "
            "reserve leave); llamacpp: llama.cpp's buffers and which GGUF quant fits; none: the bare "
            "arithmetic with a flat --reserve (default 2GiB). Left out: kvcalc's weights with vLLM 0.19's "
            "reserve for the layout.",
        ),
    ] = None,
    engine_version: EngineVersionOpt = None,
    mem_fraction_static: MemFractionOpt = None,
    chunked_prefill_size: ChunkedPrefillOpt = None,
    page_size: PageSizeOpt = None,
    max_running_requests: MaxRunningOpt = None,
    max_mamba_cache_size: MaxMambaOpt = None,
    mamba_ssm_dtype: SsmDtypeOpt = None,
    dp_attention: DpAttentionOpt = False,
    kv_memory: Annotated[
        Optional[str],
        typer.Option("--kv-memory", help="Available KV memory per GPU as the engine logged it, e.g. 52.79GiB."),
    ] = None,
    max_batched_tokens: Annotated[
        Optional[int],
        typer.Option(
            "--max-batched-tokens",
            help="vLLM max_num_batched_tokens: profiling run, windows, and the token budget the --tpot-ms/--ttft-ms "
            "concurrency search schedules under (default: vLLM's for the GPU, 8192 or 2048).",
        ),
    ] = None,
    max_num_seqs: Annotated[
        Optional[int],
        typer.Option(
            "--max-num-seqs",
            help="vLLM max_num_seqs: sampler warm-up rows, and the running requests the --tpot-ms/--ttft-ms "
            "concurrency search allows (default: vLLM's for the GPU, 1024 or 256).",
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
    quant: lcpp.QuantOpt = None,
    parallel: lcpp.ParallelOpt = 1,
    kv_unified: lcpp.KvUnifiedOpt = False,
    ubatch: lcpp.UbatchOpt = 512,
    flash_attn: lcpp.FlashAttnOpt = "on",
    ngl: lcpp.NglOpt = None,
    cpu_moe: lcpp.CpuMoeOpt = False,
    n_cpu_moe: lcpp.NCpuMoeOpt = None,
    swa_full: lcpp.SwaFullOpt = False,
    cpu_bandwidth: lcpp.CpuBwOpt = 64.0,
) -> None:
    """Does MODEL fit on GPUs at batch x seq? Largest batch and context, KV capacity, concurrency, latency goals.

    Per GPU: its weights (1/tp of the matrices; its pipeline stage's layers with --pp) + KV cache of
    one rank (paged) + SSM state + the reserve must stay within capacity x --gpu-util. The reserve is
    what vLLM 0.19 keeps beside the weights on this layout (the activation peak of a
    max_num_batched_tokens forward and the sampler warm-up, non-torch memory, NCCL NVLS buffers at
    tp >= 2), so the plain fit promises no more than the engine gives; --reserve sets it, --engine none
    keeps a flat 2 GiB, --engine vllm uses vLLM's weights as loaded too and checks that it starts.
    --ep, --dp-attention and --nodes/--gpus-per-node describe expert parallelism, data-parallel
    attention (each rank keeps its own requests' KV) and node boundaries. --gpu and --batch and --seq
    take lists and ranges: one row per combination.

    Under --engine vllm, sglang or trtllm the engine's own pool answers every memory question: whether the
    batch fits, the largest batch at --seq and the largest context at --batch (whole blocks or pages, the
    engine's cap on running requests), the KV capacity and the concurrency.

    Always prints the table and a verdict. Exit status: 0 when every combination fits (and meets
    --tpot-ms / --ttft-ms), 3 when one does not fit or misses a goal, 2 for a usage error.

    --engine llamacpp with a GGUF repo: each quant's llama.cpp buffers, GPU layers and a speed ceiling.
    """
    others = {
        "--interconnect": interconnect is not None,
        "--ep": ep is not None,
        "--nodes": nodes is not None,
        "--gpus-per-node": gpus_per_node is not None,
        "--gpu-util": gpu_util is not None,
        "--block-size": block_size != 16,
        "--mem-fraction-static": mem_fraction_static is not None,
        "--chunked-prefill-size": chunked_prefill_size is not None,
        "--page-size": page_size is not None,
        "--max-running-requests": max_running_requests is not None,
        "--max-mamba-cache-size": max_mamba_cache_size is not None,
        "--mamba-ssm-dtype": mamba_ssm_dtype is not None,
        "--dp-attention": dp_attention,
        "--kv-memory": kv_memory is not None,
        "--max-batched-tokens": max_batched_tokens is not None,
        "--max-num-seqs": max_num_seqs is not None,
        "--tpot-ms": tpot_ms is not None,
        "--ttft-ms": ttft_ms is not None,
        "--prompt": prompt is not None,
        "--efficiency": efficiency is not None,
        "--mbu": mbu is not None,
        "--mfu": mfu is not None,
        "--ceiling": ceiling,
        **lcpp_flags.shared_flags(explain, plot, layers, kv_heads, head_dim, window, images, encoder_seq),
    }
    own = lcpp_flags.own_flags(quant, parallel, kv_unified, ubatch, flash_attn, ngl, swa_full, cpu_moe, n_cpu_moe)
    own["--cpu-bandwidth"] = cpu_bandwidth != 64.0
    if lcpp_flags.check_flags(engine, "fit", others, own, "--gpu, --gpus, --seq, --reserve, --engine-version, "):
        context = seq if seq is not None else str(DEFAULT_SEQ)  # llama-server's -c is given, not the model's maximum
        lcpp.fit_exit(model, gpu, context, batch, kv_dtype, quant, engine_version, ngl, cpu_bandwidth, fmt, reserve,
                      (tp, pp, gpus), (parallel, kv_unified, ubatch, flash_attn, swa_full,
                                       lcpp.cpu_moe_layers(cpu_moe, n_cpu_moe)), dtype)  # fmt: skip
    from kvcalc.plan import sglang as sglang_fit
    from kvcalc.plan import vllm_fit
    from kvcalc.plan.fitrun import fit_rows, goal_engine
    from kvcalc.plan.kv_auto import auto_kv_dtype
    from kvcalc.plan.serve_launch import gpu_util_for
    from kvcalc.present.serving import fit_grid_sheet, fit_sheet

    engine_none = engine is not None and engine.lower() == "none"
    engine = None if engine_none else engine
    _check_planner(tp=tp, gpus=gpus, tpot_ms=tpot_ms, ttft_ms=ttft_ms, max_batched_tokens=max_batched_tokens)
    _plot_ready(plot, plot_size)
    if tpot_ms is None and ttft_ms is None:  # the speed options shape a goal's verdict (and --plot's chart)
        speed = dict(ceiling=ceiling, efficiency=efficiency, mbu=mbu, mfu=mfu)
        if unread := unread_goal_options(plot=plot, prompt=prompt, **speed):
            raise UsageError(
                f"{flags(unread)} {'applies' if len(unread) == 1 else 'apply'} to a latency goal",
                hint="give --tpot-ms or --ttft-ms"
                + ("" if "prompt" in unread else " (or --plot: its chart draws them)"),
            )
    n_tp, n_pp = ranks(tp, gpus, pp)
    batches = parse_range(batch, "--batch")
    if block_size < 1:
        raise UsageError(f"--block-size must be at least 1, got {block_size}")
    kv_given = normalize_dtype(kv_dtype, KV_DTYPES) if kv_dtype is not None else None
    util = utilization(efficiency, mbu, mfu)
    overrides = {**what_ifs(layers, kv_heads, head_dim, window, dtype), **cross_overrides(images, encoder_seq)}
    spec = resolve(model, overrides).spec
    sglang_options = dict(  # SGLang's own options, checked here and taken by its pool below
        engine_version=engine_version,
        mem_fraction_static=mem_fraction_static,
        chunked_prefill_size=chunked_prefill_size,
        page_size=page_size,
        max_running_requests=max_running_requests,
        max_mamba_cache_size=max_mamba_cache_size,
        mamba_ssm_dtype=mamba_ssm_dtype,
        dp_attention=dp_attention,
    )
    is_sglang = sglang_fit.check_options(engine, **sglang_options)
    gpu_util = gpu_util_for(engine, gpu_util)
    is_trtllm = engine is not None and engine.lower() == "trtllm"
    if is_trtllm:  # its pool's pages, not vLLM's 16
        from kvcalc.plan.trtllm_fit import block_size_for

        block_size = block_size_for(block_size)
    steps: list[str] | None = [] if explain else None
    gpu_names = _gpu_names(gpu)
    results = []
    for gpu_spec in [_gpu(name) for name in gpu_names]:  # a list of GPUs: one block of rows each, as roofline
        if steps is not None and len(gpu_names) > 1:
            steps.append(f"on {gpu_spec.name}:")
        kv = kv_given or auto_kv_dtype(spec, gpu_spec, engine, overrides.get("dtype"))
        is_vllm, kv_logged, n_seqs, n_tokens = vllm_fit.check_options(
            None if is_sglang or is_trtllm else engine,
            kv_memory,
            block_size,
            reserve,
            n_pp,
            max_num_seqs,
            max_batched_tokens,
            gpu_spec,
        )
        if is_vllm:
            vllm_fit.refuse_architecture(spec)
            vllm_fit.check_layout(n_tp, ep, dp_attention)
        seqs = parse_range(seq, "--seq") if seq is not None else vllm_fit.default_seqs(spec, is_vllm)
        check_grid("fit --batch x --seq x --gpu", len(batches), len(seqs), len(gpu_names), limit=FIT_MAX_ROWS)
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
        rows = fit_rows(
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
            max_num_seqs=n_seqs,
            max_batched_tokens=n_tokens,
            reserve_given=reserve is not None or engine_none,
            tpot_ms=tpot_ms,
            ttft_ms=ttft_ms,
            prompt=parse_count(prompt, "--prompt") if prompt is not None else None,
            util=util,
            steps=steps,
            estimate_engine=goal_engine(engine, ceiling),
            pool="sglang" if is_sglang else "trtllm" if is_trtllm else None,
            sglang={
                **sglang_options,
                "kv_dtype": kv_given,
                "context_given": seq is not None,
            },  # kv_dtype None: SGLang's auto, the model dtype
        )
        results += rows
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
            if not ceiling:  # what the verdict decides on: the estimate with its interval, or the what-if
                from kvcalc.plan.estimated import decode_lines

                lines += decode_lines(
                    spec, gpu_spec, dep, grid, s, engine or "vllm", overrides.get("dtype"), kv, staged, util
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
