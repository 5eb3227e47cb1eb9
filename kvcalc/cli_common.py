"""What every kvcalc command shares: the Typer app and its error boundary, options, output and charts."""

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
from kvcalc.units import KV_DTYPES, WEIGHT_DTYPES, normalize_dtype, parse_count  # noqa: E402


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


def _gpu(name: str):  # noqa: ANN202
    from kvcalc.presets import get_gpu

    return get_gpu(name)
