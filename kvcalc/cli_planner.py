"""The serving planner's commands: `kvcalc fit` and `kvcalc generate` (registered on cli.app)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvcalc.cli_common import (
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
    WindowOpt,
    _check_planner,
    _complete_gpus,
    _complete_kv_dtypes,
    _cross_overrides,
    _emit,
    _gpu,
    _model,
    _overrides,
    app,
)
from kvcalc.errors import UsageError
from kvcalc.units import KV_DTYPES, normalize_dtype, parse_count

GpuOpt = Annotated[
    str, typer.Option("--gpu", "-g", help="GPU preset (kvcalc gpus lists them).", autocompletion=_complete_gpus)
]
EffOpt = Annotated[
    Optional[float],
    typer.Option("--efficiency", help="Scale both roofs by F (0-1] for an estimate beside the ceiling."),
]
MbuOpt = Annotated[Optional[float], typer.Option("--mbu", help="Memory-bandwidth utilization (0-1] for the estimate.")]
MfuOpt = Annotated[Optional[float], typer.Option("--mfu", help="Model FLOP/s utilization (0-1] for the estimate.")]


def _utilization(efficiency: float | None, mbu: float | None, mfu: float | None) -> tuple[float, float] | None:
    """(MBU, MFU) for an estimate, or None for the plain ceiling."""
    from kvcalc.units import parse_fraction

    if efficiency is None and mbu is None and mfu is None:
        return None
    base = parse_fraction(efficiency, "--efficiency") if efficiency is not None else 1.0
    return (
        parse_fraction(mbu, "--mbu") if mbu is not None else base,
        parse_fraction(mfu, "--mfu") if mfu is not None else base,
    )


@app.command()
def fit(
    model: ModelArg,
    gpu: GpuOpt,
    gpus: Annotated[Optional[int], typer.Option("--gpus", help="GPUs serving one replica (tensor parallel).")] = None,
    tp: Annotated[Optional[int], typer.Option("--tp", help="Tensor-parallel ranks (same as --gpus).")] = None,
    seq: Annotated[str, typer.Option("--seq", "-s", help="Tokens per request (prompt + output).")] = "8k",
    batch: Annotated[str, typer.Option("--batch", "-b", help="Concurrent sequences to check.")] = "1",
    kv_dtype: Annotated[
        Optional[str],
        typer.Option(
            "--kv-dtype",
            help=f"Cache element type: {', '.join(KV_DTYPES)} (default bf16; with --engine vllm, vLLM's auto: the model dtype).",
            autocompletion=_complete_kv_dtypes,
        ),
    ] = None,
    gpu_util: Annotated[
        float, typer.Option("--gpu-util", help="Share of GPU memory to use, as vLLM's gpu_memory_utilization.")
    ] = 0.9,
    reserve: Annotated[
        Optional[str],
        typer.Option("--reserve", help="Per-GPU memory kept for activations, CUDA graphs and buffers (default 2GiB)."),
    ] = None,
    block_size: Annotated[
        int,
        typer.Option("--block-size", help="Paged-attention block in tokens; each sequence rounds up to whole blocks."),
    ] = 16,
    engine: Annotated[
        Optional[str], typer.Option("--engine", help="Also print an engine's own start-up figures: vllm.")
    ] = None,
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
    pp: Annotated[int, typer.Option("--pp", help="Pipeline-parallel stages (with --engine vllm).")] = 1,
    tpot_ms: Annotated[
        Optional[float],
        typer.Option("--tpot-ms", help="Find the largest batch whose time per output token meets this."),
    ] = None,
    ttft_ms: Annotated[
        Optional[float], typer.Option("--ttft-ms", help="Find the largest batch whose time to first token meets this.")
    ] = None,
    prompt: Annotated[
        Optional[str], typer.Option("--prompt", help="Prompt tokens for --ttft-ms (default: --seq).")
    ] = None,
    efficiency: EffOpt = None,
    mbu: MbuOpt = None,
    mfu: MfuOpt = None,
    fmt: FmtOpt = Fmt.table,
    explain: ExplainOpt = False,
    layers: LayersOpt = None,
    kv_heads: KvHeadsOpt = None,
    head_dim: HeadDimOpt = None,
    window: WindowOpt = None,
    dtype: DtypeOpt = None,
    images: ImagesOpt = None,
    encoder_seq: EncoderSeqOpt = None,
) -> None:
    """Does MODEL fit on GPUs at batch x seq? Largest batch and context, KV capacity, concurrency, latency goals.

    Per GPU: weights / tp + KV cache of one rank (paged) + SSM state + --reserve must stay within
    capacity x --gpu-util. --reserve (default 2 GiB) stands for what vLLM calls non-KV memory beyond
    the weights: the activation peak of a max_num_batched_tokens forward, CUDA graphs and
    communication buffers (2.1-2.5 GiB in vLLM 0.19 logs of 7-16B models on one H100; ~4 GiB at tp 4).
    """
    from kvcalc.fit import fit_report
    from kvcalc.render import fit_sheet
    from kvcalc.units import parse_bytes, parse_fraction

    _check_planner(tp=tp, gpus=gpus, tpot_ms=tpot_ms, ttft_ms=ttft_ms, max_batched_tokens=max_batched_tokens)
    if gpus is not None and tp is not None and gpus != tp:
        raise UsageError(f"--gpus {gpus} and --tp {tp} disagree", hint="give one of them")
    ranks = tp or gpus or 1
    s = parse_count(seq, "--seq")
    b = parse_count(batch, "--batch")
    if block_size < 1:
        raise UsageError(f"--block-size must be at least 1, got {block_size}")
    kv = normalize_dtype(kv_dtype, KV_DTYPES) if kv_dtype is not None else None
    overrides = {**_overrides(layers, kv_heads, head_dim, window, dtype), **_cross_overrides(images, encoder_seq)}
    spec = _model(model, overrides).spec
    gpu_spec = _gpu(gpu)
    steps: list[str] | None = [] if explain else None
    from kvcalc import cli_vllm

    if kv is None:
        kv = cli_vllm.auto_kv_dtype(spec, gpu_spec, engine, overrides.get("dtype"))

    is_vllm, kv_bytes, max_num_seqs, max_batched_tokens = cli_vllm.check_options(
        engine, kv_memory, block_size, reserve, pp, max_num_seqs, max_batched_tokens, gpu_spec
    )
    util = parse_fraction(gpu_util, "--gpu-util")
    terms = None
    if is_vllm and kv_bytes is None:
        # vLLM's own terms stand in for --reserve, so fit's budget and vLLM's lines agree.
        terms = cli_vllm.predict_terms(
            spec,
            gpu_spec,
            dtype=overrides.get("dtype"),
            gpu_util=util,
            tp=ranks,
            pp=pp,
            max_num_seqs=max_num_seqs,
            max_batched_tokens=max_batched_tokens,
            steps=steps,
        )
    result = fit_report(
        spec,
        gpu_spec,
        tp=ranks,
        seq=s,
        batch=b,
        dtype=overrides.get("dtype"),
        kv_dtype=kv,
        gpu_util=util,
        reserve_bytes=terms.profile_peak_bytes + terms.non_torch_bytes
        if terms
        else parse_bytes(reserve if reserve is not None else "2GiB", "--reserve"),
        block_size=block_size,
        steps=steps,
        weights_per_gpu=terms.weights_bytes if terms else None,
    )
    per = result.per_gpu
    available = per.budget_bytes - per.weight_bytes - per.reserve_bytes
    if kv_bytes is None and (available <= 0 or result.max_batch == 0):
        from kvcalc.units import fmt_bytes

        where = f"{ranks} x {gpu_spec.name}" if ranks > 1 else f"one {gpu_spec.name}"
        if available <= 0:
            raise UsageError(
                f"{spec.name} does not fit on {where}: weights {fmt_bytes(per.weight_bytes)} + reserve "
                f"{fmt_bytes(per.reserve_bytes)} per GPU exceed the budget {fmt_bytes(per.budget_bytes)} "
                f"({fmt_bytes(per.capacity_bytes)} x {result.gpu_util:g})",
                hint="use more GPUs (--tp), smaller weights (--dtype fp8/int4) or a larger GPU",
            )
        raise UsageError(
            f"{spec.name} on {where}: not even one sequence of {s:,} tokens fits in the "
            f"{fmt_bytes(available)} left for the KV cache per GPU",
            hint="shorten --seq, quantize the cache (--kv-dtype fp8) or add GPUs",
        )
    if is_vllm:
        result.vllm = cli_vllm.figures(
            spec,
            terms,
            kv_bytes,
            available,
            kv_dtype=kv,
            tp=ranks,
            seq=s,
            block_size=block_size,
            max_batched_tokens=max_batched_tokens,
            steps=steps,
        )
    if tpot_ms is not None or ttft_ms is not None:
        from kvcalc.slo import largest_batch

        util = _utilization(efficiency, mbu, mfu)
        result.slo = largest_batch(
            spec,
            gpu_spec,
            result,
            tpot_ms=tpot_ms,
            ttft_ms=ttft_ms,
            prompt=parse_count(prompt, "--prompt") if prompt is not None else s,
            dtype=overrides.get("dtype"),
            kv_dtype=kv,
            mbu=util[0] if util else 1.0,
            mfu=util[1] if util else 1.0,
        )
    row = {k: v for k, v in result.model_dump().items() if k not in ("per_gpu", "vllm", "slo")}
    row.update({f"per_gpu_{k}": v for k, v in result.per_gpu.model_dump().items()})
    _emit(fmt, result.model_dump(mode="json"), [fit_sheet(result)], [row], steps)


@app.command()
def generate(
    model: ModelArg,
    gpu: GpuOpt,
    prompt: Annotated[str, typer.Option("--prompt", "-p", help="Prompt tokens per sequence.")] = "1k",
    new: Annotated[str, typer.Option("--new", "-n", help="Tokens to generate per sequence.")] = "256",
    batch: Annotated[str, typer.Option("--batch", "-b", help="Sequences generated together.")] = "1",
    kv_dtype: KvDtypeOpt = "bf16",
    efficiency: EffOpt = None,
    mbu: MbuOpt = None,
    mfu: MfuOpt = None,
    fmt: FmtOpt = Fmt.table,
    explain: ExplainOpt = False,
    layers: LayersOpt = None,
    kv_heads: KvHeadsOpt = None,
    head_dim: HeadDimOpt = None,
    window: WindowOpt = None,
    dtype: DtypeOpt = None,
    images: ImagesOpt = None,
    encoder_seq: EncoderSeqOpt = None,
) -> None:
    """End to end: time to first token, time per output token as the context grows, total time and tokens/s
    (ceilings unless --efficiency/--mbu/--mfu), and what the KV cache saves in FLOPs and copies."""
    from kvcalc.generate import generate_report
    from kvcalc.render import generate_sheet

    overrides = {**_overrides(layers, kv_heads, head_dim, window, dtype), **_cross_overrides(images, encoder_seq)}
    spec = _model(model, overrides).spec
    gpu_spec = _gpu(gpu)
    kv = normalize_dtype(kv_dtype, KV_DTYPES)
    from kvcalc.weights import matmul_dtype

    compute = gpu_spec.compute_dtype(matmul_dtype(spec, overrides.get("dtype")))
    args = dict(
        batch=parse_count(batch, "--batch"),
        prompt=parse_count(prompt, "--prompt"),
        new=parse_count(new, "--new"),
        dtype=overrides.get("dtype"),
        kv_dtype=kv,
        compute_dtype=compute,
    )
    steps: list[str] | None = [] if explain else None
    results = [generate_report(spec, gpu_spec, **args, steps=steps)]
    util = _utilization(efficiency, mbu, mfu)
    if util:
        results.append(generate_report(spec, gpu_spec, **args, mbu=util[0], mfu=util[1], steps=steps))
    payload = results[0].model_dump(mode="json")
    if util:
        payload["estimate"] = results[1].model_dump(mode="json")
    _emit(fmt, payload, [generate_sheet(results)], [r.model_dump() for r in results], steps)
