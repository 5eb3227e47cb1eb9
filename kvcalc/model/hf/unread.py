"""What the config reader refuses, and why: fields whose effect on the cache kvcalc does not model."""

from __future__ import annotations

from kvcalc.model.hf.fields import Config
from kvcalc.model.hf.legacy import uniform_width
from kvcalc.model.hf.moe import (
    BAILING_TYPES,
    ERNIE_MOE_KEYS,
    ERNIE_TYPES,
    ernie_dense_layers,
    leading_dense,
    leading_only,
)

# MiniMax-01 (MiniMax-Text-01, MiniMax-M1; transformers' MiniMaxConfig): lightning attention layers (hf_hybrid.lightning)
LIGHTNING_TYPES = ("minimax_text_01", "minimax_m1", "minimax")
# Gemma3nTextConfig / Gemma4TextConfig: the last num_kv_shared_layers layers reuse an earlier layer's K and V
# (reader._kv_shared_tail).
KV_SHARING_TYPES = ("gemma3n_text", "gemma4_text")


def refuse_unread(cfg: Config, model_type: str) -> None:
    """Fields whose effect on the cache kvcalc does not model: refuse rather than guess."""
    if cfg.get("use_cla") and model_type not in ("hunyuan", "hunyuan_v1_dense", "hunyuan_v1_moe"):
        raise cfg.refuse(
            "use_cla (cross-layer KV sharing) is not read", hint="its cache is not estimated, rather than guessed"
        )
    group = cfg.get("layer_group_size")
    if isinstance(group, int) and group > 1 and cfg.get("layer_types") is None and model_type != "bailing_hybrid":
        # read for Ling / Ring 2.5 and Ling 3 only (hf_bailing: every group_size-th layer MLA, the others
        # lightning attention with a fixed state); read as uniform MLA such a model had held group_size x the cache
        raise cfg.refuse(
            f"layer_group_size {group} (linear-attention layers between full-attention ones) is not read",
            hint="its cache is not estimated, rather than guessed",
        )
    if model_type == "xlstm":  # xLSTM's mLSTM blocks: a fixed recurrent state, no attention (transformers xLSTMCache)
        raise cfg.refuse(
            "xLSTM's recurrent mLSTM state is not read", hint="its state is not estimated, rather than guessed"
        )
    if cfg.get("moe_layer_num_skipped"):
        raise cfg.refuse("moe_layer_num_skipped (dense leading layers, Hunyuan) is not read")
    if model_type.startswith("longcat_flash") and model_type != "longcat_flash":
        raise cfg.refuse(f"'{model_type}' (a LongCat-Flash variant) is not read")
    if isinstance(cfg.get("attention_other_setting"), dict) and model_type != "step3p5":  # read: hf_step
        raise cfg.refuse(
            "attention_other_setting (Step 3.5's sliding layers with their own heads) is not read",
            hint="its cache is not estimated, rather than guessed",
        )
    shapes = [k for k, v in cfg.data.items() if k.startswith("swa_") and v is not None and "head" in k]
    if model_type == "mimo_v2_flash":
        # its sliding layers' own KV heads are read (hf_windows.mimo_v2); the rest must be the full layers'
        same = {
            "swa_num_attention_heads": "num_attention_heads",
            "swa_head_dim": "head_dim",
            "swa_v_head_dim": "v_head_dim",
        }
        shapes = [k for k in shapes if k in same and cfg.get(k) != cfg.get(same[k])]
    if shapes:
        raise cfg.refuse(
            f"{shapes[0]} (sliding layers with their own attention shape, MiMo-V2-Flash) is not read",
            hint="its cache is not estimated, rather than guessed",
        )
    v_dim = cfg.get("v_head_dim")
    if v_dim is not None and not cfg.get("kv_lora_rank") and model_type != "mimo_v2_flash":
        k_dim = cfg.get("head_dim", "kv_channels", "attention_head_dim")
        hidden, heads = cfg.get("hidden_size"), cfg.get("num_attention_heads")
        if k_dim is None and isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
            k_dim = hidden // heads
        if v_dim != k_dim:
            raise cfg.refuse(
                f"v_head_dim {v_dim} differs from the key head_dim {k_dim}: values narrower or wider than keys "
                "are not read",
                hint="its cache is not estimated, rather than guessed",
            )
    pattern = cfg.get("hybrid_override_pattern", "layers_block_type")
    moe = isinstance(pattern, str) and "E" in pattern or isinstance(pattern, list) and "moe" in pattern
    if moe and not cfg.get("n_routed_experts", "num_experts"):
        raise cfg.refuse("hybrid_override_pattern has MoE layers (E) but no n_routed_experts")
    if cfg.get("mamba_d_ssm") and model_type != "falcon_h1":
        raise cfg.refuse(
            f"mamba_d_ssm (Falcon-H1's parallel Mamba-2 mixer) in a '{model_type}' config is not read",
            hint="its cache and state are not estimated, rather than guessed",
        )
    sparse = cfg.get("sparse_attention_config")
    if isinstance(sparse, dict) and sparse.get("use_sparse_attention", True) and model_type != "minimax_m3":
        # NOTE: SGLang's MiniMaxSparseKVPool adds an indexer pool (one head; K and V, or K alone) to the layers
        # that sparse_attention_freq marks: read for MiniMax-M3's own config (model/hf/sparse.py) only.
        raise cfg.refuse(
            "sparse_attention_config (MiniMax-M3's block-sparse attention, with an indexer cache of its own) is not read",
            hint="its cache is not estimated, rather than guessed",
        )
    # DeepSeek-V3.2 and GLM-5's indexer is read (model/hf/mla.py); DeepSeek-V4's compressed caches (model/hf/
    # deepseek_v4.py) under its own model_type only.
    if model_type != "deepseek_v4" and cfg.get("compress_ratios"):
        raise cfg.refuse(
            f"compress_ratios (DeepSeek-V4's compressed attention) in a '{model_type}' config is not read",
            hint="its cache is not estimated, rather than guessed",
        )
    if model_type in ("zamba", "zamba2"):
        # transformers 5 names their Mamba layers linear_attention, which would read as Qwen3-Next's gated DeltaNet
        raise cfg.refuse(
            f"{model_type}: Mamba layers beside a shared attention block (Zamba's hybrid layers) are not read",
            hint="its cache is not estimated, rather than guessed",
        )
    if cfg.get("index_topk") and not cfg.get("kv_lora_rank") and model_type != "deepseek_v4":
        raise cfg.refuse(
            "index_topk without MLA's kv_lora_rank (an indexer over attention layers that are not DeepSeek's) is not read",
            hint="its cache is not estimated, rather than guessed",
        )
    if (
        (cfg.get("index_topk") or model_type in ("deepseek_v32", "glm_moe_dsa"))
        and model_type != "deepseek_v4"
        and not (
            cfg.get("index_n_heads") and cfg.get("index_head_dim") and cfg.get("index_topk") and cfg.get("kv_lora_rank")
        )
    ):
        raise cfg.refuse(
            "a DeepSeek Sparse Attention model needs index_n_heads, index_head_dim and index_topk beside MLA's "
            "kv_lora_rank (a trimmed copy of the config?)",
            hint="its indexer's own per-token cache is not estimated, rather than guessed",
        )
    if (cfg.get("index_topk_freq") or cfg.get("index_skip_topk_offset")) and cfg.get("indexer_types") is None:
        raise cfg.refuse(
            "index_topk_freq / index_skip_topk_offset without indexer_types (which layers share an indexer) "
            "are not read"
        )
    gemma4_fields = cfg.get("global_head_dim") or cfg.get("num_global_key_value_heads") or cfg.get("attention_k_eq_v")
    if gemma4_fields and model_type != "gemma4_text":
        raise cfg.refuse(
            "global_head_dim / num_global_key_value_heads / attention_k_eq_v (Gemma 4's full-attention layers "
            "have their own KV shape) are not read",
            hint="its cache is not estimated, rather than guessed",
        )
    if cfg.get("num_kv_shared_layers") and model_type not in KV_SHARING_TYPES:
        raise cfg.refuse(f"num_kv_shared_layers (KV sharing across layers) in a '{model_type}' config is not read")
    lin = cfg.get("linear_attn_config")
    if lin and model_type != "kimi_linear":
        raise cfg.refuse(f"linear_attn_config (KDA linear attention) in a '{model_type}' config is not read")
    attn_types = cfg.get("attn_type_list")
    if isinstance(attn_types, list) and any(t != 1 for t in attn_types) and model_type not in LIGHTNING_TYPES:
        raise cfg.refuse(f"attn_type_list has lightning (linear) attention layers in a '{model_type}' config; not read")
    if cfg.get("kv_reuse_group") or cfg.get("global_attn_idx") is not None:
        raise cfg.refuse("kv_reuse_group / global_attn_idx (Hymba's shared and windowed KV) are not read")
    refuse_per_layer_kv(cfg, model_type)
    if model_type == "lfm2_vl_moe":
        raise cfg.refuse(
            f"'{model_type}' (LFM2 with experts) is not read yet",
            hint="its cache is not estimated, rather than guessed",
        )


# Names other code bases give the KV-head count and the head width. The reader takes num_key_value_heads and
# head_dim (with the aliases in hf_legacy / hf_reader); the same figure under one of these names is harmless,
# a different one would change the cache.
SHAPE_ALIASES = {
    "n_kv_heads": "KV heads", "num_query_groups": "KV heads", "num_kv_groups": "KV heads", "kv_n_heads": "KV heads",
    "num_attention_groups": "KV heads",  # Step 3's name for its KV heads
    "hidden_size_per_head": "head width", "head_size": "head width", "d_head": "head width",
    "attention_head_size": "head width", "kv_head_dim": "head width",
}  # fmt: skip


def refuse_unread_shape(cfg: Config, kv_heads: int, head_dim: int) -> None:
    """Refuse when a KV-head count or head width under a name the reader does not take disagrees with the
    one it resolved (Meta-style n_kv_heads, PLaMo's hidden_size_per_head)."""
    read = {"KV heads": kv_heads, "head width": head_dim}
    for key, what in SHAPE_ALIASES.items():
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value != read[what]:
            raise cfg.refuse(
                f"{key} {value} is not read, and differs from the {what} kvcalc reads ({read[what]})",
                hint="its cache is not estimated, rather than guessed",
            )


# Keys that describe recurrent state (Mamba, linear attention, short convolutions, RG-LRU), and the per-layer
# layouts through which the reader places such layers.
RECURRENT_KEYS = ("mamba_", "ssm_", "state_size", "linear_num_value_heads", "conv_l_cache", "block_types", "lru_width")
LAYOUT_KEYS = (
    "layer_types", "layers_block_type", "hybrid_override_pattern", "attn_layer_period", "full_attention_interval",
    "full_attn_idxs", "attn_layer_indices", "block_configs",
)  # fmt: skip


def refuse_unplaced_state(cfg: Config, stateful_layers: int) -> None:
    """A config that describes recurrent state but no layout the reader read (RecurrentGemma's block_types,
    PLaMo 2's mamba_step) would otherwise be read as attention in every layer: refuse."""
    if stateful_layers or any(cfg.get(key) is not None for key in LAYOUT_KEYS):
        return
    keys = [k for k in cfg.data if cfg.data[k] is not None and k.lower().startswith(RECURRENT_KEYS)]
    if keys:
        raise cfg.refuse(
            f"{keys[0]} describes recurrent (SSM / linear-attention) layers, but which layers they are is not read",
            hint="its cache and state are not estimated, rather than guessed",
        )


# Mixture-of-experts keys the reader reads, or that do not change the parameter count.
MOE_KEYS_READ = {
    "num_local_experts", "n_routed_experts", "num_experts", "num_experts_per_tok", "experts_per_token",
    "moe_top_k", "num_selected_experts", "moe_topk", "moe_intermediate_size", "moe_shared_expert_intermediate_size",
    "shared_expert_intermediate_size", "n_shared_experts", "first_k_dense_replace", "num_shared_expert",
    "use_mixed_mlp_moe", "shared_intermediate_size", "expert_layer_period", "expert_layer_offset",
    "moe_drop_tokens", "moe_latent_size", "moe_layer_freq", "top_k_experts", "moe_random_routing_dropped_token", "moe_router_topk_scaling_factor",
}  # fmt: skip


# Per-layer lists (one entry per layer) that the reader reads, or that do not change the parameter count.
PER_LAYER_READ = {
    "layer_types", "layers_block_type", "no_rope_layers", "moe_intermediate_size", "moe_topk", "num_shared_expert",
    "block_configs", "attn_type_list", "cross_attention_layers", "full_attn_idxs", "mlp_layer_types", "indexer_types",
    "moe_layer_freq",
    # Gemma 3n: each layer's MLP activation sparsity (0.95 in the first ten of E2B / E4B): a top-k of the
    # activations, neither a cache nor a parameter (its "pattern" would read as a KV shape below)
    "activation_sparsity_pattern",
    # a rotary base or scaling a layer (Granite SWA's layer_rope_theta, Molmo 2's rope_scaling_layers): no weights,
    # no cache
    "layer_rope_theta", "rope_scaling_layers",
}  # fmt: skip
# Words that mark a per-layer list as shaping the KV cache (KV heads, head width, windows, compression, which
# layers are which: MiMo-V2-Flash's hybrid_layer_pattern).
KV_WORDS = ("kv", "key_value", "head_dim", "window", "sliding", "cache", "compress", "hybrid", "pattern")


def _layer_count(cfg: Config) -> int | None:
    layers = cfg.get("num_hidden_layers", "n_layer", "n_layers", "num_layers")
    return layers if isinstance(layers, int) and not isinstance(layers, bool) else None


# Per-layer lists read for one family only.
PER_LAYER_READ_BY_TYPE = {
    "mimo_v2_flash": {"hybrid_layer_pattern"},
    "laguna": {"num_attention_heads_per_layer", "gating_types"},  # hf_laguna
    # Ling's layer layout (hf_bailing) and Ling 3's SwiGLU clamps (no weights)
    "bailing_hybrid": {"layer_group_size", "expert_swiglu_limit_list", "share_expert_swiglu_limit_list"},
    "deepseek_v4": {"compress_ratios"},  # hf_deepseek_v4
    "gpt_neo": {"attention_layers"},  # hf_windows.gpt_neo
}


def unread_per_layer(cfg: Config, model_type: str = "") -> list[str]:
    """Keys holding one value per layer that the reader does not read: a layer-by-layer variation
    (Laguna's num_attention_heads_per_layer, gating_types) that no global field describes."""
    read = PER_LAYER_READ | PER_LAYER_READ_BY_TYPE.get(model_type, set())
    layers = _layer_count(cfg)
    if layers is None:
        return []
    mtp = cfg.get("num_nextn_predict_layers", default=0)
    lengths = {layers, layers + mtp} if isinstance(mtp, int) else {layers}
    return [
        key
        for key, value in cfg.data.items()
        if isinstance(value, list)
        and len(value) in lengths
        and key not in read
        and not key.endswith(("token_id", "token_ids", "tokens"))
        # every layer its own K and V source (transformers' Mistral Large 4 writes the identity when none is shared)
        and not (key == "kv_source_layers" and value == list(range(len(value))))
    ]


def refuse_per_layer_kv(cfg: Config, model_type: str) -> None:
    """A per-layer list about the KV shape that is not read would change the cache: refuse."""
    for key in unread_per_layer(cfg, model_type):
        if any(word in key.lower() for word in KV_WORDS):
            raise cfg.refuse(
                f"{key} (one value per layer) is not read; it may change the cache",
                hint="its cache is not estimated, rather than guessed",
            )


def parameter_doubts(cfg: Config, model_type: str = "") -> list[str]:
    """Config fields that would change the parameter count in ways the reader does not model. The cache
    is still answered; parameters are then reported as unknown rather than a different number."""
    doubts = []
    step = cfg.get("decoder_sparse_step")
    if step not in (None, 0, 1) or (cfg.get("mlp_only_layers") and not leading_only(cfg)):
        doubts.append("decoder_sparse_step / mlp_only_layers (dense layers between MoE layers) are not read")
    # NOTE: Gemma 3n's and Gemma 4's per-layer input embeddings are read (reader: ModelSpec.per_layer_input)
    if model_type not in ("gemma3n_text", "gemma4_text") and (
        cfg.get("hidden_size_per_layer_input")
        or (cfg.get("vocab_size_per_layer_input") and cfg.get("hidden_size_per_layer_input") is None)
    ):
        doubts.append("per-layer input embeddings (hidden_size_per_layer_input) are not counted")
    freq = cfg.get("moe_layer_freq")
    if freq not in (None, 1) and not (isinstance(freq, list) and all(f == 1 for f in freq[leading_dense(freq, 0) :])):
        doubts.append("moe_layer_freq other than 1, or leading dense layers (0) then MoE layers (1), is not read")
    layout = cfg.get("mlp_layer_types")
    if isinstance(layout, list):
        experts = cfg.get("num_local_experts", "n_routed_experts", "num_experts", default=0)
        sparse = layout[leading_dense(layout) :]
        routed = {"sparse", "moe", "hash_moe"} if model_type == "deepseek_v4" else {"sparse"}  # V4: hash-routed
        if any(t not in routed for t in sparse) or (sparse and not (isinstance(experts, int) and experts > 1)):
            doubts.append("mlp_layer_types other than leading dense layers then MoE layers is not read")
    if model_type == "longcat_flash":
        doubts.append(
            "LongCat-Flash's layer pairs (two attention blocks and two MLPs beside a shortcut MoE with zero-computation "
            "experts) are not counted"
        )
    if model_type == "step3_text" and cfg.get("share_q_dim"):
        doubts.append("share_q_dim (Step 3's low-rank query projection) is not read")
    if model_type in ERNIE_TYPES:
        experts = cfg.get("moe_num_experts")
        if isinstance(experts, list):
            doubts.append("moe_num_experts as a list (ERNIE-VL's text and vision experts) is not read")
        elif experts and ernie_dense_layers(cfg) is None:
            doubts.append(
                "moe_layer_start_index / moe_layer_end_index / moe_layer_interval other than leading dense "
                "layers then MoE layers are not read"
            )
    read = MOE_KEYS_READ | {
        "llama4_text": {"moe_layers"},
        "afmoe": {"num_shared_experts"},
        "exaone_moe": {"num_shared_experts"},
        "hy_v3": {"num_shared_experts"},
        "kimi_linear": {"num_shared_experts", "num_experts_per_token", "routed_expert_hidden_size"},
        **dict.fromkeys(BAILING_TYPES, {"num_shared_experts"}),
        # transformers' Ling 3 config: the expert groups' count and top-k, and the SwiGLU clamps (no weights)
        "bailing_hybrid": {"num_shared_experts", "num_expert_group", "num_experts_per_token"}
        | PER_LAYER_READ_BY_TYPE["bailing_hybrid"],
        # moe_capacity: the training-time token capacity per expert, no weights
        **dict.fromkeys(ERNIE_TYPES, {*ERNIE_MOE_KEYS, "moe_capacity"}),
    }.get(model_type, set())
    for key, value in cfg.data.items():
        if key in read or not ("expert" in key or key.startswith("moe_")):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, list)):
            continue
        # NOTE: a shared-expert count of 1 is one more MLP per layer (Ling's num_shared_experts: 1).
        least = 1 if "shared" in key else 2
        if (isinstance(value, int) and value >= least) or (isinstance(value, list) and value):
            doubts.append(f"{key} is not read")
    doubts += [
        f"{key} (one value per layer) is not read"
        for key in unread_per_layer(cfg, model_type)
        if f"{key} is not read" not in doubts
        and not (key == "moe_layers" and model_type == "llama4_text")
        and not (key == "intermediate_size" and uniform_width(cfg.get(key)) is not None)  # read: all alike
    ]
    return doubts
