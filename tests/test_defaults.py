"""Issue 23's defaults: one default context across commands, stated in --help; the row limits the README
states are the code's; generate's deployment answer without the teaching figures (they are --explain's)."""

from __future__ import annotations

import re

import pytest
from conftest import REPO, run, run_json

from kvcalc.units import DEFAULT_NEW, DEFAULT_SEQ, FIT_MAX_ROWS, MAX_ROWS


def test_every_command_defaults_to_one_context():
    assert DEFAULT_SEQ == 8192
    assert run_json("cache", "llama-3-8b")["seq"] == DEFAULT_SEQ
    assert {r["seq"] for r in run_json("roofline", "7b", "--gpu", "h100")["rows"]} == {DEFAULT_SEQ}
    assert run_json("fit", "llama-3-8b", "--gpu", "h100")["seq"] == DEFAULT_SEQ
    assert run_json("compare", "mha", "gqa")["seq"] == DEFAULT_SEQ
    out = run_json("generate", "llama-3-8b", "--gpu", "h100")
    assert out["prompt"] + out["new"] == DEFAULT_SEQ and out["new"] == DEFAULT_NEW
    assert out["warnings"] == []  # llama-3-8b's 8,192-token maximum is not overrun by the default


@pytest.mark.parametrize("command", ["cache", "roofline", "fit", "compare"])
def test_help_states_the_default_context(command):
    text = " ".join(run(command, "--help", env={"COLUMNS": "300"}).stdout.split())
    assert "default 8k = 8,192, every command's" in text


def test_generate_help_states_prompt_plus_new_is_the_default_context():
    text = " ".join(run("generate", "--help", env={"COLUMNS": "300"}).stdout.split())
    assert "default 7,936: with 256 new, the 8,192-token default context" in text


def test_python_api_defaults_match_the_cli():
    import kvcalc

    assert kvcalc.cache("llama-3-8b").seq == DEFAULT_SEQ
    assert kvcalc.roofline("7b", "h100", batch=1).rows[0].seq == DEFAULT_SEQ
    g = kvcalc.generate("llama-3-8b", "h100")
    assert g.prompt + g.new == DEFAULT_SEQ


def test_readme_states_the_row_limits_of_the_code():
    text = " ".join((REPO / "README.md").read_text().split())
    section = text.split("### Numbers, errors and output", 1)[1].split("### ", 1)[0]
    assert f"more than {MAX_ROWS:,} rows" in section
    assert f"`fit` checks at most {FIT_MAX_ROWS:,} batch × seq combinations" in section
    # and the refusals quote each command's own limit
    fit = run("fit", "7b", "--gpu", "h100", "--batch", "1..200+1", "--seq", "1..100+1").stderr
    assert f"more than the {FIT_MAX_ROWS:,} fit computes in one run" in fit
    cache = run("cache", "7b", "--batch", "1..300+1", "--seq", "1..300+1").stderr
    assert f"more than the {MAX_ROWS:,} cache computes in one run" in cache


def test_generate_answer_leaves_the_lesson_to_explain():
    table = run("generate", "llama-3-8b", "--gpu", "h100").stdout
    assert "without one" not in table and "concatenation" not in table
    assert run_json("generate", "llama-3-8b", "--gpu", "h100")["lesson"] is None
    explained = run_json("generate", "llama-3-8b", "--gpu", "h100", "--explain")
    lesson = [line for line in explained["explanation"] if line.startswith("[lesson]")]
    assert len(lesson) == 2 and "concatenation copies" in lesson[1]
    # THEORY section 1: concatenation copies prompt + 1 .. prompt + new positions, preallocation writes new
    p, n = explained["prompt"], explained["new"]
    assert explained["lesson"]["concat_positions_copied"] == sum(range(p + 1, p + n + 1))
    assert re.search(r"concatenation copies [\d,]+ positions", lesson[1])
