"""The catalog commands: the model and GPU presets (models, gpus), one resolved spec (show), the premises (lab)."""

# NOTE: no `from __future__ import annotations` in the CLI modules: Typer would eval every string
# annotation of the command it runs (about 100 evals, 2 ms of start-up); real ones cost nothing.

from typing import Annotated, Optional

import typer

from kvcalc.cli.common import (  # noqa: F401  (app: the Typer app kvcalc.__main__ runs)
    BatchOpt,
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
    SeqOpt,
    WindowOpt,
    _complete_gpus,
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
from kvcalc.errors import KvcalcError, UsageError
from kvcalc.plan.inputs import cross_overrides, resolve, what_ifs


@app.command()
def models(fmt: FmtOpt = Fmt.table) -> None:
    """The model presets: built-in, then the user's (kvcalc.model.presets.user_dir(): $KVCALC_PRESETS/models)."""
    from kvcalc.cost.kvcache import bytes_per_token
    from kvcalc.cost.params import param_counts
    from kvcalc.model.presets import MODEL_DIR, listing
    from kvcalc.present.render import models_sheet

    rows = []
    for spec, origin, location in listing(MODEL_DIR):
        # NOTE: a preset may leave its parameters unknown (no vocab_size): listed, not a reason to fail
        counts = None if spec.params_unknown else param_counts(spec)
        kinds = sorted({run.kind.value for run, _ in spec.layer_groups()})
        rows.append(
            {
                "name": spec.name,
                "origin": origin,
                "location": location,
                "aliases": spec.aliases,
                "num_layers": spec.num_layers,
                "num_heads": spec.num_heads,
                # NOTE: an MLA cache holds one latent per token, not KV heads (as in `compare` and `cache`)
                "kv_heads": None if spec.is_mla else spec.cached_kv_heads,
                "head_dim": spec.head_dim_effective,
                "attention": "+".join(kinds),
                "params": spec.params or (counts.total if counts else None),
                "active_params": spec.params or (counts.active if counts else None),
                "kv_bytes_per_token_bf16": bytes_per_token(spec, "bf16"),
            }
        )
    csv_rows = [{**r, "aliases": " ".join(r["aliases"])} for r in rows]
    _emit(fmt, {"rows": rows}, [models_sheet(rows)], csv_rows)


@app.command()
def gpus(fmt: FmtOpt = Fmt.table) -> None:
    """The GPU presets (dense peak FLOP/s, HBM bandwidth, memory) and their sources; user presets marked."""
    from kvcalc.model.presets import GPU_DIR, listing
    from kvcalc.present.render import gpus_sheet

    rows = [
        {
            "name": g.name,
            "origin": origin,
            "location": location,
            "full_name": g.full_name,
            "aliases": g.aliases,
            "memory_bytes": g.memory_bytes,
            "capacity_bytes": g.capacity_bytes,
            "bandwidth_bytes_per_s": g.bandwidth_bytes_per_s,
            "peak_dense_tflop_per_s": g.peak_dense_tflop_per_s,
            "sources": g.sources,
        }
        for g, origin, location in listing(GPU_DIR)
    ]
    csv_rows = [
        {
            **{k: v for k, v in r.items() if k not in ("peak_dense_tflop_per_s", "sources", "aliases")},
            **{
                f"{d}_tflop_per_s": r["peak_dense_tflop_per_s"].get(d)
                for d in ("fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp4")
            },
        }
        for r in rows
    ]
    _emit(fmt, {"rows": rows}, [gpus_sheet(rows)], csv_rows)


@app.command()
def show(
    model: ModelArg,
    fmt: FmtOpt = Fmt.table,
    layers: LayersOpt = None,
    kv_heads: KvHeadsOpt = None,
    head_dim: HeadDimOpt = None,
    window: WindowOpt = None,
    dtype: DtypeOpt = None,
    images: ImagesOpt = None,
    encoder_seq: EncoderSeqOpt = None,
) -> None:
    """The resolved spec of MODEL, where it came from, and its parameter counts."""
    from kvcalc.cost.kvcache import bytes_per_token
    from kvcalc.cost.params import param_counts
    from kvcalc.present.render import show_sheet

    resolved = resolve(
        model, {**what_ifs(layers, kv_heads, head_dim, window, dtype), **cross_overrides(images, encoder_seq)}
    )
    # NOTE: a config without vocab_size / intermediate_size still has a cache: show it, parameters unknown.
    counts = None if resolved.spec.params_unknown else param_counts(resolved.spec)
    payload = {
        "source": resolved.source,
        "location": resolved.location,
        "spec": resolved.spec.model_dump(mode="json"),
        "params": counts.model_dump() if counts else None,
        "kv_bytes_per_token_bf16": bytes_per_token(resolved.spec, "bf16"),
        # no layer attends (Mamba): spec.num_heads is then a placeholder
        "attention_free": resolved.spec.attention_free,
    }
    sheet = show_sheet(resolved, counts, payload["kv_bytes_per_token_bf16"])
    _emit(fmt, payload, [sheet], [{"field": r[0], "value": r[1]} for r in sheet.rows])


@app.command()
def lab(
    names: Annotated[
        Optional[list[str]],
        typer.Argument(
            help="Checks to run (default: all but speed): causality, cached-equals-full, mask, gqa-equals-mha, pooling, positions, savings, cache-size, roofline, speed."
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random lab model and tokens.")] = 0,
    bench: Annotated[
        bool, typer.Option("--bench", help="Also time naive against cached generation (64, 128, 255 tokens).")
    ] = False,
    fmt: FmtOpt = Fmt.table,
    plot: PlotOpt = None,
    plot_size: PlotSizeOpt = None,
) -> None:
    """Demonstrate the premises on a tiny float64 decoder: the cache is exact, what it saves, its size at real
    model shapes, and decode against prefill on this machine's measured roofs (needs kvcalc[lab])."""
    from kvcalc.lab.checks import run_lab
    from kvcalc.present.render import lab_sheet

    _plot_ready(plot, plot_size)
    if not 0 <= seed < 2**32:
        raise UsageError(f"--seed must be from 0 to {2**32 - 1:,}, got {seed}")
    if plot is not None and not bench:
        raise UsageError("the lab chart shows the speed check", hint="add --bench")
    result = run_lab(names or [], seed, bench)
    _emit(fmt, result.model_dump(mode="json"), [lab_sheet(result)], [c.model_dump() for c in result.checks])

    def chart():  # noqa: ANN202
        from kvcalc.present.chart import Chart, Series

        if not result.bench:
            raise UsageError("the lab chart shows the speed check", hint="add --bench")
        xs = [float(r["tokens"]) for r in result.bench]
        return Chart(
            title="kvcalc lab: time per generated token",
            xlabel="tokens generated",
            ylabel="ms per token (log)",
            xlog=False,
            ylog=True,
            series=[
                Series(
                    "naive (recompute the prefix)",
                    xs,
                    [r["naive_s_per_token"] * 1e3 for r in result.bench],
                    gid="naive",
                ),
                Series("with a KV cache", xs, [r["cached_s_per_token"] * 1e3 for r in result.bench], gid="cached"),
            ],
        )

    _draw(plot, chart, plot_size)
    if not result.passed:
        failed = ", ".join(c.name for c in result.checks if not c.passed)
        raise KvcalcError(f"lab checks failed: {failed}")
