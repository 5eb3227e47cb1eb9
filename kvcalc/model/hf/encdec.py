"""Encoder-decoders (T5, BART, Whisper): decoder self-attention plus cross-attention to the encoder.

Each decoder layer is modelled as two blocks: a self-attention block that caches the generated
sequence, and a cross-attention block (with the layer's MLP) that caches the encoder's output. The
encoder's weights count as extra parameters: they are resident but do not run per generated token.
Sources: transformers models/t5/modeling_t5.py (T5Attention, T5LayerFF), models/bart/modeling_bart.py
(BartAttention, BartLearnedPositionalEmbedding: offset 2), models/whisper/modeling_whisper.py
(WhisperEncoder: conv1/conv2, 1,500 positions; k_proj without bias).
"""

from __future__ import annotations

from typing import Any

from kvcalc.model.hf.fields import Config
from kvcalc.model.spec import LayerKind, LayerRun

READ = ("t5", "mt5", "bart", "mbart", "whisper")


def _attention(d: int, inner: int, biases: int) -> int:
    return 4 * d * inner + biases


def encdec_fields(cfg: Config, model_type: str) -> dict[str, Any]:
    """Spec fields for an encoder-decoder, or a refusal naming the type."""
    if model_type not in READ:
        raise cfg.refuse(
            f"'{model_type}' is an encoder-decoder kvcalc does not read yet (read: {', '.join(READ)})",
            hint="its decoder and cross-attention caches are not estimated, rather than guessed",
        )
    if model_type in ("t5", "mt5"):
        return _t5(cfg)
    return _bart_whisper(cfg, model_type)


def _pattern(cross_tokens: int | None) -> list[LayerRun]:
    # Self-attention block without an MLP, then the cross-attention block carrying the layer's MLP.
    return [
        LayerRun(kind=LayerKind.FULL, intermediate_size=0),
        LayerRun(kind=LayerKind.CROSS, cross_tokens=cross_tokens),
    ]


def _t5(cfg: Config) -> dict[str, Any]:
    d = cfg.int_field("d_model", default=512)
    d_kv = cfg.int_field("d_kv", default=64)
    heads = cfg.int_field("num_heads", default=8)
    d_ff = cfg.int_field("d_ff", default=2048)
    enc_layers = cfg.int_field("num_layers", default=6)
    dec_layers = cfg.int_field("num_decoder_layers", default=enc_layers)
    gated = str(cfg.get("feed_forward_proj", default="relu")).startswith("gated-")
    buckets = cfg.int_field("relative_attention_num_buckets", default=32)
    encoder = enc_layers * (_attention(d, heads * d_kv, 0) + (3 if gated else 2) * d * d_ff + 2 * d) + d
    return {
        "num_layers": 2 * dec_layers,
        "hidden_size": d,
        "num_heads": heads,
        "num_kv_heads": heads,
        "head_dim": d_kv,
        "intermediate_size": d_ff,
        "mlp_gated": gated,
        # NOTE: T5's first encoder and decoder layers each hold a relative-position bias table.
        "extra_params": encoder + 2 * buckets * heads,
        "tie_embeddings": bool(cfg.get("tie_word_embeddings", default=True)),
        "layer_pattern": _pattern(None),
        "description": f"T5 encoder-decoder: {dec_layers} decoder layers (self- and cross-attention), "
        f"{enc_layers} encoder layers",
    }


def _bart_whisper(cfg: Config, model_type: str) -> dict[str, Any]:
    d = cfg.int_field("d_model")
    dec_layers = cfg.int_field("decoder_layers")
    enc_layers = cfg.int_field("encoder_layers", default=dec_layers)
    heads = cfg.int_field("decoder_attention_heads")
    enc_heads = cfg.int_field("encoder_attention_heads", default=heads)
    dec_ffn = cfg.int_field("decoder_ffn_dim", default=4 * d)
    enc_ffn = cfg.int_field("encoder_ffn_dim", default=dec_ffn)
    if d % heads or d % enc_heads:
        raise cfg.refuse(f"d_model ({d}) is not divisible by the attention heads")
    whisper = model_type == "whisper"
    # Whisper's k_proj has no bias (3 of 4 projections biased); BART biases all four.
    attn = _attention(d, d, (3 if whisper else 4) * d)
    enc_layer = attn + 2 * d * enc_ffn + enc_ffn + d + 4 * d  # attention, fc1/fc2 with biases, 2 LayerNorms
    encoder = enc_layers * enc_layer
    if whisper:
        mels = cfg.int_field("num_mel_bins", default=80)
        source = cfg.int_field("max_source_positions", default=1500)
        target = cfg.int_field("max_target_positions", default=448)
        # conv1 (mels -> d, kernel 3), conv2 (d -> d, kernel 3), the 1,500-position table, final LayerNorm
        encoder += mels * d * 3 + d + d * d * 3 + d + source * d + 2 * d
        extra = encoder + target * d
        limit: int | None = target
        cross: int | None = source  # Whisper pads audio to 30 s: the encoder always yields 1,500 positions
    else:
        positions = cfg.int_field("max_position_embeddings", default=1024) + 2  # BART's offset of 2
        # two learned position tables and two layernorm_embedding (mBART adds final LayerNorms)
        extra = encoder + 2 * positions * d + 4 * d + (4 * d if model_type == "mbart" else 0)
        limit = positions - 2
        cross = None  # as long as the sequence, unless --encoder-seq says otherwise
    return {
        "num_layers": 2 * dec_layers,
        "hidden_size": d,
        "num_heads": heads,
        "num_kv_heads": heads,
        "head_dim": d // heads,
        "intermediate_size": dec_ffn,
        "mlp_gated": False,
        "attention_bias": True,
        "o_proj_bias": True,
        "mlp_bias": True,
        "extra_params": extra,
        "max_position_embeddings": limit,
        "tie_embeddings": bool(cfg.get("tie_word_embeddings", default=True)),
        "layer_pattern": _pattern(cross),
        "description": f"{model_type} encoder-decoder: {dec_layers} decoder layers (self- and cross-attention), "
        f"{enc_layers} encoder layers"
        + (f"; cross-attention holds the encoder's {cross:,} audio positions" if whisper and cross else ""),
    }
