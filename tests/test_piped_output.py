"""Issue 23's output for pipes: stdout stays JSON or CSV with --plot (the terminal chart goes to stderr),
and log axes are ticked in human units (256 MiB, 1 GiB, 4k tokens, 10 ms), never 2x10^-1 GiB."""

from __future__ import annotations

import csv
import io
import json

import pytest
from conftest import run

from kvcalc.present.chart import byte_ticks, ms_ticks, token_ticks

PLOTTED = [
    ("roofline", "7b", "--gpu", "h100"),
    ("cache", "llama-3-8b", "--seq", "1k,8k"),
    ("fit", "llama-3-8b", "--gpu", "h100"),
    ("generate", "llama-3-8b", "--gpu", "h100", "--new", "64"),
]


@pytest.mark.parametrize("args", PLOTTED, ids=[a[0] for a in PLOTTED])
def test_json_stdout_stays_json_with_a_terminal_chart(args):
    pytest.importorskip("plotext")
    result = run(*args, "--plot", "--format", "json")
    assert result.exit_code == 0, result.stderr
    json.loads(result.stdout)  # the whole of stdout is the answer
    assert "┤" in result.stderr  # and the chart was drawn, on stderr


@pytest.mark.parametrize("args", PLOTTED, ids=[a[0] for a in PLOTTED])
def test_csv_stdout_stays_csv_with_a_terminal_chart(args):
    pytest.importorskip("plotext")
    result = run(*args, "--plot", "-f", "csv")
    assert result.exit_code == 0, result.stderr
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert len({len(r) for r in rows}) == 1 and len(rows) >= 2
    assert "┤" in result.stderr


def test_a_table_keeps_its_chart_on_stdout():
    pytest.importorskip("plotext")
    result = run("roofline", "7b", "--gpu", "h100", "--plot")
    assert "┤" in result.stdout


def test_byte_ticks_are_powers_of_two_in_human_units():
    assert byte_ticks(0.2, 5) == [(0.25, "256 MiB"), (0.5, "512 MiB"), (1, "1 GiB"), (2, "2 GiB"), (4, "4 GiB")]
    # 2^20 B .. 2^40 B: 21 powers, every third kept (at most 8 ticks), evenly spaced on the log axis
    wide = byte_ticks(2**-10, 2**10)
    assert [label for _, label in wide] == ["1 MiB", "8 MiB", "64 MiB", "512 MiB", "4 GiB", "32 GiB", "256 GiB"]


def test_token_and_ms_ticks():
    assert [label for _, label in token_ticks(200, 5000)] == ["256", "512", "1k", "2k", "4k"]
    assert ms_ticks(0.3, 30) == [
        (0.5, "500 µs"),
        (1, "1 ms"),
        (2, "2 ms"),
        (5, "5 ms"),
        (10, "10 ms"),
        (20, "20 ms"),
    ]
    assert [label for _, label in ms_ticks(400, 3000)] == ["500 ms", "1 s", "2 s"]


@pytest.mark.parametrize(
    ("args", "labels"),
    [
        (("cache", "7b"), ["256 MiB", "1 GiB", "4 GiB", "1k", "4k"]),
        (("fit", "llama-3-8b", "--gpu", "h100"), ["5 ms", "10 ms", "1", "2", "4"]),
    ],
)
def test_chart_files_tick_log_axes_in_human_units(tmp_path, args, labels):
    pytest.importorskip("matplotlib")
    path = tmp_path / "chart.svg"
    assert run(*args, "--plot", path).exit_code in (0, 3)
    text = path.read_text()
    for label in labels:
        assert f"<!-- {label} -->" in text
    assert "10^" not in text  # matplotlib's own log labels (2x10^-1) are gone
