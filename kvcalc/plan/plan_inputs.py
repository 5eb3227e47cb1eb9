"""`kvcalc plan`'s inputs as the command and the Python API kvcalc.plan(...) give them (texts like '32k',
'h100,h200', 'h200=3.5', or numbers, lists, dicts, ModelSpec and GpuSpec objects), checked and turned into
the planner's specs and numbers, for cli/plan.py and kvcalc.api.plan alike."""

import math

from kvcalc.errors import UsageError
from kvcalc.units import DEFAULT_GPU_UTIL


def _names(value, what: str) -> list[str] | None:  # noqa: ANN001
    from kvcalc.units import parse_names

    if value is None:
        return None
    items = [value] if isinstance(value, str) else list(value)
    return [name.lower() for item in items for name in parse_names(item, what)]


def plan_from_inputs(
    model,  # noqa: ANN001  (a name / hub id / path, or a ModelSpec)
    seq: int | str,
    users: int,
    *,
    tpot_ms: float | None = None,
    ttft_ms: float | None = None,
    prompt: int | str | None = None,
    new: int | str | None = None,
    gpu=None,  # noqa: ANN001  (a name, 'a,b', or a list of names; None: DEFAULT_GPUS)
    max_gpus: int = 8,
    dtype=None,  # noqa: ANN001
    kv_dtype=None,  # noqa: ANN001
    engine: str = "vllm",
    price=None,  # noqa: ANN001  ({gpu: usd}, 'g=usd', or a list of them)
    gpu_util: float = DEFAULT_GPU_UTIL,
    engine_version: str | None = None,
):  # noqa: ANN201
    """The cheapest deployment serving `users` at `seq` tokens within tpot_ms / ttft_ms (`kvcalc plan`):
    a PlanResult, as `--format json` prints it. gpu: names ('h100,h200' or a list) or GpuSpecs (default
    DEFAULT_GPUS); price: {"h200": 3.5}, "h200=3.5" or a list of them; engine_version: SGLang's release; the rest as
    the command's options."""
    from kvcalc.engines.names import ENGINE_NAMES
    from kvcalc.plan.inputs import resolve
    from kvcalc.plan.planner import MAX_GPUS, plan
    from kvcalc.units import KV_DTYPES, WEIGHT_DTYPES, normalize_dtype, parse_count, parse_fraction

    for flag, value in (("--tpot-ms", tpot_ms), ("--ttft-ms", ttft_ms)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise UsageError(f"{flag} must be a positive number of milliseconds, got {value}")
    engine = str(engine).strip().lower()
    if engine not in ENGINE_NAMES:
        raise UsageError(f"unknown engine '{engine}'", hint=f"one of {', '.join(ENGINE_NAMES)}")
    from kvcalc.plan.serve_launch import sglang_release

    release = sglang_release(engine, engine_version)
    if not isinstance(users, int) or users < 1:
        raise UsageError(f"--users must be at least 1, got {users}")
    if not 1 <= max_gpus <= MAX_GPUS:
        raise UsageError(f"--max-gpus must be 1 to {MAX_GPUS}, got {max_gpus}")
    length = parse_count(seq, "--seq", minimum=2)
    p = parse_count(prompt, "--prompt") if prompt is not None else None
    n = parse_count(new, "--new") if new is not None else None
    p = p if p is not None else (length - n if n is not None else length // 2)
    n = n if n is not None else length - p
    if p < 1 or n < 1 or p + n > length:
        raise UsageError(f"--prompt {p:,} + --new {n:,} must be at least 1 each and within --seq {length:,}")
    if engine == "llamacpp":  # each quant an option, judged by llama.cpp's own buffers
        return _gguf_plan(model, length, users, p, n, tpot_ms, ttft_ms, gpu, max_gpus, price, dtype, kv_dtype)
    dtypes = [d if d == "auto" else normalize_dtype(d, WEIGHT_DTYPES) for d in _names(dtype, "--dtype") or []]
    kvs = [d if d == "auto" else normalize_dtype(d, KV_DTYPES) for d in _names(kv_dtype, "--kv-dtype") or []]
    prices = _prices(price)
    from kvcalc.engines.lengths import context_refusal, longest_context

    spec = resolve(model, {}).spec if isinstance(model, str) else model  # a ModelSpec as it is
    if why := context_refusal(spec, engine, length):
        raise UsageError(f"--seq {length:,} is {why}", hint=f"--seq {longest_context(spec, engine):,} or less")
    return plan(
        spec, _gpus(gpu), seq=length, users=users, prompt=p, new=n, tpot_ms=tpot_ms, ttft_ms=ttft_ms, max_gpus=max_gpus,
        dtypes=dtypes or None, kv_dtypes_given=kvs or None, engine=engine, prices=prices,
        gpu_util=parse_fraction(gpu_util, "--gpu-util"), engine_version=release,
    )  # fmt: skip


def _gpus(gpu) -> list:  # noqa: ANN001
    """--gpu as names ('a,b' too) or GpuSpec objects, one or a list; DEFAULT_GPUS where none is given."""
    from kvcalc.model.presets import get_gpu
    from kvcalc.plan.planner import DEFAULT_GPUS

    items = gpu if isinstance(gpu, (list, tuple)) else ([] if gpu is None else [gpu])
    gpus = []
    for item in items:
        gpus += [get_gpu(g) for g in _names(item, "--gpu")] if isinstance(item, str) else [item]
    return gpus or [get_gpu(g) for g in DEFAULT_GPUS]


def _prices(price) -> dict[str, float]:  # noqa: ANN001
    from kvcalc.plan.price import parse_prices

    if isinstance(price, dict):
        return parse_prices([f"{k}={v}" for k, v in price.items()])
    return parse_prices([price] if isinstance(price, str) else price)


def _gguf_plan(model, seq, users, prompt, new, tpot_ms, ttft_ms, gpu, max_gpus, price, dtype, kv_dtype):  # noqa: ANN001, ANN202
    """plan over the quant files of a GGUF (plan/gguf_plan.py), or, for a model without one, over the files a
    conversion would give (f16, the checkpoint's MXFP4_MOE, or each --dtype quant), laid out as estimated tables."""
    from kvcalc.model.gguf.source import is_gguf_ref
    from kvcalc.plan.gguf_plan import gguf_models, plan_quants
    from kvcalc.plan.inputs import resolve
    from kvcalc.plan.quants import estimated_table, llamacpp_weights

    gguf = isinstance(model, str) and is_gguf_ref(model)
    if kv_dtype is not None or (gguf and dtype is not None):
        raise UsageError(
            "--dtype and --kv-dtype do not apply to a GGUF plan: its quants are the repo's files"
            if gguf
            else "--kv-dtype does not apply to a llama.cpp plan: its cache is f16",
            hint="one quant: REPO:Q4_K_M; llama.cpp's cache types: kvcalc fit REPO --engine llamacpp --kv-dtype q8_0",
        )
    if gguf:
        name, models = gguf_models(model)
    else:
        spec = resolve(model, {}).spec if isinstance(model, str) else model
        name, models = spec.name, []
        for wtype in [llamacpp_weights(d) for d in _names(dtype, "--dtype") or []] or [None]:
            rows, label = estimated_table(spec, wtype)
            models.append(((label or "F16").split(" (")[0] + " (estimated)", 0, spec, rows))
    return plan_quants(
        models, _gpus(gpu), repo=name, seq=seq, users=users, prompt=prompt,
        new=new, tpot_ms=tpot_ms, ttft_ms=ttft_ms, max_gpus=max_gpus, prices=_prices(price), estimated=not gguf,
    )  # fmt: skip
