"""Weight formats as an engine loads them: a format per linear-layer group -> bytes (model/hf/quantization.py reads
a config's quantization_config into them, model/hf/checkpoint.py the rest of what a checkpoint loads).

Pure: Pydantic descriptions and integers. The byte counts follow what
vLLM 0.19 keeps on the GPU after `process_weights_after_loading` (vllm/model_executor/layers/
quantization/*): packed weights plus their scales (and zero points where the format has them);
embeddings, norms and the MoE router stay in the activation dtype unless a config quantizes them.
"""

# NOTE: no `from __future__ import annotations` in the Pydantic model modules: Pydantic would compile
# every field's annotation string at import (about 2 ms of start-up over results, specs and quant).
import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kvcalc.errors import SpecError

Scale = Literal["none", "tensor", "channel", "group", "block"]
Compute = Literal["16-bit", "fp32", "fp8", "int8", "fp4"]


class LinearFormat(BaseModel):
    """How one linear layer's weight is stored: element bits plus scale (and zero-point) overhead."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    name: str  # fp8, int8, int4, mxfp4, nvfp4, nf4 or an activation dtype (bf16, fp16, fp32)
    weight_bits: int = Field(gt=0)
    scale: Scale = "none"
    group_size: int | None = Field(default=None, gt=0)  # elements along the input per scale ("group"), block edge
    scale_bytes: int = 0  # bytes of one scale
    zero_points: bool = False  # asymmetric formats keep a packed zero point per scale
    extra_bytes: int = 0  # per-linear constants (global scales)
    compute: Compute = "16-bit"  # the tensor-core format its matmuls run in

    def _group(self) -> int:
        if self.group_size is None:
            raise SpecError(f"weight format {self.name}: scale '{self.scale}' needs group_size")
        return self.group_size

    def linear_bytes(self, out_rows: int, in_cols: int) -> int:
        """Bytes of one [out_rows, in_cols] weight in this format, scales included."""
        return sum(self.tensor_bytes(out_rows, in_cols))

    def tensor_bytes(self, out_rows: int, in_cols: int, copies: int = 1) -> list[int]:
        """The separate tensors it is stored in (weight, scales, zero points, global scales), for
        `copies` stacked copies (the experts of a fused-MoE layer share one tensor of each)."""
        weight = math.ceil(out_rows * in_cols * self.weight_bits / 8)
        if self.scale == "channel":
            scales = out_rows
        elif self.scale == "group":
            scales = out_rows * math.ceil(in_cols / self._group())
        elif self.scale == "block":
            scales = math.ceil(out_rows / self._group()) * math.ceil(in_cols / self._group())
        elif self.scale == "tensor":
            scales = 1
        else:
            scales = 0
        zeros = math.ceil(scales * self.weight_bits / 8) if self.zero_points else 0
        parts = [weight, scales * self.scale_bytes, zeros, self.extra_bytes]
        return [copies * p for p in parts if p]


def plain(dtype: str) -> LinearFormat:
    """An unquantized weight in an activation dtype."""
    bits = {"fp32": 32, "bf16": 16, "fp16": 16}[dtype]
    return LinearFormat(name=dtype, weight_bits=bits, compute="fp32" if bits == 32 else "16-bit")


# NOTE: the formats `--dtype` names, as vLLM's `--quantization fp8` or an llm-compressor checkpoint
# stores them: fp8 and int8 are w8a8 with one fp32 scale per output channel
# (compressed_tensors_w8a8_{fp8,int8}.py: ChannelQuantScaleParameter, float32); int4 is w4a16 with
# group size 128 and 16-bit scales (GPTQ / AWQ / Marlin, symmetric: Marlin drops the zero points).
# mxfp4: e8m0 scale per 32 (OCP MX spec, vLLM mxfp4.py); nvfp4: fp8 scale per 16 plus an fp32
# global weight scale and input scale per linear (modelopt.py / compressed_tensors_w4a4_nvfp4.py).
_NAMED: dict[str, dict[str, object]] = {
    "fp8": {"weight_bits": 8, "scale": "channel", "scale_bytes": 4, "compute": "fp8"},
    "int8": {"weight_bits": 8, "scale": "channel", "scale_bytes": 4, "compute": "int8"},
    "int4": {"weight_bits": 4, "scale": "group", "group_size": 128, "scale_bytes": 2},
    "mxfp4": {"weight_bits": 4, "scale": "group", "group_size": 32, "scale_bytes": 1},
    "nvfp4": {
        "weight_bits": 4,
        "scale": "group",
        "group_size": 16,
        "scale_bytes": 1,
        "extra_bytes": 8,
        "compute": "fp4",
    },
}
QUANTIZED_DTYPES = tuple(_NAMED)


def named(dtype: str) -> LinearFormat | None:
    """The stored format `--dtype DTYPE` names; None for an activation dtype (bf16, fp16, fp32).
    Built on demand: a LinearFormat made at import would build the models' validators at every
    start (defer_build above), which `kvcalc cache` on an unquantized model never needs."""
    fields = _NAMED.get(dtype)
    return LinearFormat.model_validate({"name": dtype, **fields}) if fields else None


def required_format(dtype: str) -> LinearFormat:
    """A format of _NAMED by its name (the callers name one of them)."""
    fmt = named(dtype)
    if fmt is None:
        raise SpecError(f"'{dtype}' is not a quantized weight format ({', '.join(QUANTIZED_DTYPES)})")
    return fmt


class Quantization(BaseModel):
    """A checkpoint's quantization: the format of each linear-layer group."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    method: str
    linear: LinearFormat | None = None  # None: not understood (see `problem`)
    experts: LinearFormat | None = None  # MoE experts when they differ from `linear`
    attention_quantized: bool = True  # False when the ignore list keeps attention 16-bit
    attention: LinearFormat | None = None  # attention's own format (ModelOpt MIXED_PRECISION: fp8 beside nvfp4)
    lm_head_quantized: bool = False
    problem: str | None = None  # why the format could not be read
    kv_cache_fp8: bool = False  # the config asks for an fp8 KV cache (kv_cache_quant_algo / kv_cache_scheme)


class EngineLengths(BaseModel):
    """The longest request each engine takes for a config, as it reads the config (model/hf/positions.py),
    where that is not the spec's max_position_embeddings (None: that length)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vllm_default: int | None = None  # vLLM's max_model_len when none is given
    vllm_limit: int | None = None  # the longest --max-model-len vLLM accepts, where not its default (LongRoPE)
    vllm_any_length: bool = False  # no length key at all: vLLM takes any --max-model-len (its default 2,048)
    vllm_key: str | None = None  # the config key vLLM derives it from, where not max_position_embeddings
    sglang: int | None = None  # SGLang's derived context_length
    trtllm: int | None = None  # TensorRT-LLM's inferred max_seq_len


class Checkpoint(BaseModel):
    """What a checkpoint loads beyond the architecture: quantization, rotary cache, vision tower."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    quantization: Quantization | None = None
    rotary_dim: int | None = None  # columns of vLLM's cos/sin cache (head_dim x partial_rotary_factor)
    vision: bool = False  # a vision_config: an encoder and projector are loaded and profiled too
    # the vision_config's (num_hidden_layers, hidden_size) as SGLang's adjust_mem_fraction_for_vlm reads them:
    # 24 and 1,024 where the file has no such key (getattr's defaults there; a config class's own default is not
    # known here)
    vision_shape: tuple[int, int] | None = None
    declared_dtype: str | None = None  # torch_dtype of the config (fp32, bf16, fp16)
    router_dtype: str | None = None  # the MoE gate's dtype where the config names it (router_dtype, moe_router_dtype)
    # rows of each cos/sin cache vLLM builds, when not the one max_position_embeddings table
    rotary_rows: tuple[int, ...] | None = None
    # each of those caches' columns, when they differ (Gemma 4's full layers: global_head_dim); None: rotary_dim
    rotary_widths: tuple[int, ...] | None = None
    # the vision tower and projector vLLM loads, where kvcalc knows the family's layout:
    # (parameters split over tensor parallelism, parameters replicated on every rank)
    vision_params: tuple[int, int] | None = None
    # the profiling run's dummy image, where known: (embeddings per image, pixel values per image)
    image_profile: tuple[int, int] | None = None
    # multi-token-prediction blocks a GGUF keeps after the trunk's layers (nextn_predict_layers): llama.cpp
    # places them on devices with the layers (-ngl counts them) but caches and runs the trunk alone
    mtp_blocks: int = 0
    # the longest request each engine takes where it is not max_position_embeddings (model/hf/positions.py)
    lengths: EngineLengths | None = None


def dtype_quantization(dtype: str) -> Quantization | None:
    """`--dtype X` for a quantized X: every decoder linear layer in that format; None for 16/32-bit."""
    fmt = named(dtype)
    return Quantization(method=f"--dtype {dtype}", linear=fmt) if fmt else None


def compute_format(q: Quantization | None) -> Compute:
    """The tensor-core format the dense matmuls of a checkpoint run in."""
    if q is None:
        return "16-bit"
    fmt = q.linear or q.experts
    return fmt.compute if fmt else "16-bit"
