"""What a checkpoint loads beyond the architecture (quant.Checkpoint), read from config.json: its quantization, the
rotary caches' widths and rows, the vision tower, the lengths each engine takes. Pure."""

from __future__ import annotations

from typing import Any

from kvcalc.model.hf.quantization import read_quantization
from kvcalc.model.quant import Checkpoint, EngineLengths


def checkpoint_info(raw: Any, defaults: dict[str, Any] | None = None) -> Checkpoint | None:
    """One call from the config reader: what vLLM loads beyond the architecture's parameters.
    defaults: the text model's class defaults, for the fields a sparse config leaves out."""
    from kvcalc.model.hf.positions import engine_lengths, rotary_rows, step_rotary
    from kvcalc.model.hf.towers import image_profile, vision_params

    if not isinstance(raw, dict):
        return None
    text: dict[str, Any] = raw["text_config"] if isinstance(raw.get("text_config"), dict) else raw
    text = {**(defaults or {}), **text}
    heads, hidden = text.get("num_attention_heads"), text.get("hidden_size")
    # NOTE: MLA rotates only the qk_rope_head_dim part (vLLM deepseek_v2.py get_rope(qk_rope_head_dim));
    # GLM-5.2's head_dim (192) is not the rotary width.
    # DeepSeek-V4 rotates the last qk_rope_head_dim of its head_dim-wide entry (transformers DeepseekV4Attention)
    rotated = text.get("kv_lora_rank") or text.get("model_type") == "deepseek_v4"
    head_dim = (rotated and text.get("qk_rope_head_dim")) or text.get("head_dim")
    head_dim = head_dim or text.get("qk_rope_head_dim")
    if head_dim is None and isinstance(heads, int) and isinstance(hidden, int) and heads:
        head_dim = hidden // heads
    # transformers 5 keeps partial_rotary_factor inside rope_parameters (Qwen3.5), where vLLM 0.19's get_rope reads it
    params = text.get("rope_parameters")
    factor = text.get(
        "partial_rotary_factor", params.get("partial_rotary_factor") if isinstance(params, dict) else None
    )
    rotary = _rotated(head_dim, 1.0 if factor is None else factor) if isinstance(head_dim, int) else None
    given = text.get("rotary_dim")
    if factor is None and isinstance(given, int) and isinstance(head_dim, int):
        # GPT-J, MiniMax-M2 / Text-01: vLLM's gpt_j.py and minimax_*.py take the config's rotary_dim columns
        rotary = given if 0 < given <= head_dim else rotary
    stored = str(text.get("torch_dtype") or raw.get("torch_dtype") or raw.get("dtype") or "").removeprefix("torch.")
    names = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
    declared = names.get(stored)
    # Ling writes "fp32", MiMo and GLM-5.2 "float32"
    router = str(text.get("moe_router_dtype") or text.get("router_dtype") or "").removeprefix("torch.")
    # Step 3.5: a rope a layer, so a cos/sin cache per distinct (theta, width, scaling) (hf/positions.step_rotary)
    rows, widths = step_rotary(text) or (rotary_rows(raw, text), _rotary_widths(text))
    return Checkpoint(
        declared_dtype=declared,
        router_dtype=names.get(router, router if router in names.values() else None),
        quantization=read_quantization(
            raw.get("quantization_config") or text.get("quantization_config"), text.get("expert_dtype")
        ),
        rotary_dim=rotary,
        vision=isinstance(raw.get("vision_config"), dict),
        vision_shape=_vision_shape(raw.get("vision_config")),
        rotary_rows=rows,
        rotary_widths=widths,
        vision_params=vision_params(raw, text),
        image_profile=image_profile(raw),
        lengths=EngineLengths(**lengths) if (lengths := engine_lengths(raw, text)) else None,
    )


def _vision_shape(vision: object) -> tuple[int, int] | None:
    if not isinstance(vision, dict):
        return None
    layers, width = vision.get("num_hidden_layers", 24), vision.get("hidden_size", 1024)
    return (layers, width) if isinstance(layers, int) and isinstance(width, int) else None


def _rotary_widths(text: dict[str, Any]) -> tuple[int, ...] | None:
    """Gemma 4: the full layers' proportional rope keeps a head-wide cache (vLLM Gemma4RotaryEmbedding passes
    rotary_dim = head_size), global_head_dim wide; the sliding layers' default rope one head_dim wide."""
    params = text.get("rope_parameters")
    if text.get("model_type") != "gemma4_text" or not isinstance(params, dict):
        return None
    full, sliding = params.get("full_attention"), params.get("sliding_attention")
    if not (isinstance(full, dict) and isinstance(sliding, dict)) or full == sliding:
        return None
    head, wide = text.get("head_dim"), text.get("global_head_dim", 512)
    if not (isinstance(head, int) and isinstance(wide, int)):
        return None
    return (wide, _rotated(head, sliding.get("partial_rotary_factor", 1.0)))


def _rotated(head_dim: int, factor: Any) -> int:
    """Columns a rope rotates: head_dim x partial_rotary_factor (the whole head for a missing or odd factor)."""
    return int(head_dim * factor) if isinstance(factor, (int, float)) and 0 < factor <= 1 else head_dim
