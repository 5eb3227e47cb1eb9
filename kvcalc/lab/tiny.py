"""A tiny decoder-only transformer in float64 NumPy, written to be read next to THEORY.md.

Embedding (+ learned absolute positions, or RoPE inside attention), pre-norm blocks of causal
self-attention with a configurable number of KV heads (MHA, GQA, MQA) and an MLP, and an LM head.
Every product goes through `einsum` (NumPy's own loops, not BLAS), so a row's result never depends
on how many other rows are in the batch: exactness claims can be checked with `== 0`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class LabConfig:
    vocab: int = 64
    d_model: int = 32
    n_heads: int = 4
    n_kv_heads: int = 4
    n_layers: int = 2
    d_ff: int = 64
    max_positions: int = 512
    positions: str = "learned"  # "learned" absolute embeddings, or "rope"
    # query head j reads KV head j // (h / G); "interleaved": j % G (another model); "none": MHA, G = h
    grouping: str = "contiguous"

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


@dataclass
class Counter:
    """FLOPs of the matrix products (2 per multiply-add), counted as they run."""

    flops: int = 0


@dataclass
class LayerCache:
    k: np.ndarray  # (n_kv_heads, tokens, head_dim)
    v: np.ndarray


@dataclass
class TinyDecoder:
    cfg: LabConfig
    seed: int = 0
    counter: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        c, rng = self.cfg, np.random.default_rng(self.seed)
        d, hd = c.d_model, c.head_dim

        def w(*shape: int) -> np.ndarray:
            return rng.standard_normal(shape) / np.sqrt(shape[0])

        self.embed = rng.standard_normal((c.vocab, d))
        self.pos = rng.standard_normal((c.max_positions, d)) * 0.5 if c.positions == "learned" else None
        self.layers = [
            {
                "wq": w(d, c.n_heads * hd),
                "wk": w(d, c.n_kv_heads * hd),
                "wv": w(d, c.n_kv_heads * hd),
                "wo": w(c.n_heads * hd, d),
                "w1": w(d, c.d_ff),
                "w2": w(c.d_ff, d),
                "g1": np.ones(d),
                "g2": np.ones(d),
            }
            for _ in range(c.n_layers)
        ]
        self.g_final = np.ones(d)
        self.head = w(d, c.vocab)

    # --- pieces ---------------------------------------------------------------------------

    def matmul(self, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        self.counter.flops += 2 * x.shape[0] * weight.shape[0] * weight.shape[1]
        return np.einsum("td,de->te", x, weight)

    @staticmethod
    def norm(x: np.ndarray, gain: np.ndarray) -> np.ndarray:
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * gain

    def rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Rotate (heads, tokens, head_dim) pairs by angle position x frequency."""
        half = x.shape[-1] // 2
        freq = 10000.0 ** (-np.arange(half) / half)
        angle = positions[:, None] * freq[None, :]
        cos, sin = np.cos(angle), np.sin(angle)
        x1, x2 = x[..., :half], x[..., half:]
        return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)

    def kv_head_of(self) -> np.ndarray:
        """Which KV head each query head reads."""
        h, g = self.cfg.n_heads, self.cfg.n_kv_heads
        j = np.arange(h)
        return j % g if self.cfg.grouping == "interleaved" else j // (h // g)

    def attend(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, offset: int) -> np.ndarray:
        """Causal attention of T queries over S keys. Query t sees keys 0 .. t + offset:
        offset = S - T is the bottom-right-aligned mask (right for a cache); 0 is top-left."""
        heads, t_len, hd = q.shape
        if self.cfg.grouping != "none":
            k, v = k[self.kv_head_of()], v[self.kv_head_of()]
        # NOTE: one memory layout for every path, so einsum sums in the same order whatever the grouping.
        q, k, v = np.ascontiguousarray(q), np.ascontiguousarray(k), np.ascontiguousarray(v)
        out = np.empty_like(q)
        for t in range(t_len):
            m = t + 1 + offset  # keys this query may see
            scores = np.einsum("hd,hsd->hs", q[:, t], k[:, :m]) / np.sqrt(hd)
            weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
            weights /= weights.sum(axis=-1, keepdims=True)
            out[:, t] = np.einsum("hs,hsd->hd", weights, v[:, :m])
            self.counter.flops += 2 * 2 * heads * hd * m  # QK^T and weights x V
        return out

    # --- the forward pass ----------------------------------------------------------------------

    def forward(
        self, tokens: list[int] | np.ndarray, cache: list[LayerCache] | None = None, mask: str = "bottom-right"
    ) -> np.ndarray:
        """Logits for `tokens`, appended after whatever `cache` holds (then extended in place)."""
        c = self.cfg
        tokens = np.asarray(tokens)
        past = cache[0].k.shape[1] if cache else 0
        positions = np.arange(past, past + len(tokens))
        x = self.embed[tokens]
        if self.pos is not None:
            x = x + self.pos[positions]
        for i, layer in enumerate(self.layers):
            h = self.norm(x, layer["g1"])
            q = self.matmul(h, layer["wq"]).reshape(len(tokens), c.n_heads, c.head_dim).transpose(1, 0, 2)
            k = self.matmul(h, layer["wk"]).reshape(len(tokens), c.n_kv_heads, c.head_dim).transpose(1, 0, 2)
            v = self.matmul(h, layer["wv"]).reshape(len(tokens), c.n_kv_heads, c.head_dim).transpose(1, 0, 2)
            if c.positions == "rope":
                q, k = self.rope(q, positions), self.rope(k, positions)
            if cache is not None:
                if len(cache) <= i:
                    cache.append(LayerCache(k[:, :0], v[:, :0]))
                cache[i].k = np.concatenate([cache[i].k, k], axis=1)
                cache[i].v = np.concatenate([cache[i].v, v], axis=1)
                k, v = cache[i].k, cache[i].v
            offset = k.shape[1] - len(tokens) if mask == "bottom-right" else 0
            attn = self.attend(q, k, v, offset).transpose(1, 0, 2).reshape(len(tokens), -1)
            x = x + self.matmul(attn, layer["wo"])
            h = self.norm(x, layer["g2"])
            x = x + self.matmul(np.maximum(self.matmul(h, layer["w1"]), 0.0), layer["w2"])
        return self.matmul(self.norm(x, self.g_final), self.head)

    def keys_values(self, tokens: list[int] | np.ndarray) -> list[LayerCache]:
        """Every layer's K and V for a full forward over `tokens`."""
        cache: list[LayerCache] = []
        self.forward(tokens, cache)
        return cache


# --- cache arrays at real model shapes, and decode / prefill-shaped products (lab groups 4 and 5) ---


def cache_arrays(n_layers: int, n_kv_heads: int, head_dim: int, tokens: int, dtype: str) -> list[LayerCache]:
    """One sequence's cache in TinyDecoder's layout: per layer, K and V of (n_kv_heads, tokens, head_dim).
    bf16 has no NumPy type; float16 has its 2 bytes, which is all nbytes counts."""
    kind = {"bf16": np.float16, "fp16": np.float16, "fp32": np.float32, "fp64": np.float64}[dtype]
    shape = (n_kv_heads, tokens, head_dim)
    return [LayerCache(np.zeros(shape, kind), np.zeros(shape, kind)) for _ in range(n_layers)]


def cache_nbytes(caches: list[list[LayerCache]]) -> int:
    """What the arrays of a batch of per-sequence caches hold, as NumPy counts it."""
    return sum(layer.k.nbytes + layer.v.nbytes for cache in caches for layer in cache)


@dataclass
class Products:
    """y = W x (decode-shaped: a matrix-vector product per token) and Y = W X over `tokens` columns
    (prefill-shaped), float32 through BLAS, with the bytes each must move and the FLOPs it does."""

    n: int
    tokens: int
    seed: int = 0

    def __post_init__(self) -> None:
        rng = np.random.default_rng(self.seed)
        self.w = rng.standard_normal((self.n, self.n), dtype=np.float32)
        self.x = rng.standard_normal(self.n, dtype=np.float32)
        self.xs = rng.standard_normal((self.n, self.tokens), dtype=np.float32)

    def decode(self) -> np.ndarray:
        return self.w @ self.x

    def prefill(self) -> np.ndarray:
        return self.w @ self.xs

    def decode_flops(self) -> int:
        return 2 * self.n * self.n

    def decode_bytes(self) -> int:  # W read once, x read, y written
        return 4 * (self.n * self.n + 2 * self.n)

    def prefill_flops(self) -> int:
        return 2 * self.n * self.n * self.tokens

    def prefill_bytes(self) -> int:  # W read once, X read, Y written
        return 4 * (self.n * self.n + 2 * self.n * self.tokens)
