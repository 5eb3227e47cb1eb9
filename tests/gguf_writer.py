"""Build small GGUF files for the tests: the header format of ggml's docs/gguf.md (version 3)."""

from __future__ import annotations

import struct

from kvcalc.model.gguf.types import BY_NAME, GGML_TYPES

_TYPE_ID = {name: tid for tid, (name, _, _) in GGML_TYPES.items()}


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _value(v) -> bytes:
    if isinstance(v, bool):
        return struct.pack("<I?", 7, v)
    if isinstance(v, int):
        return (
            struct.pack("<Iq", 11, v)
            if v < 0
            else struct.pack("<IQ", 10, v)
            if v >= 1 << 32
            else struct.pack("<II", 4, v)
        )
    if isinstance(v, float):
        return struct.pack("<If", 6, v)
    if isinstance(v, str):
        return struct.pack("<I", 8) + _s(v)
    if isinstance(v, list):
        if v and isinstance(v[0], str):
            return struct.pack("<IIQ", 9, 8, len(v)) + b"".join(_s(x) for x in v)
        if v and isinstance(v[0], bool):
            return struct.pack("<IIQ", 9, 7, len(v)) + b"".join(struct.pack("<?", x) for x in v)
        return struct.pack("<IIQ", 9, 5, len(v)) + b"".join(struct.pack("<i", x) for x in v)
    raise TypeError(v)


def gguf_bytes(metadata: dict, tensors: list[tuple[str, tuple[int, ...], str]], data: bool = True) -> tuple[bytes, int]:
    """(file bytes, header length before the aligned data). Tensor data is zeros (omitted if not data)."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for key, v in metadata.items():
        out += _s(key) + _value(v)
    offset, blobs = 0, []
    for name, shape, tname in tensors:
        out += _s(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape)
        out += struct.pack("<IQ", _TYPE_ID[tname], offset)
        _, block, size = BY_NAME[tname]
        n = 1
        for d in shape:
            n *= d
        nbytes = n // block * size
        blobs.append(nbytes)
        offset += -(-nbytes // 32) * 32
    header = len(out)
    out += b"\0" * (-(-header // 32) * 32 - header)
    if data:
        out += b"\0" * offset
    return out, header


def llama_like(
    arch: str = "llama",
    layers: int = 4,
    hidden: int = 256,
    heads: int = 8,
    kv_heads: int = 2,
    ff: int = 512,
    vocab: int = 1000,
    wtype: str = "q4_K",
    tied: bool = False,
    extra: dict | None = None,
) -> tuple[dict, list]:
    """Metadata and tensor table of a small llama-shaped model (tensor shapes ne0 first, as ggml)."""
    head_dim = hidden // heads
    md = {
        "general.architecture": arch,
        "general.name": "tiny",
        f"{arch}.block_count": layers,
        f"{arch}.embedding_length": hidden,
        f"{arch}.attention.head_count": heads,
        f"{arch}.attention.head_count_kv": kv_heads,
        f"{arch}.feed_forward_length": ff,
        f"{arch}.context_length": 8192,
        "tokenizer.ggml.tokens": [f"t{i}" for i in range(vocab)],
        **(extra or {}),
    }
    tensors = [("token_embd.weight", (hidden, vocab), "q4_K" if wtype != "f16" else "f16")]
    for il in range(layers):
        p = f"blk.{il}."
        tensors += [
            (p + "attn_norm.weight", (hidden,), "f32"),
            (p + "attn_q.weight", (hidden, hidden), wtype),
            (p + "attn_k.weight", (hidden, kv_heads * head_dim), wtype),
            (p + "attn_v.weight", (hidden, kv_heads * head_dim), "q6_K" if wtype == "q4_K" else wtype),
            (p + "attn_output.weight", (hidden, hidden), wtype),
            (p + "ffn_norm.weight", (hidden,), "f32"),
            (p + "ffn_gate.weight", (hidden, ff), wtype),
            (p + "ffn_up.weight", (hidden, ff), wtype),
            (p + "ffn_down.weight", (ff, hidden), "q6_K" if wtype == "q4_K" else wtype),
        ]
    tensors.append(("output_norm.weight", (hidden,), "f32"))
    if not tied:
        tensors.append(("output.weight", (hidden, vocab), "q6_K" if wtype == "q4_K" else wtype))
    return md, tensors
