"""Pure KV-cache arithmetic: elements and bytes per token, per layer group and in total."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from kvcalc.errors import UsageError
from kvcalc.model.spec import LayerKind, LayerRun, ModelSpec
from kvcalc.results import CacheResult, LayerCache
from kvcalc.units import dtype_bits, elements_to_bytes, fmt_bytes, plural

if TYPE_CHECKING:  # kvcalc/gpu.py is imported where a GPU is read, not by `kvcalc cache MODEL`
    from kvcalc.hardware.gpu import GpuSpec


def kv_heads_per_rank(kv_heads: int, tp: int) -> int:
    # NOTE: with tp > G each rank still needs one whole KV head, so heads are replicated
    # (vLLM and TensorRT-LLM both do this) rather than split below one.
    return max(1, kv_heads // tp)


# --- valid tensor-parallel sizes: how KV heads may split over ranks -----------------------
# vLLM's rule (ModelConfig.verify_with_parallel_config, QKVParallelLinear; parallel.py cites both).
# Here rather than in parallel.py: `kvcalc cache --tp` needs it, and nothing else of parallel.py.


def _divisors(n: int) -> list[int]:
    """n's divisors in order, in O(sqrt n) (a header may give ten billion heads)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def query_heads(spec: ModelSpec) -> list[int]:
    """The query-head counts tensor parallelism must split: the model's and any attention layer's own (Laguna)."""
    return sorted({spec.run_heads(run) for run, _ in spec.layer_groups() if run.kind.self_head_kv} | {spec.num_heads})


def valid_tp(spec: ModelSpec) -> list[int]:
    """Tensor-parallel sizes vLLM accepts for this model (up to its query-head count)."""
    if spec.attention_free:  # its mixers split by width (vLLM's MambaMixer: d_inner / tp)
        return _divisors(spec.hidden_size)
    kv = {run.kv_heads or spec.kv_heads for run, _ in spec.layer_groups()} if not spec.is_mla else set()
    heads = query_heads(spec)
    fits = [t for t in _divisors(min(heads)) if all(g % t == 0 or t % g == 0 for g in kv)]
    return [t for t in fits if all(h % t == 0 for h in heads) and (not spec.tp_group or spec.tp_group % t == 0)]


def check_tp(spec: ModelSpec, tp: int) -> None:
    """Refuse a tensor-parallel size vLLM would refuse: tp must divide the query heads, and each
    layer's KV heads must either split evenly over the ranks or be replicated evenly (tp a
    multiple of them). MLA has one shared latent, so only the query heads constrain it."""
    if tp < 1:
        raise UsageError(f"tensor parallelism must be at least 1, got {tp}")
    allowed = ", ".join(map(str, valid_tp(spec)))
    if spec.attention_free:
        if spec.hidden_size % tp:
            raise UsageError(
                f"tensor parallelism {tp} does not divide {spec.name}'s hidden size {spec.hidden_size}",
                hint=f"allowed: {allowed}",
            )
        return
    heads = query_heads(spec)
    if odd := [h for h in heads if h % tp]:
        raise UsageError(
            f"tensor parallelism {tp} does not divide {spec.name}'s {odd[0]} query heads"
            + (" (a layer's own)" if odd[0] != spec.num_heads else ""),
            hint=f"allowed: {allowed}",
        )
    if spec.tp_group and spec.tp_group % tp:
        raise UsageError(
            f"tensor parallelism {tp} does not divide {spec.name}'s group_norm_size {spec.tp_group}: its "
            "linear-attention layers' grouped norm is split over the ranks, and vLLM and SGLang assert it divides",
            hint=f"allowed: {allowed}",
        )
    if spec.is_mla:
        return
    for run, _ in spec.layer_groups():
        g = run.kv_heads or spec.kv_heads
        if run.kind.self_head_kv and g % tp and tp % g:
            raise UsageError(
                f"tensor parallelism {tp} cannot split {spec.name}'s {g} KV heads: it must divide them "
                "or be a multiple of them",
                hint=f"allowed: {allowed}",
            )


def elements_per_token(spec: ModelSpec, run: LayerRun, tp: int = 1) -> int:
    """Cached elements one token adds to one layer on one tensor-parallel rank."""
    if run.kv_shared:
        return 0  # it reads the K and V an earlier layer cached
    if run.kind.per_head_kv:
        return kv_heads_per_rank(run.kv_heads or spec.kv_heads, tp) * (spec.run_head_dim(run) + spec.run_v_dim(run))
    if run.kind == LayerKind.MLA:
        # NOTE: the latent is shared by all heads, so every rank stores it whole.
        return spec.latent_rank + spec.rope_dim
    return 0


# MiniMax-M3's index keys are kept in the model's 16-bit dtype (SGLang 0.5.23 get_minimax_sparse_index_dtype: bf16
# unless an fp8 KV cache runs on the fp8 attention-GEMM backends, not modelled), one key a token, no scale.
SPARSE_INDEX_BYTES = 2


def index_bytes_per_token(spec: ModelSpec, run: LayerRun) -> int:
    """Bytes one indexed entry adds to one layer's indexer cache: a token of DSA's MLA layers or MiniMax-M3's sparse
    layers, a compressed entry of DeepSeek-V4's CSA layers (index_tokens_held counts them); 0 elsewhere. The indexer
    key is a single head shared by all query heads, so every rank holds it whole. DSA's keys are fp8 with an fp32 scale
    per 128 elements, whatever the latent's dtype (ModelSpec.index_entry_bytes; vLLM's DeepseekV32IndexerCache,
    SGLang's DSATokenToKVPool: 128 + 4 = 132 B a token)."""
    if spec.index_head_dim is None or run.index_shared:
        return 0
    if run.sparse:
        return spec.index_head_dim * SPARSE_INDEX_BYTES
    if run.kind != LayerKind.MLA or (run.window_tokens and not run.compress_topk):
        return 0
    return spec.index_entry_bytes


def compressed_entries(run: LayerRun, seq: int) -> int:
    """DeepSeek-V4: the compressed entries a layer holds for `seq` tokens, one per whole group of compress_ratio
    tokens (the group in progress is the compressor's state); 0 for every other layer."""
    return seq // run.compress_ratio if run.compress_ratio else 0


def index_tokens_held(run: LayerRun, seq: int) -> int:
    """Entries of one layer's indexer cache for `seq` tokens: DeepSeek-V4's compressed entries, else every token."""
    return compressed_entries(run, seq) if run.compress_ratio else tokens_held(run, seq)


def attended_tokens(run: LayerRun, seq: int, topk: int | None = None) -> int:
    """Cached entries one new token's attention reads in one layer: every held token, or the indexer's top-k of
    them (DSA); DeepSeek-V4's window plus its compressed entries (a CSA layer's top-k of those)."""
    if run.latent_window:
        compressed = compressed_entries(run, seq)
        if topk is not None and run.compress_topk:
            compressed = min(compressed, topk)
        return min(seq, run.window) + compressed
    held = tokens_held(run, seq)
    return held if topk is None else min(held, topk)


def tokens_held(run: LayerRun, seq: int) -> int:
    """How many of a sequence's seq tokens one layer keeps (DeepSeek-V4: its window's and compressed entries)."""
    if run.latent_window:
        return min(seq, run.window) + compressed_entries(run, seq)
    if run.kind in (LayerKind.FULL, LayerKind.MLA):
        return seq
    if run.kind.windowed:
        return min(seq, run.window)
    if run.kind == LayerKind.CROSS:
        return seq if run.cross_tokens is None else run.cross_tokens
    return 0


def grows_with_seq(run: LayerRun) -> bool:
    """Whether a layer's holding grows with the sequence (cross-attention over fixed encoder or
    image tokens, and recurrent state, do not)."""
    if run.kind == LayerKind.CROSS:
        return run.cross_tokens is None
    return run.kind != LayerKind.STATELESS


def replicates_kv_heads(spec: ModelSpec, tp: int) -> bool:
    return any(
        run.kind.per_head_kv and not run.kv_shared and (run.kv_heads or spec.kv_heads) < tp
        for run, _ in spec.layer_groups()
    )


def cache_elements(spec: ModelSpec, batch: int, seq: int, tp: int = 1) -> int:
    """Elements held by the whole cache (one rank) for batch sequences of seq tokens."""
    return batch * sum(n * elements_per_token(spec, run, tp) * tokens_held(run, seq) for run, n in spec.layer_groups())


def index_cache_bytes(spec: ModelSpec, batch: int, seq: int) -> int:
    """The indexer's own cache (DeepSeek Sparse Attention) for batch sequences of seq tokens: fp8 keys."""
    groups = spec.layer_groups()
    return batch * sum(n * index_bytes_per_token(spec, run) * index_tokens_held(run, seq) for run, n in groups)


def cache_bytes(spec: ModelSpec, batch: int, seq: int, kv_dtype: str, tp: int = 1) -> int:
    return elements_to_bytes(cache_elements(spec, batch, seq, tp), kv_dtype) + index_cache_bytes(spec, batch, seq)


def token_elements(spec: ModelSpec, tp: int = 1) -> int:
    """Elements one more token adds to all layers (one rank) while every window still grows."""
    return sum(n * rate_elements(spec, run, tp) for run, n in spec.layer_groups() if grows_with_seq(run))


def caps_at_window(run: LayerRun) -> bool:
    """A layer whose held tokens stop at a window: sliding, chunked, or DeepSeek-V4's latent window."""
    return run.kind.windowed or run.latent_window


def rate_elements(spec: ModelSpec, run: LayerRun, tp: int = 1, past_window: bool = False) -> int:
    """Elements one more token adds to one layer while its window grows (past_window: once it is full): a held
    token's, and under DeepSeek-V4's compression a 1 / compress_ratio share of a compressed entry (the spec checks
    that the ratio divides it)."""
    per = elements_per_token(spec, run, tp)
    compressed = per // run.compress_ratio if run.compress_ratio else 0
    return compressed + (0 if past_window and caps_at_window(run) else per)


def bytes_per_token_past_windows(spec: ModelSpec, kv_dtype: str, tp: int = 1) -> int | None:
    """What one more token adds once every window is full; None for a model without windows."""
    groups = spec.layer_groups()
    if not any(caps_at_window(run) for run, _ in groups):
        return None
    elements = sum(n * rate_elements(spec, run, tp, past_window=True) for run, n in groups if grows_with_seq(run))
    return elements_to_bytes(elements, kv_dtype) + index_token_bytes(spec)


def index_rate_bytes(spec: ModelSpec, run: LayerRun) -> int:
    """Index bytes one more token adds to one layer: an index key a token, or a share of a compressed entry's."""
    return index_bytes_per_token(spec, run) // (run.compress_ratio or 1)


def bytes_per_token(spec: ModelSpec, kv_dtype: str, tp: int = 1) -> int:
    """What one more token adds while every window still grows."""
    return elements_to_bytes(token_elements(spec, tp), kv_dtype) + index_token_bytes(spec)


def index_token_bytes(spec: ModelSpec) -> int:
    """What one more token adds to the indexer caches of all layers (DeepSeek Sparse Attention; else 0)."""
    return sum(n * index_rate_bytes(spec, run) for run, n in spec.layer_groups())


def state_bytes(spec: ModelSpec, batch: int, tp: int = 1) -> int:
    """Constant recurrent state (SSM / linear attention) for batch sequences on one of tp ranks (its heads or
    width split over them, as vLLM's state shapes divide them)."""
    return batch * sum(n * math.ceil(run.state_bytes / tp) for run, n in spec.layer_groups())


def _element_bytes(kv_dtype: str) -> str:
    bits = dtype_bits(kv_dtype)
    return f"{float(bits / 8):g} B ({kv_dtype})"


def cache_report(
    spec: ModelSpec, batch: int, seq: int, kv_dtype: str, tp: int = 1, steps: list[str] | None = None
) -> CacheResult:
    """The cache of batch × seq tokens. With `steps`, also the arithmetic, one line per step, from
    the same numbers the result holds."""
    steps = [] if steps is None else steps
    layers = []
    per_token_elements = token_elements(spec, tp)
    all_elements = cache_elements(spec, 1, seq, tp)
    for run, n in spec.layer_groups():
        per_token = elements_per_token(spec, run, tp)
        held = tokens_held(run, seq)
        heads = kv_heads_per_rank(run.kv_heads or spec.kv_heads, tp) if run.kind.per_head_kv else None
        _explain_group(steps, spec, run, n, per_token, held, seq, tp)
        layers.append(
            LayerCache(
                kind=run.kind.value,
                layers=n,
                window_tokens=run.window_tokens,
                kv_heads=heads,
                elements_per_token=per_token,
                tokens_held=held,
                compress_ratio=run.compress_ratio,
                bytes_per_token=elements_to_bytes(n * rate_elements(spec, run, tp), kv_dtype)
                + n * index_rate_bytes(spec, run),
                total_bytes=elements_to_bytes(batch * n * per_token * held, kv_dtype)
                + batch * n * index_bytes_per_token(spec, run) * index_tokens_held(run, seq),
                state_bytes=batch * n * math.ceil(run.state_bytes / tp),
            )
        )
    kv_token_bytes = elements_to_bytes(per_token_elements, kv_dtype)
    index_token = index_token_bytes(spec)
    per_token_bytes = kv_token_bytes + index_token
    total = cache_bytes(spec, batch, seq, kv_dtype, tp)
    steps.append(f"{per_token_elements:,} elements × {_element_bytes(kv_dtype)} = {kv_token_bytes:,} B per token")
    if index_token:
        _explain_indexer(steps, spec, index_token, kv_token_bytes)
    if all_elements == per_token_elements * seq:
        steps.append(f"× {plural(batch, 'sequence')} × {plural(seq, 'token')} = {total:,} B = {fmt_bytes(total)}")
    else:
        steps.append(
            f"sum of elements × tokens held over the layers = {all_elements:,} elements per sequence; "
            f"× {plural(batch, 'sequence')} × {_element_bytes(kv_dtype)} = {total:,} B = {fmt_bytes(total)}"
        )
    return CacheResult(
        model=spec.name,
        batch=batch,
        seq=seq,
        kv_dtype=kv_dtype,
        tp=tp,
        kv_heads_replicated=replicates_kv_heads(spec, tp),
        bytes_per_token=per_token_bytes,
        bytes_per_token_past_windows=bytes_per_token_past_windows(spec, kv_dtype, tp),
        total_bytes=total,
        state_bytes=state_bytes(spec, batch, tp),
        layers=layers,
    )


def _explain_indexer(steps: list[str], spec: ModelSpec, index_token: int, kv_token_bytes: int) -> None:
    layers = sum(n for run, n in spec.layer_groups() if index_bytes_per_token(spec, run))
    d = spec.index_head_dim or 0
    shared = sum(n for run, n in spec.layer_groups() if run.index_shared)
    if shared:
        steps.append(f"{shared} MLA layers reuse an earlier layer's top-k: no indexer of their own")
    ratios = {run.compress_ratio for run, _ in spec.layer_groups() if index_bytes_per_token(spec, run)}
    share = f" / {ratios.pop()} (one key per compressed entry)" if ratios != {None} and len(ratios) == 1 else ""
    owner = "The CSA layers'" if share else "DeepSeek Sparse Attention's"
    steps.append(
        f"{owner} indexer keys: {layers} layers × ({d} fp8 "
        f"+ {spec.index_entry_bytes - d} B of fp32 scales){share} = {index_token:,} B per token, in every KV dtype; "
        f"{kv_token_bytes:,} + {index_token:,} = {kv_token_bytes + index_token:,} B per token"
    )
    what = "compressed entries" if share else "tokens"
    steps.append(
        f"  (each new token's attention reads only the indexer's top {spec.index_topk:,} {what}, "
        "but every one stays cached)"
    )


def _explain_group(
    steps: list[str], spec: ModelSpec, run: LayerRun, n: int, per_token: int, held: int, seq: int, tp: int
) -> None:
    if run.kv_shared:
        steps.append(f"{n} {run.kind.value} layers share an earlier layer's K and V (cross-layer attention): 0")
    elif run.kind.per_head_kv:
        heads = run.kv_heads or spec.kv_heads
        rank_heads = kv_heads_per_rank(heads, tp)
        if tp > 1:
            note = " (replicated: each rank keeps one whole head)" if heads < tp else ""
            steps.append(
                f"tensor parallel {tp}: max(1, {heads} KV heads // {tp}) = {plural(rank_heads, 'KV head')} per rank{note}"
            )
        d, v = spec.run_head_dim(run), spec.run_v_dim(run)
        width = f"2 (K and V) × {n} layers × {rank_heads} KV heads × {d} head dim"
        if v != d:
            width = f"{n} layers × {rank_heads} KV heads × ({d} K + {v} V)"
        steps.append(f"{run.kind.value} layers: {width} = {n * per_token:,} elements per token")
        if run.kind == LayerKind.CROSS:
            source = f"{run.cross_tokens:,} encoder/image tokens" if run.cross_tokens is not None else "the sequence"
            steps.append(f"  each cross-attention layer holds {source}, not the text: {held:,} tokens")
        elif run.kind != LayerKind.FULL:
            what = "window" if run.kind == LayerKind.SLIDING else "chunk"
            steps.append(
                f"  each {run.kind.value} layer holds min({seq:,} tokens, {what} {run.window_tokens:,}) = {held:,} tokens"
            )
    elif run.latent_window:
        _explain_compressed(steps, spec, run, n, per_token, held, seq)
    elif run.kind == LayerKind.MLA:
        steps.append(
            f"MLA layers: ({spec.kv_lora_rank} latent + {spec.qk_rope_head_dim} RoPE key) × {n} layers = "
            f"{n * per_token:,} elements per token (the latent is stored whole on every rank)"
        )
    else:
        state = f"; constant state {run.state_bytes:,} B per sequence each" if run.state_bytes else ""
        steps.append(f"{n} layers without attention: no per-token KV{state}")


def _explain_compressed(
    steps: list[str], spec: ModelSpec, run: LayerRun, n: int, per_token: int, held: int, seq: int
) -> None:
    window = run.window_tokens or 0
    entry = f"one {per_token}-element entry ({spec.kv_lora_rank} + {spec.qk_rope_head_dim} RoPE; K = V, one head)"
    r = run.compress_ratio
    if r is None:
        steps.append(
            f"{n} window layers: {entry} for each of the last min({seq:,}, {window}) tokens = {held:,} entries"
        )
        return
    what = f"the indexer's top {spec.index_topk:,} of them" if run.compress_topk else "all of them"
    steps.append(
        f"{n} layers compressing by {r}: {entry} for each of the last min({seq:,}, {window}) tokens, plus one per "
        f"whole group of {r} tokens ({seq:,} // {r} = {seq // r:,}) = {held:,} entries; attention reads the window "
        f"and {what}"
    )
    if run.compress_topk:
        steps.append(
            f"  their indexer keys: {spec.index_entry_bytes} B ({spec.index_head_dim} fp8 + fp32 scales) per "
            f"compressed entry, {seq // r:,} entries"
        )


def with_gpu_share(result: CacheResult, gpu: GpuSpec, steps: list[str] | None = None) -> CacheResult:
    """The cache (and any recurrent state) as a share of one GPU's memory (the CLI's `cache --gpu`)."""
    result.gpu, result.gpu_memory_bytes = gpu.name, gpu.capacity_bytes
    held = result.total_bytes + result.state_bytes
    result.gpu_memory_share = held / gpu.capacity_bytes
    if steps is not None:
        state = f" + {result.state_bytes:,} B of state" if result.state_bytes else ""
        steps.append(
            f"share of one {gpu.name}: {result.total_bytes:,}{state} / {gpu.capacity_bytes:,} B = "
            f"{result.gpu_memory_share:.1%}"
        )
    return result
