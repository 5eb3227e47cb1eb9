"""transformers 5's own config forms of families whose hub configs use their remote code's names, rewritten to the
hub form the family modules read (a config saved by transformers, `save_pretrained`, carries these).

- MiMo-V2-Flash (transformers MiMoV2FlashConfig): `layer_types` for `hybrid_layer_pattern`; `sliding_window` is the
  reference's `sliding_window_size` + 1 (the query counted, MiMoV2FlashConfig.__post_init__); the sliding layers'
  KV heads are twice `num_key_value_heads` and each has a sink (MiMoV2FlashAttention), which the hub form names
  `swa_num_key_value_heads` and `add_swa_attention_sink_bias`.
- Kimi Linear (transformers KimiLinearConfig): `layer_types` and `linear_num_heads` / `linear_head_dim` /
  `linear_conv_kernel_dim` for the checkpoint's `linear_attn_config` (1-based `kda_layers`, `full_attn_layers`).
"""

from __future__ import annotations

from typing import Any


def normalized(model_type: str, data: dict[str, Any]) -> dict[str, Any]:
    """`data` in its hub form where it is a transformers-native MiMo-V2-Flash or Kimi Linear config; else as it is."""
    types = data.get("layer_types")
    if not isinstance(types, list):
        return data
    if model_type == "mimo_v2_flash" and "hybrid_layer_pattern" not in data:
        out = {k: v for k, v in data.items() if k != "layer_types"}
        out["hybrid_layer_pattern"] = [
            1 if t == "sliding_attention" else 0 if t == "full_attention" else t for t in types
        ]
        window, heads = data.get("sliding_window"), data.get("num_key_value_heads")
        if isinstance(window, int) and window > 1 and "sliding_window_size" not in data:
            out["sliding_window_size"] = window - 1
        if isinstance(heads, int) and "swa_num_key_value_heads" not in data:
            out["swa_num_key_value_heads"] = 2 * heads
        out.setdefault("add_swa_attention_sink_bias", True)
        return out
    if model_type == "kimi_linear" and not isinstance(data.get("linear_attn_config"), dict):
        out = {k: v for k, v in data.items() if k != "layer_types"}
        out["linear_attn_config"] = {
            "kda_layers": [i + 1 for i, t in enumerate(types) if t == "linear_attention"],
            "full_attn_layers": [i + 1 for i, t in enumerate(types) if t == "full_attention"],
            "num_heads": data.get("linear_num_heads", 32),  # KimiLinearConfig's defaults
            "head_dim": data.get("linear_head_dim", 128),
            "short_conv_kernel_size": data.get("linear_conv_kernel_dim", 4),
        }
        return out
    return data
