"""--plot (terminal and files) and --explain (whose last line must equal the JSON figure)."""

import re
import struct
import sys
import xml.etree.ElementTree as ET

import pytest
from conftest import GiB, run, run_json


def _ids(svg_path):
    root = ET.parse(svg_path).getroot()
    return [el.get("id") for el in root.iter() if el.get("id")]


def _markers(svg_path, prefix):
    """{group id: markers drawn in it} for the SVG groups whose id starts with prefix."""
    root = ET.parse(svg_path).getroot()
    return {
        el.get("id"): sum(1 for u in el.iter() if u.tag.endswith("use"))
        for el in root.iter()
        if (el.get("id") or "").startswith(prefix)
    }


def test_roofline_svg_has_one_marker_per_row_and_one_roof_per_gpu(tmp_path):
    path = tmp_path / "roof.svg"
    result = run("roofline", "7b", "--gpu", "a100,h100,h200", "--batch", "1,8,64", "--seq", "1k,4k", "--plot", path)
    assert result.exit_code == 0, result.stderr
    ids = _ids(path)
    assert sorted(i for i in ids if i.startswith("roof-")) == ["roof-a100", "roof-h100", "roof-h200"]
    # one series per GPU and context (3 x 2), each with a marker per batch (3): 18 rows, 18 markers
    points = _markers(path, "point-")
    assert len(points) == 3 * 2 and set(points.values()) == {3}
    assert len([i for i in ids if i.startswith("ridge-")]) == 3
    # six series start at batch 1 (intensity ~1 at both contexts on every GPU): labels there would
    # print over each other, so the legend alone names them
    assert not [i for i in ids if i.startswith("label-")]
    one = tmp_path / "one.svg"
    assert run("roofline", "7b", "--gpu", "h100", "--batch", "1,8", "--plot", one).exit_code == 0
    assert [i for i in _ids(one) if i.startswith("label-")] == ["label-point-h100-8192"]


def test_big_sweep_plot_is_capped_and_fast(tmp_path):
    path = tmp_path / "big.svg"  # timed in benchmarks/bounds.py
    # 16,384 rows: 1..16384 step 1 at one context, on one GPU
    result = run("roofline", "7b", "--gpu", "h100", "--batch", "1..16384+1", "--plot", path, "-f", "csv")
    assert result.exit_code == 0, result.stderr
    points = _markers(path, "point-")
    assert len(points) == 1 and sum(points.values()) == 16384  # one series holds every row


def test_png_has_requested_size(tmp_path):
    path = tmp_path / "cache.png"
    result = run("cache", "llama-3-8b", "--batch", "1,16", "--gpu", "h100", "--plot", path, "--plot-size", "800x500")
    assert result.exit_code == 0, result.stderr
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (800, 500)


def test_cache_svg_shows_gpu_lines(tmp_path):
    path = tmp_path / "cache.svg"
    assert run("cache", "llama-3-70b", "--batch", "1,8", "--gpu", "h200", "--plot", path).exit_code == 0
    ids = _ids(path)
    assert {"batch-1", "batch-8", "gpu-memory", "gpu-minus-weights"} <= set(ids)


def test_compare_pdf_and_bars(tmp_path):
    assert run("compare", "mha", "gqa", "mqa", "--plot", tmp_path / "c.pdf").exit_code == 0
    assert (tmp_path / "c.pdf").read_bytes()[:5] == b"%PDF-"
    svg = tmp_path / "c.svg"
    assert run("compare", "mha", "gqa", "mqa", "--plot", svg).exit_code == 0
    assert sorted(i for i in _ids(svg) if i.startswith("bar-")) == ["bar-0", "bar-1", "bar-2"]


@pytest.mark.parametrize("columns", [60, 100, 160])
def test_terminal_chart_fits_columns(columns):
    result = run("roofline", "7b", "--gpu", "a100,h100", "--batch", "1,8", "--plot", env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.stderr
    chart = result.stdout.split("real kernels reach a fraction of both roofs.")[-1]
    lines = [line for line in chart.splitlines() if line.strip()]
    assert len(lines) > 10 and "S=8k, B=1..8 a100" in chart and "a100 roof" in chart
    assert max(len(line) for line in result.stdout.splitlines()) <= columns
    assert "\x1b[" not in result.stdout  # no colour codes when not a terminal: markers and labels carry it


def test_unknown_chart_suffix():
    result = run("compare", "mha", "--plot", "chart.gif")
    assert result.exit_code != 0
    assert "cannot write a chart to 'chart.gif' (use one of .svg, .png, .pdf)" in result.stderr
    assert result.stdout == ""  # refused before any output


def test_plot_without_extra_gives_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "plotext", None)  # as if kvcalc[plot] were not installed
    result = run("roofline", "7b", "--gpu", "a100", "--plot")
    assert result.exit_code != 0 and result.stdout == ""
    assert result.stderr == (
        "kvcalc: error: --plot needs the optional package 'plotext', which is not installed. (pip install 'kvcalc[plot]')\n"
    )


def _last_number(line, unit):
    m = re.findall(rf"([\d,]+(?:\.\d+)?) {unit}", line)
    return float(m[-1].replace(",", ""))


def test_cache_explanation_ends_in_the_json_figure():
    out = run_json("cache", "meta-llama/Meta-Llama-3-8B", "--batch", "16", "--seq", "8192", "--explain")
    steps = out["explanation"]
    assert steps[0] == "full layers: 2 (K and V) × 32 layers × 8 KV heads × 128 head dim = 65,536 elements per token"
    assert steps[1] == "65,536 elements × 2 B (bf16) = 131,072 B per token"
    assert steps[-1] == "× 16 sequences × 8,192 tokens = 17,179,869,184 B = 16 GiB"
    assert _last_number(steps[-1], "B") == out["total_bytes"] == 16 * GiB


@pytest.mark.parametrize("model", ["mistral-7b", "deepseek-v2", "gemma-3-27b"])
def test_special_layers_have_their_own_step(model):
    out = run_json("cache", model, "--seq", "32k", "--batch", "2", "--explain")
    text = "\n".join(out["explanation"])
    assert _last_number(out["explanation"][-1], "B") == out["total_bytes"]
    if model == "mistral-7b":
        assert "each sliding layer holds min(32,768 tokens, window 4,096) = 4,096 tokens" in text
    if model == "deepseek-v2":
        assert "MLA layers: (512 latent + 64 RoPE key) × 60 layers = 34,560 elements per token" in text
    if model == "gemma-3-27b":
        assert "each sliding layer holds min(32,768 tokens, window 1,024) = 1,024 tokens" in text
        assert "sum of elements × tokens held over the layers" in text


def test_tp_replication_and_block_rounding_steps():
    out = run_json("fit", "llama-3-70b", "--gpu", "h100", "--tp", "16", "--seq", "8193", "--explain")
    text = "\n".join(out["explanation"])
    assert "max(1, 8 KV heads // 16) = 1 KV head per rank (replicated" in text
    assert "⌈8,193 / 16⌉ = 513 blocks = 8,208 token slots" in text
    assert out["explanation"][-1].endswith(f"= {out['max_batch']:,}")


def test_compare_explanation_matches_each_row():
    out = run_json("compare", "mha", "gqa", "mqa", "--explain")
    finals = [line for line in out["explanation"] if "sequences ×" in line]
    assert (
        [int(_last_number(f, "B")) for f in finals]
        == [r["total_bytes"] for r in out["rows"]]
        == [640 * GiB, 80 * GiB, 10 * GiB]
    )


def test_roofline_explanation_matches_rows():
    out = run_json("roofline", "7b", "--gpu", "a100", "--batch", "1,8,64", "--seq", "1024,4096", "--explain")
    finals = [line for line in out["explanation"] if line.strip().startswith("tokens/s <=")]
    assert len(finals) == len(out["rows"]) == 6
    for line, row in zip(finals, out["rows"]):
        assert float(line.rsplit("= ", 1)[1].replace(",", "")) == round(row["tokens_per_s"], 1)
    assert "= 140.3" in finals[0] and "= 891.6" in finals[1]


def test_generate_and_vllm_explanations_end_in_figures():
    out = run_json("generate", "7b", "--gpu", "a100", "--prompt", "1k", "--new", "64", "--explain")
    total = [line for line in out["explanation"] if line.startswith("[ceiling] total")]
    assert float(total[0].rsplit("= ", 1)[1].replace(",", "")) == round(out["tokens_per_s"], 1)
    assert out["explanation"][-2].startswith("[lesson] FLOPs with a KV cache")  # the lesson comes last
    fit = run_json(
        "fit",
        "llama-3.1-8b",
        "--gpu",
        "h100",
        "--engine",
        "vllm",
        "--kv-memory",
        "58.11GiB",
        "--seq",
        "8192",
        "--explain",
    )
    assert f"= {fit['vllm']['kv_cache_tokens']:,};" in fit["explanation"][-1]
    assert fit["explanation"][-1].endswith(f"= {fit['vllm']['max_concurrency']:.2f}x")


def test_cache_chart_marks_the_seq_values_asked_for(tmp_path):
    path = tmp_path / "cache.svg"
    result = run("cache", "llama-3-8b", "--batch", "1,8", "--seq", "1k,32k,100000", "--plot", path)
    assert result.exit_code == 0, result.stderr
    asked = _markers(path, "asked")
    assert asked == {"asked": 2 * 3}  # one marker per batch line and --seq value
