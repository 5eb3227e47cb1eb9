"""What SGLang's prefill CUDA graph keeps out of the default --mem-fraction-static, by release, which
multimodal checkpoints SGLang serves as multimodal at all, and what their runtime cache keeps out of the pool. Pure.

Read in the released wheels 0.5.5 to 0.5.23 (server_args.py _handle_piecewise_cuda_graph and
_handle_gpu_memory_settings to 0.5.18; arg_groups/cuda_graph_hook.py and memory_hook.py reserve_for_graph_mb
from 0.5.19; configs/model_config.py). From 0.5.10 a prompt's forward is captured in CUDA graphs by default
(piecewise; breakable from 0.5.15 on CUDA), and the default fraction reserves for it 8 MiB of non-torch memory per
captured token bucket, or a flat 1.5 GiB with an MLA attention backend, before the 10 GiB floor on large cards.
Before 0.5.10 the graph is opt-in (--enable-piecewise-cuda-graph) and reserves nothing by default. The graph's
auto-disable rules run before the reserve in every release; a rule that runs after it (0.5.10-0.5.12's
FlashInfer TRT-LLM MoE runner, 0.5.18's DeepSeek-V3 with trtllm_mla on SM100) leaves the reserve counted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcalc.model.spec import ModelSpec

Release = tuple[int, int, int]

PREFILL_GRAPH_FROM = (0, 5, 10)  # disable_piecewise_cuda_graph = False: on by default
BREAKABLE_FROM = (0, 5, 15)  # the breakable graph on CUDA: the piecewise path's model rules stop applying

# configs/model_config.py mm_disabled_models: multimodal checkpoints served text-only unless --enable-multimodal
# (is_multimodal False: no VLM fraction, no multimodal cache reserve, no multimodal graph rule), from these releases.
TEXT_ONLY_BY_DEFAULT = {
    "Gemma3ForConditionalGeneration": (0, 4, 6), "Llama4ForConditionalGeneration": (0, 4, 6),
    "Step3VLForConditionalGeneration": (0, 5, 1), "InklingForConditionalGeneration": (0, 5, 16),
}  # fmt: skip

# The piecewise graph's disabled architectures (piecewise_cuda_graph_disabled_model_archs), (first, last) release.
_PIECEWISE_OFF = {
    "DeepseekV32ForCausalLM": ((0, 5, 10), (0, 5, 12)), "GlmMoeDsaForCausalLM": ((0, 5, 10), (0, 5, 12)),
    "Qwen3NextForCausalLM": ((0, 5, 10), (0, 5, 14)), "BailingMoeV2_5ForCausalLM": ((0, 5, 10), (0, 5, 14)),
    "LLaDAModelLM": ((0, 5, 10), (0, 5, 14)), "DeepseekV4ForCausalLM": ((0, 5, 12), (0, 5, 14)),
}  # fmt: skip
# The breakable graph's model rules (disable_breakable_cudagraph_if_incompatible), (first, last) release; None: still on.
_BREAKABLE_OFF = {
    "DeepseekV4ForCausalLM": ((0, 5, 15), None), "NemotronHForCausalLM": ((0, 5, 17), (0, 5, 17)),
    "KimiLinearForCausalLM": ((0, 5, 20), None), "KimiK3ForConditionalGeneration": ((0, 5, 20), None),  # KDA
}  # fmt: skip
# Multimodal architectures that keep a prefill graph (0.5.14: Cohere2Vision alone; none in 0.5.15; from 0.5.16 the
# piecewise and breakable allowlists), from these releases.
_MULTIMODAL_KEEPS = {
    "Cohere2VisionForConditionalGeneration": (0, 5, 14), "KimiK25ForConditionalGeneration": (0, 5, 16),
    "MiniMaxM3SparseForCausalLM": (0, 5, 16), "MiniMaxM3SparseForConditionalGeneration": (0, 5, 16),
    "Qwen3_5ForConditionalGeneration": (0, 5, 16), "Qwen3_5MoeForConditionalGeneration": (0, 5, 16),
    "InternS2MobiusForConditionalGeneration": (0, 5, 18), "MuseGlimmerForConditionalGeneration": (0, 5, 18),
    "KimiK3ForConditionalGeneration": (0, 5, 18), "PaddleOCRVLForConditionalGeneration": (0, 5, 19),
    "Glm5NextForConditionalGeneration": (0, 5, 20), "Qwen4ExpForConditionalGeneration": (0, 5, 22),
    "MuseSparkForConditionalGeneration": (0, 5, 23),
}  # fmt: skip


def prefill_graph_sizes(max_tokens: int) -> list[int]:
    """The prefill CUDA graph's token buckets, the same from 0.5.10 (_generate_piecewise_cuda_graph_tokens) to 0.5.23
    (cuda_graph_hook.generate_prefill_cuda_graph_batch_sizes)."""
    sizes = (
        list(range(4, 33, 4))
        + list(range(48, 257, 16))
        + list(range(288, 513, 32))
        + list(range(576, 1025, 64))
        + list(range(1280, 4097, 256))
        + list(range(4608, max_tokens + 1, 512))
    )
    return [s for s in sizes if s <= max_tokens]


def multimodal(release: Release, architecture: str | None, vision: bool) -> bool:
    """SGLang's ModelConfig.is_multimodal at default flags: a checkpoint with a vision tower, unless SGLang
    serves its architecture text-only by default (Gemma 3, Llama 4, Step3-VL, Inkling)."""
    first = TEXT_ONLY_BY_DEFAULT.get(architecture or "")
    return vision and not (first is not None and release >= first)


def _within(rule: tuple[Release, Release | None] | None, release: Release) -> bool:
    return rule is not None and rule[0] <= release and (rule[1] is None or release <= rule[1])


def prefill_graph_on(
    release: Release, *, architecture: str | None, mla: bool, sparse: bool, pp: int, dp_attention: bool,
    amd: bool, multimodal: bool,
) -> bool:  # fmt: skip
    """Whether the release captures a prompt's forward in CUDA graphs when the default fraction is set,
    for plain serving (no speculative decoding, LoRA, torch.compile, disaggregation or CPU offload)."""
    arch = architecture or ""
    if release < PREFILL_GRAPH_FROM or amd:  # ROCm: disabled by rule to 0.5.21, by default from 0.5.22
        return False
    if multimodal:  # every multimodal model off but those allowed, and all of them in 0.5.15
        first = _MULTIMODAL_KEEPS.get(arch)
        if first is None or release < first or release == BREAKABLE_FROM:
            return False
    if release < BREAKABLE_FROM:  # the piecewise graph's rules (_handle_piecewise_cuda_graph)
        return not (pp > 1 or dp_attention or _within(_PIECEWISE_OFF.get(arch), release))
    if pp > 1 and release >= (0, 5, 19):  # opt-in under pipeline parallelism (cuda_graph_hook)
        return False
    if dp_attention and release < (0, 5, 17):
        return False
    if mla and (release < (0, 5, 17) or (release == (0, 5, 17) and not sparse)):
        return False  # the breakable graph's MLA rule: every MLA model, then those without DSA, gone in 0.5.18
    return not _within(_BREAKABLE_OFF.get(arch), release)


def prefill_graph_reserve_mib(on: bool, *, mla: bool, chunk: int, llama2: bool) -> float:
    """MiB the default fraction keeps out for the prefill graph: 8 per token bucket up to chunked_prefill_size
    (4,096 for a model path naming Llama-2), or 1.5 GiB with an MLA attention backend; 0 when it is off."""
    if not on:
        return 0.0
    if mla:
        return 1.5 * 1024
    return 8.0 * len(prefill_graph_sizes(min(chunk, 4096) if llama2 else chunk))


def reserve_mib(
    release: Release, spec: ModelSpec, *, mla: bool, chunk: int, pp: int, dp_attention: bool, amd: bool,
    multimodal: bool,
) -> float:  # fmt: skip
    """What the default fraction keeps out for `spec`'s prefill graph (prefill_graph_on, prefill_graph_reserve_mib;
    SGLang's Llama-2 cap reads the model path, here the model's name)."""
    on = prefill_graph_on(
        release, architecture=spec.architecture, mla=mla, sparse=spec.is_sparse, pp=pp, dp_attention=dp_attention,
        amd=amd, multimodal=multimodal,
    )  # fmt: skip
    return prefill_graph_reserve_mib(on, mla=mla, chunk=chunk, llama2="llama-2" in spec.name.lower())


MM_RESERVE_MIB, MM_RESERVE_FROM = 100, (0, 5, 18)  # SGLANG_VLM_CACHE_SIZE_MB, kept out of a multimodal model's pool
# From 0.5.20 Qwen3-VL on a Hopper card of 60 GiB or more serves images over cuda_ipc with no embedding cache
# (arg_groups/model_overrides/qwen3_vl.py): the pool keeps out the feature-transport pool instead,
# SGLANG_MM_FEATURE_CACHE_MB's 1 GiB, 3 GiB where --max-running-requests is 400 or more.
_QWEN3_VL = ("Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration")


def multimodal_reserve_mib(
    release: Release, architecture: str | None, *, multimodal: bool, large_hopper: bool, max_running: int | None
) -> int:
    """MiB kv_cache_configurator.mm_runtime_reservation_gb keeps out of the pool (0.5.18 on) at default flags."""
    if not multimodal or release < MM_RESERVE_FROM:
        return 0
    if release >= (0, 5, 20) and large_hopper and architecture in _QWEN3_VL:
        return 3 * 1024 if max_running is not None and max_running >= 400 else 1024
    return MM_RESERVE_MIB
