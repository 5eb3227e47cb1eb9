"""Hugging Face config.json -> ModelSpec: the one reader, dispatching to a module per family group.

Pure: no I/O. A new architecture is one new hf_*.py module and a line in `_pattern` or `LAYER_TYPES`.
"""

from __future__ import annotations

from typing import Any

from kvcalc import hf_hybrid, hf_legacy, hf_mla, hf_moe, hf_nas, hf_windows
from kvcalc.errors import SpecError
from kvcalc.hf_fields import Config, declared_dtype, quantization, window
from kvcalc.quant import checkpoint_info
from kvcalc.specs import LayerKind, LayerRun, ModelSpec, build
from kvcalc.units import DTYPE_BITS

# Published class defaults (transformers' *Config.__init__) for fields that real configs
# omit. NOTE: Gemma 3's text_config often lists no head counts; its class defaults supply them.
TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {
        "vocab_size": 262208,
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_hidden_layers": 26,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "sliding_window": 4096,
        "sliding_window_pattern": 6,
        "tie_word_embeddings": True,
    },
    "gemma2": {"head_dim": 256, "sliding_window": 4096, "tie_word_embeddings": True},
    "gemma": {"head_dim": 256, "tie_word_embeddings": True},
    "llama": {"tie_word_embeddings": False},
    "mistral": {"tie_word_embeddings": False, "sliding_window": 4096},
    "mixtral": {"tie_word_embeddings": False},
    "qwen2": {"tie_word_embeddings": False},
    "qwen3": {"tie_word_embeddings": False},
    "qwen2_moe": {"tie_word_embeddings": False},
    "qwen3_moe": {"tie_word_embeddings": False},
    "qwen3_next": {"tie_word_embeddings": False},
    "phi3": {"tie_word_embeddings": False},
    "starcoder2": {"tie_word_embeddings": True},
    "gpt_oss": {"tie_word_embeddings": False},
    "deepseek_v2": {"tie_word_embeddings": False},
    "deepseek_v3": {"tie_word_embeddings": False},
    "glm4_moe": {"tie_word_embeddings": False},
    "cohere": {"tie_word_embeddings": True},
    "llama4_text": {"tie_word_embeddings": False, "no_rope_layer_interval": 4},
    "mllama_text_model": {"tie_word_embeddings": False},
    "nemotron_h": {"tie_word_embeddings": False},
    "chatglm": {"tie_word_embeddings": False},
    "qwen": {"tie_word_embeddings": False},
}
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


def _layer_types(cfg: Config, types: list[Any], layers: int, hidden: int, state_el: float) -> list[LayerRun]:
    """One LayerRun per entry of an explicit per-layer list (layer_types)."""
    if len(types) != layers:
        raise cfg.refuse(f"layer_types has {len(types)} entries for {layers} layers")
    runs = []
    for t in types:
        if t in ("full_attention", "attention"):
            runs.append(LayerRun(kind=LayerKind.FULL))
        elif t == "sliding_attention":
            win = cfg.overrides.get("window") or cfg.get("sliding_window")
            runs.append(LayerRun(kind=LayerKind.SLIDING, window_tokens=window(cfg, win)))
        elif t == "chunked_attention":
            runs.append(LayerRun(kind=LayerKind.CHUNKED, window_tokens=cfg.int_field("attention_chunk_size")))
        elif t == "linear_attention":
            state, params = hf_hybrid.gated_deltanet(cfg, hidden, state_el)
            runs.append(LayerRun(kind=LayerKind.STATELESS, state_bytes=state, mixer_params=params))
        else:
            raise cfg.refuse(f"layer type '{t}' in layer_types is not supported")
    return runs


def _pattern(cfg: Config, model_type: str, layers: int, hidden: int, dtype: str) -> list[LayerRun]:
    """One LayerRun per layer (count 1), or [] for a uniform model."""
    state_el = float(DTYPE_BITS[dtype]) / 8
    if hf_mla.is_mla(cfg):
        return []  # uniform MLA
    if isinstance(cfg.get("block_configs"), list):
        return hf_nas.block_configs(cfg, layers, hidden)
    types = cfg.get("layer_types")
    interval = cfg.get("full_attention_interval")
    if types is None and isinstance(interval, int) and interval > 0:
        # Qwen3-Next: every `interval`-th layer is full attention, the rest linear attention.
        types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
    if isinstance(types, list):
        return _layer_types(cfg, types, layers, hidden, state_el)
    if isinstance(cfg.get("hybrid_override_pattern"), str):
        return hf_hybrid.nemotron_h(cfg, layers, hidden, state_el)
    if cfg.get("attn_layer_period"):
        return hf_hybrid.jamba(cfg, layers, hidden, state_el)
    if cfg.get("attention_chunk_size"):
        return hf_windows.llama4_chunked(cfg, layers)
    cross = cfg.get("cross_attention_layers")
    if isinstance(cross, list):
        return [LayerRun(kind=LayerKind.CROSS if i in cross else LayerKind.FULL) for i in range(layers)]
    runs = hf_windows.sliding_pattern(cfg, model_type, layers, model_type in TYPE_DEFAULTS)
    return runs or []


def spec_from_config(raw: Any, name: str, where: str, overrides: dict[str, Any] | None = None) -> ModelSpec:
    """Map a config.json dict to a ModelSpec, or refuse with the file and field that is wrong."""
    overrides = overrides or {}
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: config.json must be a JSON object")
    data, model_type = _merge_text_config(raw)
    if raw.get("is_encoder_decoder") or model_type in ENCODER_DECODER or raw.get("model_type") in ENCODER_DECODER:
        raise SpecError(
            f"{where}: '{raw.get('model_type')}' is an encoder-decoder model; kvcalc models decoder-only caches",
            hint="its decoder self-attention and cross-attention caches are not estimated, rather than guessed",
        )
    data = {**TYPE_DEFAULTS.get(model_type, {}), **data}
    cfg = Config(data, where, overrides)

    layers = overrides.get("layers") or cfg.int_field(
        "num_hidden_layers", "n_layer", "n_layers", "num_layers", override="--layers"
    )
    hidden = cfg.int_field("hidden_size", "n_embd", "d_model", "dim", override=None)
    heads = cfg.int_field("num_attention_heads", "n_head", "n_heads", "num_heads")
    kv_heads = hf_legacy.kv_heads(cfg, model_type, heads)
    head_dim = overrides.get("head_dim") or cfg.get("head_dim", "kv_channels", "attention_head_dim")
    if head_dim is None and hf_mla.is_mla(cfg):
        head_dim = hf_mla.mla_head_dim(cfg)
    if head_dim is None and model_type == "mpt":
        head_dim = hidden // heads
    if cross := cfg.get("cross_attention_layers"):
        if not isinstance(cross, list):
            raise SpecError(f"{where}: cross_attention_layers must be a list")
    if kv_heads and heads % kv_heads:
        raise SpecError(
            f"{where}: num_attention_heads ({heads}) is not divisible by the KV heads ({kv_heads})",
            hint="query heads must split evenly into KV-head groups",
        )
    vocab = cfg.int_field("vocab_size", "padded_vocab_size")
    dtype = overrides.get("dtype") or declared_dtype(cfg)
    weight_dtype, expert_dtype = quantization(cfg, dtype) if "dtype" not in overrides else (dtype, None)
    positions = cfg.get("max_position_embeddings", "n_positions", "max_seq_len")  # for the --seq warning

    fields: dict[str, Any] = {
        "name": name,
        "source": where,
        "num_layers": layers,
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        # block_configs give every layer its own FFN width; there is no global one.
        "intermediate_size": 0 if cfg.get("block_configs") else hf_legacy.intermediate(cfg, model_type, hidden),
        "vocab_size": vocab,
        "tie_embeddings": bool(cfg.get("tie_word_embeddings", default=True)),
        "mlp_gated": model_type not in hf_legacy.UNGATED,
        "attention_bias": bool(
            cfg.get("attention_bias", "qkv_bias", "add_qkv_bias", default=model_type in ("qwen2", "qwen2_moe", "qwen"))
        ),
        "dtype": weight_dtype,
        "expert_dtype": expert_dtype,
        "layer_pattern": _pattern(cfg, model_type, layers, hidden, dtype),
        "max_position_embeddings": positions if isinstance(positions, int) and positions > 0 else None,
        **hf_moe.moe_fields(cfg, model_type),
        "checkpoint": checkpoint_info(raw),
    }
    if hf_mla.is_mla(cfg):
        fields.update(hf_mla.mla_fields(cfg))
    return build(ModelSpec, fields, where)
