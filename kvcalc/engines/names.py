"""What people call a serving engine, read as one of the four whose speed kvcalc models.

`TensorRT-LLM`, `trt-llm` and `trtllm-serve` are trtllm; `llama.cpp` and `llama-server` are llamacpp. Engines
without a model of their own are estimated as the nearest of the four, and the CLI says so: LMDeploy (its
TurboMind backend) as trtllm, Hugging Face TGI as vllm, Ollama as llamacpp.
"""

from __future__ import annotations

from kvcalc.cost.estimate import ENGINES
from kvcalc.errors import UsageError

SPELLINGS = {
    "tensorrt-llm": "trtllm",
    "tensorrt_llm": "trtllm",
    "tensorrtllm": "trtllm",
    "trt-llm": "trtllm",
    "trt_llm": "trtllm",
    "trtllm-serve": "trtllm",
    "llama.cpp": "llamacpp",
    "llama-cpp": "llamacpp",
    "llama_cpp": "llamacpp",
    "llama-server": "llamacpp",
}
# NOTE: (the model it is read as, why that one is nearest).
NEAREST = {
    "lmdeploy": ("trtllm", "TurboMind is a compiled C++ engine with its own kernels and persistent batching"),
    "turbomind": ("trtllm", "a compiled C++ engine with its own kernels and persistent batching"),
    "tgi": ("vllm", "continuous batching over paged attention, prompts chunked into the decode steps"),
    "text-generation-inference": ("vllm", "continuous batching over paged attention, prompts chunked into decodes"),
    "ollama": ("llamacpp", "Ollama runs GGUF models on llama.cpp's ggml kernels, a few requests in parallel"),
}


def engine_name(text: str, nearest: bool = True) -> tuple[str, str | None]:
    """(the engine kvcalc models, a note when it stands in for another); an unknown name is a usage error.
    With nearest=False (calibrating an engine's own terms) a stand-in is refused rather than read."""
    key = text.strip().lower()
    if key in ENGINES:
        return key, None
    if key in SPELLINGS:
        return SPELLINGS[key], None
    if key in NEAREST:
        name, why = NEAREST[key]
        if not nearest:
            raise UsageError(
                f"engine '{text.strip()}' has no speed model of its own to calibrate: its runs would set {name}'s terms",
                hint=f"calibrate runs of one of {', '.join(ENGINES)}",
            )
        return name, f"{text.strip()} has no speed model of its own; estimated as {name}, the nearest ({why})"
    raise UsageError(
        f"unknown engine '{text}'",
        hint=f"one of {', '.join(ENGINES)} (lmdeploy is read as trtllm, tgi as vllm, ollama as llamacpp)",
    )


# Each modelled engine's own name, by the name --engine takes
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM", "llamacpp": "llama.cpp"}
