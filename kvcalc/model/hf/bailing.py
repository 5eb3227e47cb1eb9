"""Ling's hybrids (model_type bailing_hybrid): MLA layers between linear-attention ones.

- Ling / Ring 2.5 (BailingMoeV2_5ForCausalLM): lightning attention, served by vLLM 0.19 (bailing_moe_linear.py) and
  SGLang from 0.5.9.
- Ling 3 (BailingMoeV3ForCausalLM): KDA layers, served by SGLang from 0.5.19 (bailing_moe_v3.py) and by no vLLM 0.19
  class; transformers 5.25's BailingHybridConfig is this one.

SGLang's BailingHybridConfig tells them apart by short_conv_kernel_size (use_kda), and both engines lay the layers out
alike: layer i is MLA when (i + 1) % layer_group_size == 0 (a last partial group is all linear), or, SGLang 0.5.23,
by a per-layer list of layer_group_size where 1 marks a linear layer.
"""

from __future__ import annotations

from typing import Any

from kvcalc.model.hf import hybrid as hf_hybrid
from kvcalc.model.hf.fields import Config
from kvcalc.model.hf.hybrid import Mixer, StateDtypes, kda_mixer
from kvcalc.model.spec import LayerKind, LayerRun

# Ling 3's KDA layers: these fields mark them (SGLang: use_kda = short_conv_kernel_size is not None), as does the
# architecture; transformers writes its layer_types too
LING3_FIELDS = ("short_conv_kernel_size", "no_kda_lora", "kda_safe_gate", "kda_lower_bound")
LING3 = "BailingMoeV3ForCausalLM"
# gated_attention_proj_granularity_type: the MLA layers' output gate (SGLang bailing_moe_v3.py g_proj: hidden ->
# heads, or hidden -> heads x v_head_dim), as ModelSpec.attn_output_gate says it; absent: none
OUTPUT_GATES: dict[Any, bool | str] = {None: False, "head_wise": "head", "element_wise": True}


def is_ling3(cfg: Config) -> bool:
    archs = cfg.get("architectures")
    return (isinstance(archs, list) and LING3 in archs) or any(cfg.get(k) is not None for k in LING3_FIELDS)


def output_gate(cfg: Config) -> bool | str:
    kind = cfg.get("gated_attention_proj_granularity_type")
    if not isinstance(kind, (str, type(None))) or kind not in OUTPUT_GATES:
        raise cfg.refuse(
            f"gated_attention_proj_granularity_type '{kind}' is not read",
            hint="read: head_wise, element_wise, or none",
        )
    return OUTPUT_GATES[kind]


def tp_group(cfg: Config) -> int | None:
    """Ling 2.5's group_norm_size where its config gives it: the lightning layers' grouped RMS norm, which vLLM
    0.19 and SGLang split over the tensor-parallel ranks (both assert tp <= group_norm_size and that tp divides it).
    Left out of a config, the two engines' config classes default it apart (4, the checkpoint's remote code that
    vLLM loads; 1, SGLang's own BailingHybridConfig): not guessed. Ling 3's KDA layers have no such norm."""
    size = cfg.get("group_norm_size")
    if size is None or is_ling3(cfg):
        return None
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise cfg.refuse(f"group_norm_size must be a positive integer, got {size!r}")
    return size


def lightning(cfg: Config, hidden: int, el: StateDtypes) -> Mixer:
    """Ling / Ring 2.5's lightning attention (vLLM 0.19 bailing_moe_linear.py BailingMoELinearAttention; SGLang 0.5.9
    the same): MiniMax-01's layer and state (hf_hybrid.lightning: q/k/v over every head, g_proj, an RMS norm over
    heads x head_dim, the output projection; a head_dim x head_dim state a head, no conv window: SGLang's
    conv_kernel 1), plus q and k RMS norms of head_dim under use_qk_norm (the config class's default: on), q/k/v
    biases under use_bias or use_qkv_bias and an output bias under use_bias."""
    base = hf_hybrid.lightning(cfg, hidden, el)
    heads = cfg.int_field("num_attention_heads")
    head_dim = cfg.int_field("head_dim", default=hidden // heads)
    bias = bool(cfg.get("use_bias", default=False))
    qkv_bias = 3 * heads * head_dim if bias or cfg.get("use_qkv_bias", default=False) else 0
    qk_norms = 2 * head_dim if cfg.get("use_qk_norm", default=True) else 0
    return base._replace(params=base.params + qkv_bias + qk_norms + (hidden if bias else 0))


def ling3_kda(cfg: Config, hidden: int, el: StateDtypes) -> Mixer:
    """Ling 3's KDA layer (SGLang BailingKDA, a KimiDeltaAttention of num_attention_heads x head_dim; transformers
    BailingHybridDeltaAttention): Kimi Linear's, with full-rank decay and output gates under no_kda_lora; its state
    SGLang's KimiLinearStateShape (heads x head_dim x head_dim, q / k / v conv windows of kernel - 1)."""
    # transformers re-saves the KDA shape as linear_num_heads / linear_head_dim / linear_conv_kernel_dim and
    # head_dim as the MLA's qk_rope_head_dim (BailingHybridConfig.__post_init__)
    heads = cfg.int_field("linear_num_heads", "num_attention_heads")
    d = cfg.int_field("linear_head_dim", "head_dim")
    v = cfg.get("v_head_dim")
    if v is not None and v != d:  # SGLang's KDA values take v_head_dim, its state head_dim: not read apart
        raise cfg.refuse(f"Ling 3's KDA layers with v_head_dim {v} beside head_dim {d} are not read")
    kernel = cfg.int_field("linear_conv_kernel_dim", "short_conv_kernel_size", default=4)
    return kda_mixer(heads, d, kernel, hidden, el, low_rank=not cfg.get("no_kda_lora", default=False))


def _linear_layers(cfg: Config, layers: int) -> list[bool]:
    """Which layers are linear: transformers' layer_types, SGLang's per-layer layer_group_size list (1: linear), or
    every layer but each layer_group_size-th."""
    types = cfg.get("layer_types")
    if isinstance(types, list):
        if len(types) != layers or not set(types) <= {"full_attention", "linear_attention"}:
            raise cfg.refuse(
                f"layer_types must list full_attention or linear_attention for each of the {layers} layers"
            )
        return [t == "linear_attention" for t in types]
    group = cfg.get("layer_group_size")
    if isinstance(group, list):
        if len(group) != layers or not set(group) <= {0, 1}:
            raise cfg.refuse(
                f"layer_group_size as a list must give 0 (MLA) or 1 (linear) for each of the {layers} layers"
            )
        return [g == 1 for g in group]
    size = cfg.int_field("layer_group_size")
    if size < 1:
        raise cfg.refuse(f"layer_group_size must be a positive integer, got {size}")
    return [(i + 1) % size != 0 for i in range(layers)]


def bailing_hybrid(cfg: Config, layers: int, hidden: int, el: StateDtypes) -> list[LayerRun]:
    """One run per layer: MLA, or the family's linear attention. vLLM reads bailing_hybrid as MLA only with a
    kv_lora_rank (model_arch_config_convertor.is_deepseek_mla) and builds every full-attention layer as MLA; SGLang
    builds GQA ones under full_attention_type other than "mla" (Ling 2.6), which vLLM 0.19 cannot load: refused."""
    if cfg.get("full_attention_type", default="mla") != "mla" or not cfg.get("kv_lora_rank"):
        raise cfg.refuse(
            "a bailing_hybrid model's full-attention layers are read as MLA only (vLLM 0.19 builds no other): "
            "it needs kv_lora_rank, and full_attention_type 'mla' where given",
            hint="its cache is not estimated, rather than guessed",
        )
    if not is_ling3(cfg) and cfg.get("layer_types") is not None:
        raise cfg.refuse(
            "layer_types in a Ling 2.5 config (no KDA fields, not BailingMoeV3ForCausalLM) is not read",
            hint="transformers writes layer_types for Ling 3 (KDA) configs",
        )
    mixer = ling3_kda(cfg, hidden, el) if is_ling3(cfg) else lightning(cfg, hidden, el)
    return [mixer.run() if linear else LayerRun(kind=LayerKind.MLA) for linear in _linear_layers(cfg, layers)]
