"""Pure chart data (no plotting library): one description drawn by both the terminal and the file renderer."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvcalc.cost.kvcache import cache_bytes
from kvcalc.model.spec import ModelSpec
from kvcalc.units import GIB, fmt_tokens

if TYPE_CHECKING:
    from kvcalc.cost.roofline import RooflineResult
    from kvcalc.plan.variants import CompareResult

MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
MAX_SERIES = 8  # lines or point groups per chart: more make an unreadable legend


@dataclass
class Series:
    label: str
    x: list[float]
    y: list[float]
    kind: str = "line"  # line | point | ridge | hline | band (a closed outline, filled in files)
    gid: str = ""  # element id in SVG output
    group: str = ""  # series of one group (a GPU) share a colour


@dataclass
class Chart:
    title: str
    xlabel: str
    ylabel: str
    xlog: bool = True
    ylog: bool = True
    series: list[Series] = field(default_factory=list)
    bars: list[tuple[str, float]] = field(default_factory=list)
    # Tick marks in human units, (value in the axis' data unit, label); empty: the library's own.
    xticks: list[tuple[float, str]] = field(default_factory=list)
    yticks: list[tuple[float, str]] = field(default_factory=list)


MAX_TICKS = 8


def _thin(ticks: list[tuple[float, str]]) -> list[tuple[float, str]]:
    """At most MAX_TICKS, every k-th, so that they stay evenly spaced on a log axis."""
    step = math.ceil(len(ticks) / MAX_TICKS) or 1
    return ticks[::step]


def _powers_of_two(lo: float, hi: float) -> list[int]:
    if hi <= 0:
        return []
    a = math.floor(math.log2(max(lo, 1e-300)))
    return [2**e for e in range(a, math.ceil(math.log2(hi)) + 1) if lo <= 2**e <= hi] if a >= 0 else []


def byte_ticks(lo_gib: float, hi_gib: float) -> list[tuple[float, str]]:
    """Powers of two between two sizes in GiB, labelled 256 MiB, 1 GiB, 4 GiB (never 2x10^-1 GiB)."""
    from kvcalc.units import fmt_bytes

    sizes = _powers_of_two(lo_gib * GIB, hi_gib * GIB)
    return _thin([(n / GIB, fmt_bytes(n)) for n in sizes])


def token_ticks(lo: float, hi: float) -> list[tuple[float, str]]:
    """Powers of two between two token counts, labelled 256, 1k, 128k, 1M."""
    return _thin([(float(n), fmt_tokens(n)) for n in _powers_of_two(max(lo, 1), hi)])


def ms_ticks(lo: float, hi: float) -> list[tuple[float, str]]:
    """1-2-5 steps between two times in ms, labelled 500 µs, 2 ms, 1 s."""
    ticks = []
    if hi <= 0:
        return ticks
    for e in range(math.floor(math.log10(max(lo, 1e-6))), math.ceil(math.log10(hi)) + 1):
        for m in (1, 2, 5):
            v = m * 10.0**e
            if lo <= v <= hi:
                label = f"{v * 1e3:g} µs" if v < 1 else f"{v:g} ms" if v < 1000 else f"{v / 1e3:g} s"
                ticks.append((v, label))
    return _thin(ticks)


def _span(values: list[float]) -> tuple[float, float]:
    positive = [v for v in values if v > 0]
    return (min(positive), max(positive)) if positive else (0.0, 0.0)


def _logspace(lo: float, hi: float, n: int = 64) -> list[float]:
    a, b = math.log10(lo), math.log10(hi)
    return [10 ** (a + (b - a) * i / (n - 1)) for i in range(n)]


def roofline_chart(results: list[RooflineResult]) -> Chart:
    """Attainable TFLOP/s against FLOP/byte: each GPU's roofs, its ridge, one point per (batch, seq) row."""
    first = results[0]
    points = [r.arithmetic_intensity for res in results for r in res.rows]
    ridges = [res.ridge_flop_per_byte for res in results]
    lo = min(points + ridges) / 4
    hi = max(points + ridges) * 4
    chart = Chart(
        title=f"Decode roofline: {first.model} ({first.weight_format or first.dtype} weights, {first.kv_dtype} KV)",
        xlabel="arithmetic intensity (FLOP/byte, log)",
        ylabel="attainable TFLOP/s (log)",
    )
    for res in results:
        xs = _logspace(lo, hi)
        roof = [min(res.peak_flop_per_s, res.bandwidth_bytes_per_s * x) / 1e12 for x in xs]
        chart.series.append(Series(f"{res.gpu} roof", xs, roof, "line", gid=f"roof-{res.gpu}", group=res.gpu))
        chart.series.append(
            Series(
                f"{res.gpu} ridge {res.ridge_flop_per_byte:,.0f} FLOP/B",
                [res.ridge_flop_per_byte],
                [res.peak_flop_per_s / 1e12],
                "ridge",
                gid=f"ridge-{res.gpu}",
                group=res.gpu,
            )
        )
    # NOTE: one point series per GPU and --seq value (or per GPU when there are many seq values),
    # never one per row: a 16k-row sweep drew a legend of 8,000 entries and took 71 s.
    for res in results:
        seqs = sorted({r.seq for r in res.rows})
        by_seq = len(seqs) <= MAX_SERIES
        groups = [[r for r in res.rows if r.seq == s] for s in seqs] if by_seq else [res.rows]
        for rows in groups:
            label = f"S={fmt_tokens(rows[0].seq)}" if by_seq else f"{len(rows):,} rows"
            batches = sorted({r.batch for r in rows})
            label += f", B={batches[0]}" if len(batches) == 1 else f", B={batches[0]}..{batches[-1]}"
            label += f" {res.gpu}" if len(results) > 1 else ""
            chart.series.append(
                Series(
                    label,
                    [r.arithmetic_intensity for r in rows],
                    [r.flops / r.step_seconds / 1e12 for r in rows],
                    "point",
                    gid=f"point-{res.gpu}-{rows[0].seq if by_seq else 'all'}",
                    group=res.gpu,
                )
            )
    return chart


def _spread(values: list[int], most: int) -> list[int]:
    """At most `most` of the sorted values, evenly spread, the first and last kept."""
    if len(values) <= most:
        return values
    step = (len(values) - 1) / (most - 1)
    return sorted({values[round(i * step)] for i in range(most)})


def cache_chart(
    spec: ModelSpec,
    batches: list[int],
    kv_dtype: str,
    seqs: list[int],
    capacity_bytes: int | None = None,
    weight_bytes: int | None = None,
    gpu: str | None = None,
    tp: int = 1,
) -> Chart:
    """Cache size against context length for each batch (at most MAX_SERIES lines), the --seq values
    asked for as points on them, and the GPU's memory lines."""
    lo = min(256, seqs[0])
    hi = max(seqs[-1], 4 * seqs[0] if len(seqs) == 1 else seqs[-1], 1024)
    xs = sorted({max(1, round(s)) for s in _logspace(lo, hi, 48)} | set(seqs))
    drawn = _spread(batches, MAX_SERIES)
    title = f"KV cache: {spec.name}, {kv_dtype}" + (f", tp {tp} (per rank)" if tp > 1 else "")
    if len(drawn) < len(batches):
        title += f" ({len(drawn)} of {len(batches)} batch sizes)"
    chart = Chart(title=title, xlabel="context (tokens, log)", ylabel="KV cache (log)")
    for b in drawn:
        chart.series.append(
            Series(
                f"batch {b}",
                list(xs),
                [cache_bytes(spec, b, s, kv_dtype, tp) / GIB for s in xs],
                "line",
                gid=f"batch-{b}",
                group=f"batch {b}",
            )
        )
    asked = _spread(seqs, 200)
    chart.series.append(
        Series(
            "--seq asked",
            [s for _ in drawn for s in asked],
            [cache_bytes(spec, b, s, kv_dtype, tp) / GIB for b in drawn for s in asked],
            "point",
            gid="asked",
        )
    )
    if capacity_bytes:
        chart.series.append(
            Series(f"{gpu} memory", [xs[0], xs[-1]], [capacity_bytes / GIB] * 2, "hline", gid="gpu-memory")
        )
        if weight_bytes is not None and capacity_bytes > weight_bytes:
            chart.series.append(
                Series(
                    f"{gpu} memory - weights",
                    [xs[0], xs[-1]],
                    [(capacity_bytes - weight_bytes) / GIB] * 2,
                    "hline",
                    gid="gpu-minus-weights",
                )
            )
    xs_all = [x for sr in chart.series for x in sr.x]
    chart.xticks = token_ticks(*_span(xs_all))
    chart.yticks = byte_ticks(*_span([y for sr in chart.series for y in sr.y]))
    return chart


MAX_BARS = 40


def compare_chart(results: list[CompareResult]) -> Chart:
    first = results[0]
    many = len(results) > 1
    what = f"variants of {first.model}" if first.model else "models"
    return Chart(
        title=f"KV cache: {what}" + ("" if many else f", batch {first.batch} x {first.seq:,} tokens"),
        xlabel="variant" if first.model else "model",
        ylabel="KV cache (GiB)",
        xlog=False,
        ylog=False,
        bars=[
            (r.name + (f" B={res.batch} S={fmt_tokens(res.seq)}" if many else ""), r.total_bytes / GIB)
            for res in results
            for r in res.rows
        ],
    )
