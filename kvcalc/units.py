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
    "f32": "fp32",  # llama.cpp's and GGUF's names for the float types
    "f16": "fp16",
}
KV_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8", "int4")
WEIGHT_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8", "int4", "mxfp4", "nvfp4")

KIB, MIB, GIB, TIB = 2**10, 2**20, 2**30, 2**40
_BINARY = {"b": 1, "kib": KIB, "mib": MIB, "gib": GIB, "tib": TIB, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


# NOTE: names benchmark tables give a weight format that are not one format here. "FP4" is two: NVIDIA's
# NVFP4 (fp8 scale per 16, Blackwell checkpoints such as nvidia/DeepSeek-R1-FP4) and OCP MXFP4 (e8m0 scale
# per 32: AMD's checkpoints, gpt-oss's experts); AWQ and GPTQ are int4 with 16-bit group scales (w4a16).
AMBIGUOUS_DTYPES: dict[str, tuple[tuple[str, ...], str]] = {
    "fp4": (("nvfp4", "mxfp4"), "nvfp4 (NVIDIA's FP4, fp8 scales per 16) or mxfp4 (OCP MX, e8m0 scales per 32: AMD's, gpt-oss's)"),
    "awq": (("int4",), "int4 (AWQ's 4-bit weights, a 16-bit scale per 128)"),
    "gptq": (("int4",), "int4 (GPTQ's 4-bit weights, a 16-bit scale per 128)"),
    "w4a16": (("int4",), "int4"),
    "w8a8": (("fp8", "int8"), "fp8 or int8"),
    # llama.cpp's cache types (-ctk/-ctv): kvcalc's int8 / int4 are its q8_0 / q4_0 under --engine llamacpp
    "q8_0": (("int8",), "int8 (llama.cpp's q8_0 under --engine llamacpp, 34 bytes a block of 32)"),
    "q4_0": (("int4",), "int4 (llama.cpp's q4_0 under --engine llamacpp, 18 bytes a block of 32)"),
}  # fmt: skip


def normalize_dtype(name: str, allowed: tuple[str, ...] = tuple(DTYPE_BITS)) -> str:
    text = str(name).strip().lower()  # NOTE: str(): the Python API may hand over None or a number
    key = DTYPE_ALIASES.get(text, text)
    if key not in allowed:
        candidates, meant = AMBIGUOUS_DTYPES.get(key, ((), ""))
        hint = f"did you mean {meant}? " if candidates and set(candidates) <= set(allowed) else ""
        raise UsageError(f"unknown data type '{name}'", hint=f"{hint}allowed: {', '.join(allowed)}")
    return key


def dtype_bits(name: str) -> Fraction:
    bits = DTYPE_BITS.get(name)  # NOTE: the canonical names, as the core passes them, without parsing
    return bits if bits is not None else DTYPE_BITS[normalize_dtype(name)]


def elements_to_bytes(elements: int, dtype: str) -> int:
    """Exact bytes for a count of elements, rounded up to a whole byte."""
    bits = dtype_bits(dtype)
    if isinstance(elements, int):
        # NOTE: the same ceiling in integers: Fraction arithmetic was half the time of a 50,000-row cache
        return -(-elements * bits.numerator // (bits.denominator * 8))
    return math.ceil(elements * bits / 8)


# --- parsing -----------------------------------------------------------------------

_SUFFIX = {"": 1, "k": 1024, "m": 1024**2}
# NOTE: the largest count any option takes (2^40, about 1.1 trillion). Beyond it floats lose the
# exact byte counts and products overflow; no real batch, context or output length comes near it.
MAX_COUNT = 2**40
# NOTE: the most rows one request may expand to (batch x seq x GPUs), so that any request answers
# within a few seconds: measured on the 2-core dev machine (benchmarks/bounds.py), 100,000 roofline
# rows took 6.3 s as a table, 50,000 about 3 s. A larger grid is refused before any work, with the
# size it would have had.
# NOTE: one default context for every command (cache, roofline, fit, compare; generate's prompt + new):
# 8,192 tokens, a common serving context that every preset's max_position_embeddings allows but a few
# 4k-era models (phi-3-mini-4k, llama-2), whose warning then says so.
DEFAULT_SEQ = 8192
DEFAULT_NEW = 256  # generate's new tokens; its prompt is DEFAULT_SEQ - DEFAULT_NEW
# NOTE: the share of each GPU's memory a deployment may use, where none is given: vLLM's default
# gpu_memory_utilization (engine_args.py), which every command and the Python API take as theirs.
DEFAULT_GPU_UTIL = 0.9

# Rows one request may have, refused before any work (the README's "Limits" section states both).
MAX_ROWS = 50_000
FIT_MAX_ROWS = 10_000  # a fit row costs ~0.2 ms and a per-GPU breakdown; more is not a plan anyone reads


def parse_count(text: str, what: str = "value", minimum: int = 1, maximum: int = MAX_COUNT) -> int:
    """'8k' -> 8192, '128k' -> 131072, '1m' -> 1048576, '4096' -> 4096."""
    s = str(text).strip().lower().replace("_", "")
    if not s:
        raise UsageError(f"{what} is empty", hint="use an integer such as 4096, or 8k, 128k, 1m")
    m = re.fullmatch(r"([-+]?\d+(?:\.\d+)?)([km]?)", s)
    if not m:
        raise UsageError(f"{what} '{text}' is not a number", hint="use an integer such as 4096, or 8k, 128k, 1m")
    value = Fraction(m.group(1)) * _SUFFIX[m.group(2)]
    if value.denominator != 1:
        raise UsageError(f"{what} '{text}' is not a whole number")
    if value < minimum:
        raise UsageError(f"{what} must be at least {minimum:,}, got {text}")
    if value > maximum:
        raise UsageError(f"{what} must be at most {maximum:,}, got {text}")
    return int(value)


def range_size(text: str, what: str = "value") -> int:
    """How many values parse_range(text) would give, without building them (at most: duplicates count)."""
    s = str(text).strip().lower().replace(" ", "")
    if "," in s:
        return sum(range_size(part, what) for part in s.split(","))
    if ".." in s:
        start, end, step = _range_parts(s, text, what)
        if step is None:
            return max(1, math.ceil(math.log2(end / start))) + 1 if end > start else 1
        return (end - start) // step + 1
    return 1


def _range_parts(s: str, text: str, what: str) -> tuple[int, int, int | None]:
    start_text, _, rest = s.partition("..")
    end_text, plus, step_text = rest.partition("+")
    if not start_text or not end_text:
        raise UsageError(
            f"{what} range '{text}' needs both ends", hint="write low..high to double, or low..high+step, e.g. 1..64"
        )
    if ".." in end_text:
        raise UsageError(f"{what} range '{text}' has more than one '..'", hint="e.g. 1..64 or 8..64+8")
    start, end = parse_count(start_text, what), parse_count(end_text, what)
    if end < start:
        raise UsageError(f"{what} range '{text}' runs backwards", hint=f"write it low..high, e.g. {end}..{start}")
    if not plus:
        return start, end, None
    if not step_text:
        raise UsageError(f"{what} range '{text}' has '+' but no step", hint="e.g. 8..64+8")
    return start, end, parse_count(step_text, f"{what} step")


def parse_range(text: str, what: str = "value", limit: int = MAX_ROWS) -> list[int]:
    """'1..64' doubles (1, 2, 4, ..., 64); '8..64+8' steps; '1,8,64' lists; '8k' is one value.

    More than `limit` values is refused before any is built (a range of 10^8 would take minutes)."""
    s = str(text).strip().lower().replace(" ", "")
    if not s:
        raise UsageError(f"{what} is empty", hint="e.g. 16, a list 1,8,64 or a range 1..64")
    if "," in s:
        parts = s.split(",")
        if any(not part for part in parts):
            raise UsageError(f"{what} '{text}' has an empty item in its list", hint="e.g. 1,8,64")
        if any(len(part) == 3 and part.startswith("0") and part.isdigit() for part in parts[1:]):
            # NOTE: '4,096' would otherwise be the list [4, 96]; no list item is written with a leading zero
            raise UsageError(
                f"{what} '{text}' looks like one number with thousands separators",
                hint="write it without commas (4096) or with a suffix (4k); a list is 1,8,64",
            )
    size = range_size(s, what)
    if size > limit:
        raise UsageError(
            f"{what} '{text}' would give {size:,} values, more than the {limit:,} kvcalc computes in one run",
            hint="use a coarser step, or a doubling range low..high",
        )
    if "," in s:
        values = [v for part in s.split(",") for v in parse_range(part, what, limit)]
    elif ".." in s:
        start, end, step = _range_parts(s, text, what)
        if step is not None:
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
    return sorted(dict.fromkeys(values))


def check_grid(what: str, *sizes: int, limit: int = MAX_ROWS) -> None:
    """Refuse a request whose rows (the product of its list lengths) exceed `limit`, before any work."""
    rows = math.prod(sizes)
    if rows > limit:
        command = what.split()[0]  # the command's own limit: fit's is lower than the others'
        raise UsageError(
            f"{what} would have {rows:,} rows, more than the {limit:,} {command} computes in one run",
            hint="use fewer values or a coarser range",
        )


def parse_names(text: str, what: str) -> list[str]:
    """'a100,h100' -> ['a100', 'h100']; an empty name (from '', ',' or 'a100,,h100') is refused."""
    parts = [part.strip() for part in str(text).split(",")]
    if any(not part for part in parts):
        raise UsageError(
            f"{what} '{text}' has an empty name" if text.strip() else f"{what} is empty",
            hint="e.g. h100, or a list a100,h100; `kvcalc gpus` lists them",
        )
    return list(dict.fromkeys(parts))


def plural(n: int, word: str, many: str | None = None) -> str:
    """'1 sequence', '2 sequences', '1 KV head', '8 KV heads'."""
    return f"{n:,} {word if n == 1 else many or word + 's'}"


def parse_bytes(text: str, what: str = "memory") -> int:
    """'52.79GiB' -> bytes (binary), '80GB' -> decimal, a bare number is bytes."""
    s = str(text).strip().lower().replace(" ", "").replace("_", "")
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgt]i?b|b)?", s)
    if not m:
        raise UsageError(f"{what} '{text}' is not a size", hint="e.g. 52.79GiB, 80GB or 1073741824")
    value = Fraction(m.group(1)) * _BINARY[m.group(2) or "b"]
    if value < 1:  # NOTE: 0.5 (bytes) would become 0 after int()
        raise UsageError(f"{what} must be at least 1 byte, got {text}")
    if value > 2**60:
        raise UsageError(f"{what} must be at most 1 EiB, got {text}")
    return int(value)


def parse_fraction(text: str | float, what: str, low: float = 0.0, high: float = 1.0) -> float:
    if isinstance(text, bool):  # True is 1.0 to float()
        raise UsageError(f"{what} must be a number, got {text}")
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


def _reaches(value: float, size: float) -> bool:
    """Whether `value` shows as at least 1 of a unit of `size` at two decimals: 1,023.999 GiB prints
    as 1.00 TiB, never as '1,024.00 GiB' (nor 999.999 ms as '1,000.00 ms')."""
    return round(abs(value) / size, 2) >= 1


def fmt_bytes(n: int | float) -> str:
    """Binary units: 524288 -> '512 KiB', 17179869184 -> '16 GiB'."""
    n = float(n)
    for unit, size in (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if _reaches(n, size):
            return f"{_trim(n / size)} {unit}"
    return f"{_trim(n)} B"


def _decimal(value: float, unit: str) -> str:
    for prefix, size in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if _reaches(value, size):
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
        if _reaches(n, size):
            return f"{n / size:.2f}{unit}"
    return str(int(n))


def fmt_seconds(s: float) -> str:
    if _reaches(s, 1):
        return f"{s:,.2f} s"
    if _reaches(s, 1e-3):
        return f"{s * 1e3:,.2f} ms"
    return f"{s * 1e6:,.2f} µs"


def fmt_tokens(n: int) -> str:
    if n % (1024 * 1024) == 0:
        return f"{n // (1024 * 1024)}M"
    if n % 1024 == 0 and n >= 1024:
        return f"{n // 1024}k"
    return f"{n:,}"
