"""Pydantic input models: the model architecture (ModelSpec, LayerRun); the accelerator is in hardware/gpu.py."""

# NOTE: no `from __future__ import annotations` in the Pydantic model modules: Pydantic would compile
# every field's annotation string at import (about 2 ms of start-up over results, specs and quant).
from collections import Counter
from enum import Enum
from functools import cached_property
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kvcalc.errors import SpecError, UsageError
from kvcalc.model.quant import Checkpoint
from kvcalc.model.validate import build, check_compressed
from kvcalc.units import normalize_dtype

Pos = Annotated[int, Field(gt=0)]
NonNeg = Annotated[int, Field(ge=0)]


class LayerKind(str, Enum):
    FULL = "full"  # holds every token of the context
    SLIDING = "sliding"  # holds the last W tokens
    CHUNKED = "chunked"  # attends within chunks of C tokens: holds at most C
    MLA = "mla"  # holds a compressed latent (kv_lora_rank + qk_rope_head_dim) per token
    STATELESS = "stateless"  # no per-token KV: SSM / linear attention (constant state) or no-op
    CROSS = "cross"  # cross-attention: holds the encoder's (or the images') tokens, not the text's

    @property
    def windowed(self) -> bool:
        """Sliding or chunked: holds at most its window of tokens."""
        return self in (LayerKind.SLIDING, LayerKind.CHUNKED)

    @property
    def self_head_kv(self) -> bool:
        """Self-attention with K and V per KV head (full, sliding, chunked): the kinds whose layers may have
        their own KV heads, head width, shared K/V or V = K, and that MLA or a window can replace."""
        return self in (LayerKind.FULL, LayerKind.SLIDING, LayerKind.CHUNKED)

    @property
    def per_head_kv(self) -> bool:
        """K and V cached per KV head: self-attention (self_head_kv) or cross-attention."""
        return self.self_head_kv or self == LayerKind.CROSS

    @property
    def attends(self) -> bool:
        """Scores queries against keys: per-head K/V or MLA's latent."""
        return self.per_head_kv or self == LayerKind.MLA


class LayerRun(BaseModel):
    """`count` consecutive layers of one kind. A model's pattern is a list of runs."""

    # NOTE: not deferred: ModelSpec's validator then reuses this one, where a deferred LayerRun was
    # built twice, inside ModelSpec's and again when expanded_layers made the first run.
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: LayerKind = LayerKind.FULL
    count: Pos = 1
    window_tokens: Pos | None = None
    kv_heads: Pos | None = None
    # A recurrent mixer's state per sequence: a stateless layer's, or that of a mixer beside the attention (Falcon-H1).
    state_bytes: NonNeg = 0
    # The same state in elements (conv window + SSM state), for an engine that keeps its own dtypes (llama.cpp: f32;
    # SGLang: a float32 SSM state, bf16 conv windows), and of them the SSM / linear-attention state's (the rest are
    # conv columns); 0: not known apart from state_bytes, which is then taken as it is.
    state_elements: NonNeg = 0
    state_recurrent_elements: NonNeg = 0
    # A stateless layer's token-mixer parameters; on an attention layer, those of the mixer beside its attention.
    mixer_params: NonNeg | None = None
    # Of mixer_params, a Mamba-1 mixer's A (A_log: d_inner x d_state), which vLLM builds in float32 whatever the
    # model dtype (engines/fp32.py); 0 for other mixers.
    ssm_a_params: NonNeg = 0
    intermediate_size: NonNeg | None = None
    # Cross-attention only: encoder / image tokens each sequence holds here; None: as many as the sequence's own.
    cross_tokens: NonNeg | None = 0
    # Attends over an earlier layer's K and V (Hunyuan's cross-layer attention): caches nothing itself.
    kv_shared: bool = False
    # DeepSeek Sparse Attention: an MLA layer reusing an earlier layer's top-k (GLM-5.2's "shared"): no indexer keys.
    index_shared: bool = False
    # A self-attention layer that attends the indexer's top index_topk tokens only, scoring every cached token with
    # one index key a token of its own (MiniMax-M3's block-sparse layers; an MLA model's DSA layers need no flag).
    sparse: bool = False
    # An attention layer's own head width (Gemma 4's full layers: global_head_dim, queries, keys and values alike) and
    # query heads (Laguna's num_attention_heads_per_layer); None: the model's.
    head_dim: Pos | None = None
    num_heads: Pos | None = None
    # Its values are its keys (Gemma 4's attention_k_eq_v): no v_proj; engines still cache K and V (vLLM: k_proj twice).
    v_is_k: bool = False
    # DeepSeek-V4: an MLA layer with a window keeps its last W entries, with compress_ratio r one per r tokens besides;
    # compress_topk: it reads the indexer's top index_topk of those (CSA, an index key an entry), else all (HCA).
    compress_ratio: Pos | None = None
    compress_topk: bool = False

    @property
    def latent_window(self) -> bool:
        """A DeepSeek-V4 layer: MLA-kind entries over a window (and compressed ones, with compress_ratio)."""
        return self.kind == LayerKind.MLA and self.window_tokens is not None

    @property
    def parallel_mixer(self) -> bool:
        """An attention layer with a recurrent mixer running beside it (Falcon-H1)."""
        return self.kind != LayerKind.STATELESS and bool(self.state_bytes or self.mixer_params)

    @property
    def window(self) -> int:
        """The window of a sliding or chunked layer (the validator below makes sure it is set)."""
        return _required(self.window_tokens, f"a {self.kind.value} layer's window_tokens")

    @model_validator(mode="after")
    def _window_matches_kind(self) -> "LayerRun":
        windowed = self.kind.windowed
        if windowed and self.window_tokens is None:
            raise ValueError(f"a {self.kind.value} layer needs window_tokens")
        if not windowed and self.window_tokens is not None and self.kind != LayerKind.MLA:
            raise ValueError(f"window_tokens is only for sliding, chunked or MLA layers, not {self.kind.value}")
        if self.compress_ratio is not None and not (self.kind == LayerKind.MLA and self.window_tokens):
            raise ValueError("compress_ratio is only for MLA layers with a window (DeepSeek-V4's)")
        if self.compress_topk and self.compress_ratio is None:
            raise ValueError("compress_topk needs compress_ratio")
        if self.ssm_a_params > (self.mixer_params or 0) or self.state_recurrent_elements > self.state_elements:
            raise ValueError("ssm_a_params / state_recurrent_elements are parts of mixer_params / state_elements")
        if (self.state_bytes or self.state_elements or self.mixer_params) and not (
            self.kind == LayerKind.STATELESS or self.kind.self_head_kv
        ):
            raise ValueError(
                "state_bytes / mixer_params are for stateless (SSM / linear-attention) layers, or self-attention "
                "layers with a mixer beside them"
            )
        if self.kv_shared and not self.kind.self_head_kv:
            raise ValueError("kv_shared is only for attention layers")
        if self.index_shared and self.kind != LayerKind.MLA:
            raise ValueError("index_shared is only for MLA layers")
        if self.sparse and not self.kind.self_head_kv:
            raise ValueError("sparse is only for self-attention layers (full, sliding, chunked); MLA's is DSA")
        if (self.head_dim is not None or self.num_heads is not None or self.v_is_k) and not self.kind.self_head_kv:
            raise ValueError("head_dim / num_heads / v_is_k are only for attention layers (full, sliding, chunked)")
        if self.cross_tokens != 0 and self.kind != LayerKind.CROSS:
            raise ValueError("cross_tokens is only for cross-attention layers")
        return self


class ModelSpec(BaseModel):
    """A decoder's architecture: what the cache, parameter and roofline arithmetic need."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    name: str = Field(min_length=1)
    aliases: list[str] = []
    description: str | None = None
    source: str | None = None

    num_layers: Pos
    hidden_size: Pos
    num_heads: Pos
    num_kv_heads: Pos | None = None  # absent means MHA (as many KV heads as query heads)
    head_dim: Pos | None = None  # absent means hidden_size / num_heads
    intermediate_size: NonNeg = 0
    vocab_size: Pos | None = None  # None: not in the config; parameters are then unknown
    tie_embeddings: bool = False
    mlp_gated: bool = True
    attention_bias: bool = False  # q, k, v biases
    o_proj_bias: bool = False
    attn_output_gate: bool | Literal["head"] = False  # from q_proj (Qwen3-Next); "head": one a head (LFM3)
    tp_group: Pos | None = None  # tp must divide it: Ling 2.5's group_norm_size, as vLLM and SGLang assert
    mlp_bias: bool = False  # biases on every MLP / expert projection (gpt-oss, BART, Whisper)
    # Vectors beside the matrices, for exact parameter counts (hf/vectors.py says which families have them):
    # query and key norms in each self-attention layer, "head" one head_dim wide each (Qwen3, Gemma 3) or "full"
    # heads x head_dim and KV heads x head_dim (OLMo 2, MiniMax-M2); a second norm after each sub-block (Gemma,
    # GLM-4); a sink logit per query head ("sliding": on sliding layers only); a bias per expert on each router
    # (gpt-oss's router bias, DeepSeek-V3's correction bias); a hidden -> 1 gate on the shared expert (Qwen2-MoE);
    # LayerNorms' biases; one norm before attention and MLP side by side (GPT-J, Cohere); an LM-head bias (GPT-J);
    # a norm on the embeddings (BLOOM); Kimi-K3's attention residual (2 norms, 2 [1, hidden] projections a layer and
    # a norm and a projection at the head).
    qk_norm: Literal["head", "full"] | None = None
    sandwich_norms: bool = False
    norm_bias: bool = False
    parallel_block: bool = False
    lm_head_bias: bool = False
    embedding_norm: bool = False
    attention_sinks: Literal["all", "sliding"] | None = None
    router_bias: bool = False
    shared_expert_gate: bool = False
    attention_residual: bool = False
    # Weights outside the decoder layers and token embeddings (a vision tower and projector, an encoder, position
    # tables): held in memory, not read by a decode step.
    extra_params: NonNeg = 0
    # Gemma 3n / 4 E2B / E4B: per-layer input embeddings (hidden_size_per_layer_input wide, a table of per_layer_vocab
    # rows, None: vocab_size), Gemma 3n's AltUp streams and LAuReL rank (cost/params.per_layer_input_params). 0: none.
    per_layer_input: NonNeg = 0
    per_layer_vocab: Pos | None = None
    altup_inputs: NonNeg = 0
    laurel_rank: NonNeg = 0
    image_tokens: Pos | None = None  # encoder tokens one image adds to each cross-attention layer
    params_unknown: str | None = None  # why parameters cannot be counted (a field the config lacks)
    dtype: str = "bf16"
    params: Pos | None = None  # explicit count: taken as what a decode step reads

    experts: NonNeg = 0
    experts_per_token: NonNeg = 0
    expert_intermediate_size: NonNeg | None = None
    shared_expert_intermediate_size: NonNeg = 0
    dense_layers: NonNeg = 0  # the first k layers use a dense MLP instead of experts
    expert_dtype: str | None = None
    # LatentMoE (Nemotron 3, Kimi-K3): the routed experts work in this width, not hidden_size; each MoE layer projects
    # its tokens into it and back (hidden x latent each) and, with moe_latent_norm, norms them there (Kimi-K3).
    moe_latent_size: Pos | None = None
    moe_latent_norm: bool = False

    kv_lora_rank: Pos | None = None
    qk_rope_head_dim: Pos | None = None
    qk_nope_head_dim: Pos | None = None
    v_head_dim: Pos | None = None
    q_lora_rank: Pos | None = None
    # DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): a lightning indexer of index_heads x index_head_dim
    # scores every cached token against the query with keys of its own (cached per token, in fp8), and
    # each MLA layer then attends to the index_topk best-scored tokens only.
    index_heads: Pos | None = None
    index_head_dim: Pos | None = None
    index_topk: Pos | None = None
    # DeepSeek-V4: the output projection in o_groups groups through o_lora_rank each; hc_mult residual streams
    # mixed by hyper-connections; the first hash_layers MoE layers route by token id (no correction bias).
    o_groups: Pos | None = None
    o_lora_rank: Pos | None = None
    hc_mult: NonNeg = 0
    hash_layers: NonNeg = 0

    layer_pattern: list[LayerRun] = []  # repeats cyclically to fill num_layers (gemma-2: [sliding, full]); []: uniform
    max_position_embeddings: Pos | None = None  # the context the model was trained for, when known

    checkpoint: Checkpoint | None = None  # what it loads beyond the architecture (quantization, rotary, vision)
    # config.json's architectures[0], what an engine's model registry looks up (engines/vllm/startup.py)
    architecture: str | None = None

    @field_validator("dtype", "expert_dtype")
    @classmethod
    def _dtype(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            return normalize_dtype(v)
        except UsageError as e:
            raise ValueError(f"{e.message} ({e.hint})") from None

    @model_validator(mode="after")
    def _consistent(self) -> "ModelSpec":
        if self.num_heads % self.kv_heads != 0:
            raise ValueError(f"num_heads ({self.num_heads}) must be divisible by num_kv_heads ({self.kv_heads})")
        if self.head_dim is None and self.hidden_size % self.num_heads != 0:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) is not divisible by num_heads ({self.num_heads}): give head_dim"
            )
        if self.vocab_size is None and not self.params_unknown:
            raise ValueError("vocab_size is required")
        period = sum(run.count for run in self.layer_pattern)
        if period > self.num_layers:
            raise ValueError(f"layer_pattern covers {period} layers but the model has num_layers={self.num_layers}")
        for run in self.layer_pattern:
            if (self.run_heads(run)) % (run.kv_heads or self.kv_heads):
                raise ValueError(f"a layer's {self.run_heads(run)} query heads must split over its KV heads evenly")
            if run.kind == LayerKind.MLA and (self.kv_lora_rank is None or self.qk_rope_head_dim is None):
                raise ValueError("MLA layers need kv_lora_rank and qk_rope_head_dim")
        if self.v_head_dim is not None and not self.is_mla and any(run.head_dim for run in self.layer_pattern):
            raise ValueError("v_head_dim beside layers with a head width of their own is not modelled")
        indexer = (self.index_heads, self.index_head_dim, self.index_topk)
        if any(v is not None for v in indexer):
            if None in indexer:
                raise ValueError("a sparse-attention indexer needs index_heads, index_head_dim and index_topk")
            if not self.is_mla and not self.has_sparse_layers:
                raise ValueError("index_heads / index_head_dim / index_topk need MLA (DSA) or sparse layers")
        elif any(run.index_shared or run.sparse for run in self.layer_pattern):
            raise ValueError("index_shared / sparse layers need an indexer (index_heads, index_head_dim, index_topk)")
        if self.compressed_attention:
            check_compressed(self)
        if self.experts:
            if not 0 < self.experts_per_token <= self.experts:
                raise ValueError(
                    f"experts_per_token must be between 1 and experts ({self.experts}), got {self.experts_per_token}"
                )
            if self.dense_layers > self.num_layers:
                raise ValueError("dense_layers cannot exceed num_layers")
        elif self.moe_latent_size is not None:
            raise ValueError("moe_latent_size (LatentMoE's expert width) needs experts")
        return self

    # --- derived ----------------------------------------------------------------------

    @property
    def compressed_attention(self) -> bool:
        """DeepSeek-V4's attention: MLA-kind layers keeping a window of raw entries (and compressed ones)."""
        return any(run.latent_window for run in self.layer_pattern)

    @property
    def index_entry_bytes(self) -> int:
        """One index key in its cache: index_head_dim fp8 values and a 4-byte fp32 scale per 128 (DSA's, V4's)."""
        return (d := self.index_head_dim or 0) + 4 * -(-d // 128)

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def layer_kv_heads(self) -> set[int | None]:
        """The KV heads each caching attention layer sets itself (None: it takes the model's)."""
        return {run.kv_heads for run, _ in self.layer_groups() if run.kind.per_head_kv and not run.kv_shared}

    @property
    def cached_kv_heads(self) -> int:
        """The KV heads an attention layer caches: the model's, or the one figure every attention layer sets
        itself (Nemotron NAS's block_configs, where the model-level figure is its query heads)."""
        own = self.layer_kv_heads
        heads = own.pop() if len(own) == 1 else None
        return heads if heads is not None else self.kv_heads

    def sub_blocks(self) -> tuple[int, ...]:
        """Per layer, the sub-blocks it runs, 0 to 2: a token mixer (attention, MLA, SSM, linear attention) and
        an MLP or routed experts. Most decoders' layers run both; Nemotron-H's one (its M, *, - and E blocks),
        a NAS layer with a no-op attention its MLP alone. Each ends in a row-parallel output (an all-reduce
        under tensor parallelism), and the per-layer kernel costs count them in blocks of two."""
        return self._sub_blocks

    @cached_property
    def _sub_blocks(self) -> tuple[int, ...]:
        # NOTE: cached (specs are never mutated): every step the estimate prices asks it
        return tuple(self.blocks_of(run, routed) for run, routed in zip(self.expanded_layers(), self.routes_experts()))

    def blocks_of(self, run: LayerRun, routed: bool) -> int:
        """The sub-blocks (sub_blocks) of one layer of this run, routing the experts or not; each has its norm."""
        mixer = run.kind != LayerKind.STATELESS or bool(run.mixer_params)
        size = run.intermediate_size
        return int(mixer) + int(size > 0 if size is not None else routed or self.intermediate_size > 0)

    def routes_experts(self) -> tuple[bool, ...]:
        """Per layer: whether it runs the routed experts (a MoE model's layers past the dense ones, unless the
        layer sets its own MLP width: Jamba's dense layers, Nemotron-H's Mamba and attention layers)."""
        return self._routes_experts

    @cached_property
    def _routes_experts(self) -> tuple[bool, ...]:
        return tuple(
            self.is_moe and i >= self.dense_layers and run.intermediate_size is None
            for i, run in enumerate(self.expanded_layers())
        )

    @property
    def attention_free(self) -> bool:
        """No layer attends (Mamba, Mamba-2): no KV cache at all, only each layer's constant state."""
        return not any(run.kind.attends for run, _ in self.layer_groups())

    @property
    def head_dim_effective(self) -> int:
        # NOTE: take head_dim from the config when present: Gemma, Qwen3 and Llama-3.2 set it
        # independently of hidden_size / num_heads.
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def mla_key_dim(self) -> int:
        """One MLA head's decompressed key width (nope + rope): what an engine caching every head's K holds."""
        rope = self.qk_rope_head_dim or 0
        return (self.qk_nope_head_dim or (self.head_dim_effective - rope)) + rope

    @property
    def latent_rank(self) -> int:
        """MLA's kv_lora_rank (set on every MLA model: the validator checks it)."""
        return _required(self.kv_lora_rank, f"model '{self.name}': kv_lora_rank")

    @property
    def vocab(self) -> int:
        """vocab_size, which the parameter counts and the LM head need (configs may leave it out)."""
        return _required(self.vocab_size, f"model '{self.name}': vocab_size")

    @property
    def rope_dim(self) -> int:
        """MLA's qk_rope_head_dim, the decoupled rotary part of the latent."""
        return _required(self.qk_rope_head_dim, f"model '{self.name}': qk_rope_head_dim")

    @property
    def is_sparse(self) -> bool:
        """DeepSeek Sparse Attention: MLA over the indexer's top-k tokens (the validator sets all three). MiniMax-M3's
        sparse self-attention layers (LayerRun.sparse) are not DSA: the engines' DSA pools do not hold them."""
        return self.index_topk is not None and self.is_mla

    @property
    def has_sparse_layers(self) -> bool:
        """Self-attention layers over the indexer's top-k tokens with index keys of their own (MiniMax-M3's)."""
        return any(run.sparse for run in self.layer_pattern)

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    def run_head_dim(self, run: LayerRun) -> int:
        """The head width of one layer run: its own (Gemma 4's global layers), else the model's."""
        return run.head_dim or self.head_dim_effective

    def run_heads(self, run: LayerRun) -> int:
        """The query heads of one layer run: its own (Laguna's), else the model's."""
        return run.num_heads or self.num_heads

    def run_v_dim(self, run: LayerRun) -> int:
        """The width of one head's values in a per-head attention layer: v_head_dim where the model's values
        are narrower than its keys (MiMo-V2-Flash: K 192, V 128), else the head width."""
        return self.v_head_dim if self.v_head_dim is not None and not self.is_mla else self.run_head_dim(run)

    @property
    def expert_width(self) -> int:
        """The width the routed experts' matrices take in and give out: LatentMoE's latent, else hidden."""
        return self.moe_latent_size or self.hidden_size

    def expanded_layers(self) -> list[LayerRun]:
        """One entry per layer (count ignored), the pattern repeated to num_layers."""
        if not self.layer_pattern:
            kind = LayerKind.MLA if self.is_mla else LayerKind.FULL
            return [LayerRun(kind=kind)] * self.num_layers
        unit = [run for run in self.layer_pattern for _ in range(run.count)]
        return [unit[i % len(unit)] for i in range(self.num_layers)]

    def layer_groups(self) -> list[tuple[LayerRun, int]]:
        """Distinct layer shapes with how many layers have each, in first-seen order."""
        return self._layer_groups

    @cached_property
    def _layer_groups(self) -> list[tuple[LayerRun, int]]:
        # NOTE: cached: the arithmetic asks for it in every step of a generate loop; specs are
        # never mutated (with_changes builds a new one).
        # expanded_layers repeats the same few run objects: count them first (first-seen order), then
        # copy each distinct run once with count 1 (a copy per layer was 61 copies for DeepSeek-V3).
        groups: dict[LayerRun, int] = {}
        for run, layers in Counter(self.expanded_layers()).items():
            key = run if run.count == 1 else run.model_copy(update={"count": 1})
            groups[key] = groups.get(key, 0) + layers
        return list(groups.items())

    def with_changes(self, **changes: object) -> "ModelSpec":
        """A validated copy with some fields replaced (for overrides and what-ifs)."""
        data = self.model_dump()
        data.update(changes)
        return build(ModelSpec, data, f"model '{self.name}'")


def _required(value: int | None, what: str) -> int:
    # NOTE: the validators guarantee these fields where the arithmetic asks for them; a spec built
    # around them (model_construct) gets a message rather than a TypeError on None.
    if value is None:
        raise SpecError(f"{what} is required here")
    return value
