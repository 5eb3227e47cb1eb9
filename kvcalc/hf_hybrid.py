"""Hybrid models: Mamba-1 / Mamba-2 and Gated DeltaNet layers (constant state) beside attention."""

from __future__ import annotations

import math

from kvcalc.hf_fields import Config
from kvcalc.specs import LayerKind, LayerRun


def mamba2(cfg: Config, hidden: int, state_bytes_per_element: float) -> tuple[int, int]:
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


def mamba1(cfg: Config, hidden: int, state_bytes_per_element: float) -> tuple[int, int]:
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


def gated_deltanet(cfg: Config, hidden: int, state_bytes_per_element: float) -> tuple[int, int]:
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


def nemotron_h(cfg: Config, layers: int, hidden: int, state_el: float) -> list[LayerRun]:
    pattern = cfg.get("hybrid_override_pattern")
    if len(pattern) != layers:
        raise cfg.refuse(f"hybrid_override_pattern has {len(pattern)} layers, num_hidden_layers says {layers}")
    state, params = mamba2(cfg, hidden, state_el)
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
            raise cfg.refuse(f"hybrid_override_pattern symbol '{ch}' is not supported (known: * M -)")
    return runs


def jamba(cfg: Config, layers: int, hidden: int, state_el: float) -> list[LayerRun]:
    """Jamba: attention at layer i when i % attn_layer_period == attn_layer_offset, Mamba-1 elsewhere."""
    period, offset = cfg.get("attn_layer_period"), cfg.get("attn_layer_offset", default=0)
    state, params = mamba1(cfg, hidden, state_el)
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
