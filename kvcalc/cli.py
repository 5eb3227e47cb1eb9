"""The kvcalc command line: parse -> core -> render -> print. The one place that prints."""

from __future__ import annotations

import json
import os
import sys
from enum import Enum
from typing import Annotated, Any, Optional

import typer
from typer.core import TyperGroup

# NOTE: pydantic scans every installed distribution's entry points for plugins when it builds
# its first schema (~20 ms); the CLI uses none, so skip the scan. Start-up time is the product.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from kvcalc import __version__  # noqa: E402
from kvcalc.errors import KvcalcError, UsageError  # noqa: E402
from kvcalc.units import KV_DTYPES, WEIGHT_DTYPES, normalize_dtype, parse_count, parse_range  # noqa: E402


class _Boundary(TyperGroup):
    """The single error boundary: a KvcalcError becomes one line on stderr and an exit code."""

    def parse_args(self, ctx, args):  # noqa: ANN001, ANN201
        # `--plot` alone draws in the terminal, `--plot FILE.svg` writes a file: Click options take
        # a value or none, not both, so a bare --plot becomes --plot=- here.
        # What follows is taken as the file when it has a suffix other than .json (a config file).
        args = list(args)
        for i, arg in enumerate(args):
            following = args[i + 1] if i + 1 < len(args) else ""
            suffix = os.path.splitext(following)[1].lower()
            if arg == "--plot" and (following.startswith("-") or suffix in ("", ".json")):
                args[i] = "--plot=-"
        return super().parse_args(ctx, args)

    def invoke(self, ctx):  # noqa: ANN001, ANN201
        try:
            return super().invoke(ctx)
        except KvcalcError as exc:
            hint = f" ({exc.hint})" if exc.hint else ""
            sys.stderr.write(f"kvcalc: error: {exc.message}{hint}\n")
            raise typer.Exit(exc.exit_code) from None


app = typer.Typer(
    cls=_Boundary,
    help="LLM inference memory and speed from the architecture up: KV cache, roofline, fit.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


class Fmt(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kvcalc {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        Optional[bool], typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = None,
) -> None:
    """LLM inference memory and speed from the architecture up: KV cache, roofline, fit."""


# --- shared options ------------------------------------------------------------------

ModelArg = Annotated[str, typer.Argument(help="Preset name or alias, hub id (org/name[@rev]), config.json or folder.")]
FmtOpt = Annotated[Fmt, typer.Option("--format", "-f", help="Output format.")]
BatchOpt = Annotated[
    str, typer.Option("--batch", "-b", help="Sequences: 16, a list 1,8,64, a range 1..64 (doubling) or 8..64+8.")
]
SeqOpt = Annotated[
    str, typer.Option("--seq", "-s", help="Context tokens per sequence: 4096, 8k, 128k, 1m, or a list/range.")
]
KvDtypeOpt = Annotated[str, typer.Option("--kv-dtype", help=f"Cache element type: {', '.join(KV_DTYPES)}.")]
DtypeOpt = Annotated[
    Optional[str], typer.Option("--dtype", help=f"Weight type: {', '.join(WEIGHT_DTYPES)} (default: the model's).")
]
LayersOpt = Annotated[Optional[int], typer.Option("--layers", help="Override the number of layers.")]
KvHeadsOpt = Annotated[Optional[int], typer.Option("--kv-heads", help="Override the KV heads (what-if GQA/MQA).")]
HeadDimOpt = Annotated[Optional[int], typer.Option("--head-dim", help="Override the head dimension.")]
WindowOpt = Annotated[
    Optional[str],
    typer.Option("--window", help="Sliding window in tokens (sets it on sliding layers, or makes full layers slide)."),
]


def _overrides(
    layers: int | None, kv_heads: int | None, head_dim: int | None, window: str | None, dtype: str | None
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim)):
        if value is not None:
            if value <= 0:
                raise UsageError(f"--{key.replace('_', '-')} must be a positive integer, got {value}")
            out[key] = value
    if window is not None:
        out["window"] = parse_count(window, "--window")
    if dtype is not None:
        out["dtype"] = normalize_dtype(dtype, WEIGHT_DTYPES)
    return out


def _model(text: str, overrides: dict[str, Any] | None = None):  # noqa: ANN202
    from kvcalc.resolve import resolve_model

    return resolve_model(text, overrides)


def _emit(fmt: Fmt, payload: Any, sheets: list, csv_rows: list[dict], explanation: list[str] | None = None) -> None:
    """Print a result: JSON from the result models, CSV from raw rows, tables from sheets; with
    --explain, the arithmetic after the table (and under "explanation" in JSON)."""
    from kvcalc.render import to_csv, to_markdown, to_rich

    if fmt == Fmt.json:
        if explanation is not None:
            payload = {**payload, "explanation": explanation}
        typer.echo(json.dumps(payload, indent=2))
    elif fmt == Fmt.csv:
        typer.echo(to_csv(csv_rows))
    elif fmt == Fmt.markdown:
        typer.echo("\n\n".join(to_markdown(s) for s in sheets))
        if explanation:
            typer.echo("\n```\n" + "\n".join(explanation) + "\n```")
    else:
        from rich.console import Console
        from rich.text import Text

        console = Console()
        for sheet in sheets:
            console.print(to_rich(sheet))
        if explanation:
            console.print(Text("How this was computed:", style="bold"))
            for line in explanation:
                console.print(Text(line), soft_wrap=True)


def _dump(results: list) -> dict:
    """One result as its JSON object; several as {"rows": [...]}."""
    if len(results) == 1:
        return results[0].model_dump(mode="json")
    return {"rows": [r.model_dump(mode="json") for r in results]}


ExplainOpt = Annotated[
    bool, typer.Option("--explain", help="Show the arithmetic, step by step, with this run's numbers.")
]
PlotOpt = Annotated[
    Optional[str],
    typer.Option("--plot", help="Draw a chart: alone in the terminal, or to FILE.svg/.png/.pdf (needs kvcalc[plot])."),
]
PlotSizeOpt = Annotated[str, typer.Option("--plot-size", help="Chart file size in pixels, WIDTHxHEIGHT.")]


def _plot_ready(plot: str | None) -> None:
    """Fail before any output when the plot extra is missing."""
    if plot is None:
        return
    from kvcalc import plot as plotting

    plotting.check(plot)


def _draw(plot: str | None, chart_fn, size: str) -> None:  # noqa: ANN001
    if plot is None:
        return
    from kvcalc import plot as plotting

    chart = chart_fn()
    if plot == "-":
        from rich.console import Console

        console = Console()
        color = console.is_terminal and not os.environ.get("NO_COLOR")
        typer.echo(plotting.terminal(chart, width=console.width, color=color))
        return
    from pathlib import Path

    m = __import__("re").fullmatch(r"(\d+)x(\d+)", size.strip().lower())
    if not m or int(m.group(1)) < 100 or int(m.group(2)) < 100:
        raise UsageError(
            f"--plot-size '{size}' is not WIDTHxHEIGHT in pixels", hint="e.g. 1200x800 (each at least 100)"
        )
    path = plotting.save(chart, Path(plot), int(m.group(1)), int(m.group(2)))
    sys.stderr.write(f"kvcalc: chart written to {path}\n")


# --- commands --------------------------------------------------------------------------


@app.command()
def cache(
    model: ModelArg,
    batch: BatchOpt = "1",
    seq: SeqOpt = "4096",
    kv_dtype: KvDtypeOpt = "bf16",
    gpu: Annotated[Optional[str], typer.Option("--gpu", "-g", help="Show the share of this GPU's memory.")] = None,
    tp: Annotated[int, typer.Option("--tp", help="Tensor-parallel ranks: show the cache of one rank.")] = 1,
    fmt: FmtOpt = Fmt.table,
    explain: ExplainOpt = False,
    plot: PlotOpt = None,
    plot_size: PlotSizeOpt = "1000x600",
    layers: LayersOpt = None,
    kv_heads: KvHeadsOpt = None,
    head_dim: HeadDimOpt = None,
    window: WindowOpt = None,
    dtype: DtypeOpt = None,
) -> None:
    """KV-cache size of MODEL: bytes per token, per layer type, and in total for batch x seq."""
    from kvcalc.kvcache import cache_report
    from kvcalc.render import cache_sheet

    _plot_ready(plot)
    batches, seqs = parse_range(batch, "--batch"), parse_range(seq, "--seq")
    kv = normalize_dtype(kv_dtype, KV_DTYPES)
    if tp < 1:
        raise UsageError(f"--tp must be at least 1, got {tp}")
    overrides = _overrides(layers, kv_heads, head_dim, window, dtype)
    spec = _model(model, overrides).spec
    gpu_spec = _gpu(gpu) if gpu else None
    steps: list[str] | None = [] if explain else None
    results = []
    for s in seqs:
        for b in batches:
            r = cache_report(spec, b, s, kv, tp, steps=steps)
            if gpu_spec:
                r.gpu, r.gpu_memory_bytes = gpu_spec.name, gpu_spec.capacity_bytes
                r.gpu_memory_share = r.total_bytes / gpu_spec.capacity_bytes
                if steps is not None:
                    steps.append(
                        f"share of one {gpu_spec.name}: {r.total_bytes:,} / {gpu_spec.capacity_bytes:,} B = {r.gpu_memory_share:.1%}"
                    )
            results.append(r)
    rows = [{k: v for k, v in r.model_dump().items() if k != "layers"} for r in results]
    _emit(fmt, _dump(results), [cache_sheet(results)], rows, steps)

    def chart():  # noqa: ANN202
        from kvcalc.chart import cache_chart
        from kvcalc.params import weight_bytes_resident

        weights = weight_bytes_resident(spec, overrides.get("dtype")) if gpu_spec else None
        top = max(max(seqs) * 4, 128 * 1024)
        return cache_chart(
            spec,
            batches,
            kv,
            top,
            gpu_spec.capacity_bytes if gpu_spec else None,
            weights,
            gpu_spec.name if gpu_spec else None,
        )

    _draw(plot, chart, plot_size)


def _gpu(name: str):  # noqa: ANN202
    from kvcalc.presets import get_gpu

    return get_gpu(name)


@app.command()
def roofline(
    model: ModelArg,
    gpu: Annotated[
        str, typer.Option("--gpu", "-g", help="GPU preset, or several: a100,h100,h200 (kvcalc gpus lists them).")
    ],
    batch: BatchOpt = "1..64",
    seq: SeqOpt = "1024",
    kv_dtype: KvDtypeOpt = "bf16",
    fmt: FmtOpt = Fmt.table,
    explain: ExplainOpt = False,
    plot: PlotOpt = None,
    plot_size: PlotSizeOpt = "1000x600",
    layers: LayersOpt = None,
    kv_heads: KvHeadsOpt = None,
    head_dim: HeadDimOpt = None,
    window: WindowOpt = None,
    dtype: DtypeOpt = None,
) -> None:
    """Decode roofline of MODEL on a GPU: bytes, FLOPs, intensity, and time and tokens/s ceilings."""
    from kvcalc.render import roofline_sheet
    from kvcalc.roofline import roofline_report

    _plot_ready(plot)
    batches, seqs = parse_range(batch, "--batch"), parse_range(seq, "--seq")
    kv = normalize_dtype(kv_dtype, KV_DTYPES)
    overrides = _overrides(layers, kv_heads, head_dim, window, dtype)
    spec = _model(model, overrides).spec
    gpu_specs = [_gpu(name) for name in gpu.split(",") if name.strip()]
    steps: list[str] | None = [] if explain else None
    results = []
    for g in gpu_specs:
        if steps is not None and len(gpu_specs) > 1:
            steps.append(f"on {g.name}:")
        results.append(roofline_report(spec, g, batches, seqs, overrides.get("dtype"), kv, steps))
    rows = [{"model": r.model, "gpu": r.gpu, **row.model_dump()} for r in results for row in r.rows]
    payload = (
        results[0].model_dump(mode="json")
        if len(results) == 1
        else {"results": [r.model_dump(mode="json") for r in results]}
    )
    _emit(fmt, payload, [roofline_sheet(r) for r in results], rows, steps)

    def chart():  # noqa: ANN202
        from kvcalc.chart import roofline_chart

        return roofline_chart(results)

    _draw(plot, chart, plot_size)


@app.command()
def compare(
    items: Annotated[
        list[str],
        typer.Argument(
            help="Variants (mha, gqa, gqa:4, mqa, mla, mla:512+64, swa:4096, each +fp8/+int4) or model names."
        ),
    ],
    model: Annotated[str, typer.Option("--model", "-m", help="Base model for the variants.")] = "70b",
    batch: Annotated[str, typer.Option("--batch", "-b", help="Sequences.")] = "32",
    seq: Annotated[str, typer.Option("--seq", "-s", help="Context tokens per sequence (8k = 8192).")] = "8192",
    kv_dtype: KvDtypeOpt = "bf16",
    fmt: FmtOpt = Fmt.table,
    explain: ExplainOpt = False,
    plot: PlotOpt = None,
    plot_size: PlotSizeOpt = "1000x600",
) -> None:
    """KV cache of attention variants or models side by side, each relative to the first."""
    from kvcalc.render import compare_sheet
    from kvcalc.variants import apply_variant, compare_report, is_variant, split_dtype

    _plot_ready(plot)
    b, s = parse_count(batch, "--batch"), parse_count(seq, "--seq")
    default_kv = normalize_dtype(kv_dtype, KV_DTYPES)
    base = _model(model).spec
    rows = []
    for item in items:
        text, item_kv = split_dtype(item)
        spec = apply_variant(base, item) if is_variant(item) else _model(text).spec
        rows.append((item, spec, item_kv or default_kv))
    steps: list[str] | None = [] if explain else None
    result = compare_report(rows, b, s, base.name, steps)
    _emit(fmt, result.model_dump(mode="json"), [compare_sheet(result)], [r.model_dump() for r in result.rows], steps)

    def chart():  # noqa: ANN202
        from kvcalc.chart import compare_chart

        return compare_chart(result)

    _draw(plot, chart, plot_size)


@app.command()
def models(fmt: FmtOpt = Fmt.table) -> None:
    """The model presets."""
    from kvcalc.kvcache import bytes_per_token
    from kvcalc.params import param_counts
    from kvcalc.presets import MODEL_DIR, load_all
    from kvcalc.render import models_sheet

    rows = []
    for spec in load_all(MODEL_DIR):
        counts = param_counts(spec)
        kinds = sorted({run.kind.value for run, _ in spec.layer_groups()})
        rows.append(
            {
                "name": spec.name,
                "aliases": spec.aliases,
                "num_layers": spec.num_layers,
                "num_heads": spec.num_heads,
                "kv_heads": spec.kv_heads,
                "head_dim": spec.head_dim_effective,
                "attention": "+".join(kinds),
                "params": spec.params or counts.total,
                "active_params": spec.params or counts.active,
                "kv_bytes_per_token_bf16": bytes_per_token(spec, "bf16"),
            }
        )
    csv_rows = [{**r, "aliases": " ".join(r["aliases"])} for r in rows]
    _emit(fmt, {"rows": rows}, [models_sheet(rows)], csv_rows)


@app.command()
def gpus(fmt: FmtOpt = Fmt.table) -> None:
    """The GPU presets (dense peak FLOP/s, HBM bandwidth, memory) and their sources."""
    from kvcalc.presets import GPU_DIR, load_all
    from kvcalc.render import gpus_sheet

    rows = [
        {
            "name": g.name,
            "full_name": g.full_name,
            "aliases": g.aliases,
            "memory_bytes": g.memory_bytes,
            "capacity_bytes": g.capacity_bytes,
            "bandwidth_bytes_per_s": g.bandwidth_bytes_per_s,
            "peak_dense_tflop_per_s": g.peak_dense_tflop_per_s,
            "sources": g.sources,
        }
        for g in load_all(GPU_DIR)
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
) -> None:
    """The resolved spec of MODEL, where it came from, and its parameter counts."""
    from kvcalc.kvcache import bytes_per_token
    from kvcalc.params import param_counts
    from kvcalc.render import show_sheet

    resolved = _model(model, _overrides(layers, kv_heads, head_dim, window, dtype))
    counts = param_counts(resolved.spec)
    payload = {
        "source": resolved.source,
        "location": resolved.location,
        "spec": resolved.spec.model_dump(mode="json"),
        "params": counts.model_dump(),
        "kv_bytes_per_token_bf16": bytes_per_token(resolved.spec, "bf16"),
    }
    sheet = show_sheet(resolved, counts)
    _emit(fmt, payload, [sheet], [{"field": r[0], "value": r[1]} for r in sheet.rows])


@app.command()
def lab(
    names: Annotated[
        Optional[list[str]],
        typer.Argument(
            help="Checks to run (default: all but speed): causality, cached-equals-full, mask, gqa-equals-mha, pooling, positions, savings, speed."
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random lab model and tokens.")] = 0,
    bench: Annotated[
        bool, typer.Option("--bench", help="Also time naive against cached generation (64, 128, 255 tokens).")
    ] = False,
    fmt: FmtOpt = Fmt.table,
    plot: PlotOpt = None,
    plot_size: PlotSizeOpt = "1000x600",
) -> None:
    """Demonstrate the premises on a tiny float64 decoder: the cache is exact, and what it saves (needs kvcalc[lab])."""
    from kvcalc.lab import run_lab
    from kvcalc.render import lab_sheet

    _plot_ready(plot)
    result = run_lab(names or [], seed, bench)
    _emit(fmt, result.model_dump(mode="json"), [lab_sheet(result)], [c.model_dump() for c in result.checks])

    def chart():  # noqa: ANN202
        from kvcalc.chart import Chart, Series

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


# The serving commands (fit, generate) live in cli_planner.py; importing it registers them.
from kvcalc import cli_planner  # noqa: E402, F401
