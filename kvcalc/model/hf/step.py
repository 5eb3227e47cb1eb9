"""Step 3.5 (StepFun; Step3p5ForCausalLM, model_type step3p5): full and sliding layers with query heads of their own.

vLLM 0.19 models/step3p5.py and transformers_utils/configs/step3p5.py: a layer whose layer_types entry is
attention_other_setting's attention_type (the sliding layers) takes that setting's query heads, KV groups and head
width (Step-3.5-Flash: 96 query heads on the sliding layers, 64 on the full ones, 8 KV heads and 128 wide on both);
layer_types is cut to num_hidden_layers (the checkpoint lists its MTP layers too). Every layer has q and k norms of
head_dim (GemmaRMSNorm, whatever use_qk_norm says) and, under use_head_wise_attn_gate, g_proj: one gate a query
head. The layers moe_layers_enum names (default: all but the first) are MoE: moe_num_experts routed experts of
moe_intermediate_size, top moe_top_k, one shared MLP of share_expert_dim, a float32 router with a bias per expert;
the others a dense MLP of intermediate_size. Each layer has its own rope (rope_theta and partial_rotary_factors
one value a layer; the scaling only on yarn_only_types), so vLLM builds a cos/sin cache per distinct setting
(hf/positions.step_rotary, read from the whole config.json).
"""

from __future__ import annotations

from typing import Any

from kvcalc.errors import SpecError
from kvcalc.model.hf.fields import Config
from kvcalc.model.spec import LayerKind, LayerRun

MODEL_TYPE = "step3p5"
# Step 3.5's names for what the reader reads under the common ones
RENAMED = {
    "num_attention_groups": "num_key_value_heads",
    "moe_num_experts": "num_experts",
    "moe_top_k": "num_experts_per_tok",
    "share_expert_dim": "shared_expert_intermediate_size",
}
# Per-layer lists and flags that hold no weights and no cache (the rope's, the SwiGLU clamps, the router's
# activation and scale, the offsets vLLM does not read beside moe_layers_enum): read here or left as they are.
NO_WEIGHTS = (
    "swiglu_limits", "swiglu_limits_shared", "partial_rotary_factors", "use_rope_layers", "yarn_only_types",
    "moe_layer_offset", "moe_every_n_layer", "moe_router_activation", "moe_router_scaling_factor",
    "norm_expert_weight", "need_fp32_gate", "use_moe_router_bias", "use_qk_norm", "att_impl_type", "rope_theta",
)  # fmt: skip


def _layers(data: dict[str, Any], where: str) -> int:
    layers = data.get("num_hidden_layers")
    if not isinstance(layers, int) or isinstance(layers, bool) or layers <= 0:
        raise SpecError(f"{where}: field num_hidden_layers must be a positive integer, got {layers!r}")
    return layers


def moe_layers(data: dict[str, Any], where: str) -> set[int]:
    """The MoE layers: moe_layers_enum ("3,4,...", or a list), else every layer but the first (vLLM's default)."""
    layers = _layers(data, where)
    raw = data.get("moe_layers_enum")
    if raw is None:
        return set(range(1, layers))
    items = raw.split(",") if isinstance(raw, str) else raw
    try:
        named = {int(str(i).strip()) for i in items if str(i).strip()}
    except (TypeError, ValueError):
        raise SpecError(
            f"{where}: field moe_layers_enum must list layer indices ('3,4,5' or [3, 4, 5]), got {raw!r}"
        ) from None
    return named


def normalized(data: dict[str, Any], where: str) -> dict[str, Any]:
    """A step3p5 config in the names the reader reads: the renamed keys, moe_layers_enum as mlp_layer_types,
    layer_types cut to num_hidden_layers; the keys without weights dropped (the rope's are read from the whole
    config.json, positions.step_rotary)."""
    if str(data.get("att_impl_type", "GQA")) != "GQA":
        # vLLM's Step3p5DecoderLayer raises "Unsupported attention implementation" for any other
        raise SpecError(f"{where}: att_impl_type {data['att_impl_type']!r} is not one vLLM builds", hint="read: GQA")
    layers = _layers(data, where)
    out = {k: v for k, v in data.items() if k not in RENAMED and k not in NO_WEIGHTS and k != "moe_layers_enum"}
    out.update({new: data[old] for old, new in RENAMED.items() if old in data})
    moe = moe_layers(data, where)
    out["mlp_layer_types"] = ["sparse" if i in moe else "dense" for i in range(layers)]
    # Step3p5ForCausalLM builds its own lm_head (ParallelLMHead) whatever tie_word_embeddings says
    out["tie_word_embeddings"] = False
    types = data.get("layer_types")
    if isinstance(types, list) and len(types) > layers:
        out["layer_types"] = types[:layers]  # Step3p5Config: "the checkpoint has longer layer_types"
    return out


def other_setting(cfg: Config) -> dict[str, Any] | None:
    """attention_other_setting, checked: the layer type it applies to and its query heads, KV groups, head width."""
    other = cfg.get("attention_other_setting")
    if other is None:
        return None
    keys = ("attention_type", "num_attention_heads", "num_attention_groups", "head_dim")
    if not isinstance(other, dict) or any(k not in other for k in keys):
        raise cfg.refuse("attention_other_setting must give " + ", ".join(keys))
    if not all(isinstance(other[k], int) and not isinstance(other[k], bool) and other[k] > 0 for k in keys[1:]):
        raise cfg.refuse("attention_other_setting's heads, groups and head_dim must be positive integers")
    if other["num_attention_heads"] % other["num_attention_groups"]:
        raise cfg.refuse("attention_other_setting: num_attention_heads is not divisible by num_attention_groups")
    return other


def per_layer_attention(cfg: Config, runs: list[LayerRun], layers: int) -> list[LayerRun]:
    """The layer runs with the other setting's query heads, KV heads and head width on the layers of its type."""
    other = other_setting(cfg)
    if other is None:
        return runs
    kinds = {"sliding_attention": LayerKind.SLIDING, "full_attention": LayerKind.FULL}
    kind = kinds.get(str(other["attention_type"]))
    if kind is None:
        raise cfg.refuse(f"attention_other_setting.attention_type {other['attention_type']!r} is not read")
    base = runs or [LayerRun()] * layers
    heads, kv, width = cfg.int_field("num_attention_heads"), cfg.int_field("num_key_value_heads"), cfg.get("head_dim")
    own = {
        "num_heads": other["num_attention_heads"] if other["num_attention_heads"] != heads else None,
        "kv_heads": other["num_attention_groups"] if other["num_attention_groups"] != kv else None,
        "head_dim": other["head_dim"] if other["head_dim"] != width else None,
    }
    return [r.model_copy(update=own) if r.kind == kind else r for r in base]
