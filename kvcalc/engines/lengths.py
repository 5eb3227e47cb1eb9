"""The longest request each serving engine takes for a model, as it derives it from config.json (the spec's
Checkpoint.lengths, read by model/hf/positions.py), and the words for a longer one."""

from __future__ import annotations

from kvcalc.engines.names import ENGINE_NAMES
from kvcalc.model.quant import EngineLengths
from kvcalc.model.spec import ModelSpec

# the variable that lets each engine start with a longer context than it derives from config.json
LONGER_CONTEXT_ENV = {
    "vllm": "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
    "sglang": "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
}


def lengths_of(spec: ModelSpec) -> EngineLengths | None:
    """The engines' lengths the spec's checkpoint carries (None: every engine takes max_position_embeddings)."""
    return spec.checkpoint.lengths if spec.checkpoint else None


def longest_model_len(spec: ModelSpec) -> int | None:
    """The longest --max-model-len vLLM 0.19 accepts for the model (_get_and_verify_max_len; longer is a
    ValueError unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1); None where it takes any (no length key in the config)."""
    lengths = lengths_of(spec)
    if lengths and lengths.vllm_any_length:
        return None
    return (lengths.vllm_limit or lengths.vllm_default if lengths else None) or spec.max_position_embeddings


def config_context_len(spec: ModelSpec) -> int | None:
    """The context_length SGLang derives from the model's config.json (get_context_length), where known."""
    lengths = lengths_of(spec)
    return (lengths.sglang if lengths else None) or spec.max_position_embeddings


def trtllm_max_seq_len(spec: ModelSpec) -> int | None:
    """The max_seq_len TensorRT-LLM infers for the model (a longer one is cut to it), where known."""
    lengths = lengths_of(spec)
    return (lengths.trtllm if lengths else None) or spec.max_position_embeddings


def longest_context(spec: ModelSpec, engine: str) -> int | None:
    """The longest context `engine` starts with for this model, as it derives it from config.json (vLLM 0.19's
    max_model_len check, SGLang's context_length from 0.5.1, TensorRT-LLM's inferred max_seq_len); None: any
    (llama.cpp warns of a context past n_ctx_train, and runs it)."""
    if engine == "vllm":
        return longest_model_len(spec)
    if engine == "sglang":
        return config_context_len(spec)
    return trtllm_max_seq_len(spec) if engine == "trtllm" else None


def context_refusal(spec: ModelSpec, engine: str, tokens: int) -> str | None:
    """Why `engine` would not serve `tokens`-token sequences: past the context it derives from config.json."""
    longest = longest_context(spec, engine)
    if not longest or tokens <= longest:
        return None
    what = "max_position_embeddings" if longest == spec.max_position_embeddings else "config.json (as it reads it)"
    if engine in LONGER_CONTEXT_ENV:
        does = f"it refuses a longer context unless {LONGER_CONTEXT_ENV[engine]}"
    else:  # TensorRT-LLM starts, its max_seq_len cut to the model's (a warning), and rejects longer requests
        does = "it cuts max_seq_len to that and rejects longer requests"
    return f"past the {longest:,} tokens {ENGINE_NAMES[engine]} derives for {spec.name} from its {what}: {does}"
