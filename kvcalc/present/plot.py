"""Draw a Chart: in the terminal with plotext, or to SVG / PNG / PDF with matplotlib (the `plot` extra)."""

from __future__ import annotations

import importlib
from pathlib import Path

from kvcalc.errors import MissingExtraError, UsageError
from kvcalc.present.chart import MARKERS, Chart

FILE_TYPES = (".svg", ".png", ".pdf")
_TERM_MARKERS = ["dot", "+", "x", "*", "o", "#", "@", "%"]


def _require(module: str):  # noqa: ANN202
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(module.split(".")[0], "plot", "--plot") from None


def terminal(chart: Chart, width: int, height: int = 24, color: bool = False) -> str:
    """The chart as text, `width` columns wide; markers and labels carry it without colour."""
    plt = _require("plotext")
    plt.clear_figure()
    plt.plot_size(width, height)
    if not color:
        plt.theme("clear")
    plt.title(chart.title)
    # NOTE: the axis labels are our own lines (y above the axis, x centred below it): plotext puts
    # both on its last line, where at 80 columns the y label overwrote the x label.
    if chart.bars:
        labels = [name for name, _ in chart.bars]
        plt.bar(labels, [v for _, v in chart.bars])
        return _labelled(plt.build(), chart, width)
    if chart.xlog:
        plt.xscale("log")
    if chart.ylog:
        plt.yscale("log")
    if chart.xticks:
        plt.xticks([v for v, _ in chart.xticks], [label for _, label in chart.xticks])
    if chart.yticks:
        plt.yticks([v for v, _ in chart.yticks], [label for _, label in chart.yticks])
    for i, s in enumerate(chart.series):
        marker = _TERM_MARKERS[i % len(_TERM_MARKERS)]
        if s.kind in ("point", "ridge"):
            plt.scatter(s.x, s.y, marker=marker, label=s.label)
        else:
            plt.plot(s.x, s.y, marker=marker, label=s.label)
    return _labelled(plt.build(), chart, width)


def _labelled(drawn: str, chart: Chart, width: int) -> str:
    lines = drawn.rstrip("\n").split("\n")
    title, body = (lines[0], lines[1:]) if lines and chart.title.strip() in lines[0] else ("", lines)
    ylabel = f"↑ {chart.ylabel}"[:width]
    xlabel = f"{chart.xlabel} →"[:width]
    head = [title] if title else []
    return "\n".join([*head, ylabel, *body, xlabel.center(width).rstrip()])


def save(chart: Chart, path: Path, width_px: int, height_px: int) -> Path:
    """Write the chart as SVG, PNG or PDF (by suffix) at width_px x height_px (100 dpi)."""
    suffix = _file_type(path)
    matplotlib = _require("matplotlib")
    matplotlib.use("Agg")
    pyplot = importlib.import_module("matplotlib.pyplot")
    dpi = 100
    fig, ax = pyplot.subplots(figsize=(width_px / dpi, height_px / dpi), dpi=dpi)
    try:
        ax.set_title(chart.title)
        ax.set_xlabel(chart.xlabel)
        ax.set_ylabel(chart.ylabel)
        if chart.bars:
            bars = ax.bar([n for n, _ in chart.bars], [v for _, v in chart.bars], color="0.6", edgecolor="black")
            for i, (bar, (_, value)) in enumerate(zip(bars, chart.bars)):
                bar.set_gid(f"bar-{i}")
                ax.annotate(f"{value:,.2f}", (bar.get_x() + bar.get_width() / 2, value), ha="center", va="bottom")
        else:
            if chart.xlog:
                ax.set_xscale("log")
            if chart.ylog:
                ax.set_yscale("log")
            _ticks(ax, chart)
            palette = pyplot.rcParams["axes.prop_cycle"].by_key()["color"]
            groups: dict[str, str] = {}
            points = [x for x in chart.series if x.kind == "point"]
            for i, s in enumerate(chart.series):
                color = groups.setdefault(s.group or s.label, palette[len(groups) % len(palette)])
                if s.kind == "point":
                    n = points.index(s)
                    (artist,) = ax.plot(
                        s.x,
                        s.y,
                        linestyle="none",
                        marker=MARKERS[n % len(MARKERS)],
                        markersize=7,
                        color=color,
                        markeredgecolor="black",
                        label=s.label,
                    )
                    # NOTE: the legend names every marker; a label beside the first point helps only
                    # when it is alone. Series start where batch 1 sits (nearly the same intensity at
                    # every context and GPU), so several labels there printed on top of each other.
                    if len(points) == 1:
                        ax.annotate(
                            s.label, (s.x[0], s.y[0]), textcoords="offset points", xytext=(6, -10), fontsize=8
                        ).set_gid(f"label-{s.gid}")
                elif s.kind == "band":
                    (artist,) = ax.fill(s.x, s.y, color=color, alpha=0.2, label=s.label)
                elif s.kind == "ridge":
                    (artist,) = ax.plot(
                        s.x,
                        s.y,
                        linestyle="none",
                        marker="x",
                        markersize=10,
                        markeredgewidth=2,
                        color=color,
                        label=s.label,
                    )
                else:
                    (artist,) = ax.plot(
                        s.x, s.y, linestyle="--" if s.kind == "hline" else "-", color=color, label=s.label
                    )
                artist.set_gid(s.gid)
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
            ax.grid(True, which="both", alpha=0.3)
        fig.tight_layout()
        fig.savefig(path, format=suffix[1:])
    finally:
        pyplot.close(fig)
    return path


def _ticks(ax, chart: Chart) -> None:  # noqa: ANN001
    """The chart's own tick labels in human units; no minor labels (matplotlib's 2x10^-1 on log axes)."""
    ticker = importlib.import_module("matplotlib.ticker")
    for ticks, axis in ((chart.xticks, ax.xaxis), (chart.yticks, ax.yaxis)):
        if ticks:
            axis.set_major_locator(ticker.FixedLocator([v for v, _ in ticks]))
            axis.set_major_formatter(ticker.FixedFormatter([label for _, label in ticks]))
            axis.set_minor_formatter(ticker.NullFormatter())


def check(target: str) -> None:
    """Before any output: the file type is one we write, and the library it needs is installed."""
    if target == "-":
        _require("plotext")
        return
    _file_type(Path(target))
    _require("matplotlib")


def _file_type(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in FILE_TYPES:
        raise UsageError(f"cannot write a chart to '{path.name}'", hint=f"use one of {', '.join(FILE_TYPES)}")
    return suffix
