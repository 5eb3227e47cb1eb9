"""The deployment a speed question names: tp x pp ranks, the link, the memory budget, the what-if utilization."""

from kvcalc.errors import UsageError


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
