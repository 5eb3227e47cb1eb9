"""Preset files by path, the user preset folder, and the rule that a user preset never shadows a built-in."""

import sys

import pytest
from conftest import GiB, run, run_json

from kvcalc.errors import SpecError, UsageError
from kvcalc.model import presets as presets

GPU = """\
full_name: "Test box"
memory_bytes: 64_000_000_000
hbm_bandwidth_bytes_per_s: 100_000_000_000
peak_dense_tflop_per_s: {fp32: 2.0}
sources: ["written by hand for a test"]
"""
# THEORY.md section 2's 70B with GQA-8: L 80, G 8, d_head 128.
MODEL = """\
aliases: ["my-seventy"]
num_layers: 80
hidden_size: 8192
num_heads: 64
num_kv_heads: 8
intermediate_size: 28672
vocab_size: 32000
"""


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("KVCALC_PRESETS", str(tmp_path))
    (tmp_path / "gpus").mkdir()
    (tmp_path / "models").mkdir()
    (tmp_path / "gpus" / "box.yaml").write_text(GPU)
    (tmp_path / "models" / "seventy.yaml").write_text(MODEL)
    return tmp_path


def test_gpu_file_by_path_everywhere(folder):
    path = folder / "gpus" / "box.yaml"
    # 7b: 14e9 weight bytes (params 7.0e9 x 2) + 0.5 GiB of KV at 1,024 tokens = 14,536,870,912 B per step;
    # at 100 GB/s that is 0.14537 s; FLOPs 14.5e9 at 2 TFLOP/s (fp32, the only peak) take 7.3 ms: memory-bound.
    row = run_json("roofline", "7b", "--gpu", path, "--batch", "1", "--seq", "1024")
    assert row["bandwidth_bytes_per_s"] == 100_000_000_000 and row["compute_dtype"] == "fp32"
    assert row["rows"][0]["step_seconds"] == pytest.approx(14_536_870_912 / 1e11)
    assert run_json("cache", "7b", "--gpu", path)["gpu_memory_bytes"] == 64_000_000_000
    assert run_json("fit", "llama-3-8b", "--gpu", path, "--seq", "4k")["fits"] is True
    assert run_json("generate", "7b", "--gpu", path, "--prompt", "128", "--new", "4")["new"] == 4
    both = run_json("roofline", "7b", "--gpu", f"box,{path}", "--batch", "1")["results"]
    assert both[0]["rows"] == both[1]["rows"]


def test_model_file_by_path_everywhere(folder):
    path = folder / "models" / "seventy.yaml"
    # 2 x 80 layers x 8 heads x 128 x 2 B = 327,680 B per token; x 32 x 8,192 = 80 GiB (THEORY.md section 2)
    assert run_json("cache", path, "--batch", "32", "--seq", "8192")["total_bytes"] == 80 * GiB
    shown = run_json("show", path)
    assert shown["source"] == "preset file" and shown["location"] == str(path)
    assert shown["spec"]["name"] == "seventy"
    rows = run_json("compare", "mha", "gqa", "--model", path)["rows"]
    assert [r["total_bytes"] for r in rows] == [640 * GiB, 80 * GiB]
    assert run_json("compare", path, "70b")["rows"][0]["total_bytes"] == 80 * GiB
    assert run_json("roofline", path, "--gpu", "h100", "--batch", "1")["rows"]
    assert run_json("fit", path, "--gpu", "h100", "--gpus", "4")["per_gpu"]["weight_bytes"] > 0
    assert run_json("generate", path, "--gpu", "h100", "--new", "2", status=3)["new"] == 2  # 70B: not on one h100


def test_user_folder_names_and_listing(folder):
    assert run_json("show", "seventy")["source"] == "user preset"
    assert run_json("show", "MY-SEVENTY")["spec"]["name"] == "seventy"  # aliases, case-insensitively
    assert run_json("cache", "7b", "--gpu", "box")["gpu"] == "box"
    gpus = {r["name"]: r for r in run_json("gpus")["rows"]}
    assert gpus["box"]["origin"] == "user" and gpus["box"]["location"] == str(folder / "gpus" / "box.yaml")
    assert gpus["h100"]["origin"] == "built-in"
    models = {r["name"]: r["origin"] for r in run_json("models")["rows"]}
    assert models["seventy"] == "user" and models["70b"] == "built-in"
    table = run("gpus", env={"COLUMNS": "200"}).stdout
    assert "box (user)" in table and str(folder / "gpus") in table
    assert "box" in presets.all_names(presets.GPU_DIR) and "h100" in presets.all_names(presets.GPU_DIR)


@pytest.mark.parametrize(
    ("file", "text", "looked_up", "claimed"),
    [
        ("a100.yaml", GPU, "a100", "a100"),  # the same file name
        ("box2.yaml", 'aliases: ["h100-sxm"]\n' + GPU, "h100-sxm", "h100-sxm"),  # a built-in's alias
        ("box3.yaml", 'aliases: ["h100"]\n' + GPU, "box3", "h100"),  # its own name, a built-in's as alias
    ],
)
def test_user_preset_never_shadows_a_built_in(folder, file, text, looked_up, claimed):
    (folder / "gpus" / file).write_text(text)
    for args in (["cache", "7b", "--gpu", looked_up], ["gpus"]):
        result = run(*args)
        assert result.exit_code == 1 and result.stdout == ""
        assert result.stderr.startswith(
            f"kvcalc: error: user GPU preset {folder / 'gpus' / file} claims '{claimed}', which is a built-in GPU preset"
        )
    assert run_json("cache", "7b", "--gpu", "box")["gpu"] == "box"  # other names still work


def test_malformed_files_name_file_and_field(folder):
    bad = folder / "bad.yaml"
    bad.write_text(GPU.replace("100_000_000_000", "-1"))
    result = run("cache", "7b", "--gpu", bad)
    assert result.exit_code == 1
    assert result.stderr == f"kvcalc: error: {bad}: hbm_bandwidth_bytes_per_s: Input should be greater than 0\n"
    bad.write_text(MODEL.replace("num_layers", "num_layerz"))
    # the typo is named, not the field it left missing
    assert run("show", bad).stderr == f"kvcalc: error: {bad}: num_layerz: unknown field (did you mean num_layers?)\n"
    bad.write_text(MODEL.replace("num_kv_heads: 8", "num_kv_head: 8"))  # optional: nothing else is missing
    assert run("show", bad).stderr == f"kvcalc: error: {bad}: num_kv_head: unknown field (did you mean num_kv_heads?)\n"
    # a field given twice: PyYAML keeps the last silently (here 80 layers would become 40)
    bad.write_text(MODEL + "num_layers: 40\n")
    assert (
        run("show", bad).stderr
        == f"kvcalc: error: {bad}: malformed YAML (line 8, column 1): 'num_layers' is given twice\n"
    )
    bad.write_text(GPU.replace("{fp32: 2.0}", "{fp32: 2.0, fp32: 3.0}"))
    assert "'fp32' is given twice" in run("roofline", "7b", "--gpu", bad).stderr
    bad.write_text("num_layers: [80\n")
    assert "malformed YAML (line 2, column 1)" in run("show", bad).stderr
    (folder / "gpus" / "broken.yaml").write_text(GPU + "flops: 3\n")
    assert run("cache", "7b", "--gpu", "broken").stderr.startswith(
        f"kvcalc: error: {folder / 'gpus' / 'broken.yaml'}: flops: unknown field"
    )
    missing = run("cache", "7b", "--gpu", folder / "gpus" / "bx.yaml")
    assert missing.exit_code == 1 and missing.stderr == (
        f"kvcalc: error: no such preset file: {folder / 'gpus' / 'bx.yaml'} "
        f"(did you mean: {folder / 'gpus' / 'box.yaml'}, {folder / 'gpus' / 'broken.yaml'}?)\n"
    )
    assert "folder 'nowhere' does not exist" in run("show", "nowhere/m.yaml").stderr


def test_lookup_reads_one_file(folder):
    # A broken user preset does not stop others from resolving, by stem or by alias: only the file asked for
    # is parsed and validated (the alias index reads each file's `aliases:` lines alone).
    (folder / "gpus" / "broken.yaml").write_text("memory_bytes: [1\n")
    (folder / "models" / "broken.yaml").write_text("num_layers: [1\naliases: [x\n")
    presets._load.cache_clear()
    assert run_json("cache", "my-seventy", "--gpu", "box")["gpu"] == "box"
    assert run_json("cache", "meta-llama/Meta-Llama-3-8B")["model"] == "llama-3-8b"
    assert presets._load.cache_info().currsize == 1  # one built-in validated, of the 30-odd


def test_block_style_aliases_are_indexed(folder):
    (folder / "models" / "blocky.yaml").write_text("aliases:\n  - blk-1\n  - Blk-2\n" + MODEL.split("\n", 1)[1])
    assert run_json("show", "blk-2")["spec"]["name"] == "blocky"


@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="the XDG rule is the Linux one")
def test_platform_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("KVCALC_PRESETS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert presets.user_folder(presets.GPU_DIR) == tmp_path / "kvcalc" / "gpus"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert presets.user_dir() == tmp_path / ".config" / "kvcalc"


def test_save_user_preset(folder):
    data = {"full_name": "Saved", "memory_bytes": 1, "hbm_bandwidth_bytes_per_s": 2, "peak_dense_tflop_per_s": {}}
    path = presets.save_user_preset(presets.GPU_DIR, "saved", data, header="# by a test\n")
    assert path == folder / "gpus" / "saved.yaml" and path.read_text().startswith("# by a test\nfull_name: Saved\n")
    assert presets.get_gpu("saved").hbm_bandwidth_bytes_per_s == 2
    with pytest.raises(UsageError, match="exists"):
        presets.save_user_preset(presets.GPU_DIR, "saved", data)
    presets.save_user_preset(presets.GPU_DIR, "saved", {**data, "hbm_bandwidth_bytes_per_s": 3}, replace=True)
    assert presets.get_gpu("saved").hbm_bandwidth_bytes_per_s == 3  # rewritten, read again
    with pytest.raises(UsageError, match="built-in"):
        presets.save_user_preset(presets.GPU_DIR, "h100-sxm", data)
    with pytest.raises(UsageError, match="not a file stem"):
        presets.save_user_preset(presets.GPU_DIR, "../up", data)
    with pytest.raises(SpecError, match="memory_bytes"):
        presets.save_user_preset(presets.GPU_DIR, "other", {**data, "memory_bytes": 0})


def test_a_user_preset_without_parameters_is_listed(folder):
    # a valid preset may leave its parameters unknown (no vocab_size); `cache` and `show` take it, and
    # `models` failed on it for every preset. Its cache: 4 layers x 2 x 8 heads x 32 x 2 B = 4,096 B per token.
    (folder / "models" / "tiny.yaml").write_text(
        'num_layers: 4\nhidden_size: 256\nnum_heads: 8\nparams_unknown: "no vocab_size"\n'
    )
    rows = {r["name"]: r for r in run_json("models")["rows"]}
    assert rows["tiny"]["params"] is None and rows["tiny"]["kv_bytes_per_token_bf16"] == 4096
    assert rows["seventy"]["origin"] == "user"
    line = next(s for s in run("models", env={"COLUMNS": "200"}).stdout.splitlines() if s.startswith(" tiny (user)"))
    assert "unknown" in line and line.rstrip().endswith("4 KiB")


def test_yaml_merge_keys_still_read(folder):
    # `<<: *base` (or a literal mapping) merges keys that the mapping may override: YAML's rule, not a
    # key given twice. Here the explicit num_kv_heads 4 overrides the merged 8, as PyYAML reads it.
    path = folder / "merged.yaml"
    path.write_text(MODEL.replace("num_kv_heads: 8\n", "<<: {num_kv_heads: 8, head_dim: 128}\nnum_kv_heads: 4\n"))
    spec = run_json("show", path)["spec"]
    assert (spec["num_kv_heads"], spec["head_dim"]) == (4, 128)
    # 80 layers x 2 x 4 KV heads x 128 x 2 B = 163,840 B per token
    assert run_json("cache", path)["bytes_per_token"] == 163_840
