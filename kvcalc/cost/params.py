"""Pure parameter arithmetic: counts by component, total and active, and the bytes a step reads."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import NamedTuple

from kvcalc.errors import SpecError
from kvcalc.model.quant import LinearFormat
from kvcalc.model.spec import LayerKind, LayerRun, ModelSpec
from kvcalc.results import Result
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
    per_layer_table: int = 0  # Gemma 3n / 4's per-layer embedding table (looked up, like the input embedding)
    per_layer_inputs: int = 0  # the rest of per_layer_input_params: projections, gates, AltUp, LAuReL
    total: int
    active: int  # per token, both embeddings counted (Mistral's, Qwen's convention)
    active_excl_embedding: int  # less the input-embedding table (OpenAI's gpt-oss convention)


def attention_params(spec: ModelSpec, run: LayerRun) -> int:
    h, d, hidden = spec.run_heads(run), spec.run_head_dim(run), spec.hidden_size
    if run.kind == LayerKind.STATELESS:
        return run.mixer_params or 0
    if run.kind == LayerKind.MLA and spec.compressed_attention:
        return compressed_attention_params(spec, run)
    if run.kind == LayerKind.MLA:
        nope, rope = spec.qk_nope_head_dim or 0, spec.rope_dim
        v = spec.v_head_dim or nope
        if spec.q_lora_rank:
            q = hidden * spec.q_lora_rank + spec.q_lora_rank + spec.q_lora_rank * h * (nope + rope)
        else:
            q = hidden * h * (nope + rope)
        kv_a = hidden * (spec.latent_rank + rope) + spec.latent_rank
        kv_b = spec.latent_rank * h * (nope + v)
        # HY4's HYV4Attention gates its output (gate_proj: hidden -> heads x v_head_dim) and keeps a sink a head
        extras = output_gate_params(spec, v) + (h if spec.attention_sinks == "all" else 0)
        return q + kv_a + kv_b + h * v * hidden + extras + (0 if run.index_shared else indexer_params(spec))
    g = 0 if run.kv_shared else run.kv_heads or spec.kv_heads  # a KV-sharing layer has no k/v projections
    vd = spec.run_v_dim(run)
    kv = g * d + (0 if run.v_is_k else g * vd)  # Gemma 4's k_eq_v layers have k_proj only
    bias = (h * d + kv) if spec.attention_bias else 0
    bias += hidden if spec.o_proj_bias else 0
    gate = output_gate_params(spec, d, h)
    parallel = run.mixer_params or 0  # Falcon-H1's Mamba-2 mixer beside the attention
    index = sparse_indexer_params(spec) if run.sparse else 0
    return hidden * h * d + gate + hidden * kv + h * vd * hidden + bias + parallel + sink_params(spec, run) + index


def compressed_attention_params(spec: ModelSpec, run: LayerRun) -> int:
    """One DeepSeek-V4 attention layer (transformers 5.25 DeepseekV4Attention): q_a_proj to the query latent and its
    norm, q_b_proj to heads x head_dim, kv_proj to the one head_dim-wide entry and its norm, the grouped output
    (o_a_proj: o_groups blocks of heads x head_dim / o_groups -> o_lora_rank; o_b_proj to hidden), a sink a head;
    with its compressor (and a CSA layer's indexer)."""
    h, d, hidden, ql = spec.num_heads, spec.head_dim_effective, spec.hidden_size, spec.q_lora_rank or 0
    groups, rank = spec.o_groups or 1, spec.o_lora_rank or 0
    q = hidden * ql + ql + ql * h * d
    output = groups * rank * (h * d // groups) + groups * rank * hidden
    return q + hidden * d + d + output + h + compressor_params(spec, run)


def compressor_params(spec: ModelSpec, run: LayerRun) -> int:
    """DeepSeek-V4's compressor of one layer (DeepseekV4CSACompressor / HCACompressor): kv and gate projections to
    coff x head_dim (coff 2: a CSA layer's groups overlap; 1 for HCA), a position bias of ratio x coff x head_dim and
    a norm; a CSA layer's indexer (DeepseekV4Indexer) compresses its own index_head_dim keys the same way and adds
    q_b_proj from the query latent to index_heads x index_head_dim and weights_proj to one weight a head."""
    r = run.compress_ratio
    if r is None:
        return 0
    hidden, d = spec.hidden_size, spec.head_dim_effective
    coff = 2 if run.compress_topk else 1
    own = 2 * hidden * coff * d + r * coff * d + d
    if not run.compress_topk:
        return own
    heads, k = spec.index_heads or 0, spec.index_head_dim or 0
    return own + 2 * hidden * 2 * k + r * 2 * k + k + (spec.q_lora_rank or 0) * heads * k + hidden * heads


def hyper_connection_params(spec: ModelSpec) -> int:
    """DeepSeek-V4's hyper-connections in one layer (DeepseekV4HyperConnection, one before attention and one before
    the MLP): fn maps the hc_mult streams to (2 + N) x N mixing weights, with a bias and 3 scales; 0 without."""
    n = spec.hc_mult
    return 2 * ((2 + n) * n * n * spec.hidden_size + (2 + n) * n + 3) if n else 0


def sparse_indexer_params(spec: ModelSpec) -> int:
    """A sparse self-attention layer's indexer (SGLang 0.5.23 minimax_m3.py, index values disabled): index_qkv_proj
    from the hidden state to index_heads query heads and one key, each index_head_dim wide, and their norms."""
    heads, d = spec.index_heads or 0, spec.index_head_dim or 0
    return spec.hidden_size * (heads + 1) * d + 2 * d


def output_gate_rows(spec: ModelSpec, heads: int, head_dim: int) -> int:
    """Output rows of a self-attention layer's output gate over `heads` query heads, each a projection of the hidden
    state: transformers Qwen3NextAttention's q_proj is 2 x heads x head_dim wide (a gate a channel); Lfm3Attention's
    g_proj gives one a head (hidden -> heads); 0 without a gate."""
    if spec.attn_output_gate == "head":
        return heads
    return heads * head_dim if spec.attn_output_gate else 0


def output_gate_params(spec: ModelSpec, head_dim: int, heads: int | None = None) -> int:
    """A layer's output gate over `heads` query heads (the model's where not given)."""
    return spec.hidden_size * output_gate_rows(spec, heads or spec.num_heads, head_dim)


def sink_params(spec: ModelSpec, run: LayerRun) -> int:
    """A self-attention layer's sink logits, one per query head (gpt-oss; MiMo-V2-Flash's on sliding layers)."""
    every = spec.attention_sinks == "all" and run.kind.self_head_kv
    sinks = every or (spec.attention_sinks == "sliding" and run.kind == LayerKind.SLIDING)
    return spec.run_heads(run) if sinks else 0


def layer_norm_params(spec: ModelSpec, run: LayerRun, routed: bool) -> int:
    """One layer's norm weights (and LayerNorm biases): one before each sub-block (one for both when they run side
    by side), and one after it too with sandwich norms; the query and key norms of a self-attention layer (one
    head_dim wide each, or over all its heads)."""
    blocks = spec.blocks_of(run, routed)
    blocks = min(blocks, 1) if spec.parallel_block else blocks * (2 if spec.sandwich_norms else 1)
    norms = blocks * spec.hidden_size * (2 if spec.norm_bias else 1)
    if spec.qk_norm and run.kind.self_head_kv:
        d = spec.run_head_dim(run)
        norms += 2 * d if spec.qk_norm == "head" else (spec.run_heads(run) + (run.kv_heads or spec.kv_heads)) * d
    # Kimi-K3's attention residual (SGLang kimi_k3.py): self_attention_res_norm, mlp_res_norm and their [1, hidden]
    # projections, whatever the layer runs
    return norms + (4 * spec.hidden_size if spec.attention_residual else 0) + hyper_connection_params(spec)


def end_norm_params(spec: ModelSpec) -> int:
    """The norms outside the layers: the final one, and BLOOM's on the embeddings."""
    residual = 2 * spec.hidden_size if spec.attention_residual else 0  # Kimi-K3's output_attn_res_norm and _proj
    n = spec.hc_mult  # DeepSeek-V4's hc_head: the streams' mix before the final norm
    residual += n * n * spec.hidden_size + n + 1 if n else 0
    return (1 + int(spec.embedding_norm)) * spec.hidden_size * (2 if spec.norm_bias else 1) + residual


def router_params(spec: ModelSpec) -> int:
    """One MoE layer's routing weights: the gate (with a bias per expert where the family has one) and
    LatentMoE's projections."""
    return (spec.hidden_size + int(spec.router_bias)) * spec.experts + latent_proj_params(spec)


def hash_bias_params(spec: ModelSpec, start: int, end: int) -> int:
    """The correction biases router_params counts that layers start..end-1 lack: DeepSeek-V4's first hash_layers
    route by token id (a table of integers, not parameters) where the others add a bias per expert."""
    return spec.experts * max(0, min(end, spec.hash_layers) - start) if spec.router_bias else 0


def shared_expert_params(spec: ModelSpec) -> int:
    """One MoE layer's shared experts as one MLP, with their gate where the family has one."""
    width = spec.shared_expert_intermediate_size
    return _mlp(spec, width) + (spec.hidden_size if spec.shared_expert_gate and width else 0)


def indexer_params(spec: ModelSpec) -> int:
    """DeepSeek Sparse Attention's lightning indexer in one MLA layer (0 without one): wq_b from the
    query latent to index_heads x index_head_dim, wk from the hidden state to one index_head_dim key
    with its LayerNorm (weight and bias), and weights_proj from the hidden state to a weight per head
    (DeepSeek-V3.2's inference/model.py Indexer; transformers' GLM-5 the same)."""
    if spec.index_heads is None or spec.index_head_dim is None:
        return 0
    hd, q_in = spec.index_heads * spec.index_head_dim, spec.q_lora_rank or spec.hidden_size
    return (
        q_in * hd
        + spec.hidden_size * spec.index_head_dim
        + 2 * spec.index_head_dim
        + spec.hidden_size * spec.index_heads
    )


def _mlp(spec: ModelSpec, intermediate: int, width: int | None = None) -> int:
    """An MLP of `intermediate` between `width`-wide activations (default the hidden size)."""
    width = width or spec.hidden_size
    weights = (3 if spec.mlp_gated else 2) * width * intermediate
    if not spec.mlp_bias or not intermediate:
        return weights
    # NOTE: gate and up (or fc1) biases are intermediate-wide, the down (fc2) bias width-wide.
    return weights + (2 if spec.mlp_gated else 1) * intermediate + width


def expert_params(spec: ModelSpec) -> int:
    """One routed expert's parameters, in the experts' width (spec.expert_width)."""
    return _mlp(spec, spec.expert_intermediate_size or spec.intermediate_size, spec.expert_width)


def latent_proj_params(spec: ModelSpec) -> int:
    """LatentMoE's projections into the experts' width and back (and Kimi-K3's norm there), per MoE layer, whole on
    every rank (vLLM nemotron_h.py: ReplicatedLinear fc1_latent_proj / fc2_latent_proj); 0 without them."""
    latent = spec.moe_latent_size
    if not latent:
        return 0
    norm = latent if spec.moe_latent_norm else 0  # Kimi-K3's routed_expert_norm
    return 2 * spec.hidden_size * latent + ((latent + spec.hidden_size) if spec.mlp_bias else 0) + norm


class LayerInputs(NamedTuple):
    """Gemma 3n / 4's per-layer input embeddings, with Gemma 3n's AltUp and LAuReL, in parameters (0s without), by
    where vLLM keeps them (gemma3n.py, gemma4.py): split over the tensor-parallel ranks or whole on each."""

    table: int  # the per-layer token table (VocabParallelEmbedding): looked up, not multiplied
    model_split: int  # outside the layers: the projection into the per-layer width; AltUp's (un)embedding projections
    model_whole: int  # outside the layers: the norm after that projection
    layer_split: int  # one layer's LAuReL low-rank pair (column- and row-parallel)
    layer_whole: int  # one layer's gate to and projection from the per-layer width and their norm; AltUp's
    #                   coefficients, modality router, router norm and output scale; LAuReL's norm

    @property
    def model(self) -> int:
        return self.model_split + self.model_whole

    @property
    def layer(self) -> int:
        return self.layer_split + self.layer_whole


def per_layer_input_params(spec: ModelSpec) -> LayerInputs:
    """transformers Gemma4TextModel / Gemma3nTextModel: a table of per_layer_vocab rows x num_layers x per_layer_input;
    per_layer_model_projection (hidden -> num_layers x per_layer_input) and its norm; in each layer per_layer_input_gate
    and per_layer_projection with post_per_layer_input_norm. Gemma 3n adds AltUp over altup_inputs streams
    (altup_projections and altup_unembed_projections, altup_inputs - 1 of hidden x hidden each; per layer the
    correction (n x n) and prediction (n^2 x n) coefficients, the modality router (n x hidden), router_norm and
    correct_output_scale) and LAuReL (linear_left / linear_right of laurel_rank, post_laurel_norm)."""
    p, n, h = spec.per_layer_input, spec.num_layers, spec.hidden_size
    if not p:
        return LayerInputs(0, 0, 0, 0, 0)
    a, r = spec.altup_inputs, spec.laurel_rank
    altup_layer = a * a + a**3 + a * h + 2 * h if a else 0
    return LayerInputs(
        table=(spec.per_layer_vocab or spec.vocab) * n * p,
        model_split=h * n * p + (2 * (a - 1) * h * h if a else 0),
        model_whole=p,
        layer_split=2 * h * r,
        layer_whole=2 * h * p + h + altup_layer + (h if r else 0),
    )


WEIGHTS_HINT = "the cache size needs no parameters; for weights use a preset or a complete config.json"


def counted_vocab(spec: ModelSpec) -> int:
    """vocab_size, refused by name where a config leaves it out (the parameters and the engines' weights need it)."""
    if spec.vocab_size is None:
        raise SpecError(f"model '{spec.name}': parameters unknown: no vocab_size", hint=WEIGHTS_HINT)
    return spec.vocab_size


def param_counts(spec: ModelSpec) -> ParamCounts:
    """Parameters from the architecture (an explicit `params` is not consulted here)."""
    if spec.params_unknown:
        raise SpecError(f"model '{spec.name}': parameters unknown: {spec.params_unknown}", hint=WEIGHTS_HINT)
    vocab, hidden = counted_vocab(spec), spec.hidden_size
    embedding = vocab * hidden
    lm_head = 0 if spec.tie_embeddings else embedding + (vocab if spec.lm_head_bias else 0)
    attention = dense = router = shared = experts = moe_layers = 0
    norms = end_norm_params(spec)  # the final norm, then each layer's
    one_expert = expert_params(spec) if spec.is_moe else 0
    for i, (run, routed) in enumerate(zip(spec.expanded_layers(), spec.routes_experts())):
        attention += attention_params(spec, run)
        norms += layer_norm_params(spec, run, routed)
        if run.intermediate_size is not None:
            dense += _mlp(spec, run.intermediate_size)
        elif routed:
            moe_layers += 1
            router += router_params(spec) - hash_bias_params(spec, i, i + 1)
            experts += spec.experts * one_expert
            shared += shared_expert_params(spec)
        else:
            dense += _mlp(spec, spec.intermediate_size)
    extra = int(extra_params(spec))
    inputs = per_layer_input_params(spec)
    table, per_layer = inputs.table, inputs.model + inputs.layer * spec.num_layers
    total = embedding + lm_head + attention + dense + router + shared + experts + norms + extra + table + per_layer
    # NOTE: the extra weights (vision tower, encoder) do not run for a generated token.
    active = total - extra - experts + moe_layers * spec.experts_per_token * one_expert
    return ParamCounts(
        embedding=embedding,
        lm_head=lm_head,
        attention=attention,
        dense_mlp=dense,
        router=router,
        shared_experts=shared,
        experts=experts,
        expert_params=one_expert,
        moe_layers=moe_layers,
        norms=norms,
        extra=extra,
        per_layer_table=table,
        per_layer_inputs=per_layer,
        total=total,
        active=active,
        active_excl_embedding=active - (embedding if lm_head else 0) - table,
    )


def extra_params(spec: ModelSpec, tp: int = 1) -> Fraction:
    """Weights outside the decoder on one of `tp` ranks: the preset's or reader's extra_params (split
    over tp), else a vision tower and projector where the family's layout is known
    (quant.Checkpoint.vision_params, as vLLM builds it: most of it split, the rest replicated)."""
    ck = spec.checkpoint
    if not spec.extra_params and ck and ck.vision_params:
        split, replicated = ck.vision_params
        return Fraction(split, tp) + replicated
    return Fraction(spec.extra_params, tp)


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


class Shard(NamedTuple):
    """Parameters (of the model, or of one rank) grouped by the format they are stored in."""

    ends: Fraction | int  # embedding, final norm, LM head: 16-bit unless the checkpoint quantizes the LM head
    mixers: Fraction | int  # attention / SSM projections: 16-bit when an ignore list keeps attention so
    # dense MLPs and shared experts; also the norms and routers, which vLLM keeps 16-bit but are counted
    # in the linear format here (under 0.2% of any model's bytes)
    dense: Fraction | int
    experts: Fraction | int  # routed experts


def per_param_bytes(fmt: LinearFormat) -> Fraction:
    """Bytes per weight element of a stored format, with its group or block scales (and zero points).
    One scale per output row or per tensor adds under 0.2% at these widths and is not counted."""
    per = Fraction(fmt.weight_bits, 8)
    if fmt.scale == "group" and fmt.group_size:
        per += Fraction(fmt.scale_bytes, fmt.group_size)
        per += Fraction(fmt.weight_bits, 8 * fmt.group_size) if fmt.zero_points else 0
    elif fmt.scale == "block" and fmt.group_size:
        per += Fraction(fmt.scale_bytes, fmt.group_size**2)
    return per


def shard_formats(spec: ModelSpec, dtype: str | None) -> Shard:
    """Bytes per parameter of each Shard group, from the weight format as vLLM stores it
    (weights.quantization_of): with a quantized format (a checkpoint's quantization_config, or
    `--dtype fp8|int8|int4|mxfp4|nvfp4`) the linear layers take it, scales included, while the
    embedding and LM head stay in the activation dtype (vLLM quantizes LinearBase layers, not
    VocabParallelEmbedding / ParallelLMHead, unless the checkpoint says so); attention stays 16-bit
    when the checkpoint's ignore list keeps it so. A float dtype applies to every weight."""
    from kvcalc.model.formats import quantization_of

    if dtype is not None:  # NOTE: the GGUF tables only for a --dtype (start-up time: roofline, generate)
        from kvcalc.model.gguf.mix import is_ftype, mix_shard

        if is_ftype(dtype):
            return Shard(*mix_shard(spec, str(dtype).lower()))  # a llama.cpp quant: its per-tensor mix
    floats = ("fp32", "bf16", "fp16")
    dense_dtype, expert_dtype = weight_dtypes(spec, dtype)
    q = quantization_of(spec, dtype)
    if q is None and dense_dtype in floats and expert_dtype in floats:
        a, e = Fraction(dtype_bits(dense_dtype), 8), Fraction(dtype_bits(expert_dtype), 8)
        return Shard(a, a, a, e)
    declared = spec.checkpoint.declared_dtype if spec.checkpoint else None
    act = (
        dtype if dtype in floats else spec.dtype if spec.dtype in floats else declared if declared in floats else "bf16"
    )
    a = Fraction(dtype_bits(act), 8)
    linear = per_param_bytes(q.linear) if q and q.linear else a
    mixers = per_param_bytes(q.attention) if q and q.attention else linear if q is None or q.attention_quantized else a
    experts = per_param_bytes(q.experts) if q and q.experts else linear
    return Shard(linear if q and q.lm_head_quantized else a, mixers, linear, experts)


def shard_bytes(spec: ModelSpec, params: Shard, dtype: str | None) -> int:
    """Bytes of parameters grouped as a Shard, each group in its stored format."""
    per = shard_formats(spec, dtype)
    return math.ceil(sum(n * b for n, b in zip(params, per)))


def weight_bytes_resident(spec: ModelSpec, dtype: str | None = None) -> int:
    """All weights held in memory (embedding, LM head, every expert), each group in its format."""
    if spec.params:
        return math.ceil(_bytes(spec.params, weight_dtypes(spec, dtype)[0]))
    c = param_counts(spec)
    # NOTE: weights outside the decoder (vision tower, encoder) stay 16-bit like the embedding.
    ends = c.embedding + c.lm_head + end_norm_params(spec) + c.extra
    return shard_bytes(spec, Shard(ends, c.attention, _other_dense(spec, c), c.experts), dtype)


def _other_dense(spec: ModelSpec, c: ParamCounts) -> int:
    """Dense MLPs, shared experts, routers and the layers' norms (the final norm is with the ends)."""
    return c.dense_mlp + c.shared_experts + c.router + c.norms - end_norm_params(spec)


def weight_bytes_read(spec: ModelSpec, tokens: int, dtype: str | None = None) -> int:
    """Weight bytes one forward step over `tokens` tokens reads from memory.

    The LM head and every dense weight are read once; the input embedding only for the
    tokens' rows (unless tied, when it is the LM head); routed experts only as many as the
    tokens are expected to reach.
    """
    if spec.params:
        # NOTE: an explicit count (the textbook 7b / 70b) is what a step reads, as THEORY.md assumes.
        return math.ceil(_bytes(spec.params, weight_dtypes(spec, dtype)[0]))
    c = param_counts(spec)
    hidden = spec.hidden_size
    ends = (c.lm_head + min(tokens, spec.vocab) * hidden if c.lm_head else c.embedding) + end_norm_params(spec)
    routed = Fraction(0)
    if spec.is_moe:
        routed = c.moe_layers * expected_experts(spec.experts, spec.experts_per_token, tokens) * c.expert_params
    return shard_bytes(spec, Shard(ends, c.attention, _other_dense(spec, c), routed), dtype)
