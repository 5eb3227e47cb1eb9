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
    ep: int | None = None,
    dp_attention: bool = False,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
):  # noqa: ANN201
    """A valid Deployment of spec on gpu, or one clear UsageError."""
    from kvcalc.cost.shard import link_for, parse_interconnect
    from kvcalc.cost.step import Deployment, validate
    from kvcalc.units import parse_bytes, parse_fraction

    link = parse_interconnect(interconnect, "--interconnect") if interconnect is not None else link_for(gpu)
    per_node, scale_out = node_layout(gpu, tp * pp, nodes, gpus_per_node)
    dep = Deployment(
        tp=tp,
        pp=pp,
        link=link,
        gpu_util=parse_fraction(gpu_util, "--gpu-util"),
        reserve_bytes=parse_bytes(reserve, "--reserve"),
        ep=ep or 1,
        dp_attention=dp_attention,
        gpus_per_node=per_node,
        scale_out=scale_out,
    )
    validate(spec, dep)
    return dep


def node_layout(gpu, gpus: int, nodes: int | None, gpus_per_node: int | None):  # noqa: ANN001, ANN201
    """(GPUs per node, the scale-out Link or None): --gpus-per-node, else the preset's scale-up domain;
    --nodes must match the GPUs the layout uses, whole nodes."""
    from kvcalc.cost.shard import Link

    for flag, value in (("--nodes", nodes), ("--gpus-per-node", gpus_per_node)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be at least 1, got {value}")
    per_node = gpus_per_node or gpu.scale_up_domain
    if nodes is not None:
        if per_node is None:
            per_node = -(-gpus // nodes)
        if nodes * per_node != gpus and -(-gpus // per_node) != nodes:
            raise UsageError(
                f"--nodes {nodes} of {per_node} GPUs does not match tp x pp = {gpus} GPUs",
                hint="the layout fills its nodes: give --tp/--pp so tp x pp spans exactly --nodes",
            )
    scale_out = None
    if gpu.scale_out_bandwidth_bytes_per_s:
        scale_out = Link(
            name=gpu.scale_out or "scale-out",
            bandwidth_bytes_per_s=gpu.scale_out_bandwidth_bytes_per_s,
            latency_s=gpu.scale_out_latency_s or gpu.link_latency_s or 3.7e-6,
        )
    return per_node, scale_out
