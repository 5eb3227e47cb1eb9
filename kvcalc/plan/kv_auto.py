"""Each engine's `--kv-cache-dtype auto`: the KV dtype a server started without one caches in. The one
rule every command follows when --kv-dtype is left out, so an engine's pool and its step times are
sized at the same dtype."""

from __future__ import annotations

from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import ModelSpec

DEFAULT_KV_DTYPE = "bf16"  # no engine named (or one kvcalc does not model): a 16-bit cache


def auto_kv_dtype(spec: ModelSpec, gpu: GpuSpec, engine: str | None, dtype: str | None) -> str:
    """The KV dtype `engine` picks for `spec` on `gpu` when none is given (`dtype`: --dtype, if any).

    vLLM 0.19: the dtype the model is served in (engines/vllm/memory.activation_dtype). vLLM 0.32 and later
    cache GLM-5 (GlmMoeDsaForCausalLM) in fp8 on B200/B300-class GPUs; kvcalc follows 0.19, so pass
    --kv-dtype fp8 for those. SGLang: engines/sglang/pool.auto_kv_dtype (fp8 for DSA on Blackwell and for
    checkpoints that declare an fp8 cache). TensorRT-LLM: engines/trtllm/pool.auto_kv_dtype (fp8 for a checkpoint
    that declares an fp8 cache, else the model's 16-bit type). llama.cpp: f16 (-ctk / -ctv default to f16, whatever
    the weights). Otherwise bf16."""
    name = (engine or "").lower()
    if name == "vllm":
        from kvcalc.engines.vllm.memory import activation_dtype

        return activation_dtype(spec, gpu, dtype)
    if name == "sglang":
        from kvcalc.engines.sglang.pool import auto_kv_dtype as sglang_auto

        return sglang_auto(spec, gpu)
    if name == "trtllm":
        from kvcalc.engines.trtllm.pool import auto_kv_dtype as trtllm_auto

        return trtllm_auto(spec)
    if name == "llamacpp":
        return "fp16"
    return DEFAULT_KV_DTYPE
