"""Whether a serving engine starts and holds a static batch at once: `generate --batch B --engine E` times B
sequences run together, which under vLLM, SGLang or TensorRT-LLM needs the engine to start on the layout and its
KV pool and scheduler to hold all B (plan/serve_report.serving_limits: the engine models' pools and limits). The
static generate's own memory line is kvcalc's arithmetic (capacity x --gpu-util less weights and --reserve), which
can say "fits" where SGLang's mem_fraction_static leaves no pool, or where vLLM's pool holds fewer sequences."""

from __future__ import annotations

from kvcalc.cost.step import Deployment
from kvcalc.errors import UsageError
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import ModelSpec

ENGINES = ("vllm", "sglang", "trtllm")  # llama.cpp's buffers are `fit --engine llamacpp`'s; its -np is its seats


def engine_refusal(
    spec: ModelSpec, gpu: GpuSpec, dep: Deployment, engine: str | None, *, dtype: str | None, kv_dtype: str,
    batch: int, prompt: int, new: int,
) -> str | None:  # fmt: skip
    """Why `engine` would not run `batch` sequences of prompt + new tokens at once on the deployment: it would
    not start, one sequence outgrows its pool, the pool holds fewer of them, or its scheduler seats fewer (they
    would run in waves, not as one batch). None where it would, or for no engine of the three."""
    if engine is None or engine.lower() not in ENGINES:
        return None
    from kvcalc.plan.serve_report import serving_limits

    try:
        limits, pool = serving_limits(
            spec, gpu, dep, engine=engine.lower(), dtype=dtype, kv_dtype=kv_dtype, prompt=prompt, new=new
        )
    except UsageError as err:
        return f"DOES NOT FIT under --engine {engine}: {err.message}"
    if batch > limits.pool_holds(prompt + new):
        need = batch * -(-(prompt + new) // limits.block_size) * limits.block_size
        return (
            f"DOES NOT FIT under --engine {engine}: {batch:,} x {prompt + new:,} tokens need {need:,} token slots "
            f"of its pool's {limits.kv_blocks * limits.block_size:,} ({pool})"
        )
    if batch > limits.max_num_seqs:
        return (
            f"DOES NOT RUN AS ONE BATCH under --engine {engine}: its scheduler seats {limits.max_num_seqs:,} "
            f"sequences at once, not {batch:,} ({pool})"
        )
    return None
