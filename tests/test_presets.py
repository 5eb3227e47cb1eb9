"""Every shipped preset loads strictly; GPU figures agree with the sourced reference."""

import re

import pytest
import yaml
from conftest import shared_path

from kvcalc.cost.kvcache import bytes_per_token
from kvcalc.cost.params import param_counts
from kvcalc.errors import SpecError
from kvcalc.model import presets as presets

MODELS = presets.preset_names(presets.MODEL_DIR)
GPUS = presets.preset_names(presets.GPU_DIR)


@pytest.mark.parametrize("name", MODELS)
def test_model_preset_is_valid(name):
    spec = presets.get_model(name)
    assert spec.name == name
    assert spec.num_heads % spec.kv_heads == 0
    assert bytes_per_token(spec, "bf16") > 0
    assert param_counts(spec).total > 0
    for alias in spec.aliases:
        assert presets.get_model(alias) is spec


@pytest.mark.parametrize("name", GPUS)
def test_gpu_preset_is_valid(name):
    gpu = presets.get_gpu(name)
    assert gpu.capacity_bytes > 0 and gpu.bandwidth_bytes_per_s > 0
    # NOTE: Apple publishes no GPU TFLOPS: its unified-memory presets carry bandwidth and the working set only
    assert (gpu.peak_dense_tflop_per_s or gpu.unified_memory) and gpu.sources


def test_alias_lookup_reading_only_matching_files_agrees_with_the_full_index():
    # locate() parses only the files whose text holds the name; every alias of every shipped preset
    # (duplicates: the first stem in name order) must still resolve as the full index says
    for kind in (presets.MODEL_DIR, presets.GPU_DIR):
        index = presets._alias_index(kind)
        assert index and all(presets._alias_stem(kind, alias) == stem for alias, stem in index.items())
    assert presets._alias_stem(presets.MODEL_DIR, "meta-llama/meta-llama-3-8b") == "llama-3-8b"
    assert presets._alias_stem(presets.MODEL_DIR, "no/such-model") is None


def test_enough_presets():
    assert len(MODELS) >= 25 and len(GPUS) >= 20


# Presets sourced on their own (their sources: list), not from ../shared/reference/gpus.yaml.
OUTSIDE_REFERENCE = {
    "rtx-5080",
    "rtx-a6000",
    "h800",
    "a800",
    "l20",
} | {  # Apple memory variants, consumer NVIDIA and AMD cards
    "m1-8gb",
    "m1-max-32gb",
    "m1-max",
    "m1-pro-16gb",
    "m1-pro",
    "m1-ultra-64gb",
    "m1-ultra",
    "m1",
    "m2-16gb",
    "m2-8gb",
    "m2-max-32gb",
    "m2-max-64gb",
    "m2-max",
    "m2-pro-16gb",
    "m2-pro",
    "m2-ultra-128gb",
    "m2-ultra-64gb",
    "m2",
    "m3-16gb",
    "m3-8gb",
    "m3-max-36gb",
    "m3-max-48gb",
    "m3-max-64gb",
    "m3-max-96gb",
    "m3-pro-18gb",
    "m3-pro",
    "m3-ultra-256gb",
    "m3-ultra-96gb",
    "m3",
    "m4-16gb",
    "m4-24gb",
    "m4-max-36gb",
    "m4-max-48gb",
    "m4-max-64gb",
    "m4-pro-24gb",
    "m4-pro-48gb",
    "m4-pro",
    "m4",
    "rtx-3060",
    "rtx-3070",
    "rtx-3080",
    "rtx-3090-ti",
    "rtx-4060",
    "rtx-4060-ti",
    "rtx-4070",
    "rtx-4070-ti",
    "rtx-4070-ti-super",
    "rtx-4080",
    "rtx-5060-ti",
    "rtx-5070",
    "rtx-5070-ti",
    "rtx-a4000",
    "rtx-a5000",
    "rx-6800-xt",
    "rx-6900-xt",
    "rx-7900-xt",
    "rx-7900-xtx",
    "rx-9070-xt",
}


# Peaks a preset takes beyond ../shared/reference/gpus.yaml, each with its reason in the preset.
BEYOND_REFERENCE = {("b300", "fp4"): 15000}


def test_gpu_presets_match_reference():
    ref = yaml.safe_load(shared_path("reference", "gpus.yaml").read_text())
    by_name = {g["name"]: g for g in ref["accelerators"]}
    for name in GPUS:
        gpu = presets.get_gpu(name)
        if name in OUTSIDE_REFERENCE:
            assert gpu.full_name not in by_name and gpu.sources, name
            continue  # sourced from their own datasheets: tests/test_deploy_presets.py
        entry = by_name[gpu.full_name]
        assert gpu.hbm_bandwidth_bytes_per_s == entry["hbm_bandwidth"]
        assert gpu.memory_bytes == entry["memory_bytes"]
        for dtype, tflops in gpu.peak_dense_tflop_per_s.items():
            if gpu.unified_memory and entry["peak_dense_flops"].get(dtype) == "unsourced":
                assert tflops == apple_peak(gpu.full_name), (name, dtype)  # test_apple_peaks_are_cores_times_clock
                continue
            if (name, dtype) in BEYOND_REFERENCE:
                assert tflops == BEYOND_REFERENCE[name, dtype] and dtype in (gpu.notes or ""), (name, dtype)
                assert entry["peak_dense_flops"].get(dtype) in (None, "unsourced")  # still unsourced there
                continue
            assert tflops * 1e12 == pytest.approx(entry["peak_dense_flops"][dtype]), (name, dtype)


# Apple GPU clocks (GHz) as measured: M1 and M2 philipturner/metal-benchmarks' table; M3 an M3 Max's
# powermetrics (applegpuinfo#4); M4 an M4 Pro's (Eclectic Light). M1's base chip runs lower.
APPLE_CLOCK_GHZ = {"M1": 1.296, "M2": 1.398, "M3": 1.380, "M4": 1.578}


def apple_peak(full_name: str) -> float:
    """TFLOP/s of an Apple GPU: cores x 128 FP32 ALUs x 2 (an FMA) x clock, FP16 at the FP32 rate."""
    m = re.match(r"Apple (M\d)( Pro| Max| Ultra)? \((\d+)-core GPU", full_name)
    assert m, full_name
    ghz = 1.278 if m.group(1) == "M1" and not m.group(2) else APPLE_CLOCK_GHZ[m.group(1)]
    return round(int(m.group(3)) * 128 * 2 * ghz / 1000, 2)


def test_apple_peaks_are_cores_times_clock():
    apple = [presets.get_gpu(n) for n in GPUS if presets.get_gpu(n).unified_memory]
    assert len(apple) >= 40
    for gpu in apple:
        assert gpu.peak_dense_tflop_per_s == {"fp32": apple_peak(gpu.full_name), "fp16": apple_peak(gpu.full_name)}
    # metal-benchmarks' own GOPS32 column: M1 Max 10,617, M2 Max 13,600 (GFLOP/s)
    assert presets.get_gpu("m1-max").peak_dense_tflop_per_s["fp32"] == pytest.approx(10.617, abs=0.01)
    assert presets.get_gpu("m2-max").peak_dense_tflop_per_s["fp32"] == pytest.approx(13.6, abs=0.01)
    assert presets.get_gpu("m1").peak_dense_tflop_per_s["fp32"] == pytest.approx(2.617, abs=0.01)


def _fake_presets(monkeypatch, tmp_path, text):
    (tmp_path / "model_presets").mkdir()
    (tmp_path / "model_presets" / "bad.yaml").write_text(text)
    monkeypatch.setattr(presets, "_folder", lambda kind: tmp_path / kind)
    presets._load.cache_clear()
    presets._alias_index.cache_clear()


def test_malformed_yaml_names_file_and_line(monkeypatch, tmp_path):
    _fake_presets(monkeypatch, tmp_path, "num_layers: 32\nhidden_size: [4096\n")
    with pytest.raises(SpecError, match=r"model_presets/bad.yaml: malformed YAML \(line 3"):
        presets.get_model("bad")
    presets._load.cache_clear()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "num_layers: 0\nhidden_size: 64\nnum_heads: 4\nvocab_size: 10\n",
            "num_layers: Input should be greater than 0",
        ),
        (
            "num_layers: 2\nhidden_size: 64\nnum_heads: 4\nnum_kv_heads: 3\nvocab_size: 10\n",
            "must be divisible by num_kv_heads (3)",
        ),
        ("num_layers: 2\nhidden_size: 64\nnum_heads: 4\nvocab_size: 10\nlayerz: 3\n", "layerz: unknown field"),
        (
            "num_layers: 2\nhidden_size: 64\nnum_heads: 4\nvocab_size: 10\nlayer_pattern: [{kind: sliding}]\n",
            "needs window_tokens",
        ),
    ],
)
def test_invalid_preset_names_field(monkeypatch, tmp_path, text, message):
    _fake_presets(monkeypatch, tmp_path, text)
    with pytest.raises(SpecError) as exc:
        presets.get_model("bad")
    assert exc.value.message.startswith("model_presets/bad.yaml: ")
    assert message in exc.value.message
    presets._load.cache_clear()


def test_falcon_180b_is_the_checkpoint_config_nvidia_benchmarked():
    """TensorRT-LLM v0.9.0's docs/source/performance.md: 80 layers, 232 query heads and 8 KV heads of
    14,848 / 232 = 64, a 4 x hidden GELU MLP, vocab 65,024, the embedding tied to the output head."""
    spec = presets.get_model("tiiuae/falcon-180B")
    assert bytes_per_token(spec, "bf16") == 2 * 80 * 8 * 64 * 2  # K and V, 80 layers, 8 heads of 64, 2 B
    params = param_counts(spec)
    assert params.attention == 80 * (14848 * (232 + 2 * 8) * 64 + 14848 * 14848)
    assert params.dense_mlp == 80 * 2 * 14848 * 4 * 14848
    assert params.embedding == 65024 * 14848 and params.lm_head == 0
