"""Mixture-of-experts fields: expert counts, widths, shared experts and leading dense layers."""

from __future__ import annotations

from typing import Any

from kvcalc.model.hf.fields import Config


def _uniform(cfg: Config, name: str, value: Any) -> Any:
    """Hunyuan lists some MoE fields per layer; kvcalc reads them when every layer agrees."""
    if isinstance(value, list):
        if not value or any(v != value[0] for v in value):
            raise cfg.refuse(f"{name} differs between layers ({value!r}); per-layer expert shapes are not read")
        return value[0]
    return value


def leading_dense(layout: list[Any], dense: Any = "dense") -> int:
    """How many layers at the start of a per-layer MLP list are dense (mlp_layer_types' "dense";
    MiMo-V2-Flash's moe_layer_freq: 0)."""
    return next((i for i, t in enumerate(layout) if t != dense), len(layout))


def leading_only(cfg: Config) -> bool:
    """mlp_only_layers naming the first layers only, every other layer MoE (decoder_sparse_step 1 or none)."""
    only = cfg.get("mlp_only_layers")
    step_ok = cfg.get("decoder_sparse_step") in (None, 0, 1)
    return isinstance(only, list) and bool(only) and only == list(range(len(only))) and step_ok


# ERNIE 4.5 (Ernie4_5_MoeConfig): its own names for the expert fields, and MoE layers from
# moe_layer_start_index to moe_layer_end_index, every moe_layer_interval-th.
ERNIE_TYPES = ("ernie4_5_moe",)
# Ling (vLLM bailing_moe.py serves both) and Ling 2.5 (bailing_moe_linear.py BailingMoeV25: the same shared experts)
BAILING_TYPES = ("bailing_moe", "bailing_moe_v2", "bailing_hybrid")
ERNIE_MOE_KEYS = (
    "moe_num_experts", "moe_k", "moe_num_shared_experts", "moe_layer_start_index", "moe_layer_end_index",
    "moe_layer_interval",
)  # fmt: skip


def ernie_dense_layers(cfg: Config) -> int | None:
    """ERNIE 4.5's leading dense layers: layer i holds experts when (i + 1) % moe_layer_interval == 0 and
    moe_layer_start_index <= i <= moe_layer_end_index (vLLM ernie45_moe.py; transformers' class defaults
    1, -1 for the last layer, 1). None for any other layout (dense layers after or between MoE layers)."""
    layers = cfg.get("num_hidden_layers")
    start = cfg.get("moe_layer_start_index", default=1)
    end = cfg.get("moe_layer_end_index", default=-1)
    interval = cfg.get("moe_layer_interval", default=1)
    if not isinstance(layers, int) or interval != 1 or end not in (-1, layers - 1):
        return None
    return start if isinstance(start, int) and 0 <= start <= layers else None


def moe_fields(cfg: Config, model_type: str) -> dict[str, Any]:
    experts = cfg.get("num_local_experts", "n_routed_experts", "num_experts", default=0)
    if model_type in ERNIE_TYPES:
        experts = cfg.get("moe_num_experts", default=0)
        if not isinstance(experts, int):  # ERNIE-VL's text and vision experts: hf_unread.parameter_doubts
            return {}
    experts = _uniform(cfg, "num_experts", experts)
    if model_type == "doge":  # DogeConfig: num_experts (16,384) counts only under is_moe (default False)
        if not cfg.get("is_moe", default=False):
            return {}
        # DogeCDMoE: 16,384 single-neuron experts (a down and an up vector each) beside a dense MLP, 64 of them a token
        raise cfg.refuse("is_moe: Doge's cross-domain MoE of single-neuron experts is not read")
    if not experts or experts <= 1:
        return {}
    k = _uniform(
        cfg,
        "moe_topk",
        cfg.get(
            "num_experts_per_tok",
            "experts_per_token",
            "moe_top_k",
            "num_selected_experts",
            "moe_topk",
            "top_k_experts",
            "num_experts_per_token",  # KimiLinearConfig
            "moe_k",  # Ernie4_5_MoeConfig
        ),
    )
    if not k:
        raise cfg.refuse(f"{experts} experts but no num_experts_per_tok")
    moe_inter = _uniform(cfg, "moe_intermediate_size", cfg.get("moe_intermediate_size"))
    if model_type in ("llama4_text", "granitemoehybrid", "granitemoe", "granitemoeshared", "minimax_m3"):
        moe_inter = cfg.get("intermediate_size")  # these name the expert width intermediate_size (SGLang minimax_m3.py)
    shared = 0
    if model_type in BAILING_TYPES:
        # vLLM bailing_moe.py (Ling): num_shared_experts MLPs of moe_shared_expert_intermediate_size, else of
        # the experts' own width, as one MLP.
        width = cfg.get("moe_shared_expert_intermediate_size", default=moe_inter or 0)
        shared = cfg.get("num_shared_experts", default=0) * width
    elif model_type in ERNIE_TYPES:
        # Ernie4_5_MoeSparseMoeBlock: one MLP of moe_intermediate_size x moe_num_shared_experts (default 2).
        shared = cfg.get("moe_num_shared_experts", default=2) * (moe_inter or 0)
    elif cfg.get("moe_shared_expert_intermediate_size"):  # Nemotron 3: the shared expert's full width
        shared = cfg.get("moe_shared_expert_intermediate_size")
    elif cfg.get("shared_expert_intermediate_size"):
        shared = cfg.get("shared_expert_intermediate_size")
    elif model_type in ("granitemoehybrid", "granitemoeshared"):
        shared = cfg.get("shared_intermediate_size", default=0)
    elif model_type == "minimax_m3" and cfg.get("shared_intermediate_size"):
        # MiniMaxM3VLSparseMoeBlock's shared_experts: one MLP of shared_intermediate_size, built whether or not the
        # config names n_shared_experts (MiniMax's own config: 1)
        shared = cfg.get("n_shared_experts", default=1) * cfg.get("shared_intermediate_size")
    elif model_type in ("hunyuan", "hunyuan_v1_moe"):
        # vLLM hunyuan_v1.py: the shared MLP is intermediate_size x num_shared_expert wide, when
        # use_mixed_mlp_moe is on.
        if cfg.get("use_mixed_mlp_moe", default=True):
            count = _uniform(cfg, "num_shared_expert", cfg.get("num_shared_expert", default=1))
            shared = count * cfg.int_field("intermediate_size")
    elif model_type == "gemma4_text":
        # Gemma4DecoderLayer: the dense MLP (intermediate_size) runs beside the experts in every layer.
        shared = cfg.int_field("intermediate_size")
    elif model_type in ("afmoe", "kimi_linear", "exaone_moe", "hy_v3"):
        # AfmoeMoE, KimiMoE, ExaoneMoeSparseMoEBlock, HYV3's MoE: shared_experts is one MLP of moe_intermediate_size x
        # num_shared_experts.
        shared = cfg.get("num_shared_experts", default=0) * (moe_inter or 0)
    elif cfg.get("n_shared_experts"):
        shared = cfg.get("n_shared_experts") * (moe_inter or 0)
    elif model_type == "llama4_text":
        shared = moe_inter
    out = {"experts": experts, "experts_per_token": k, "shared_expert_intermediate_size": shared}
    if moe_inter:
        out["expert_intermediate_size"] = moe_inter
    dense = cfg.get("first_k_dense_replace", "num_dense_layers", default=0)  # num_dense_layers: AfmoeConfig
    if isinstance(layout := cfg.get("mlp_layer_types"), list):
        # transformers 5 lists each layer's MLP ("dense" / "sparse") and reads it over first_k_dense_replace;
        # a layout other than leading dense layers makes the parameters unknown (hf_unread.parameter_doubts).
        dense = leading_dense(layout)
    if leading_only(cfg):
        # vLLM qwen2_moe.py / qwen3_moe.py: a layer in mlp_only_layers keeps a dense MLP (Laguna-S-2.1's [0])
        dense = max(dense, len(cfg.get("mlp_only_layers")))
    if isinstance(freq := cfg.get("moe_layer_freq"), list):
        dense = leading_dense(freq, 0)  # MiMo-V2-Flash: 0 dense, 1 MoE, per layer (other layouts: parameter_doubts)
    if model_type in ERNIE_TYPES:
        dense = ernie_dense_layers(cfg) or 0  # other layouts: parameter_doubts
    if dense:
        out["dense_layers"] = dense
    if cfg.get("moe_latent_size"):  # Nemotron 3 Super / Ultra (vLLM nemotron_h.py: use_latent_moe)
        out["moe_latent_size"] = cfg.get("moe_latent_size")
    elif model_type == "kimi_linear" and cfg.get("routed_expert_hidden_size"):
        # Kimi-K3 (SGLang 0.5.23 kimi_k3.py KimiK3MoE): the routed experts work in routed_expert_hidden_size, down and
        # up projections around them; the shared experts in the hidden size
        out["moe_latent_size"] = cfg.int_field("routed_expert_hidden_size")
        out["moe_latent_norm"] = bool(cfg.get("latent_moe_use_norm", default=False))  # routed_expert_norm
    return out
