"""The GGUF header: metadata key/values and the tensor table, read from the front of a file only.

Format (ggml's docs/gguf.md, gguf-py constants): magic "GGUF", uint32 version (2 or 3: version 1
used 32-bit counts and is refused), uint64 tensor count, uint64 key/value count, the key/values,
then per tensor its name, dims, ggml type and data offset; the data starts at the next multiple
of general.alignment (default 32). Little-endian only (a big-endian file is named as such).
"""

from __future__ import annotations

import struct
from typing import Any, Callable, NamedTuple

from kvcalc.errors import SpecError
from kvcalc.model.gguf.types import GGML_TYPES

MAGIC = b"GGUF"
# value type id -> struct format (fixed-size scalars); 8 string, 9 array
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
# NOTE: bounds a corrupt count cannot get past (a header is a few MB): the largest vocabularies
# hold ~262k tokens, tensor tables a few thousand entries, ggml tensors at most 4 dims.
MAX_ARRAY = 1 << 24
MAX_STRING = 1 << 24
MAX_TENSORS = 1 << 20
MAX_KV = 1 << 16
KEEP_ARRAY = 4096  # arrays longer than this (the tokenizer's) keep only their length


class Skipped(NamedTuple):
    """An array too long to keep (a vocabulary): its length only."""

    length: int


class Tensor(NamedTuple):
    name: str
    shape: tuple[int, ...]  # ne0 (the row) first, as ggml orders dims
    type: str  # ggml type name: q4_K, f16, ...
    offset: int  # from the start of the data section

    @property
    def elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """ggml_nbytes: rows x (ne0 / block x block bytes)."""
        from kvcalc.model.gguf.types import BY_NAME

        _, block, size = BY_NAME[self.type]
        return self.elements // self.shape[0] * (self.shape[0] // block * size)


class Header(NamedTuple):
    version: int
    metadata: dict[str, Any]
    tensors: list[Tensor]
    data_offset: int  # where the tensor data starts: the header's length, aligned
    bytes_read: int  # bytes fetched from the source to read the header

    @property
    def architecture(self) -> str | None:
        arch = self.metadata.get("general.architecture")
        return arch if isinstance(arch, str) else None


Fetch = Callable[[int, int], bytes]  # (start, length) -> up to length bytes (fewer at the end)


class _Cursor:
    """Reads forward through a source, fetching chunks that double in size (one request per chunk)."""

    def __init__(self, fetch: Fetch, name: str, first_chunk: int) -> None:
        self.fetch, self.name, self.chunk = fetch, name, first_chunk
        self.buf = b""
        self.pos = 0
        self.eof = False

    def take(self, n: int) -> bytes:
        end = self.pos + n
        while len(self.buf) < end and not self.eof:
            want = max(self.chunk, end - len(self.buf))
            got = self.fetch(len(self.buf), want)
            self.eof = len(got) < want
            self.buf += got
            self.chunk = min(self.chunk * 2, 4 << 20)
        if len(self.buf) < end:
            raise SpecError(
                f"{self.name}: truncated GGUF: the header needs byte {end:,} but the file ends at {len(self.buf):,}",
                hint="the download may be incomplete: check the file's size against the repository's",
            )
        out = self.buf[self.pos : end]
        self.pos = end
        return out

    def scalar(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        n = self.scalar("<Q")
        if n > MAX_STRING:
            raise SpecError(f"{self.name}: corrupt GGUF header: a string of {n:,} bytes at byte {self.pos - 8:,}")
        return self.take(n).decode("utf-8", errors="replace")


def _value(cur: _Cursor, vtype: int, key: str) -> Any:
    if vtype in _SCALARS:
        return cur.scalar(_SCALARS[vtype])
    if vtype == STRING:
        return cur.string()
    if vtype == ARRAY:
        itype, n = cur.scalar("<I"), cur.scalar("<Q")
        if n > MAX_ARRAY:
            raise SpecError(f"{cur.name}: corrupt GGUF header: {key} claims {n:,} elements")
        if itype in _SCALARS and n > KEEP_ARRAY:
            cur.take(struct.calcsize(_SCALARS[itype]) * n)
            return Skipped(n)
        if itype == STRING and n > KEEP_ARRAY:
            for _ in range(n):
                cur.take(cur.scalar("<Q"))
            return Skipped(n)
        return [_value(cur, itype, key) for _ in range(n)]
    raise SpecError(f"{cur.name}: corrupt GGUF header: {key} has unknown value type {vtype}")


def read_header(fetch: Fetch, name: str, first_chunk: int = 1 << 20) -> Header:
    """Parse the header through `fetch`; one-line SpecError for a non-GGUF, truncated or unsupported file."""
    cur = _Cursor(fetch, name, first_chunk)
    try:
        head = cur.take(4)
    except SpecError:
        raise SpecError(f"{name}: not a GGUF file: it is empty or shorter than the 4-byte magic") from None
    if head != MAGIC:
        if head[:1] in (b"{", b"["):
            raise SpecError(f"{name}: not a GGUF file: it starts like JSON", hint="a config.json needs a .json name")
        raise SpecError(f"{name}: not a GGUF file: it starts with {head!r}, not b'GGUF'")
    version = cur.scalar("<I")
    if version in (1 << 24, 2 << 24, 3 << 24):
        raise SpecError(f"{name}: a big-endian GGUF file: kvcalc reads little-endian GGUF only")
    if version not in (2, 3):
        raise SpecError(
            f"{name}: GGUF version {version} is not supported (kvcalc reads versions 2 and 3)",
            hint="re-convert the model with a current llama.cpp convert_hf_to_gguf.py",
        )
    n_tensors, n_kv = cur.scalar("<Q"), cur.scalar("<Q")
    if n_tensors > MAX_TENSORS or n_kv > MAX_KV:
        raise SpecError(f"{name}: corrupt GGUF header: {n_tensors:,} tensors and {n_kv:,} keys")
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.string()
        metadata[key] = _value(cur, cur.scalar("<I"), key)
    tensors = []
    for _ in range(n_tensors):
        tname = cur.string()
        n_dims = cur.scalar("<I")
        if not 1 <= n_dims <= 4:
            raise SpecError(f"{name}: corrupt GGUF header: tensor {tname} has {n_dims} dimensions")
        shape = tuple(cur.scalar("<Q") for _ in range(n_dims))
        type_id = cur.scalar("<I")
        if type_id not in GGML_TYPES:
            raise SpecError(
                f"{name}: tensor {tname} has ggml type {type_id}, which kvcalc does not know",
                hint="a newer llama.cpp type: kvcalc's type table needs it (kvcalc/model/gguf/types.py)",
            )
        tensors.append(Tensor(tname, shape, GGML_TYPES[type_id][0], cur.scalar("<Q")))
    align = metadata.get("general.alignment", 32)
    if not isinstance(align, int) or align <= 0 or align & (align - 1):
        raise SpecError(f"{name}: corrupt GGUF header: general.alignment {align!r} is not a power of two")
    data_offset = -(-cur.pos // align) * align
    return Header(version, metadata, tensors, data_offset, len(cur.buf))


def read_local(path: str) -> Header:
    """The header of a local file: reads the front of the file only, never the tensor data."""
    try:
        with open(path, "rb") as f:

            def fetch(start: int, length: int) -> bytes:
                f.seek(start)
                return f.read(length)

            return read_header(fetch, str(path))
    except OSError as exc:
        raise SpecError(f"{path}: cannot be read: {exc.strerror or exc}") from None


class MetadataError(SpecError):
    """A metadata value of a type llama.cpp would not load where kvcalc reads it (the caller names the file)."""


# The keys kvcalc reads that llama.cpp's loader takes as one value a layer too (get_key_or_arr / get_arr).
ARRAY_KEYS = frozenset({
    "attention.head_count", "attention.head_count_kv", "feed_forward_length", "expert_feed_forward_length",
    "attention.sliding_window_pattern", "attention.recurrent_layers", "attention.indexer.types",
    "attention.compress_ratios",
})  # fmt: skip


def arch_value(md: dict[str, Any], arch: str, key: str, default: Any = None) -> Any:
    """`{arch}.{key}` of a header's metadata, `default` where the file has none (or it was skipped, too large).
    Every key kvcalc reads this way is a whole number in llama.cpp's loader (u32, i32, bool), or for ARRAY_KEYS an
    array of them, so a string, a float, a negative count or an array where one number goes is refused by name, as
    llama.cpp's get_key refuses a wrong type."""
    value = md.get(f"{arch}.{key}", default)
    if isinstance(value, Skipped):
        return default
    if isinstance(value, list):
        whole = key in ARRAY_KEYS and bool(value) and all(isinstance(v, int) for v in value)
    else:  # a bool only where llama.cpp reads a per-layer flag (a sliding pattern, an indexer type)
        whole = isinstance(value, int) and value >= 0 and (key in ARRAY_KEYS or not isinstance(value, bool))
    if value is not default and not whole:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        what = "a whole number or a non-empty array of them" if key in ARRAY_KEYS else "one whole number"
        raise MetadataError(f"GGUF key {arch}.{key} is {shown}: llama.cpp reads {what} there")
    return value


def tokens_listed(md: dict[str, Any]) -> int:
    """How many tokens tokenizer.ggml.tokens lists (0: the file lists none)."""
    tok = md.get("tokenizer.ggml.tokens")
    if isinstance(tok, Skipped):
        return tok.length
    if tok is not None and not isinstance(tok, list):
        raise MetadataError(f"GGUF key tokenizer.ggml.tokens is {tok!r}: llama.cpp reads an array of strings there")
    return len(tok or [])
