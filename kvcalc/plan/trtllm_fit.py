"""fit's glue for --engine trtllm: TensorRT-LLM's own KV pool (engines/trtllm/pool.py) in place of kvcalc's
capacity, and the verdict under it. The reserve beside the weights stays fit's (vLLM 0.19's activation peak
of a max_num_batched_tokens forward and its non-torch memory, or --reserve): TensorRT-LLM profiles a forward of
max_num_tokens (8,192) the same way, and its pool is free_gpu_memory_fraction (--gpu-util) of what is left."""

from kvcalc.cost.step import Deployment
from kvcalc.errors import UsageError
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import ModelSpec
from kvcalc.plan.fit import FitResult, adopt_engine_capacity, engine_verdict, gpus_named

LABEL = "TensorRT-LLM 1.x"


def block_size_for(block_size: int) -> int:
    """fit's --block-size under TensorRT-LLM: its pool's pages, KvCacheConfig.tokens_per_block (32), in place of
    vLLM's default 16; another value is refused (engines/trtllm/pool.py sizes the pool in blocks of 32)."""
    from kvcalc.engines.trtllm.pool import TOKENS_PER_BLOCK
    from kvcalc.errors import UsageError

    if block_size not in (16, TOKENS_PER_BLOCK):
        raise UsageError(
            f"--block-size {block_size}: TensorRT-LLM's pool is paged in blocks of {TOKENS_PER_BLOCK} tokens here",
            hint="leave --block-size out under --engine trtllm",
        )
    return TOKENS_PER_BLOCK


def replica_pool(
    spec: ModelSpec, gpu: GpuSpec, dep: Deployment, dtype: str | None, kv_dtype: str, seq: int
) -> tuple[int, float]:
    """(KV tokens, requests of `seq` tokens) TensorRT-LLM's pools hold on one replica, in whole blocks of 32 tokens;
    with DP attention each of the tp ranks has a pool of its own (enable_attention_dp), so the replica holds tp
    times one rank's."""
    from kvcalc.engines.trtllm import pool as trt

    return _replica(trt.predict(spec, gpu, dep, dtype=dtype, kv_dtype=kv_dtype).blocks, dep.kv_ranks, seq)


def _replica(blocks: int, ranks: int, seq: int) -> tuple[int, float]:
    from kvcalc.engines.trtllm.pool import TOKENS_PER_BLOCK

    return ranks * blocks * TOKENS_PER_BLOCK, ranks * blocks / -(-seq // TOKENS_PER_BLOCK)


def adopt_pool(result: FitResult, spec: ModelSpec, gpu: GpuSpec, dep: Deployment, dtype: str | None) -> None:
    """The row's capacity, concurrency, largest batch and context become TensorRT-LLM's, at the row's reserve
    (fit's, or --reserve): each rank's pool holds whole requests of its blocks, at most max_batch_size. An
    architecture its PyTorch backend registers no class for is refused, in its words (as vLLM's and SGLang's)."""
    from kvcalc.engines.trtllm import pool as trt
    from kvcalc.engines.trtllm.models import architecture_refusal

    if why := architecture_refusal(spec):
        raise UsageError(
            f"--engine trtllm: TensorRT-LLM does not serve {spec.name}: {why}",
            hint="--engine vllm or sglang, or drop --engine for kvcalc's own arithmetic",
        )

    dep = dep._replace(reserve_bytes=result.per_gpu.reserve_bytes)
    blocks = trt.predict(spec, gpu, dep, dtype=dtype, kv_dtype=result.kv_dtype).blocks

    def held_at(s: int) -> int:
        return min(dep.kv_ranks * (blocks // -(-s // trt.TOKENS_PER_BLOCK)), trt.MAX_BATCH_SIZE)

    tokens, concurrency = _replica(blocks, dep.kv_ranks, result.seq)
    adopt_engine_capacity(result, LABEL, tokens, concurrency, spec=spec, held_at=held_at, engine="trtllm")


def verdict(result: FitResult) -> tuple[bool, str]:
    """fit's verdict under TensorRT-LLM's pool: --batch requests of --seq tokens held at once."""
    from kvcalc.engines.kernels import gpu_refusal
    from kvcalc.engines.trtllm.pool import MAX_BATCH_SIZE

    where = gpus_named(result)
    if why := gpu_refusal("trtllm", result.gpu):
        return False, f"TensorRT-LLM would not start on {where}: {why}"
    held = result.max_concurrency
    pool = f"its pool of {result.kv_capacity_tokens:,} tokens (free_gpu_memory_fraction {result.gpu_util:g})"
    if result.max_batch < 1:
        return False, f"DOES NOT FIT under {LABEL} on {where}: one {result.seq:,}-token request needs more than {pool}"
    if not result.fits:
        return False, (
            f"DOES NOT FIT under {LABEL} on {where}: batch {result.batch:,} x {result.seq:,} tokens exceeds {pool}, "
            f"{held:.2f}x concurrency (max_batch_size {MAX_BATCH_SIZE:,}); the largest batch it holds is "
            f"{result.max_batch:,}"
        )
    return engine_verdict(result, LABEL, held)  # the goals as fit words them; the pool decided memory
