"""Pure parameter arithmetic: counts by component, total and active, and the bytes a step reads."""

from __future__ import annotations

import math
from fractions import Fraction

from kvcalc.errors import SpecError
from kvcalc.results import Result
from kvcalc.specs import LayerKind, LayerRun, ModelSpec
from kvcalc.units import dtype_bits


class ParamCounts(Result):
    embedding: int
    lm_head: int  # 0 when tied to the embedding
    attention: int  # all layers' token mixers: attention, MLA, SSM / linear attention
    dense_mlp: int
    router: int
    shared_experts: int
    experts: int  # all routed experts of all MoE layers
    expert_params: int  # one routed expert of one layer
    moe_layers: int
    norms: int
    extra: int  # outside the decoder layers: vision tower, encoder, position tables
    total: int
    active: int  # per token, both embeddings counted (Mistral's, Qwen's convention)
    active_excl_embedding: int  # less the input-embedding table (OpenAI's gpt-oss convention)


def attention_params(spec: ModelSpec, run: LayerRun) -> int:
    h, d, hidden = spec.num_heads, spec.head_dim_effective, spec.hidden_size
    if run.kind == LayerKind.STATELESS:
        return run.mixer_params or 0
    if run.kind == LayerKind.MLA:
        nope, rope = spec.qk_nope_head_dim or 0, spec.qk_rope_head_dim
        v = spec.v_head_dim or nope
        if spec.q_lora_rank:
            q = hidden * spec.q_lora_rank + spec.q_lora_rank + spec.q_lora_rank * h * (nope + rope)
        else:
            q = hidden * h * (nope + rope)
        kv_a = hidden * (spec.kv_lora_rank + rope) + spec.kv_lora_rank
        kv_b = spec.kv_lora_rank * h * (nope + v)
        return q + kv_a + kv_b + h * v * hidden
    g = 0 if run.kv_shared else run.kv_heads or spec.kv_heads  # a KV-sharing layer has no k/v projections
    bias = (h * d + 2 * g * d) if spec.attention_bias else 0
    bias += hidden if spec.o_proj_bias else 0
    gate = hidden * h * d if spec.attn_output_gate else 0  # transformers Qwen3NextAttention: q_proj is 2·h·d wide
    return hidden * h * d + gate + 2 * hidden * g * d + h * d * hidden + bias


def _mlp(spec: ModelSpec, intermediate: int) -> int:
    weights = (3 if spec.mlp_gated else 2) * spec.hidden_size * intermediate
    if not spec.mlp_bias or not intermediate:
        return weights
    # NOTE: gate and up (or fc1) biases are intermediate-wide, the down (fc2) bias hidden-wide.
    return weights + (2 if spec.mlp_gated else 1) * intermediate + spec.hidden_size


def param_counts(spec: ModelSpec) -> ParamCounts:
    """Parameters from the architecture (an explicit `params` is not consulted here)."""
    if spec.params_unknown or spec.vocab_size is None:
        raise SpecError(
            f"model '{spec.name}': parameters unknown: {spec.params_unknown or 'no vocab_size'}",
            hint="the cache size needs no parameters; for weights use a preset or a complete config.json",
        )
    hidden = spec.hidden_size
    embedding = spec.vocab_size * hidden
    lm_head = 0 if spec.tie_embeddings else embedding
    attention = dense = router = shared = experts = moe_layers = 0
    expert_params = _mlp(spec, spec.expert_intermediate_size or spec.intermediate_size) if spec.is_moe else 0
    for i, run in enumerate(spec.expanded_layers()):
        attention += attention_params(spec, run)
        if run.intermediate_size is not None:
            dense += _mlp(spec, run.intermediate_size)
        elif spec.is_moe and i >= spec.dense_layers:
            moe_layers += 1
            router += hidden * spec.experts
            experts += spec.experts * expert_params
            shared += _mlp(spec, spec.shared_expert_intermediate_size)
        else:
            dense += _mlp(spec, spec.intermediate_size)
    norms = (2 * spec.num_layers + 1) * hidden
    extra = spec.extra_params
    total = embedding + lm_head + attention + dense + router + shared + experts + norms + extra
    # NOTE: the extra weights (vision tower, encoder) do not run for a generated token.
    active = total - extra - experts + moe_layers * spec.experts_per_token * expert_params
    return ParamCounts(
        embedding=embedding,
        lm_head=lm_head,
        attention=attention,
        dense_mlp=dense,
        router=router,
        shared_experts=shared,
        experts=experts,
        expert_params=expert_params,
        moe_layers=moe_layers,
        norms=norms,
        extra=extra,
        total=total,
        active=active,
        active_excl_embedding=active - (embedding if lm_head else 0),
    )


def total_params(spec: ModelSpec) -> int:
    return spec.params or param_counts(spec).total


def compute_params(spec: ModelSpec) -> int:
    """Parameters one token multiplies through (2 FLOPs each): active, less the embedding lookup."""
    if spec.params:
        return spec.params
    return param_counts(spec).active_excl_embedding


def expected_experts(experts: int, k: int, tokens: int) -> Fraction:
    """Expected distinct experts a layer touches for `tokens` tokens under uniform routing."""
    # NOTE: each token picks k of E experts; an expert is missed by one token with
    # probability 1 - k/E, by all of them with (1 - k/E)^tokens.
    # NOTE: exact for up to 256 tokens; beyond, the exact power has hundreds of thousands of digits
    # (a batch of 1m took minutes), so it is taken in floating point: log1p/expm1 keep the missed
    # share accurate when it is tiny.
    if tokens <= 256:
        return experts * (1 - (1 - Fraction(k, experts)) ** tokens)
    return Fraction(experts * -math.expm1(tokens * math.log1p(-k / experts)))


def _bytes(params: int | Fraction, dtype: str) -> Fraction:
    return params * dtype_bits(dtype) / 8


def weight_dtypes(spec: ModelSpec, dtype: str | None) -> tuple[str, str]:
    """(dense, expert) weight dtypes: an explicit dtype applies to all weights."""
    if dtype is None:
        return spec.dtype, spec.expert_dtype or spec.dtype
    return dtype, dtype


def weight_bytes_resident(spec: ModelSpec, dtype: str | None = None) -> int:
    """All weights held in memory (embedding, LM head, every expert)."""
    dtype, expert_dtype = weight_dtypes(spec, dtype)
    if spec.params:
        return math.ceil(_bytes(spec.params, dtype))
    c = param_counts(spec)
    return math.ceil(_bytes(c.total - c.experts, dtype) + _bytes(c.experts, expert_dtype))


def weight_bytes_read(spec: ModelSpec, tokens: int, dtype: str | None = None) -> int:
    """Weight bytes one forward step over `tokens` tokens reads from memory.

    The LM head and every dense weight are read once; the input embedding only for the
    tokens' rows (unless tied, when it is the LM head); routed experts only as many as the
    tokens are expected to reach.
    """
    dtype, expert_dtype = weight_dtypes(spec, dtype)
    if spec.params:
        # NOTE: an explicit count (the textbook 7b / 70b) is what a step reads, as THEORY.md assumes.
        return math.ceil(_bytes(spec.params, dtype))
    c = param_counts(spec)
    dense = (
        c.total
        - c.extra
        - c.experts
        - c.embedding
        + (min(tokens, spec.vocab_size) * spec.hidden_size if c.lm_head else c.embedding)
    )
    routed = Fraction(0)
    if spec.is_moe:
        routed = c.moe_layers * expected_experts(spec.experts, spec.experts_per_token, tokens) * c.expert_params
    return math.ceil(_bytes(dense, dtype) + _bytes(routed, expert_dtype))
