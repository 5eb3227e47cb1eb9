"""AMD Quark checkpoints (quant_method "quark"): each linear group's stored format and the rate its matmuls run at,
as vLLM 0.19's QuarkConfig picks a scheme (model/hf/quantization._quark). The configs are Quark's export layout
(global_quant_config, layer_quant_config globs, exclude, export.kv_cache_group) around Llama-3.3-70B's own config.json
(tests/fixtures/real_configs), as AMD's amd/Llama-3.3-70B-Instruct-FP8-KV and -MXFP4-Preview ship it."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES, run, run_json

from kvcalc.model.hf.quantization import read_quantization

# Quark's OCP MXFP4 spec (PerBlockMXObserver): fp4 e2m1 values, an e8m0 scale per 32 along the input
MX = {
    "dtype": "fp4", "qscheme": "per_group", "group_size": 32, "ch_axis": -1, "scale_format": "e8m0",
    "scale_type": "float", "is_dynamic": False, "round_method": "half_even", "symmetric": None,
}  # fmt: skip
MX_INPUT = {**MX, "is_dynamic": True}
FP8 = {"dtype": "fp8_e4m3", "qscheme": "per_tensor", "is_dynamic": False, "symmetric": True, "group_size": None}

# Llama-3.3-70B, one decoder layer: q 8192 x 8192, k and v 1024 x 8192, o 8192 x 8192, gate / up / down 8192 x 28672
LAYER_WEIGHTS = 67_108_864 + 2 * 8_388_608 + 67_108_864 + 3 * 234_881_024
assert LAYER_WEIGHTS == 855_638_016


def quark(weight, acts, **extra) -> dict:
    q = {
        "quant_method": "quark",
        "quant_mode": "eager_mode",
        "exclude": ["lm_head"],
        "export": {"kv_cache_group": [], "pack_method": "reorder", "weight_format": "real_quantized"},
        "global_quant_config": {"weight": weight, "input_tensors": acts, "output_tensors": None, "bias": None},
        "layer_quant_config": {},
        "layer_type_quant_config": {},
    }
    q.update(extra)
    return q


def config_file(tmp_path, q: dict | None, name: str = "config") -> str:
    config = json.loads((FIXTURES / "real_configs" / "llama-3.3-70b.json").read_text())
    if q is not None:
        config["quantization_config"] = q
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_mxfp4_weights_hold_half_a_byte_and_an_e8m0_scale_per_32(tmp_path):
    q = read_quantization(quark(MX, MX_INPUT))
    assert q.problem is None and q.linear.name == "mxfp4" and q.linear.compute == "fp4"
    assert q.attention_quantized and q.attention is None and q.experts is None
    mxfp4 = run_json("fit", config_file(tmp_path, quark(MX, MX_INPUT), "mx"), "--gpu", "mi355x", "--engine", "vllm")
    bf16 = run_json("fit", config_file(tmp_path, None, "bf16"), "--gpu", "mi355x", "--engine", "vllm")
    # by hand: a layer's 855,638,016 weights as 427,819,008 packed bytes + 26,738,688 scales, against 2 B each
    # (embedding, LM head, norms and rotary cache alike in both)
    per_layer = LAYER_WEIGHTS // 2 + LAYER_WEIGHTS // 32
    assert per_layer == 454_557_696
    assert bf16["vllm"]["weights_bytes"] - mxfp4["vllm"]["weights_bytes"] == 80 * (2 * LAYER_WEIGHTS - per_layer)


@pytest.mark.parametrize(
    ("acts", "gpu", "peak"),
    [
        (MX_INPUT, "mi355x", "fp4"),  # w4a4: CDNA4's fp4 rate
        (MX_INPUT, "b200", "fp4"),
        (MX_INPUT, "h100", "bf16"),  # no fp4 rate on Hopper
        (None, "mi355x", "bf16"),  # weight-only: dequantized and multiplied in 16 bits
        ({**FP8, "scale_type": "float"}, "mi355x", "fp8"),  # w4a8 (QuarkW4A8_MXFP4_FP8)
    ],
)
def test_the_activations_spec_sets_the_rate(tmp_path, acts, gpu, peak):
    path = config_file(tmp_path, quark(MX, acts))
    assert run_json("roofline", path, "--gpu", gpu)["compute_dtype"] == peak


def test_fp8_kv_checkpoint_reads_as_per_tensor_fp8_and_keeps_the_cache_dtype(tmp_path):
    # amd/*-FP8-KV: fp8 weights and activations per tensor, and k_proj / v_proj outputs (the KV cache's scales)
    kv = {"weight": FP8, "input_tensors": FP8, "output_tensors": FP8, "bias": None}
    q = quark(
        FP8,
        FP8,
        export={"kv_cache_group": ["*k_proj", "*v_proj"], "pack_method": "reorder"},
        layer_quant_config={"*k_proj": kv, "*v_proj": kv},
    )
    read = read_quantization(q)
    assert read.linear.name == "fp8" and read.linear.scale == "tensor" and read.linear.compute == "fp8"
    assert read.attention_quantized and not read.kv_cache_fp8  # vLLM's cache stays in --kv-cache-dtype
    # the same bytes as a serialized per-tensor fp8 checkpoint (vLLM's Fp8LinearMethod: one fp32 scale a linear)
    fp8 = config_file(tmp_path, {"quant_method": "fp8", "activation_scheme": "static"}, "fp8")
    same = run_json("fit", fp8, "--gpu", "mi355x", "--engine", "vllm")["vllm"]["weights_bytes"]
    assert (
        run_json("fit", config_file(tmp_path, q), "--gpu", "mi355x", "--engine", "vllm")["vllm"]["weights_bytes"]
        == same
    )


def test_globs_and_exclude_pick_each_groups_format():
    # only the routed experts quantized (a layer_quant_config glob, the global spec empty), attention excluded
    q = quark(None, None, layer_quant_config={"*mlp.experts*": {"weight": MX, "input_tensors": MX_INPUT}})
    q["exclude"] = ["lm_head", "*self_attn*"]
    read = read_quantization(q)
    assert read.linear is None and read.experts.name == "mxfp4" and read.experts.compute == "fp4"
    assert not read.attention_quantized
    # attention in its own format where its glob says so: fp8 beside MXFP4 linears
    q = quark(MX, MX_INPUT, layer_quant_config={"*self_attn*": {"weight": FP8, "input_tensors": FP8}})
    read = read_quantization(q)
    assert read.linear.name == "mxfp4" and read.attention.name == "fp8" and read.attention_quantized


def test_a_scheme_vllm_lacks_is_refused_in_one_line(tmp_path):
    int4 = {"dtype": "int4", "qscheme": "per_group", "group_size": 128, "is_dynamic": False, "symmetric": True}
    assert "int4 weights (per_group) with unquantized activations" in read_quantization(quark(int4, None)).problem
    result = run("fit", config_file(tmp_path, quark(int4, None)), "--gpu", "mi355x")
    assert result.exit_code != 0 and "quant_method 'quark'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
