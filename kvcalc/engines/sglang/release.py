"""What an SGLang release decides before it loads a model: chunked_prefill_size, cuda_graph_max_bs and
the default --mem-fraction-static, its MoE runner's mxfp4 layout, the longest --context-length it accepts,
and the words it refuses to start with.

Pure. Read from python/sglang/srt/server_args.py of each release (0.3.0 to 0.5.5: ServerArgs.__post_init__,
from 0.5.3 _handle_gpu_memory_settings) and arg_groups/memory_hook.py of 0.5.23
(handle_gpu_memory_settings, reserve_for_graph_mb). gpu_mem is `nvidia-smi --query-gpu=memory.total` in
MiB (utils get_nvgpu_memory_capacity). A release between two read ones takes the older one's rule
(../shared/reference/sglang_rules.md names the releases read; 0.4.6.post5, 0.4.7, 0.4.8, 0.4.9.post2,
0.5.2, 0.5.5 and 0.5.23 were checked against their wheels here: the reserved-memory rule starts at 0.4.8,
and 0.4.6/0.4.7 cap large cards at (gpu_mem - 18 GiB) / gpu_mem, not the 13 GiB the notes say). Every wheel
from 0.5.5 to 0.5.23 was read for the prefill CUDA graph's reserve (graphs.py, from 0.5.10) and the 20-35 GiB
tier, (4,096, 48; 160 at tp >= 4) from 0.5.20; nothing else in the default fraction changes between them.
"""

from __future__ import annotations

import math
import re

from kvcalc.engines.kernels import kernel_family, remote_code_only
from kvcalc.errors import UsageError
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import ModelSpec

DEFAULT_RELEASE = "0.5.23"
# The releases whose rule changed, oldest first: the rule of the newest one at or below a release applies.
RULE_RELEASES = ((0, 3, 0), (0, 4, 0), (0, 4, 6), (0, 4, 7), (0, 4, 8), (0, 5, 3), (0, 5, 5), (0, 5, 20), (0, 5, 23))
# Where the pool's other release-made figures change (read in every wheel from 0.5.5 to 0.5.23): max_running_requests
# resolved by _resolve_max_num_reqs (0.5.10) and capped at half the pool with the ValueError refusal (0.5.14), a given
# --max-running-requests capping cuda_graph_max_bs (0.5.22); the multimodal cache's: graphs.MM_RESERVE_FROM.
REQUESTS_RESOLVED_FROM, HALF_POOL_FROM, GRAPH_CAP_FROM = (0, 5, 10), (0, 5, 14), (0, 5, 22)


# Architectures whose model class (srt/models) first ships in a release after 0.5.5, by the wheels
SERVED_FROM = {
    "MiMoV2FlashForCausalLM": (0, 5, 7), "Step3p5ForCausalLM": (0, 5, 9), "Gemma4ForCausalLM": (0, 5, 11),
    "Gemma4ForConditionalGeneration": (0, 5, 11), "BailingMoeV2_5ForCausalLM": (0, 5, 9),
    "BailingMoeV3ForCausalLM": (0, 5, 19), "LagunaForCausalLM": (0, 5, 12), "KimiK3ForConditionalGeneration": (0, 5, 17),
    "DeepseekV4ForCausalLM": (0, 5, 12),
}  # fmt: skip


def release_text(release: tuple[int, int, int]) -> str:
    return ".".join(map(str, release))


def unserved(release: tuple[int, int, int], architecture: str | None) -> tuple[str, str] | None:
    """(why SGLang `release` cannot load `architecture`, the first release that can), or None where it can."""
    since = SERVED_FROM.get(architecture or "")
    if since is None or release >= since:
        return None
    first = release_text(since)
    return f"SGLang {release_text(release)} has no model class for {architecture} (first in {first})", first


# Architectures kvcalc reads that SGLang's model registry (srt/models, 0.5.x) does not serve: MiniMax-01's
# lightning attention (SGLang serves MiniMax-M2 only)
SGLANG_UNSERVED = ("MiniMaxText01ForCausalLM", "MiniMaxM1ForCausalLM", "MiniMaxForCausalLM")
# MiniMax-M3's published config names MiniMaxM3ForCausalLM; SGLang registers it as MiniMaxM3SparseForCausalLM (0.5.16+)
SGLANG_RENAMED = {"MiniMaxM3ForCausalLM": "MiniMaxM3SparseForCausalLM"}


def model_refusal(spec: ModelSpec, release: tuple[int, int, int]) -> tuple[str, str] | None:
    """(why SGLang `release` would not load `spec`, what to do instead), or None where it would."""
    if remote_code_only(spec):  # srt/model_loader/utils.py resolve_transformers_arch
        why = f"{spec.architecture} has no SGlang implementation and the Transformers implementation is not compatible"
        return f"SGLang would refuse {spec.name}: {why} with SGLang.", "kvcalc's own estimate without --engine"
    if spec.architecture in SGLANG_UNSERVED:
        why = f"SGLang has no model class for {spec.architecture} (its srt/models, 0.5.x)"
        return why, "use --engine vllm, or kvcalc's own estimate without --engine"
    if spec.attention_free:
        # NOTE: SGLang's model registry (srt/models, 0.5.x) runs Mamba-2 mixers only inside hybrids
        # (Nemotron-H, Falcon-H1): no class serves Mamba, Falcon-Mamba or Mamba-2 alone, and
        # its pool sizing divides by the full-attention layers.
        why = f"{spec.name} has no attention layers (a pure state-space model); SGLang serves none"
        return f"{why} (no Mamba / Mamba-2 class in its model registry)", (
            "use --engine vllm or llamacpp, or kvcalc's own estimate without --engine"
        )
    if (registered := SGLANG_RENAMED.get(spec.architecture or "")) is not None:
        why = f"SGLang has no model class for {spec.architecture}; it registers this model as {registered}"
        return why, "kvcalc's own estimate without --engine"
    if spec.has_sparse_layers:
        why = "SGLang's MiniMax-M3 pool (MiniMaxSparseKVPool: index keys beside K and V, pages of 128) is not modelled"
        return why, "kvcalc's own estimate without --engine"
    if missing := unserved(release, spec.architecture):
        why, first = missing
        return why, f"pass --engine-version {first} or later"
    return None


def mxfp4_layout(gpu: GpuSpec, release: tuple[int, int, int]) -> str | None:
    """How SGLang `release`'s default MoE runner holds mxfp4 experts on `gpu` (engines/weights.MXFP4_LAYOUTS; read
    in quantization/mxfp4.py and server_args.py's gpt-oss defaults of every wheel from 0.5.5 to 0.5.23):
    flashinfer_mxfp4 on SM100 (the intermediate size padded to 128 from 0.5.17, 256 before); triton_kernel on
    Hopper (swizzled) and below SM90 (strided), the intermediate size to 64 from 0.5.10, 32 before (0.5.18's new
    triton_kernels swizzle and 0.5.19's scale padding taken as 0.5.17's); on SM120 flashinfer_mxfp4 to 0.5.9,
    triton_kernel's strided view in 0.5.10-0.5.13, Marlin in 0.5.14-0.5.16 (vLLM's Marlin layout, the same
    padding) and FlashInfer's CUTLASS SM120 kernel from 0.5.17. None where not sized (ROCm: mxfp4 on gfx95x only)."""
    family = kernel_family(gpu)
    if family == "blackwell":
        return "sglang-flashinfer" if release < (0, 5, 17) else "sglang-flashinfer-128"
    if family == "blackwell-sm120":
        eras = ((0, 5, 10), "sglang-flashinfer-sm120"), ((0, 5, 14), "sglang-strided-64"), ((0, 5, 17), "vllm-marlin")
        return next((name for until, name in eras if release < until), "sglang-cutlass-sm120")
    if family in ("hopper", "ampere", "ada"):
        name = "sglang-triton" if family == "hopper" else "sglang-strided"
        return name if release < (0, 5, 10) else f"{name}-64"
    return None


def parse_release(text: str) -> tuple[int, int, int]:
    """'0.5.2rc2', '0.4.9.post2', 'v0.5.5' -> (major, minor, patch); refuses what SGLang never released."""
    m = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)(?:\.?(?:post|rc|dev)\d*)?", text.strip())
    if not m:
        raise UsageError(f"--engine-version '{text}' is not a release number", hint="e.g. 0.5.5, 0.4.9.post2")
    v = (int(m[1]), int(m[2]), int(m[3]))
    if v < RULE_RELEASES[0]:
        raise UsageError(
            f"SGLang {text} is older than the releases kvcalc models", hint="kvcalc models SGLang 0.3.0 and later"
        )
    return v


def rule_of(release: tuple[int, int, int]) -> tuple[int, int, int]:
    return max(r for r in RULE_RELEASES if r <= release)


def graph_defaults(
    release: tuple[int, int, int], gpu_mem_mib: int, tp: int, max_running: int | None = None
) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) a release picks on this card when neither is given. From 0.5.22 a
    given --max-running-requests caps the default cuda_graph_max_bs (memory_hook.handle_gpu_memory_settings)."""
    chunk, bs = _graph_defaults(release, gpu_mem_mib, tp)
    if max_running is not None and release >= GRAPH_CAP_FROM:
        bs = min(bs, max_running)
    return chunk, bs


def _graph_defaults(release: tuple[int, int, int], gpu_mem_mib: int, tp: int) -> tuple[int, int]:
    g = gpu_mem_mib
    rule = rule_of(release)
    if rule < (0, 4, 8):
        # NOTE: 0.4.6 / 0.4.7 (server_args.py __post_init__): 2048 below 25,000 MiB, 16384 above
        # 180,000 MiB (0.4.7 only), else 8192; releases before 0.4.6 are taken as 0.4.6.
        chunk = 2048 if g < 25_000 else 16384 if (g > 180_000 and rule == (0, 4, 7)) else 8192
        return chunk, 160
    if rule < (0, 5, 3):
        # NOTE: 0.4.8-0.5.2: 2048 below 35 GiB, 8192 below 160 GiB, else 16384; cuda_graph_max_bs only
        # enters the fraction from 0.5.3 on.
        chunk = 2048 if g < 35 * 1024 else 8192 if g < 160 * 1024 else 16384
        return chunk, 160
    small = {(0, 5, 3): (2048, 16), (0, 5, 5): (2048, 24)}.get(rule, (4096, 48))
    if g < 20 * 1024:
        return 2048, 8
    if g < 35 * 1024:
        return small[0], small[1] if tp < 4 else (80 if rule < (0, 5, 20) else 160)
    if g < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if g < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


# From 0.5.7 an MHA model's default attention backend on an SM100 card (B200, GB200, B300) is trtllm_mha, which
# pages the cache in 16, 32 or 64 tokens and turns any other page size into 64 (server_args.py
# _handle_attention_backend_compatibility; arg_groups/overrides.py in 0.5.23, where a model whose K and V heads
# differ in width gets fa4 instead). MLA and DSA models have backends of their own; so do hybrid linear-attention
# models, left at the page asked.
TRTLLM_MHA_FROM = (0, 5, 7)


def page_size(release: tuple[int, int, int], page: int, spec: ModelSpec, gpu: GpuSpec, mla: bool) -> int:
    """The page size the release runs `spec` with on `gpu` when `page` is asked (1 by default)."""
    hybrid = any(run.state_bytes for run, _ in spec.layer_groups())
    kv_differ = spec.v_head_dim is not None and spec.v_head_dim != spec.head_dim_effective and release >= (0, 5, 23)
    if release < TRTLLM_MHA_FROM or kernel_family(gpu) != "blackwell" or mla or hybrid or kv_differ:
        return page
    return page if page in (16, 32, 64) else 64


def check_mem_fraction(value: object) -> float:
    """--mem-fraction-static as SGLang takes it: a number in (0, 1] (a share of the free memory before the weights
    load), else a usage error."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and 0 < value <= 1):
        raise UsageError(f"--mem-fraction-static must be a number in (0, 1], got {value!r}")
    return float(value)


def default_mem_fraction(
    release: tuple[int, int, int],
    gpu_mem_mib: int,
    *,
    tp: int,
    pp: int,
    chunked_prefill_size: int,
    cuda_graph_max_bs: int,
    dp_attention: bool,
    prefill_graph_mib: float = 0.0,
) -> float:
    """--mem-fraction-static when it is not given (plain serving: no speculative decoding, not a VLM).
    `prefill_graph_mib`: what the prefill CUDA graph reserves from 0.5.10 (graphs.prefill_graph_reserve_mib)."""
    g, rule, ps = gpu_mem_mib, rule_of(release), tp * pp
    if rule < (0, 4, 8):
        eight = 0.83 if rule < (0, 4, 0) else 0.81
        f = 0.88
        if rule < (0, 4, 6) or g <= 81920:
            for at_least, value in ((16, 0.79), (8, eight), (4, 0.85), (2, 0.87)):
                if (tp if rule < (0, 4, 6) else ps) >= at_least:
                    f = value
                    break
        if rule < (0, 4, 6):
            return f
        if rule == (0, 4, 7) and g > 180_000:
            return 0.79
        if g > 96 * 1024:
            # NOTE: not rounded: "15 GB + additional 3GB for cuda graph" (0.4.6 / 0.4.7 server_args.py)
            return min(f + 48 * 1024 * (1 - f) / g, (g - 18 * 1024) / g)
        return f
    if rule == (0, 4, 8):
        if g < 35 * 1024:
            reserved = (2.8 + ps / 10) * 1024
        elif g < 90 * 1024:
            reserved = (9.5 + ps / 2) * 1024
        elif g < 160 * 1024:
            reserved = (12 + ps / 2) * 1024
        else:
            reserved = 32 * 1024
        reserved += 4096 if dp_attention else 0
        return round((g - reserved) / g, 3)
    dp = tp if dp_attention else 1
    reserved = 512 + max(chunked_prefill_size, 2048) * 1.5 + cuda_graph_max_bs * 2 + ps / 8 * 1024
    if dp_attention:
        reserved += cuda_graph_max_bs * dp * 3
        if cuda_graph_max_bs > 300:
            reserved += cuda_graph_max_bs * dp * 1.5
    reserved += prefill_graph_mib  # before the floor below, in every release that reserves it
    if g > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((g - reserved) / g, 3)


# A multimodal model's fraction: 0.3 to 0.4.4 take 5% off any --mem-fraction-static (model_runner.py
# "Automatically reduce --mem-fraction-static ... because this is a multimodal model"); 0.4.5 to 0.4.9 nothing;
# from 0.4.10 the default one is scaled by adjust_mem_fraction_for_vlm (server_args.py; arg_groups/memory_hook.py
# in 0.5.23) for the vision tower's size against a ViT-L/14 (24 layers of 1,024).
VLM_FLAT_UNTIL = (0, 4, 5)
VLM_ADJUST_FROM = (0, 4, 10)


def vlm_fraction(release: tuple[int, int, int], fraction: float, default: bool, vision: tuple[int, int]) -> float:
    """--mem-fraction-static as SGLang `release` leaves it for a multimodal model whose vision_config has
    (num_hidden_layers, hidden_size) `vision`."""
    if release < VLM_FLAT_UNTIL:
        return fraction * 0.95
    if release < VLM_ADJUST_FROM or not default:
        return fraction
    layers, width = vision
    complexity = layers * width**2 / (24 * 1024**2)
    return fraction * 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (complexity - 1.0)))


def refusal(release: tuple[int, int, int], fraction: float, available_gib: float, pre_load_gib: float) -> str:
    """SGLang's own words when the weights leave no memory for the pool: from 0.5.14 a ValueError on rest <= 0
    (model_runner_kv_cache_mixin.py, then kv_cache_configurator.py); 0.5.10's MemoryPoolConfig names the fraction
    its own way and 0.5.11-0.5.13's (pool_configurator.py) not at all; before, model_runner.py's RuntimeError."""
    if release >= HALF_POOL_FROM:
        minimum = 1 - available_gib / pre_load_gib
        suggested = math.ceil(minimum * 1000) / 1000
        return (
            f"ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={fraction}. "
            f"Raise --mem-fraction-static above {suggested:.3f} (minimum viable = 1 - available/pre = {minimum:.4f}). "
            "If using speculative decoding, draft weights are now counted."
        )
    if release >= REQUESTS_RESOLVED_FROM:
        value = f" Current value: mem_fraction_static={fraction}" if release < (0, 5, 11) else ""
        return "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static." + value
    # NOTE: model_runner.py init_memory_pool (0.4.x-0.5.9): raised when the profiled token count is <= 0.
    return (
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        f"Current value: self.server_args.mem_fraction_static={fraction}"
    )


# SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN defaults to false from 0.5.1 (0.4.6 - 0.5.0rc2: true, a warning)
CONTEXT_REFUSED_FROM = (0, 5, 1)


def context_refusal(release: tuple[int, int, int], given: int | None, derived: int | None) -> str | None:
    """ModelConfig._derive_context_length's ValueError for a --context-length beyond the config's, or None: the
    model config refuses it before any memory is profiled (the pool figures are those SGLang would have had)."""
    if release < CONTEXT_REFUSED_FROM or not given or not derived or given <= derived:
        return None
    return (
        f"ValueError: Warning: User-specified context_length ({given}) is greater than the derived context_length "
        f"({derived}). This may lead to incorrect model outputs or CUDA errors. Note that the derived context_length "
        "may differ from max_position_embeddings in the model's config. To allow overriding this maximum, set the env "
        "var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
    )


def max_running_requests(
    release: tuple[int, int, int], tokens: int, context_len: int, given: int | None, dp: int
) -> int:
    """The scheduler's max_running_requests (tp_worker.py; _resolve_max_num_reqs from 0.5.10, in
    kv_cache_configurator.py from 0.5.16). 0.5.10-0.5.13 cap a given value at the estimate, not at half the pool;
    from 0.5.14 at half the pool; 0.5.23 keeps at least one a rank."""
    estimated = max(min(int(tokens / context_len * 512), 4096), 2048)
    if release >= REQUESTS_RESOLVED_FROM and given is None:
        return min(estimated, tokens // 2)
    if release >= HALF_POOL_FROM:
        return min(max(1, given // dp) if release >= (0, 5, 23) else given // dp, tokens // 2)
    if release >= REQUESTS_RESOLVED_FROM:
        return min(given // dp, estimated)
    # NOTE: 0.5.5: req_to_token_pool holds max_num_reqs = the user's value or the estimate; the
    # scheduler takes min(tokens // 2 or the user's value // dp, that pool's size).
    pool = given if given is not None else estimated
    return min(tokens // 2 if given is None else given // dp, pool)


def turning_points() -> list[str]:
    """The releases at which kvcalc's reading of SGLang changes (a rule, a model class, the sliding-window split,
    the VLM fraction, the context check), newest first: what `--engine-version` completes to in the shell."""
    from kvcalc.engines.sglang import graphs, swa

    points = {
        *RULE_RELEASES,
        REQUESTS_RESOLVED_FROM,
        HALF_POOL_FROM,
        graphs.MM_RESERVE_FROM,
        GRAPH_CAP_FROM,
        TRTLLM_MHA_FROM,
        graphs.PREFILL_GRAPH_FROM,
        graphs.BREAKABLE_FROM,
        *graphs.TEXT_ONLY_BY_DEFAULT.values(),
        *SERVED_FROM.values(),
        *swa.HYBRID_SWA_FROM.values(),
        swa.SPLIT_FROM,
        *swa.SPLIT_OFF,
    }
    points |= {swa.MEMORY_BASED_FROM, swa.GPT_OSS_SM100_FROM, VLM_FLAT_UNTIL, VLM_ADJUST_FROM, CONTEXT_REFUSED_FROM}
    return [release_text(r) for r in sorted(points, reverse=True)]
