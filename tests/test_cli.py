"""CLI behaviour: help, version, formats, and bad input as one clear line on stderr."""

import csv
import io
import json
import re

import pytest
from conftest import run, run_json

COMMANDS = ["cache", "roofline", "compare", "models", "gpus", "show", "fit", "generate", "lab"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command):
    result = run(command, "--help")
    assert result.exit_code == 0
    assert "Usage:" in result.stdout and "--format" in result.stdout


def test_option_help_names_only_flags_its_command_has():
    # `show --encoder-seq` said "default: --seq", a flag show does not take.
    import typer.main

    from kvcalc.cli.app import app

    group = typer.main.get_command(app)
    assert set(COMMANDS) | {"probe"} <= set(group.commands)
    wrong = []
    for name, command in group.commands.items():
        flags = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
        for param in command.params:
            for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", getattr(param, "help", None) or ""):
                if flag not in flags:
                    wrong.append(f"{name} {param.opts[0]}: {flag}")
    assert wrong == []


def test_version():
    from kvcalc import __version__

    result = run("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"kvcalc {__version__}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["cache", "lama-3-8b"], "unknown model 'lama-3-8b' (did you mean: llama-3-8b"),
        (["roofline", "7b", "--gpu", "h1000"], "unknown GPU 'h1000' (did you mean: h100"),
        (["cache", "7b", "--batch", "0"], "--batch must be at least 1, got 0"),
        (["cache", "7b", "--batch", "-3"], "--batch must be at least 1, got -3"),
        (["cache", "7b", "--seq", "64..8"], "--seq range '64..8' runs backwards"),
        (["cache", "7b", "--kv-dtype", "fp7"], "unknown data type 'fp7' (allowed: fp32, bf16, fp16, fp8, int8, int4)"),
        # "FP4" is two formats: the hint names both; not on --kv-dtype, which takes neither
        (["roofline", "7b", "--gpu", "b200", "--dtype", "fp4"], "'fp4'; did you mean nvfp4 (NVIDIA's FP4"),
        (["cache", "7b", "--kv-dtype", "fp4"], "unknown data type 'fp4' (allowed: fp32, bf16, fp16, fp8, int8, int4)"),
        (["cache", "7b", "--dtype", "gptq"], "'gptq'; did you mean int4"),
        (["cache", "7b", "--kv-heads", "5"], "num_heads (32) must be divisible by num_kv_heads (5)"),
        (["cache", "7b", "--kv-heads", "0"], "--kv-heads must be a positive integer, got 0"),
        (["compare", "gqa:5"], "64 query heads cannot be split into 5 KV-head groups"),
        (["compare", "swa"], "give the window"),
        (["cache", "./nowhere/config.json"], "no such file or folder"),
    ],
)
def test_bad_input_is_one_line_on_stderr(args, message):
    result = run(*args)
    assert result.exit_code != 0
    assert result.stdout == ""
    assert message in result.stderr
    assert result.stderr.startswith("kvcalc: error: ")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_names_are_case_insensitive_and_aliases_work():
    assert run_json("cache", "LLaMA-3-8B")["model"] == "llama-3-8b"
    assert run_json("cache", "meta-llama/meta-llama-3-8b-instruct")["model"] == "llama-3-8b"
    assert run_json("roofline", "7b", "--gpu", "A100-80GB", "--batch", "1")["gpu"] == "a100"


def test_csv_has_exact_bytes():
    result = run("cache", "llama-3-8b", "--batch", "1,16", "--seq", "8k", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [int(r["total_bytes"]) for r in rows] == [2**30, 16 * 2**30]


def test_csv_gives_the_estimate_its_own_columns():
    # the estimate and its interval are columns (estimate.tpot_s, .lo / .hi) a script reads, not one cell holding
    # a Python dict; they match the JSON, and a list (warnings) is one cell
    args = ("generate", "llama-3-8b", "--gpu", "h100", "--prompt", "1k", "--new", "128", "--batch", "4")
    row = next(csv.DictReader(io.StringIO(run(*args, "--format", "csv").stdout)))
    est = run_json(*args)["estimate"]
    for name in ("ttft_s", "tpot_s", "total_s", "tokens_per_s"):
        lo, mid, hi = (float(row[f"estimate.{name}{end}"]) for end in (".lo", "", ".hi"))
        assert (lo, mid, hi) == (*est["interval"][name][:1], est[name], *est["interval"][name][1:])
    assert "{" not in "".join(row.values())
    roof = next(csv.DictReader(io.StringIO(run("roofline", "7b", "--gpu", "a100", "--batch", "8", "-f", "csv").stdout)))
    assert (
        float(roof["estimate.interval_s.lo"]) <= float(roof["estimate.step_s"]) <= float(roof["estimate.interval_s.hi"])
    )


def test_markdown_and_table_show_units():
    md = run("compare", "mha", "gqa", "--format", "markdown").stdout
    assert "| mha | 64 | bf16 | 2.50 MiB | 640 GiB | 1x |" in md
    table = run("cache", "llama-3-8b", "--batch", "16", "--seq", "8192").stdout
    assert "16 GiB (17,179,869,184 B)" in table


def test_markdown_cells_keep_their_bars():
    # the lab's claims hold absolute values, |a - b|: unescaped, each bar would open a cell
    from kvcalc.present.sheet import Sheet, to_markdown

    sheet = Sheet(title="t", columns=["check", "measured"], rows=[["mask", "|logits - full|: 0.0"]])
    row = to_markdown(sheet).splitlines()[-1]
    assert row == "| mask | \\|logits - full\\|: 0.0 |"
    assert row.replace("\\|", "").count("|") == len(sheet.columns) + 1


def test_grid_json_lists_rows():
    out = run_json("cache", "llama-3-8b", "--batch", "1,2", "--seq", "1k,2k")
    assert [(r["batch"], r["seq"]) for r in out["rows"]] == [(1, 1024), (2, 1024), (1, 2048), (2, 2048)]


def test_cache_gpu_share():
    out = run_json("cache", "llama-3-8b", "--batch", "16", "--seq", "8k", "--gpu", "a100")
    # the A100 80GB's capacity as CUDA reports it: 79.15 GiB (gpu_presets/a100.yaml)
    assert out["gpu_memory_bytes"] == round(79.15 * 2**30) == 84_986_665_370
    assert out["gpu_memory_share"] == 16 * 2**30 / 84_986_665_370


def test_sliding_window_override_caps_cache():
    full = run_json("cache", "llama-3-8b", "--seq", "32k")["total_bytes"]
    windowed = run_json("cache", "llama-3-8b", "--seq", "32k", "--window", "4k")["total_bytes"]
    assert windowed * 8 == full


def test_models_and_gpus_list_presets():
    models = run_json("models")["rows"]
    assert len(models) >= 25 and {"7b", "70b", "deepseek-v3", "gpt-oss-120b"} <= {m["name"] for m in models}
    gpus = run_json("gpus")["rows"]
    assert len(gpus) >= 20
    a100 = next(g for g in gpus if g["name"] == "a100")
    assert a100["peak_dense_tflop_per_s"]["bf16"] == 312 and a100["bandwidth_bytes_per_s"] == 2_039_000_000_000


def test_show_reports_source():
    out = run_json("show", "qwen3-8b")
    assert out["source"] == "preset" and out["spec"]["head_dim"] == 128
    assert out["kv_bytes_per_token_bf16"] == 36 * 8 * 128 * 2 * 2


def test_preset_start_does_not_import_hub_plotting_or_pyyaml():
    import subprocess
    import sys

    code = (
        "import sys; from typer.testing import CliRunner; from kvcalc.cli.app import app;"
        "r = CliRunner().invoke(app, ['cache', 'llama-3-8b']); assert r.exit_code == 0, r.output;"
        "r = CliRunner().invoke(app, ['roofline', '7b', '--gpu', 'a100']); assert r.exit_code == 0, r.output;"
        # PyYAML too: the shipped presets are read by kvcalc/presetyaml.py (start-up time)
        "print(sorted(m for m in ('huggingface_hub', 'matplotlib', 'plotext', 'numpy', 'yaml') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().replace("'", '"')) == []


def test_cache_start_imports_only_its_own_command_and_runs_without_the_collector():
    # `kvcalc cache MODEL` is the start-up benchmark (issue 12, benchmarks/startup.py): it must not
    # define the other commands' result models (roofline, fit, vllm, generate, variants), the GPU
    # model (no --gpu) or import json; the command runs with the cyclic collector off, while the
    # Python API leaves the caller's collector alone.
    import subprocess
    import sys

    others = [
        "json",
        "yaml",
        "kvcalc.hardware.gpu",
        "kvcalc.cost.roofline",
        "kvcalc.plan.fit",
        "kvcalc.engines.vllm.figures",
        "kvcalc.plan.generate",
    ]
    others += ["kvcalc.plan.variants", "kvcalc.cost.shard", "kvcalc.cost.params", "kvcalc.cost.step", "kvcalc.api"]
    code = (
        "import atexit, gc, sys\n"
        f"atexit.register(lambda: sys.stderr.write('LOADED %r %r\\n' % ([m for m in {others!r} if m in sys.modules], gc.isenabled())))\n"
        "sys.argv = ['kvcalc', 'cache', 'llama-3-8b']\n"
        "from kvcalc.__main__ import main\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    # the default context, 8,192 tokens x 128 KiB = 1 GiB (issue 23: one default context; 4,096 before)
    assert done.returncode == 0 and "1,073,741,824 B" in done.stdout, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "LOADED [] False"
    api = "import gc, kvcalc; r = kvcalc.cache('llama-3-8b'); print(r.total_bytes, gc.isenabled())"
    done = subprocess.run([sys.executable, "-c", api], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["1073741824", "True"]


def test_mla_has_no_kv_heads_in_any_listing():
    # deepseek-v3 caches one latent per token, 61 layers x (kv_lora_rank 512 + rope 64) x 2 B = 70,272 B;
    # `compare` and `cache` never showed its 128 attention heads as KV heads, `models` and `show` did
    rows = {r["name"]: r for r in run_json("models")["rows"]}
    assert rows["deepseek-v3"]["kv_heads"] is None and rows["deepseek-v3"]["kv_bytes_per_token_bf16"] == 61 * 576 * 2
    assert rows["llama-3-8b"]["kv_heads"] == 8
    assert run_json("compare", "deepseek-v3", "llama-3-8b")["rows"][0]["kv_heads"] is None
    line = next(s for s in run("models", env={"COLUMNS": "200"}).stdout.splitlines() if s.startswith(" deepseek-v3 "))
    assert line.split()[1:5] == ["61", "128", "latent", "128"]
    assert "none: an MLA latent of 512 + 64 elements per token" in run("show", "deepseek-v3").stdout


def test_kv_heads_listed_are_the_cached_ones():
    # Nemotron Super 49B's block_configs give every attention layer 64 / n_heads_in_group 8 = 8 KV heads; its
    # config has no num_key_value_heads, so the model-level figure is its 64 query heads, which no layer caches
    # (`show` and `models` listed 64). Gemma 4 26B's sliding layers cache 8, its full layers 2.
    rows = {r["name"]: r for r in run_json("models")["rows"]}
    assert rows["llama-3.3-nemotron-super-49b"]["kv_heads"] == 8 and rows["gemma-4-26b-a4b"]["kv_heads"] == 8
    show = run("show", "llama-3.3-nemotron-super-49b", env={"COLUMNS": "200"}).stdout
    assert re.search(r"^ KV heads \(effective\)\s+8\s*$", show, re.M)
    show = run("show", "gemma-4-26b-a4b", env={"COLUMNS": "200"}).stdout
    assert re.search(r"^ KV heads \(effective\)\s+8; 2 on the layers that set their own\s*$", show, re.M)


def test_show_lists_nested_fields_one_per_row():
    # deepseek-v3's checkpoint is block-quantized fp8 with 128-wide groups: one row each, no Python dict
    out = run("show", "deepseek-v3", env={"COLUMNS": "200"}).stdout
    assert re.search(r"^ checkpoint\.quantization\.method\s+fp8\s*$", out, re.M)
    assert re.search(r"^ checkpoint\.quantization\.linear\.group_size\s+128\s*$", out, re.M)
    assert "{'" not in out and "None" not in out
    # the JSON's kv_bytes_per_token_bf16 is in the table too: 61 x (512 + 64) x 2 B = 70,272 B
    assert run_json("show", "deepseek-v3")["kv_bytes_per_token_bf16"] == 70_272
    assert re.search(r"^ KV cache per token \(bf16\)\s+68\.62 KiB \(70,272 B", out, re.M)


@pytest.mark.parametrize(("images", "cross_tokens"), [(0, 0), (1, 6404), (2, 12808)])
def test_images_on_the_llama_vision_preset(images, cross_tokens):
    # the preset's pattern is a period of 5 layers (3 full, 1 cross, 1 full), 8 times over 40 layers.
    # Per layer and token: 8 KV heads x 128 x (K and V) x 2 B = 4,096 B. At the default seq 8,192 (batch 1):
    # 32 full layers x 8,192 x 4,096 B = 1 GiB, plus 8 cross layers x 4,096 B x 6,404 tokens per image.
    # Every --images was refused ("layer_pattern covers 88 layers") before.
    out = run_json("cache", "llama-3.2-11b-vision", "--images", str(images))
    assert out["total_bytes"] == 32 * 8192 * 4096 + 8 * 4096 * cross_tokens
    assert [(r["kind"], r["layers"], r["tokens_held"]) for r in out["layers"]] == [
        ("full", 32, 8192),
        ("cross", 8, cross_tokens),
    ]


def test_explain_of_a_large_grid_shows_its_first_and_last_rows():
    # 7b: 2 x 32 layers x 32 KV heads x 128 = 262,144 elements x 2 B = 524,288 B per token. Every row
    # of a 50,000-row grid explained printed 250,000 lines in 18 s; now the first and last batch.
    out = run_json("cache", "7b", "--batch", "1..5000+1", "--seq", "4096", "--explain")
    lines = out["explanation"]
    assert lines[0] == "(the arithmetic of 2 of the 5,000 --batch x --seq rows: the first and last value of each)"
    totals = [line for line in lines if line.startswith("× ")]
    assert totals == [
        f"× 1 sequence × 4,096 tokens = {524_288 * 4096:,} B = 2 GiB",
        f"× 5,000 sequences × 4,096 tokens = {5000 * 524_288 * 4096:,} B = 9.77 TiB",
    ]
    assert out["rows"][-1]["total_bytes"] == 5000 * 524_288 * 4096
    # a small grid is still explained row by row
    small = run_json("cache", "7b", "--batch", "1,2,4", "--seq", "1k,2k", "--explain")["explanation"]
    assert len([line for line in small if line.startswith("× ")]) == 6


def test_compare_grid_is_one_table():
    # 70b: MHA 80 x 2 x 64 x 128 x 2 B = 2.50 MiB per token; batch 8 x 8,192 tokens = 160 GiB
    out = run("compare", "mha", "gqa", "--batch", "1,8", "--seq", "1k,8k", env={"COLUMNS": "200"}).stdout
    assert out.count("KV cache compared") == 1
    assert re.search(r"^\s+8\s+8,192\s+mha\s+64\s+bf16\s+2\.50 MiB\s+160 GiB\s+1x\s*$", out, re.M), out
    assert len(re.findall(r"^\s+\d+\s+[\d,]+\s+(mha|gqa)\s", out, re.M)) == 2 * 2 * 2


def test_cache_warns_beyond_the_trained_context_as_roofline_does():
    # deepseek-v3 was trained for 163,840 positions; 1m (1,048,576) is a what-if. The cache is still
    # 61 x 576 x 2 B = 70,272 B per token x 1,048,576 tokens; `roofline` warned, `cache` said nothing.
    out = run_json("cache", "deepseek-v3", "--seq", "1m")
    assert out["total_bytes"] == 70_272 * 1_048_576
    assert out["warnings"] == [
        "context 1,048,576 tokens exceeds deepseek-v3's max_position_embeddings 163,840: "
        "the model was not trained for it (a what-if, not a plan)"
    ]
    roof = run_json("roofline", "deepseek-v3", "--gpu", "h200", "--batch", "1", "--seq", "1m")
    assert out["warnings"][0] in roof["warnings"]
    assert run_json("cache", "deepseek-v3", "--seq", "160k")["warnings"] == []  # 163,840 is within
    table = run("cache", "deepseek-v3", "--seq", "4k,256k,1m").stdout
    assert table.count("Warning: context") == 1 and "context 1,048,576 tokens exceeds" in table


def test_an_impossible_what_if_is_a_usage_error():
    # 32 query heads cannot share 3 KV heads: the option is wrong, not the model (README: exit 2 for
    # usage errors, 1 for unknown or malformed models)
    result = run("cache", "7b", "--kv-heads", "3")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == "kvcalc: error: model '7b': num_heads (32) must be divisible by num_kv_heads (3)\n"


def test_cache_chart_takes_one_ranks_weights_with_tp(tmp_path):
    # llama-3-70b holds 131.42 GiB of bf16 weights, more than an H100's 79.19 GiB: the "memory - weights"
    # line was left out at --tp 4 although each rank holds about a quarter (the cache drawn is one rank's)
    from kvcalc.cost.shard import rank_weight_bytes_resident
    from kvcalc.model.presets import get_gpu, get_model

    rank = rank_weight_bytes_resident(get_model("llama-3-70b"), 4)
    assert rank < get_gpu("h100").capacity_bytes < 4 * rank
    svg = tmp_path / "c.svg"
    assert run("cache", "llama-3-70b", "--gpu", "h100", "--tp", "4", "--plot", svg).exit_code == 0
    assert 'id="gpu-minus-weights"' in svg.read_text()


@pytest.mark.parametrize("model", ["llama-3.1-8b", "meta-llama/Llama-3.1-8B", "mistral-7b-v0.3", "qwen2.5-7b"])
def test_bare_plot_before_a_dotted_model_name(model):
    # `--plot MODEL`: a version dot is not a chart suffix, so MODEL stays the argument (it was taken as
    # the chart file: "Missing argument 'model'")
    result = run("cache", "--plot", model, "--seq", "8k")
    assert result.exit_code == 0, result.stderr
    assert "context (tokens, log)" in result.stdout and result.stderr == ""


def test_plot_dash_is_the_terminal_chart():
    # `--plot -` (the value a bare --plot stands for) was split into --plot=- and a stray "-"
    result = run("cache", "7b", "--plot", "-")
    assert result.exit_code == 0, result.stderr
    assert "context (tokens, log)" in result.stdout


def test_roofline_names_a_mixed_checkpoint_by_its_formats():
    # gpt-oss-120b's experts are MXFP4 and the rest bf16: the title and JSON name the mix, not the model's 16-bit
    # dtype alone ("bf16 weights" before), and `dtype` stays the --dtype value (a what-if names one format)
    out = run_json("roofline", "gpt-oss-120b", "--gpu", "h100", "--batch", "1", "--ceiling")
    assert out["weight_format"] == "mxfp4 experts + bf16" and out["dtype"] == "bf16"
    title = run("roofline", "gpt-oss-120b", "--gpu", "h100", "--batch", "1", "--ceiling").stdout.splitlines()[0]
    assert "(mxfp4 experts + bf16 weights, bf16 KV," in title
    what_if = run_json("roofline", "gpt-oss-120b", "--gpu", "h100", "--batch", "1", "--ceiling", "--dtype", "fp8")
    assert what_if["weight_format"] == what_if["dtype"] == "fp8"
