"""Pre-Llama field conventions: Falcon, ChatGLM, MPT, StarCoder (bigcode), Qwen 1, GPT-2, BLOOM."""

from __future__ import annotations

from typing import cast

from kvcalc.model.hf.fields import Config

# Families whose MLP is fc_in -> act -> fc_out (no gate projection).
UNGATED = {
    "gpt2",
    "gptj",
    "gpt_bigcode",
    "gpt_neox",
    "falcon",
    "bloom",
    "mpt",
    "starcoder2",
    "opt",
    "nemotron_h",
    "nemotron",  # Nemotron-4 / Minitron: up_proj, relu^2, down_proj
    "arcee",  # AFM: the same relu^2 MLP
    "phi",
    "apertus",  # Apertus: up_proj, xIELU, down_proj (transformers ApertusMLP, vLLM apertus.py)
    "persimmon",  # dense_h_to_4h, relu^2, dense_4h_to_h
    "gpt_neo",
    "codegen",
    "xglm",
    "biogpt",
    "jais2",  # Jais2MLP: up_proj, act, down_proj
    "nanochat",  # NanoChatMLP: fc1, relu^2, fc2
    "apertus1p5",  # Apertus1p5TextMLP: up_proj, xIELU, down_proj, as Apertus
    "apertus1p5_text",
}


def kv_heads(cfg: Config, model_type: str, heads: int) -> int:
    if "kv_heads" in cfg.overrides:
        return cast(int, cfg.overrides["kv_heads"])
    if model_type == "falcon":
        if cfg.get("new_decoder_architecture"):
            return cfg.int_field("num_kv_heads", "num_key_value_heads")
        return 1 if cfg.get("multi_query", default=True) else heads
    if model_type == "chatglm":
        return cfg.int_field("multi_query_group_num") if cfg.get("multi_query_attention") else heads
    if model_type == "mpt":
        # NOTE: attn_config carries a kv_n_heads default even for MHA; only its attn_type counts.
        attn = cfg.get("attn_config") or {}
        kind = attn.get("attn_type", "multihead_attention")
        if kind == "multiquery_attention":
            return 1
        if kind != "grouped_query_attention" or not attn.get("kv_n_heads"):
            return heads
        return Config(attn, f"{cfg.where} (attn_config)", {}).int_field("kv_n_heads")
    if model_type == "dbrx":
        # DBRX keeps its KV heads in attn_config (transformers DbrxAttentionConfig.kv_n_heads, default 1).
        return Config(cfg.get("attn_config") or {}, f"{cfg.where} (attn_config)", {}).int_field("kv_n_heads", default=1)
    if model_type == "step3_text":
        # Step 3's multi-matrix factorization attention: one KV head for every query head (vLLM 0.19 step3_text.py
        # builds each layer with num_kv_heads = 1 and refuses another count)
        groups = cfg.get("num_attention_groups", default=1)
        if groups != 1:
            raise cfg.refuse(f"num_attention_groups {groups}: Step 3's attention is built with one KV head")
        return 1
    if cfg.get("multi_query") is True:  # gpt_bigcode (StarCoder, SantaCoder)
        return 1
    value = cfg.get("num_key_value_heads", "num_kv_heads", "n_head_kv")
    if value is None:
        return heads  # NOTE: absent num_key_value_heads means MHA (Llama 2 7B/13B, Qwen 1)
    return cfg.int_field("num_key_value_heads", "num_kv_heads", "n_head_kv")


def uniform_width(value: object) -> int | None:
    """The width a per-layer list gives every layer alike (Gemma3nTextConfig's intermediate_size), else None."""
    if (
        isinstance(value, list)
        and value
        and all(v == value[0] for v in value)
        and not isinstance(value[0], bool)
        and isinstance(value[0], int)
        and value[0] > 0
    ):
        return value[0]
    return None


def intermediate(cfg: Config, model_type: str, hidden: int) -> int | None:
    """The dense MLP width, or None when the config does not say (parameters are then unknown)."""
    if model_type == "mpt":
        return int(cfg.factor("expansion_ratio", 4) * hidden)
    if model_type == "qwen":
        # NOTE: Qwen 1 lists twice its MLP width: w1 and w2 are each intermediate_size / 2.
        return cfg.int_field("intermediate_size") // 2
    if model_type == "minimax_m3":  # its dense layers' own width (intermediate_size is the experts'); None: unknown
        return cfg.int_field("dense_intermediate_size") if cfg.get("dense_intermediate_size") is not None else None
    value = cfg.get("intermediate_size", "ffn_hidden_size", "n_inner", "ffn_dim")
    if value is None:
        return 4 * hidden if model_type in UNGATED else None
    if (width := uniform_width(value)) is not None:
        return width
    return cfg.int_field("intermediate_size", "ffn_hidden_size", "n_inner", "ffn_dim")
