"""Pure KV-cache arithmetic: elements and bytes per token, per layer group and in total."""

from __future__ import annotations

from kvcalc.results import CacheResult, LayerCache
from kvcalc.specs import LayerKind, LayerRun, ModelSpec
from kvcalc.units import elements_to_bytes

ATTENTION_KINDS = (LayerKind.FULL, LayerKind.SLIDING, LayerKind.CHUNKED)


def kv_heads_per_rank(kv_heads: int, tp: int) -> int:
    # NOTE: with tp > G each rank still needs one whole KV head, so heads are replicated
    # (vLLM and TensorRT-LLM both do this) rather than split below one.
    return max(1, kv_heads // tp)


def elements_per_token(spec: ModelSpec, run: LayerRun, tp: int = 1) -> int:
    """Cached elements one token adds to one layer on one tensor-parallel rank."""
    if run.kind in ATTENTION_KINDS:
        return 2 * kv_heads_per_rank(run.kv_heads or spec.kv_heads, tp) * spec.head_dim_effective
    if run.kind == LayerKind.MLA:
        # NOTE: the latent is shared by all heads, so every rank stores it whole.
        return spec.kv_lora_rank + spec.qk_rope_head_dim
    return 0


def tokens_held(run: LayerRun, seq: int) -> int:
    """How many of a sequence's seq tokens one layer keeps."""
    if run.kind in (LayerKind.FULL, LayerKind.MLA):
        return seq
    if run.kind in (LayerKind.SLIDING, LayerKind.CHUNKED):
        return min(seq, run.window_tokens)
    return 0


def replicates_kv_heads(spec: ModelSpec, tp: int) -> bool:
    return any(
        run.kind in ATTENTION_KINDS and (run.kv_heads or spec.kv_heads) < tp
        for run, _ in spec.layer_groups()
    )


def cache_elements(spec: ModelSpec, batch: int, seq: int, tp: int = 1) -> int:
    """Elements held by the whole cache (one rank) for batch sequences of seq tokens."""
    return batch * sum(
        n * elements_per_token(spec, run, tp) * tokens_held(run, seq) for run, n in spec.layer_groups()
    )


def cache_bytes(spec: ModelSpec, batch: int, seq: int, kv_dtype: str, tp: int = 1) -> int:
    return elements_to_bytes(cache_elements(spec, batch, seq, tp), kv_dtype)


def bytes_per_token(spec: ModelSpec, kv_dtype: str, tp: int = 1) -> int:
    """What one more token adds while every window still grows."""
    return elements_to_bytes(
        sum(n * elements_per_token(spec, run, tp) for run, n in spec.layer_groups()), kv_dtype
    )


def state_bytes(spec: ModelSpec, batch: int) -> int:
    """Constant recurrent state (SSM / linear attention) for batch sequences."""
    return batch * sum(n * run.state_bytes for run, n in spec.layer_groups())


def cache_report(spec: ModelSpec, batch: int, seq: int, kv_dtype: str, tp: int = 1) -> CacheResult:
    layers = []
    for run, n in spec.layer_groups():
        per_token = elements_per_token(spec, run, tp)
        held = tokens_held(run, seq)
        layers.append(
            LayerCache(
                kind=run.kind.value,
                layers=n,
                window_tokens=run.window_tokens,
                kv_heads=kv_heads_per_rank(run.kv_heads or spec.kv_heads, tp)
                if run.kind in ATTENTION_KINDS
                else None,
                elements_per_token=per_token,
                tokens_held=held,
                bytes_per_token=elements_to_bytes(n * per_token, kv_dtype),
                total_bytes=elements_to_bytes(batch * n * per_token * held, kv_dtype),
                state_bytes=batch * n * run.state_bytes,
            )
        )
    return CacheResult(
        model=spec.name,
        batch=batch,
        seq=seq,
        kv_dtype=kv_dtype,
        tp=tp,
        kv_heads_replicated=replicates_kv_heads(spec, tp),
        bytes_per_token=bytes_per_token(spec, kv_dtype, tp),
        total_bytes=cache_bytes(spec, batch, seq, kv_dtype, tp),
        state_bytes=state_bytes(spec, batch),
        layers=layers,
    )
