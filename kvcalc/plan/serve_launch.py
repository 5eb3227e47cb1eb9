"""A served deployment's launch flags as a user gives them (`generate --max-num-seqs / --max-batched-tokens /
--mem-fraction-static`, the Python API's `max_num_seqs` / `max_batched_tokens` / `mem_fraction_static`), checked
as the engine checks them and turned into what plan/serve_pool.serving_limits takes: the scheduler's limits
(`launch`) and SGLang's pool fraction; and the memory share `--gpu-util` as fit and generate take it."""

from kvcalc.errors import UsageError
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.units import DEFAULT_GPU_UTIL


def launch_limits(
    engine: str, gpu: GpuSpec, prompt: int, max_num_seqs: int | None, max_batched_tokens: int | None
) -> dict[str, int] | None:
    """serving_limits' `launch` from a user's scheduler flags, checked: each a whole number of at least 1; under
    vLLM, both as vLLM sets them from the flags given (plan/vllm_fit.scheduler_limits: a defaulted max_num_seqs
    capped by a smaller budget, a budget below a given max_num_seqs refused); under TensorRT-LLM, which schedules
    a prompt whole (chunked prefill off by default) and refuses one longer than max_num_tokens, a budget of at
    least the prompt."""
    launch = {}
    for name, flag, v in (
        ("max_num_seqs", "--max-num-seqs", max_num_seqs),
        ("max_num_batched_tokens", "--max-batched-tokens", max_batched_tokens),
    ):
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise UsageError(f"{flag} must be a whole number of at least 1, got {v!r}")
        launch[name] = v
    if engine == "vllm" and launch:
        from kvcalc.plan.vllm_fit import scheduler_limits

        seqs, tokens = scheduler_limits(gpu, max_num_seqs, max_batched_tokens)
        launch = dict(max_num_seqs=seqs, max_num_batched_tokens=tokens)
    if engine == "trtllm" and max_batched_tokens is not None and max_batched_tokens < prompt:
        raise UsageError(
            f"TensorRT-LLM would refuse every request: a {prompt:,}-token prompt is scheduled whole and "
            f"--max-batched-tokens (its max_num_tokens) is {max_batched_tokens:,}",
            hint="a budget of at least --prompt, or --engine vllm / sglang (chunked prefill)",
        )
    return launch or None


def pool_fraction(engine: str, mem_fraction_static: float | None) -> float | None:
    """SGLang's --mem-fraction-static, checked as fit checks it (SGLang's alone; engines/sglang/release.check_mem_fraction:
    in (0, 1]); None: the release's default for the card (engines/sglang/release.default_mem_fraction)."""
    if mem_fraction_static is None:
        return None
    if engine != "sglang":
        raise UsageError("--mem-fraction-static needs --engine sglang", hint="it is one of SGLang's server arguments")
    from kvcalc.engines.sglang.release import check_mem_fraction

    return check_mem_fraction(mem_fraction_static)


def state_slots(engine: str, max_mamba_cache_size: int | None) -> int | None:
    """SGLang's --max-mamba-cache-size, checked as fit checks it (plan/sglang.check_options): SGLang's alone, at
    least 1; None: the release's split of the memory (engines/sglang/mamba.state_pool)."""
    if max_mamba_cache_size is None:
        return None
    if engine != "sglang":
        raise UsageError("--max-mamba-cache-size needs --engine sglang", hint="it is one of SGLang's server arguments")
    if isinstance(max_mamba_cache_size, bool) or not isinstance(max_mamba_cache_size, int) or max_mamba_cache_size < 1:
        raise UsageError(f"--max-mamba-cache-size must be at least 1, got {max_mamba_cache_size!r}")
    return max_mamba_cache_size


def ssm_dtype(engine: str, mamba_ssm_dtype: str | None) -> str | None:
    """SGLang's --mamba-ssm-dtype, checked as fit checks it: SGLang's alone, one of its choices."""
    if mamba_ssm_dtype is None:
        return None
    if engine != "sglang":
        raise UsageError("--mamba-ssm-dtype needs --engine sglang", hint="it is one of SGLang's server arguments")
    from kvcalc.engines.sglang.mamba import check_ssm_dtype

    return check_ssm_dtype(mamba_ssm_dtype)


def sglang_release(engine: str | None, engine_version: str | None) -> str | None:
    """generate's, roofline's and plan's `--engine-version` (the Python API's `engine_version`): the SGLang release
    whose pool, fraction and chunk to follow, checked as fit checks it (engines/sglang/release.parse_release);
    None: the default release. SGLang's alone: llama.cpp's build eras are fit --engine llamacpp's."""
    if engine_version is None:
        return None
    if (engine or "vllm") != "sglang":
        raise UsageError("--engine-version needs --engine sglang", hint=version_hint(engine or "vllm"))
    from kvcalc.engines.sglang.release import parse_release, release_text

    return release_text(parse_release(engine_version))


def version_hint(engine: str) -> str:
    """Why --engine-version names no release of `engine`: the one release kvcalc models of it, and what to do."""
    if engine == "vllm":
        return (
            "kvcalc models vLLM 0.19 alone; later releases size the pool otherwise (docs/vllm.md): give fit --engine "
            "vllm their logged 'Available KV cache memory' as --kv-memory"
        )
    if engine == "trtllm":
        return "kvcalc models TensorRT-LLM 1.x's trtllm-serve defaults, one reading for every release"
    return "it names an SGLang release (fit --engine llamacpp takes a llama.cpp build era)"


def gpu_util_for(engine: str | None, gpu_util: float | None) -> float:
    """fit's and generate's `--gpu-util`: vLLM's gpu_memory_utilization (TensorRT-LLM's free_gpu_memory_fraction)
    as given, vLLM's default when not given; refused under --engine sglang, which reads no such flag (its pool is
    the share of free memory --mem-fraction-static sets), so that a value given there is not silently dropped."""
    if gpu_util is None:
        return DEFAULT_GPU_UTIL
    if engine is not None and engine.lower() == "sglang":
        raise UsageError(
            f"--gpu-util {gpu_util:g} is vLLM's --gpu-memory-utilization; SGLang does not read it",
            hint="SGLang sizes its pool by --mem-fraction-static (a share of the memory free before the weights load)",
        )
    return gpu_util


def check_reserve(engine: str, reserve_given: bool) -> None:
    """A served run's --reserve: TensorRT-LLM's profiling peak (its pool is a share of what the weights and the
    reserve leave); refused under vLLM and SGLang, whose pools are sized by their own terms (engines/vllm/memory's
    profiling peak and non-torch memory, SGLang's mem_fraction_static), so that a value given is not dropped."""
    if reserve_given and engine in ("vllm", "sglang"):
        name = "vLLM" if engine == "vllm" else "SGLang"
        raise UsageError(
            f"--reserve has no meaning in a run served by {name}: its pool is sized by its own terms",
            hint="--gpu-util (vLLM) or --mem-fraction-static (SGLang); --reserve is TensorRT-LLM's profiling peak",
        )
