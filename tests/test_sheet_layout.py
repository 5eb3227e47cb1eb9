"""The direct table layout (present/sheet.py) prints exactly what Rich's table prints, on a pipe and
on a terminal (bold headers), for any sheet it takes; a sheet it does not take goes to Rich."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

import kvcalc.present.sheet as sheet_module
from kvcalc.present.sheet import Sheet, to_rich

# Words as figures and names are written (ASCII, units, a wide CJK name, an accented one), markup-like
# brackets (literal to Rich: "[80% interval]"), and the odd cells Rich would change (a markup tag, an
# emoji code, a tab): those must go to Rich.
WORDS = ["", "1", "8,192", "13.04", "GiB", "yes", "NO", "≤", "Qwen/Qwen3", "模型", "café", "a b", "x  y", " lead"]
WORDS += [
    "[80% interval]",
    "[",
    "]",
    "ratio 1:2",
    "12:30:00",
    "\\[x]",
    "[bold]x[/bold]",
    ":thumbs_up:",
    "a\tb",
    "two\nlines",
]
cell = st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join)
head = st.lists(st.sampled_from([w for w in WORDS if "\n" not in w]), min_size=1, max_size=3).map("\n".join)


@st.composite
def sheets(draw):  # noqa: ANN001, ANN201
    columns = draw(st.lists(head, min_size=1, max_size=5))
    rows = draw(st.lists(st.lists(cell, min_size=len(columns), max_size=len(columns)), max_size=4))
    text_columns = tuple(i for i in range(len(columns)) if i == 0 or draw(st.booleans()))
    return Sheet("A title", columns, rows, ["a note"], text_columns=text_columns)


def _printed(sheet: Sheet, width: int | None, terminal: bool, rich_only: bool) -> str:
    console = Console(width=width or 100_000, force_terminal=terminal, color_system="truecolor" if terminal else None)
    saved = sheet_module._shown_as_written
    if rich_only:
        sheet_module._shown_as_written = lambda *_: False
    try:
        with console.capture() as out:
            console.print(to_rich(sheet, width))
    finally:
        sheet_module._shown_as_written = saved
    return out.get()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sheets(), st.sampled_from([None, 200, 60, 30]), st.booleans())
def test_the_direct_layout_prints_what_rich_prints(sheet, width, terminal):
    assert _printed(sheet, width, terminal, rich_only=False) == _printed(sheet, width, terminal, rich_only=True)


@pytest.mark.parametrize(
    ("cell", "direct"),
    [
        ("8,192", True),
        ("模型", True),  # two terminal cells per character: padded by cell width, as Rich does
        ("estimate (vllm) [80% interval]", True),  # not a markup tag: Rich shows it as written
        ("[bold]x[/bold]", False),  # Rich would style it
        ("go :thumbs_up:", False),  # Rich would draw the emoji
        ("two\nlines", False),
        ("a\tb", False),
    ],
)
def test_which_cells_rich_shows_as_written(cell, direct):
    assert sheet_module._plain_cell(cell) is direct


def test_a_roofline_table_is_laid_out_directly_with_bold_headers():
    # the start-up benchmark's table (benchmarks/startup.py): laid out without Rich's Table, and the
    # terminal still gets its bold header cells, byte for byte as Rich printed them
    sheet = Sheet("t", ["batch", "KV read\nGiB", "fits"], [["1", "4.00", "yes"], ["64", "256.00", "NO"]])
    group = to_rich(sheet, 100)
    assert type(group.renderables[1]).__name__ == "_Lines"
    out = _printed(sheet, 100, terminal=True, rich_only=False)
    assert "\x1b[1mKV read\x1b[0m\x1b[1m \x1b[0m" in out and " 64      256.00    NO \n" in out
