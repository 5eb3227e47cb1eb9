"""The longest request vLLM serves a config.json with by default (its max_model_len when none is given).

vLLM 0.19 derives it from the config, not from max_position_embeddings alone:
- vllm/transformers_utils/model_arch_config_convertor.py, derive_max_model_len_and_key: the smallest of the
  length keys the text config has (OPT's max_position_embeddings, GPT-2's n_positions, MPT's max_seq_len,
  ChatGLM's seq_length, Whisper's max_target_positions, max_sequence_length, max_seq_length, seq_len), except
  that Command-R's model_max_length, where given, is taken as it is;
- vllm/config/model.py, _get_and_verify_max_len: 2,048 where no key is found; then, except for Gemma 3, each
  RoPE setting's `factor` multiplies it unless its rope_type is su / longrope / llama3, and YaRN starts from
  its original_max_position_embeddings; a LongRoPE model (Phi-3 / Phi-3.5 / Phi-4-mini 128k) defaults to its
  original_max_position_embeddings instead, the short table's length.

Not read here: tokenizer_config.json's model_max_length, which vLLM also takes the smaller of (kvcalc reads
config.json alone); a user's --max-model-len (kvcalc's --seq) replaces the default anyway.
"""

from __future__ import annotations

from typing import Any

# derive_max_model_len_and_key's keys, in its order
LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
# The context the model was trained for, as kvcalc reads it (ModelSpec.max_position_embeddings): Cohere's
# model_max_length where given (Command-R v01: 131,072 beside a max_position_embeddings of 8,192), else the first of these
TRAINED_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")
NO_KEY_LENGTH = 2048  # _get_and_verify_max_len's default, with a warning, where the config has none of the keys
UNSCALED = ("su", "longrope", "llama3")  # rope types whose factor vLLM does not apply to the length


def _length(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def trained_length(text: dict[str, Any]) -> int | None:
    """Cohere's model_max_length, else the first of TRAINED_KEYS the text config gives."""
    keys = ("model_max_length", *TRAINED_KEYS)
    return next((v for k in keys if (v := _length(text.get(k))) is not None), None)


def _rope_settings(raw: dict[str, Any], text: dict[str, Any]) -> list[dict[str, Any]]:
    """The RoPE settings as vLLM's patch_rope_parameters leaves them: rope_parameters (transformers 5, perhaps
    one per layer type) or the legacy rope_scaling, each with its rope_type (the legacy `type`, su read as longrope)."""
    params = text.get("rope_parameters") or text.get("rope_scaling") or raw.get("rope_scaling")
    if not isinstance(params, dict):
        return []
    nested = [v for v in params.values() if isinstance(v, dict)]
    out = []
    for setting in nested if nested and not ({"rope_type", "type", "factor"} & set(params)) else [params]:
        kind = str(setting.get("rope_type") or setting.get("type") or "default")
        out.append({**setting, "rope_type": "longrope" if kind == "su" else kind})
    return out


def vllm_max_model_len(raw: dict[str, Any], text: dict[str, Any]) -> int:
    """vLLM 0.19's default max_model_len for this config (`raw` the whole config.json, `text` its text model's
    fields with their class defaults)."""
    found = [v for k in LENGTH_KEYS if (v := _length(text.get(k))) is not None]
    derived: float = min(found) if found else NO_KEY_LENGTH
    if (given := _length(text.get("model_max_length"))) is not None:
        derived = given
    settings = _rope_settings(raw, text)
    model_types = f"{raw.get('model_type', '')} {text.get('model_type', '')}"
    if settings and "gemma3" not in model_types:
        factor: float = 1.0
        for s in settings:
            if s["rope_type"] not in UNSCALED:
                f = s.get("factor", factor)
                factor = f if isinstance(f, (int, float)) and not isinstance(f, bool) else 1.0
                original = s.get("original_max_position_embeddings") or text.get("original_max_position_embeddings")
                if s["rope_type"] == "yarn" and (original := _length(original)):
                    derived = original
        derived *= factor
    if any(s["rope_type"] == "longrope" for s in settings):
        original = _length(text.get("original_max_position_embeddings") or raw.get("original_max_position_embeddings"))
        return original or int(derived)
    return int(derived)
