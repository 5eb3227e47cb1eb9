"""Whether a serving engine starts and holds a static batch at once: `generate --batch B --engine E` times B
sequences run together, which under vLLM, SGLang or TensorRT-LLM needs the engine to start on the layout and its
KV pool and scheduler to hold all B (plan/serve_pool.serving_limits: the engine models' pools and limits). The
static generate's own memory line is kvcalc's arithmetic (capacity x --gpu-util less weights and --reserve), which
can say "fits" where SGLang's mem_fraction_static leaves no pool, or where vLLM's pool holds fewer sequences."""

from __future__ import annotations

from kvcalc.cost.roofline import RooflineResult
from kvcalc.cost.step import Deployment
from kvcalc.engines.lengths import context_refusal
from kvcalc.errors import DoesNotFitError, UsageError
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import ModelSpec

# NOTE: llama.cpp is judged by its own buffers instead (llamacpp_fit), a static batch being -np of them at once
ENGINES = ("vllm", "sglang", "trtllm")


def engine_refusal(
    spec: ModelSpec, gpu: GpuSpec, dep: Deployment, engine: str | None, *, dtype: str | None, kv_dtype: str,
    batch: int, prompt: int, new: int, release: str | None = None,
) -> str | None:  # fmt: skip
    """Why `engine` would not run `batch` sequences of prompt + new tokens at once on the deployment: it would
    not start, one sequence outgrows its pool, the pool holds fewer of them, or its scheduler seats fewer (they
    would run in waves, not as one batch). None where it would, or for no engine of the three. `release`: SGLang's."""
    if engine is None or engine.lower() not in ENGINES:
        return None
    return _refusal(engine, batch, prompt + new, _limits(spec, gpu, dep, engine, dtype, kv_dtype, prompt, new, release))


def llamacpp_fit(
    spec: ModelSpec, gpu: GpuSpec, dep: Deployment, engine: str | None, *, dtype: str | None, kv_dtype: str,
    batch: int, tokens: int,
) -> tuple[bool, str] | None:  # fmt: skip
    """Under --engine llamacpp, whether llama.cpp's own buffers hold `batch` sequences of `tokens` tokens at once with
    every layer on the GPUs (-np batch over one cache of batch x tokens cells, --fit's headroom free), and the memory
    line that says so; None for another engine, or where --dtype / --kv-dtype is no llama.cpp type (the static
    generate's arithmetic answers then)."""
    if engine != "llamacpp":
        return None
    from kvcalc.engines.llamacpp.eras import era
    from kvcalc.engines.llamacpp.memory import llamacpp_memory
    from kvcalc.engines.llamacpp.server import FIT_HEADROOM
    from kvcalc.plan.quants import offload_hint, server_setup, whole_on_gpus
    from kvcalc.units import fmt_bytes

    setup = server_setup(spec, gpu, dep.gpus, dtype, kv_dtype)
    if setup is None:
        return None
    rows, what, settings = setup
    r = llamacpp_memory(spec, rows, batch * tokens, era(None), parallel=batch, **settings)
    d = max((d for d in r.devices if d.name != "CPU"), key=lambda d: d.total_bytes)
    line = (
        f"under llama.cpp's buffers (-c {batch * tokens:,} -np {batch}, {what}; the fullest GPU): model"
        f" {fmt_bytes(d.model_bytes)} + KV {fmt_bytes(d.kv_bytes)} + compute {fmt_bytes(d.compute_bytes)} ="
        f" {fmt_bytes(d.total_bytes)} of {fmt_bytes(settings['capacity_bytes'])} ({fmt_bytes(FIT_HEADROOM)} kept free,"
        " as --fit does)"
    )
    if whole_on_gpus(r):
        return True, "fits " + line
    return False, "DOES NOT FIT " + line + offload_hint(spec, gpu, tokens, dep.gpus, dtype, batch)


def engine_rows(
    result: RooflineResult, spec: ModelSpec, gpu: GpuSpec, dep: Deployment, engine: str | None, dtype: str | None,
    pool: bool = True, release: str | None = None,
) -> None:  # fmt: skip
    """roofline's result under `engine`: the warnings of a deployment it cannot make (plan/calibration
    .refusal_warnings), and each row's batch of `seq`-token sequences held at once by the engine (its pool asked
    once a context): a row it would not hold says fits False, and one warning gives the first such row's reason.
    pool False: the warnings alone (roofline without --engine keeps kvcalc's arithmetic and its start-up time).
    `release`: SGLang's (plan/serve_launch.sglang_release)."""
    from kvcalc.plan.calibration import refusal_warnings

    result.warnings += refusal_warnings(engine, result.gpu, spec, dtype, result.kv_dtype)
    if engine == "llamacpp" and result.compute_dtype in ("bf16", "fp16") and "fp16" in gpu.peak_dense_tflop_per_s:
        # NOTE: llama.cpp's 16-bit GEMMs run on F16 with F16 accumulation (engines/kernels.gpu_as_run_by raised the
        # GPU's 16-bit peaks to that rate): the peak in the title is fp16's, not the model's bf16
        result.compute_dtype = "fp16"
        result.peak_flop_per_s = gpu.peak_flop_per_s("fp16")
        result.ridge_flop_per_byte = gpu.ridge_flop_per_byte("fp16")
    if pool and engine == "llamacpp":
        _llamacpp_rows(result, spec, gpu, dep, dtype)
    if not pool or engine is None or engine.lower() not in ENGINES:
        return
    pools: dict[int, tuple | str] = {}
    missed = []
    for row in result.rows:
        if row.seq not in pools:
            pools[row.seq] = _limits(spec, gpu, dep, engine, dtype, result.kv_dtype, row.seq, 0, release)
        if why := _refusal(engine, row.batch, row.seq, pools[row.seq]):
            row.fits = False
            missed.append(why)
    if missed:
        result.warnings.append(f"{len(missed)} of {len(result.rows)} rows: {missed[0]}")


def _llamacpp_rows(result: RooflineResult, spec: ModelSpec, gpu: GpuSpec, dep: Deployment, dtype: str | None) -> None:
    """Each row judged by llama.cpp's own buffers (llamacpp_fit: -np batch over batch x seq cells) in place of
    kvcalc's arithmetic, whose warning gives way to llama.cpp's; left as they are where --dtype / --kv-dtype is no
    llama.cpp type."""
    from kvcalc.cost.roofline import ROWS_DO_NOT_FIT

    kw = dict(dtype=dtype, kv_dtype=result.kv_dtype)
    judged = [llamacpp_fit(spec, gpu, dep, "llamacpp", batch=r.batch, tokens=r.seq, **kw) for r in result.rows]
    pairs = [j for j in judged if j is not None]
    if len(pairs) < len(judged):
        return
    missed = []
    for row, (fits, note) in zip(result.rows, pairs):
        row.fits = fits
        missed += [] if fits else [note]
    result.warnings = [w for w in result.warnings if ROWS_DO_NOT_FIT not in w]
    if missed:
        result.warnings.insert(0, f"{len(missed)} of {len(result.rows)} rows: {missed[0]}")


def _limits(
    spec: ModelSpec, gpu: GpuSpec, dep: Deployment, engine: str, dtype: str | None, kv_dtype: str, prompt: int, new: int,
    release: str | None = None,
) -> tuple | str:  # fmt: skip
    """(Limits, pool text) of the engine on the deployment, or why it would not start (serving_limits' words)."""
    from kvcalc.plan.serve_pool import serving_limits

    if why := context_refusal(spec, engine.lower(), prompt + new):
        return f"it would not serve {prompt + new:,}-token sequences: they are {why}"

    try:
        return serving_limits(
            spec, gpu, dep, engine=engine.lower(), dtype=dtype, kv_dtype=kv_dtype, prompt=prompt, new=new,
            release=release,
        )  # fmt: skip
    except (DoesNotFitError, UsageError) as err:
        said = err.message.removeprefix(f"--engine {engine.lower()}: ")  # _refusal names the engine
        return f"{said} ({err.hint})" if err.hint else said


def _refusal(engine: str, batch: int, tokens: int, held: tuple | str) -> str | None:
    if isinstance(held, str):
        return f"DOES NOT FIT under --engine {engine}: {held}"
    limits, pool = held
    if batch > limits.pool_holds(tokens):
        need = batch * -(-tokens // limits.block_size) * limits.block_size
        return (
            f"DOES NOT FIT under --engine {engine}: {batch:,} x {tokens:,} tokens need {need:,} token slots "
            f"of its pool's {limits.kv_blocks * limits.block_size:,} ({pool})"
        )
    if batch > limits.max_num_seqs:
        return (
            f"DOES NOT RUN AS ONE BATCH under --engine {engine}: its scheduler seats {limits.max_num_seqs:,} "
            f"sequences at once, not {batch:,} ({pool})"
        )
    return None
