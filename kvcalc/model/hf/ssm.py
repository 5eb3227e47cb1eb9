"""Pure state-space models: Mamba (MambaConfig), Falcon-Mamba (FalconMambaConfig) and Mamba-2 (Mamba2Config).

Every layer is one norm and one mixer with a constant state per sequence; there is no attention, no MLP and
so no KV cache. The mixers' shapes and defaults are transformers' (models/mamba, falcon_mamba, mamba2), their
state vLLM's (mamba1_state_shape / mamba2_state_shape, in the model's dtype: its hooks pass
mamba_ssm_cache_dtype 'auto'). Pure.
"""

from __future__ import annotations

import math
from typing import Any

from kvcalc.errors import SpecError
from kvcalc.model.hf.fields import Config
from kvcalc.model.hf.hybrid import Mamba1, Mamba2, StateDtypes

SSM_TYPES = ("mamba", "falcon_mamba", "mamba2")


def ssm_fields(cfg: Config, model_type: str, layers: int, el: StateDtypes) -> dict[str, Any]:
    """The ModelSpec fields of a pure state-space model (num_heads 1: it has no attention heads)."""
    for flag in ("kv_heads", "head_dim", "window"):
        if flag in cfg.overrides:
            raise SpecError(
                f"{cfg.where}: --{flag.replace('_', '-')} has no meaning for '{model_type}': a pure state-space "
                "model has no attention layers"
            )
    hidden = cfg.int_field("hidden_size", "d_model")
    expand = cfg.get("expand")
    if not isinstance(expand, int | float) or isinstance(expand, bool) or expand <= 0:
        raise cfg.refuse(f"field expand must be a positive number, got {expand!r}")
    conv_bias = bool(cfg.get("use_conv_bias", default=True))
    proj_bias = bool(cfg.get("use_bias", default=False))
    kernel = cfg.int_field("conv_kernel", default=4)
    if model_type == "mamba2":
        shape = Mamba2(
            hidden,
            cfg.int_field("num_heads"),
            cfg.int_field("head_dim"),
            cfg.int_field("state_size"),
            cfg.int_field("n_groups"),
            kernel,
        )
        if shape.heads * shape.head_dim != int(expand * hidden):
            # Mamba2Config raises the same: the mixer's width is both num_heads x head_dim and expand x hidden
            raise cfg.refuse(
                f"num_heads x head_dim ({shape.heads} x {shape.head_dim}) differs from expand x hidden_size "
                f"({expand} x {hidden})"
            )
        mixer = shape.mixer(el, conv_bias, proj_bias, proj_bias)
    else:
        # MambaConfig always takes expand x hidden_size as its width; FalconMambaConfig takes
        # intermediate_size when the file gives one.
        width = (
            cfg.int_field("intermediate_size") if model_type == "falcon_mamba" and cfg.get("intermediate_size") else 0
        )
        rank = cfg.get("time_step_rank", default="auto")
        rank = math.ceil(hidden / 16) if rank == "auto" else rank
        if not isinstance(rank, int) or isinstance(rank, bool) or rank <= 0:
            raise cfg.refuse(f"field time_step_rank must be a positive integer or 'auto', got {rank!r}")
        shape1 = Mamba1(hidden, width or int(expand * hidden), cfg.int_field("state_size"), kernel, rank)
        mixer = shape1.mixer(el, conv_bias, proj_bias)
    return {
        "num_layers": layers,
        "hidden_size": hidden,
        "num_heads": 1,
        "intermediate_size": 0,
        # MambaConfig and FalconMambaConfig keep PretrainedConfig's default (tied); Mamba2Config unties
        "tie_embeddings": bool(cfg.get("tie_word_embeddings", default=True)),
        "layer_pattern": [mixer.run(intermediate_size=0)],
    }
