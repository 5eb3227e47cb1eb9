"""The formats a model's weights are stored and multiplied in: the checkpoint's quantization or a `--dtype`
what-if, the dtype its matmuls run at, its rotary width. Model facts, asked by the cost model and the engines."""

from __future__ import annotations

from kvcalc.model.quant import QUANTIZED_DTYPES, Quantization, named
from kvcalc.model.spec import ModelSpec


def quantization_of(spec: ModelSpec, dtype: str | None) -> Quantization | None:
    """The checkpoint's quantization, or what `--dtype` / a preset's dtype fields say."""
    from kvcalc.model.quant import dtype_quantization

    if dtype is not None:
        return dtype_quantization(dtype)
    if spec.checkpoint and spec.checkpoint.quantization:
        return spec.checkpoint.quantization
    q = dtype_quantization(spec.dtype)
    if spec.expert_dtype and spec.expert_dtype in QUANTIZED_DTYPES:
        base = q or Quantization(method=f"preset expert_dtype {spec.expert_dtype}")
        return base.model_copy(update={"experts": named(spec.expert_dtype)})
    return q


def matmul_dtype(spec: ModelSpec, dtype: str | None) -> str:
    """The peak a model's matmuls run at, from the weight format rather than the storage dtype:
    weight-only formats (GPTQ / AWQ int4 or int8, w4a16, mxfp4 experts) multiply in 16-bit, w8a8
    int8 at the int8 rate, fp8 w8a8 at the fp8 rate, nvfp4 (w4a4) at the fp4 rate. GpuSpec.compute_dtype
    falls back to 16-bit where the GPU has no such rate (vLLM then runs the weights through Marlin)."""
    from kvcalc.model.quant import compute_format

    if dtype in ("fp32", "bf16", "fp16"):
        return dtype
    declared = spec.checkpoint.declared_dtype if spec.checkpoint else None
    half = declared if declared in ("bf16", "fp16") else "bf16"
    if (
        dtype is None
        and spec.dtype in ("fp32", "bf16", "fp16")
        and not (spec.checkpoint and spec.checkpoint.quantization)
    ):
        return spec.dtype if spec.expert_dtype is None else half
    fmt = compute_format(quantization_of(spec, dtype))
    return {"16-bit": half, "fp32": "fp32"}.get(fmt, fmt)


def native_rate(spec: ModelSpec, dtype: str | None) -> str | None:
    """The tensor-core rate (a GpuSpec peak name) that multiplies the model's quantized weights as they are
    stored, the experts' format where they have their own: fp8 and int8 w8a8 their own rates, the 4-bit float
    formats (mxfp4, nvfp4) fp4, which Blackwell's block-scaled MMA takes as stored. None for weight-only
    integer formats (GPTQ / AWQ int4, int8 w8a16) and llama.cpp's blocks: every GPU widens those to 16 bits
    in the kernel before it multiplies (cost/step.dequant_share)."""
    q = quantization_of(spec, dtype)
    fmt = (q.experts or q.linear) if q else None
    if fmt is None:
        return None
    if fmt.name in ("mxfp4", "nvfp4"):
        return "fp4"
    return None if fmt.compute in ("16-bit", "fp32") else fmt.compute


def rotary_dim(spec: ModelSpec) -> int:
    """Columns of the rotary cache: the config's partial rotary width, else the (rope) head dim."""
    if spec.checkpoint and spec.checkpoint.rotary_dim:
        return spec.checkpoint.rotary_dim
    return spec.rope_dim if spec.is_mla else spec.head_dim_effective


def weights_label(spec: ModelSpec, dtype: str | None) -> str:
    """The weights' formats in a few words, naming a mix as one: "mxfp4 experts + bf16" (gpt-oss),
    "int4 + bf16 attention" (an ignore list that keeps attention 16-bit), else the one dtype."""
    if dtype is not None:
        return dtype  # a --dtype what-if stores every matrix in it
    q = quantization_of(spec, None)
    declared = spec.checkpoint.declared_dtype if spec.checkpoint else None
    half = declared or (spec.dtype if spec.dtype in ("fp32", "bf16", "fp16") else "bf16")
    if q is None:
        return spec.dtype
    linear = q.linear.name if q.linear else None
    if q.experts is not None and q.experts.name != linear:
        return f"{q.experts.name} experts + {linear or half}"
    if linear is None:
        return spec.dtype
    if q.attention is not None:  # ModelOpt MIXED_PRECISION: "nvfp4 + fp8 attention"
        return f"{linear} + {q.attention.name} attention"
    return linear if q.attention_quantized or linear == half else f"{linear} + {half} attention"
