"""Laguna (poolside; LagunaForCausalLM, model_type laguna): full and sliding layers with query heads of their own.

SGLang 0.5.12+ models/laguna.py and configs/laguna.py: each layer's query heads are num_attention_heads_per_layer's
(48 on the full layers, 64 on the sliding ones of Laguna-XS.2), over the same KV heads and head width everywhere;
q and k RMS norms of head_dim; an output gate (g_proj) of one value a head ("per-head", the config's `gating: true`)
or one a channel ("per-element"); MoE after leading dense layers, a shared expert beside the routed ones, and a
float32 router with its correction bias. vLLM 0.19 has no Laguna class.
"""

from __future__ import annotations

from typing import Any

from kvcalc.model.hf.fields import Config
from kvcalc.model.spec import LayerRun

# SGLang's normalize_gating: what `gating` may say, as ModelSpec.attn_output_gate says it
GATES: dict[Any, bool | str] = {True: "head", "per-head": "head", "per-element": True}
GATES |= {False: False, None: False, "disabled": False}
GATE_TYPES = {"head": "per_head", True: "per_element"}  # gating_types' spelling, one entry a layer


def output_gate(cfg: Config) -> bool | str:
    gating = cfg.get("gating", default=True)
    if not isinstance(gating, (bool, str, type(None))) or gating not in GATES:
        raise cfg.refuse(f"gating {gating!r} is not read", hint="read: true, false, per-head, per-element, disabled")
    gate = GATES[gating]
    kinds = cfg.get("gating_types")
    if isinstance(kinds, list) and not all(isinstance(k, str) for k in kinds):
        raise cfg.refuse(f"field gating_types must list names, got {kinds!r}")
    if isinstance(kinds, list) and set(kinds) != ({GATE_TYPES[gate]} if gate else set()):
        raise cfg.refuse(
            f"gating_types {sorted(set(map(str, kinds)))} beside gating {gating!r} (a gate per layer) is not read",
            hint="its parameters are not counted, rather than guessed",
        )
    return gate


def per_layer_heads(cfg: Config, runs: list[LayerRun], layers: int) -> list[LayerRun]:
    """The layer runs with each layer's own query heads where they differ from num_attention_heads."""
    heads = cfg.get("num_attention_heads_per_layer")
    if heads is None:
        return runs
    if not isinstance(heads, list) or len(heads) != layers or not all(isinstance(h, int) and h > 0 for h in heads):
        raise cfg.refuse(
            f"num_attention_heads_per_layer must give positive query heads for each of the {layers} layers"
        )
    base = cfg.int_field("num_attention_heads")
    layer_runs = runs or [LayerRun()] * layers
    return [r if h == base else r.model_copy(update={"num_heads": h}) for r, h in zip(layer_runs, heads, strict=True)]
