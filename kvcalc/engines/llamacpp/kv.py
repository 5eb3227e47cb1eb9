"""llama.cpp's KV cache (and recurrent state) buffer, by build era: cells, streams, types, layers.

Per layer llama_kv_cache allocates K [n_embd_k_gqa, kv_size, n_stream] and V [n_embd_v_gqa,
kv_size, n_stream] of the cache types (src/llama-kv-cache.cpp), so bytes = n_stream x kv_size x
(row_size(type_k, n_embd_k_gqa) + row_size(type_v, n_embd_v_gqa)). iSWA models get two caches,
one for the full-attention layers and one window-sized for the sliding ones
(src/llama-kv-cache-iswa.cpp); recurrent layers hold f32 state per sequence
(src/llama-memory-recurrent.cpp, mem_size = max(1, n_seq_max)).
"""

from __future__ import annotations

from pydantic import Field

from kvcalc.engines.llamacpp.eras import Era
from kvcalc.errors import UsageError
from kvcalc.model.gguf.types import KV_CACHE_TYPES, is_quantized, row_bytes
from kvcalc.model.spec import LayerKind, LayerRun, ModelSpec
from kvcalc.results import Result

FA_REFUSAL = "quantized V cache was requested, but this requires Flash Attention"  # src/llama-context.cpp

# kvcalc's --kv-dtype names as llama.cpp's -ctk / -ctv: its float types, and int8 / int4 as its q8_0 / q4_0 blocks
# (34 and 18 bytes a block of 32, scales included). fp8 is none of them: llama.cpp has no fp8 cache.
KV_NAMES = {
    "fp16": "f16", "half": "f16", "float16": "f16", "bf16": "bf16", "bfloat16": "bf16", "fp32": "f32",
    "float32": "f32", "int8": "q8_0", "int4": "q4_0",
}  # fmt: skip


def cache_type(kv_dtype: str | None) -> str | None:
    """llama.cpp's -ctk / -ctv for a --kv-dtype: one of its own names (common/arg.cpp kv_cache_types) or kvcalc's
    (KV_NAMES); f16, its default, where none is given. None where llama.cpp has no such cache type (fp8)."""
    text = (kv_dtype or "f16").strip().lower()
    name = KV_NAMES.get(text, text)
    return name if name in KV_CACHE_TYPES else None


class KvPart(Result):
    cache: str  # "non-SWA" | "SWA" | "recurrent" | "indexer" (DSA's keys); DeepSeek-V4: "CSA", "HCA", "CSA indexer", "compressor state"
    layers: int
    cells: int  # kv_size: cells per stream, as the `( N cells, L layers, a/b seqs)` log line prints
    streams: int
    k_type: str
    v_type: str | None  # None: a K-only (V-less) MLA cache, or recurrent state
    k_bytes: int
    v_bytes: int
    layer_ids: list[int] = Field(exclude=True)  # which layers (their device follows --ngl)

    @property
    def bytes(self) -> int:
        return self.k_bytes + self.v_bytes


def pad(n: int, to: int) -> int:
    return -(-n // to) * to


def context_cells(n_ctx: int, parallel: int, unified: bool, flash_attn: bool, era: Era) -> tuple[int, int]:
    """(kv_size per stream, streams) of the full-attention cache for -c n_ctx and -np parallel."""
    if era.pad_256:
        # src/llama-context.cpp: n_ctx = PAD(n_ctx, 256); n_ctx_seq = PAD(n_ctx / n_seq_max, 256)
        n_ctx = pad(n_ctx, 256)
        if unified or parallel == 1:
            return n_ctx, 1
        return pad(n_ctx // parallel, 256), parallel
    step = 256 if flash_attn else 32  # llama_kv_cache::get_padding: FA kernels need 256
    if not era.streams or unified or parallel == 1:
        return pad(n_ctx, step), 1
    return pad(n_ctx // parallel, step), parallel


def swa_cells(
    size_base: int, window: int, parallel: int, unified: bool, ubatch: int, swa_full: bool, flash_attn: bool, era: Era
) -> int:
    if swa_full or era.iswa == "none":
        return size_base
    want = window * (parallel if unified or not era.streams else 1) + ubatch
    if era.iswa == "min_pad":
        return min(size_base, pad(want, 256 if flash_attn else 32))
    return pad(min(size_base, want), 256)  # "the SWA cache is always padded to 256" (issue 17037)


# MLA's low-rank projections run as plain multi-head attention in every build: models/minicpm3.cpp decompresses
# each head's K (nope + rope) and V and caches those (build_attn with k_states, v_states), never the latent.
MLA_AS_MHA = ("MiniCPM3ForCausalLM",)


def _widths(spec: ModelSpec, run: LayerRun, era: Era) -> tuple[int, int]:
    """(K, V) elements per token of one layer: n_embd_k_gqa, n_embd_v_gqa (0: no V tensor)."""
    if run.kind == LayerKind.MLA:
        assert spec.kv_lora_rank is not None and spec.qk_rope_head_dim is not None
        latent = spec.kv_lora_rank + spec.qk_rope_head_dim
        if era.mla == "mha" or spec.architecture in MLA_AS_MHA:  # pre PR #12801: every head's K (nope + rope) and V
            k = spec.mla_key_dim
            return spec.num_heads * k, spec.num_heads * (spec.v_head_dim or k - spec.qk_rope_head_dim)
        return latent, 0 if era.mla == "k" else spec.kv_lora_rank
    heads = run.kv_heads or spec.kv_heads
    return heads * spec.run_head_dim(run), heads * spec.run_v_dim(run)


def kv_parts(
    spec: ModelSpec,
    n_ctx: int,
    era: Era,
    *,
    parallel: int = 1,
    unified: bool = False,
    ubatch: int = 512,
    flash_attn: bool = True,
    type_k: str = "f16",
    type_v: str = "f16",
    swa_full: bool = False,
) -> tuple[list[KvPart], str | None]:
    """The caches llama.cpp builds, and its refusal in its own words (None when it starts)."""
    if spec.has_sparse_layers:
        raise UsageError(
            f"{spec.name}: llama.cpp has no architecture with sparse self-attention layers (MiniMax-M3's)",
            hint="kvcalc's own estimate without --engine",
        )
    if spec.compressed_attention:
        return dsv4_parts(spec, n_ctx, era, parallel, unified, ubatch, type_k, type_v, swa_full)
    if spec.is_sparse and not era.dsa:
        raise UsageError(
            f"{spec.name}: llama.cpp builds of the {era.key} era have no DeepSeek Sparse Attention cache "
            "(llama_kv_cache_dsa came with PR #21149, in the 2026-04 era)",
            hint="--engine-version 2026-04, or --engine vllm / sglang",
        )
    # NOTE: a layer whose V is its K (Gemma 4's attention_k_eq_v) still caches V: src/models/gemma4.cpp takes Vcur =
    # Kcur where the file has no attn_v, norms it apart and stores it as any V (n_embd_v_gqa(il) wide).
    refusal = (
        FA_REFUSAL
        if is_quantized(type_v)
        and not flash_attn
        and not (spec.is_mla and era.mla == "k" and spec.architecture not in MLA_AS_MHA)
        else None
    )
    base_cells, streams = context_cells(n_ctx, parallel, unified, flash_attn, era)
    layers = spec.expanded_layers()
    groups: dict[tuple, list[int]] = {}
    for il, run in enumerate(layers):
        if run.state_bytes:
            # NOTE: llama.cpp keeps recurrent state in f32 (llama-memory-recurrent.cpp type_r / type_s), whatever
            # dtype another engine gives it; a Falcon-H1 layer is in both its recurrent and attention caches
            groups.setdefault(("recurrent", 4 * run.state_elements or run.state_bytes), []).append(il)
        if run.kind == LayerKind.STATELESS:
            continue  # its state is placed above; an MLP-only layer (Nemotron-H's '-' and 'E') caches nothing
        elif run.kind == LayerKind.CROSS or run.kv_shared:
            continue
        elif run.kind.windowed and era.iswa != "none":
            groups.setdefault(("SWA", run.window_tokens), []).append(il)
        else:
            groups.setdefault(("non-SWA", None), []).append(il)
    # NOTE: without FA, V is stored transposed and padded to the widest layer (TAG_V_CACHE_VARIABLE).
    v_max = max(
        (_widths(spec, layers[i], era)[1] for key, ids in groups.items() if key[0] != "recurrent" for i in ids),
        default=0,
    )
    parts = []
    for (cache, window), ids in groups.items():
        if cache == "recurrent":
            mem = max(1, parallel)
            parts.append(
                KvPart(
                    cache=cache,
                    layers=len(ids),
                    cells=mem,
                    streams=1,
                    k_type="f32",
                    v_type=None,
                    k_bytes=window * mem * len(ids),
                    v_bytes=0,
                    layer_ids=ids,
                )
            )
            continue
        cells = base_cells
        tk, tv = type_k, type_v
        if cache == "SWA":
            cells = swa_cells(base_cells, window, parallel, unified, ubatch, swa_full, flash_attn, era)
            if era.swa_f16:
                tk, tv = "f16", "f16"
        k = v = 0
        for il in ids:
            wk, wv = _widths(spec, layers[il], era)
            if wv and not flash_attn:
                wv = v_max
            k += streams * cells * row_bytes(tk, wk)
            v += streams * cells * row_bytes(tv, wv) if wv else 0
        has_v = any(_widths(spec, layers[i], era)[1] for i in ids)
        parts.append(
            KvPart(
                cache=cache,
                layers=len(ids),
                cells=cells,
                streams=streams,
                k_type=tk,
                v_type=tv if has_v else None,
                k_bytes=k,
                v_bytes=v,
                layer_ids=ids,
            )
        )
    if spec.is_sparse:
        parts.append(_indexer_part(spec, layers, base_cells, streams, type_k))
    return parts, refusal


def _indexer_part(spec: ModelSpec, layers: list[LayerRun], cells: int, streams: int, type_k: str) -> KvPart:
    """DeepSeek Sparse Attention's indexer keys (llama-kv-cache-dsa.cpp kv_lid): a second llama_kv_cache over the
    same cells whose hparams it rewrites to one key head of indexer.key_length, K only (MLA has no V tensor), in
    -ctk's type, for every trunk layer with an indexer of its own (glm-dsa: is_indexer_full; deepseek32: all)."""
    assert spec.index_head_dim is not None
    ids = [il for il, run in enumerate(layers) if run.kind == LayerKind.MLA and not run.index_shared]
    k = streams * cells * row_bytes(type_k, spec.index_head_dim) * len(ids)
    return KvPart(
        cache="indexer", layers=len(ids), cells=cells, streams=streams, k_type=type_k, v_type=None, k_bytes=k,
        v_bytes=0, layer_ids=ids,
    )  # fmt: skip


# DeepSeek-V4 (src/llama-kv-cache-dsv4.cpp of 0c1e57098, llama-cpp-python 0.3.36): the ratios it hard-codes, and its
# compressor states' rows (f32, a stream each): CSA's kv and score planes of 2 x head_dim over 8 slots, HCA's of
# head_dim over 128, the indexer's of 2 x index_head_dim over 8
DSV4_CSA, DSV4_HCA = 4, 128
DSV4_STATE_SLOTS = {DSV4_CSA: 8, DSV4_HCA: 128}


def dsv4_parts(
    spec: ModelSpec, n_ctx: int, era: Era, parallel: int, unified: bool, ubatch: int, type_k: str, type_v: str,
    swa_full: bool,
) -> tuple[list[KvPart], str | None]:  # fmt: skip
    """llama_kv_cache_dsv4's buffers: a raw cache of every layer over the window's cells (the SWA half of an iSWA
    whose full half has no layer), the CSA and HCA layers' compressed caches and the CSA indexer's keys over
    PAD(ceil(n_ctx_seq / ratio), 256) cells, all K only in -ctk's type, a stream a sequence whatever
    --kv-unified says; and three f32 compressor states per stream. Refused as llama.cpp refuses: K and V types that
    differ; builds of an era without the DSA cache (no deepseek4 either)."""
    if not era.dsa:
        raise UsageError(
            f"{spec.name}: llama.cpp builds of the {era.key} era have no deepseek4 architecture (kvcalc reads "
            "llama-kv-cache-dsv4.cpp as 0c1e57098 builds it, beside the DeepSeek Sparse Attention cache)",
            hint="--engine-version 2026-04",
        )
    refusal = (
        f"model does not support different K ({type_k}) and V ({type_v}) cache types" if type_k != type_v else None
    )
    n_ctx_seq, _ = context_cells(n_ctx, parallel, unified, True, era)
    streams = max(1, parallel)
    layers = spec.expanded_layers()
    window = max((run.window_tokens or 0) for run in layers)
    raw = n_ctx_seq if swa_full else pad(min(n_ctx_seq, window + ubatch), 256)
    raw_type = type_k  # its iSWA is built with -ctk's type (llama-kv-cache-dsv4.cpp kv_raw), f16 or not
    entry, index = spec.latent_rank + spec.rope_dim, spec.index_head_dim or 0
    every = list(range(len(layers)))
    by_ratio = {r: [il for il, run in enumerate(layers) if run.compress_ratio == r] for r in (DSV4_CSA, DSV4_HCA)}

    def part(cache: str, ids: list[int], cells: int, width: int, kind: str) -> KvPart:
        k = streams * cells * row_bytes(kind, width) * len(ids) if width else 0
        return KvPart(
            cache=cache, layers=len(ids), cells=cells, streams=streams, k_type=kind, v_type=None, k_bytes=k, v_bytes=0,
            layer_ids=ids,
        )  # fmt: skip

    def compressed(ratio: int) -> int:
        return pad(max(1, -(-n_ctx_seq // ratio)), 256)

    parts = [
        part("non-SWA", [], n_ctx_seq, 0, type_k),  # logged, no layer: what one sequence may hold
        part("SWA", every, raw, entry, raw_type),
        part("CSA", by_ratio[DSV4_CSA], compressed(DSV4_CSA), entry, type_k),
        part("HCA", by_ratio[DSV4_HCA], compressed(DSV4_HCA), entry, type_k),
        part("CSA indexer", by_ratio[DSV4_CSA], compressed(DSV4_CSA), index, type_k),
    ]
    states = [(DSV4_CSA, 2 * entry), (DSV4_HCA, entry), (DSV4_CSA, 2 * index)]  # (ratio, a row's f32 values)
    for ratio, row in states:
        ids = by_ratio[ratio]
        k = 2 * row * DSV4_STATE_SLOTS[ratio] * 4 * streams * len(ids)
        parts.append(
            KvPart(
                cache="compressor state", layers=len(ids), cells=DSV4_STATE_SLOTS[ratio], streams=streams,
                k_type="f32", v_type=None, k_bytes=k, v_bytes=0, layer_ids=ids,
            )
        )  # fmt: skip
    return [p for p in parts if p.layers or p.cache == "non-SWA"], refusal
