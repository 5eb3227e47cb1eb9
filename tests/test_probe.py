"""kvcalc probe on the CPU path (tiny --quick sizes: figures are never timed against a bound), its preset file,
and the pure parts: statistics, preset matching, the saved preset's fields."""

import json
import sys

import pytest
import yaml
from conftest import run, run_json

from kvcalc.hardware import probe as probe
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model import presets as presets
from kvcalc.model.validate import build

QUICK = ("probe", "--quick", "--repeat", "2", "--device", "cpu")


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("KVCALC_PRESETS", str(tmp_path))
    return tmp_path


def test_probe_measures_and_saves_a_preset_that_roofline_uses(folder):
    result = run(*QUICK, "--save", "mine", "--format", "json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["backend"] == "cpu (numpy)" and out["preset"] is None and out["quick"] is True
    assert [s["kernel"] for s in out["bandwidth"]] == ["copy", "triad", "read"]
    assert [s["dtype"] for s in out["matmul"]] == ["fp32", "fp64"]
    for s in out["bandwidth"] + out["matmul"]:
        assert len(s["seconds"]) == 2 and s["best"] >= s["median"] >= s["worst"] > 0
    # The STREAM byte counts: copy reads one array and writes one, triad reads two and writes one (8 MiB each).
    assert [s["work"] for s in out["bandwidth"]] == [2 * 8 * 2**20, 3 * 8 * 2**20, 8 * 2**20]
    assert out["bandwidth_bytes_per_s"] == int(max(s["best"] for s in out["bandwidth"]))
    assert "kvcalc probe: matmul fp64: 2 runs" in result.stderr  # the progress display, on stderr
    path = folder / "gpus" / "mine.yaml"
    assert f"GPU preset 'mine' written to {path}" in result.stderr
    saved = yaml.safe_load(path.read_text())
    assert saved["hbm_bandwidth_bytes_per_s"] == out["bandwidth_bytes_per_s"]
    assert saved["peak_dense_tflop_per_s"] == {"fp32": float(f"{out['peak_tflop_per_s']['fp32']:.4g}")}
    assert out["date"] in saved["sources"][0] and "STREAM copy/triad/read" in saved["sources"][0]
    # The acceptance: roofline by name and by path, showing the measured figures.
    for gpu in ("mine", str(path)):
        roof = run_json("roofline", "7b", "--gpu", gpu, "--batch", "1")
        assert roof["bandwidth_bytes_per_s"] == out["bandwidth_bytes_per_s"]
        assert roof["compute_dtype"] == "fp32"  # a CPU preset has no 16-bit rate: bf16 weights multiply in fp32
        assert roof["peak_flop_per_s"] == pytest.approx(saved["peak_dense_tflop_per_s"]["fp32"] * 1e12)
    table = run("roofline", "7b", "--gpu", "mine", "--batch", "1").stdout
    assert "on mine" in table and "fp32 peak" in table
    again = run(*QUICK, "--save", "mine")
    assert again.exit_code == 2 and "exists" in again.stderr and "--replace" in again.stderr
    assert run(*QUICK, "--save", "mine", "--replace").exit_code == 0


def test_probe_against_a_named_preset(folder):
    out = run_json(*QUICK, "--gpu", "h100")
    assert out["preset"] == "h100" and out["preset_match"] == "--gpu"
    assert out["mbu"] == pytest.approx(out["bandwidth_bytes_per_s"] / 3_350_000_000_000)
    assert out["mfu"] == {"fp32": pytest.approx(out["peak_tflop_per_s"]["fp32"] / 66.9)}  # fp64: not in the preset
    table = run(*QUICK, "--gpu", "h100", env={"COLUMNS": "200"}).stdout
    assert "Against the h100 preset" in table and "--mbu / --mfu" in table


def test_cpu_says_it_has_no_matching_preset(folder):
    table = run(*QUICK, env={"COLUMNS": "200"}).stdout
    assert "No matching preset (a CPU has none): measured figures alone" in table


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--save", "h100-sxm"), "'h100-sxm' is a built-in GPU preset"),
        (("--save", "My GPU"), "is not a file stem"),
        (("--repeat", "1"), "--repeat must be at least 2"),
        (("--gpu", "h1000"), "unknown GPU 'h1000'"),
    ],
)
def test_probe_refuses_before_measuring(folder, args, message):
    result = run("probe", "--quick", *args)
    assert result.exit_code in (1, 2) and result.stdout == "" and message in result.stderr
    assert "kvcalc probe:" not in result.stderr  # nothing was measured
    assert not (folder / "gpus").exists()


def test_probe_without_numpy_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "numpy", None)  # `import numpy` now raises ImportError
    result = run("probe", "--quick", "--device", "cpu")
    assert result.exit_code == 1
    assert result.stderr.startswith("kvcalc: error: kvcalc probe on the CPU needs the optional package 'numpy'")
    assert "pip install 'kvcalc[probe]'" in result.stderr


@pytest.mark.skipif(probe.torch_gpu() is not None, reason="a GPU is here")
def test_probe_device_gpu_without_one():
    result = run("probe", "--quick", "--device", "gpu")
    assert result.exit_code == 2 and "no GPU found" in result.stderr


@pytest.mark.parametrize(
    ("device", "preset"),
    [
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"),
        ("AMD Instinct MI300X", "mi300x"),
        ("Tesla T4", "t4"),
        ("Intel(R) Xeon(R) Processor", None),
    ],
)
def test_match_preset_by_device_name(device, preset):
    assert probe.match_preset(device, presets.preset_names(presets.GPU_DIR)) == preset


def test_statistics_and_saved_preset_fields():
    s = probe._stat("copy", "fp64", "x", 100, [1.0, 4.0, 2.0, 0.5])
    # rates 100, 25, 50, 200 -> best 200, worst 25, median (50 + 100) / 2 = 75, spread (200 - 25) / 75
    assert (s.best, s.worst, s.median) == (200, 25, 75) and s.spread == pytest.approx(175 / 75)
    result = probe._result(
        "Box", "cpu (numpy)", 2, 2**30, [s], [probe._stat("matmul", "fp64", "x", 10**12, [2.0])], "m", False, []
    )
    assert result.peak_tflop_per_s == {"fp64": 0.5} and result.bandwidth_bytes_per_s == 200
    header, data = probe.preset_data(result, "box")
    assert header.startswith("# box: written by `kvcalc probe --save box`")
    gpu = build(GpuSpec, {"name": "box", **data}, "saved")
    assert gpu.peak_dense_tflop_per_s == {} and gpu.memory_bytes == 2**30  # fp64 is not a preset dtype
    assert gpu.usable_memory_bytes is None  # a CPU's memory is not a GPU's usable memory
    on_gpu = result.model_copy(update={"backend": "cuda (torch)"})
    assert list(probe.preset_data(on_gpu, "box")[1])[:3] == ["full_name", "memory_bytes", "usable_memory_bytes"]


def test_probe_csv_names_the_unit_of_every_figure(folder):
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(run(*QUICK, "--format", "csv").stdout)))
    copy = next(r for r in rows if r["kernel"] == "copy")
    matmul = next(r for r in rows if r["kernel"] == "matmul")
    # a rate is B/s on a bandwidth row and FLOP/s on a matmul row, never one column for both
    assert copy["best_bytes_per_s"] and not copy["best_flop_per_s"]
    assert matmul["best_flop_per_s"] and not matmul["best_bytes_per_s"]
    # STREAM copy counts a read and a write of each array: 2 x its size; a square n^3 matmul is 2 n^3 FLOP
    n = int(matmul["size"].split(" x ")[0])
    assert int(matmul["work_flop"]) == 2 * n**3
    assert int(copy["work_bytes"]) == 2 * int(copy["size"].split(" MiB")[0]) * 2**20
