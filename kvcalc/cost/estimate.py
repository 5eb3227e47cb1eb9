"""Pure calibrated time of ONE engine step on one deployment: the physics ceiling (the roofline's
bytes / bandwidth, FLOPs / peak, communication at line rate) and a structural estimate beside it,
with an 80% interval from the calibration residuals.

The estimate is built from the same per-GPU bytes and FLOPs as the ceiling (cost/step.py), with
fitted terms in place of ideal hardware (constants in cost/calibration.json, fitted from public
measurements by scripts/calibrate.py; plan/calibration.py reads them and callers pass them in):
- memory: weight bytes / (bandwidth x bw_eff[family]), the weight-only quantized share of them (widened
  to 16 bits in the kernel, step.dequant_share) further over dequant_eff, plus a per-layer GEMV start-up
  worth `gemv_layer_bytes` bytes (small matrices never reach streaming speed), KV bytes / (bandwidth x
  kv_eff[family]) plus a per-attention-layer floor;
- compute: FLOPs / (peak x mfu[family]), a prompt GEMM filling its tiles only past `mfu_tokens` rows
  (a routed expert's rows are its share of the tokens, tokens x top-k / experts), a prompt's attention at
  its KV cache format's rate where the weights' GEMMs run faster (attention_rate);
- a step runs each stage at max(memory, compute), plus fixed per-layer launch costs (CUDA graphs in
  decode, eager prefill), a per-MoE-layer routing and grouped-GEMM cost, a DSA indexer's kernels, and in
  a prompt step a cost per expert a GPU runs;
- communication: per all-reduce a latency by link kind and group size (custom all-reduce on NVLink,
  NCCL on PCIe, RCCL on Infinity Fabric) and the ring's bytes at the link's achieved bus bandwidth;
- the engine's CPU: a per-step cost (scheduling, sampling, output processing) growing per sequence.
Every term is at least its ideal counterpart, so the estimate is never below the ceiling, and every
term grows with the tokens and the context, so the estimate is monotone in batch and context.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple, TypedDict

from kvcalc.cost.calibration import Calibration
from kvcalc.cost.constants import ConstantsMemo, ar_eff, step_constants, used
from kvcalc.cost.flops import materialized_scores
from kvcalc.cost.shard import Link, allreduce_wire_bytes, allreduces_per_step
from kvcalc.cost.step import (
    Deployment,
    Stage,
    activation_bytes,
    chunk_attention_flops,
    comm_seconds,
    decode_state_bytes,
    dequant_share,
    pipelined,
    stage_decode_flops,
    stage_prefill_flops,
    stages,
    weight_bytes_read,
)
from kvcalc.hardware.family import gpu_family
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import ModelSpec
from kvcalc.units import elements_to_bytes

ENGINES = ("vllm", "sglang", "trtllm", "llamacpp")


def link_kind(dep: Deployment) -> str:
    """nvlink, pcie or if (Infinity Fabric): which all-reduce latency and bus bandwidth apply."""
    name = (dep.link.name if dep.link else "").lower()
    if "pcie" in name:
        return "pcie"
    if "infinity" in name or "xgmi" in name:
        return "if"
    return "nvlink"


class StepFeatures(NamedTuple):
    """What one step moves and computes, per GPU and per stage, before any constant is applied:
    the estimate is time_of(features, constants), so a fit evaluates it without re-walking a model."""

    family: str
    bandwidth: float  # bytes/s, the GPU's rated HBM figure
    peak: float  # FLOP/s in the step's matmul dtype, as the engine's kernels can reach it (the ceiling's)
    tp: int
    pp: int
    link: str  # nvlink / pcie / if
    link_bandwidth: float  # one direction's bytes/s for a tp group (0 without a link)
    send_bandwidth: float  # one direction's bytes/s between two pipeline stages (0 without a link)
    stage_bytes: tuple[tuple[int, int, int, int, float, int, int], ...]  # weights, kv, state, flops, blocks, attn, moe
    allreduces: int  # per step, all stages
    message_bytes: int  # one all-reduce's message
    tokens: int  # tokens in the step (decode sequences + prefill tokens)
    seqs: int  # sequences in the step
    prefill: bool  # the step carries prompt tokens (eager launches, not a captured graph)
    ceiling_s: float
    microbatches: int = 1  # pp > 1: micro-batches in flight (decode) or prompt chunks (prefill)
    # Expert / DP-attention layouts (cost/ep_comm.py): ep < tp's partial-sum reduces (count, message,
    # ranks, bytes/s) and the MoE all-to-alls (layers, bytes one rank sends per dispatch, bytes/s, ideal alpha)
    sub_allreduce: tuple[int, int, int, float] = (0, 0, 0, 0.0)
    a2a: tuple[int, float, float, float] = (0, 0.0, 0.0, 0.0)
    # MoE: (routed-expert FLOPs of the step on one GPU, mean of the stages; rows each expert's GEMM
    # gets; experts one GPU runs per MoE layer, those the step's tokens reach)
    experts: tuple[float, float, float] = (0.0, 0.0, 0.0)
    # Attention scores a prompt step writes to memory and reads back (query x key pairs x heads x
    # attention layers, all stages): llama.cpp without flash attention materializes KQ in f32 and
    # softmaxes it in place; 0 where the kernels keep the scores on chip (flash attention).
    scores: float = 0.0
    # DeepSeek Sparse Attention: layers with an indexer of their own, all stages (its kernels: a fixed cost each)
    index_layers: int = 0
    dequant: float = 0.0  # the share of the weight bytes widened to 16 bits in the kernel (step.dequant_share)
    # A prompt chunk's attention FLOPs per stage, and the tensor rate they run at (attention_rate; 0: the step's
    # `peak`): flash attention multiplies in the KV cache's format (16 bits or fp8), whatever the weights' (fp8, fp4)
    prompt_attention: tuple[float, ...] = ()
    attention_peak: float = 0.0


class StepTime(NamedTuple):
    """One step's time: the ceiling (a bound), the estimate, its 80% interval, and what calibrated it."""

    ceiling_s: float
    estimate_s: float
    lo_s: float
    hi_s: float
    basis: str


def _kv_read(stage: Stage, contexts: Sequence[tuple[int, int]], kv_dtype: str) -> int:
    """KV bytes read for (context, sequences) pairs, the busiest DP-attention rank's (step.kv_bytes' count)."""
    elements = index = 0
    for t in stage.terms:
        for c, n in contexts:
            e, i = t.reads(c)
            own = t.layers * -(-n // stage.kv_ranks)
            elements, index = elements + own * e, index + own * i
    return elements_to_bytes(elements, kv_dtype) + index


def _pairs(decode_contexts: Sequence[int], decode_batch: int, decode_context: int) -> list[tuple[int, int]]:
    if decode_batch:
        return [(decode_context, decode_batch)]
    counts: dict[int, int] = {}
    for c in decode_contexts:
        counts[c] = counts.get(c, 0) + 1
    return list(counts.items())


def _layer_counts(spec: ModelSpec, stage: Stage) -> tuple[float, int, int]:
    """(blocks: sub-blocks / 2, ModelSpec.sub_blocks; attention layers; layers that run routed experts)."""
    attn = sum(t.layers for t in stage.terms if t.decode_flops)
    moe = sum(spec.routes_experts()[stage.start : stage.end])
    return sum(spec.sub_blocks()[stage.start : stage.end]) / 2, attn, moe


def features(
    spec: ModelSpec,
    gpu: GpuSpec,
    dep: Deployment,
    *,
    decode_contexts: Sequence[int] = (),
    prefill_tokens: int = 0,
    prefill_context: int = 0,
    prefill_seqs: int = 1,
    dtype: str | None = None,
    kv_dtype: str = "bf16",
    staged: tuple[Stage, ...] | None = None,
    microbatches: int = 1,
    decode_batch: int = 0,
    decode_context: int = 0,
    scores_ubatch: int = 0,
) -> StepFeatures:
    """The bytes, FLOPs and counts of one step: `decode_contexts` holds each decoding sequence's
    cached tokens; `prefill_tokens` prompt tokens (spread evenly over `prefill_seqs` sequences) are
    processed after `prefill_context` tokens each sequence already holds (chunked prefill).

    With pp > 1 and `microbatches` m > 1 the pipeline is kept full: for decode the sequences given
    are ONE of m micro-batches in flight, and a token of each takes max(sum of the stages, m x the
    slowest stage) (vLLM's virtual engines); for prefill the prompt tokens go through in m chunks,
    (m + pp - 1) slots of the slowest stage (llama.cpp's n_ubatch). The ceiling is then the busiest
    stage's work alone.

    `scores_ubatch` > 0: the prompt's attention scores go through memory (llama.cpp without flash
    attention, in micro-batches of that many tokens): their count is StepFeatures.scores."""
    from kvcalc.cost.shard import link_for
    from kvcalc.model.formats import matmul_dtype

    staged = staged or stages(spec, dep, dtype)
    compute_dtype = gpu.compute_dtype(matmul_dtype(spec, dtype))
    pairs = _pairs(decode_contexts, decode_batch, decode_context)
    batch = sum(n for _, n in pairs)
    m = max(1, microbatches) if dep.pp > 1 else 1
    whole_prompt = prefill_tokens
    if prefill_tokens and m > 1:
        prefill_tokens = -(-prefill_tokens // m)  # one chunk
    pseqs = max(1, prefill_seqs) if prefill_tokens else 0
    per_seq = -(-prefill_tokens // pseqs) if pseqs else 0
    tokens = batch + prefill_tokens
    rows, prompt_attention = [], []
    peak = gpu.peak_flop_per_s(compute_dtype)
    bw = gpu.bandwidth_bytes_per_s
    ideal = []
    for st in staged:
        w = weight_bytes_read(spec, st, tokens)
        kv = _kv_read(st, pairs, kv_dtype)
        state = decode_state_bytes(st, batch)
        flops = sum(stage_decode_flops(st, n, c) for c, n in pairs)
        if pseqs:
            # A chunk after `prefill_context` cached tokens: the body over its tokens and attention
            # over the pairs it adds (the difference of two prompt passes), the LM head once.
            whole = stage_prefill_flops(st, pseqs, prefill_context + per_seq)
            before = (
                stage_prefill_flops(st, pseqs, prefill_context) if prefill_context else 2 * pseqs * st.lm_head_params
            )
            flops += whole - before + 2 * pseqs * st.lm_head_params
            prompt_attention.append(float(chunk_attention_flops(st, pseqs, prefill_context, per_seq)))
            kv += _kv_read(st, [(prefill_context + per_seq, pseqs)], kv_dtype)
            state += pseqs * st.state_bytes
        layers, attn, moe = _layer_counts(spec, st)
        rows.append((w, kv, state, flops, layers, attn, moe))
        ideal.append(stage_bound(spec, st, tokens, kv, state, flops, bw, peak))
    scores = 0.0
    if scores_ubatch and pseqs:
        # one chunk's share of the whole prompt's pairs where the pipeline takes it in m chunks
        per_seq_prompt, attn_layers = -(-whole_prompt // pseqs), sum(r[5] for r in rows)
        scores = materialized_scores(spec, attn_layers, per_seq_prompt, prefill_context, scores_ubatch, dep.tp)
        scores *= pseqs / m
    ceiling = pipelined(ideal, m, bool(prefill_tokens), bound=True) + comm_seconds(spec, dep, tokens, dtype)
    link = dep.link or (link_for(gpu) if dep.gpus > 1 else None)
    return StepFeatures(
        family=gpu_family(gpu),
        bandwidth=float(bw),
        peak=peak,
        tp=dep.tp,
        pp=dep.pp,
        link=link_kind(dep),
        send_bandwidth=link.group_bandwidth(2) if link and dep.pp > 1 else 0.0,
        stage_bytes=tuple(rows),
        prefill=bool(prefill_tokens),
        ceiling_s=ceiling,
        microbatches=m,
        scores=scores,
        index_layers=sum(t.layers for st in staged for t in st.terms if t.index_bytes),
        dequant=dequant_share(spec, gpu, staged, tokens),
        prompt_attention=tuple(prompt_attention),
        attention_peak=attention_rate(gpu, kv_dtype, peak) if prompt_attention else 0.0,
        **layout_fields(spec, dep, link, tokens, batch, pseqs, dtype),
    )


def stage_bound(
    spec: ModelSpec, st: Stage, tokens: int, kv: int, state: int, flops: int, bandwidth: float, peak: float
) -> float:
    """One stage's share of a step at its bound: bytes over bandwidth or FLOPs over peak, the weights those the
    ceiling reads (step.weight_bytes_read(fewest=True)). For features() and plan/serve_steps' fast step."""
    least = weight_bytes_read(spec, st, tokens, fewest=True)
    return max((least + kv + state) / bandwidth, flops / peak)


def attention_rate(gpu: GpuSpec, kv_dtype: str, peak: float) -> float:
    """The tensor rate a prompt's flash attention multiplies Q, K and V at: an fp8 cache's fp8 (FlashAttention-3's
    and TensorRT-LLM's FP8 attention) where the GPU has that rate, else 16 bits; never above the step's `peak`
    (fp8 or fp4 weights' GEMMs run faster than the attention beside them)."""
    return min(peak, gpu.peak_flop_per_s(gpu.compute_dtype("fp8" if kv_dtype == "fp8" else "bf16")))


class LayoutFields(TypedDict):
    link_bandwidth: float
    allreduces: int
    message_bytes: int
    tokens: int
    seqs: int
    sub_allreduce: tuple[int, int, int, float]
    a2a: tuple[int, float, float, float]
    experts: tuple[float, float, float]


def layout_fields(
    spec: ModelSpec, dep: Deployment, link: Link | None, tokens: int, batch: int, pseqs: int, dtype: str | None
) -> LayoutFields:
    """The features that follow a step's tokens through the layout: its collectives (all-reduces,
    expert parallelism's all-to-all, attention-DP's partial reductions) and the sequences the engine
    schedules per rank. Shared with the serving simulation's fast step timer (plan/serve_steps.py)."""
    act = activation_bytes(spec, dtype)
    comm = None
    if dep.link and (dep.ep > 1 or dep.dp_attention or dep.gpus_per_node) and dep.gpus > 1:
        from kvcalc.cost.ep_comm import layout_comm

        comm = layout_comm(spec, dep, tokens, act)
    allreduces = allreduces_per_step(spec) if dep.tp > 1 else 0
    group = link.group_bandwidth(dep.tp) if link is not None and dep.tp > 1 else 0.0
    return LayoutFields(
        link_bandwidth=comm.bandwidth if comm else group,
        allreduces=comm.allreduces if comm and dep.tp > 1 else allreduces,
        message_bytes=tokens * spec.hidden_size * act,
        tokens=tokens,
        # NOTE: under DP attention each rank's engine schedules and samples its own requests.
        seqs=-(-batch // dep.kv_ranks) + pseqs,
        sub_allreduce=comm.sub_allreduce if comm else (0, 0, 0, 0.0),
        a2a=comm.a2a if comm else (0, 0.0, 0.0, 0.0),
        experts=expert_gemms(spec, dep, tokens),
    )


def expert_gemms(spec: ModelSpec, dep: Deployment, tokens: int) -> tuple[float, float, float]:
    """A MoE step's routed-expert GEMMs: their FLOPs on one GPU (the mean rank and stage), the rows
    each expert's GEMM gets, tokens x top-k / experts (a prompt of 1,024 tokens gives each of
    DeepSeek-V3's 256 experts 32 rows, where a dense layer's GEMM gets all 1,024), and the experts the
    tokens reach, in tensor-parallel slices one GPU runs per MoE layer: expert parallelism runs 1 / ep of
    them, each ep slices wide, so as many (docs/speed.md, "A prompt's per-expert cost under expert parallelism")."""
    if not spec.is_moe or not tokens:
        return (0.0, 0.0, 0.0)
    from kvcalc.cost.params import expert_params

    moe_layers = max(0, spec.num_layers - spec.dense_layers)
    one = expert_params(spec)
    flops = 2.0 * tokens * moe_layers * spec.experts_per_token * one / (dep.tp * dep.pp)
    # the expected distinct experts of shard.reached_experts, in floats: a time feature, not a byte count
    reached = -spec.experts * math.expm1(tokens * math.log1p(-spec.experts_per_token / spec.experts))
    return (flops, tokens * spec.experts_per_token / spec.experts, reached)


def expert_layers(f: StepFeatures) -> float:
    """The experts a step's tokens reach on one GPU, summed over the MoE layers of its stages (0 for a dense model)."""
    return f.experts[2] * sum(s[6] for s in f.stage_bytes) if f.prefill else 0.0


@functools.lru_cache(maxsize=4096)
def _wire_bytes(message_bytes: int, ranks: int) -> float:
    """allreduce_wire_bytes as a float (exact Fractions are slow in a fit's inner loop)."""
    return float(allreduce_wire_bytes(message_bytes, ranks))


def time_of(f: StepFeatures, c: Mapping[str, float], engine: str = "vllm", memo: ConstantsMemo | None = None) -> float:
    """The estimated seconds of a step from its features and the constants `c` (flat names such as
    `bw_eff.hopper`, `step_s.sglang`; a missing family or engine key falls back to the shared name).
    `engine` may name a build of it after a dot (`llamacpp.legacy`: llama.cpp of 2023 / May 2024;
    `vllm.rocm`: vLLM on AMD Instinct): its constants fall back on the engine's, then on the shared ones.
    `memo`: the resolved constants of `c` by (family, engine, phase, link), kept by a caller that times
    many steps with one unchanged `c` (a fit's loss); it must not outlive a change to `c`."""
    key = (f.family, engine, f.prefill, f.link)
    k = memo.get(key) if memo is not None else None
    if k is None:
        k = step_constants(c, *key)
        if memo is not None:
            memo[key] = k
    moe_s = k.moe_s
    pad = 1.0
    if f.prefill:
        expert_flops, rows, reached = f.experts
        # NOTE: a prompt step's MoE layer runs every expert its tokens reach as its own GEMM problem,
        # eagerly (no CUDA graph): a cost per expert a GPU runs, beyond the bytes and FLOPs.
        moe_s += reached * used(k.moe_prefill_expert_s, "moe_prefill_expert_s")
        # NOTE: a prompt GEMM of few rows leaves tensor-core tiles empty: its compute time grows as
        # rows + mfu_tokens. A dense GEMM's rows are the step's tokens; a routed expert's only the
        # tokens sent to it (tokens x top-k / experts), so a MoE prompt fills its expert tiles far
        # less. Decode GEMMs of a few rows run as bandwidth-bound GEMV-like kernels instead, so the
        # padding is not charged there (it made batch 1 compute-bound on a 4090).
        pad = (f.tokens + k.fill) / max(f.tokens, 1)
        if expert_flops and rows:
            share = min(1.0, expert_flops / max(1.0, sum(float(r[3]) for r in f.stage_bytes) / len(f.stage_bytes)))
            pad = (1 - share) * pad + share * (rows + k.fill) / rows
    per_stage = []
    # NOTE: materialized scores are their own kernels' traffic (the KQ product's f32 output, the softmax
    # over it, the read into KQV), after the GEMMs: added, not overlapped; so are a DSA indexer's kernels.
    # An equal share per stage.
    n = len(f.stage_bytes)
    scores_s = (f.scores / n * used(k.score_bytes, "score_bytes") / (f.bandwidth * k.bw_eff) if f.scores else 0) + (
        f.index_layers / n * used(k.index_s, "index_layer_s") if f.index_layers else 0
    )
    # NOTE: weight-only quantized GEMVs widen each weight before the multiply: they stream at dequant_eff of
    # what 16-bit or native-format weights reach (speed_facts 2.8: llama.cpp's Q4_K_M 64% against F16's 87%)
    widen = 1 + f.dequant * (1 / k.dequant_eff - 1)
    # NOTE: a prompt's attention runs at its cache format's rate where the weights' GEMMs may run faster (fp8, fp4)
    slower = f.peak / f.attention_peak - 1 if f.prompt_attention and f.attention_peak else 0.0
    for i, (w, kv, state, flops, layers, attn, moe) in enumerate(f.stage_bytes):
        memory = (w * widen + state + k.gemv * layers) / (f.bandwidth * k.bw_eff) + kv / (f.bandwidth * k.kv_eff)
        compute = (flops + slower * f.prompt_attention[i] if slower else flops) * pad / (f.peak * k.mfu)
        per_stage.append(max(memory, compute) + scores_s + layers * k.layer_s + attn * k.attn_s + moe * moe_s)
    total = pipelined(per_stage, f.microbatches, f.prefill)
    if f.allreduces:
        alpha = used(k.ar_alpha_s, "ar_alpha_s") * (1 + used(k.ar_alpha_tp, "ar_alpha_tp") * (f.tp - 2))
        busbw = f.link_bandwidth * ar_eff(k, f.message_bytes)
        total += f.allreduces * (alpha + _wire_bytes(f.message_bytes, f.tp) / busbw)
    n, message, ranks, bw = f.sub_allreduce
    if n:
        alpha = used(k.ar_alpha_s, "ar_alpha_s") * (1 + used(k.ar_alpha_tp, "ar_alpha_tp") * (ranks - 2))
        total += n * (alpha + _wire_bytes(message, ranks) / (bw * ar_eff(k, message)))
    moe_layers, sent, bw, ideal_alpha = f.a2a
    if moe_layers:
        # NOTE: dispatch and combine each move the same rows (combine returns every expert output a rank
        # sent for); never below the link's own latency, so the term stays >= the ceiling's.
        alpha = max(used(k.a2a_alpha_s, "a2a_alpha_s"), ideal_alpha)
        total += 2 * moe_layers * (alpha + sent / (bw * min(1.0, used(k.a2a_bw_eff, "a2a_bw_eff"))))
    if f.pp > 1:
        total += (f.pp - 1) * (used(k.ar_alpha_s, "ar_alpha_s") + f.message_bytes / max(f.send_bandwidth, 1.0))
    total += k.step_s + f.seqs * k.seq_s
    return max(total, f.ceiling_s)


def step_time(
    spec: ModelSpec,
    gpu: GpuSpec,
    dep: Deployment,
    *,
    engine: str = "vllm",
    decode_contexts: Sequence[int] = (),
    prefill_tokens: int = 0,
    prefill_context: int = 0,
    prefill_seqs: int = 1,
    dtype: str | None = None,
    kv_dtype: str = "bf16",
    calibration: Calibration | None = None,
    staged: tuple[Stage, ...] | None = None,
    decode_batch: int = 0,
    decode_context: int = 0,
    microbatches: int = 1,
) -> StepTime:
    """Time ONE engine step on `dep`: decode one token for each sequence in `decode_contexts` (its
    cached tokens) and process `prefill_tokens` prompt tokens of `prefill_seqs` sequences that already
    hold `prefill_context` tokens. Pass `staged` (step.stages) when timing many steps of one setup.
    `decode_batch` sequences all at `decode_context` tokens may be given instead of `decode_contexts`
    (the same step, without a list as long as the batch). With pp > 1, `microbatches` keeps that many
    micro-batches in flight (features() says how).

    `calibration`: (constants, basis), as plan/calibration.constants_for gives them for the GPU and engine;
    without it, the uncalibrated starting constants (this layer reads no file)."""
    from kvcalc.cost.calibration import STARTING, UNCALIBRATED

    if engine not in ENGINES:
        from kvcalc.errors import UsageError

        raise UsageError(f"unknown engine '{engine}'", hint=f"one of {', '.join(ENGINES)}")
    f = features(
        spec,
        gpu,
        dep,
        decode_contexts=decode_contexts,
        prefill_tokens=prefill_tokens,
        prefill_context=prefill_context,
        prefill_seqs=prefill_seqs,
        dtype=dtype,
        kv_dtype=kv_dtype,
        staged=staged,
        decode_batch=decode_batch,
        decode_context=decode_context,
        microbatches=microbatches,
    )
    return timed(f, calibration if calibration is not None else (dict(STARTING), UNCALIBRATED), engine)


def timed(f: StepFeatures, calibration: Calibration, engine: str, memo: ConstantsMemo | None = None) -> StepTime:
    """A step's features timed with (constants, basis): the estimate, its 80% interval (never below the
    ceiling, never excluding the estimate) and the ceiling. `memo`: as time_of's."""
    c, basis = calibration
    est = time_of(f, c, engine, memo)
    phase = "prefill" if f.prefill else "decode"
    lo = max(f.ceiling_s, est * c.get(f"interval.{phase}.lo", 0.8))
    hi = max(est, est * c.get(f"interval.{phase}.hi", 1.25))
    return StepTime(ceiling_s=f.ceiling_s, estimate_s=est, lo_s=min(lo, est), hi_s=hi, basis=basis)
