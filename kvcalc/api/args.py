"""The Python API's arguments: Python values (ints, lists, text, spec objects) checked as the CLI checks its
options, with the CLI's messages."""

from __future__ import annotations

import math
from typing import Any, Union

from kvcalc.errors import UsageError
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import ModelSpec
from kvcalc.units import MAX_ROWS, parse_count, parse_range

Counts = Union[int, str, "list[int]"]


def as_counts(value: Counts, what: str) -> list[int]:
    if isinstance(value, bool):
        raise UsageError(f"{what} must be a count, got {value!r}")
    if isinstance(value, int):
        return [parse_count(str(value), what)]
    if isinstance(value, (list, tuple, range)):
        if len(value) > MAX_ROWS:  # NOTE: before iterating: range(1, 10**9) would take minutes
            raise UsageError(
                f"{what} has {len(value):,} values, more than the {MAX_ROWS:,} kvcalc computes in one run",
                hint="use fewer values or a coarser range",
            )
        return sorted({v for item in value for v in as_counts(item, what)})
    return parse_range(str(value), what)


def as_count(value: int | str, what: str) -> int:
    values = as_counts(value, what)
    if len(values) != 1:
        raise UsageError(f"{what} takes one value here, got {len(values)}")
    return values[0]


def as_counts_nonempty(value: Counts, what: str) -> list[int]:
    values = as_counts(value, what)
    if not values:  # NOTE: an empty list would silently give no results
        raise UsageError(f"{what} is empty", hint="e.g. 16, a list [1, 8, 64] or a range '1..64'")
    return values


def as_model(model: str | ModelSpec, overrides: dict[str, Any]) -> ModelSpec:
    import os

    if isinstance(model, ModelSpec):
        from kvcalc.model.resolve import override

        return override(model, overrides)
    if not isinstance(model, (str, os.PathLike)):
        raise UsageError(f"model must be a preset name, hub id, path or ModelSpec, got {model!r}")
    from kvcalc.plan.inputs import resolve

    return resolve(os.fspath(model), overrides).spec


def as_gpus(gpu: str | GpuSpec | list) -> list[GpuSpec]:
    from kvcalc.model.presets import get_gpu
    from kvcalc.units import parse_names

    if isinstance(gpu, GpuSpec):
        return [gpu]
    if isinstance(gpu, (list, tuple)):
        return [g for item in gpu for g in as_gpus(item)]
    if not isinstance(gpu, str):
        raise UsageError(f"gpu must be a preset name, FILE.yaml or GpuSpec, got {gpu!r}")
    return [get_gpu(name) for name in parse_names(gpu, "gpu")]


def as_some_gpus(gpu: str | GpuSpec | list) -> list[GpuSpec]:
    gpus = as_gpus(gpu)
    if not gpus:  # an empty list would give no result and no error
        raise UsageError("gpu is empty", hint="a preset name such as 'h100', or a list ['a100', 'h100']")
    return gpus


def as_one_gpu(gpu: str | GpuSpec, command: str) -> GpuSpec:
    gpus = as_gpus(gpu)
    if len(gpus) != 1:
        raise UsageError(f"{command} takes one gpu, got {len(gpus)}", hint="roofline compares several")
    return gpus[0]


def as_link(interconnect: str | None) -> str | None:
    return None if interconnect is None else str(interconnect)


def as_reserve(reserve: str | int) -> str:
    # NOTE: a bool is an int to Python, and a float of bytes is not a whole count: both are refused here
    # rather than becoming 1 byte or a truncated figure.
    if isinstance(reserve, bool) or not isinstance(reserve, (int, str)):
        raise UsageError(f"reserve must be a size such as '2GiB' or a whole number of bytes, got {reserve!r}")
    return str(reserve)


def as_deployment(spec, gpu, tp: int, pp: int, interconnect, gpu_util: float, reserve: str | int, **layout):  # noqa: ANN001, ANN003, ANN202
    """The GPUs a roofline or generate call describes, checked as the CLI's --tp/--pp/--interconnect (and
    --ep, --dp-attention, --nodes, --gpus-per-node) are."""
    from kvcalc.plan.deploy import deployment

    return deployment(
        spec,
        gpu,
        tp=as_count(tp, "tp"),
        pp=as_count(pp, "pp"),
        interconnect=as_link(interconnect),
        gpu_util=gpu_util,
        reserve=as_reserve(reserve),
        **layout,
    )


def as_overrides(**given: Any) -> dict[str, Any]:
    from kvcalc.plan.inputs import what_ifs as check

    window = given.pop("window")
    # NOTE: the CLI's checks expect ints (Typer parsed them); here they may be text or a bool.
    given = {k: None if v is None or k == "dtype" else as_count(v, k) for k, v in given.items()} | {
        "dtype": given["dtype"]
    }
    return check(**given, window=None if window is None else str(window))


def check_goals(tpot_ms: float | None, ttft_ms: float | None, **goal_only: Any) -> None:
    """fit's latency goals, positive milliseconds, and the options that shape a goal's verdict (prompt, ceiling,
    efficiency / mbu / mfu) refused without one, as `fit` refuses them on the command line (they were dropped)."""
    for what, value in (("tpot_ms", tpot_ms), ("ttft_ms", ttft_ms)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise UsageError(f"{what} must be a positive number of milliseconds, got {value}")
    from kvcalc.plan.inputs import unread_goal_options

    if tpot_ms is None and ttft_ms is None and (given := unread_goal_options(**goal_only)):
        raise UsageError(f"{', '.join(given)}: a latency goal's options", hint="give tpot_ms or ttft_ms")


def check_static(**served: Any) -> None:
    """A static batch refuses a served run's launch flags and requests, as `generate` refuses them."""
    from kvcalc.plan.inputs import served_options

    if given := [k for names in served_options(**served) for k in names]:
        raise UsageError(f"{' / '.join(given)}: a served run's launch flags or requests: give concurrency or rate")


def as_block_size(block_size: int, engine: str | None) -> int:
    """fit's block_size, under TensorRT-LLM its pool's 32 (plan/trtllm_fit.block_size_for, as fit --engine trtllm)."""
    block_size = as_count(block_size, "block_size")
    if engine is not None and str(engine).lower() == "trtllm":
        from kvcalc.plan.trtllm_fit import block_size_for

        return block_size_for(block_size)
    return block_size
