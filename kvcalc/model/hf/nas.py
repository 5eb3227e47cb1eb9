"""NVIDIA Nemotron-NAS (DeciLM) block_configs: each block has its own attention and FFN."""

from __future__ import annotations

import math

from kvcalc.model.hf.fields import Config, is_factor
from kvcalc.model.spec import LayerKind, LayerRun


def block_configs(cfg: Config, layers: int, hidden: int) -> list[LayerRun]:
    blocks = cfg.get("block_configs")
    heads = cfg.int_field("num_attention_heads")
    if not isinstance(blocks, list) or not all(isinstance(b, dict) for b in blocks):
        raise cfg.refuse(f"field block_configs must list objects, got {blocks!r}"[:200])
    if len(blocks) != layers:
        raise cfg.refuse(f"block_configs has {len(blocks)} blocks for {layers} layers")
    runs = []
    for i, block in enumerate(blocks):
        attn, ffn = block.get("attention") or {}, block.get("ffn") or {}
        if not isinstance(attn, dict) or not isinstance(ffn, dict):
            raise cfg.refuse(f"block_configs[{i}]: attention and ffn must be objects")
        if ffn.get("no_op") or ffn.get("replace_with_linear"):
            inter = 0
        else:
            mult = ffn.get("ffn_mult")
            if not is_factor(mult):
                raise cfg.refuse(f"block_configs[{i}].ffn.ffn_mult must be a positive number, got {mult!r}")
            inter = 256 * math.ceil(int(2 * mult * hidden / 3) / 256)
        if attn.get("no_op"):
            runs.append(LayerRun(kind=LayerKind.STATELESS, mixer_params=0, intermediate_size=inter))
        elif attn.get("replace_with_linear"):
            runs.append(LayerRun(kind=LayerKind.STATELESS, mixer_params=hidden * hidden, intermediate_size=inter))
        else:
            group = attn.get("n_heads_in_group")
            if not isinstance(group, int) or group <= 0 or heads % group:
                raise cfg.refuse(f"block_configs[{i}].attention.n_heads_in_group must divide {heads}, got {group!r}")
            runs.append(LayerRun(kind=LayerKind.FULL, kv_heads=heads // group, intermediate_size=inter))
    return runs
