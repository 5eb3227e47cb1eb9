"""vLLM 0.19's start-up refusals: architectures it does not serve, a max_model_len beyond what it derives
from config.json, a KV pool too small for one max-length request, and the max_model_len it defaults to.

vllm/v1/core/kv_cache_utils.py (v0.19.0) check_enough_kv_cache_memory, run by every worker on its
own layers and its own available memory before the pool is built:

    needed = sum over the worker's KV layers of spec.max_memory_usage_bytes(max_model_len)
    full / MLA     cdiv(max_model_len, block) x page
    sliding        (cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block) + 1) x page
    chunked local  cdiv(min(chunk + max_num_batched_tokens, max_model_len), block) x page
    mamba          1 page (no prefix caching)

and when needed > available it raises ValueError with the largest max_model_len that would fit
(estimate_max_model_len: a binary search over 1 .. max_model_len).
"""

import math

from kvcalc.engines.kernels import remote_code_only
from kvcalc.engines.lengths import lengths_of, longest_model_len
from kvcalc.errors import SpecError
from kvcalc.model.spec import LayerKind, ModelSpec
from kvcalc.results import Result

GIB = 2**30
_DOCS = "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
NO_CACHE_MEMORY = "No available memory for the cache blocks"  # vLLM's words for a pool of no blocks


class VllmStartup(Result):
    """Whether vLLM 0.19 would start, and if not why, in its own words."""

    max_model_len: int
    needed_kv_bytes: int  # one max_model_len request's KV on the tightest worker
    available_kv_bytes: int
    estimated_max_model_len: int | None = None  # the largest that would start (None: it starts)
    refusal: str | None = None  # vLLM's ValueError text


def default_max_model_len(spec: ModelSpec) -> int:
    """vLLM's max_model_len when none is given: the model's own maximum as vLLM derives it from config.json
    (model/hf/positions.py: the smallest length key, a RoPE factor, LongRoPE's short table; vllm/config/model.py
    _get_and_verify_max_len), else max_position_embeddings."""
    lengths = lengths_of(spec)
    if lengths and lengths.vllm_default:
        return lengths.vllm_default
    if not spec.max_position_embeddings:
        raise SpecError(
            f"{spec.name} has no max_position_embeddings, so vLLM's default max_model_len is unknown",
            hint="give --seq (vLLM's --max-model-len)",
        )
    return spec.max_position_embeddings


def length_refusal(spec: ModelSpec, max_model_len: int) -> str | None:
    """vLLM's ValueError for a max_model_len beyond what it derives from config.json, or None."""
    limit = longest_model_len(spec)
    if limit is None or max_model_len <= limit:
        return None
    lengths = lengths_of(spec)
    key = (lengths.vllm_key if lengths else None) or "max_position_embeddings"
    # NOTE: with RoPE the derived length is a float by then (times the scaling factor, 1.0 if none)
    rope = spec.checkpoint is None or spec.checkpoint.rotary_dim is not None
    derived = f"{float(limit)}" if rope else f"{limit}"
    given = limit if key == "model_max_length" else None
    return (
        f"User-specified max_model_len ({max_model_len}) is greater than the derived max_model_len ({key}={derived} or "
        f"model_max_length={given} in model's config.json). To allow overriding this maximum, set the env var "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model "
        "uses relative position encoding (RoPE), positions exceeding derived_max_model_len lead to nan. If the model "
        "uses absolute position encoding, positions exceeding derived_max_model_len will cause a CUDA array "
        "out-of-bounds error."
    )


# Architectures kvcalc reads that came after vLLM 0.19's registry (vllm/model_executor/models/registry.py): Ling 3
# (SGLang's bailing_moe_v3.py, from 0.5.19) and Laguna (SGLang's laguna.py, from 0.5.12)
# NOTE: Kimi-K3 too: vLLM 0.19 registers no KimiK3ForConditionalGeneration, and its Kimi Linear MLA asserts
# q_lora_rank is None and has no output gate (kimi_linear.py), so the text model could not be built either
# (and MiniMax-M3 under either of its names: vLLM 0.19 registers MiniMax-Text-01 / M1, M2 and VL-01 only)
VLLM_UNSERVED = frozenset(
    {
        "BailingMoeV3ForCausalLM", "LagunaForCausalLM", "KimiK3ForConditionalGeneration", "MiniMaxM3ForCausalLM",
        "MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration",
        # DeepSeek-V4 (vllm/models/deepseek_v4) came in a later release (docs/deepseek_v4.md reads 0.34's)
        "DeepseekV4ForCausalLM",
    }
)  # fmt: skip


def unsupported_architecture(spec: ModelSpec) -> str | None:
    """vLLM 0.19's refusal of an architecture its V1 engine does not serve, or None.

    vllm/model_executor/models/registry.py: encoder-decoders other than Whisper left with V0
    (_PREVIOUSLY_SUPPORTED_MODELS: Mllama until 0.10.2; _OOT_SUPPORTED_MODELS: BART / mBART moved to
    the bart-plugin); T5 is in neither list nor in the registry, so it is 'not supported'. Decoders whose only code
    is their checkpoint's (REMOTE_CODE_ONLY) are 'not supported' too."""
    if remote_code_only(spec) or spec.architecture in VLLM_UNSERVED:
        # _try_resolve_transformers gives None (no class; the Transformers backend serves no linear attention),
        # so _raise_for_unsupported
        return f"Model architectures ['{spec.architecture}'] are not supported for now."
    if not any(run.kind == LayerKind.CROSS for run, _ in spec.layer_groups()):
        return None
    text = f"{spec.architecture or ''} {spec.name} {spec.description or ''}".lower()
    if "whisper" in text or "voxtral" in text:
        return None
    if "llama 3.2" in text or "llama-3.2" in text or "mllama" in text:
        return (
            "Model architecture MllamaForConditionalGeneration was supported in vLLM until v0.10.2, and is not "
            "supported anymore. Please use an older version of vLLM if you want to use this model architecture."
        )
    for key, arch in (("mbart", "MBartForConditionalGeneration"), ("bart", "BartForConditionalGeneration")):
        if key in text:
            return (
                f"Model architecture {arch} is not supported in-tree anymore. Please install the plugin at "
                "https://github.com/vllm-project/bart-plugin if you want to use this model architecture."
            )
    arch = spec.architecture or ("T5ForConditionalGeneration" if "t5" in text else "an encoder-decoder")
    return f"Model architectures ['{arch}'] are not supported for now."


def _blocks(kind: LayerKind, window: int | None, length: int, block: int, batched: int) -> int:
    if kind == LayerKind.SLIDING:
        return math.ceil(min(window - 1 + batched, length) / block) + 1
    if kind == LayerKind.CHUNKED:
        return math.ceil(min(window + batched, length) / block)
    if kind == LayerKind.STATELESS:
        return 1
    return math.ceil(length / block)


def needed_bytes(spec: ModelSpec, layers: range, length: int, page: int, block: int, batched: int) -> int:
    """max_memory_usage_bytes summed over the KV layers in `layers` (one worker) at max_model_len
    `length`; `page` is one layer's block-sized page (VllmFigures.page_bytes_per_layer)."""
    expanded = spec.expanded_layers()
    total = 0
    for i in layers:
        run = expanded[i]
        if run.kind == LayerKind.CROSS or run.kv_shared:
            continue
        if run.parallel_mixer and run.state_bytes:  # its Mamba-2 mixer's block (Falcon-H1)
            total += _blocks(LayerKind.STATELESS, None, length, block, batched) * page
        if run.kind == LayerKind.STATELESS and not run.state_bytes:
            continue
        total += _blocks(run.kind, run.window_tokens, length, block, batched) * page
    return total


def _gib(n: int) -> str:
    return f"{round(n / GIB, 2)}"  # vLLM's format_gib


def check_start(
    spec: ModelSpec,
    workers: list[tuple[range, int]],
    *,
    max_model_len: int,
    page: int,
    block: int,
    max_num_batched_tokens: int,
) -> VllmStartup:
    """check_enough_kv_cache_memory on each worker ((its layers, its available KV bytes): one per
    pipeline stage); the first that fails refuses, as the engine's start-up does."""
    if why := length_refusal(spec, max_model_len):
        # NOTE: ModelConfig refuses the length before any memory is profiled
        layers, available = workers[0]
        need = needed_bytes(spec, layers, max_model_len, page, block, max_num_batched_tokens)
        return VllmStartup(max_model_len=max_model_len, needed_kv_bytes=need, available_kv_bytes=available, refusal=why)
    tightest = None
    for layers, available in workers:
        need = needed_bytes(spec, layers, max_model_len, page, block, max_num_batched_tokens)
        if available <= 0:
            return VllmStartup(
                max_model_len=max_model_len,
                needed_kv_bytes=need,
                available_kv_bytes=available,
                estimated_max_model_len=0,
                refusal=f"{NO_CACHE_MEMORY}. Try increasing `gpu_memory_utilization` when initializing the engine. {_DOCS}",
            )
        if need > available:
            best = _longest(spec, layers, available, max_model_len, page, block, max_num_batched_tokens)
            estimated = (
                f"Based on the available memory, the estimated maximum model length is {best}. " if best > 0 else ""
            )
            return VllmStartup(
                max_model_len=max_model_len,
                needed_kv_bytes=need,
                available_kv_bytes=available,
                estimated_max_model_len=best,
                refusal=f"To serve at least one request with the models's max seq len ({max_model_len}), "
                f"({_gib(need)} GiB KV cache is needed, which is larger than the available KV cache memory "
                f"({_gib(available)} GiB). {estimated}Try increasing `gpu_memory_utilization` or decreasing "
                f"`max_model_len` when initializing the engine. {_DOCS}",
            )
        if tightest is None or available - need < tightest[1] - tightest[0]:
            tightest = (need, available)
    need, available = tightest or (0, 0)
    return VllmStartup(max_model_len=max_model_len, needed_kv_bytes=need, available_kv_bytes=available)


def largest_model_len(
    spec: ModelSpec, workers: list[tuple[range, int]], *, page: int, block: int, max_num_batched_tokens: int
) -> int:
    """The longest max_model_len the start-up check accepts on every worker, as its own estimate searches
    (0: not one token); memory's answer, before any cap at max_position_embeddings."""
    best = 1 << 24
    for layers, available in workers:
        best = _longest(spec, layers, available, best, page, block, max_num_batched_tokens) if available > 0 else 0
        if not best:
            return 0
    return best


def _longest(spec: ModelSpec, layers: range, available: int, limit: int, page: int, block: int, batched: int) -> int:
    """The longest max_model_len up to `limit` whose needed bytes on the worker holding `layers` fit `available`."""
    return _largest(limit, lambda n: needed_bytes(spec, layers, n, page, block, batched) <= available)


def _largest(limit: int, ok) -> int:  # noqa: ANN001
    """estimate_max_model_len's binary search over 1 .. limit; 0 when 1 does not fit."""
    if not ok(1):
        return 0
    left, right, result = 1, limit, 1
    while left <= right:
        mid = (left + right) // 2
        if ok(mid):
            result, left = mid, mid + 1
        else:
            right = mid - 1
    return result
