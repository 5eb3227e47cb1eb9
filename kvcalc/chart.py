"""Pure chart data (no plotting library): one description drawn by both the terminal and the file renderer."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kvcalc.kvcache import cache_bytes
from kvcalc.results import CompareResult, RooflineResult
from kvcalc.specs import ModelSpec
from kvcalc.units import GIB, fmt_tokens

MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


@dataclass
class Series:
    label: str
    x: list[float]
    y: list[float]
    kind: str = "line"  # line | point | ridge | hline
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
        title=f"Decode roofline: {first.model} ({first.dtype} weights, {first.kv_dtype} KV)",
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
    for res in results:
        for i, r in enumerate(res.rows):
            label = f"B={r.batch} S={fmt_tokens(r.seq)}" + (f" {res.gpu}" if len(results) > 1 else "")
            chart.series.append(
                Series(
                    label,
                    [r.arithmetic_intensity],
                    [r.flops / r.step_seconds / 1e12],
                    "point",
                    gid=f"point-{res.gpu}-{i}",
                    group=res.gpu,
                )
            )
    return chart


def cache_chart(
    spec: ModelSpec,
    batches: list[int],
    kv_dtype: str,
    max_seq: int,
    capacity_bytes: int | None = None,
    weight_bytes: int | None = None,
    gpu: str | None = None,
) -> Chart:
    """Cache size against context length for each batch, with the GPU's memory lines."""
    seqs = sorted({max(1, round(s)) for s in _logspace(256, max_seq, 48)})
    chart = Chart(
        title=f"KV cache: {spec.name}, {kv_dtype}", xlabel="context (tokens, log)", ylabel="KV cache (GiB, log)"
    )
    for b in batches:
        chart.series.append(
            Series(
                f"batch {b}",
                list(seqs),
                [cache_bytes(spec, b, s, kv_dtype) / GIB for s in seqs],
                "line",
                gid=f"batch-{b}",
            )
        )
    if capacity_bytes:
        chart.series.append(
            Series(f"{gpu} memory", [seqs[0], seqs[-1]], [capacity_bytes / GIB] * 2, "hline", gid="gpu-memory")
        )
        if weight_bytes is not None and capacity_bytes > weight_bytes:
            chart.series.append(
                Series(
                    f"{gpu} memory - weights",
                    [seqs[0], seqs[-1]],
                    [(capacity_bytes - weight_bytes) / GIB] * 2,
                    "hline",
                    gid="gpu-minus-weights",
                )
            )
    return chart


def compare_chart(result: CompareResult) -> Chart:
    return Chart(
        title=f"KV cache: {result.model}, batch {result.batch} x {result.seq:,} tokens",
        xlabel="variant",
        ylabel="KV cache (GiB)",
        xlog=False,
        ylog=False,
        bars=[(r.name, r.total_bytes / GIB) for r in result.rows],
    )
