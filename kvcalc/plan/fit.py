"""Pure memory-fit arithmetic: per-GPU budget, tensor and pipeline parallelism, paged blocks, largest batch and context."""

import math
from typing import Callable

from kvcalc.cost.kvcache import (
    cache_report,
    elements_per_token,
    index_bytes_per_token,
    kv_heads_per_rank,
    replicates_kv_heads,
    tokens_held,
)
from kvcalc.cost.params import weight_bytes_resident
from kvcalc.cost.step import Deployment, Stage, context_warning, held_kv_bytes, stages
from kvcalc.engines.sglang.pool import SglangPool
from kvcalc.engines.vllm.figures import VllmFigures
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.formats import weights_label
from kvcalc.model.spec import ModelSpec
from kvcalc.plan.serve_search import ConcurrencySearch
from kvcalc.results import Result
from kvcalc.units import elements_to_bytes, fmt_bytes

MAX_SEARCH_SEQ = 1 << 30  # beyond any published context length


# NOTE: this command's result models live here, beside the function that returns them, so that
# another command does not define them at start-up; and no `from __future__ import annotations`
# in this module: Pydantic would compile every field's annotation string at import.
class PerGpu(Result):
    weight_bytes: int
    kv_bytes: int  # the requested batch x seq, paged, on one rank
    state_bytes: int
    reserve_bytes: int
    budget_bytes: int  # capacity x gpu_util
    capacity_bytes: int


class SloResult(Result):
    tpot_ms: float | None = None
    ttft_ms: float | None = None
    batch: int
    tpot_s: float
    ttft_s: float | None = None
    tokens_per_s: float
    basis: str  # "ceiling" or "estimate"
    met: bool = True  # False: no batch that fits meets the goals; tpot_s / ttft_s are then batch 1's
    ceiling_batch: int | None = None  # with the calibrated estimate deciding: the batch the ceiling would allow


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
    max_seq: int | None  # capped at max_position_embeddings; None: windowed layers only and no maximum known
    kv_capacity_tokens: int
    max_concurrency: float
    # What memory alone allows at this batch, above the model's maximum context or not (None: unbounded).
    max_seq_memory: int | None = None
    # Where max_seq is cut at the longest context the engine named takes, not max_position_embeddings: whose it is
    max_seq_limit: str | None = None
    # Whose definition kv_capacity_tokens and max_concurrency follow: "kvcalc", or the engine named ("vLLM 0.19").
    capacity_basis: str = "kvcalc"
    weight_format: str = ""  # the weights' formats as a label, a mix named as one ("mxfp4 experts + bf16")
    per_gpu: PerGpu
    vllm: VllmFigures | None = None
    sglang: SglangPool | None = None  # fit --engine sglang: SGLang's own pool, which then decides `ok`
    slo: SloResult | None = None
    concurrency_slo: ConcurrencySearch | None = None  # fit --tpot-ms/--ttft-ms: closed-loop serving
    warnings: list[str] = []
    ok: bool = True  # fits and meets the latency goals given; False makes `kvcalc fit` exit 3
    verdict: str = ""
    # Layout beyond tp x pp (issue 20): with dp_attention the tp ranks each hold their own requests'
    # KV, and max_batch, kv_capacity_tokens and max_concurrency count all of them.
    ep: int = 1
    dp_attention: bool = False
    nodes: int = 1
    gpus_per_node: int | None = None
    accounting: str = "kvcalc"  # whose memory accounting the reserve came from (kvcalc / vLLM 0.19 ...)


def paged(tokens: int, block_size: int) -> int:
    """Tokens a paged allocator reserves: whole blocks."""
    return math.ceil(tokens / block_size) * block_size


def kv_bytes_per_sequence(spec: ModelSpec, seq: int, kv_dtype: str, tp: int, block_size: int) -> int:
    """One sequence's cache on one rank (all layers), each layer's tokens rounded up to whole blocks."""
    elements = index = 0
    for run, n in spec.layer_groups():
        tokens = paged(tokens_held(run, seq), block_size)
        elements += n * elements_per_token(spec, run, tp) * tokens
        index += n * index_bytes_per_token(spec, run) * tokens  # DSA's indexer keys, fp8 in every KV dtype
    return elements_to_bytes(elements, kv_dtype) + index


def _max_seq(stage: Stage, batch: int, avail: int, kv_dtype: str, block_size: int) -> int | None:
    def fits(s: int) -> bool:
        return batch * (held_kv_bytes(stage, s, kv_dtype, block_size) + stage.state_bytes) <= avail

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
    pp: int = 1,
    weights_per_gpu: int | None = None,
    staged: tuple[Stage, ...] | None = None,
    kv_ranks: int = 1,
) -> FitResult:
    """Per GPU of each pipeline stage: its weights, the paged KV of its layers, state and reserve
    against capacity x gpu_util. The figures reported are the tightest stage's. weights_per_gpu: an
    engine's own figure (vLLM's weights as loaded) instead of kvcalc's shard, on every stage."""
    dep = Deployment(tp=tp, pp=pp, gpu_util=gpu_util, reserve_bytes=reserve_bytes)
    staged = staged or stages(spec, dep, dtype)
    budget = int(gpu.capacity_bytes * gpu_util)

    def resident(st: Stage) -> int:
        return st.resident_bytes if weights_per_gpu is None else weights_per_gpu

    def room(st: Stage) -> tuple[int, int, int]:
        """(bytes left for KV and state, one sequence's KV, its state) on one GPU of the stage."""
        return (
            budget - resident(st) - reserve_bytes,
            held_kv_bytes(st, seq, kv_dtype, block_size),
            st.state_bytes,
        )

    def capacity(st: Stage) -> int:
        avail, per_seq, per_state = room(st)
        return max(avail, 0) // (per_seq + per_state) if per_seq + per_state else MAX_SEARCH_SEQ

    rank_batch = -(-batch // kv_ranks)  # DP attention: the busiest rank's share of the requests
    stage = min(staged, key=lambda st: (capacity(st), room(st)[0]))
    avail, per_seq, per_state = room(stage)
    weights = resident(stage)
    usable = max(avail, 0)
    max_batch = kv_ranks * min(capacity(st) for st in staged) if per_seq + per_state else 0
    per_token = sum(t.layers * t.elements for t in stage.terms)  # while every window still grows
    per_token_bytes = elements_to_bytes(per_token, kv_dtype)
    fits = all(rank_batch * (pr[1] + pr[2]) <= pr[0] for pr in map(room, staged))
    attention = [run for run, _ in spec.layer_groups() if run.kind.per_head_kv]
    if steps is not None:
        all_weights = weight_bytes_resident(spec, dtype)
        where = (
            f" (pipeline stage {stage.number}, layers {stage.start}-{stage.end - 1}: the tightest)" if pp > 1 else ""
        )
        steps += [
            f"budget per GPU: {gpu.capacity_bytes:,} B × {gpu_util:g} = {budget:,} B",
            f"weights: {weights:,} B per GPU (as vLLM loads them)"
            if weights_per_gpu is not None
            else f"weights: {all_weights:,} B in all; one GPU{where} holds {weights:,} B "
            + ("(1/tp of the matrices, embedding and LM head; norms and routers whole)" if tp > 1 else ""),
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
        steps.append(f"one sequence of {seq:,} tokens on one GPU: {per_seq:,} B of KV{state}")
        ranks = f"{kv_ranks} DP-attention ranks × " if kv_ranks > 1 else ""
        steps.append(f"largest batch: {ranks}⌊{usable:,} / {per_seq + per_state:,}⌋ = {max_batch:,}")
    result = FitResult(
        model=spec.name,
        gpu=gpu.name,
        tp=tp,
        pp=pp,
        seq=seq,
        batch=batch,
        dtype=dtype or spec.dtype,
        weight_format=weights_label(spec, dtype),
        kv_dtype=kv_dtype,
        gpu_util=gpu_util,
        block_size=block_size,
        kv_heads_per_rank=kv_heads_per_rank(attention[0].kv_heads or spec.kv_heads, tp) if attention else None,
        kv_heads_replicated=replicates_kv_heads(spec, tp),
        fits=fits,
        max_batch=max_batch,
        max_seq=capped_context(spec, memory_seq := _max_seq(stage, rank_batch, usable, kv_dtype, block_size)),
        max_seq_memory=memory_seq,
        kv_capacity_tokens=kv_ranks * (usable // (per_token_bytes * block_size)) * block_size if per_token_bytes else 0,
        max_concurrency=kv_ranks * usable / (per_seq + per_state) if per_seq + per_state else 0.0,
        per_gpu=PerGpu(
            weight_bytes=weights,
            kv_bytes=rank_batch * per_seq,
            state_bytes=rank_batch * per_state,
            reserve_bytes=reserve_bytes,
            budget_bytes=budget,
            capacity_bytes=gpu.capacity_bytes,
        ),
        warnings=[w for w in (context_warning(spec, seq),) if w],
    )
    result.ok, result.verdict = verdict(result)  # the caller redoes it after adding latency goals
    return result


def capped_context(spec: ModelSpec, memory_seq: int | None, longest: int | None = None) -> int | None:
    """The largest context a request may have: what memory holds, never above max_position_embeddings (or
    `longest`, the longest the engine takes for the model: engines/lengths.longest_context)."""
    limit = longest or spec.max_position_embeddings
    if limit is None:
        return memory_seq
    return limit if memory_seq is None else min(memory_seq, limit)


def adopt_engine_capacity(
    result: FitResult,
    basis: str,
    kv_tokens: int,
    concurrency: float,
    *,
    spec: ModelSpec,
    held_at: Callable[[int], int],
    context: bool = True,
    engine: str | None = None,
) -> None:
    """One capacity and one concurrency per answer: when an engine is named, its own (its pool, its
    blocks per request) replace kvcalc's, and `capacity_basis` says whose they are. `held_at(s)`: the
    requests of s tokens the engine's pool holds at once, its cap on running requests included (monotone in s);
    the row's fits, largest batch and (with `context`) largest context at its batch become the engine's too,
    so that every memory answer on the sheet is the one the verdict gives; `engine` ("vllm", ...): the largest
    context stops at the longest it takes for the model (engines/lengths.longest_context)."""
    longest = engine_limit(result, spec, engine)
    result.kv_capacity_tokens = kv_tokens
    result.max_concurrency = concurrency
    result.capacity_basis = basis
    result.max_batch = held_at(result.seq)
    result.fits = result.batch <= result.max_batch
    if context:
        batch = result.batch
        memory = (
            None
            if held_at(MAX_SEARCH_SEQ) >= batch
            else largest_satisfying(MAX_SEARCH_SEQ, lambda s: held_at(s) >= batch)
        )
        result.max_seq_memory, result.max_seq = memory, capped_context(spec, memory, longest)


def engine_limit(result: FitResult, spec: ModelSpec, engine: str | None) -> int | None:
    """The longest context `engine` takes for the model where it is not max_position_embeddings (None: that one),
    naming it on the result (max_seq_limit)."""
    if engine is None:
        return None
    from kvcalc.engines.lengths import longest_context
    from kvcalc.engines.names import ENGINE_NAMES

    longest = longest_context(spec, engine)
    if longest is None or longest == spec.max_position_embeddings:
        return None
    result.max_seq_limit = f"the longest {ENGINE_NAMES[engine]} takes for this config"
    return longest


def _slo_figures(slo) -> str:  # noqa: ANN001
    """The goal times the search measured, as the verdict quotes them: 'TPOT 19.91 ms, TTFT 80.12 ms'."""
    pairs = (("TPOT", slo.tpot_s if slo.tpot_ms else None), ("TTFT", slo.ttft_s))
    return ", ".join(f"{label} {value * 1e3:.2f} ms" for label, value in pairs if value is not None)


def gpus_named(result: FitResult) -> str:
    """The GPUs a verdict speaks of: "one h100", "4 x h100"."""
    return f"{result.tp * result.pp} x {result.gpu}" if result.tp * result.pp > 1 else f"one {result.gpu}"


def verdict(result: FitResult) -> tuple[bool, str]:
    """(ok, one line): fits and meets the latency goals, or what is over or missed and by how much."""
    p = result.per_gpu
    where = gpus_named(result)
    budget = f"the {fmt_bytes(p.budget_bytes)} budget ({fmt_bytes(p.capacity_bytes)} x {result.gpu_util:g})"
    start = result.vllm.startup if result.vllm else None
    if start is not None and start.refusal:
        return False, f"vLLM {result.vllm.version} REFUSES TO START on {where}: {start.refusal.rstrip('.')}"
    if not result.fits:
        fixed = p.weight_bytes + p.reserve_bytes
        if fixed > p.budget_bytes:
            return False, (
                f"DOES NOT FIT on {where}: weights {fmt_bytes(p.weight_bytes)} + reserve {fmt_bytes(p.reserve_bytes)} "
                f"per GPU exceed {budget} by {fmt_bytes(fixed - p.budget_bytes)}; use more GPUs (--tp, --pp), "
                "smaller weights (--dtype fp8/int4) or a larger GPU"
            )
        need = fixed + p.kv_bytes + p.state_bytes
        if need <= p.budget_bytes:  # the engine's pool (its pages, its groups) or its cap, not these bytes, is short
            short = (
                f"its cap on running requests ({result.max_batch:,})"
                if result.max_concurrency >= result.batch
                else f"its pool of {result.kv_capacity_tokens:,} tokens ({result.max_concurrency:.2f}x concurrency)"
            )
            return False, (
                f"DOES NOT FIT under {result.capacity_basis} on {where}: batch {result.batch:,} x {result.seq:,} tokens "
                f"exceeds {short}; the largest batch it holds is {result.max_batch:,}"
            )
        return False, (
            f"DOES NOT FIT on {where}: batch {result.batch:,} x {result.seq:,} tokens needs {fmt_bytes(p.kv_bytes)} "
            f"of KV{' and state' if p.state_bytes else ''} per GPU, over {budget} by {fmt_bytes(need - p.budget_bytes)}; "
            f"the largest batch that fits is {result.max_batch:,}"
        )
    slo = result.slo
    if slo is None:
        return True, f"fits on {where}"
    goals = " and ".join(
        f"{label} {value:g} ms" for label, value in (("TPOT", slo.tpot_ms), ("TTFT", slo.ttft_ms)) if value is not None
    )
    if slo.met and result.batch > slo.batch:
        # The goals hold up to slo.batch (step times grow with the batch); this row asks for more.
        there = _slo_figures(slo)
        return False, (
            f"fits on {where} but batch {result.batch:,} misses {goals}: the largest batch that meets "
            f"{'them' if ' and ' in goals else 'it'} is {slo.batch:,} ({there} there, {slo.basis})"
        )
    if not slo.met:
        figures = _slo_figures(slo)
        return False, (
            f"fits on {where} but misses {goals}: batch 1 takes {figures} ({slo.basis}); "
            "relax the goal, add GPUs (--tp) or quantize weights and cache"
        )
    also = f"; the ceiling would allow {slo.ceiling_batch:,}" if slo.ceiling_batch is not None else ""
    return True, f"fits on {where} and meets {goals} ({slo.basis}) up to batch {slo.batch:,}{also}"


def engine_verdict(result: FitResult, label: str, concurrency: float) -> tuple[bool, str]:
    """fit's verdict where an engine's own pool (SGLang's, TensorRT-LLM's) has decided that --batch requests fit:
    the latency goals worded as `verdict` words them (their search bounded by that pool, fitrun.fit_rows)."""
    ok, text = verdict(result.model_copy(update={"fits": True}))
    where = gpus_named(result)
    head = f"fits on {where}"
    return ok, text.replace(
        head, f"{head} under {label} ({concurrency:.2f}x concurrency for {result.seq:,}-token requests)", 1
    )
