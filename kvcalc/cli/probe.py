"""`kvcalc probe` (registered on cli.app): measure this machine, compare with a preset, save it as one."""

import sys
from enum import Enum
from typing import Annotated, Optional

import typer

from kvcalc.cli.common import Fmt, FmtOpt, _complete_gpus, _emit, _gpu, app
from kvcalc.units import fmt_rate


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    gpu = "gpu"


def _progress():  # noqa: ANN202
    """A progress display on stderr: a bar on a terminal, one line per kernel otherwise."""
    if sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn

        bar = Progress(
            TextColumn("probe: {task.description}"), BarColumn(), console=Console(stderr=True), transient=True
        )
        tasks: dict[str, int] = {}

        def update(what: str, done: int, total: int) -> None:
            if what not in tasks:
                tasks[what] = bar.add_task(what, total=total)
            bar.update(tasks[what], completed=done, total=total)

        return bar, update

    def line(what: str, done: int, total: int) -> None:
        if done == total:
            sys.stderr.write(f"kvcalc probe: {what}: {total} runs\n")

    return None, line


def _sheets(result) -> list:  # noqa: ANN001
    from kvcalc.present.render import Sheet  # NOTE: here, not at import: every command's start-up imports this module

    def flops(v: float) -> str:
        return f"{v / 1e12:,.3g} TFLOP/s" if v >= 1e12 else f"{v / 1e9:,.3g} GFLOP/s"

    sheet = Sheet(
        title=f"Measured on {result.device} ({result.backend}, {result.threads} "
        f"{'threads' if result.backend.startswith('cpu') else 'SMs/CUs'})",
        columns=["kernel", "runs", "best", "median", "spread", "preset\npeak", "best /\npeak"],
        text_columns=(0,),
    )
    for s in result.bandwidth + result.matmul:
        is_bw = s.kernel != "matmul"
        peak = (
            result.preset_bandwidth_bytes_per_s if is_bw else (result.preset_peak_tflop_per_s.get(s.dtype) or 0) * 1e12
        )
        show = fmt_rate if is_bw else flops
        sheet.rows.append(
            [
                s.kernel if is_bw else f"matmul {s.dtype}",
                str(len(s.seconds)),
                show(s.best),
                show(s.median),
                f"{s.spread:.0%}",
                show(peak) if peak else "-",
                f"{s.best / peak:.3g}" if peak else "-",
            ]
        )
    sizes = dict.fromkeys(s.size for s in result.bandwidth + result.matmul)
    sheet.notes.append("Sizes: " + "; ".join(sizes) + ".")
    sheet.notes.append(
        f"Achieved bandwidth (best kernel): {fmt_rate(result.bandwidth_bytes_per_s)}. Spread = (best - worst) / median."
    )
    if result.preset:
        mfu = ", ".join(f"{d} {v:.3g}" for d, v in result.mfu.items())
        sheet.notes.append(
            f"Against the {result.preset} preset ({result.preset_match}): bandwidth {result.mbu:.3g} of its peak"
            + (f", matmul {mfu}" if mfu else "")
            + ". These ratios are what --mbu / --mfu (or one --efficiency) mean for that preset."
        )
    else:
        sheet.notes.append("No matching preset (a CPU has none): measured figures alone; --gpu NAME compares.")
    if result.quick:
        sheet.notes.append("--quick: small sizes that may sit in a cache; not this machine's roofs.")
    for skip in result.skipped:
        sheet.notes.append(f"not measured: {skip}")
    return [sheet]


# NOTE: one CSV holds both kinds of row; a bare `best` was B/s on one line and FLOP/s on the next.
_CSV_UNITS = ("bytes", "flop")


def _csv_row(device: str, s, unit: str) -> dict:  # noqa: ANN001
    """A kernel's figures under names that carry their unit; the other unit's columns left empty."""
    row = {"device": device, "kernel": s.kernel, "dtype": s.dtype, "size": s.size}
    for u in _CSV_UNITS:
        mine = u == unit
        row[f"work_{u}"] = s.work if mine else None
        for stat in ("best", "median", "worst"):
            row[f"{stat}_{u}_per_s"] = getattr(s, stat) if mine else None
    return row


@app.command()
def probe(
    save: Annotated[
        Optional[str], typer.Option("--save", help="Write the figures as a user GPU preset of this name.")
    ] = None,
    gpu: Annotated[
        Optional[str],
        typer.Option(
            "--gpu",
            "-g",
            help="Preset to compare with (default: the one matching a GPU's name).",
            autocompletion=_complete_gpus,
        ),
    ] = None,
    device: Annotated[Device, typer.Option("--device", help="auto: a GPU through PyTorch if one is seen.")] = (
        Device.auto
    ),
    repeat: Annotated[int, typer.Option("--repeat", help="Runs per kernel (the best is kept).")] = 5,
    quick: Annotated[bool, typer.Option("--quick", help="Tiny sizes, in about a second (not real roofs).")] = False,
    replace: Annotated[bool, typer.Option("--replace", help="With --save: overwrite a user preset.")] = False,
    fmt: FmtOpt = Fmt.table,
) -> None:
    """Measure this machine: memory bandwidth (STREAM copy/triad/read) and matmul FLOP/s per dtype, against a preset.

    A GPU through PyTorch when it is installed, else the CPU through NumPy (pip install 'kvcalc[probe]').
    Takes under 20 s; --save NAME writes ~/.config/kvcalc/gpus/NAME.yaml ($KVCALC_PRESETS) for --gpu NAME.
    """
    from kvcalc.hardware import probe as measure
    from kvcalc.model.presets import GPU_DIR, get_gpu, preset_names, save_user_preset

    if replace and save is None:
        from kvcalc.errors import UsageError

        raise UsageError("--replace needs --save NAME", hint="it overwrites the user preset --save writes")
    if save is not None:  # refuse a bad name before measuring for seconds
        from kvcalc.model.presets import check_user_name

        check_user_name(GPU_DIR, save, replace)
    if gpu is not None:
        _gpu(gpu)
    bar, update = _progress()
    if bar is not None:
        bar.start()
    try:
        result = measure.run_probe(device.value, quick, repeat, update)
    finally:
        if bar is not None:
            bar.stop()
    if gpu is not None:
        result = measure.compare(result, _gpu(gpu), "--gpu")
    elif not result.backend.startswith("cpu"):
        name = measure.match_preset(result.device, preset_names(GPU_DIR))
        if name:
            result = measure.compare(result, get_gpu(name), f"matched by the device name '{result.device}'")
    _emit(
        fmt,
        result.model_dump(mode="json"),
        _sheets(result),
        [_csv_row(result.device, s, "bytes") for s in result.bandwidth]
        + [_csv_row(result.device, s, "flop") for s in result.matmul],
    )
    if save is not None:
        header, data = measure.preset_data(result, save)
        path = save_user_preset(GPU_DIR, save, data, header, replace=replace)
        sys.stderr.write(f"kvcalc: GPU preset '{save}' written to {path} (use --gpu {save})\n")
