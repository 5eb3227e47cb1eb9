"""vLLM's own KV-cache start-up figures, following the accounting of vLLM 0.19 (V1 engine).

vLLM logs "GPU KV cache size: N tokens" and "Maximum concurrency for S tokens per request: X x"
(vllm/v1/core/kv_cache_utils.py). It splits layers into KV-cache groups by attention type, each
block-sized page shared by `group_size` layers, then:

    num_blocks      = available_bytes // (page_bytes_per_layer x group_size)
    tokens          = num_blocks // number_of_groups x block_size
    blocks/request  = sum over groups: full ceil(S / block); sliding ceil(min(W - 1 + M, S) / block) + 1;
                      chunked ceil(min(C + M, S) / block); SSM / linear-attention (hybrids) 1 block
    concurrency     = num_blocks / blocks_per_request

with M = max_num_batched_tokens. A uniform model is one group of all its layers. Attention types whose
pages differ (Gemma 4) are unified first: a smaller page's block grows r-fold until it is the largest page,
and its blocks per request are counted with that block (unify_kv_cache_spec_page_size).
"""

import math

from kvcalc.cost.kvcache import elements_per_token, index_bytes_per_token, kv_heads_per_rank
from kvcalc.engines.vllm.startup import VllmStartup
from kvcalc.errors import UsageError
from kvcalc.model.spec import LayerKind, LayerRun, ModelSpec
from kvcalc.results import Result
from kvcalc.units import elements_to_bytes

VLLM_VERSION = "0.19"


# NOTE: this command's result models live here, beside the function that returns them, so that
# another command does not define them at start-up; and no `from __future__ import annotations`
# in this module: Pydantic would compile every field's annotation string at import.
class VllmFigures(Result):
    version: str
    available_kv_bytes: int
    block_size: int
    page_bytes_per_layer: int
    group_size: int  # layers sharing one block-sized tensor slot
    kv_cache_groups: int
    num_blocks: int
    kv_cache_tokens: int
    blocks_per_request: int
    max_concurrency: float
    log_lines: list[str]
    # Predicted terms (absent when --kv-memory gives the engine's own figure).
    gpu_total_bytes: int | None = None
    requested_bytes: int | None = None
    weights_bytes: int | None = None
    profile_peak_bytes: int | None = None
    non_torch_bytes: int | None = None
    weight_format: str | None = None
    activation_dtype: str | None = None
    not_sized: list[str] = []
    # check_enough_kv_cache_memory at start-up (engines/vllm/startup.py); None when not checked.
    startup: VllmStartup | None = None


def _group_size(counts: list[int]) -> int:
    # NOTE: vLLM uses the smallest group ("the 1 in an n:1 pattern") unless the largest is
    # within 1.5x of it, then the largest, to avoid many padding layers (kv_cache_utils.py
    # _get_kv_cache_groups_uniform_page_size; 1.25 before the gpt-oss + EAGLE change, 1.5 in 0.19).
    smallest, largest = min(counts), max(counts)
    return largest if largest < smallest * 1.5 else smallest


def _stage_spec(spec: ModelSpec, layers: range) -> ModelSpec:
    """The layers one pipeline stage holds, as a model of its own (for its KV pages)."""
    expanded = spec.expanded_layers()
    pattern = [run.model_copy(update={"count": 1}) for run in (expanded[i] for i in layers)]
    return spec.with_changes(
        num_layers=len(layers),
        layer_pattern=[r.model_dump() for r in pattern] if spec.layer_pattern else [],
        dense_layers=min(spec.dense_layers, len(layers)),
    )


DSA_BLOCK_TOKENS = 64


def vllm_figures(
    spec: ModelSpec,
    available_bytes: int,
    *,
    kv_dtype: str,
    tp: int,
    seq: int,
    block_size: int = 16,
    max_num_batched_tokens: int = 8192,
    stages: list[tuple[range, int]] | None = None,
) -> VllmFigures:
    """vLLM's three lines. With pipeline stages ((layers, available bytes) each), every stage sizes
    its own blocks and the engine keeps the smallest count (kv_cache_utils.get_kv_cache_configs);
    the logged memory is rank 0's. A DeepSeek Sparse Attention model's blocks are 64 tokens (its
    sparse MLA backends accept multiples of 64 only)."""
    if spec.is_sparse:
        block_size = max(block_size, DSA_BLOCK_TOKENS)
    if stages and len(stages) > 1:
        per = [
            _one(_stage_spec(spec, layers), avail, kv_dtype, tp, seq, block_size, max_num_batched_tokens)
            for layers, avail in stages
        ]
        low = min(per, key=lambda f: f.num_blocks)
        tokens = low.num_blocks // low.kv_cache_groups * low.block_size
        concurrency = low.num_blocks / per[0].blocks_per_request
        return per[0].model_copy(
            update={
                "num_blocks": low.num_blocks,
                "kv_cache_tokens": tokens,
                "max_concurrency": concurrency,
                "log_lines": _lines(per[0].available_kv_bytes, tokens, seq, concurrency),
            }
        )
    return _one(spec, available_bytes, kv_dtype, tp, seq, block_size, max_num_batched_tokens)


# Models with MLA's low-rank K/V projections that vLLM 0.19 runs as plain multi-head attention: minicpm3.py
# builds its Attention with num_kv_heads = the heads, head_size qk_nope + qk_rope, and pads V to that width
# (no latent cache; SGLang's MiniCPM3AttentionMLA does cache the latent).
MLA_AS_MHA = ("MiniCPM3ForCausalLM",)


def _elements(spec: ModelSpec, run: LayerRun, tp: int) -> int:
    """One token's cache in one layer on one rank, as vLLM pages it: values narrower than keys are padded to the
    key width (mimo_v2_flash.py builds its Attention with head_size = head_dim and pads V to it)."""
    if run.kind == LayerKind.MLA and spec.architecture in MLA_AS_MHA:
        return 2 * kv_heads_per_rank(spec.num_heads, tp) * spec.mla_key_dim
    if run.kind.per_head_kv and spec.run_v_dim(run) < spec.run_head_dim(run):
        return 2 * kv_heads_per_rank(run.kv_heads or spec.kv_heads, tp) * spec.run_head_dim(run)
    return elements_per_token(spec, run, tp)


def _attention_free(spec: ModelSpec, available_bytes: int, layers: int, state: int, seq: int) -> VllmFigures:
    """A model without attention (Mamba, Mamba-2). vLLM turns prefix caching off for it
    (ModelConfig.is_prefix_caching_supported), so MambaModelConfig makes its block max_model_len tokens:
    every layer's MambaSpec is one group (one page: a layer's state on this rank) and a request holds one
    block, whatever its length."""
    if not layers:
        raise UsageError(f"--engine vllm: {spec.name} caches nothing (no attention and no recurrent state)")
    num_blocks = max(available_bytes, 0) // (state * layers)
    return VllmFigures(
        version=VLLM_VERSION,
        available_kv_bytes=available_bytes,
        block_size=seq,
        page_bytes_per_layer=state,
        group_size=layers,
        kv_cache_groups=1,
        num_blocks=num_blocks,
        kv_cache_tokens=num_blocks * seq,
        blocks_per_request=1,
        max_concurrency=float(num_blocks),
        log_lines=_lines(available_bytes, num_blocks * seq, seq, float(num_blocks)),
    )


def _lines(available_bytes: int, tokens: int, seq: int, concurrency: float) -> list[str]:
    return [
        f"Available KV cache memory: {available_bytes / 2**30:.2f} GiB",
        f"GPU KV cache size: {tokens:,} tokens",
        f"Maximum concurrency for {seq:,} tokens per request: {concurrency:.2f}x",
    ]


def _one(
    spec: ModelSpec,
    available_bytes: int,
    kv_dtype: str,
    tp: int,
    seq: int,
    block_size: int,
    max_num_batched_tokens: int,
) -> VllmFigures:
    types: dict[tuple[LayerKind, int | None], int] = {}
    type_bytes: dict[tuple[LayerKind, int | None], set[int]] = {}
    per_token: set[int] = set()
    all_layers_bytes = 0  # one token over every attention layer
    mamba_layers, mamba_state = 0, 0
    for run, n in spec.layer_groups():
        # NOTE: a layer reading another's K and V (kv_sharing_target_layer_name: Hunyuan's CLA, Gemma 3n / 4's
        # last layers) has no KV cache spec of its own (get_kv_cache_spec skips it).
        if run.kind in (LayerKind.CROSS,) or run.kv_shared:
            continue
        if run.state_bytes:
            # SSM / linear-attention state of one layer on one rank (heads split over tp); Falcon-H1's layers
            # register an Attention and a MambaMixer2 each: a KV spec apiece
            mamba_layers += n
            mamba_state = max(mamba_state, math.ceil(run.state_bytes / tp))
        if run.kind == LayerKind.STATELESS:
            continue
        # DeepSeek Sparse Attention: each layer's indexer cache (DeepseekV32IndexerCache, 132 B a token)
        # joins the MLA layers' group (UniformTypeKVCacheSpecs: one page is the sum of both).
        layer_bytes = elements_to_bytes(_elements(spec, run, tp), kv_dtype) + index_bytes_per_token(spec, run)
        per_token.add(layer_bytes)
        all_layers_bytes += n * layer_bytes
        key = (run.kind, run.window_tokens)
        types[key] = types.get(key, 0) + n
        type_bytes.setdefault(key, set()).add(layer_bytes)
    if not per_token:
        return _attention_free(spec, available_bytes, mamba_layers, mamba_state, seq)
    # NOTE: layers of one attention type whose pages differ (DSA layers with and without their own indexer,
    # GLM-5.2) form one UniformTypeKVCacheSpecs group: a block is every layer's page, summed.
    uniform_type = len(per_token) > 1 and len(types) == 1 and not mamba_layers
    token_bytes = max(per_token)
    # NOTE: attention types whose pages differ (Gemma 4: sliding 8 heads x 256, full 2 heads x 512):
    # unify_kv_cache_spec_page_size grows the smaller pages' block size until every page is the largest.
    ratio = {key: 1 for key in types}
    if len(per_token) > 1 and not uniform_type:
        if mamba_layers or any(len(b) > 1 for b in type_bytes.values()):
            raise UsageError(
                f"--engine vllm: {spec.name}'s layers have different page sizes beside SSM layers or within "
                "one attention type among others; how vLLM groups them is not modelled",
                hint="drop --engine vllm for kvcalc's own estimate",
            )
        for key, (b,) in type_bytes.items():
            if token_bytes % b:
                raise UsageError(
                    f"--engine vllm: vLLM would refuse {spec.name}: a {key[0].value} layer's page "
                    f"({b:,} B a token) does not divide the largest ({token_bytes:,} B a token) "
                    "(NotImplementedError in unify_kv_cache_spec_page_size)",
                    hint="drop --engine vllm for kvcalc's own estimate",
                )
            ratio[key] = token_bytes // b
    if mamba_layers:
        # NOTE: hybrid models (vllm/model_executor/models/config.py HybridAttentionMambaModelConfig):
        # the attention block grows, in steps of 16 tokens, until one layer's page holds a mamba
        # layer's state; the state's page is padded to the same size; a request needs one block
        # per mamba group (MambaSpec without prefix caching).
        needed = 16 * math.ceil(mamba_state / (16 * token_bytes))
        block_size = max(block_size, needed)
        types[(LayerKind.STATELESS, None)] = mamba_layers
    page = block_size * token_bytes
    group_size = _group_size(list(types.values()))
    groups = sum(math.ceil(n / group_size) for n in types.values())
    block_bytes = block_size * all_layers_bytes if uniform_type else page * group_size
    num_blocks = max(available_bytes, 0) // block_bytes
    tokens = num_blocks // groups * block_size
    per_request = 0
    for (kind, window), n in types.items():
        bs = block_size * ratio.get((kind, window), 1)  # a unified smaller page holds more tokens
        if kind == LayerKind.SLIDING:
            # SlidingWindowSpec.max_memory_usage_bytes: +1 as the window may start mid-block
            need = math.ceil(min(window - 1 + max_num_batched_tokens, seq) / bs) + 1
        elif kind == LayerKind.STATELESS:
            need = 1
        elif kind == LayerKind.CHUNKED:
            # ChunkedLocalAttentionSpec.max_memory_usage_bytes: one chunk plus a scheduled batch
            need = math.ceil(min(window + max_num_batched_tokens, seq) / bs)
        else:
            need = math.ceil(seq / bs)
        per_request += need * math.ceil(n / group_size)
    concurrency = num_blocks / per_request
    return VllmFigures(
        version=VLLM_VERSION,
        available_kv_bytes=available_bytes,
        block_size=block_size,
        page_bytes_per_layer=page,
        group_size=group_size,
        kv_cache_groups=groups,
        num_blocks=num_blocks,
        kv_cache_tokens=tokens,
        blocks_per_request=per_request,
        max_concurrency=concurrency,
        log_lines=_lines(available_bytes, tokens, seq, concurrency),
    )
