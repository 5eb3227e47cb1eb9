"""The kvcalc command line: parse -> core -> render -> print. The one place that prints."""

# NOTE: no `from __future__ import annotations` in the CLI modules: Typer would eval every string
# annotation of the command it runs (about 100 evals, 2 ms of start-up); real ones cost nothing.

from typing import Annotated, Optional

import typer

from kvcalc.cli import llamacpp as lcpp
from kvcalc.cli import llamacpp_flags as lcpp_flags
from kvcalc.cli.common import (  # noqa: F401  (app: the Typer app kvcalc.__main__ runs)
    BatchOpt,
    DtypeOpt,
    EncoderSeqOpt,
    EngineKvDtypeOpt,
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
    SeqOpt,
    WindowOpt,
    _complete_gpus,
    _complete_kv_dtypes,
    _complete_models,
    _draw,
    _dump,
    _emit,
    _gpu,
    _gpu_names,
    _plot_ready,
    app,
    explained,
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
    ReserveOpt,
    TpOpt,
)
from kvcalc.cli.estimating import CeilingOpt, EngineOpt
from kvcalc.cli.sglang import DpAttentionOpt, ServedVersionOpt
from kvcalc.errors import UsageError
from kvcalc.plan.inputs import cross_overrides, resolve, what_ifs, with_context_warning
from kvcalc.units import DEFAULT_GPU_UTIL, KV_DTYPES, check_grid, normalize_dtype, parse_range

# --- commands --------------------------------------------------------------------------


@app.command()
def cache(
    model: ModelArg,
    batch: BatchOpt = "1",
    seq: SeqOpt = "8k",
    kv_dtype: Annotated[
        Optional[str],
        typer.Option(
            "--kv-dtype",
            help=f"Cache element type: {', '.join(KV_DTYPES)} (default bf16); with --engine llamacpp its -ctk/-ctv: f16 (default), q8_0, q4_0, ...",
            autocompletion=_complete_kv_dtypes,
        ),
    ] = None,
    gpu: Annotated[
        Optional[str],
        typer.Option("--gpu", "-g", help="Show the share of this GPU's memory.", autocompletion=_complete_gpus),
    ] = None,
    tp: Annotated[int, typer.Option("--tp", help="Tensor-parallel ranks: show the cache of one rank.")] = 1,
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
    engine: Annotated[
        Optional[str], typer.Option("--engine", help="llamacpp: llama.cpp's KV, model and compute buffers instead.")
    ] = None,
    engine_version: lcpp.EngineVersionOpt = None,
    quant: lcpp.QuantOpt = None,
    parallel: lcpp.ParallelOpt = 1,
    kv_unified: lcpp.KvUnifiedOpt = False,
    ubatch: lcpp.UbatchOpt = 512,
    flash_attn: lcpp.FlashAttnOpt = "on",
    ngl: lcpp.NglOpt = None,
    cpu_moe: lcpp.CpuMoeOpt = False,
    n_cpu_moe: lcpp.NCpuMoeOpt = None,
    swa_full: lcpp.SwaFullOpt = False,
) -> None:
    """KV-cache size of MODEL: bytes per token, per layer type, and in total for batch x seq.

    With --engine llamacpp: llama.cpp's buffers as llama-server allocates them (--seq is its -c)."""
    from kvcalc.cost.kvcache import cache_report, check_tp, with_gpu_share
    from kvcalc.present.render import cache_sheet

    _plot_ready(plot, plot_size)
    batches, seqs = parse_range(batch, "--batch"), parse_range(seq, "--seq")
    check_grid("cache --batch x --seq", len(batches), len(seqs))
    others = lcpp_flags.shared_flags(explain, plot, layers, kv_heads, head_dim, window, images, encoder_seq)
    own = lcpp_flags.own_flags(quant, parallel, kv_unified, ubatch, flash_attn, ngl, swa_full, cpu_moe, n_cpu_moe)
    own["--engine-version"] = engine_version is not None  # cache's only engine is llama.cpp
    if lcpp_flags.check_flags(engine, "cache", others, own, "--gpu, --seq, ") or engine is not None:  # else: says so
        return lcpp.cache_command(
            model,
            engine,
            batches,
            seqs,
            gpu,
            tp,
            kv_dtype,
            quant,
            engine_version,
            ngl,
            fmt,
            lcpp.settings(
                parallel, kv_unified, ubatch, flash_attn, swa_full, kv_dtype, lcpp.cpu_moe_layers(cpu_moe, n_cpu_moe)
            ),
            dtype,
        )
    kv = normalize_dtype(kv_dtype if kv_dtype is not None else "bf16", KV_DTYPES)
    if tp < 1:
        raise UsageError(f"--tp must be at least 1, got {tp}")
    gpu_names = _gpu_names(gpu)
    if len(gpu_names) > 1:
        raise UsageError("cache takes one --gpu", hint="`kvcalc roofline` compares several GPUs")
    overrides = {**what_ifs(layers, kv_heads, head_dim, window, dtype), **cross_overrides(images, encoder_seq)}
    spec = resolve(model, overrides).spec
    check_tp(spec, tp)  # vLLM's rule, as fit and roofline apply it
    gpu_spec = _gpu(gpu_names[0]) if gpu_names else None
    steps: list[str] | None = [] if explain else None
    shown_b, shown_s = map(set, explained(batches, seqs, steps))
    results = []
    for s in seqs:
        for b in batches:
            st = steps if b in shown_b and s in shown_s else None
            r = with_context_warning(cache_report(spec, b, s, kv, tp, steps=st), spec)
            results.append(with_gpu_share(r, gpu_spec, st) if gpu_spec else r)
    _emit(
        fmt,
        lambda: _dump(results),
        lambda: [cache_sheet(results)],
        lambda: [
            {**{k: v for k, v in r.model_dump().items() if k != "layers"}, "warnings": "; ".join(r.warnings)}
            for r in results
        ],
        steps,
    )

    def chart():  # noqa: ANN202
        from kvcalc.cost.shard import rank_weight_bytes_resident
        from kvcalc.present.chart import cache_chart

        # NOTE: the weights one rank holds: with --tp the cache drawn is one rank's, and the whole
        # model's weights put the "memory - weights" line below zero (70B at tp 4) or too low.
        weights = rank_weight_bytes_resident(spec, tp, dtype=overrides.get("dtype")) if gpu_spec else None
        return cache_chart(
            spec,
            batches,
            kv,
            seqs,
            gpu_spec.capacity_bytes if gpu_spec else None,
            weights,
            gpu_spec.name if gpu_spec else None,
            tp=tp,
        )

    _draw(plot, chart, plot_size)


@app.command()
def roofline(
    model: ModelArg,
    gpu: Annotated[
        str,
        typer.Option(
            "--gpu",
            "-g",
            help="GPU preset, or several: a100,h100,h200 (kvcalc gpus lists them).",
            autocompletion=_complete_gpus,
        ),
    ],
    batch: BatchOpt = "1..64",
    seq: SeqOpt = "8k",
    kv_dtype: EngineKvDtypeOpt = None,
    fmt: FmtOpt = Fmt.table,
    explain: ExplainOpt = False,
    plot: PlotOpt = None,
    plot_size: PlotSizeOpt = None,
    tp: TpOpt = None,
    gpus: GpusOpt = None,
    pp: PpOpt = None,
    interconnect: InterconnectOpt = None,
    ep: EpOpt = None,
    dp_attention: DpAttentionOpt = False,
    nodes: NodesOpt = None,
    gpus_per_node: GpusPerNodeOpt = None,
    gpu_util: GpuUtilOpt = DEFAULT_GPU_UTIL,
    reserve: ReserveOpt = "2GiB",
    efficiency: EffOpt = None,
    mbu: MbuOpt = None,
    mfu: MfuOpt = None,
    engine: EngineOpt = None,
    ceiling: CeilingOpt = False,
    layers: LayersOpt = None,
    kv_heads: KvHeadsOpt = None,
    head_dim: HeadDimOpt = None,
    window: WindowOpt = None,
    dtype: DtypeOpt = None,
    images: ImagesOpt = None,
    encoder_seq: EncoderSeqOpt = None,
    engine_version: ServedVersionOpt = None,
) -> None:
    """Decode roofline of MODEL on a GPU: bytes, FLOPs, intensity, and time and tokens/s ceilings.

    With --tp/--pp: weights, KV and FLOPs are per GPU (the most loaded pipeline stage), the step adds
    the all-reduces and stage-to-stage sends, and tokens/s is for the whole deployment. Every row
    says whether weights + KV + --reserve fit in each GPU's capacity x --gpu-util, and, --engine given
    (vllm, sglang, trtllm), whether it would start on the layout and hold the row's batch at once.
    """
    from kvcalc.cost.roofline import roofline_report
    from kvcalc.plan.calibration import calibration_for
    from kvcalc.plan.deploy import deployment, ranks, utilization
    from kvcalc.plan.engine_memory import engine_rows
    from kvcalc.present.render import roofline_sheet

    _plot_ready(plot, plot_size)
    named, engine = engine is not None, engine or "vllm"  # named: its pool decides each row's fits
    from kvcalc.plan.serve_launch import sglang_release

    release = sglang_release(engine, engine_version)
    n_tp, n_pp = ranks(tp, gpus, pp)
    batches, seqs = parse_range(batch, "--batch"), parse_range(seq, "--seq")
    gpu_names = _gpu_names(gpu)
    check_grid("roofline --batch x --seq x --gpu", len(batches), len(seqs), len(gpu_names))
    kv_given = normalize_dtype(kv_dtype, KV_DTYPES) if kv_dtype is not None else None
    util = utilization(efficiency, mbu, mfu)
    from kvcalc.cli.estimating import engine_for_estimate

    est_engine = engine_for_estimate(engine, ceiling)
    overrides = {**what_ifs(layers, kv_heads, head_dim, window, dtype), **cross_overrides(images, encoder_seq)}
    spec = resolve(model, overrides).spec
    from kvcalc.engines.kernels import gpu_as_run_by
    from kvcalc.plan.kv_auto import auto_kv_dtype

    gpu_specs = [gpu_as_run_by(_gpu(name), engine) for name in gpu_names]
    deps = [
        deployment(
            spec,
            g,
            tp=n_tp,
            pp=n_pp,
            interconnect=interconnect,
            gpu_util=gpu_util,
            reserve=reserve,
            ep=ep,
            dp_attention=dp_attention,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
        )
        for g in gpu_specs
    ]
    steps: list[str] | None = [] if explain else None
    shown_b, shown_s = explained(batches, seqs, steps)
    results = []
    for g, dep in zip(gpu_specs, deps):
        if steps is not None and len(gpu_specs) > 1:
            steps.append(f"on {g.name}:")
        every = (shown_b, shown_s) == (batches, seqs)
        kv = kv_given or auto_kv_dtype(spec, g, engine, overrides.get("dtype"))
        results.append(
            roofline_report(
                spec,
                g,
                batches,
                seqs,
                overrides.get("dtype"),
                kv,
                steps if every else None,
                dep=dep,
                util=util,
                engine=est_engine,
                calibration=calibration_for(g, est_engine),
            )  # fmt: skip
        )
        engine_rows(results[-1], spec, g, dep, engine, overrides.get("dtype"), pool=named, release=release)
        if not every:  # the same rows again, for their arithmetic alone
            roofline_report(spec, g, shown_b, shown_s, overrides.get("dtype"), kv, steps, dep=dep, util=util)
    _emit(
        fmt,
        lambda: _results_json(results),
        lambda: [roofline_sheet(r) for r in results],
        lambda: [{"model": r.model, "gpu": r.gpu, **row.model_dump()} for r in results for row in r.rows],
        steps,
    )

    def chart():  # noqa: ANN202
        from kvcalc.present.chart import roofline_chart

        return roofline_chart(results)

    _draw(plot, chart, plot_size)


def _complete_compare_items(incomplete: str) -> list[str]:
    """The variants' plain forms, then model names: either may be compared."""
    variants = [v for v in ("mha", "gqa", "mqa", "mla", "swa:4096") if v.startswith(incomplete.lower())]
    return variants + _complete_models(incomplete)


@app.command()
def compare(
    items: Annotated[
        list[str],
        typer.Argument(
            help="Variants (mha, gqa, gqa:4, mqa, mla, mla:512+64, swa:4096, each +fp8/+int4) or model names.",
            autocompletion=_complete_compare_items,
        ),
    ],
    model: Annotated[
        str, typer.Option("--model", "-m", help="Base model for the variants.", autocompletion=_complete_models)
    ] = "70b",
    batch: BatchOpt = "32",
    seq: SeqOpt = "8k",
    kv_dtype: KvDtypeOpt = "bf16",
    fmt: FmtOpt = Fmt.table,
    explain: ExplainOpt = False,
    plot: PlotOpt = None,
    plot_size: PlotSizeOpt = None,
) -> None:
    """KV cache of attention variants or models side by side, each relative to the first."""
    from kvcalc.plan.variants import apply_variant, compare_report, is_variant, split_dtype
    from kvcalc.present.render import compare_grid_sheet, compare_sheet

    _plot_ready(plot, plot_size)
    batches, seqs = parse_range(batch, "--batch"), parse_range(seq, "--seq")
    check_grid("compare --batch x --seq x items", len(batches), len(seqs), len(items))
    if plot is not None:
        from kvcalc.present.chart import MAX_BARS

        if len(batches) * len(seqs) * len(items) > MAX_BARS:
            raise UsageError(
                f"a compare chart draws at most {MAX_BARS} bars, this one would have "
                f"{len(batches) * len(seqs) * len(items):,}",
                hint="fewer items, --batch or --seq values",
            )
    default_kv = normalize_dtype(kv_dtype, KV_DTYPES)
    variants = [is_variant(item) for item in items]
    # NOTE: the base model is read only when a variant needs it; a list of models has no base.
    base = resolve(model).spec if any(variants) else None
    rows = []
    for item, variant in zip(items, variants):
        text, item_kv = split_dtype(item)
        spec = apply_variant(base, item) if variant else resolve(text).spec
        rows.append((item, spec, normalize_dtype(item_kv, KV_DTYPES) if item_kv else default_kv))
    steps: list[str] | None = [] if explain else None
    shown_b, shown_s = map(set, explained(batches, seqs, steps))
    results = [
        compare_report(rows, b, s, base.name if base else None, steps if b in shown_b and s in shown_s else None)
        for s in seqs
        for b in batches
    ]
    _emit(
        fmt,
        lambda: _results_json(results),
        lambda: [compare_sheet(results[0])] if len(results) == 1 else [compare_grid_sheet(results)],
        lambda: [{"batch": r.batch, "seq": r.seq, **row.model_dump()} for r in results for row in r.rows],
        steps,
    )

    def chart():  # noqa: ANN202
        from kvcalc.present.chart import compare_chart

        return compare_chart(results)

    _draw(plot, chart, plot_size)


def _results_json(results: list) -> dict:
    """One result as its JSON object; several (a --batch x --seq grid) as {"results": [...]}."""
    if len(results) == 1:
        return results[0].model_dump(mode="json")
    return {"results": [r.model_dump(mode="json") for r in results]}


# The catalog commands (models, gpus, show, lab) live in cli/catalog.py, the serving commands (fit, generate) in
# cli/serving.py and probe in cli/probe.py; importing them registers them, in this order in --help.
from kvcalc.cli import catalog  # noqa: E402, F401, I001  (registration order is --help order)
from kvcalc.cli import serving  # noqa: E402, F401, I001
from kvcalc.cli import generating  # noqa: E402, F401, I001
from kvcalc.cli import probe  # noqa: E402, F401, I001
from kvcalc.cli import calibrate  # noqa: E402, F401, I001
from kvcalc.cli import plan  # noqa: E402, F401, I001
