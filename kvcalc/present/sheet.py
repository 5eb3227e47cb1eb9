"""Sheets (title, columns, rows, notes) laid out as Rich tables, Markdown or CSV, at any width without
cutting a figure."""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field

from rich.console import Group
from rich.text import Text


@dataclass
class Sheet:
    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    text_columns: tuple[int, ...] = (0,)  # left-aligned prose that may wrap; the rest are right-aligned figures
    # Columns that may be left out when the terminal is too narrow, first to go first (default: the
    # figure columns from the right, never the first column).
    optional: tuple[int, ...] | None = None


GAP, EDGES = 2, 2  # between cells (a box space + collapsed padding), and the box's two outer spaces


def _cell_len(text: str) -> int:
    # NOTE: len() for ASCII, which nearly every cell is: Rich's cell_len over 600,000 cells of a
    # 50,000-row roofline took a second on its own.
    if text.isascii():
        return len(text)
    from rich.cells import cell_len

    return cell_len(text)


def _memo(sheet: Sheet, key: tuple, compute) -> int:  # noqa: ANN001
    """A column measure computed once per layout (to_rich clears it): each is a pass over every row."""
    memo = sheet.__dict__.setdefault("_measures", {})
    if key not in memo:
        memo[key] = compute()
    return memo[key]


def _min_width(sheet: Sheet, i: int) -> int:
    """The narrowest a column can be without cutting a figure or a word: a figure (or a name, which
    has no spaces) is one unbreakable word; prose wraps only at spaces."""
    if i not in sheet.text_columns:
        return _natural(sheet, i)  # a figure column never wraps: its widest line

    def compute() -> int:
        cells = [sheet.columns[i], *(row[i] for row in sheet.rows)]
        return max((_cell_len(w) for cell in cells for line in cell.split("\n") for w in line.split()), default=1)

    return _memo(sheet, ("min", i), compute)


def fit_columns(sheet: Sheet, width: int | None) -> tuple[list[int], list[int]]:
    """(columns kept, columns left out) so that no figure is cut at `width` columns."""
    keep = list(range(len(sheet.columns)))
    if width is None:
        return keep, []
    mins = {i: _min_width(sheet, i) for i in keep}
    order = sheet.optional
    if order is None:
        order = tuple(i for i in reversed(keep[1:]) if i not in sheet.text_columns)
    dropped: list[int] = []
    for i in order:
        if sum(mins[k] for k in keep) + GAP * (len(keep) - 1) + EDGES <= width:
            break
        keep.remove(i)
        dropped.append(i)
    return keep, dropped


def to_rich(sheet: Sheet, width: int | None = None) -> Group:
    """The sheet as a Rich table. Figures and names are never cut or split: at a narrow `width`
    whole optional columns are left out (and named in a note); when even that is too wide, each
    row is printed as its own block of "column: value" lines."""
    sheet.__dict__.pop("_measures", None)  # rows may have been added since the last layout
    keep, dropped = fit_columns(sheet, width)
    mins = {i: _min_width(sheet, i) for i in keep}
    if width is not None and sum(mins.values()) + GAP * (len(keep) - 1) + EDGES > width:
        return _stacked(sheet, width)
    widths = _widths(sheet, keep, mins, width)
    # NOTE: a table at its natural widths is laid out directly, as Rich would lay it out (the same
    # bytes, bold headers included: tests/test_sheet_layout.py): Rich's table took 58 M of the
    # 955 M instructions `kvcalc roofline 7b --gpu a100` ran (benchmarks/startup.py).
    natural = all(widths.get(i, 10**9) >= _natural(sheet, i) > 0 for i in keep)  # Rich widens an empty column
    if natural and (len(sheet.rows) > PLAIN_ROWS or _shown_as_written(sheet, keep)):
        return _plain(sheet, keep, widths, dropped, width)
    from rich import box
    from rich.table import Table

    table = Table(header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), collapse_padding=True)
    for i in keep:
        text = i in sheet.text_columns
        table.add_column(
            sheet.columns[i],
            justify="left" if text else "right",
            no_wrap=not text,
            min_width=mins[i],
            width=widths.get(i),
            overflow="fold",
        )
    for row in sheet.rows:
        table.add_row(*(row[i] for i in keep))
    notes = _notes(sheet, width)
    if dropped:
        names = ", ".join(sheet.columns[i].replace("\n", " ") for i in sorted(dropped))
        notes.append(Text(f"Left out at this width: {names} (a wider terminal, or --format csv/json, shows them)."))
    return Group(Text(sheet.title, style="bold"), table, *notes)


def _shown_as_written(sheet: Sheet, keep: list[int]) -> bool:
    """Whether Rich would show every cell as written, unstyled and on one line (a header may hold
    line breaks): no markup tag, emoji code, tab or control character. Then the direct layout is Rich's."""
    cells = [line for i in keep for line in sheet.columns[i].split("\n")]
    cells += [row[i] for row in sheet.rows for i in keep]
    return all(_plain_cell(cell) for cell in cells)


def _plain_cell(cell: str) -> bool:
    if not cell.isprintable() or cell != cell.strip():  # a line break in a row, a tab, an escape; Rich trims
        return False
    if "[" in cell:
        from rich.markup import RE_TAGS

        if RE_TAGS.search(cell):  # a markup tag (or an escaped one): Rich would style or rewrite it
            return False
    # NOTE: an emoji code (:name:) is the other thing Rich rewrites in a str cell; checked by its pattern,
    # not by rendering: Rich's emoji table costs 2 ms to import
    return ":" not in cell or re.search(r":\S*?:", cell) is None  # rich/_emoji_replace.py's pattern, in short


def _notes(sheet: Sheet, width: int | None) -> list:
    """The notes as Rich Texts, which wrap at the terminal's width; with no width to wrap to (a pipe
    or a file) as ready-made lines: `cache --batch 1..50000+1` has a note per row, and Rich's
    wrapping of 50,000 Texts took 2 of its 4 seconds."""
    if len(sheet.notes) > PLAIN_ROWS:
        return [_Lines(sheet.notes if width is None else _wrap(sheet.notes, width))]
    return [Text(note) for note in sheet.notes]


def _wrap(lines: list[str], width: int) -> list[str]:
    """Lines wrapped at spaces to `width`, as Rich wraps a Text, in one cheap pass; a word longer than
    the width (a figure, a name) is kept whole, never cut."""
    import textwrap

    out: list[str] = []
    for line in lines:
        if len(line) <= width and line.isascii():
            out.append(line)
        else:
            out += textwrap.wrap(line, width, break_long_words=False, break_on_hyphens=False) or [""]
    return out


PLAIN_ROWS = 200  # above this many rows, lay the table out directly: Rich took 14 s for 16,384 rows


def _natural(sheet: Sheet, i: int) -> int:
    def compute() -> int:
        cells = [sheet.columns[i], *(r[i] for r in sheet.rows)]
        return max(_cell_len(line) for cell in cells for line in cell.split("\n"))

    return _memo(sheet, ("natural", i), compute)


def _plain(sheet: Sheet, keep: list[int], widths: dict[int, int], dropped: list[int], width: int | None) -> Group:
    """The same layout as the Rich table (SIMPLE_HEAD box, headers bottom-aligned, two spaces between
    columns), built as text in one pass; cells never wrap here (prose columns keep their natural width)."""

    size = {i: widths.get(i) or _natural(sheet, i) for i in keep}

    def line(cells: list[str]) -> str:
        return " " + "  ".join(_justify(sheet, i, cell, size[i]) for i, cell in zip(keep, cells)) + " "

    heads = [sheet.columns[i].split("\n") for i in keep]
    depth = max(len(h) for h in heads)
    heads = [[None] * (depth - len(h)) + h for h in heads]  # headers sit on the rule: None above
    total = sum(size.values()) + GAP * (len(keep) - 1)
    out: list = [" " * (total + EDGES)]
    out += [_head_line(sheet, keep, size, [h[d] for h in heads]) for d in range(depth)]
    out.append(" " + "─" * total + " ")
    out += [line([row[i] for i in keep]) for row in sheet.rows]
    out.append(" " * (total + EDGES))
    notes = _notes(sheet, width)
    if dropped:
        names = ", ".join(sheet.columns[i].replace("\n", " ") for i in sorted(dropped))
        notes.append(Text(f"Left out at this width: {names} (a wider terminal, or --format csv/json, shows them)."))
    return Group(Text(sheet.title, style="bold"), _Lines(out), *notes)


def _justify(sheet: Sheet, i: int, cell: str, width: int) -> str:
    """A cell padded to `width` terminal cells: prose to the left, figures to the right."""
    if cell.isascii():
        return cell.ljust(width) if i in sheet.text_columns else cell.rjust(width)
    room = " " * (width - _cell_len(cell))
    return cell + room if i in sheet.text_columns else room + cell


def _head_line(sheet: Sheet, keep: list[int], size: dict[int, int], cells: list[str | None]) -> list:
    """One line of the header as Rich's table gives it, in (text, bold) pieces: each cell bold with
    its padding (one piece where the header has no line here), the gaps between cells plain."""
    pieces: list[tuple[str, bool]] = [(" ", False)]
    for n, (i, cell) in enumerate(zip(keep, cells)):
        pad = 0 if n == len(keep) - 1 else 1
        if cell is None:
            pieces.append((" " * (size[i] + pad), True))
        else:
            pieces.append((_justify(sheet, i, cell, size[i]), True))
            if pad:
                pieces.append((" ", True))
        pieces.append((" ", False))
    return pieces


class _Lines:
    """Ready-made lines handed to Rich as segments: a Text of 40,000 lines took Rich 5 s to lay out.
    A line is a str, or (text, bold) pieces (a table's header)."""

    def __init__(self, lines: list) -> None:
        self.lines = lines

    def __rich_console__(self, console, options):  # noqa: ANN001, ANN204
        from rich.segment import Segment
        from rich.style import Style

        newline, bold = Segment.line(), Style(bold=True)
        for line in self.lines:
            if isinstance(line, str):
                yield Segment(line)
            else:
                yield from (Segment(text, bold if strong else None) for text, strong in line)
            yield newline


def _widths(sheet: Sheet, keep: list[int], mins: dict[int, int], width: int | None) -> dict[int, int]:
    """Explicit widths when the natural ones do not fit: figures keep theirs, the widest prose column
    gives up a cell at a time (never below its longest word). Rich's own squeeze cuts figures."""

    natural = {i: _natural(sheet, i) for i in keep}
    if width is None:
        return {}
    budget = width - GAP * (len(keep) - 1) - EDGES
    if sum(natural.values()) <= budget:
        return {}
    sizes = dict(natural)
    prose = [i for i in keep if i in sheet.text_columns]
    while sum(sizes.values()) > budget:
        shrinkable = [i for i in prose if sizes[i] > mins[i]]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda i: sizes[i])
        sizes[widest] -= 1
    return sizes


def _stacked(sheet: Sheet, width: int) -> Group:
    body: list[str] = []
    for row in sheet.rows:
        body.append("")
        for name, value in zip(sheet.columns, row):
            body.append(f"{name.replace(chr(10), ' ')}: {value}")
    if len(sheet.rows) > PLAIN_ROWS:  # NOTE: 20,000 rows as Rich Texts took 5 s at 30 columns
        return Group(Text(sheet.title, style="bold"), _Lines(_wrap([*body, ""], width)), *_notes(sheet, width))
    return Group(Text(sheet.title, style="bold"), *(Text(line) for line in body), Text(""), *_notes(sheet, width))


def _md_cell(text: str) -> str:
    # NOTE: a '|' inside a cell (the lab's |logits - full forward|) would end the cell and shift the
    # row; GitHub-flavoured Markdown reads '\|' as a literal bar. A newline would end the row.
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(sheet: Sheet) -> str:
    lines = [f"**{sheet.title}**", "", "| " + " | ".join(_md_cell(c) for c in sheet.columns) + " |"]
    lines.append("|" + "|".join("---" for _ in sheet.columns) + "|")
    lines += ["| " + " | ".join(_md_cell(cell) for cell in row) + " |" for row in sheet.rows]
    if sheet.notes:
        lines += [""] + [f"- {note}" for note in sheet.notes]
    return "\n".join(lines)


def _flat(row: dict, prefix: str = "", pairs: bool = False) -> dict:
    """A result row's nested figures as columns of their own, named by their path: an estimate's `ttft_s` as
    estimate.ttft_s, its 80% interval as estimate.ttft_s.lo / .hi; a list of words as one cell."""
    out: dict = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat(value, prefix, pairs=True) if key == "interval" else _flat(value, f"{name}."))
        elif isinstance(value, (list, tuple)) and len(value) == 2 and (pairs or key.startswith("interval")):
            out[f"{name}.lo"], out[f"{name}.hi"] = value
        elif isinstance(value, (list, tuple)):
            out[name] = "; ".join(str(v) for v in value)
        else:
            out[name] = value
    return out


def to_csv(rows: list[dict]) -> str:
    """Raw figures (exact bytes, plain numbers) for scripts: one column for every name any row has, in the order
    they first appear, empty where a row has none; nested figures flattened (_flat)."""
    if not rows:
        return ""
    rows = [_flat(row) for row in rows]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(dict.fromkeys(k for row in rows for k in row)), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buf.getvalue().rstrip("\n")
