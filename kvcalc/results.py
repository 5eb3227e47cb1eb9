"""Pydantic result models: what the core returns and `--format json` prints."""

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
    elements_per_token: int  # per layer
    tokens_held: int  # per sequence
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
    total_bytes: int
    state_bytes: int = 0
    layers: list[LayerCache]
    gpu: str | None = None
    gpu_memory_bytes: int | None = None
    gpu_memory_share: float | None = None
    warnings: list[str] = []  # a context beyond max_position_embeddings, as roofline and generate warn


class RooflineRow(Result):
    batch: int
    seq: int
    weight_bytes: int
    kv_bytes: int
    flops: int
    arithmetic_intensity: float
    bound: str  # "memory" or "compute"
    state_bytes: int = 0  # SSM / linear-attention state read and written (decode) or written (prefill)
    step_seconds: float  # ceiling: a lower bound on time
    tokens_per_s: float  # ceiling: an upper bound on throughput
    memory_seconds: float
    compute_seconds: float
    comm_seconds: float = 0.0  # all-reduces and pipeline sends on the step's critical path
    fits: bool = True  # weights + KV + state + reserve within capacity x gpu_util on every GPU
    estimate_step_seconds: float | None = None  # with --efficiency / --mbu / --mfu
    estimate_tokens_per_s: float | None = None


class RooflineResult(Result):
    model: str
    gpu: str
    dtype: str
    kv_dtype: str
    compute_dtype: str
    peak_flop_per_s: float
    bandwidth_bytes_per_s: float
    ridge_flop_per_byte: float
    tp: int = 1
    pp: int = 1
    interconnect: str | None = None
    gpu_util: float = 0.9
    reserve_bytes: int = 0
    mbu: float | None = None
    mfu: float | None = None
    warnings: list[str] = []
    rows: list[RooflineRow]  # weight_bytes, kv_bytes and flops per GPU; tokens_per_s for the deployment


class CompareRow(Result):
    name: str
    kv_heads: int | None
    kv_dtype: str
    bytes_per_token: int
    total_bytes: int
    ratio: float  # total_bytes / first row's total_bytes


class CompareResult(Result):
    model: str | None  # the base model of the variants; None when only models are compared
    batch: int
    seq: int
    rows: list[CompareRow]


class PerGpu(Result):
    weight_bytes: int
    kv_bytes: int  # the requested batch x seq, paged, on one rank
    state_bytes: int
    reserve_bytes: int
    budget_bytes: int  # capacity x gpu_util
    capacity_bytes: int


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


class SloResult(Result):
    tpot_ms: float | None = None
    ttft_ms: float | None = None
    batch: int
    tpot_s: float
    ttft_s: float | None = None
    tokens_per_s: float
    basis: str  # "ceiling" or "estimate"
    met: bool = True  # False: no batch that fits meets the goals; tpot_s / ttft_s are then batch 1's


class FitResult(Result):
    model: str
    gpu: str
    tp: int
    pp: int = 1
    seq: int
    batch: int
    dtype: str
    kv_dtype: str
    gpu_util: float
    block_size: int
    kv_heads_per_rank: int | None
    kv_heads_replicated: bool
    fits: bool
    max_batch: int
    max_seq: int | None  # None: windowed layers only, the cache stops growing
    kv_capacity_tokens: int
    max_concurrency: float
    per_gpu: PerGpu
    vllm: VllmFigures | None = None
    slo: SloResult | None = None
    warnings: list[str] = []
    ok: bool = True  # fits and meets the latency goals given; False makes `kvcalc fit` exit 3
    verdict: str = ""


class GenerateResult(Result):
    model: str
    gpu: str
    batch: int
    prompt: int
    new: int
    tp: int = 1
    pp: int = 1
    fits: bool = True  # weights + KV of prompt + new tokens + state + reserve within each GPU's budget
    comm_seconds_per_step: float = 0.0
    ttft_s: float
    tpot_s: float  # mean
    tpot_first_s: float
    tpot_last_s: float
    total_s: float
    tokens_per_s: float
    basis: str  # "ceiling" or "estimate (mbu, mfu)"
    mbu: float
    mfu: float
    flops_cached: int
    flops_uncached: int
    concat_positions_copied: int
    prealloc_positions_written: int
    concat_bytes_copied: int
    prealloc_bytes_written: int
    memory_note: str = ""
    warnings: list[str] = []
