"""Options the speed commands share (roofline, generate, fit): the deployment (--tp/--gpus, --pp,
--interconnect), the memory budget (--gpu-util, --reserve) and the estimate (--efficiency/--mbu/--mfu)."""

from typing import Annotated, Optional

import typer

from kvcalc.errors import UsageError

TpOpt = Annotated[
    Optional[int],
    typer.Option("--tp", help="Tensor-parallel GPUs per pipeline stage (vLLM's rule: divides the heads)."),
]
GpusOpt = Annotated[Optional[int], typer.Option("--gpus", help="Same as --tp.")]
PpOpt = Annotated[
    Optional[int], typer.Option("--pp", help="Pipeline stages (layers split as vLLM's get_pp_indices splits them).")
]
InterconnectOpt = Annotated[
    Optional[str],
    typer.Option(
        "--interconnect",
        help="Link between the GPUs: nvlink3/4/5, infinity-fabric, pcie3/4/5, or a one-way rate such as 100GB/s "
        "(default: the GPU preset's).",
    ),
]
GpuUtilOpt = Annotated[
    float, typer.Option("--gpu-util", help="Share of GPU memory to use, as vLLM's gpu_memory_utilization.")
]
ReserveOpt = Annotated[
    str, typer.Option("--reserve", help="Per-GPU memory kept for activations, CUDA graphs and buffers.")
]
EffOpt = Annotated[
    Optional[float],
    typer.Option("--efficiency", help="Scale both roofs by F (0-1] for an estimate beside the ceiling."),
]
MbuOpt = Annotated[Optional[float], typer.Option("--mbu", help="Memory-bandwidth utilization (0-1] for the estimate.")]
MfuOpt = Annotated[Optional[float], typer.Option("--mfu", help="Model FLOP/s utilization (0-1] for the estimate.")]


def utilization(efficiency: float | None, mbu: float | None, mfu: float | None) -> tuple[float, float] | None:
    """(MBU, MFU) for an estimate, or None for the plain ceiling."""
    from kvcalc.units import parse_fraction

    if efficiency is None and mbu is None and mfu is None:
        return None
    base = parse_fraction(efficiency, "--efficiency") if efficiency is not None else 1.0
    return (
        parse_fraction(mbu, "--mbu") if mbu is not None else base,
        parse_fraction(mfu, "--mfu") if mfu is not None else base,
    )


def ranks(tp: int | None, gpus: int | None, pp: int | None) -> tuple[int, int]:
    """(tp, pp) from the flags, refusing nonsense before any model is loaded."""
    for flag, value in (("--tp", tp), ("--gpus", gpus), ("--pp", pp)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be at least 1, got {value}")
    if gpus is not None and tp is not None and gpus != tp:
        raise UsageError(f"--gpus {gpus} and --tp {tp} disagree", hint="give one of them")
    return tp or gpus or 1, pp or 1


def deployment(
    spec,  # noqa: ANN001
    gpu,  # noqa: ANN001
    *,
    tp: int,
    pp: int,
    interconnect: str | None,
    gpu_util: float,
    reserve: str,
):  # noqa: ANN201
    """A valid Deployment of spec on gpu, or one clear UsageError."""
    from kvcalc.cost.shard import link_for, parse_interconnect
    from kvcalc.cost.step import Deployment, validate
    from kvcalc.units import parse_bytes, parse_fraction

    link = parse_interconnect(interconnect, "--interconnect") if interconnect is not None else link_for(gpu)
    dep = Deployment(
        tp=tp,
        pp=pp,
        link=link,
        gpu_util=parse_fraction(gpu_util, "--gpu-util"),
        reserve_bytes=parse_bytes(reserve, "--reserve"),
    )
    validate(spec, dep)
    return dep
