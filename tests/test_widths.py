"""Tables at any width: no figure cut or split, names whole, columns dropped deliberately (issue 12)."""

import re

import pytest
from conftest import run
from rich.cells import cell_len

COMMANDS = [
    ["roofline", "llama-3-8b", "--gpu", "h100", "--batch", "1,64", "--seq", "128k"],
    ["roofline", "7b", "--gpu", "a100,h100,h200", "--batch", "1..4096", "--seq", "1k,1m"],
    ["cache", "gemma-2-9b", "--batch", "1,128", "--seq", "8k,1m", "--gpu", "h100"],
    ["models"],
    ["gpus"],
    ["compare", "mha", "gqa", "mqa", "mla", "swa:4096", "gqa+fp8"],
    ["show", "deepseek-v3"],
    ["fit", "llama-3-70b", "--gpu", "h100", "--tp", "4"],
    ["generate", "llama-3-8b", "--gpu", "h100", "--efficiency", "0.6"],
    ["plan", "llama-3.1-8b", "--seq", "8k", "--users", "16", "--gpu", "a100,h100", "--top", "3"],
]
FIGURE = re.compile(r"\d[\d,.]*\d|\d")


def _figures(text):
    return set(FIGURE.findall(text))


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(a[:2]) for a in COMMANDS])
@pytest.mark.parametrize("columns", [40, 60, 80, 100])
def test_no_figure_is_cut_at_any_width(args, columns):
    wide = run(*args, env={"COLUMNS": "1000"})
    narrow = run(*args, env={"COLUMNS": str(columns)})
    assert narrow.exit_code == 0, narrow.stderr
    lines = narrow.stdout.splitlines()
    assert max(cell_len(line) for line in lines) <= columns
    # a cut figure ("131,07", "5,358.") would be a number the wide table never printed
    assert _figures(narrow.stdout) <= _figures(wide.stdout)


def test_roofline_at_60_drops_whole_columns_and_says_so():
    out = run("roofline", "llama-3-8b", "--gpu", "h100", "--batch", "1,64", "--seq", "128k", env={"COLUMNS": "60"})
    assert "131,072" in out.stdout and "332.69" in out.stdout and "192.4" in out.stdout
    # the calibrated estimate's step stays; its interval and tok/s go before the ceiling's figures
    assert "Left out at this width: weights read GiB, KV read TiB, GFLOP, FLOP/B, bound, 80% interval, tok/s vllm" in (
        " ".join(out.stdout.split())
    )


def test_compare_keeps_its_answer_when_narrow():
    # 70b (80 layers, head dim 128), batch 32 x 131,072 tokens: MHA 80 x 2 x 64 x 128 x 2 B = 2.50 MiB
    # per token, x 4,194,304 tokens = 10 TiB; GQA-8 1.25 TiB. At 40 columns the totals stay; the
    # columns the variant names already say (heads, dtype) go first.
    out = run("compare", "mha", "gqa", "mla:512+64", "swa:4096+fp8", "--seq", "128k", env={"COLUMNS": "40"}).stdout
    assert re.search(r"^ mha\s.*\b10 TiB $", out, re.M) and re.search(r"^ gqa\s.*1\.25 TiB $", out, re.M), out
    assert "Left out at this width: KV heads, KV dtype" in " ".join(out.split())


def test_model_names_never_break():
    out = run("models", env={"COLUMNS": "80"}).stdout
    for name in ("llama-3.1-405b", "deepseek-v2-lite", "qwen3-30b-a3b"):
        assert re.search(rf"^ {re.escape(name)}\s", out, re.M), name


def test_not_a_terminal_keeps_the_natural_width():
    out = run("roofline", "7b", "--gpu", "a100", "--batch", "1", env={"COLUMNS": ""}).stdout
    title = out.splitlines()[0]
    assert title.startswith("Decode roofline: 7b on a100") and title.endswith("FLOP/B)")  # one line, no wrap at 80
    assert cell_len(title) > 80


def test_gpus_table_is_compact():
    out = run("gpus", env={"COLUMNS": "80"}).stdout
    header = " ".join(out.split("─")[0].split())
    assert "name memory HBM bf16 fp8 TFLOP/s TFLOP/s ridge bf16 FLOP/B" in header.replace("\n", " ") or (
        "memory" in header and "ridge" in header
    )
    assert "A100 80GB SXM" not in out  # full names and sources live in --format json
    assert max(cell_len(line) for line in out.splitlines()) <= 80
    assert "the sources: kvcalc gpus --format json" in " ".join(out.split())


def test_a_long_table_is_laid_out_fast_and_the_same():
    from kvcalc.present.render import PLAIN_ROWS

    # timed in benchmarks/bounds.py; here the layout
    big = run("roofline", "7b", "--gpu", "h100", "--batch", "1..16384+1", env={"COLUMNS": ""})
    assert big.exit_code == 0
    assert len(big.stdout.splitlines()) > 16384
    # one row more than PLAIN_ROWS takes the direct layout; its first lines equal Rich's table
    rich_made = run("roofline", "7b", "--gpu", "h100", "--batch", f"1..{PLAIN_ROWS}+1", env={"COLUMNS": ""})
    direct = run("roofline", "7b", "--gpu", "h100", "--batch", f"1..{PLAIN_ROWS + 1}+1", env={"COLUMNS": ""})
    assert direct.stdout.splitlines()[: PLAIN_ROWS + 4] == rich_made.stdout.splitlines()[: PLAIN_ROWS + 4]


def test_narrow_tables_keep_the_answer_columns():
    # fit's grid: the verdict per row stays; weights (14.96 GiB on every row) and the budget go first.
    # llama-3-8b, batch 64 x 8,192: 64 x 128 KiB x 8,192 = 64 GiB of KV > 71.27 - 14.96 - 2 GiB: NO
    out = run("fit", "llama-3-8b", "--gpu", "h100", "--batch", "1,64", "--seq", "8k", env={"COLUMNS": "40"}).stdout
    assert re.search(r"^\s+64\s+8,192\s+64 GiB\s+NO\s+54\s*$", out, re.M), out
    assert "Left out at this width: weights, total, budget" in " ".join(out.split())
    # cache: bytes per token stay (gemma-3-27b sliding: 52 x 2 x 16 x 128 x 2 B = 416 KiB)
    out = run("cache", "gemma-3-27b", env={"COLUMNS": "40"}).stdout
    assert re.search(r"^ 52\s+sliding W=1,024\s+416 KiB\s*$", out, re.M), out


def test_a_long_stacked_layout_is_fast_and_fits():
    # 30 columns fit no table: one block per row. 20,000 rows as Rich Texts took 5 s; laid out as
    # ready-made lines (wrapped at spaces, no word cut) they take a fraction of that (benchmarks/bounds.py).
    out = run("roofline", "7b", "--gpu", "h100", "--batch", "1..20000+1", env={"COLUMNS": "30"}).stdout
    lines = out.splitlines()
    assert max(cell_len(line) for line in lines) <= 30
    # 7b batch 1 at 8,192 tokens (the default) on h100: (14e9 + 4 GiB) / 3.35 TB/s = 5.46 ms, 183.1 tokens/s;
    # the column is in seconds (batch 20,000 takes seconds), so three significant digits, not "0.01"
    assert "step s >=: 0.00546" in lines and "tok/s <=: 183.1" in lines and "batch: 20,000" in lines
    assert "KV read TiB: 0.00391" in lines  # 4 GiB


def test_small_figures_in_a_large_unit_keep_three_digits():
    # batch 1 x 1 token of 7b: 524,288 B of KV = 0.000488 GiB beside batch 4,096's 2 GiB (was "0.00")
    out = run("roofline", "7b", "--gpu", "h100", "--batch", "1,4096", "--seq", "1", env={"COLUMNS": "200"}).stdout
    assert re.search(r"^ 1\s+1\s+13\.04\s+0\.000488\s", out, re.M), out
    # batch 1 x 128k: 64 GiB = 0.0625 TiB; step (14e9 B + 64 GiB) / 3.35 TB/s = 24.7 ms = 0.0247 s
    out = run("roofline", "7b", "--gpu", "h100", "--batch", "1,512", "--seq", "128k", env={"COLUMNS": "200"}).stdout
    assert re.search(r"^ 1\s+131,072\s+13\.04\s+0\.0625\s.*\s0\.0247\s+40\.5\s", out, re.M), out
