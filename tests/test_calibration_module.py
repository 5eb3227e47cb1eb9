"""The shipped fit has two forms: kvcalc/cost/calibration.json (scripts/calibrate.py writes it) and the
module kvcalc/cost/calibration_data.py (scripts/calibration_module.py writes it from the json; the
commands load it without json). They must never drift apart."""

import importlib.util
import json
from pathlib import Path

from kvcalc.cost import calibration_data
from kvcalc.plan.calibration import constants_for, shipped

ROOT = Path(__file__).resolve().parent.parent
JSON = ROOT / "kvcalc" / "cost" / "calibration.json"


def _script():
    spec = importlib.util.spec_from_file_location("calibration_module", ROOT / "scripts" / "calibration_module.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_module_holds_the_json_numbers_exactly():
    data = json.loads(JSON.read_text())
    assert calibration_data.CONSTANTS == data["constants"]  # float equality: repr() reads back exactly
    assert list(calibration_data.CONSTANTS) == list(data["constants"])
    assert (calibration_data.POINTS, calibration_data.SOURCES, calibration_data.ABOUT) == (
        data["points"],
        data["sources"],
        data["about"],
    )


def test_the_module_is_what_the_script_writes_from_the_json():
    # a refit that forgot `python scripts/calibration_module.py` fails here
    text = _script().module_text(json.loads(JSON.read_text()))
    assert (ROOT / "kvcalc" / "cost" / "calibration_data.py").read_text() == text


def test_the_script_writes_any_fit_back_exactly():
    data = {
        "about": 'a fit, «quoted» "x"',
        "points": 3,
        "sources": 1,
        "constants": {"bw_eff": 0.1 + 0.2, "mfu": 1e-300},
    }
    scope: dict = {}
    exec(_script().module_text(data), scope)
    assert scope["CONSTANTS"] == {"bw_eff": 0.30000000000000004, "mfu": 1e-300}
    assert scope["ABOUT"] == data["about"] and scope["POINTS"] == 3


def test_the_commands_use_the_shipped_fit_and_a_saved_one_over_it(tmp_path, monkeypatch):
    data = json.loads(JSON.read_text())
    consts, basis = shipped()
    assert consts["bw_eff.ampere"] == data["constants"]["bw_eff.ampere"]
    assert basis == f"estimate (kvcalc calibration: {data['points']} public points, {data['sources']} sources)"
    monkeypatch.setenv("KVCALC_PRESETS", str(tmp_path))
    (tmp_path / "calibration").mkdir()
    (tmp_path / "calibration" / "a100--vllm.json").write_text('{"points": 4, "constants": {"bw_eff.ampere": 0.5}}')
    mine, basis = constants_for("a100", "vllm")
    assert mine["bw_eff.ampere"] == 0.5 and mine["mfu"] == data["constants"]["mfu"]
    assert basis.startswith("estimate (your calibration for a100 + vllm: 4 points")
    assert constants_for("a100", "sglang")[0]["bw_eff.ampere"] == data["constants"]["bw_eff.ampere"]


def test_vllm_on_an_amd_instinct_gpu_takes_the_rocm_builds_fixed_costs(tmp_path, monkeypatch):
    # the fit keys ROCm's vLLM runs as their own build (scripts/import_calibration.py); `--engine vllm` on a
    # CDNA GPU gets that build's per-step, per-sequence and per-layer costs, every other term vLLM's
    data = json.loads(JSON.read_text())["constants"]
    monkeypatch.setenv("KVCALC_PRESETS", str(tmp_path))
    rocm, basis = constants_for("mi300x", "vllm")
    for name in ("step_s", "seq_s", "decode_layer_s"):
        assert rocm[f"{name}.vllm"] == data[f"{name}.vllm.rocm"] != data[f"{name}.vllm"]
    assert rocm["bw_eff.cdna3"] == data["bw_eff.cdna3"] and "vllm.rocm build" in basis
    nvidia, basis = constants_for("h100", "vllm")
    assert nvidia["seq_s.vllm"] == data["seq_s.vllm"] and "rocm" not in basis
    assert constants_for("mi300x", "sglang")[0]["seq_s.vllm"] == data["seq_s.vllm"]  # other engines: unchanged


def test_a_build_names_its_engine():
    from kvcalc.engines.kernels import build_of, engine_of

    assert [build_of("vllm", g) for g in ("mi210", "mi300x", "mi355x", "h100")] == ["vllm.rocm"] * 3 + ["vllm"]
    assert build_of("sglang", "mi300x") == "sglang"  # SGLang's ROCm runs are not fitted apart
    assert [engine_of(b) for b in ("vllm.rocm", "llamacpp.legacy", "trtllm")] == ["vllm", "llamacpp", "trtllm"]


def test_a_gpu_family_without_calibration_runs_says_so():
    # MI355X (CDNA4) has no run in the fit: its efficiencies are the fitted families' shared values
    _, basis = constants_for("mi355x", "vllm")
    assert "no calibration run on cdna4 GPUs: the fitted families' shared efficiencies" in basis
    assert "no calibration run on gaudi3's family" in constants_for("gaudi3", "vllm")[1]
    for gpu, engine in (("h100", "vllm"), ("mi300x", "vllm"), ("rtx-4090", "llamacpp"), ("m2-ultra", "llamacpp")):
        assert "no calibration run" not in constants_for(gpu, engine)[1], gpu
