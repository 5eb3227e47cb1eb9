"""Hugging Face config.json -> ModelSpec, across today's architectures. Pure: no I/O."""

from __future__ import annotations

import math
from typing import Any

from kvcalc.errors import SpecError
from kvcalc.specs import LayerKind, LayerRun, ModelSpec, build
from kvcalc.units import DTYPE_ALIASES, DTYPE_BITS

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
UNGATED = {
    "gpt2",
    "gptj",
    "gpt_bigcode",
    "gpt_neox",
    "falcon",
    "bloom",
    "mpt",
    "starcoder2",
    "opt",
    "nemotron_h",
    "phi",
}
# Types whose `sliding_window` applies to every layer when set.
SLIDE_ALL = {"mistral", "mixtral", "starcoder2", "phi3", "phimoe"}
# Types whose `sliding_window` is used only when `use_sliding_window` is true.
QWEN_SLIDE = {"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"}


class _Config:
    """A config dict with field-name aliases and a source location for error messages."""

    def __init__(self, data: dict[str, Any], where: str, overrides: dict[str, Any]):
        self.data, self.where, self.overrides = data, where, overrides

    def get(self, *names: str, default: Any = None) -> Any:
        for name in names:
            if self.data.get(name) is not None:
                return self.data[name]
        return default

    def require(self, *names: str, override: str | None = None) -> Any:
        value = self.get(*names)
        if value is None:
            hint = f"pass {override} to supply it" if override else "this architecture cannot be read"
            raise SpecError(f"{self.where}: no {' / '.join(names)} in config.json", hint=hint)
        return value

    def int_field(self, *names: str, override: str | None = None, default: Any = None) -> int:
        value = self.get(*names, default=default) if default is not None else self.require(*names, override=override)
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{self.where}: field {names[0]} must be an integer, got {value!r}")
        if value <= 0:
            raise SpecError(f"{self.where}: field {names[0]} must be positive, got {value}")
        return value


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


def _dtype(cfg: _Config) -> str:
    raw = str(cfg.get("torch_dtype", "dtype", default="bfloat16")).removeprefix("torch.")
    key = DTYPE_ALIASES.get(raw, raw)
    return key if key in DTYPE_BITS else "bf16"


def _quantization(cfg: _Config, dtype: str) -> tuple[str, str | None]:
    """(weight dtype, expert dtype) from quantization_config."""
    q = cfg.get("quantization_config")
    if not isinstance(q, dict):
        return dtype, None
    method = str(q.get("quant_method", "")).lower()
    if method == "mxfp4":
        # NOTE: gpt-oss quantizes only the experts; attention, router, embeddings stay bf16.
        return dtype, "mxfp4"
    if method in ("fp8", "fbgemm_fp8", "compressed-tensors") and "fp8" in str(q).lower():
        return "fp8", None
    bits = q.get("bits") or q.get("w_bit")
    if method in ("gptq", "awq", "bitsandbytes", "quark") and bits in (4, 8):
        return ("int4" if bits == 4 else "int8"), None
    if q.get("load_in_4bit"):
        return "int4", None
    if q.get("load_in_8bit"):
        return "int8", None
    raise SpecError(
        f"{cfg.where}: quantization_config with quant_method '{method}' is not understood",
        hint="pass --dtype to say what the weights are stored in",
    )


def _kv_heads(cfg: _Config, model_type: str, heads: int) -> int:
    if "kv_heads" in cfg.overrides:
        return cfg.overrides["kv_heads"]
    if model_type == "falcon":
        if cfg.get("new_decoder_architecture"):
            return cfg.int_field("num_kv_heads", "num_key_value_heads")
        return 1 if cfg.get("multi_query", default=True) else heads
    if model_type == "chatglm":
        return cfg.int_field("multi_query_group_num") if cfg.get("multi_query_attention") else heads
    if model_type == "mpt":
        # NOTE: attn_config carries a kv_n_heads default even for MHA; only its attn_type counts.
        attn = cfg.get("attn_config") or {}
        kind = attn.get("attn_type", "multihead_attention")
        if kind == "multiquery_attention":
            return 1
        return attn.get("kv_n_heads") or heads if kind == "grouped_query_attention" else heads
    if cfg.get("multi_query") is True:  # gpt_bigcode (StarCoder, SantaCoder)
        return 1
    value = cfg.get("num_key_value_heads", "num_kv_heads", "n_head_kv")
    if value is None:
        return heads  # NOTE: absent num_key_value_heads means MHA (Llama 2 7B/13B, Qwen 1)
    return cfg.int_field("num_key_value_heads", "num_kv_heads", "n_head_kv")


def _intermediate(cfg: _Config, model_type: str, hidden: int) -> int:
    if model_type == "mpt":
        return int(cfg.get("expansion_ratio", default=4) * hidden)
    if model_type == "qwen":
        # NOTE: Qwen 1 lists twice its MLP width: w1 and w2 are each intermediate_size / 2.
        return cfg.int_field("intermediate_size") // 2
    value = cfg.get("intermediate_size", "ffn_hidden_size", "n_inner", "ffn_dim")
    if value is None:
        if model_type in UNGATED or model_type in ("gpt2", "bloom", "falcon"):
            return 4 * hidden
        return cfg.int_field("intermediate_size", override=None)
    return value


def _mamba2(cfg: _Config, hidden: int, state_bytes_per_element: float) -> tuple[int, int]:
    """(state bytes per sequence, mixer params) of one Mamba-2 layer."""
    heads = cfg.int_field("mamba_num_heads")
    head_dim = cfg.int_field("mamba_head_dim")
    d_state = cfg.int_field("ssm_state_size", "state_size")
    groups = cfg.get("n_groups", "mamba_n_groups", default=1)
    kernel = cfg.get("conv_kernel", "mamba_d_conv", default=4)
    d_inner = heads * head_dim
    conv_dim = d_inner + 2 * groups * d_state
    state = heads * head_dim * d_state + (kernel - 1) * conv_dim
    params = (
        hidden * (2 * d_inner + 2 * groups * d_state + heads)
        + conv_dim * (kernel + 1)
        + 3 * heads
        + d_inner
        + d_inner * hidden
    )
    return math.ceil(state * state_bytes_per_element), params


def _mamba1(cfg: _Config, hidden: int, state_bytes_per_element: float) -> tuple[int, int]:
    d_inner = cfg.get("mamba_expand", default=2) * hidden
    d_state = cfg.get("mamba_d_state", default=16)
    d_conv = cfg.get("mamba_d_conv", default=4)
    dt_rank = cfg.get("mamba_dt_rank", default=math.ceil(hidden / 16))
    state = d_inner * d_state + (d_conv - 1) * d_inner
    params = (
        hidden * 2 * d_inner
        + d_inner * d_conv
        + d_inner * (dt_rank + 2 * d_state)
        + dt_rank * d_inner
        + d_inner * d_state
        + 2 * d_inner
        + d_inner * hidden
    )
    return math.ceil(state * state_bytes_per_element), params


def _gated_deltanet(cfg: _Config, hidden: int, state_bytes_per_element: float) -> tuple[int, int]:
    """Qwen3-Next / Qwen3.5 linear attention: a (k x v) state per value head plus a conv window."""
    k_heads = cfg.int_field("linear_num_key_heads")
    v_heads = cfg.int_field("linear_num_value_heads")
    dk = cfg.int_field("linear_key_head_dim")
    dv = cfg.int_field("linear_value_head_dim")
    kernel = cfg.get("linear_conv_kernel_dim", default=4)
    key_dim, value_dim = k_heads * dk, v_heads * dv
    conv_dim = 2 * key_dim + value_dim
    state = v_heads * dk * dv + (kernel - 1) * conv_dim
    params = (
        hidden * (2 * key_dim + 2 * value_dim)
        + hidden * 2 * v_heads
        + conv_dim * kernel
        + 2 * v_heads
        + dv
        + value_dim * hidden
    )
    return math.ceil(state * state_bytes_per_element), params


def _pattern(cfg: _Config, model_type: str, layers: int, hidden: int, dtype: str) -> list[LayerRun]:
    """One LayerRun per layer (count 1), or [] for a uniform model."""
    window = cfg.overrides.get("window") or cfg.get("sliding_window")
    state_el = float(DTYPE_BITS[dtype]) / 8
    if cfg.get("kv_lora_rank"):
        return []  # uniform MLA
    if isinstance(cfg.get("block_configs"), list):
        return _block_configs(cfg, layers, hidden)
    types = cfg.get("layer_types")
    interval = cfg.get("full_attention_interval")
    if types is None and isinstance(interval, int) and interval > 0:
        # Qwen3-Next: every `interval`-th layer is full attention, the rest linear attention.
        types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
    if isinstance(types, list):
        if len(types) != layers:
            raise SpecError(f"{cfg.where}: layer_types has {len(types)} entries for {layers} layers")
        runs = []
        for t in types:
            if t in ("full_attention", "attention"):
                runs.append(LayerRun(kind=LayerKind.FULL))
            elif t == "sliding_attention":
                runs.append(LayerRun(kind=LayerKind.SLIDING, window_tokens=_window(cfg, window)))
            elif t == "chunked_attention":
                runs.append(LayerRun(kind=LayerKind.CHUNKED, window_tokens=cfg.int_field("attention_chunk_size")))
            elif t == "linear_attention":
                state, params = _gated_deltanet(cfg, hidden, state_el)
                runs.append(LayerRun(kind=LayerKind.STATELESS, state_bytes=state, mixer_params=params))
            else:
                raise SpecError(f"{cfg.where}: layer type '{t}' in layer_types is not supported")
        return runs
    if isinstance(cfg.get("hybrid_override_pattern"), str):
        return _nemotron_h(cfg, layers, hidden, state_el)
    if cfg.get("attn_layer_period"):
        period, offset = cfg.get("attn_layer_period"), cfg.get("attn_layer_offset", default=0)
        state, params = _mamba1(cfg, hidden, state_el)
        moe_period, moe_offset = cfg.get("expert_layer_period", default=1), cfg.get("expert_layer_offset", default=0)
        inter = cfg.get("intermediate_size")
        runs = []
        for i in range(layers):
            dense = (
                {}
                if (cfg.get("num_experts", default=0) > 1 and i % moe_period == moe_offset)
                else {"intermediate_size": inter}
            )
            if i % period == offset:
                runs.append(LayerRun(kind=LayerKind.FULL, **dense))
            else:
                runs.append(LayerRun(kind=LayerKind.STATELESS, state_bytes=state, mixer_params=params, **dense))
        return runs
    if cfg.get("attention_chunk_size"):
        # Llama 4: RoPE layers attend within chunks; every 4th (NoPE) layer is global.
        nope = cfg.get("no_rope_layers")
        interval = cfg.get("no_rope_layer_interval", default=4)
        if not isinstance(nope, list) or len(nope) != layers:
            nope = [int((i + 1) % interval != 0) for i in range(layers)]
        chunk = cfg.int_field("attention_chunk_size")
        step = cfg.get("interleave_moe_layer_step", default=1)
        dense_inter = cfg.get("intermediate_size_mlp", "intermediate_size")
        runs = []
        for i in range(layers):
            extra = {} if (i + 1) % step == 0 else {"intermediate_size": dense_inter}
            if nope[i]:
                runs.append(LayerRun(kind=LayerKind.CHUNKED, window_tokens=chunk, **extra))
            else:
                runs.append(LayerRun(kind=LayerKind.FULL, **extra))
        return runs
    cross = cfg.get("cross_attention_layers")
    if isinstance(cross, list):
        return [LayerRun(kind=LayerKind.CROSS if i in cross else LayerKind.FULL) for i in range(layers)]
    if model_type == "gemma2":
        return [
            LayerRun(kind=LayerKind.SLIDING, window_tokens=_window(cfg, window)) if i % 2 == 0 else LayerRun()
            for i in range(layers)
        ]
    if model_type == "gemma3_text":
        every = cfg.get("sliding_window_pattern", "_sliding_window_pattern", default=6)
        return [
            LayerRun() if (i + 1) % every == 0 else LayerRun(kind=LayerKind.SLIDING, window_tokens=_window(cfg, window))
            for i in range(layers)
        ]
    if model_type in QWEN_SLIDE or cfg.get("use_sliding_window") is not None:
        if cfg.get("use_sliding_window") and window:
            first = cfg.get("max_window_layers", default=layers)
            return [
                LayerRun(kind=LayerKind.SLIDING, window_tokens=window) if i >= first else LayerRun()
                for i in range(layers)
            ]
        return []
    if window and (model_type in SLIDE_ALL or "window" in cfg.overrides or model_type not in TYPE_DEFAULTS):
        return [LayerRun(kind=LayerKind.SLIDING, window_tokens=window)] * layers
    return []


def _window(cfg: _Config, window: Any) -> int:
    if not isinstance(window, int) or window <= 0:
        raise SpecError(f"{cfg.where}: sliding layers but no usable sliding_window", hint="pass --window")
    return window


def _nemotron_h(cfg: _Config, layers: int, hidden: int, state_el: float) -> list[LayerRun]:
    pattern = cfg.get("hybrid_override_pattern")
    if len(pattern) != layers:
        raise SpecError(
            f"{cfg.where}: hybrid_override_pattern has {len(pattern)} layers, num_hidden_layers says {layers}"
        )
    state, params = _mamba2(cfg, hidden, state_el)
    inter = cfg.get("intermediate_size")
    runs = []
    for ch in pattern:
        if ch == "*":  # attention only, no MLP in this block
            runs.append(LayerRun(kind=LayerKind.FULL, intermediate_size=0))
        elif ch == "M":
            runs.append(LayerRun(kind=LayerKind.STATELESS, state_bytes=state, mixer_params=params, intermediate_size=0))
        elif ch == "-":  # MLP only
            runs.append(LayerRun(kind=LayerKind.STATELESS, mixer_params=0, intermediate_size=inter))
        else:
            raise SpecError(f"{cfg.where}: hybrid_override_pattern symbol '{ch}' is not supported (known: * M -)")
    return runs


def _block_configs(cfg: _Config, layers: int, hidden: int) -> list[LayerRun]:
    """NVIDIA Nemotron-NAS (DeciLM): each block has its own attention and FFN."""
    blocks = cfg.get("block_configs")
    heads = cfg.int_field("num_attention_heads")
    if len(blocks) != layers:
        raise SpecError(f"{cfg.where}: block_configs has {len(blocks)} blocks for {layers} layers")
    runs = []
    for i, block in enumerate(blocks):
        attn, ffn = block.get("attention", {}), block.get("ffn", {})
        if ffn.get("no_op") or ffn.get("replace_with_linear"):
            inter = 0
        else:
            mult = ffn.get("ffn_mult")
            if mult is None:
                raise SpecError(f"{cfg.where}: block_configs[{i}].ffn has no ffn_mult")
            inter = 256 * math.ceil(int(2 * mult * hidden / 3) / 256)
        if attn.get("no_op"):
            runs.append(LayerRun(kind=LayerKind.STATELESS, mixer_params=0, intermediate_size=inter))
        elif attn.get("replace_with_linear"):
            runs.append(LayerRun(kind=LayerKind.STATELESS, mixer_params=hidden * hidden, intermediate_size=inter))
        else:
            group = attn.get("n_heads_in_group")
            if not isinstance(group, int) or group <= 0 or heads % group:
                raise SpecError(
                    f"{cfg.where}: block_configs[{i}].attention.n_heads_in_group must divide {heads}, got {group!r}"
                )
            runs.append(LayerRun(kind=LayerKind.FULL, kv_heads=heads // group, intermediate_size=inter))
    return runs


def _moe(cfg: _Config, model_type: str) -> dict[str, Any]:
    experts = cfg.get("num_local_experts", "n_routed_experts", "num_experts", default=0) or 0
    if experts <= 1:
        return {}
    k = cfg.get("num_experts_per_tok", "experts_per_token", "moe_top_k", "num_selected_experts")
    if not k:
        raise SpecError(f"{cfg.where}: {experts} experts but no num_experts_per_tok")
    moe_inter = cfg.get("moe_intermediate_size")
    if model_type == "llama4_text":
        moe_inter = cfg.get("intermediate_size")
    shared = 0
    if cfg.get("n_shared_experts"):
        shared = cfg.get("n_shared_experts") * (moe_inter or 0)
    elif cfg.get("shared_expert_intermediate_size"):
        shared = cfg.get("shared_expert_intermediate_size")
    elif model_type == "llama4_text":
        shared = moe_inter
    out = {"experts": experts, "experts_per_token": k, "shared_expert_intermediate_size": shared}
    if moe_inter:
        out["expert_intermediate_size"] = moe_inter
    dense = cfg.get("first_k_dense_replace", default=0)
    if dense:
        out["dense_layers"] = dense
    return out


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
    cfg = _Config(data, where, overrides)

    layers = overrides.get("layers") or cfg.int_field(
        "num_hidden_layers", "n_layer", "n_layers", "num_layers", override="--layers"
    )
    hidden = cfg.int_field("hidden_size", "n_embd", "d_model", "dim", override=None)
    heads = cfg.int_field("num_attention_heads", "n_head", "n_heads", "num_heads")
    kv_heads = _kv_heads(cfg, model_type, heads)
    head_dim = overrides.get("head_dim") or cfg.get("head_dim", "kv_channels", "attention_head_dim")
    if head_dim is None and cfg.get("kv_lora_rank"):
        # NOTE: an MLA model's "head shape" (for mha/gqa what-ifs) is its per-head value width.
        head_dim = cfg.get("v_head_dim", "qk_nope_head_dim")
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
    dtype = overrides.get("dtype") or _dtype(cfg)
    weight_dtype, expert_dtype = _quantization(cfg, dtype) if "dtype" not in overrides else (dtype, None)

    fields: dict[str, Any] = {
        "name": name,
        "source": where,
        "num_layers": layers,
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        # block_configs give every layer its own FFN width; there is no global one.
        "intermediate_size": 0 if cfg.get("block_configs") else _intermediate(cfg, model_type, hidden),
        "vocab_size": vocab,
        "tie_embeddings": bool(cfg.get("tie_word_embeddings", default=True)),
        "mlp_gated": model_type not in UNGATED,
        "attention_bias": bool(
            cfg.get("attention_bias", "qkv_bias", "add_qkv_bias", default=model_type in ("qwen2", "qwen2_moe", "qwen"))
        ),
        "dtype": weight_dtype,
        "expert_dtype": expert_dtype,
        "layer_pattern": _pattern(cfg, model_type, layers, hidden, dtype),
        **_moe(cfg, model_type),
    }
    if cfg.get("kv_lora_rank"):
        fields.update(
            kv_lora_rank=cfg.int_field("kv_lora_rank"),
            qk_rope_head_dim=cfg.int_field("qk_rope_head_dim"),
            qk_nope_head_dim=cfg.get("qk_nope_head_dim"),
            v_head_dim=cfg.get("v_head_dim"),
            q_lora_rank=cfg.get("q_lora_rank"),
            num_kv_heads=None,
        )
    return build(ModelSpec, fields, where)
