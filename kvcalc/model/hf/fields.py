"""config.json field access: aliases, validation, and the dtypes the file declares. Pure: no I/O."""

from __future__ import annotations

from typing import Any, TypeGuard

from kvcalc.errors import SpecError
from kvcalc.units import DTYPE_ALIASES, DTYPE_BITS

# The largest multiplier read as one (RoPE factors reach 64 or so, MLP expansion ratios 8).
MAX_FACTOR = 1e6


def is_factor(value: Any) -> TypeGuard[float]:
    """A positive real multiplier: a number in (0, MAX_FACTOR], not a bool."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and 0 < value <= MAX_FACTOR


class Config:
    """A config dict with field-name aliases and a source location for error messages."""

    def __init__(self, data: dict[str, Any], where: str, overrides: dict[str, Any]):
        self.data, self.where, self.overrides = data, where, overrides

    def get(self, *names: str, default: Any = None) -> Any:
        for name in names:
            if self.data.get(name) is not None:
                return self.data[name]
        return default

    def require(self, *names: str, override: str | None = None) -> Any:
        value = self.get(*names)
        if value is None:
            hint = f"pass {override} to supply it" if override else "this architecture cannot be read"
            raise SpecError(f"{self.where}: no {' / '.join(names)} in config.json", hint=hint)
        return value

    def int_field(self, *names: str, override: str | None = None, default: Any = None) -> int:
        value = self.get(*names, default=default) if default is not None else self.require(*names, override=override)
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{self.where}: field {names[0]} must be an integer, got {value!r}")
        if value <= 0:
            raise SpecError(f"{self.where}: field {names[0]} must be positive, got {value}")
        return value

    def factor(self, name: str, default: float) -> float:
        """A positive real factor (an MLP's expansion ratio or width multiplier), refused by name otherwise."""
        value = self.get(name, default=default)
        if not is_factor(value):
            raise self.refuse(f"field {name} must be a positive number, got {value!r}")
        return float(value)

    def refuse(self, message: str, hint: str | None = None) -> SpecError:
        return SpecError(f"{self.where}: {message}", hint=hint)


def window(cfg: Config, value: Any) -> int:
    if not isinstance(value, int) or value <= 0:
        raise SpecError(f"{cfg.where}: sliding layers but no usable sliding_window", hint="pass --window")
    return value


def declared_dtype(cfg: Config) -> str:
    """The activation dtype the config declares (torch_dtype / dtype), bf16 when absent."""
    raw = str(cfg.get("torch_dtype", "dtype", default="bfloat16")).removeprefix("torch.")
    key = DTYPE_ALIASES.get(raw, raw)
    return key if key in DTYPE_BITS else "bf16"


def quantization(cfg: Config, dtype: str) -> tuple[str, str | None]:
    """(weight dtype, expert dtype) from quantization_config (model/hf/quantization.py reads the formats)."""
    from kvcalc.model.hf.quantization import read_quantization

    q = read_quantization(cfg.get("quantization_config"), cfg.get("expert_dtype"))
    if q is None:
        return dtype, None
    names = {"nf4": "int4"}
    linear = names.get(q.linear.name, q.linear.name) if q.linear else dtype
    expert = names.get(q.experts.name, q.experts.name) if q.experts else None
    if q.problem or linear not in DTYPE_BITS or (expert and expert not in DTYPE_BITS):
        raise SpecError(
            f"{cfg.where}: quantization_config with quant_method '{q.method}' is not understood"
            + (f" ({q.problem})" if q.problem else ""),
            hint="pass --dtype to say what the weights are stored in",
        )
    return linear, expert


# Fields the family modules read with cfg.get and compute with: a value of the wrong type would fail deep in
# the arithmetic, so it is refused here, naming the field. Positive: a period, a count of heads or a width.
POSITIVE = (
    "attn_layer_period", "expert_layer_period", "interleave_moe_layer_step", "no_rope_layer_interval",
    "attention_chunk_size", "global_attn_every_n_layers", "full_attention_interval", "cla_share_factor",
    "num_experts_per_tok", "experts_per_token", "moe_top_k", "num_selected_experts", "intermediate_size_mlp",
    "mamba_d_state", "mamba_d_conv", "mamba_expand", "mamba_n_heads", "mamba_num_heads", "mamba_head_dim",
    "mamba_n_groups", "n_groups", "ssm_state_size", "state_size", "conv_kernel", "expand", "linear_conv_kernel_dim",
    "conv_L_cache", "conv_dim", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "q_lora_rank",
    "block_multiple_of", "sliding_window_size", "max_window_layers", "head_dim",
)  # fmt: skip
# NOTE: sliding_window may be 0, no window: Qwen2MoeConfig (transformers 5) writes 0 when use_sliding_window is
# false; a layer that does slide refuses it (fields.window).
COUNTS = (
    "sliding_window",
    "attn_layer_offset", "expert_layer_offset", "num_local_experts", "n_routed_experts", "num_experts",
    "first_k_dense_replace", "num_dense_layers", "n_shared_experts", "num_shared_experts", "num_nextn_predict_layers",
    "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size", "shared_intermediate_size",
    "num_shared_expert", "moe_topk", "moe_intermediate_size", "moe_num_shared_experts",
)  # fmt: skip
LISTS = (
    "layer_types", "layers_block_type", "mlp_layer_types", "moe_layers", "no_rope_layers", "full_attn_idxs",
    "attn_layer_indices", "mlp_only_layers",
)  # fmt: skip
# Alternatives a family's config class accepts beside an integer.
ALSO = {"mamba_head_dim": ("auto",), "mamba_d_head": ("auto",), "mamba_dt_rank": ("auto",)}
PER_LAYER_OK = ("num_experts", "moe_topk", "moe_intermediate_size", "num_shared_expert")  # Hunyuan's lists


# Experts chosen per token: 0 is allowed beside zero experts (Granite-4.0-H 350M and 1B: a dense MLP).
TOP_K = ("num_experts_per_tok", "experts_per_token", "moe_top_k", "num_selected_experts")
EXPERT_COUNTS = ("num_local_experts", "n_routed_experts", "num_experts")


def check_types(cfg: Config) -> None:
    """Refuse a field the reader computes with when its value has the wrong type (one line, the field named)."""
    dense = not any(cfg.data.get(name) for name in EXPERT_COUNTS)
    for name in POSITIVE + COUNTS + ("mamba_d_head", "mamba_dt_rank"):
        value = cfg.data.get(name)
        if isinstance(value, list) and name in PER_LAYER_OK:  # one count a layer (Hunyuan's)
            if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in value):
                raise cfg.refuse(f"field {name} must list non-negative integers, got {value!r}")
            continue
        if value is None or value in ALSO.get(name, ()):
            continue
        least = 0 if name in COUNTS or (dense and name in TOP_K) else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            kind = "a non-negative integer" if least == 0 else "a positive integer"
            raise cfg.refuse(f"field {name} must be {kind}, got {value!r}")
    for name in LISTS:
        value = cfg.data.get(name)
        if value is not None and not isinstance(value, list):
            raise cfg.refuse(f"field {name} must be a list, got {value!r}")
        if isinstance(value, list):
            strings = name.endswith(("_types", "_type"))
            if any(isinstance(v, bool) or not isinstance(v, str if strings else int) for v in value):
                want = "names" if strings else "integers"
                raise cfg.refuse(f"field {name} must list {want}, got {value!r}")
    for name in ("hybrid_override_pattern", "mamba_ssm_cache_dtype", "mamba_ssm_dtype"):
        value = cfg.data.get(name)
        if value is not None and not isinstance(value, str):
            raise cfg.refuse(f"field {name} must be a string, got {value!r}")
