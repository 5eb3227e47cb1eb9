"""Pydantic result models: the base of every result `--format json` prints, and the cache command's.

Each other command's result models live beside the core function that returns them (roofline.py,
variants.py, fit.py, vllm.py, generate.py): a command defines only its own at start-up.
"""

# NOTE: no `from __future__ import annotations` in the Pydantic model modules: Pydantic would compile
# every field's annotation string at import (about 2 ms of start-up over results, specs and quant).
from pydantic import BaseModel, ConfigDict


class Result(BaseModel):
    # NOTE: defer_build: a command builds only the result models it returns (start-up time).
    model_config = ConfigDict(extra="forbid", defer_build=True)


class LayerCache(Result):
    kind: str
    layers: int
    window_tokens: int | None = None
    kv_heads: int | None = None  # per rank
    elements_per_token: int  # per layer, per held entry
    tokens_held: int  # per sequence (DeepSeek-V4: its window's entries and its compressed ones)
    compress_ratio: int | None = None  # DeepSeek-V4: one compressed entry per this many tokens
    bytes_per_token: int  # all layers of this group, while the window still grows
    total_bytes: int  # all layers of this group, for batch x seq
    state_bytes: int = 0  # constant per-sequence state of the group, times batch


class CacheResult(Result):
    model: str
    batch: int
    seq: int
    kv_dtype: str
    tp: int = 1
    kv_heads_replicated: bool = False
    bytes_per_token: int
    # what one more token adds once every window is full (sliding and chunked layers, DeepSeek-V4's windows); None
    # where the model has no window (the same as bytes_per_token)
    bytes_per_token_past_windows: int | None = None
    total_bytes: int
    state_bytes: int = 0
    layers: list[LayerCache]
    gpu: str | None = None
    gpu_memory_bytes: int | None = None
    gpu_memory_share: float | None = None  # (KV + recurrent state) / one GPU's memory
    warnings: list[str] = []  # a context beyond max_position_embeddings, as roofline and generate warn
