"""Sliding-window and chunked attention patterns: Mistral, Qwen 2/3, Gemma 2/3, Llama 4."""

from __future__ import annotations

from typing import Any

from kvcalc.model.hf.fields import Config, window
from kvcalc.model.spec import LayerKind, LayerRun

# Types whose `sliding_window` applies to every layer when set.
SLIDE_ALL = {"mistral", "mixtral", "starcoder2", "phi3", "phimoe"}
# Types whose `sliding_window` is used only when `use_sliding_window` is true.
QWEN_SLIDE = {"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"}


def llama4_chunked(cfg: Config, layers: int) -> list[LayerRun]:
    """Llama 4: RoPE layers attend within chunks; every 4th (NoPE) layer is global. MoE layers are
    moe_layers, else every interleave_moe_layer_step-th; the rest have a dense MLP of intermediate_size_mlp.

    Llama4TextConfig (transformers 5) derives layer_types from no_rope_layers and serializes both, so a
    re-saved config lists chunked_attention / full_attention per layer: read them here, beside the MLP
    layout, rather than as a plain layer_types list (which would make every layer MoE).
    """
    nope = cfg.get("no_rope_layers")
    interval = cfg.get("no_rope_layer_interval", default=4)
    if not isinstance(nope, list) or len(nope) != layers:
        nope = [int((i + 1) % interval != 0) for i in range(layers)]
    types = cfg.get("layer_types")
    if isinstance(types, list):
        if len(types) != layers or any(t not in ("chunked_attention", "full_attention") for t in types):
            raise cfg.refuse("layer_types of a Llama 4 model must list chunked_attention / full_attention per layer")
        nope = [int(t == "chunked_attention") for t in types]
    # vLLM llama4.py: a RoPE layer attends in chunks only when attention_chunk_size is set.
    chunk = cfg.int_field("attention_chunk_size") if cfg.get("attention_chunk_size") is not None else None
    step = cfg.get("interleave_moe_layer_step", default=1)
    moe = cfg.get("moe_layers")
    if not isinstance(moe, list):
        moe = list(range(step - 1, layers, step))  # Llama4TextConfig's default
    dense_inter = cfg.int_field("intermediate_size_mlp", "intermediate_size")
    runs = []
    for i in range(layers):
        extra: dict[str, Any] = {} if i in moe else {"intermediate_size": dense_inter}
        if nope[i] and chunk:
            runs.append(LayerRun(kind=LayerKind.CHUNKED, window_tokens=chunk, **extra))
        else:
            runs.append(LayerRun(kind=LayerKind.FULL, **extra))
    return runs


def sliding_pattern(cfg: Config, model_type: str, layers: int, known_type: bool) -> list[LayerRun] | None:
    """The window pattern of a family that has one, [] for uniform full attention, None if not ours."""
    win: Any = cfg.overrides.get("window") or cfg.get("sliding_window", "sliding_window_size")
    if model_type == "gemma2":
        return [
            LayerRun(kind=LayerKind.SLIDING, window_tokens=window(cfg, win)) if i % 2 == 0 else LayerRun()
            for i in range(layers)
        ]
    if model_type in ("gemma3_text", "cohere2") or cfg.get("sliding_window_pattern") is not None:
        # Gemma3Config and Cohere2Config derive layer_types alike: layer i is full attention when
        # (i + 1) % sliding_window_pattern == 0, sliding otherwise.
        # Exaone4Config also takes the pattern spelled out ("LLLG": three local layers, then a global one).
        spelled = cfg.get("sliding_window_pattern")
        if isinstance(spelled, str) and spelled and set(spelled.upper()) <= {"L", "G"}:
            local = [spelled[i % len(spelled)].upper() == "L" for i in range(layers)]
        else:
            every = cfg.int_field("sliding_window_pattern", "_sliding_window_pattern", default=6)
            local = [(i + 1) % every != 0 for i in range(layers)]
        return [LayerRun(kind=LayerKind.SLIDING, window_tokens=window(cfg, win)) if s else LayerRun() for s in local]
    if model_type in QWEN_SLIDE or cfg.get("use_sliding_window") is not None:
        if cfg.get("use_sliding_window") and win:
            first = cfg.get("max_window_layers", default=layers)
            return [
                LayerRun(kind=LayerKind.SLIDING, window_tokens=win) if i >= first else LayerRun() for i in range(layers)
            ]
        return []
    if win and (model_type in SLIDE_ALL or "window" in cfg.overrides):
        return [LayerRun(kind=LayerKind.SLIDING, window_tokens=win)] * layers
    if win and not known_type:
        # NOTE: families disagree on which layers a bare sliding_window applies to (all of them in
        # Mistral; some, by a pattern or a layer list, elsewhere): for an unread type, refuse.
        raise cfg.refuse(
            f"sliding_window {win} in a '{model_type}' config without layer_types: which layers slide is not known",
            hint="pass --window to make every layer slide, if that is what the model does",
        )
    return None


def gemma4_types(cfg: Config, layers: int) -> list[str]:
    """Gemma4TextConfig's layer_types: as listed, else five sliding layers to one full; the last layer is
    always full attention (the config forces it)."""
    types = cfg.get("layer_types")
    if not isinstance(types, list):
        types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(layers)]
    return [*types[:-1], "full_attention"] if types else types


def gemma4_full(cfg: Config) -> dict[str, Any]:
    """A Gemma 4 full-attention layer's own shape (Gemma4TextConfig.per_layer_config): head width
    global_head_dim; num_global_key_value_heads KV heads when attention_k_eq_v is set, whose layers load
    k_proj as V too (vLLM gemma4.py: no v_proj in the checkpoint)."""
    out: dict[str, Any] = {}
    width = cfg.int_field("global_head_dim")
    if width != cfg.get("head_dim"):
        out["head_dim"] = width
    if cfg.get("attention_k_eq_v"):
        out["v_is_k"] = True
        if cfg.get("num_global_key_value_heads") is not None:
            out["kv_heads"] = cfg.int_field("num_global_key_value_heads")
    return out


def mimo_v2(cfg: Config, layers: int) -> list[LayerRun]:
    """MiMo-V2-Flash: hybrid_layer_pattern marks each layer full attention (0) or sliding (1, over
    sliding_window_size tokens, with swa_num_key_value_heads KV heads of its own); vLLM mimo_v2_flash.py builds
    them so. The sliding layers' query heads, head width and value width must be the full layers' (refused
    otherwise in model/hf/unread.py)."""
    pattern = cfg.get("hybrid_layer_pattern")
    if not isinstance(pattern, list) or len(pattern) != layers or set(pattern) - {0, 1}:
        raise cfg.refuse(f"hybrid_layer_pattern must list 0 (full) or 1 (sliding) for each of the {layers} layers")
    win = window(cfg, cfg.overrides.get("window") or cfg.get("sliding_window_size", "sliding_window"))
    heads = cfg.int_field("swa_num_key_value_heads", default=cfg.int_field("num_key_value_heads"))
    sliding = LayerRun(kind=LayerKind.SLIDING, window_tokens=win, kv_heads=heads)
    return [sliding if p == 1 else LayerRun() for p in pattern]


def gpt_neo(cfg: Config, layers: int) -> list[LayerRun]:
    """GPT-Neo: attention_layers (or attention_types, [[["global", "local"], 12]] expanded as GPTNeoConfig does) marks
    each layer global (full) or local (a sliding window of window_size tokens, 256 by default)."""
    kinds = cfg.get("attention_layers")
    if kinds is None:
        spec = cfg.get("attention_types", default=[[["global", "local"], layers // 2]])
        try:
            kinds = [kind for names, repeat in spec for _ in range(int(repeat)) for kind in names]
        except (TypeError, ValueError):
            raise cfg.refuse("attention_types must be [[kinds, repeat], ...] (GPTNeoConfig)") from None
    if not isinstance(kinds, list) or len(kinds) != layers or set(kinds) - {"global", "local"}:
        raise cfg.refuse(f"attention_layers must name 'global' or 'local' for each of the {layers} layers")
    win = window(cfg, cfg.overrides.get("window") or cfg.get("window_size", default=256))
    return [LayerRun(kind=LayerKind.SLIDING, window_tokens=win) if k == "local" else LayerRun() for k in kinds]
