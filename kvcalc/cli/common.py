"""What every kvcalc command shares: the Typer app and its error boundary, options, output and charts."""

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
from kvcalc.errors import DoesNotFitError, KvcalcError, UsageError  # noqa: E402
from kvcalc.units import KV_DTYPES, WEIGHT_DTYPES  # noqa: E402

# The exit status of a result that is printed but does not hold: `fit` with a combination that does not fit or
# misses a goal, a static `generate` whose batch does not fit (table and JSON still on stdout); the status a served
# `generate` exits with, printing nothing, where its engine would not start (DoesNotFitError).
EXIT_DOES_NOT_FIT = DoesNotFitError.exit_code


def _plot_words(args: list[str]) -> list[str]:
    """Words after a bare `--plot` that parse_args leaves as arguments (no chart-file suffix)."""
    return [
        args[i + 1]
        for i, arg in enumerate(args[:-1])
        if arg == "--plot" and not args[i + 1].startswith("-") and _is_plot_word(args[i + 1])
    ]


def _is_plot_word(following: str) -> bool:
    """Not a chart file: no suffix, .json (a config), or a version dot in a model name (llama-3.1-8b,
    Qwen/Qwen2.5-7B, mistral-7b-v0.3): `--plot llama-3.1-8b` left the command without its MODEL."""
    ext = os.path.splitext(following)[1]
    return ext.lower() in ("", ".json") or not __import__("re").fullmatch(r"\.[A-Za-z]{2,5}", ext)


def flags(names: list[str]) -> str:
    """Option names as the command line spells them: ["max_num_seqs", "requests"] -> "--max-num-seqs, --requests"."""
    return ", ".join("--" + n.replace("_", "-") for n in names)


def _error_line(message: str, hint: str | None = None) -> None:
    # NOTE: one line, always: a message from a file or a library may hold newlines.
    # A hint in parentheses, unless it holds parentheses itself: then after a semicolon, never "((".
    if hint:
        message += f"; {hint}" if "(" in hint or ")" in hint else f" ({hint})"
    text = " ".join(message.split())
    sys.stderr.write(f"kvcalc: error: {text}\n")


class _Boundary(TyperGroup):
    """The single error boundary: bad input of any kind becomes one line on stderr and an exit code,
    and nothing on stdout (Click's usage errors included: they would print three lines)."""

    def parse_args(self, ctx, args):  # noqa: ANN001, ANN201
        # `--plot` alone draws in the terminal, `--plot FILE.svg` writes a file: Click options take
        # a value or none, not both, so a bare --plot becomes --plot=- here.
        # What follows is taken as the file when it has a suffix other than .json (a config file).
        args = list(args)
        for i, arg in enumerate(args):
            following = args[i + 1] if i + 1 < len(args) else ""
            if arg == "--plot" and following != "-" and (following.startswith("-") or _is_plot_word(following)):
                args[i] = "--plot=-"
        return super().parse_args(ctx, args)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):  # noqa: ANN001, ANN201
        try:  # NOTE: Typer 0.29 vendors Click as typer._click; its exceptions are not click's
            from typer._click import exceptions as click
        except ImportError:  # pragma: no cover
            from click import exceptions as click

        argv = list(sys.argv[1:] if args is None else args)
        if not standalone_mode:
            return super().main(argv, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except KvcalcError as exc:
            _error_line(exc.message, exc.hint)
            sys.exit(exc.exit_code)
        except click.NoArgsIsHelpError as exc:
            typer.echo(exc.ctx.get_help() if exc.ctx else "")
            sys.exit(0)
        except click.UsageError as exc:
            message = exc.format_message()
            stray = [w for w in _plot_words(argv) if f"({w}" in message or f" {w})" in message]
            if "unexpected extra argument" in message and stray:
                _error_line(
                    f"--plot '{stray[0]}' is not a chart file",
                    "a file needs a suffix: .svg, .png or .pdf; --plot alone draws in the terminal",
                )
                sys.exit(2)
            command = exc.ctx.command_path if exc.ctx else "kvcalc"
            _error_line(message, f"see `{command} --help`")
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            _error_line(exc.format_message())
            sys.exit(exc.exit_code)
        except typer.Abort:
            _error_line("aborted")
            sys.exit(1)
        except OSError as exc:
            # A file the system refused (name too long, permission, a folder where a file was meant):
            # the user's input, not a bug.
            if os.environ.get("KVCALC_DEBUG"):
                raise
            name = str(exc.filename or "")
            where = f": {name[:60]}…" if len(name) > 60 else (f": {name}" if name else "")
            _error_line(f"{exc.strerror or exc}{where}")
            sys.exit(1)
        except Exception as exc:  # noqa: BLE001
            # NOTE: a bug must still not print a traceback at a user; KVCALC_DEBUG=1 shows it.
            if os.environ.get("KVCALC_DEBUG"):
                raise
            _error_line(f"internal error: {type(exc).__name__}: {exc}", "a bug in kvcalc; KVCALC_DEBUG=1 shows where")
            sys.exit(70)
        sys.exit(code if isinstance(code, int) else 0)


class _App(typer.Typer):
    """Typer builds a Click command for every registered function (signatures, annotations, options)
    on each run; a run that names its command builds only that one (start-up time is the product)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        argv = kwargs.get("args", sys.argv[1:])
        first = next((a for a in argv if not a.startswith("-")), None) if argv else None
        by_name = {(c.name or c.callback.__name__).replace("_", "-"): c for c in self.registered_commands if c.callback}
        if first not in by_name or any(k.endswith("_COMPLETE") for k in os.environ) or argv[0].startswith("-"):
            return super().__call__(*args, **kwargs)
        every = self.registered_commands
        self.registered_commands = [by_name[first]]
        try:
            return super().__call__(*args, **kwargs)
        finally:
            self.registered_commands = every


app = _App(
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


# --- shell completion: file listings only, never a YAML parse (a completion runs per keypress) ---


def _complete_models(incomplete: str) -> list[str]:
    from kvcalc.model.presets import MODEL_DIR, all_names

    return [name for name in all_names(MODEL_DIR) if name.startswith(incomplete.lower())]


def _complete_gpus(incomplete: str) -> list[str]:
    """GPU names, also after a comma (--gpu a100,h1<TAB>)."""
    from kvcalc.model.presets import GPU_DIR, all_names

    done, comma, last = incomplete.rpartition(",")
    return [done + comma + name for name in all_names(GPU_DIR) if name.startswith(last.lower())]


def _complete_kv_dtypes(incomplete: str) -> list[str]:
    return [d for d in KV_DTYPES if d.startswith(incomplete.lower())]


def _complete_weight_dtypes(incomplete: str) -> list[str]:
    return [d for d in WEIGHT_DTYPES if d.startswith(incomplete.lower())]


# --- shared options ------------------------------------------------------------------

ModelArg = Annotated[
    str,
    typer.Argument(
        help="Preset name or alias, hub id (org/name[@rev]), config.json or folder.", autocompletion=_complete_models
    ),
]
FmtOpt = Annotated[Fmt, typer.Option("--format", "-f", help="Output format.")]
BatchOpt = Annotated[
    str, typer.Option("--batch", "-b", help="Sequences: 16, a list 1,8,64, a range 1..64 (doubling) or 8..64+8.")
]
SeqOpt = Annotated[
    str,
    typer.Option(
        "--seq",
        "-s",
        help="Context tokens per sequence: 4096, 8k, 128k, 1m, or a list/range (default 8k = 8,192, every command's).",
    ),
]
KvDtypeOpt = Annotated[
    str,
    typer.Option("--kv-dtype", help=f"Cache element type: {', '.join(KV_DTYPES)}.", autocompletion=_complete_kv_dtypes),
]
EngineKvDtypeOpt = Annotated[
    Optional[str],
    typer.Option(
        "--kv-dtype",
        help=f"Cache element type: {', '.join(KV_DTYPES)}. Default: what the --engine caches in when given no KV "
        "dtype (the model's 16-bit type; SGLang: fp8 for a DeepSeek-sparse-attention model on Blackwell).",
        autocompletion=_complete_kv_dtypes,
    ),
]
DtypeOpt = Annotated[
    Optional[str],
    typer.Option(
        "--dtype",
        help=f"Weight type: {', '.join(WEIGHT_DTYPES)}, or a llama.cpp quant such as q4_k_m or q4_0, priced by "
        "the per-tensor mix llama-quantize writes (default: the model's).",
        autocompletion=_complete_weight_dtypes,
    ),
]
LayersOpt = Annotated[Optional[int], typer.Option("--layers", help="Override the number of layers.")]
KvHeadsOpt = Annotated[Optional[int], typer.Option("--kv-heads", help="Override the KV heads (what-if GQA/MQA).")]
HeadDimOpt = Annotated[Optional[int], typer.Option("--head-dim", help="Override the head dimension.")]
WindowOpt = Annotated[
    Optional[str],
    typer.Option("--window", help="Sliding window in tokens (sets it on sliding layers, or makes full layers slide)."),
]

ImagesOpt = Annotated[
    Optional[int],
    typer.Option("--images", help="Images per sequence for cross-attention vision models (default 1)."),
]
EncoderSeqOpt = Annotated[
    Optional[str],
    typer.Option(
        "--encoder-seq",
        help="Encoder tokens cross-attention holds (encoder-decoders; default: as many as the decoder's sequence).",
    ),
]


_stdout_is_data = False  # the last _emit wrote JSON or CSV: stdout must stay parseable


def _emit(fmt: Fmt, payload: Any, sheets: Any, csv_rows: Any, explanation: list[str] | None = None) -> None:
    """Print a result: JSON from the result models, CSV from raw rows, tables from sheets; with
    --explain, the arithmetic after the table (and under "explanation" in JSON). Each of payload,
    sheets and csv_rows may be a function that builds it: only the format asked for is built (a
    50,000-row grid spent a second dumping JSON and CSV rows for a table)."""
    from kvcalc.present.sheet import to_csv, to_markdown, to_rich

    global _stdout_is_data
    _stdout_is_data = fmt in (Fmt.json, Fmt.csv)  # then a terminal chart goes to stderr (_draw)
    if fmt == Fmt.json:
        import json

        payload = payload() if callable(payload) else payload
        if explanation is not None:
            payload = {**payload, "explanation": explanation}
        typer.echo(json.dumps(payload, indent=2))
        return
    if fmt == Fmt.csv:
        typer.echo(to_csv(csv_rows() if callable(csv_rows) else csv_rows))
        return
    sheets = sheets() if callable(sheets) else sheets
    if fmt == Fmt.markdown:
        typer.echo("\n\n".join(to_markdown(s) for s in sheets))
        if explanation:
            typer.echo("\n```\n" + "\n".join(explanation) + "\n```")
    else:
        from rich.text import Text

        console = _console()
        width = None if console.width >= UNBOUNDED else console.width
        for sheet in sheets:
            console.print(to_rich(sheet, width))
        if explanation:
            console.print(Text("How this was computed:", style="bold"))
            for line in explanation:
                console.print(Text(line), soft_wrap=True)


UNBOUNDED = 100_000


def _console(stderr: bool = False):  # noqa: ANN202
    """Rich's console; when stdout is not a terminal and COLUMNS is unset, tables keep their natural
    width instead of Rich's 80 columns (a pipe or file has no width to wrap to)."""
    from rich.console import Console

    console = Console(stderr=stderr)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console = Console(width=UNBOUNDED, stderr=stderr)
    return console


def _dump(results: list) -> dict:
    """One result as its JSON object; several as {"rows": [...]}."""
    if len(results) == 1:
        return results[0].model_dump(mode="json")
    return {"rows": [r.model_dump(mode="json") for r in results]}


# NOTE: --explain walks through every row of a grid up to this many rows; a larger grid gets the
# first and last --batch and --seq values only (50,000 rows explained one by one printed 250,000
# lines in 18 s, compare's 48,000 in 53 s).
EXPLAIN_ROWS = 16


def explained(batches: list[int], seqs: list[int], steps: list[str] | None) -> tuple[list[int], list[int]]:
    """The --batch and --seq values whose arithmetic --explain shows (all, for a small grid)."""
    if steps is None or len(batches) * len(seqs) <= EXPLAIN_ROWS:
        return batches, seqs
    b, s = sorted({batches[0], batches[-1]}), sorted({seqs[0], seqs[-1]})
    steps.append(
        f"(the arithmetic of {len(b) * len(s)} of the {len(batches) * len(seqs):,} --batch x --seq rows: "
        "the first and last value of each)"
    )
    return b, s


ExplainOpt = Annotated[
    bool, typer.Option("--explain", help="Show the arithmetic, step by step, with this run's numbers.")
]
PlotOpt = Annotated[
    Optional[str],
    typer.Option("--plot", help="Draw a chart: alone in the terminal, or to FILE.svg/.png/.pdf (needs kvcalc[plot])."),
]
PlotSizeOpt = Annotated[
    Optional[str], typer.Option("--plot-size", help="Chart file size in pixels, WIDTHxHEIGHT (default 1000x600).")
]
DEFAULT_PLOT_SIZE = "1000x600"
MAX_PLOT_PIXELS = 10_000  # per side: a 10,000 x 10,000 PNG is 400 MB in memory; larger ones ran out


def _plot_pixels(size: str) -> tuple[int, int]:
    m = __import__("re").fullmatch(r"\s*(\d{1,9})\s*x\s*(\d{1,9})\s*", size.lower())
    if not m:
        raise UsageError(f"--plot-size '{size}' is not WIDTHxHEIGHT in pixels", hint="e.g. 1200x800")
    width, height = int(m.group(1)), int(m.group(2))
    if not (100 <= width <= MAX_PLOT_PIXELS and 100 <= height <= MAX_PLOT_PIXELS):
        raise UsageError(
            f"--plot-size {size}: each side must be 100 to {MAX_PLOT_PIXELS:,} pixels", hint="e.g. 1200x800"
        )
    return width, height


def _plot_ready(plot: str | None, size: str | None = None) -> None:
    """Before any output: the chart can be drawn and written (suffix, library, folder, size)."""
    size = None if size == DEFAULT_PLOT_SIZE else size  # a command that still spells out the default
    if plot is None:
        if size is not None:
            raise UsageError("--plot-size needs --plot FILE", hint="e.g. --plot chart.png --plot-size 1200x800")
        return
    from kvcalc.present import plot as plotting

    plotting.check(plot)
    if plot == "-":
        if size is not None:
            raise UsageError(
                "--plot-size sets a chart file's pixels; the terminal chart takes the terminal's width",
                hint="write a file: --plot chart.png",
            )
        return
    from pathlib import Path

    path = Path(plot).expanduser()
    folder = path.parent
    if not folder.is_dir():
        raise UsageError(f"cannot write the chart to {plot}: folder '{folder}' does not exist")
    if path.is_dir():
        raise UsageError(f"cannot write the chart to {plot}: it is a folder")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"cannot write the chart to {plot}: permission denied")
    _plot_pixels(DEFAULT_PLOT_SIZE if size is None else size)


def _draw(plot: str | None, chart_fn, size: str | None = None) -> None:  # noqa: ANN001
    if plot is None:
        return
    from kvcalc.present import plot as plotting

    chart = chart_fn()
    if plot == "-":
        # NOTE: after JSON or CSV the chart goes to stderr, so `json.loads(stdout)` still reads the answer.
        console = _console(stderr=_stdout_is_data)
        color = console.is_terminal and not os.environ.get("NO_COLOR")
        width = 100 if console.width >= UNBOUNDED else min(console.width, 200)
        typer.echo(plotting.terminal(chart, width=width, color=color), err=_stdout_is_data)
        return
    from pathlib import Path

    width, height = _plot_pixels(DEFAULT_PLOT_SIZE if size is None else size)
    try:
        path = plotting.save(chart, Path(plot).expanduser(), width, height)
    except OSError as exc:
        raise KvcalcError(f"cannot write the chart to {plot}: {exc.strerror or exc}") from None
    sys.stderr.write(f"kvcalc: chart written to {path}\n")


def _gpu_names(text: str | None, what: str = "--gpu") -> list[str]:
    from kvcalc.units import parse_names

    return [] if text is None else parse_names(text, what)


def _check_planner(
    *,
    tp: int | None = None,
    gpus: int | None = None,
    tpot_ms: float | None = None,
    ttft_ms: float | None = None,
    max_batched_tokens: int | None = None,
) -> None:
    """fit/generate options that Typer parses but whose range it does not check (NaN, inf, 0, < 0)."""
    import math

    for flag, value in (("--tp", tp), ("--gpus", gpus), ("--max-batched-tokens", max_batched_tokens)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be at least 1, got {value}")
    for flag, value in (("--tpot-ms", tpot_ms), ("--ttft-ms", ttft_ms)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise UsageError(f"{flag} must be a positive number of milliseconds, got {value}")


def _gpu(name: str):  # noqa: ANN202
    from kvcalc.model.presets import get_gpu

    return get_gpu(name)
