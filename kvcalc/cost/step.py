"""Pure cost of one forward step on a parallel deployment: per-GPU bytes and FLOPs of each pipeline
stage as functions of the context, the communication on the step's critical path, and whether
each GPU's weights + KV + state + reserve fit its memory budget."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import NamedTuple

from kvcalc.cost.kvcache import (
    attended_tokens,
    elements_per_token,
    index_bytes_per_token,
    index_tokens_held,
    tokens_held,
)
from kvcalc.cost.shard import (
    Link,
    allreduce_seconds,
    allreduces_per_step,
    check_pp,
    check_tp,
    pp_indices,
    rank_compute_params,
    rank_read_parts,
    rank_weight_bytes_resident,
    read_bytes,
    send_seconds,
)
from kvcalc.errors import UsageError
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import LayerRun, ModelSpec
from kvcalc.units import DEFAULT_GPU_UTIL, elements_to_bytes, fmt_bytes

GIB = 2**30


# NOTE: NamedTuples, not frozen dataclasses: each frozen dataclass compiles five generated methods
# at import (about 0.5 ms each class, 3 ms of `kvcalc roofline`'s start); these are plain records.
class Deployment(NamedTuple):
    """How one model replica is spread: tp GPUs per stage, pp stages, the link between them, and
    the per-GPU memory budget (capacity x gpu_util, less a reserve for activations and buffers)."""

    tp: int = 1
    pp: int = 1
    link: Link | None = None
    gpu_util: float = DEFAULT_GPU_UTIL
    reserve_bytes: int = 2 * GIB
    # Expert parallelism, DP attention and nodes (cost/fabric.py says what each means).
    ep: int = 1
    dp_attention: bool = False
    gpus_per_node: int | None = None  # the scale-up domain; None: one domain holds every GPU
    scale_out: Link | None = None  # between nodes, one direction per GPU

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def kv_ranks(self) -> int:
        """Ranks per stage that each hold their own requests' KV (tp under DP attention, else 1)."""
        return self.tp if self.dp_attention else 1


SINGLE = Deployment()


class Term(NamedTuple):
    """`layers` layers of a stage with the same shape (`run`), as one GPU sees them."""

    run: LayerRun  # its kind and window say which tokens it holds and attends to
    layers: int
    elements: int  # KV elements one held token adds to one of these layers on one rank
    # KV elements per token one of these layers reads in a step: a KV-sharing layer (Hunyuan's
    # cross-layer attention) holds none of its own but attends over its source layer's K and V.
    read_elements: int
    decode_flops: int  # attention FLOPs per attended key for one new token (MLA: absorbed widths)
    prefill_flops: int  # attention FLOPs per query-key pair of a prompt pass
    # DeepSeek Sparse Attention: MLA attends to the indexer's top-k tokens only, while the indexer reads
    # its own key (index_bytes a token, fp8) of every held token and scores it (index_flops a key).
    topk: int | None = None
    index_bytes: int = 0
    index_flops: int = 0

    def read_tokens(self, context: int) -> int:
        """Entries of a sequence's cache this layer's attention reads for one new token."""
        return attended_tokens(self.run, context, self.topk)

    def reads(self, context: int) -> tuple[int, int]:
        """(KV elements, indexer bytes) one of these layers reads for one new token of a sequence at
        `context`: the K and V it attends to, and under DSA every held indexer key."""
        return self.read_elements * self.read_tokens(context), self.index_bytes * index_tokens_held(self.run, context)

    def decode_attention_flops(self, context: int) -> Fraction:
        """Attention FLOPs of one new token at `context` in one of these layers (with the indexer's scoring)."""
        from kvcalc.cost.flops import decode_keys

        if self.run.latent_window:
            scored = index_tokens_held(self.run, context) if self.index_flops else 0
            return self.decode_flops * Fraction(self.read_tokens(context)) + self.index_flops * scored
        keys = decode_keys(self.run, context)
        if self.topk is None:
            return self.decode_flops * keys
        return self.decode_flops * min(keys, Fraction(self.topk)) + self.index_flops * tokens_held(self.run, context)

    def prefill_attention_flops(self, prompt: int) -> int:
        """Attention FLOPs of a prompt pass in one of these layers: under DeepSeek Sparse Attention each
        query attends to min(its position, top-k) keys, and the indexer scores every causal pair."""
        from kvcalc.cost.flops import causal_pairs, compressed_pairs, layer_pairs

        if self.run.latent_window:  # DeepSeek-V4's layers
            pairs, scored = compressed_pairs(self.run, prompt, self.topk)
            return self.prefill_flops * pairs + self.index_flops * scored
        if self.topk is None:
            return self.prefill_flops * layer_pairs(self.run, prompt)
        return self.prefill_flops * causal_pairs(prompt, self.topk) + self.index_flops * causal_pairs(prompt)

    @property
    def window(self) -> int | None:
        """Where holding stops growing (sliding and chunked layers)."""
        return self.run.window_tokens if self.run.kind.windowed else None


class Stage(NamedTuple):
    number: int  # the pipeline stage, 0 first
    start: int
    end: int
    terms: tuple[Term, ...]
    compute_params: int  # multiplied through per token on one GPU of this stage
    lm_head_params: int  # of which the LM head's slice (last stage), computed once per prefill
    resident_bytes: int  # weights one GPU of this stage holds
    state_bytes: int  # SSM / linear-attention state of one sequence on one rank
    attention_heads: int  # query heads per rank
    read_parts: tuple[
        Fraction, Fraction, int, Fraction
    ]  # parallel.rank_read_parts: a step's weight reads without re-walking the layers
    ep: int = 1  # expert-parallel ranks: the busiest reads more experts than the mean (weight_bytes_read)
    kv_ranks: int = 1  # DP attention: a rank reads and holds only its ceil(batch / kv_ranks) sequences' KV
    # Under expert parallelism: (experts, top-k, mean routed-expert FLOPs per token on one rank), so the
    # busiest rank's extra work can be added (fabric.ep_imbalance); (0, 0, 0) otherwise.
    ep_moe: tuple[int, int, int] = (0, 0, 0)
    # Of read_parts, the weights stored below 16 bits (quantized), and the tensor-core rate that multiplies
    # their format as stored (formats.native_rate; None: widened to 16 bits in the kernel on every GPU)
    narrow_parts: tuple[Fraction, Fraction, int, Fraction] = (Fraction(0), Fraction(0), 0, Fraction(0))
    native: str | None = None


def held(window: int | None, context: int) -> int:
    return context if window is None else min(context, window)


def validate(spec: ModelSpec, dep: Deployment) -> None:
    from kvcalc.cost.fabric import check_layout

    check_tp(spec, dep.tp)
    check_pp(spec, dep.pp)
    check_layout(spec, dep.tp, dep.ep, dep.dp_attention)


def stages(spec: ModelSpec, dep: Deployment, dtype: str | None) -> tuple[Stage, ...]:
    """The pipeline stages of a valid deployment, each as one of its GPUs sees it."""
    from kvcalc.cost.flops import _qk_v_dims, index_flops, sparse
    from kvcalc.model.formats import native_rate

    validate(spec, dep)
    tp, pp = dep.tp, dep.pp
    # NOTE: under DP attention a rank holds whole attention for tp-th of the requests: its KV per token
    # is attention tp 1's; its attention FLOPs (heads x sequences) average out to tp's, kept here.
    kv_tp = 1 if dep.dp_attention else tp
    heads = spec.num_heads // tp
    layers = spec.expanded_layers()
    out = []
    for s in range(pp):
        start, end = pp_indices(spec.num_layers, s, pp)
        groups: dict[LayerRun, int] = {}
        state = 0
        for run in layers[start:end]:
            key = run.model_copy(update={"count": 1})
            groups[key] = groups.get(key, 0) + 1
            state += run.state_bytes
        terms = tuple(
            Term(
                run=run,
                layers=n,
                elements=elements_per_token(spec, run, kv_tp),
                read_elements=elements_per_token(spec, run.model_copy(update={"kv_shared": False}), kv_tp),
                decode_flops=2 * (spec.run_heads(run) // tp) * sum(_qk_v_dims(spec, True, run))
                if run.kind.attends
                else 0,
                prefill_flops=2 * (spec.run_heads(run) // tp) * sum(_qk_v_dims(spec, False, run))
                if run.kind.attends
                else 0,
                topk=spec.index_topk if sparse(spec, run) else None,
                index_bytes=index_bytes_per_token(spec, run),
                index_flops=index_flops(spec) if sparse(spec, run) and not run.index_shared else 0,
            )
            for run, n in groups.items()
        )
        last = s == pp - 1 and not spec.params
        parts = rank_read_parts(spec, tp, s, pp, dtype, dep.dp_attention)
        out.append(
            Stage(
                number=s,
                start=start,
                end=end,
                terms=tuple(t for t in terms if t.elements or t.decode_flops),
                compute_params=rank_compute_params(spec, tp, s, pp),
                lm_head_params=math.ceil(Fraction(spec.vocab * spec.hidden_size, tp)) if last else 0,
                resident_bytes=rank_weight_bytes_resident(spec, tp, s, pp, dtype, dep.dp_attention),
                # NOTE: SSM / linear-attention heads split across ranks like attention heads.
                state_bytes=math.ceil(state / kv_tp),
                attention_heads=heads,
                read_parts=parts,
                ep=dep.ep,
                kv_ranks=dep.kv_ranks,
                ep_moe=_ep_moe(spec, dep, parts[2]),
                narrow_parts=rank_read_parts(spec, tp, s, pp, dtype, dep.dp_attention, narrow=True),
                native=native_rate(spec, dtype),
            )
        )
    return tuple(out)


def kv_bytes(stage: Stage, batch: int, context: int, kv_dtype: str) -> int:
    """KV bytes a step over sequences of `context` tokens reads on one GPU of the stage: each layer
    reads the K and V it attends to (a KV-sharing layer its source's again)."""
    reads = [(t.layers, t.reads(context)) for t in stage.terms]
    elements, index = sum(n * e for n, (e, _) in reads), sum(n * i for n, (_, i) in reads)
    own = -(-batch // stage.kv_ranks)
    return elements_to_bytes(own * elements, kv_dtype) + own * index


BLOCK_TOKENS = 16  # vLLM's default KV block (and `kvcalc fit --block-size`'s default)


def held_kv_bytes(stage: Stage, context: int, kv_dtype: str, block: int = BLOCK_TOKENS) -> int:
    """KV one sequence of `context` tokens holds on one GPU of the stage: each layer's tokens in
    whole blocks (roofline's and generate's fit check and fit itself, with its --block-size)."""
    elements = sum(t.layers * t.elements * _paged(tokens_held(t.run, context), block) for t in stage.terms)
    index = sum(t.layers * t.index_bytes * _paged(index_tokens_held(t.run, context), block) for t in stage.terms)
    return elements_to_bytes(elements, kv_dtype) + index


def _paged(tokens: int, block: int) -> int:
    return -(-tokens // block) * block


def decode_state_bytes(stage: Stage, batch: int) -> int:
    """SSM / linear-attention state a decode step moves on one GPU of the stage: every sequence's
    recurrent state is read and the updated state written back in place, whole, each step (vLLM's
    mamba selective_state_update and fused_recurrent_gated_delta_rule load the state and store it)."""
    return 2 * -(-batch // stage.kv_ranks) * stage.state_bytes


def _ep_moe(spec: ModelSpec, dep: Deployment, moe_layers: int) -> tuple[int, int, int]:
    if dep.ep <= 1 or not moe_layers:
        return (0, 0, 0)
    from kvcalc.cost.params import expert_params

    one = expert_params(spec)
    return (spec.experts, spec.experts_per_token, math.ceil(2 * moe_layers * spec.experts_per_token * one / dep.tp))


def ep_extra_flops(stage: Stage, tokens: int) -> int:
    """What the busiest expert-parallel rank computes beyond the mean for `tokens` routed tokens."""
    experts, k, per_token = stage.ep_moe
    if not per_token:
        return 0
    from kvcalc.cost.fabric import ep_imbalance

    return math.ceil(tokens * per_token * (ep_imbalance(experts, k, tokens, stage.ep) - 1))


def stage_decode_flops(stage: Stage, batch: int, context: int) -> int:
    """One new token per sequence over `context` cached tokens, on one GPU of the stage (the busiest
    expert-parallel rank's)."""
    return batch * (2 * stage.compute_params + _decode_attention(stage.terms, context)) + ep_extra_flops(stage, batch)


@functools.lru_cache(maxsize=4096)
def _decode_attention(terms: tuple[Term, ...], context: int) -> int:
    """One new token's attention FLOPs over `context` cached tokens in these layers (cached: a serving
    simulation asks for the same few contexts of one stage thousands of times)."""
    return int(sum((t.layers * t.decode_attention_flops(context) for t in terms), Fraction(0)))


def stage_prefill_flops(stage: Stage, batch: int, prompt: int) -> int:
    """A causal pass over `prompt` tokens per sequence, on one GPU of the stage: the LM head only for
    the last position (what vLLM samples from)."""
    attention = sum(t.layers * t.prefill_attention_flops(prompt) for t in stage.terms)
    body = stage.compute_params - stage.lm_head_params
    return batch * (2 * body * prompt + 2 * stage.lm_head_params + attention) + ep_extra_flops(stage, batch * prompt)


def chunk_attention_flops(stage: Stage, seqs: int, context: int, chunk: int) -> int:
    """The attention FLOPs of `seqs` prompt chunks of `chunk` tokens after `context` cached tokens each, on
    one GPU of the stage: the attention share of stage_prefill_flops(whole) - stage_prefill_flops(before)."""
    attention = sum(
        t.layers * (t.prefill_attention_flops(context + chunk) - t.prefill_attention_flops(context))
        for t in stage.terms
    )
    return seqs * attention


def weight_bytes_read(spec: ModelSpec, stage: Stage, tokens: int, fewest: bool = False) -> int:
    """Weight bytes one GPU of the stage reads in a step over `tokens` tokens, in the weight formats
    the stage was built for (stages(..., dtype)). Under expert parallelism, the busiest rank's. Routed experts:
    those uniform routing is expected to reach; `fewest` (the ceiling's): those of the kindest routing, every token
    to the same k (identical inputs: gptSessionBenchmark's pad tokens), over the EP ranks. No step reads fewer."""
    mean = read_bytes(spec, stage.read_parts, tokens, 1 if fewest else tokens)
    if stage.ep <= 1 or not stage.read_parts[2]:
        return mean
    _, _, moe_layers, one = stage.read_parts
    if fewest:  # the busiest rank holds ceil(k / ep) of the k experts
        k = spec.experts_per_token
        return mean + math.ceil(moe_layers * (-(-k // stage.ep) - Fraction(k, stage.ep)) * stage.ep * one)
    from kvcalc.cost.fabric import busiest_experts
    from kvcalc.cost.shard import reached_experts

    reached = float(reached_experts(spec.experts, spec.experts_per_token, tokens))
    # one rank's E / ep experts are whole on its tp / ep expert ranks: one expert is ep x `one` there
    extra = moe_layers * (busiest_experts(spec.experts, reached, stage.ep) - reached / stage.ep) * stage.ep * one
    return mean + math.ceil(extra)


def dequant_share(spec: ModelSpec, gpu: GpuSpec, staged: Sequence[Stage], tokens: int) -> float:
    """The share of a step's weight bytes that the kernels widen to 16 bits before multiplying
    (weight-only quantization: GPTQ / AWQ int4, mxfp4 experts on a GPU without fp4 tensor cores, fp8 on
    Ampere): such GEMVs stream at a lower fraction of the bandwidth than 16-bit or native-format ones
    (estimate.time_of's dequant_eff). 0 where the GPU has a tensor-core rate for the stored format."""
    if not any(st.narrow_parts[0] or st.narrow_parts[3] for st in staged):
        return 0.0
    if staged[0].native is not None and staged[0].native in gpu.peak_dense_tflop_per_s:
        return 0.0
    narrow = sum(read_bytes(spec, st.narrow_parts, tokens) for st in staged)
    return min(1.0, narrow / max(1, sum(read_bytes(spec, st.read_parts, tokens) for st in staged)))


# --- communication ------------------------------------------------------------------------


def activation_bytes(spec: ModelSpec, dtype: str | None = None) -> int:
    # NOTE: activations travel in the dtype the matmuls run at (bf16/fp16) even for fp8 or int4
    # weights; only a model run in fp32 sends 4 bytes (an fp32 checkpoint given --dtype bf16 sends 2).
    from kvcalc.model.formats import matmul_dtype

    return 4 if matmul_dtype(spec, dtype) == "fp32" else 2


def needs_link(dep: Deployment, gpu: GpuSpec) -> Link | None:
    if dep.gpus == 1:
        return None
    if dep.link is None:
        raise UsageError(
            f"{gpu.name}'s preset has no sourced interconnect, needed for {dep.tp} x {dep.pp} GPUs",
            hint="give --interconnect (nvlink4, pcie5, ... or a bandwidth such as 100GB/s)",
        )
    return dep.link


def comm_seconds(spec: ModelSpec, dep: Deployment, tokens: int, dtype: str | None = None) -> float:
    """Communication on a step's critical path for `tokens` tokens in flight: under tensor
    parallelism one all-reduce after each row-parallel block (two per layer for attention + MLP,
    Megatron-style column then row parallel; parallel.allreduces_per_step), and pp - 1 activation
    sends between pipeline stages."""
    if dep.gpus == 1 or dep.link is None:
        return 0.0
    if dep.ep > 1 or dep.dp_attention or dep.gpus_per_node:
        from kvcalc.cost.fabric import layout_comm_seconds

        return layout_comm_seconds(spec, dep, tokens, activation_bytes(spec, dtype))
    message = tokens * spec.hidden_size * activation_bytes(spec, dtype)
    seconds = allreduces_per_step(spec) * allreduce_seconds(message, dep.tp, dep.link)
    return seconds + (dep.pp - 1) * send_seconds(message, dep.link)


# --- memory fit ------------------------------------------------------------------------------


class Fit(NamedTuple):
    fits: bool
    stage: int  # the stage with the least room (or the most over)
    stages: int
    need_bytes: int  # weights + KV + state + reserve on one GPU of that stage
    budget_bytes: int
    weight_bytes: int
    kv_bytes: int
    state_bytes: int

    @property
    def over_bytes(self) -> int:
        return self.need_bytes - self.budget_bytes

    def message(self, where: str) -> str:
        stage = f" (pipeline stage {self.stage})" if self.stages > 1 else ""
        verdict = "over by" if not self.fits else "room left"
        return (
            f"{where}{stage}: weights held {fmt_bytes(self.weight_bytes)} + KV {fmt_bytes(self.kv_bytes)}"
            + (f" + state {fmt_bytes(self.state_bytes)}" if self.state_bytes else "")
            + f" + reserve {fmt_bytes(self.need_bytes - self.weight_bytes - self.kv_bytes - self.state_bytes)}"
            f" = {fmt_bytes(self.need_bytes)} of a {fmt_bytes(self.budget_bytes)} budget, "
            f"{verdict} {fmt_bytes(abs(self.over_bytes))}"
        )


def memory_fit(
    gpu: GpuSpec, dep: Deployment, staged: tuple[Stage, ...], batch: int, context: int, kv_dtype: str
) -> Fit:
    """Does every GPU hold its weights, the KV of `batch` x `context` tokens, the recurrent state
    and the reserve within capacity x gpu_util? Reports the tightest stage. The KV is held in
    whole pages of BLOCK_TOKENS, as vLLM allocates it and `kvcalc fit` counts it (a step reads only
    the tokens, kv_bytes), so a row fits here exactly when fit's default block size says it fits."""
    budget = int(gpu.capacity_bytes * dep.gpu_util)
    worst = None
    batch = -(-batch // dep.kv_ranks)  # under DP attention the busiest rank holds ceil(batch / tp)
    for st in staged:
        kv = batch * held_kv_bytes(st, context, kv_dtype)
        state = batch * st.state_bytes
        need = st.resident_bytes + kv + state + dep.reserve_bytes
        fit = Fit(need <= budget, st.number, len(staged), need, budget, st.resident_bytes, kv, state)
        if worst is None or fit.over_bytes > worst.over_bytes:
            worst = fit
    assert worst is not None
    return worst


def context_warning(spec: ModelSpec, context: int) -> str | None:
    limit = spec.max_position_embeddings
    if limit is not None and context > limit:
        return (
            f"context {context:,} tokens exceeds {spec.name}'s max_position_embeddings {limit:,}: "
            "the model was not trained for it (a what-if, not a plan)"
        )
    return None


def pipelined(stage_s: Sequence[float], m: int, prefill: bool, bound: bool = False) -> float:
    """Stage times (one micro-batch or chunk each) to the time of the step: their sum without
    micro-batches; decode with m in flight max(sum, m x slowest); prefill in m chunks (m + pp - 1)
    x slowest, or as a bound m x slowest (the busiest stage does every chunk)."""
    if m <= 1:
        return sum(stage_s)
    slowest = max(stage_s)
    if prefill:
        return (m if bound else m + len(stage_s) - 1) * slowest
    return max(sum(stage_s), m * slowest)
