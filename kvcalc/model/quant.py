"""Weight formats as an engine loads them: quantization_config -> a format per linear-layer group -> bytes.

Pure: reads a config dict, returns Pydantic descriptions and integers. The byte counts follow what
vLLM 0.19 keeps on the GPU after `process_weights_after_loading` (vllm/model_executor/layers/
quantization/*): packed weights plus their scales (and zero points where the format has them);
embeddings, norms and the MoE router stay in the activation dtype unless a config quantizes them.
"""

# NOTE: no `from __future__ import annotations` in the Pydantic model modules: Pydantic would compile
# every field's annotation string at import (about 2 ms of start-up over results, specs and quant).
import math
import re
from typing import Any, Literal

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
    group_size: int | None = None  # elements along the input per scale ("group"), block edge ("block")
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


def _named(dtype: str) -> LinearFormat:
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
        nvfp4 = _named("nvfp4")
        return Quantization.model_validate(
            {"linear": nvfp4 if acts else nvfp4.model_copy(update={"compute": "16-bit"}), **common}
        )
    if bits == 4 and kind == "float" and group == 32:
        # MXFP4 (an e8m0 scale per 32: llm-compressor's mxfp4-pack-quantized); Kimi-K3 ignores every module but the
        # routed experts (attention, shared experts, dense MLPs, LM head), so only they take it, as gpt-oss's
        dense = ("model.layers.0.mlp.gate_proj", "model.layers.1.mlp.shared_experts.gate_proj")
        if all(_ignored(ignore, n) for n in dense) and not common["attention_quantized"]:
            return Quantization.model_validate({**common, "experts": named("mxfp4")})
        return Quantization.model_validate({"linear": _named("mxfp4"), **common})
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
_MIXED_ALGOS = {"FP8": "fp8", "NVFP4": "nvfp4", "W4A16_NVFP4": "nvfp4-w4a16"}


def _mixed_format(algo: str) -> LinearFormat:
    if algo == "fp8":
        return LinearFormat(name="fp8", weight_bits=8, scale="tensor", scale_bytes=4, compute="fp8")
    nvfp4 = _named("nvfp4")
    return nvfp4 if algo == "nvfp4" else nvfp4.model_copy(update={"compute": "16-bit"})


def _modelopt_mixed(layers: Any) -> Quantization:
    """ModelOpt MIXED_PRECISION (NVIDIA's Qwen3.6 NVFP4 checkpoints): each quantized module's own quant_algo. Read
    where each group agrees within itself: the attention modules (self_attn, linear_attn), the MLPs and experts, the
    LM head; a module not listed stays in the activation dtype."""
    if not isinstance(layers, dict) or not layers:
        return Quantization(method="modelopt", problem="MIXED_PRECISION without quantized_layers")
    groups: dict[str, set[str]] = {"attention": set(), "mlp": set(), "lm_head": set()}
    for name, entry in layers.items():
        algo = str(entry.get("quant_algo", "")).upper() if isinstance(entry, dict) else ""
        if algo not in _MIXED_ALGOS:
            return Quantization(method="modelopt", problem=f"quant_algo '{algo}' for {name} in MIXED_PRECISION")
        group = "lm_head" if "lm_head" in name else "attention" if re.search(r"self_attn|linear_attn", name) else "mlp"
        groups[group].add(_MIXED_ALGOS[algo])
    if any(len(algos) > 1 for algos in groups.values()) or not groups["mlp"]:
        return Quantization(method="modelopt", problem="MIXED_PRECISION with one group's modules in several formats")
    mlp = _mixed_format(groups["mlp"].pop())
    attention = _mixed_format(groups["attention"].pop()) if groups["attention"] else None
    return Quantization(
        method="modelopt",
        linear=mlp,
        attention=attention if attention != mlp else None,
        attention_quantized=attention is not None,
        lm_head_quantized=bool(groups["lm_head"]),
    )


def read_quantization(q: Any) -> Quantization | None:
    """The format of each linear-layer group from a config's quantization_config (None: unquantized)."""
    quant = _read_quantization(q)
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
        if block:  # DeepSeek-V3 style: 128x128 blocks, fp32 weight_scale_inv per block
            fmt = LinearFormat(
                name="fp8", weight_bits=8, scale="block", group_size=int(block[0]), scale_bytes=4, compute="fp8"
            )
        elif method == "fbgemm_fp8":
            fmt = _named("fp8")
        else:  # serialized per-tensor fp8 (fp8.py Fp8LinearMethod: one fp32 scale per linear)
            fmt = LinearFormat(name="fp8", weight_bits=8, scale="tensor", scale_bytes=4, compute="fp8")
        ignore = [str(x) for x in q.get("ignored_layers") or q.get("modules_to_not_convert") or []]
        return Quantization(
            method=method, linear=fmt, attention_quantized=not _ignored(ignore, "model.layers.0.self_attn.q_proj")
        )
    if method == "modelopt":
        nested: dict[str, Any] = q["quantization"] if isinstance(q.get("quantization"), dict) else {}
        algo = str(q.get("quant_algo") or nested.get("quant_algo", "")).upper()
        # NOTE: vLLM's ModelOpt configs (modelopt.py) read the modules left unquantized from the
        # compressed-tensors style "ignore" or the older "exclude_modules" (nested under
        # "quantization" in hf_quant_config.json); NVIDIA's checkpoints list every self_attn there.
        ignore = [str(x) for x in q.get("ignore") or q.get("exclude_modules") or nested.get("exclude_modules") or []]
        kept = not _ignored(ignore, "model.layers.0.self_attn.q_proj")
        if algo == "FP8":
            fmt = LinearFormat(name="fp8", weight_bits=8, scale="tensor", scale_bytes=4, compute="fp8")
            return Quantization(method=method, linear=fmt, attention_quantized=kept)
        if algo == "NVFP4":
            return Quantization(method=method, linear=_named("nvfp4"), attention_quantized=kept)
        if algo == "MIXED_PRECISION":
            return _modelopt_mixed(q.get("quantized_layers") or nested.get("quantized_layers"))
        return Quantization(method=method, problem=f"quant_algo '{algo}'")
    return Quantization(method=method or "unknown", problem="this quantization method is not modelled")


def checkpoint_info(raw: Any, defaults: dict[str, Any] | None = None) -> Checkpoint | None:
    """One call from the config reader: what vLLM loads beyond the architecture's parameters.
    defaults: the text model's class defaults, for the fields a sparse config leaves out."""
    from kvcalc.model.hf.positions import engine_lengths, rotary_rows, step_rotary
    from kvcalc.model.hf.towers import image_profile, vision_params

    if not isinstance(raw, dict):
        return None
    text: dict[str, Any] = raw["text_config"] if isinstance(raw.get("text_config"), dict) else raw
    text = {**(defaults or {}), **text}
    heads, hidden = text.get("num_attention_heads"), text.get("hidden_size")
    # NOTE: MLA rotates only the qk_rope_head_dim part (vLLM deepseek_v2.py get_rope(qk_rope_head_dim));
    # GLM-5.2's head_dim (192) is not the rotary width.
    head_dim = (text.get("kv_lora_rank") and text.get("qk_rope_head_dim")) or text.get("head_dim")
    head_dim = head_dim or text.get("qk_rope_head_dim")
    if head_dim is None and isinstance(heads, int) and isinstance(hidden, int) and heads:
        head_dim = hidden // heads
    # transformers 5 keeps partial_rotary_factor inside rope_parameters (Qwen3.5), where vLLM 0.19's get_rope reads it
    params = text.get("rope_parameters")
    factor = text.get(
        "partial_rotary_factor", params.get("partial_rotary_factor") if isinstance(params, dict) else None
    )
    rotary = _rotated(head_dim, 1.0 if factor is None else factor) if isinstance(head_dim, int) else None
    given = text.get("rotary_dim")
    if factor is None and isinstance(given, int) and isinstance(head_dim, int):
        # GPT-J, MiniMax-M2 / Text-01: vLLM's gpt_j.py and minimax_*.py take the config's rotary_dim columns
        rotary = given if 0 < given <= head_dim else rotary
    stored = str(text.get("torch_dtype") or raw.get("torch_dtype") or raw.get("dtype") or "").removeprefix("torch.")
    names = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
    declared = names.get(stored)
    # Ling writes "fp32", MiMo and GLM-5.2 "float32"
    router = str(text.get("moe_router_dtype") or text.get("router_dtype") or "").removeprefix("torch.")
    # Step 3.5: a rope a layer, so a cos/sin cache per distinct (theta, width, scaling) (hf/positions.step_rotary)
    rows, widths = step_rotary(text) or (rotary_rows(raw, text), _rotary_widths(text))
    return Checkpoint(
        declared_dtype=declared,
        router_dtype=names.get(router, router if router in names.values() else None),
        quantization=read_quantization(raw.get("quantization_config") or text.get("quantization_config")),
        rotary_dim=rotary,
        vision=isinstance(raw.get("vision_config"), dict),
        vision_shape=_vision_shape(raw.get("vision_config")),
        rotary_rows=rows,
        rotary_widths=widths,
        vision_params=vision_params(raw, text),
        image_profile=image_profile(raw),
        lengths=EngineLengths(**lengths) if (lengths := engine_lengths(raw, text)) else None,
    )


def _vision_shape(vision: object) -> tuple[int, int] | None:
    if not isinstance(vision, dict):
        return None
    layers, width = vision.get("num_hidden_layers", 24), vision.get("hidden_size", 1024)
    return (layers, width) if isinstance(layers, int) and isinstance(width, int) else None


def _rotary_widths(text: dict[str, Any]) -> tuple[int, ...] | None:
    """Gemma 4: the full layers' proportional rope keeps a head-wide cache (vLLM Gemma4RotaryEmbedding passes
    rotary_dim = head_size), global_head_dim wide; the sliding layers' default rope one head_dim wide."""
    params = text.get("rope_parameters")
    if text.get("model_type") != "gemma4_text" or not isinstance(params, dict):
        return None
    full, sliding = params.get("full_attention"), params.get("sliding_attention")
    if not (isinstance(full, dict) and isinstance(sliding, dict)) or full == sliding:
        return None
    head, wide = text.get("head_dim"), text.get("global_head_dim", 512)
    if not (isinstance(head, int) and isinstance(wide, int)):
        return None
    return (wide, _rotated(head, sliding.get("partial_rotary_factor", 1.0)))


def _rotated(head_dim: int, factor: Any) -> int:
    """Columns a rope rotates: head_dim x partial_rotary_factor (the whole head for a missing or odd factor)."""
    return int(head_dim * factor) if isinstance(factor, (int, float)) and 0 < factor <= 1 else head_dim


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
