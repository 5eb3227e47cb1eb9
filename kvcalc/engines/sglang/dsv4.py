"""SGLang 0.5.23's DeepSeek-V4 pools on one rank, as it sizes them at start-up (model_executor/pool_configurator.py
DSV4PoolConfigurator.calculate_pool_sizes; mem_cache/deepseek_v4_memory_pool.py DeepSeekV4TokenToKVPool). Pure.

At default flags on CUDA (--kv-cache-dtype auto is fp8_e4m3, the "v4" layout, float32 compressor states, no
speculative decoding): every layer keeps a sliding-window cache, the CSA (ratio 4) layers a compressed cache, index
keys and two compressor states, the HCA (ratio 128) layers a compressed cache and a request-scoped compressor state.
An entry row is 448 B of fp8 NoPE, 128 B of bf16 RoPE and 8 B of scales: 584 B, each page padded to a multiple of
576 B; the configurator prices a pool at its padded page's bytes over the page's slots. The full pool's tokens
come from

    rest - fixed = full x (0.1 x bytes_per_swa_token + n4 x (row4 / 4 + index / 4) + n128 x row128 / 128)

with the window pool at 0.1 of the full one (the V4 override's swa_full_tokens_ratio) and the HCA states a fixed
carve-out for max_running_requests + 1 requests. Every cache has one KV head: each attention-TP rank holds all of it.
"""

import math
from typing import NamedTuple

from kvcalc.errors import UsageError
from kvcalc.model.spec import LayerRun, ModelSpec

RELEASE = (0, 5, 23)  # the DSV4PoolConfigurator read here; it changed in every release from 0.5.12 (its first)
PAGE_TOKENS = 256  # model_overrides/deepseek_v4.py: page_size 256 (the window pool asserts it)
MAX_RUNNING = 256  # deepseek_v4_hook.py: max_running_requests when unset, divided over the DP-attention ranks
SWA_RATIO = 0.1  # model_overrides/deepseek_v4.py swa_full_tokens_ratio (ratio mode)
ROW_BYTES, ROW_ALIGN = 448 + 128 + 8, 576  # the fp8 "v4" layout's row, and the page's padding unit
C4_RING, C128_RING = 8, 128  # compressor-state ring slots a page / a request (deepseek_v4_memory_pool.py)
STATE_ELEMENT = 4  # SGLANG_DSV4_COMPRESS_STATE_DTYPE float32


def page_bytes(slots: int) -> int:
    """One page of `slots` fp8 rows, padded to a multiple of 576 B (DeepSeekV4SingleKVPool.create_buffer)."""
    return -(-slots * ROW_BYTES // ROW_ALIGN) * ROW_ALIGN


class Dsv4Pools(NamedTuple):
    full_tokens: int  # max_total_num_tokens
    swa_tokens: int
    bytes_per_full_token: float  # the configurator's coefficient (a float, as SGLang computes it)
    fixed_bytes: int  # the HCA layers' request-scoped compressor states, carved out first
    allocated_bytes: int  # what the pools allocate, their one extra logical page each included


def _counts(spec: ModelSpec, layers: range) -> tuple[int, int, int]:
    """(layers, CSA layers, HCA layers) of a stage."""
    expanded: list[LayerRun] = spec.expanded_layers()
    runs = [expanded[i] for i in layers]
    return len(runs), sum(r.compress_ratio == 4 for r in runs), sum(r.compress_ratio == 128 for r in runs)


def _state_rows(size: int, ring: int, ratio: int) -> int:
    """A compressor state pool's rows: size + ring + 1, padded to a multiple of the ratio (compress_state.py)."""
    return -(-(size + ring + 1) // ratio) * ratio


def pools(spec: ModelSpec, layers: range, rest: float, max_running: int) -> Dsv4Pools:
    """The pools of one rank holding `layers`, from `rest` bytes (available after the weights, less the fraction's
    reserve) and its max_running_requests."""
    n, n4, n128 = _counts(spec, layers)
    index = spec.index_entry_bytes  # 128 fp8 + a 4 B scale: the configurator takes it on CUDA
    d, k = spec.head_dim_effective, spec.index_head_dim or 0
    c4_state = 2 * 2 * d * STATE_ELEMENT + 2 * 2 * k * STATE_ELEMENT  # attention's and the indexer's, overlapped
    row_swa, row4, row128 = page_bytes(PAGE_TOKENS) / PAGE_TOKENS, page_bytes(64) / 64, page_bytes(2) / 2
    per_swa = row_swa * n + C4_RING / PAGE_TOKENS * c4_state * n4
    per_full = SWA_RATIO * per_swa + n4 * (row4 / 4 + index / 4) + n128 * (row128 / 128)
    c128_rows = _state_rows((max_running + 1) * C128_RING, C128_RING, 128)
    fixed = c128_rows * 2 * d * STATE_ELEMENT * n128
    full = int(max(rest - fixed, 0) / per_full) // PAGE_TOKENS * PAGE_TOKENS
    swa = int(full * SWA_RATIO) // PAGE_TOKENS * PAGE_TOKENS
    c4, c128 = full // 4, full // 128
    c4_rows = _state_rows(swa // PAGE_TOKENS * C4_RING, C4_RING, 4)
    allocated = (
        math.ceil((swa + PAGE_TOKENS) / PAGE_TOKENS) * page_bytes(PAGE_TOKENS) * n
        + math.ceil((c4 + PAGE_TOKENS) / 64) * page_bytes(64) * n4
        + math.ceil((c128 * 32 + PAGE_TOKENS) / 64) * 64 * index * n4  # the indexer pool: c128 x 32 slots, unpadded
        + math.ceil((c128 + PAGE_TOKENS) / 2) * page_bytes(2) * n128
        + c4_rows * c4_state * n4
        + fixed
    )
    return Dsv4Pools(full, swa, per_full, fixed, allocated)


def stage(
    spec: ModelSpec, layers: range, rest: float, max_running: int, first: Dsv4Pools | None
) -> tuple[int, int, Dsv4Pools]:
    """(tokens, bytes a token as the configurator prices it, rounded up, the first stage's pools) of one stage."""
    sized = pools(spec, layers, rest, max_running)
    return sized.full_tokens, math.ceil(sized.bytes_per_full_token), first or sized


def check(release: tuple[int, int, int], kv_dtype: str | None, family: str) -> None:
    """Refuse what is not read: another release's configurator, another cache dtype's layout, a GPU without its
    kernels (FlashMLA's V4 backend: Hopper and Blackwell) or with pools of their own (ROCm's unified cache)."""
    if family not in ("hopper", "blackwell"):
        why = (
            "SGLang 0.5.23's DeepSeek-V4 pools on ROCm (its unified cache) are not modelled"
            if family.startswith("cdna")
            else f"SGLang 0.5.23 runs DeepSeek-V4 with FlashMLA's kernels on Hopper and Blackwell GPUs, not {family}"
        )
        raise UsageError(f"--engine sglang: {why}", hint="a Hopper or Blackwell GPU, or kvcalc's own estimate")
    if release != RELEASE:
        text = ".".join(map(str, release))
        raise UsageError(
            f"--engine sglang: SGLang {text}'s DeepSeek-V4 pools are not modelled (kvcalc reads 0.5.23's "
            "DSV4PoolConfigurator, which changed in every release from 0.5.12)",
            hint="--engine-version 0.5.23, or kvcalc's own estimate without --engine",
        )
    if kv_dtype not in (None, "fp8"):
        raise UsageError(
            f"--engine sglang: DeepSeek-V4's {kv_dtype} cache layout under SGLang is not modelled (auto is fp8_e4m3, "
            "its 584-byte rows)",
            hint="leave --kv-dtype out, or pass fp8",
        )


def weights(spec: ModelSpec, tp: int, stage: int, pp: int, dtype: str | None, dp_attention: bool) -> int:
    """One rank's weights: kvcalc's shard in the checkpoint's formats (fp8 blocks, MXFP4 experts). SGLang's own V4
    loading is not read: its indexer's wq_b and weights_proj replicated in bf16 (kvcalc splits them, in fp8), its
    compressors' wkv_gate in bf16 where the checkpoint keeps them so, fp32 norms, hyper-connections and sinks, its MoE
    runner's padding. For V4-Flash at tp 8 that is up to about 0.6 GiB a rank more: under 1% of its pool's tokens."""
    from kvcalc.cost.shard import rank_weight_bytes_resident

    return rank_weight_bytes_resident(spec, tp, stage, pp, dtype, dp_attention)
