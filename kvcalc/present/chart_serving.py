"""Pure chart data for the planner: decode step time as the context grows (generate) and time per
output token against batch (fit), drawn by the same terminal and file renderers as the other charts."""

from __future__ import annotations

from kvcalc.present.chart import MAX_SERIES, Chart, Series, _span, ms_ticks, token_ticks

POINTS = 64  # samples per line: enough for a smooth curve, cheap at any --new


def sample(lo: int, hi: int, n: int = POINTS) -> list[int]:
    """Up to n integers from lo to hi inclusive, evenly spread, both ends kept."""
    if hi <= lo:
        return [lo]
    if hi - lo + 1 <= n:
        return list(range(lo, hi + 1))
    return sorted({lo + round(i * (hi - lo) / (n - 1)) for i in range(n)})


def generate_chart(title: str, lines: list[tuple[str, list[int], list[float]]]) -> Chart:
    """Time per output token (ms) against the context it decodes over, one line per basis."""
    chart = Chart(title=title, xlabel="context (tokens)", ylabel="time per output token (ms)", xlog=False, ylog=False)
    for label, xs, seconds in lines[:MAX_SERIES]:
        chart.series.append(
            Series(label, [float(x) for x in xs], [s * 1e3 for s in seconds], "line", gid=f"tpot-{label}")
        )
    return chart


def fit_chart(
    title: str, lines: list[tuple[str, list[int], list[float]]], goal_ms: float | None, batches: list[int]
) -> Chart:
    """Time per output token (ms) against batch, one line per context, the TPOT goal as a dashed line."""
    chart = Chart(title=title, xlabel="batch (sequences, log)", ylabel="time per output token (log)")
    for label, xs, seconds in lines[:MAX_SERIES]:
        chart.series.append(
            Series(label, [float(x) for x in xs], [s * 1e3 for s in seconds], "line", gid=f"tpot-{label}")
        )
    if goal_ms is not None and batches:
        chart.series.append(
            Series(f"TPOT goal {goal_ms:g} ms", [float(min(batches)), float(max(batches))], [goal_ms, goal_ms], "hline")
        )
    chart.xticks = token_ticks(*_span([x for sr in chart.series for x in sr.x]))  # batches: 1, 2, 4 ... 1k
    chart.yticks = ms_ticks(*_span([y for sr in chart.series for y in sr.y]))
    return chart


def serving_chart(title: str, results: list) -> Chart:
    """Per-user output tokens/s against total output tokens/s over a concurrency sweep (the chart
    InferenceX and NVIDIA NIM publish): the ceiling, the estimate and its 80% band."""
    chart = Chart(title=title, xlabel="output tokens/s, all users (log)", ylabel="output tokens/s per user (log)")
    chart.series.append(
        Series(
            "ceiling",
            [r.tokens_per_s for r in results],
            [r.per_user_tokens_per_s for r in results],
            "line",
            gid="serving-ceiling",
        )
    )
    est = [r.estimate for r in results if r.estimate is not None]
    if len(est) == len(results):
        # NOTE: the band is a polygon: the fast end (high per-user and total) out, the slow end back.
        fast = [(e.interval["tokens_per_s"][1], e.interval["per_user_tokens_per_s"][1]) for e in est]
        slow = [(e.interval["tokens_per_s"][0], e.interval["per_user_tokens_per_s"][0]) for e in est]
        ring = fast + slow[::-1] + fast[:1]
        chart.series.append(
            Series("estimate, 80% band", [x for x, _ in ring], [y for _, y in ring], "band", gid="serving-band")
        )
        chart.series.append(
            Series(
                est[0].basis,
                [e.tokens_per_s for e in est],
                [e.per_user_tokens_per_s for e in est],
                "line",
                gid="serving-estimate",
            )
        )
    return chart
