"""Pure parallel-deployment arithmetic: valid tensor/pipeline splits, one rank's shard, communication.

The rules follow vLLM (v0.8-0.19, unchanged in these places):
- tp must divide the query heads (ModelConfig.verify_with_parallel_config), and the KV heads must
  split evenly or be replicated evenly (QKVParallelLinear: `divide(total_num_kv_heads, tp)` when
  tp < G, else `divide(tp, total_num_kv_heads)` replicas);
- layers split into pipeline stages by `get_pp_indices` (vllm/distributed/utils.py);
- attention and MLP matrices are column/row parallel, the vocabulary-parallel embedding and LM head
  split by rows, norms, the MoE router and MLA's down-projections (q_a_proj, kv_a_proj_with_mqa,
  ReplicatedLinear in deepseek_v2.py) are whole on every rank; the default fused-MoE layer gives
  each rank a 1/tp slice of every expert's intermediate dimension.
"""

from __future__ import annotations

import math
import re
import weakref
from fractions import Fraction
from functools import lru_cache

from kvcalc.cost.kvcache import check_tp, kv_heads_per_rank, valid_tp  # the KV-head rule lives with the cache
from kvcalc.cost.params import (
    Shard,
    _mlp,
    attention_params,
    compressor_params,
    end_norm_params,
    expected_experts,
    expert_params,
    extra_params,
    hash_bias_params,
    layer_norm_params,
    output_gate_params,
    param_counts,
    per_layer_input_params,
    router_params,
    shard_bytes,
    shard_formats,
    sink_params,
)
from kvcalc.errors import UsageError
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import LayerKind, LayerRun, ModelSpec
from kvcalc.results import Result

__all__ = [
    "Link",
    "LINKS",
    "allreduce_seconds",
    "allreduce_wire_bytes",
    "allreduces_per_step",
    "check_pp",
    "check_tp",
    "kv_heads_per_rank",
    "link_for",
    "parse_interconnect",
    "pp_indices",
    "pp_partition",
    "rank_compute_params",
    "rank_weight_bytes_read",
    "rank_weight_bytes_resident",
    "send_seconds",
    "valid_tp",
]


# --- valid splits ----------------------------------------------------------------------


def check_pp(spec: ModelSpec, pp: int) -> None:
    if pp < 1:
        raise UsageError(f"pipeline parallelism must be at least 1, got {pp}")
    if pp > spec.num_layers:
        raise UsageError(
            f"pipeline parallelism {pp} exceeds {spec.name}'s {spec.num_layers} layers",
            hint="every stage needs at least one layer",
        )


def pp_partition(num_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage, as vLLM's `get_pp_indices` splits them (no
    VLLM_PP_LAYER_PARTITION): an even share each, the remainder one layer apiece to the stages
    just before the last (the last holds the final norm and LM head)."""
    if pp < 1 or pp > num_layers:
        raise UsageError(f"cannot split {num_layers} layers into {pp} pipeline stages")
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return parts


def pp_indices(num_layers: int, rank: int, pp: int) -> tuple[int, int]:
    """(start, end) layer indices of pipeline stage `rank`, as vLLM's get_pp_indices returns."""
    parts = pp_partition(num_layers, pp)
    start = sum(parts[:rank])
    return start, start + parts[rank]


# --- one rank's weights --------------------------------------------------------------------


def _mixer_rank(spec: ModelSpec, run: LayerRun, tp: int) -> Fraction:
    """One layer's token-mixer parameters on one rank."""
    hidden = spec.hidden_size
    if run.latent_window:
        # DeepSeek-V4: q_a_proj and kv_proj (with their norms) and the compressors' single-entry projections whole,
        # the rest split by heads (q_b_proj, sinks, the indexer's query heads) or by output group (o_a / o_b)
        d, ql = spec.head_dim_effective, spec.q_lora_rank or 0
        heads_part = ql * (spec.index_heads or 0) * (spec.index_head_dim or 0) + hidden * (spec.index_heads or 0)
        whole = (
            hidden * ql + ql + hidden * d + d + compressor_params(spec, run) - (heads_part if run.compress_topk else 0)
        )
        return whole + Fraction(attention_params(spec, run) - whole, tp)
    if run.kind == LayerKind.MLA:
        rope = spec.rope_dim
        # q_a_proj (+ its norm) and kv_a_proj_with_mqa (+ its norm) are replicated; the rest splits by heads.
        whole = hidden * (spec.latent_rank + rope) + spec.latent_rank
        if spec.q_lora_rank:
            whole += hidden * spec.q_lora_rank + spec.q_lora_rank
        return whole + Fraction(attention_params(spec, run) - whole, tp)
    if run.kind.self_head_kv:
        h, d = spec.run_heads(run), spec.run_head_dim(run)
        # A KV-sharing layer (Hunyuan's cross-layer attention) has no k/v projections (params.attention_params);
        # a k_eq_v layer (Gemma 4) has k_proj only.
        g = 0 if run.kv_shared else kv_heads_per_rank(run.kv_heads or spec.kv_heads, tp)
        vd = spec.run_v_dim(run)
        kv = g * d + (0 if run.v_is_k else g * vd)
        bias = (Fraction(h * d, tp) + kv) if spec.attention_bias else 0
        bias += hidden if spec.o_proj_bias else 0  # a row-parallel bias is added once, whole on each rank
        # an output gate (Qwen3-Next / Qwen3.5: per channel from q_proj; LFM3: one a head), split by heads like Q
        gate = output_gate_params(spec, d, h)
        # Q and O split by query heads; K and V hold this rank's KV heads (replicated when tp > G).
        parallel = Fraction(run.mixer_params or 0, tp)  # a mixer beside the attention (Falcon-H1), split by heads
        # a sparse layer's indexer (MiniMax-M3): its query heads split, its one key and the norms whole on each rank
        d_ix = spec.index_head_dim or 0
        index = Fraction(hidden * (spec.index_heads or 0) * d_ix, tp) + hidden * d_ix + 2 * d_ix if run.sparse else 0
        rank = Fraction(hidden * h * (d + vd) + gate + sink_params(spec, run), tp) + hidden * kv + bias + parallel
        return rank + index
    # NOTE: SSM / linear-attention mixers are split by heads too; their few whole tensors are ignored.
    return Fraction(attention_params(spec, run), tp)


@lru_cache(maxsize=256)
def reached_experts(experts: int, k: int, tokens: int) -> Fraction:
    """Expected distinct experts a layer touches for `tokens` tokens (params.expected_experts),
    computed once per step rather than per layer. Past a few thousand tokens the exact rational
    (1 - k/E)^tokens grows to millions of digits (8 s at 8M tokens), so it is evaluated in floats
    there: the miss probability is below 1e-12 of an expert by then."""
    if tokens <= 4096:
        return expected_experts(experts, k, tokens)
    return Fraction(experts * -math.expm1(tokens * math.log1p(-k / experts)))


def _layer_rank(
    spec: ModelSpec, moe: bool, run: LayerRun, tp: int, tokens: int | None, dp_attention: bool = False
) -> tuple[Fraction, Fraction, Fraction]:
    """(token mixer, other dense, expert) parameters of one layer on one rank: resident when
    `tokens` is None, else what one step over `tokens` tokens reads. With DP attention the mixer is
    whole on every rank (attention tensor parallelism 1)."""
    hidden = spec.hidden_size
    mixer = _mixer_rank(spec, run, 1 if dp_attention else tp)
    dense = Fraction(layer_norm_params(spec, run, moe))  # norms, whole
    inputs = per_layer_input_params(spec)  # Gemma 3n / 4: the per-layer gate and projection whole, LAuReL split
    dense += inputs.layer_whole + Fraction(inputs.layer_split, tp)
    experts = Fraction(0)
    if run.intermediate_size is not None:
        dense += Fraction(_mlp(spec, run.intermediate_size), tp)
    elif moe:
        one = expert_params(spec)
        dense += router_params(spec)  # the gate and LatentMoE's projections, whole
        width = spec.shared_expert_intermediate_size
        dense += Fraction(_mlp(spec, width), tp) + (hidden if spec.shared_expert_gate and width else 0)  # gate whole
        reached = spec.experts if tokens is None else reached_experts(spec.experts, spec.experts_per_token, tokens)
        experts = reached * Fraction(one, tp)
    else:
        dense += Fraction(_mlp(spec, spec.intermediate_size), tp)
    return mixer, dense, experts


def _ends(spec: ModelSpec, tp: int, stage: int, pp: int, tokens: int | None, dp_attention: bool = False) -> Fraction:
    """Embedding (first stage), final norm and LM head (last stage) on one rank."""
    table = Fraction(spec.vocab * spec.hidden_size, tp)  # vocab-parallel rows
    # NOTE: SGLang under DP attention builds the input embedding whole on every rank
    # (VocabParallelEmbedding(enable_tp=not is_dp_attention_enabled()) in its deepseek_v2.py);
    # the LM head stays vocabulary-parallel over the tp ranks.
    inp = Fraction(spec.vocab * spec.hidden_size) if dp_attention else table
    # NOTE: vLLM pads the vocabulary to a multiple of 64 before splitting it (pad_vocab_size in
    # vocab_parallel_embedding.py): under 64 rows, < 0.05% of any table here, so not modelled.
    out = Fraction(0)
    first, last = stage == 0, stage == pp - 1
    if first and tokens is None:
        # NOTE: weights outside the decoder (vision tower, encoder) are held, split like the rest,
        # but do not run for a generated token.
        out += extra_params(spec, tp)
    # Tied and on one stage, the input table is the LM head's: held and read once, below.
    if first and not (spec.tie_embeddings and pp == 1 and not dp_attention):
        # A step reads only its tokens' rows of the input table.
        rows = min(tokens, spec.vocab) * spec.hidden_size if tokens is not None else 0
        out += inp if tokens is None else Fraction(rows, 1 if dp_attention else tp)
    inputs = per_layer_input_params(spec)
    if first and inputs.table:
        # Gemma 3n / 4's per-layer table, vocab-parallel like the input one (a step reads its tokens' rows), and the
        # column-parallel projections (into its width; Gemma 3n's AltUp), the norm whole
        width = spec.num_layers * spec.per_layer_input
        held = inputs.table if tokens is None else min(tokens, spec.per_layer_vocab or spec.vocab) * width
        out += Fraction(held + inputs.model_split, tp) + inputs.model_whole
    if last:
        out += _head(spec, tp)
    return out


def _head(spec: ModelSpec, tp: int) -> Fraction:
    """The last stage's final norm(s) and its slice of the LM head (with GPT-J's bias, split like the rows)."""
    bias = spec.vocab if spec.lm_head_bias and not spec.tie_embeddings else 0
    return end_norm_params(spec) + Fraction(spec.vocab * spec.hidden_size + bias, tp)


def _stage_layers(spec: ModelSpec, start: int, end: int) -> list[tuple[LayerRun, bool, int]]:
    """Layers start .. end - 1 grouped by shape and by whether their MLP is routed experts."""
    groups: dict[tuple[LayerRun, bool], int] = {}
    layers, routed = spec.expanded_layers(), spec.routes_experts()
    for i in range(start, end):
        key = (layers[i], routed[i])
        groups[key] = groups.get(key, 0) + 1
    return [(run, moe, n) for (run, moe), n in groups.items()]


def _countable(spec: ModelSpec) -> None:
    if getattr(spec, "params_unknown", None) or spec.vocab_size is None:
        param_counts(spec)  # refuses, with the reason, a model whose parameters cannot be counted


def _rank_params(
    spec: ModelSpec, tp: int, stage: int, pp: int, tokens: int | None, dp_attention: bool = False
) -> Shard:
    start, end = pp_indices(spec.num_layers, stage, pp)
    zero = Fraction(0)
    if spec.params:
        # NOTE: an explicit count has no per-layer breakdown: a stage holds its share of layers.
        return Shard(zero, zero, Fraction(spec.params * (end - start), spec.num_layers * tp), zero)
    _countable(spec)
    mixers = dense = experts = zero
    for run, moe, n in _stage_layers(spec, start, end):
        m, d, e = _layer_rank(spec, moe, run, tp, tokens, dp_attention)
        mixers, dense, experts = mixers + n * m, dense + n * d, experts + n * e
    dense -= hash_bias_params(spec, start, end)
    return Shard(_ends(spec, tp, stage, pp, tokens, dp_attention), mixers, dense, experts)


def rank_weight_bytes_resident(
    spec: ModelSpec,
    tp: int = 1,
    stage: int = 0,
    pp: int = 1,
    dtype: str | None = None,
    dp_attention: bool = False,
) -> int:
    """Weight bytes one GPU of pipeline stage `stage` holds. With tied embeddings and pp > 1 the
    first and the last stage each hold the table (vLLM loads it on both). Expert parallelism does
    not change it: E / ep whole experts or a 1/tp slice of all E hold the same bytes."""
    return shard_bytes(spec, _rank_params(spec, tp, stage, pp, None, dp_attention), dtype)


def rank_read_parts(
    spec: ModelSpec,
    tp: int = 1,
    stage: int = 0,
    pp: int = 1,
    dtype: str | None = None,
    dp_attention: bool = False,
    narrow: bool = False,
) -> tuple[Fraction, Fraction, int, Fraction]:
    """What a step's weight reads on one GPU of a stage are made of, in bytes, computed once per
    stage: (what is read whatever the tokens, experts aside; one token's input-embedding row;
    MoE layers; one expert's slice). `narrow`: of those, only the groups stored below 16 bits."""
    zero = Fraction(0)
    per = shard_formats(spec, dtype)
    if narrow:
        per = Shard(*(b if b < 2 else zero for b in per))
    base = _rank_params(spec, tp, stage, pp, 1, dp_attention)
    if spec.params:
        return Fraction(sum((n * b for n, b in zip(base, per)), zero)), zero, 0, zero
    untied = not (spec.tie_embeddings and pp == 1 and not dp_attention)
    rows = Fraction(spec.hidden_size, 1 if dp_attention else tp) if stage == 0 and untied else zero
    if stage == 0 and spec.per_layer_input:  # and a row of Gemma 4's per-layer table a token
        rows += Fraction(spec.num_layers * spec.per_layer_input, tp)
    start, end = pp_indices(spec.num_layers, stage, pp)
    moe_layers = sum(n for _, moe, n in _stage_layers(spec, start, end) if moe)
    one = Fraction(expert_params(spec), tp) if moe_layers else zero
    fixed = (base.ends - rows) * per.ends + base.mixers * per.mixers + base.dense * per.dense
    return fixed, rows * per.ends, moe_layers, one * per.experts


def read_bytes(spec: ModelSpec, parts: tuple[Fraction, Fraction, int, Fraction], tokens: int, routed: int = 0) -> int:
    """Weight bytes read by a step over `tokens` tokens, from rank_read_parts; experts those `routed` tokens reach."""
    return _read_bytes(parts, min(tokens, spec.vocab_size or 0), spec.experts, spec.experts_per_token, routed or tokens)


@lru_cache(maxsize=4096)
def _read_bytes(parts: tuple[Fraction, Fraction, int, Fraction], rows: int, experts: int, k: int, tokens: int) -> int:
    # NOTE: cached: a serving simulation reads the same stage's bytes at the same few token counts
    # thousands of times, and the exact rational sums dominate its step timing
    fixed, row, moe_layers, one = parts
    total = fixed + row * rows
    if moe_layers:
        total += moe_layers * reached_experts(experts, k, tokens) * one
    return math.ceil(total)


def rank_weight_bytes_read(
    spec: ModelSpec, tokens: int, tp: int = 1, stage: int = 0, pp: int = 1, dtype: str | None = None
) -> int:
    """Weight bytes one GPU of stage `stage` reads in a forward step over `tokens` tokens: its
    slice of every dense matrix, the tokens' embedding rows, and its slice of the experts the
    tokens are expected to reach."""
    return read_bytes(spec, rank_read_parts(spec, tp, stage, pp, dtype), tokens)


def rank_compute_params(spec: ModelSpec, tp: int = 1, stage: int = 0, pp: int = 1) -> int:
    """Parameters one token multiplies through on one GPU of a stage (2 FLOPs each): its slice of
    the dense matrices and of the k routed experts, the whole replicated ones, the LM head slice on
    the last stage; the embedding lookup is not a multiply."""
    start, end = pp_indices(spec.num_layers, stage, pp)
    if spec.params:
        return math.ceil(Fraction(spec.params * (end - start), spec.num_layers * tp))
    _countable(spec)
    total = Fraction(0)
    for run, moe, n in _stage_layers(spec, start, end):
        mixer, dense, _ = _layer_rank(spec, moe, run, tp, 1)
        total += n * (mixer + dense)
        if moe:
            total += n * spec.experts_per_token * Fraction(expert_params(spec), tp)
    total -= hash_bias_params(spec, start, end)
    if stage == 0 and spec.per_layer_input:  # Gemma 3n / 4's column-parallel projections outside the layers
        total += Fraction(per_layer_input_params(spec).model_split, tp)
    if stage == pp - 1:
        total += _head(spec, tp)
    return math.ceil(total)


# --- communication ---------------------------------------------------------------------------


class Link(Result):
    """A scale-up link: one direction's bandwidth per GPU and a small-message latency floor."""

    name: str
    bandwidth_bytes_per_s: float
    latency_s: float
    mesh_peers: int | None = None  # a switchless full mesh: bandwidth split over this many peer links

    def group_bandwidth(self, group: int) -> float:
        """One direction's bandwidth a GPU can use to exchange with the other group - 1 GPUs of its
        group: all of it behind a switch (NVSwitch, a PCIe switch); on a full mesh only the links to
        those members, (group - 1) x bandwidth / peers (2 x MI300X: one 64 GB/s link, not 448)."""
        if self.mesh_peers is None:
            return self.bandwidth_bytes_per_s
        return self.bandwidth_bytes_per_s * min(max(group - 1, 1), self.mesh_peers) / self.mesh_peers


# NOTE: bandwidths are ONE direction per GPU (vendors quote the bidirectional sum: NVLink 4's
# "900 GB/s" is 450 GB/s each way), because a ring all-reduce sends and receives at once.
# The latency floor is the lowest published small-message all-reduce we read: 3.7 us for vLLM's
# custom all-reduce, 2 x H100, 512 B (sgl-project/sglang PR #2904 benchmark table). A ceiling must
# not overstate time, so that floor is used for every link, PCIe included (NCCL over PCIe is
# slower: 54 us for 8 B on 8 x RTX 3090, NVIDIA/nccl issue #1439).
_ALPHA = 3.7e-6
LINKS: dict[str, Link] = {
    "nvlink3": Link(name="NVLink 3", bandwidth_bytes_per_s=300e9, latency_s=_ALPHA),
    "nvlink4": Link(name="NVLink 4", bandwidth_bytes_per_s=450e9, latency_s=_ALPHA),
    "nvlink5": Link(name="NVLink 5", bandwidth_bytes_per_s=900e9, latency_s=_ALPHA),
    "infinity-fabric": Link(
        name="Infinity Fabric (MI300X)", bandwidth_bytes_per_s=448e9, latency_s=_ALPHA, mesh_peers=7
    ),
    "pcie3": Link(name="PCIe Gen3 x16", bandwidth_bytes_per_s=16e9, latency_s=_ALPHA),
    "pcie4": Link(name="PCIe Gen4 x16", bandwidth_bytes_per_s=32e9, latency_s=_ALPHA),
    "pcie5": Link(name="PCIe Gen5 x16", bandwidth_bytes_per_s=64e9, latency_s=_ALPHA),
}

_RATE = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_interconnect(text: str, what: str = "interconnect") -> Link:
    """A named link (nvlink4, pcie5, ...) or a one-direction bandwidth such as 200GB/s."""
    s = text.strip().lower().replace(" ", "").replace("_", "-")
    if s in LINKS:
        return LINKS[s]
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgt]?)b/s", s)
    if m and float(m.group(1)) > 0:
        rate = float(Fraction(m.group(1)) * _RATE[m.group(2)])
        return Link(name=f"{text.strip()} (each way)", bandwidth_bytes_per_s=rate, latency_s=_ALPHA)
    raise UsageError(
        f"{what} '{text}' is not a known link or a bandwidth",
        hint=f"use {', '.join(LINKS)} or a one-direction rate such as 200GB/s",
    )


def link_for(gpu: GpuSpec) -> Link | None:
    """The GPU preset's own scale-up link, or None when its preset has no sourced figure."""
    if not gpu.link_bandwidth_bytes_per_s:
        return None
    return Link(
        name=gpu.interconnect or "interconnect",
        bandwidth_bytes_per_s=gpu.link_bandwidth_bytes_per_s,
        latency_s=gpu.link_latency_s if gpu.link_latency_s is not None else _ALPHA,
        mesh_peers=gpu.link_mesh_peers,
    )


def allreduces_per_step(spec: ModelSpec) -> int:
    """All-reduces on a forward step's critical path under tensor parallelism: one after each
    row-parallel output, that is after every layer's token mixer (attention, MLA, SSM / linear
    attention) and after its MLP or MoE block. Most decoders have both (2 per layer); a hybrid whose
    layers are a mixer or an MLP alone (Nemotron-H's M / * / - blocks: one RowParallelLinear each
    in vLLM's nemotron_h.py) has one, and a no-op block (Nemotron NAS) none."""
    # NOTE: memoized per spec object (specs are never mutated): the serving simulation prices tens of
    # thousands of steps, and counting the layers each time was a third of `fit --tpot-ms`'s run.
    key = id(spec)
    hit = _ALLREDUCES.get(key)
    if hit is not None and hit[0]() is spec:
        return hit[1]
    n = sum(spec.sub_blocks())
    _ALLREDUCES[key] = (weakref.ref(spec, lambda _: _ALLREDUCES.pop(key, None)), n)
    return n


_ALLREDUCES: dict[int, tuple[weakref.ref[ModelSpec], int]] = {}


def allreduce_wire_bytes(message_bytes: int, tp: int) -> Fraction:
    """Bytes each rank sends (and receives) in a ring all-reduce: 2(tp - 1)/tp of the message
    (reduce-scatter, then all-gather)."""
    return Fraction(2 * (tp - 1) * message_bytes, tp)


def allreduce_seconds(message_bytes: int, tp: int, link: Link) -> float:
    """Ring all-reduce: alpha + 2(tp - 1)/tp x message / one direction's bandwidth; 0 at tp 1. On a
    full mesh the bandwidth is that of the links to the tp - 1 other members (Link.group_bandwidth)."""
    if tp <= 1:
        return 0.0
    return link.latency_s + float(allreduce_wire_bytes(message_bytes, tp)) / link.group_bandwidth(tp)


def send_seconds(message_bytes: int, link: Link) -> float:
    """A point-to-point send between pipeline stages (over one peer link on a full mesh)."""
    return link.latency_s + message_bytes / link.group_bandwidth(2)
