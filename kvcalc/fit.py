"""Pure memory-fit arithmetic: per-GPU budget, tensor parallelism, paged blocks, largest batch and context."""

from __future__ import annotations

import math
from typing import Callable

from kvcalc.kvcache import (
    ATTENTION_KINDS,
    bytes_per_token,
    cache_report,
    elements_per_token,
    kv_heads_per_rank,
    replicates_kv_heads,
    state_bytes,
    tokens_held,
)
from kvcalc.parallel import check_tp
from kvcalc.params import weight_bytes_resident
from kvcalc.results import FitResult, PerGpu
from kvcalc.specs import GpuSpec, ModelSpec
from kvcalc.units import elements_to_bytes

MAX_SEARCH_SEQ = 1 << 30  # beyond any published context length


def paged(tokens: int, block_size: int) -> int:
    """Tokens a paged allocator reserves: whole blocks."""
    return math.ceil(tokens / block_size) * block_size


def kv_bytes_per_sequence(spec: ModelSpec, seq: int, kv_dtype: str, tp: int, block_size: int) -> int:
    """One sequence's cache on one rank, each layer's tokens rounded up to whole blocks."""
    elements = sum(
        n * elements_per_token(spec, run, tp) * paged(tokens_held(run, seq), block_size)
        for run, n in spec.layer_groups()
    )
    return elements_to_bytes(elements, kv_dtype)


def state_bytes_per_sequence(spec: ModelSpec, tp: int) -> int:
    # NOTE: SSM / linear-attention heads are split across tensor-parallel ranks like attention heads.
    return math.ceil(state_bytes(spec, 1) / tp)


def _max_seq(spec: ModelSpec, batch: int, avail: int, kv_dtype: str, tp: int, block_size: int) -> int | None:
    def fits(s: int) -> bool:
        return (
            batch * (kv_bytes_per_sequence(spec, s, kv_dtype, tp, block_size) + state_bytes_per_sequence(spec, tp))
            <= avail
        )

    if fits(MAX_SEARCH_SEQ):
        return None
    return largest_satisfying(MAX_SEARCH_SEQ, fits)


def largest_satisfying(limit: int, ok: Callable[[int], bool]) -> int:
    """Largest n in [1, limit] with ok(n), for ok monotone (true, then false); 0 if none."""
    if limit < 1 or not ok(1):
        return 0
    lo, hi = 1, limit + 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def fit_report(
    spec: ModelSpec,
    gpu: GpuSpec,
    *,
    tp: int,
    seq: int,
    batch: int,
    dtype: str | None,
    kv_dtype: str,
    gpu_util: float,
    reserve_bytes: int,
    block_size: int,
    steps: list[str] | None = None,
    weights_per_gpu: int | None = None,
) -> FitResult:
    """weights_per_gpu: an engine's own figure (vLLM's weights as loaded) instead of weights / tp."""
    check_tp(spec, tp)
    budget = int(gpu.capacity_bytes * gpu_util)
    weights = math.ceil(weight_bytes_resident(spec, dtype) / tp) if weights_per_gpu is None else weights_per_gpu
    avail = budget - weights - reserve_bytes
    per_seq = kv_bytes_per_sequence(spec, seq, kv_dtype, tp, block_size)
    per_state = state_bytes_per_sequence(spec, tp)
    attention = [run for run, _ in spec.layer_groups() if run.kind in ATTENTION_KINDS]
    per_token = bytes_per_token(spec, kv_dtype, tp)
    usable = max(avail, 0)
    max_batch = usable // (per_seq + per_state) if per_seq + per_state else 0
    if steps is not None:
        resident = weight_bytes_resident(spec, dtype)
        steps += [
            f"budget per GPU: {gpu.capacity_bytes:,} B × {gpu_util:g} = {budget:,} B",
            f"weights: {resident:,} B / {tp} rank(s) = {weights:,} B per GPU"
            if weights_per_gpu is None
            else f"weights: {weights:,} B per GPU (as vLLM loads them)",
            f"left for the KV cache: {budget:,} − {weights:,} − reserve {reserve_bytes:,} = {avail:,} B",
        ]
        if tp > 1:
            kv_steps: list[str] = []
            cache_report(spec, 1, seq, kv_dtype, tp, steps=kv_steps)
            steps += [line for line in kv_steps if line.startswith("tensor parallel") or "MLA" in line][:2]
        blocks = math.ceil(seq / block_size)
        steps.append(
            f"paged blocks: ⌈{seq:,} / {block_size}⌉ = {blocks:,} blocks = {blocks * block_size:,} token slots per full layer"
        )
        state = f" + constant state {per_state:,} B" if per_state else ""
        steps.append(f"one sequence of {seq:,} tokens on one rank: {per_seq:,} B of KV{state}")
        steps.append(f"largest batch: ⌊{usable:,} / {per_seq + per_state:,}⌋ = {max_batch:,}")
    return FitResult(
        model=spec.name,
        gpu=gpu.name,
        tp=tp,
        seq=seq,
        batch=batch,
        dtype=dtype or spec.dtype,
        kv_dtype=kv_dtype,
        gpu_util=gpu_util,
        block_size=block_size,
        kv_heads_per_rank=kv_heads_per_rank(attention[0].kv_heads or spec.kv_heads, tp) if attention else None,
        kv_heads_replicated=replicates_kv_heads(spec, tp),
        fits=batch * (per_seq + per_state) <= avail,
        max_batch=max_batch,
        max_seq=_max_seq(spec, batch, usable, kv_dtype, tp, block_size),
        kv_capacity_tokens=(usable // (per_token * block_size)) * block_size if per_token else 0,
        max_concurrency=usable / (per_seq + per_state) if per_seq + per_state else 0.0,
        per_gpu=PerGpu(
            weight_bytes=weights,
            kv_bytes=batch * per_seq,
            state_bytes=batch * per_state,
            reserve_bytes=reserve_bytes,
            budget_bytes=budget,
            capacity_bytes=gpu.capacity_bytes,
        ),
    )
