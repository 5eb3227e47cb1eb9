"""Data types (bits per element), number and range parsing, and unit formatting."""

from __future__ import annotations

import math
import re
from fractions import Fraction

from kvcalc.errors import UsageError

# Bits per stored element. MXFP4 stores 4-bit elements plus one 8-bit (E8M0) scale per
# block of 32, so 4 + 8/32 = 4.25 bits; NVFP4 has an fp8 scale per 16: 4 + 8/16 = 4.5.
DTYPE_BITS: dict[str, Fraction] = {
    "fp32": Fraction(32),
    "tf32": Fraction(32),
    "bf16": Fraction(16),
    "fp16": Fraction(16),
    "fp8": Fraction(8),
    "int8": Fraction(8),
    "int4": Fraction(4),
    "mxfp4": Fraction(17, 4),
    "nvfp4": Fraction(9, 2),
}
DTYPE_ALIASES = {
    "float32": "fp32",
    "float": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "e4m3": "fp8",
    "e5m2": "fp8",
    "float8_e4m3fn": "fp8",
    "uint8": "int8",
}
KV_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8", "int4")
WEIGHT_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8", "int4", "mxfp4", "nvfp4")

KIB, MIB, GIB, TIB = 2**10, 2**20, 2**30, 2**40
_BINARY = {"b": 1, "kib": KIB, "mib": MIB, "gib": GIB, "tib": TIB, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def normalize_dtype(name: str, allowed: tuple[str, ...] = tuple(DTYPE_BITS)) -> str:
    key = DTYPE_ALIASES.get(name.strip().lower(), name.strip().lower())
    if key not in allowed:
        raise UsageError(f"unknown data type '{name}'", hint=f"allowed: {', '.join(allowed)}")
    return key


def dtype_bits(name: str) -> Fraction:
    return DTYPE_BITS[normalize_dtype(name)]


def elements_to_bytes(elements: int, dtype: str) -> int:
    """Exact bytes for a count of elements, rounded up to a whole byte."""
    return math.ceil(elements * dtype_bits(dtype) / 8)


# --- parsing -----------------------------------------------------------------------

_SUFFIX = {"": 1, "k": 1024, "m": 1024**2}


def parse_count(text: str, what: str = "value", minimum: int = 1) -> int:
    """'8k' -> 8192, '128k' -> 131072, '1m' -> 1048576, '4096' -> 4096."""
    s = str(text).strip().lower().replace("_", "")
    m = re.fullmatch(r"(-?\d+(?:\.\d+)?)([km]?)", s)
    if not m:
        raise UsageError(f"{what} '{text}' is not a number", hint="use an integer such as 4096, or 8k, 128k, 1m")
    value = Fraction(m.group(1)) * _SUFFIX[m.group(2)]
    if value.denominator != 1:
        raise UsageError(f"{what} '{text}' is not a whole number")
    if value < minimum:
        raise UsageError(f"{what} must be at least {minimum}, got {text}")
    return int(value)


def parse_range(text: str, what: str = "value") -> list[int]:
    """'1..64' doubles (1, 2, 4, ..., 64); '8..64+8' steps; '1,8,64' lists; '8k' is one value."""
    s = str(text).strip().lower().replace(" ", "")
    if "," in s:
        values = [v for part in s.split(",") if part for v in parse_range(part, what)]
    elif ".." in s:
        start_text, _, rest = s.partition("..")
        end_text, plus, step_text = rest.partition("+")
        start, end = parse_count(start_text, what), parse_count(end_text, what)
        if end < start:
            raise UsageError(f"{what} range '{text}' runs backwards", hint=f"write it low..high, e.g. {end}..{start}")
        if plus:
            step = parse_count(step_text, f"{what} step")
            values = list(range(start, end + 1, step))
        else:
            values = []
            v = start
            while v < end:
                values.append(v)
                v *= 2
            values.append(end)
    else:
        values = [parse_count(s, what)]
    if not values:
        raise UsageError(f"{what} '{text}' holds no values")
    return sorted(dict.fromkeys(values))


def parse_bytes(text: str, what: str = "memory") -> int:
    """'52.79GiB' -> bytes (binary), '80GB' -> decimal, a bare number is bytes."""
    s = str(text).strip().lower().replace(" ", "").replace("_", "")
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgt]i?b|b)?", s)
    if not m:
        raise UsageError(f"{what} '{text}' is not a size", hint="e.g. 52.79GiB, 80GB or 1073741824")
    value = Fraction(m.group(1)) * _BINARY[m.group(2) or "b"]
    if value <= 0:
        raise UsageError(f"{what} must be positive, got {text}")
    return int(value)


def parse_fraction(text: str | float, what: str, low: float = 0.0, high: float = 1.0) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise UsageError(f"{what} '{text}' is not a number") from None
    if not low < value <= high:
        raise UsageError(f"{what} must be in ({low:g}, {high:g}], got {text}")
    return value


# --- formatting --------------------------------------------------------------------


def _trim(value: float, digits: int = 2) -> str:
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:,.{digits}f}"


def fmt_bytes(n: int | float) -> str:
    """Binary units: 524288 -> '512 KiB', 17179869184 -> '16 GiB'."""
    n = float(n)
    for unit, size in (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if abs(n) >= size:
            return f"{_trim(n / size)} {unit}"
    return f"{_trim(n)} B"


def _decimal(value: float, unit: str) -> str:
    for prefix, size in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{_trim(value / size)} {prefix}{unit}"
    return f"{_trim(value)} {unit}"


def fmt_rate(bytes_per_s: float) -> str:
    """Decimal units: 2.039e12 -> '2.04 TB/s'."""
    return _decimal(bytes_per_s, "B/s")


def fmt_flops(flop_per_s: float) -> str:
    return _decimal(flop_per_s, "FLOP/s")


def fmt_flop_count(flops: float) -> str:
    return _decimal(flops, "FLOP")


def fmt_params(n: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f}{unit}"
    return str(int(n))


def fmt_seconds(s: float) -> str:
    if s >= 1:
        return f"{s:,.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:,.2f} ms"
    return f"{s * 1e6:,.2f} µs"


def fmt_tokens(n: int) -> str:
    if n % (1024 * 1024) == 0:
        return f"{n // (1024 * 1024)}M"
    if n % 1024 == 0 and n >= 1024:
        return f"{n // 1024}k"
    return f"{n:,}"
