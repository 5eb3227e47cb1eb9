"""TensorRT-LLM's KV pool on one rank, the way the PyTorch backend (trtllm-serve / the LLM API, 1.x)
sizes it at start-up (tensorrt_llm/_torch/pyexecutor/_util.py, KvCacheCreator.configure_kv_cache_capacity
and _cal_max_memory; resource_manager.py, KVCacheManager.calculate_max_num_blocks):

    peak      = weights + the profiling run's activations (dummy requests of max_num_tokens) + memory
                outside torch (NCCL, CUDA graphs), measured after warm-up
    kv_memory = free_gpu_memory_fraction x (total - peak)      (the estimation pool is added back)
    tokens    = kv_memory // KV bytes of a token on the rank, the minimum over ranks, in whole blocks
                of tokens_per_block

so the fraction (0.9 by default) is of what weights and activations leave, not of the whole GPU as
vLLM's gpu_memory_utilization is: a 160 GiB-per-GPU model on 180 GiB keeps 0.9 x 18 GiB for KV under
TensorRT-LLM, 0.9 x 180 - 160 - reserve under vLLM's rule. kvcalc's --reserve stands for the peak's
activations and non-torch memory. MLA's latent (kv_lora_rank + qk_rope_head_dim, one head) is held
whole on every TP rank, other KV heads split by TP, layers by PP: the per-rank KV of cost/step.stages.
Sliding-window layers keep their whole context too unless the server is launched with
kv_cache_config.max_attention_window (its default None is max_seq_len for every layer), so their blocks count as
the others' (docs/trtllm.md: per-layer windows, equal memory shares per window, are not modelled). Pure.
"""

from typing import NamedTuple

from kvcalc.cost.step import Deployment, held_kv_bytes, stages
from kvcalc.errors import UsageError
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import ModelSpec

FREE_GPU_MEMORY_FRACTION = 0.9  # KvCacheConfig.free_gpu_memory_fraction
TOKENS_PER_BLOCK = 32  # KvCacheConfig.tokens_per_block
MAX_BATCH_SIZE = 2048  # trtllm-serve --max_batch_size (BuildConfig)
MAX_NUM_TOKENS = 8192  # trtllm-serve --max_num_tokens (BuildConfig)


class TrtllmPool(NamedTuple):
    kv_bytes: int  # the pool on the tightest rank
    blocks: int  # of TOKENS_PER_BLOCK tokens, one sequence's KV on every rank of its stage
    tokens: int


def auto_kv_dtype(spec: ModelSpec) -> str:
    """TensorRT-LLM's KvCacheConfig dtype "auto": fp8 where the checkpoint's quantization declares an fp8 KV
    cache (hf_quant_config's kv_cache_quant_algo FP8), else the 16-bit type the model is served in."""
    ck = spec.checkpoint
    if ck and ck.quantization and ck.quantization.kv_cache_fp8:
        return "fp8"
    declared = (ck.declared_dtype if ck else None) or spec.dtype
    return declared if declared in ("bf16", "fp16") else "bf16"


def kv_memory(capacity: int, resident: int, reserve: int, fraction: float = FREE_GPU_MEMORY_FRACTION) -> int:
    """Bytes one rank gives its KV pool: `fraction` of what weights and the reserve leave of `capacity`."""
    return max(0, int(fraction * (capacity - resident - reserve)))


def predict(spec: ModelSpec, gpu: GpuSpec, dep: Deployment, *, dtype: str | None, kv_dtype: str) -> TrtllmPool:
    """The pool of a deployment, `dep.gpu_util` taken as free_gpu_memory_fraction and `dep.reserve_bytes`
    as the profiling run's peak beyond the weights."""
    if spec.attention_free:
        # NOTE: the PyTorch backend's models (tensorrt_llm/_torch/models) run Mamba-2 mixers inside hybrids
        # only (Nemotron-H); pure Mamba runs through the legacy TensorRT engine builds (examples/mamba)
        raise UsageError(
            f"--engine trtllm: {spec.name} has no attention layers (a pure state-space model); trtllm-serve's "
            "PyTorch backend has no Mamba / Mamba-2 model (its TensorRT engine builds are not modelled)",
            hint="use --engine vllm or llamacpp, or kvcalc's own estimate without --engine",
        )
    per_stage = []
    for st in stages(spec, dep, dtype):
        memory = kv_memory(gpu.capacity_bytes, st.resident_bytes, dep.reserve_bytes, dep.gpu_util)
        per_stage.append((memory // max(held_kv_bytes(st, TOKENS_PER_BLOCK, kv_dtype), 1), memory))
    blocks, memory = min(per_stage)
    return TrtllmPool(memory, blocks, blocks * TOKENS_PER_BLOCK)
