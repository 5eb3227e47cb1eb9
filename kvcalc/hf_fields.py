"""config.json field access: aliases, validation, and the dtypes the file declares. Pure: no I/O."""

from __future__ import annotations

from typing import Any

from kvcalc.errors import SpecError
from kvcalc.units import DTYPE_ALIASES, DTYPE_BITS


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
    """(weight dtype, expert dtype) from quantization_config (formats read by kvcalc/quant.py)."""
    from kvcalc.quant import read_quantization

    q = read_quantization(cfg.get("quantization_config"))
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
