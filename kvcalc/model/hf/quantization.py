"""config.json's quantization_config -> Quantization: the format of each linear-layer group, by method, as vLLM 0.19
loads it (compressed-tensors, GPTQ / AWQ, bitsandbytes, mxfp4, fp8, ModelOpt, AMD Quark). Pure: a config dict in, a
Pydantic description out; the formats themselves and their bytes are model/quant.py's."""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from pydantic import ValidationError

from kvcalc.model.quant import LinearFormat, Quantization, Scale, named, required_format
from kvcalc.model.validate import validation_message


def _ignored(patterns: list[str], *names: str) -> bool:
    """True when an ignore / modules_to_not_convert entry covers one of these module names."""
    for pattern in patterns:
        p = str(pattern)
        regex = p[3:] if p.startswith("re:") else re.escape(p).replace(r"\*", ".*")
        if any(re.search(regex, n) or n.endswith(p) or p in n for n in names):
            return True
    return False


def _compressed_tensors(q: dict[str, Any]) -> Quantization:
    groups = q.get("config_groups") or {}
    first = next(iter(groups.values()), None) if isinstance(groups, dict) else None
    scheme: dict[str, Any] = first if isinstance(first, dict) else {}
    weights = scheme.get("weights")
    if not isinstance(weights, dict):
        return Quantization(method="compressed-tensors", problem="no config_groups weights scheme")
    bits, kind = weights.get("num_bits"), weights.get("type", "int")
    strategy, group = weights.get("strategy", "tensor"), weights.get("group_size")
    acts = scheme.get("input_activations")
    ignore = [str(x) for x in q.get("ignore") or []]
    common = {
        "method": "compressed-tensors",
        "attention_quantized": not _ignored(ignore, "model.layers.0.self_attn.q_proj"),
        "lm_head_quantized": not _ignored(ignore, "lm_head") and "lm_head" in str(scheme.get("targets")),
    }
    if bits == 8 and strategy in ("channel", "tensor", "block"):
        name = "fp8" if kind == "float" else "int8"
        scale: Scale = strategy
        size = None
        if strategy == "block":
            block = weights.get("block_structure") or [128, 128]
            size = int(block[0])
        fmt = LinearFormat(
            name=name,
            weight_bits=8,
            scale=scale,
            group_size=size,
            scale_bytes=4,
            zero_points=not weights.get("symmetric", True),
            compute=("fp8" if kind == "float" else "int8") if acts else "16-bit",
        )
        return Quantization.model_validate({"linear": fmt, **common})
    if bits == 4 and kind == "float" and group == 16:
        nvfp4 = required_format("nvfp4")
        return Quantization.model_validate(
            {"linear": nvfp4 if acts else nvfp4.model_copy(update={"compute": "16-bit"}), **common}
        )
    if bits == 4 and kind == "float" and group == 32:
        # MXFP4 (an e8m0 scale per 32: llm-compressor's mxfp4-pack-quantized); Kimi-K3 ignores every module but the
        # routed experts (attention, shared experts, dense MLPs, LM head), so only they take it, as gpt-oss's
        dense = ("model.layers.0.mlp.gate_proj", "model.layers.1.mlp.shared_experts.gate_proj")
        if all(_ignored(ignore, n) for n in dense) and not common["attention_quantized"]:
            return Quantization.model_validate({**common, "experts": named("mxfp4")})
        return Quantization.model_validate({"linear": required_format("mxfp4"), **common})
    if bits in (4, 8) and kind == "int" and strategy in ("group", "channel"):
        fmt = LinearFormat(
            name=f"int{bits}",
            weight_bits=bits,
            scale="group" if strategy == "group" else "channel",
            group_size=group if strategy == "group" else None,
            scale_bytes=2,
            zero_points=not weights.get("symmetric", True),
            compute="int8" if acts and bits == 8 else "16-bit",
        )
        return Quantization.model_validate({"linear": fmt, **common})
    return Quantization(
        method="compressed-tensors", problem=f"{bits}-bit {kind} weights with strategy '{strategy}' are not modelled"
    )


def _gptq_awq(method: str, q: dict[str, Any]) -> Quantization:
    bits = q.get("bits") or q.get("w_bit")
    group = q.get("group_size") or q.get("q_group_size") or 128
    if bits not in (2, 3, 4, 8):
        return Quantization(method=method, problem=f"bits={bits!r}")
    if not isinstance(group, int) or isinstance(group, bool):  # -1: one scale per output channel
        return Quantization(method=method, problem=f"group_size={group!r} (a whole number, -1 for per channel)")
    # NOTE: GPTQ-Marlin keeps zero points only for asymmetric checkpoints (sym=false); AWQ is
    # always asymmetric (its zero points become Marlin's zp). Scales are 16-bit.
    asym = method == "awq" or not q.get("sym", True)
    fmt = LinearFormat(
        name=f"int{bits}",
        weight_bits=bits,
        scale="group" if group and group > 0 else "channel",
        group_size=group if group and group > 0 else None,
        scale_bytes=2,
        zero_points=asym,
    )
    return Quantization(method=method, linear=fmt, lm_head_quantized=bool(q.get("lm_head")))


def _bitsandbytes(q: dict[str, Any]) -> Quantization:
    if q.get("load_in_4bit"):
        # NOTE: nf4/fp4 in blocks of 64 with an fp32 absmax each; double quantization stores the
        # absmax as 8-bit plus an fp32 per 256 absmax values (bitsandbytes functional.quantize_4bit).
        double = q.get("bnb_4bit_use_double_quant", False)
        fmt = LinearFormat(
            name="nf4", weight_bits=4, scale="group", group_size=64, scale_bytes=1 if double else 4, extra_bytes=0
        )
        return Quantization(method="bitsandbytes", linear=fmt)
    if q.get("load_in_8bit"):
        return Quantization(
            method="bitsandbytes", linear=LinearFormat(name="int8", weight_bits=8, scale="channel", scale_bytes=4)
        )
    return Quantization(method="bitsandbytes", problem="neither load_in_4bit nor load_in_8bit")


# ModelOpt's per-layer algorithms (vLLM 0.19 modelopt.py ModelOptMixedPrecisionConfig, quantized_layers): FP8 is
# w8a8 with a per-tensor scale, NVFP4 w4a4 and W4A16_NVFP4 its weight-only form, each 16 weights sharing an fp8 scale
_MIXED_ALGOS = {"FP8": "fp8", "MXFP8": "mxfp8", "NVFP4": "nvfp4", "W4A16_NVFP4": "nvfp4-w4a16"}


def _fp8_per_tensor() -> LinearFormat:
    """Serialized per-tensor fp8 (vLLM's Fp8LinearMethod, ModelOpt's FP8): one fp32 scale a linear, w8a8."""
    return LinearFormat(name="fp8", weight_bits=8, scale="tensor", scale_bytes=4, compute="fp8")


def _mixed_format(algo: str) -> LinearFormat:
    if algo == "fp8":
        return _fp8_per_tensor()
    if algo == "mxfp8":  # 8-bit floats, an e8m0 scale per 32 (the OCP MX format), multiplied at the fp8 rate
        return LinearFormat(name="fp8", weight_bits=8, scale="group", group_size=32, scale_bytes=1, compute="fp8")
    nvfp4 = required_format("nvfp4")
    return nvfp4 if algo == "nvfp4" else nvfp4.model_copy(update={"compute": "16-bit"})


def _mixed_group(name: str) -> str:
    """A quantized module's group: the LM head, attention (self_attn, linear_attn), the routed experts, the MLPs."""
    if "lm_head" in name:
        return "lm_head"
    if re.search(r"self_attn|linear_attn", name):
        return "attention"
    return "experts" if re.search(r"\.experts(\.|$)", name) else "mlp"


def _modelopt_mixed(layers: Any) -> Quantization:
    """ModelOpt MIXED_PRECISION (NVIDIA's Qwen3.6 and MiniMax-M3 NVFP4 checkpoints): each quantized module's own
    quant_algo. Read where each group agrees within itself: the attention modules, the routed experts, the other MLPs
    (dense ones, shared experts), the LM head; a module not listed stays in the activation dtype."""
    if not isinstance(layers, dict) or not layers:
        return Quantization(method="modelopt", problem="MIXED_PRECISION without quantized_layers")
    groups: dict[str, set[str]] = {"attention": set(), "mlp": set(), "experts": set(), "lm_head": set()}
    for name, entry in layers.items():
        algo = str(entry.get("quant_algo", "")).upper() if isinstance(entry, dict) else ""
        if algo not in _MIXED_ALGOS:
            return Quantization(method="modelopt", problem=f"quant_algo '{algo}' for {name} in MIXED_PRECISION")
        groups[_mixed_group(name)].add(_MIXED_ALGOS[algo])
    if any(len(algos) > 1 for algos in groups.values()) or not (groups["mlp"] or groups["experts"]):
        return Quantization(method="modelopt", problem="MIXED_PRECISION with one group's modules in several formats")
    fmt = {group: _mixed_format(algos.pop()) for group, algos in groups.items() if algos}
    linear = fmt.get("mlp") or fmt["experts"]
    experts, attention = fmt.get("experts"), fmt.get("attention")
    return Quantization(
        method="modelopt",
        linear=linear,
        experts=experts if experts != linear else None,
        attention=attention if attention != linear else None,
        attention_quantized=attention is not None,
        lm_head_quantized="lm_head" in fmt,
    )


# NOTE: AMD Quark's exports (vLLM 0.19 quark/quark.py, QuarkConfig._get_scheme_from_config): a `global_quant_config`
# for every linear layer, `layer_quant_config` overriding it by module-name glob (the first that matches) and an
# `exclude` list, each entry a weight and an input_tensors spec. Which scheme vLLM picks decides the stored bytes
# and the rate the matmuls run at: fp8 w8a8 (per-tensor or per-channel fp32 scales), int8 w8a8, OCP MX fp4 (an e8m0
# scale per 32, MXFP4's layout) with fp4 activations (w4a4), fp8 ones (QuarkW4A8_MXFP4_FP8) or none (weights
# dequantized to 16 bits), and NVFP4 (a pair of specs). The KV-cache spec beside them (export.kv_cache_group)
# only supplies scales: vLLM's cache stays in --kv-cache-dtype, and SGLang's QuarkConfig sets no kv_cache_quant_algo
# for its `auto` to follow (srt/layers/quantization/quark/quark.py).
_QUARK_ATTENTION = "model.layers.0.self_attn.q_proj"
_QUARK_EXPERTS = ("model.layers.0.mlp.experts", "model.layers.0.mlp.experts.0.down_proj")


def _quark_format(spec: Any) -> LinearFormat | str | None:
    """A Quark layer spec's stored format (None: left unquantized), or why vLLM has no scheme for it."""
    if not isinstance(spec, dict):
        return None
    weight, acts = spec.get("weight"), spec.get("input_tensors")
    if isinstance(weight, list):  # NVFP4: fp4 per 16 beside an fp8 per-tensor scale
        if [w.get("dtype") for w in weight] == ["fp4", "fp8_e4m3"] and weight[0].get("group_size") == 16 and acts:
            return required_format("nvfp4")
        return f"weight specs {[w.get('dtype') for w in weight]} with activations {acts!r}"
    if not isinstance(weight, dict):
        return None
    dtype, qscheme, act = weight.get("dtype"), weight.get("qscheme"), (acts or {}).get("dtype")
    if dtype in ("fp8_e4m3", "int8") and qscheme in ("per_tensor", "per_channel") and act == dtype:
        scale: Scale = "tensor" if qscheme == "per_tensor" else "channel"
        eight = required_format("fp8" if dtype == "fp8_e4m3" else "int8")  # w8a8, an fp32 scale
        return eight.model_copy(update={"scale": scale})
    if (
        dtype == "fp4"
        and qscheme == "per_group"
        and weight.get("group_size") == 32
        and act in ("fp4", "fp8_e4m3", None)
    ):
        mxfp4 = required_format("mxfp4")  # its compute: 16-bit, weight-only (gpt-oss's)
        return mxfp4 if act is None else mxfp4.model_copy(update={"compute": "fp4" if act == "fp4" else "fp8"})
    return f"{dtype} weights ({qscheme}) with {act or 'unquantized'} activations"


def _quark_layer(q: dict[str, Any], name: str) -> Any:
    """The spec vLLM's QuarkConfig gives the module `name`: the first layer_quant_config glob that matches, else
    the global one; None where `exclude` leaves it unquantized."""
    if _ignored([str(x) for x in q.get("exclude") or []], name):
        return None
    for pattern, spec in (q.get("layer_quant_config") or {}).items():
        if fnmatch.fnmatch(name, pattern) if "*" in pattern else name in pattern:
            return spec
    return q.get("global_quant_config")


def _quark(q: dict[str, Any]) -> Quantization:
    """The linear layers' format (the global spec), attention's (its q_proj's) and the routed experts' (the fused
    layer's, or its first expert's projections where a recipe names only those)."""
    specs = [
        q.get("global_quant_config"),
        _quark_layer(q, _QUARK_ATTENTION),
        *(_quark_layer(q, n) for n in _QUARK_EXPERTS),
    ]
    formats: list[LinearFormat | None] = []
    for spec in specs:
        fmt = _quark_format(spec)
        if isinstance(fmt, str):
            return Quantization(method="quark", problem=f"{fmt}: no Quark scheme of vLLM's is modelled for it")
        formats.append(fmt)
    linear, attention, *probes = formats
    experts = next((f for f in probes if f is not None), None)
    if linear is None and experts is None:
        return Quantization(method="quark", problem="no weight is quantized (global_quant_config and the experts)")
    return Quantization(
        method="quark",
        linear=linear,
        experts=experts if experts != linear else None,
        attention_quantized=attention is not None,
        attention=attention if attention not in (None, linear) else None,
    )


def read_quantization(q: Any, expert_dtype: Any = None) -> Quantization | None:
    """The format of each linear-layer group from a config's quantization_config (None: unquantized). DeepSeek-V4's
    config says beside it that its routed experts are stored apart (expert_dtype "fp4": e2m1 values with ue8m0
    scales per 32, MXFP4's layout), the rest in its fp8 blocks."""
    try:
        quant = _read_quantization(q)
    except (TypeError, ValueError, LookupError, AttributeError) as exc:  # a field of the wrong type, shape or range
        method = str(q.get("quant_method", "")).lower() or "?"
        why = validation_message(exc) if isinstance(exc, ValidationError) else f"a field of the wrong type: {exc!r}"
        return Quantization(method=method, problem=why)
    if quant is not None and expert_dtype == "fp4" and quant.experts is None:
        quant = quant.model_copy(update={"experts": named("mxfp4")})
    if quant is not None and isinstance(q, dict):
        # NOTE: SGLang's --kv-cache-dtype auto becomes fp8 when the checkpoint says so (0.5.5
        # model_runner: ModelOpt's kv_cache_quant_algo "FP8"; compressed-tensors' kv_cache_scheme).
        inner = q.get("quantization")
        nested: dict[str, Any] = inner if isinstance(inner, dict) else {}
        algo = str(q.get("kv_cache_quant_algo") or nested.get("kv_cache_quant_algo") or "").upper()
        scheme = q.get("kv_cache_scheme")
        if algo == "FP8" or (
            isinstance(scheme, dict) and (scheme.get("num_bits"), scheme.get("type", "float")) == (8, "float")
        ):
            quant = quant.model_copy(update={"kv_cache_fp8": True})
    return quant


def _read_quantization(q: Any) -> Quantization | None:
    if not isinstance(q, dict):
        return None
    method = str(q.get("quant_method", "")).lower()
    if method == "compressed-tensors":
        return _compressed_tensors(q)
    if method in ("gptq", "awq", "gptq_marlin", "awq_marlin"):
        return _gptq_awq(method.removesuffix("_marlin"), q)
    if method == "bitsandbytes":
        return _bitsandbytes(q)
    if method == "mxfp4":
        # NOTE: gpt-oss quantizes only the experts; attention, router, embeddings stay 16-bit.
        return Quantization(method=method, experts=named("mxfp4"), attention_quantized=False)
    if method in ("fp8", "fbgemm_fp8"):
        block = q.get("weight_block_size")
        if block and not (isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) for b in block)):
            return Quantization(method=method, problem=f"weight_block_size={block!r} (two whole numbers)")
        if block:  # DeepSeek-V3 style: 128x128 blocks, fp32 weight_scale_inv per block
            fmt = LinearFormat(
                name="fp8", weight_bits=8, scale="block", group_size=int(block[0]), scale_bytes=4, compute="fp8"
            )
        elif method == "fbgemm_fp8":
            fmt = required_format("fp8")
        else:  # serialized per-tensor fp8 (fp8.py Fp8LinearMethod: one fp32 scale per linear)
            fmt = _fp8_per_tensor()
        ignore = [str(x) for x in q.get("ignored_layers") or q.get("modules_to_not_convert") or []]
        return Quantization(
            method=method, linear=fmt, attention_quantized=not _ignored(ignore, "model.layers.0.self_attn.q_proj")
        )
    if method == "quark":
        return _quark(q)
    if method == "modelopt":
        nested: dict[str, Any] = q["quantization"] if isinstance(q.get("quantization"), dict) else {}
        algo = str(q.get("quant_algo") or nested.get("quant_algo", "")).upper()
        # NOTE: vLLM's ModelOpt configs (modelopt.py) read the modules left unquantized from the
        # compressed-tensors style "ignore" or the older "exclude_modules" (nested under
        # "quantization" in hf_quant_config.json); NVIDIA's checkpoints list every self_attn there.
        ignore = [str(x) for x in q.get("ignore") or q.get("exclude_modules") or nested.get("exclude_modules") or []]
        kept = not _ignored(ignore, "model.layers.0.self_attn.q_proj")
        if algo == "FP8":
            fmt = _fp8_per_tensor()
            return Quantization(method=method, linear=fmt, attention_quantized=kept)
        if algo == "NVFP4":
            return Quantization(method=method, linear=required_format("nvfp4"), attention_quantized=kept)
        if algo == "MIXED_PRECISION":
            return _modelopt_mixed(q.get("quantized_layers") or nested.get("quantized_layers"))
        return Quantization(method=method, problem=f"quant_algo '{algo}'")
    return Quantization(method=method or "unknown", problem="this quantization method is not modelled")
