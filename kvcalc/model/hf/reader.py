"""Hugging Face config.json -> ModelSpec: the one reader, dispatching to a module per family group.

Pure: no I/O. A new architecture is one new hf_*.py module and a line in `_pattern` or `LAYER_TYPES`.
"""

from __future__ import annotations

from typing import Any

from kvcalc.errors import SpecError
from kvcalc.model.hf import bailing as hf_bailing
from kvcalc.model.hf import deepseek_v4 as hf_v4
from kvcalc.model.hf import encdec as hf_encdec
from kvcalc.model.hf import hybrid as hf_hybrid
from kvcalc.model.hf import laguna as hf_laguna
from kvcalc.model.hf import legacy as hf_legacy
from kvcalc.model.hf import mla as hf_mla
from kvcalc.model.hf import moe as hf_moe
from kvcalc.model.hf import nas as hf_nas
from kvcalc.model.hf import native as hf_native
from kvcalc.model.hf import positions as hf_positions
from kvcalc.model.hf import sharing as hf_sharing
from kvcalc.model.hf import sparse as hf_sparse
from kvcalc.model.hf import step as hf_step
from kvcalc.model.hf import vision as hf_vision
from kvcalc.model.hf import windows as hf_windows
from kvcalc.model.hf.checkpoint import checkpoint_info
from kvcalc.model.hf.defaults import TYPE_DEFAULTS
from kvcalc.model.hf.families import O_PROJ_BIAS, OUTPUT_GATED, QKV_BIAS, SAME_TEXT_MODEL
from kvcalc.model.hf.fields import Config, check_types, declared_dtype, quantization, window
from kvcalc.model.hf.hybrid import StateDtypes
from kvcalc.model.hf.ssm import SSM_TYPES, ssm_fields
from kvcalc.model.hf.unread import (
    LIGHTNING_TYPES,
    parameter_doubts,
    refuse_unplaced_state,
    refuse_unread,
    refuse_unread_shape,
)
from kvcalc.model.hf.vectors import vector_fields
from kvcalc.model.spec import LayerKind, LayerRun, ModelSpec
from kvcalc.model.validate import build, too_deep
from kvcalc.units import DTYPE_ALIASES, DTYPE_BITS

# Families whose values may be narrower than their keys (v_head_dim beside head_dim, without MLA).
V_NARROWER = ("mimo_v2_flash",)
MAMBA_TYPES = {"granitemoehybrid", "bamba"}
CONV_TYPES = {"lfm2", "lfm2_moe", "lfm3"}
ENCODER_DECODER = {
    "whisper",
    "t5",
    "mt5",
    "umt5",
    "bart",
    "mbart",
    "marian",
    "pegasus",
    "seamless_m4t",
    "led",
    "longt5",
}


# The parts of a Qwen2.5-Omni / Qwen3-Omni config beside the thinker (the language model engines serve)
OMNI_PARTS = ("thinker_config", "talker_config", "token2wav_config", "code2wav_config")


def _thinker(raw: dict[str, Any]) -> dict[str, Any]:
    """Qwen2.5-Omni / Qwen3-Omni keep their language model in thinker_config: vLLM registers the file's
    Qwen2_5OmniModel / Qwen3OmniMoeForConditionalGeneration as the thinker, and the talker and the codec run apart
    (vLLM-Omni). Read as the thinker's config, the file's architectures kept."""
    thinker = raw.get("thinker_config")
    if not isinstance(thinker, dict) or isinstance(raw.get("text_config"), dict):
        return raw
    outer = {k: v for k, v in raw.items() if k not in OMNI_PARTS}
    return {**outer, **thinker, "architectures": raw.get("architectures") or thinker.get("architectures")}


def _merge_text_config(raw: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Multimodal wrappers keep the language model in text_config (or llm_config)."""
    model_type = str(raw.get("model_type", ""))
    for key in ("text_config", "llm_config", "language_config"):
        inner = raw.get(key)
        if isinstance(inner, dict):
            merged = {k: v for k, v in raw.items() if k not in ("text_config", "vision_config", "llm_config")}
            merged.update(inner)
            inner_type = inner.get("model_type") or (f"{model_type}_text" if model_type else "")
            if model_type == "mllama":
                inner_type = "mllama_text_model"
            return merged, str(inner_type)
    return dict(raw), model_type


def _layer_types(
    cfg: Config, model_type: str, types: list[Any], layers: int, hidden: int, el: StateDtypes
) -> list[LayerRun]:
    """One LayerRun per entry of an explicit per-layer list (layer_types)."""
    if len(types) != layers:
        raise cfg.refuse(f"layer_types has {len(types)} entries for {layers} layers")
    runs = []
    full = hf_windows.gemma4_full(cfg) if model_type == "gemma4_text" else {}
    for t in types:
        if t in ("full_attention", "attention"):
            runs.append(LayerRun(kind=LayerKind.FULL, **full))
        elif t == "sliding_attention":
            win = cfg.overrides.get("window") or cfg.get("sliding_window", "sliding_window_size")
            runs.append(LayerRun(kind=LayerKind.SLIDING, window_tokens=window(cfg, win)))
        elif t == "chunked_attention":
            runs.append(LayerRun(kind=LayerKind.CHUNKED, window_tokens=cfg.int_field("attention_chunk_size")))
        elif t in ("mamba", "linear_attention") and model_type in MAMBA_TYPES:
            # transformers 5 saves Mamba layers under the new name linear_attention (remap_legacy_layer_types)
            runs.append(hf_hybrid.mamba2(cfg, hidden, el).run())
        elif t == "linear_attention" and model_type in LIGHTNING_TYPES:
            runs.append(hf_hybrid.lightning(cfg, hidden, el).run())
        elif t == "linear_attention":
            runs.append(hf_hybrid.gated_deltanet(cfg, hidden, el).run())
        elif t == "conv" and model_type in CONV_TYPES:
            runs.append(hf_hybrid.short_conv(cfg, hidden, el).run())
        else:
            raise cfg.refuse(f"layer type '{t}' in layer_types of a '{model_type}' model is not supported")
    return runs


def _pattern(cfg: Config, model_type: str, layers: int, hidden: int, el: StateDtypes) -> list[LayerRun]:
    """One LayerRun per layer (count 1), or [] for a uniform model."""
    if model_type == "kimi_linear":
        return hf_hybrid.kimi_linear(cfg, layers, hidden, el)
    if model_type == "bailing_hybrid":
        return hf_bailing.bailing_hybrid(cfg, layers, hidden, el)
    if model_type == hf_sparse.MODEL_TYPE:
        return hf_sparse.sparse_layers(cfg, layers)
    if model_type == hf_v4.MODEL_TYPE:
        return hf_v4.layers(cfg, layers)  # a window a layer, compressed entries on CSA / HCA layers
    if hf_mla.is_mla(cfg):
        return hf_mla.indexer_pattern(cfg, layers)  # uniform MLA, or DSA layers sharing an indexer
    if isinstance(cfg.get("block_configs"), list):
        return hf_nas.block_configs(cfg, layers, hidden)
    if model_type == "mimo_v2_flash":
        return hf_windows.mimo_v2(cfg, layers)
    if model_type == "gpt_neo":
        return hf_windows.gpt_neo(cfg, layers)
    if model_type == "llama4_text" or (cfg.get("attention_chunk_size") and cfg.get("layer_types") is None):
        return hf_windows.llama4_chunked(cfg, layers)
    if model_type == "nemotron_h":
        return hf_hybrid.nemotron_h(cfg, layers, hidden, el)
    if model_type == "falcon_h1":
        return hf_hybrid.falcon_h1(cfg, hidden, el)
    types = cfg.get("layer_types", "layers_block_type")
    if types is None and model_type in LIGHTNING_TYPES and isinstance(attn := cfg.get("attn_type_list"), list):
        # MiniMax-01's own config: 0 a lightning (linear) attention layer, 1 softmax attention (vLLM minimax_text_01.py)
        if set(attn) - {0, 1}:
            raise cfg.refuse("attn_type_list must hold 0 (lightning attention) or 1 (full attention) per layer")
        types = ["full_attention" if t == 1 else "linear_attention" for t in attn]
    if model_type == "gemma4_text":
        types = hf_windows.gemma4_types(cfg, layers)
    interval = cfg.get("full_attention_interval")
    if types is None and isinstance(interval, int) and interval > 0:
        # Qwen3-Next: every `interval`-th layer is full attention, the rest linear attention.
        types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
    if types is None and model_type == "gemma3n_text":
        # Gemma3nTextConfig: layer i is full attention when (i + 1) % 5 == 0, sliding otherwise.
        types = ["full_attention" if (i + 1) % 5 == 0 else "sliding_attention" for i in range(layers)]
    if types is None and model_type == "afmoe":
        # AfmoeConfig: layer i is full attention when (i + 1) % global_attn_every_n_layers == 0.
        every = cfg.int_field("global_attn_every_n_layers")
        types = ["full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(layers)]
    if types is None and model_type == "bamba":
        # BambaConfig.layers_block_type: attention at attn_layer_indices, Mamba-2 elsewhere.
        attention = cfg.get("attn_layer_indices") or []
        types = ["attention" if i in attention else "mamba" for i in range(layers)]
    if types is None and model_type in MAMBA_TYPES:
        types = ["mamba"] * layers  # GraniteMoeHybridConfig.layers_block_type without layer_types
    if types is None and model_type == "lfm3":
        # Lfm3Config: full attention at i % 4 == 2, sliding at the other even layers from 4, short convs between
        types = [
            "full_attention" if i % 4 == 2 else "sliding_attention" if i % 4 == 0 and i else "conv"
            for i in range(layers)
        ]
    if types is None and model_type in CONV_TYPES:
        # Lfm2Config: full_attn_idxs (default: every layer) name the attention layers.
        full = cfg.get("full_attn_idxs", default=list(range(layers)))
        types = ["full_attention" if i in full else "conv" for i in range(layers)]
    if isinstance(types, list):
        return _layer_types(cfg, model_type, types, layers, hidden, el)
    if isinstance(cfg.get("hybrid_override_pattern"), str):
        return hf_hybrid.nemotron_h(cfg, layers, hidden, el)
    if cfg.get("attn_layer_period"):
        return hf_hybrid.jamba(cfg, layers, hidden, el)
    cross = cfg.get("cross_attention_layers")
    if isinstance(cross, list):
        return [LayerRun(kind=LayerKind.CROSS if i in cross else LayerKind.FULL) for i in range(layers)]
    runs = hf_windows.sliding_pattern(cfg, model_type, layers, model_type in TYPE_DEFAULTS)
    return runs or []


def _output_gate(cfg: Config, model_type: str) -> bool | str:
    """The attention output gate: LFM3's one a head under use_attention_gate; Ling's and Laguna's as their configs
    name it; AfmoeAttention's gate_proj (hidden -> heads x head_dim) gates like Qwen3-Next's; Qwen3.5's attention
    always doubles q_proj (transformers Qwen3_5Attention), its config's attn_output_gate or not."""
    if model_type == "lfm3" and cfg.get("use_attention_gate", default=True):
        return "head"
    if model_type == "bailing_hybrid":
        return hf_bailing.output_gate(cfg)
    if model_type == "laguna":
        return hf_laguna.output_gate(cfg)
    if model_type == hf_step.MODEL_TYPE:
        return "head" if cfg.get("use_head_wise_attn_gate", default=False) else False  # g_proj: hidden -> heads
    # Kimi-K3's MLA g_proj (mla_use_output_gate): hidden -> heads x v_head_dim, a sigmoid a channel
    return bool(cfg.get("attn_output_gate", "mla_use_output_gate", default=model_type in OUTPUT_GATED))


def _state_dtypes(cfg: Config, model_type: str) -> StateDtypes:
    """Conv state in the activation dtype; the SSM / linear-attention state as vLLM 0.19 resolves
    mamba_ssm_cache_dtype 'auto' (model_executor/models/config.py): NemotronHForCausalLMConfig takes the
    config's mamba_ssm_cache_dtype, else float16 (PR #29978; float32 only from PR #39032, after 0.19.0);
    Qwen3_5ForConditionalGenerationConfig takes the text config's mamba_ssm_dtype (PR #34489: Qwen3.5 says
    float32); every other family keeps the model's dtype, whatever its config names."""
    activation = declared_dtype(cfg)
    if activation == "fp32":
        # vLLM's _resolve_auto_dtype serves a float32 checkpoint in the platform's 16-bit type (as kvcalc's
        # auto KV dtype does): its conv state and an 'auto' SSM state follow
        activation = "bf16"
    if model_type == "nemotron_h":
        raw = str(cfg.get("mamba_ssm_cache_dtype", default="float16"))
    elif model_type in ("qwen3_5_text", "qwen3_5_moe_text"):
        raw = str(cfg.get("mamba_ssm_dtype", default="auto"))
    else:
        raw = "auto"
    raw = raw.removeprefix("torch.")
    ssm = DTYPE_ALIASES.get(raw, raw) if raw != "auto" else activation
    if ssm not in DTYPE_BITS:
        raise cfg.refuse(f"mamba_ssm_cache_dtype '{raw}' is not a known dtype")
    return StateDtypes(conv=float(DTYPE_BITS[activation]) / 8, ssm=float(DTYPE_BITS[ssm]) / 8)


def spec_from_config(raw: Any, name: str, where: str, overrides: dict[str, Any] | None = None) -> ModelSpec:
    """Map a config.json dict to a ModelSpec, or refuse with the file and field that is wrong."""
    overrides = overrides or {}
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: config.json must be a JSON object")
    raw = _thinker(raw)
    for wrapper in (raw, raw.get("text_config"), raw.get("llm_config"), raw.get("language_config")):
        if isinstance(wrapper, dict) and not isinstance(wrapper.get("model_type", ""), str):
            raise SpecError(f"{where}: field model_type must be a string, got {wrapper['model_type']!r}")
    data, model_type = _merge_text_config(raw)
    encdec = raw.get("is_encoder_decoder") or model_type in ENCODER_DECODER or raw.get("model_type") in ENCODER_DECODER
    if encdec:
        model_type = str(raw.get("model_type", model_type))
    data = {**TYPE_DEFAULTS.get(model_type, {}), **data}
    model_type = SAME_TEXT_MODEL.get(model_type, model_type)  # its own defaults taken, read as the family it is
    if model_type == hf_step.MODEL_TYPE:
        data = hf_step.normalized(data, where)
    data = hf_native.normalized(model_type, data)  # MiMo-V2-Flash's and Kimi Linear's transformers-native configs
    for nested in ("ffn_config", "attn_config"):
        if data.get(nested) is not None and not isinstance(data[nested], dict):
            raise SpecError(f"{where}: field {nested} must be an object, got {data[nested]!r}")
    if model_type == "longcat_flash":
        # vLLM longcat_flash.py: each of FlashConfig's num_layers decoder layers holds two MLA attention blocks
        # (self_attn, a ModuleList of 2), each with its own latent cache: 2 x num_layers cached layers.
        pairs = data.get("num_hidden_layers") or data.get("num_layers")
        if isinstance(pairs, int) and not isinstance(pairs, bool) and pairs > 0:
            data["num_hidden_layers"] = 2 * pairs
    if model_type == "dbrx":
        # DbrxFFNConfig nests the experts: moe_num_experts, moe_top_k, ffn_hidden_size (each expert's width).
        ffn = data.get("ffn_config") or {}
        data.update(
            num_local_experts=ffn.get("moe_num_experts", 4),
            num_experts_per_tok=ffn.get("moe_top_k", 1),
            intermediate_size=ffn.get("ffn_hidden_size", 3584),
        )
    cfg = Config(data, where, overrides)
    check_types(cfg)
    refuse_unread(cfg, model_type)
    dtype = overrides.get("dtype") or declared_dtype(cfg)
    weight_dtype, expert_dtype = quantization(cfg, dtype) if "dtype" not in overrides else (dtype, None)
    vocab = cfg.get("vocab_size", "padded_vocab_size")
    if vocab is not None:
        vocab = cfg.int_field("vocab_size", "padded_vocab_size")
    fields: dict[str, Any] = {
        "name": name,
        "source": where,
        "vocab_size": vocab,
        "dtype": weight_dtype,
        "expert_dtype": expert_dtype,
        "checkpoint": checkpoint_info(raw, TYPE_DEFAULTS.get(model_type)),
    }
    archs = raw.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        fields["architecture"] = archs[0]
    if vocab is None:
        fields["params_unknown"] = "config.json has no vocab_size"
    if encdec:
        fields.update(hf_encdec.encdec_fields(cfg, model_type))
        if why := too_deep(fields["num_layers"]):
            raise cfg.refuse(why)
        for flag in ("layers", "window"):
            if flag in overrides:
                raise SpecError(
                    f"{where}: --{flag} is not supported for an encoder-decoder", hint="edit a copy of config.json"
                )
        if "kv_heads" in overrides:
            fields["num_kv_heads"] = overrides["kv_heads"]
        if "head_dim" in overrides:
            fields["head_dim"] = overrides["head_dim"]
        return build(ModelSpec, fields, where)
    if model_type in SSM_TYPES:
        layers = overrides.get("layers") or cfg.int_field("num_hidden_layers", "n_layer", override="--layers")
        if why := too_deep(layers):
            raise cfg.refuse(why)
        decoder = ssm_fields(cfg, model_type, layers, _state_dtypes(cfg, model_type))
    else:
        decoder = _decoder_fields(cfg, model_type, raw)
    if model_type in ("gemma3n_text", "gemma4_text") and cfg.get("hidden_size_per_layer_input"):
        # Gemma 3n, Gemma 4 E2B / E4B: per-layer input embeddings; Gemma 3n's AltUp and LAuReL (the config classes'
        # defaults fill what the file omits)
        decoder["per_layer_input"] = cfg.int_field("hidden_size_per_layer_input")
        decoder["per_layer_vocab"] = cfg.int_field("vocab_size_per_layer_input")
        if model_type == "gemma3n_text":
            decoder["altup_inputs"] = cfg.int_field("altup_num_inputs")
            decoder["laurel_rank"] = cfg.int_field("laurel_rank")
    missing = [m for m in (fields.get("params_unknown"), decoder.pop("params_unknown", None)) if m]
    missing += parameter_doubts(cfg, model_type)
    fields.update(decoder)
    if missing:
        fields["params_unknown"] = "; ".join(missing)
    return build(ModelSpec, fields, where)


def _decoder_fields(cfg: Config, model_type: str, raw: dict[str, Any]) -> dict[str, Any]:
    where, overrides = cfg.where, cfg.overrides
    if (
        model_type == "nemotron_h"
        and cfg.get("num_hidden_layers") is None
        and (pattern := hf_hybrid.nemotron_pattern(cfg))
    ):
        cfg.data["num_hidden_layers"] = len(pattern)  # NemotronHConfig counts the blocks of layers_block_type
    layers = overrides.get("layers") or cfg.int_field(
        "num_hidden_layers", "n_layer", "n_layers", "num_layers", override="--layers"
    )
    if why := too_deep(layers):
        raise cfg.refuse(why)
    hidden = cfg.int_field("hidden_size", "n_embd", "d_model", "dim", override=None)
    heads = cfg.int_field("num_attention_heads", "n_head", "n_heads", "num_heads")
    kv_heads = hf_legacy.kv_heads(cfg, model_type, heads)
    head_dim = overrides.get("head_dim") or cfg.get("head_dim", "kv_channels", "attention_head_dim")
    if head_dim is None and hf_mla.is_mla(cfg):
        head_dim = hf_mla.mla_head_dim(cfg)
    if head_dim is None and model_type == "mpt":
        head_dim = hidden // heads
    if not hf_mla.is_mla(cfg) and model_type != hf_v4.MODEL_TYPE and not {"kv_heads", "head_dim"} & set(overrides):
        refuse_unread_shape(cfg, kv_heads or heads, head_dim or hidden // heads)
    if cross := cfg.get("cross_attention_layers"):
        if not isinstance(cross, list):
            raise SpecError(f"{where}: cross_attention_layers must be a list")
    if kv_heads and heads % kv_heads:
        raise SpecError(
            f"{where}: num_attention_heads ({heads}) is not divisible by the KV heads ({kv_heads})",
            hint="query heads must split evenly into KV-head groups",
        )
    positions = hf_positions.trained_length(cfg.data)  # for the --seq warning
    fields: dict[str, Any] = {
        "num_layers": layers,
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        # Lfm2Config reads LFM's original key tie_embedding as tie_word_embeddings.
        "tie_embeddings": bool(cfg.get("tie_word_embeddings", "tie_embedding", default=True)),
        "mlp_gated": model_type not in hf_legacy.UNGATED,
        "attention_bias": bool(cfg.get("attention_bias", "qkv_bias", "add_qkv_bias", default=model_type in QKV_BIAS)),
        # NOTE: attention_bias covers o_proj only where the modeling code says so (transformers
        # LlamaAttention, GptOssAttention, Qwen3Attention, GraniteAttention, CohereAttention); GLM-4.5 and
        # Qwen 1/2 bias q, k, v alone.
        "o_proj_bias": bool(cfg.get("attention_bias")) and model_type in O_PROJ_BIAS,
        "attn_output_gate": _output_gate(cfg, model_type),
        "tp_group": hf_bailing.tp_group(cfg) if model_type == "bailing_hybrid" else None,
        # gpt-oss experts carry gate_up and down biases (transformers GptOssExperts).
        "mlp_bias": bool(cfg.get("mlp_bias")) or model_type == "gpt_oss",
        "layer_pattern": _pattern(cfg, model_type, layers, hidden, _state_dtypes(cfg, model_type)),
        "max_position_embeddings": positions,
        **(moe := hf_moe.moe_fields(cfg, model_type)),
        **vector_fields(cfg, model_type, moe=bool(moe.get("experts"))),
    }
    refuse_unplaced_state(cfg, sum(1 for r in fields["layer_pattern"] if r.state_bytes))
    # block_configs give every layer its own FFN width; there is no global one.
    if cfg.get("block_configs"):
        fields["intermediate_size"] = 0
    elif model_type == "lfm2":  # LFM2's own width rule; LFM2-MoE's dense layers take intermediate_size as it is
        fields["intermediate_size"] = hf_hybrid.lfm2_intermediate(cfg)
    elif model_type == "granitemoehybrid" and not fields.get("experts"):
        fields["intermediate_size"] = cfg.int_field("shared_intermediate_size")  # dense: the shared MLP is the MLP
    else:
        inter = hf_legacy.intermediate(cfg, model_type, hidden)
        if inter is None and fields.get("experts") and not fields.get("dense_layers"):
            inter = 0  # every layer is MoE (Qwen3.5 MoE text configs): no dense MLP width is needed
        if inter is None:
            width = "dense_intermediate_size" if model_type == hf_sparse.MODEL_TYPE else "intermediate_size"
            fields["params_unknown"] = f"config.json has no {width}"
            inter = 0
        fields["intermediate_size"] = inter
    if hf_mla.is_mla(cfg):
        fields.update(hf_mla.mla_fields(cfg))
    elif model_type == hf_v4.MODEL_TYPE:
        fields.update(hf_v4.fields(cfg))
    elif model_type == hf_sparse.MODEL_TYPE:
        fields.update(hf_sparse.index_fields(cfg))
    elif model_type in V_NARROWER and cfg.get("v_head_dim") not in (None, fields["head_dim"]):
        fields["v_head_dim"] = cfg.int_field("v_head_dim")
    if cfg.get("use_cla"):
        fields["layer_pattern"] = hf_sharing.cross_layer_attention(cfg, fields["layer_pattern"], layers)
    if model_type == "laguna":
        fields["layer_pattern"] = hf_laguna.per_layer_heads(cfg, fields["layer_pattern"], layers)
    if model_type == hf_step.MODEL_TYPE:
        fields["layer_pattern"] = hf_step.per_layer_attention(cfg, fields["layer_pattern"], layers)
    if cfg.get("num_kv_shared_layers"):
        fields["layer_pattern"] = hf_sharing.kv_shared_tail(
            cfg, model_type, fields["layer_pattern"], layers, fields["intermediate_size"]
        )
    ck = fields.get("checkpoint")
    if isinstance(raw.get("vision_config"), dict) and str(raw.get("model_type")) != "mllama":
        fields["description"] = (
            "vision tower and projector counted as vLLM builds them"
            if ck and ck.vision_params
            else "language model only: the vision tower's parameters are not counted"
        )
    if str(raw.get("model_type")) == "mllama":
        vision = hf_vision.mllama_fields(cfg, raw.get("vision_config"), hidden)
        images = vision.pop("images")
        fields.update(vision)
        fields["layer_pattern"] = [
            r.model_copy(update={"cross_tokens": images * vision["image_tokens"]}) if r.kind == LayerKind.CROSS else r
            for r in fields["layer_pattern"]
        ]
    return fields
