"""Positions as the engines read config.json: the longest request each engine takes (Checkpoint.lengths), and
the RoPE settings and cos/sin table rows vLLM builds from it (rope_settings, rotary_rows).

vLLM 0.19 (its max_model_len):
- vllm/transformers_utils/model_arch_config_convertor.py, derive_max_model_len_and_key: the smallest of the
  length keys the text config has (OPT's max_position_embeddings, GPT-2's n_positions, MPT's max_seq_len,
  ChatGLM's seq_length, Whisper's max_target_positions, max_sequence_length, max_seq_length, seq_len), except
  that Command-R's model_max_length, where given, is taken as it is;
- vllm/config/model.py, _get_and_verify_max_len: 2,048 where no key is found; then, except for Gemma 3, each
  RoPE setting's `factor` multiplies it unless its rope_type is su / longrope / llama3, and YaRN starts from
  its original_max_position_embeddings. That is the longest --max-model-len vLLM accepts (longer: a ValueError
  unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1). Its default is the same, except that a LongRoPE model (Phi-3 / 3.5 /
  Phi-4-mini 128k) defaults to its original_max_position_embeddings, the short table's length.
tokenizer_config.json's model_max_length is not read: vLLM 0.19 takes the smaller of it only for a pooling model
with absolute position embeddings (ModelConfig.get_and_verify_max_len), not a generating one.

TensorRT-LLM (trtllm_max_seq_len): max_position_embeddings times a RoPE factor; it cuts a longer max_seq_len to that
and starts.

SGLang 0.4.6 to 0.5.23 (hf_transformers_utils get_context_length): the first of max_sequence_length, seq_length,
max_seq_len, model_max_length, max_position_embeddings (2,048 if none), times rope_scaling's factor unless the
setting has original_max_position_embeddings or is llama3. A --context-length beyond it is a ValueError from 0.5.1
(SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN then defaults to false; before, to true: a warning).
"""

from __future__ import annotations

import math
from typing import Any

from kvcalc.model.hf.fields import is_factor

# derive_max_model_len_and_key's keys, in its order
VLLM_KEYS = (
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
SGLANG_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings")
# The context the model was trained for, as kvcalc reads it (ModelSpec.max_position_embeddings): Cohere's
# model_max_length where given (Command-R v01: 131,072 beside a max_position_embeddings of 8,192), else the first of these
TRAINED_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")
COHERE_TYPES = ("cohere", "aya_vision")  # Command-R, Command-R7B / A (cohere2), Aya Vision
NO_KEY_LENGTH = 2048  # both engines' length where the config has none of their keys
UNSCALED = ("su", "longrope", "llama3")  # rope types whose factor vLLM does not apply to the length
TRT_UNSCALED = ("su", "longrope", "llama3", "yarn")  # and TensorRT-LLM's


def _length(value: Any) -> int | None:
    """A positive whole number of tokens (4096.0 read as 4096, as the engines' arithmetic takes it), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        return None
    if value != int(value):
        return None
    return int(value)


def _number(value: Any, default: float) -> float:
    """A RoPE factor, or `default` where the config gives none a table could have (fields.is_factor)."""
    return float(value) if is_factor(value) else default


def trained_length(text: dict[str, Any]) -> int | None:
    """Cohere's model_max_length, else the first of TRAINED_KEYS the text config gives."""
    cohere = str(text.get("model_type", "")).startswith(COHERE_TYPES)
    keys = ("model_max_length", *TRAINED_KEYS) if cohere else TRAINED_KEYS
    return next((v for k in keys if (v := _length(text.get(k))) is not None), None)


def rope_settings(raw: dict[str, Any], text: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The RoPE settings as vLLM 0.19's patch_rope_parameters leaves them: the legacy rope_scaling where given
    (transformers 4 copies it over rope_parameters, 5 converts it), else rope_parameters, else the outer config's
    rope_scaling. Keyed by layer type where the parameters are nested (transformers 5's per-layer-type dicts, in
    the config's order), else one setting under "". Each has its rope_type: the legacy `type`, su read as
    longrope and mrope as default, as patch_rope_parameters_dict renames them. The SGLang and TensorRT-LLM
    readers below read rope_scaling themselves, as those engines do."""
    params = text.get("rope_scaling") or text.get("rope_parameters") or raw.get("rope_scaling")
    if not isinstance(params, dict) or not params:
        return {}
    nested = all(isinstance(v, dict) for v in params.values())
    out = {}
    for key, setting in params.items() if nested else [("", params)]:
        kind = str(setting.get("rope_type") or setting.get("type") or "default")
        out[key] = {**setting, "rope_type": {"su": "longrope", "mrope": "default"}.get(kind, kind)}
    return out


def _scaled_rows(max_pos: int, setting: dict[str, Any]) -> int:
    """Rows of one rotary cache (vllm/model_executor/layers/rotary_embedding, get_rope)."""
    factor = _number(setting.get("factor"), 0.0)
    if not factor:
        return max_pos
    if setting["rope_type"] in ("linear", "dynamic"):
        # linear_scaling_rope.py / dynamic_ntk_scaling_rope.py: max_len = max_position_embeddings x factor
        return int(max_pos * factor)
    if setting["rope_type"] in ("yarn", "deepseek_yarn"):
        # yarn_scaling_rope.py (and DeepSeek's): ceil(original_max_position x factor), at least max_position
        original = setting.get("original_max_position_embeddings")
        original = original if isinstance(original, int) and original > 0 else max_pos
        return max(math.ceil(original * factor), max_pos)
    return max_pos  # default, llama3, mrope, longrope's long table: max_position_embeddings rows


def rotary_rows(raw: dict[str, Any], text: dict[str, Any]) -> tuple[int, ...] | None:
    """The rows of vLLM's cos/sin caches (Checkpoint.rotary_rows) where they differ from one table of the
    spec's max_position_embeddings: one cache per distinct setting (get_rope shares only equal ones), the full
    layers' first."""
    max_pos = text.get("max_position_embeddings")
    if not isinstance(max_pos, int) or max_pos <= 0:
        return None
    settings = rope_settings(raw, text)
    distinct: list[dict[str, Any]] = []
    for key in sorted(settings, key=lambda k: k != "full_attention"):
        if settings[key] not in distinct:
            distinct.append(settings[key])
    rows = [_scaled_rows(max_pos, s) for s in distinct] or [max_pos]
    if list(settings) in ([], [""]) and "rope_local_base_freq" in text:
        # Gemma 3: sliding layers build their own default rope (gemma3.py, rope_local_base_freq)
        rows.append(max_pos)
    # NOTE: compared with the trained length the spec carries (Command-R's is its model_max_length, 131,072;
    # vLLM's commandr.py builds its table from max_position_embeddings, 8,192)
    return None if rows == [trained_length(text)] else tuple(rows)


def vllm_lengths(raw: dict[str, Any], text: dict[str, Any]) -> tuple[int, int | None, str | None]:
    """(vLLM 0.19's default max_model_len, the longest it accepts, the key its refusal names) for this config:
    `raw` the whole config.json, `text` its text model's fields with their class defaults. Where the config has
    none of the keys, vLLM takes any --max-model-len (_get_and_verify_max_len returns it) and defaults to 2,048:
    no longest (None)."""
    derived: float = float("inf")
    key = None
    for k in VLLM_KEYS:
        if (v := _length(text.get(k))) is not None and v < derived:
            derived, key = v, k
    if (given := _length(text.get("model_max_length"))) is not None:
        derived, key = given, "model_max_length"
    if derived == float("inf"):
        return NO_KEY_LENGTH, None, None
    settings = list(rope_settings(raw, text).values())
    model_types = f"{raw.get('model_type', '')} {text.get('model_type', '')}"
    if settings and "gemma3" not in model_types:
        factor = 1.0
        for s in settings:
            if s["rope_type"] not in UNSCALED:
                factor = _number(s.get("factor", factor), 1.0)  # a null factor: vLLM falls back to 1
                original = s.get("original_max_position_embeddings") or text.get("original_max_position_embeddings")
                if s["rope_type"] == "yarn" and (original := _length(original)):
                    derived = original
        derived *= factor
    limit = int(derived)
    if any(s["rope_type"] == "longrope" for s in settings):
        original = _length(text.get("original_max_position_embeddings") or raw.get("original_max_position_embeddings"))
        return original or limit, limit, key
    return limit, limit, key


def sglang_context_length(text: dict[str, Any]) -> int:
    """SGLang's derived context_length for this config (get_context_length, 0.4.6 to 0.5.23)."""
    scaling = text.get("rope_scaling")
    factor = 1.0
    if isinstance(scaling, dict) and scaling:
        factor = _number(scaling.get("factor", 1), 1.0)
        if (
            "original_max_position_embeddings" in scaling
            or (scaling.get("rope_type") or scaling.get("type")) == "llama3"
        ):
            factor = 1.0
    value = next((v for k in SGLANG_KEYS if (v := _length(text.get(k))) is not None), None)
    return int(factor * value) if value is not None else NO_KEY_LENGTH


def trtllm_max_seq_len(text: dict[str, Any]) -> int:
    """TensorRT-LLM's inferred max_seq_len (_torch/models/modeling_utils.py infer_max_seq_len, after the builder's
    _init_max_seq_len): max_position_embeddings (2,048 if none) times rope_scaling's factor unless su / longrope /
    llama3 / yarn. A longer --max_seq_len is cut to it with a warning (model_engine._init_max_seq_len)."""
    scaling = text.get("rope_scaling")
    factor = 1.0
    if isinstance(scaling, dict) and (scaling.get("type") or scaling.get("rope_type")) not in TRT_UNSCALED:
        factor = _number(scaling.get("factor", 1.0), 1.0)
    return math.ceil((_length(text.get("max_position_embeddings")) or NO_KEY_LENGTH) * factor)


def engine_lengths(raw: dict[str, Any], text: dict[str, Any]) -> dict[str, Any]:
    """What the engines take beyond the trained length (model/quant.EngineLengths' fields), empty where every
    engine takes that."""
    if "max_position_embeddings" not in text and (n := _length(text.get("n_positions"))):
        # GPT-2, GPTBigCode, GPT-J, CodeGen: transformers' attribute_map answers max_position_embeddings with
        # n_positions, so both engines' getattr find it under that name
        text = {**text, "max_position_embeddings": n}
    trained = trained_length(text)
    default, limit, key = vllm_lengths(raw, text)
    sglang = sglang_context_length(text)
    trtllm = trtllm_max_seq_len(text)
    lengths = {
        "vllm_default": None if default == trained else default,
        "vllm_limit": None if limit == default else limit,
        "vllm_any_length": limit is None,
        "vllm_key": None if key in (None, "max_position_embeddings") else key,
        "sglang": None if sglang == trained else sglang,
        "trtllm": None if trtllm == trained else trtllm,
    }
    return {k: v for k, v in lengths.items() if v}


def step_rotary(text: dict[str, Any]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(rows, widths) of the cos/sin caches vLLM builds for a step3p5 config: one a distinct (theta, rotary width,
    scaling) among the layers, each max_position_embeddings rows (the scaling Step 3.5 ships, llama3, keeps
    them); None where the config lacks what it takes or the layers share one setting."""
    if text.get("model_type") != "step3p5":
        return None
    layers, rows, head = text.get("num_hidden_layers"), text.get("max_position_embeddings"), text.get("head_dim")
    types = text.get("layer_types") or []
    if not (isinstance(layers, int) and isinstance(rows, int) and isinstance(head, int)):
        return None
    if min(layers, rows, head) <= 0 or len(types) < layers:
        return None
    thetas, factors = text.get("rope_theta"), text.get("partial_rotary_factors")
    factors = factors if isinstance(factors, list) else []
    if isinstance(thetas, list) and len(thetas) < layers:
        return None  # vLLM indexes rope_theta by layer: a shorter list does not load
    scaled = text.get("yarn_only_types")
    seen: list[tuple[Any, int, bool]] = []
    for i in range(layers):
        theta = thetas[i] if isinstance(thetas, list) and i < len(thetas) else thetas
        factor = factors[i] if i < len(factors) else 1.0
        width = head // 2 if factor == 0.5 else head  # vLLM asserts the factor is 1 or 0.5
        setting = (theta, width, bool(text.get("rope_scaling")) and (not scaled or types[i] in scaled))
        if setting not in seen:
            seen.append(setting)
    if len(seen) < 2:
        return None
    return tuple(rows for _ in seen), tuple(width for _, width, _ in seen)
