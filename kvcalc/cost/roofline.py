"""Pure roofline arithmetic: bytes, FLOPs, intensity and time ceilings for decode and prefill, per GPU
of a tensor/pipeline-parallel deployment (kvcalc/step.py holds the per-stage costs)."""

from kvcalc.cost.calibration import Calibration
from kvcalc.cost.flops import (
    attention_form,
)
from kvcalc.cost.shard import allreduce_seconds, allreduces_per_step, kv_heads_per_rank, send_seconds
from kvcalc.cost.step import (
    SINGLE,
    Deployment,
    Fit,
    Stage,
    activation_bytes,
    comm_seconds,
    context_warning,
    decode_state_bytes,
    kv_bytes,
    memory_fit,
    needs_link,
    stage_decode_flops,
    stage_prefill_flops,
    stages,
    weight_bytes_read,
)
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import ModelSpec
from kvcalc.results import Result
from kvcalc.units import DEFAULT_GPU_UTIL, fmt_rate, fmt_seconds


# NOTE: this command's result models live here, beside the function that returns them, so that
# another command does not define them at start-up; and no `from __future__ import annotations`
# in this module: Pydantic would compile every field's annotation string at import.
class StepEstimate(Result):
    """The calibrated estimate of one decode step (cost/estimate.py) and its 80% interval."""

    step_s: float
    tokens_per_s: float
    interval_s: list[float]  # [lo, hi] of step_s


class RooflineRow(Result):
    batch: int
    seq: int
    weight_bytes: int
    kv_bytes: int
    flops: int
    arithmetic_intensity: float
    bound: str  # "memory" or "compute"
    state_bytes: int = 0  # SSM / linear-attention state read and written (decode) or written (prefill)
    step_seconds: float  # ceiling: a lower bound on time
    tokens_per_s: float  # ceiling: an upper bound on throughput
    memory_seconds: float
    compute_seconds: float
    comm_seconds: float = 0.0  # all-reduces and pipeline sends on the step's critical path
    fits: bool = True  # weights + KV + state + reserve within capacity x gpu_util on every GPU
    # MoE: the weight bytes the ceiling reads, the kindest routing's (k experts a layer), where below weight_bytes
    ceiling_weight_bytes: int | None = None
    estimate_step_seconds: float | None = None  # with --efficiency / --mbu / --mfu
    estimate_memory_seconds: float | None = None  # the what-if's: the bytes moved / (bandwidth x MBU), stages summed
    estimate_tokens_per_s: float | None = None
    estimate: StepEstimate | None = None  # calibrated (absent with --ceiling); estimate_* above are --efficiency's


class RooflineResult(Result):
    model: str
    gpu: str
    dtype: str
    kv_dtype: str
    compute_dtype: str
    weight_format: str = ""  # the weights' formats as a label, a mix named as one ("mxfp4 experts + bf16")
    peak_flop_per_s: float
    bandwidth_bytes_per_s: float
    ridge_flop_per_byte: float
    tp: int = 1
    pp: int = 1
    interconnect: str | None = None
    gpu_util: float = DEFAULT_GPU_UTIL
    reserve_bytes: int = 0
    mbu: float | None = None
    mfu: float | None = None
    warnings: list[str] = []
    engine: str | None = None  # the engine the rows' estimates are calibrated for
    estimate_basis: str | None = None
    routed: tuple[int, int] | None = None  # MoE: (experts a layer's ceiling reads: k, the kindest routing's; E)
    rows: list[RooflineRow]  # weight_bytes, kv_bytes and flops per GPU; tokens_per_s for the deployment


def ceiling_routing(spec: ModelSpec) -> tuple[int, int] | None:
    """A MoE model's (experts a layer the ceiling reads, every token routed alike: k; E); None for a dense one or an
    explicit parameter count (step.weight_bytes_read(fewest=True))."""
    return (spec.experts_per_token, spec.experts) if spec.is_moe and not spec.params else None


def at_ceiling(mbu: float, mfu: float) -> bool:
    """Whether MBU and MFU are the ceiling's: every byte at the bandwidth, every FLOP at the peak. The one test of
    it: a ceiling reads the kindest routing's weight bytes (step.weight_bytes_read(fewest=True)), a what-if the
    bytes it moves, and the answer's basis says which it is."""
    return mbu == 1.0 and mfu == 1.0


def stage_seconds(
    gpu: GpuSpec, compute_dtype: str, nbytes: int, flops: int, mbu: float = 1.0, mfu: float = 1.0
) -> tuple[float, float]:
    """(memory, compute) seconds of one GPU's share of a step: bytes / (bandwidth x MBU) and
    FLOPs / (peak x MFU). The ceiling when both utilizations are 1."""
    return nbytes / (gpu.bandwidth_bytes_per_s * mbu), flops / (gpu.peak_flop_per_s(compute_dtype) * mfu)


def _row(
    gpu: GpuSpec,
    compute_dtype: str,
    batch: int,
    seq: int,
    per_stage: list[tuple[int, int, int, int]],
    comm: float,
    fits: bool,
    least: list[int],
    util: tuple[float, float] | None = None,
    prompt: bool = False,
) -> RooflineRow:
    """A step from each stage's (weight bytes, KV bytes, state bytes, FLOPs) on one GPU: the stages
    run one after another, each at max(memory, compute), plus the communication on the critical path.
    A `prompt` over pp > 1 stages is bounded by its busiest stage alone: fed in chunks (vLLM's token budget,
    several requests' prompts), every stage works at once, so the sum would be no bound.

    `least`: each stage's weight bytes under the kindest routing (step.weight_bytes_read(fewest=True)), which
    the ceiling reads, and its intensity counts; the weight bytes of `per_stage` (uniform routing's experts) are
    what the row reports and a what-if (`util`, as MBU counts bytes moved) reads."""
    times = [stage_seconds(gpu, compute_dtype, lw + k + r, f) for lw, (_, k, r, f) in zip(least, per_stage)]
    memory_s, compute_s = sum(m for m, _ in times), sum(c for _, c in times)
    over = max if prompt else sum
    step = over(max(m, c) for m, c in times) + comm
    # Per GPU: the stage that moves the most bytes (all of them when pp is 1).
    top = max(range(len(per_stage)), key=lambda i: sum(per_stage[i][:3]))
    weight, kv, state, flops = per_stage[top]
    row = RooflineRow(
        batch=batch,
        seq=seq,
        weight_bytes=weight,
        kv_bytes=kv,
        state_bytes=state,
        flops=flops,
        arithmetic_intensity=flops / (least[top] + kv + state),  # the ceiling's bytes: under its roofs
        bound="memory" if memory_s >= compute_s else "compute",
        step_seconds=step,
        tokens_per_s=batch / step,
        memory_seconds=memory_s,
        compute_seconds=compute_s,
        comm_seconds=comm,
        fits=fits,
        ceiling_weight_bytes=least[top] if least[top] != weight else None,
    )
    if util is not None:
        est = step
        if not at_ceiling(*util):
            what = [stage_seconds(gpu, compute_dtype, w + k + r, f, *util) for w, k, r, f in per_stage]
            est = over(max(t) for t in what) + comm
            row.estimate_memory_seconds = sum(m for m, _ in what)
        row.estimate_step_seconds, row.estimate_tokens_per_s = est, batch / est
    return row


def decode_row(
    spec: ModelSpec,
    gpu: GpuSpec,
    batch: int,
    seq: int,
    dtype: str | None,
    kv_dtype: str,
    compute_dtype: str,
    steps: list[str] | None = None,
    *,
    dep: Deployment = SINGLE,
    staged: tuple[Stage, ...] | None = None,
    util: tuple[float, float] | None = None,
) -> RooflineRow:
    """One decode step for `batch` sequences that each hold `seq` cached tokens, on `dep`."""
    staged = staged or stages(spec, dep, dtype)
    rest = [
        (kv_bytes(st, batch, seq, kv_dtype), decode_state_bytes(st, batch), stage_decode_flops(st, batch, seq))
        for st in staged
    ]
    per_stage = [(weight_bytes_read(spec, st, batch), *r) for st, r in zip(staged, rest)]
    least = [weight_bytes_read(spec, st, batch, fewest=True) for st in staged]
    comm = comm_seconds(spec, dep, batch, dtype)
    fit = memory_fit(gpu, dep, staged, batch, seq, kv_dtype)
    row = _row(gpu, compute_dtype, batch, seq, per_stage, comm, fit.fits, least, util)
    if steps is not None:
        _explain_decode(steps, spec, gpu, dep, staged, per_stage, row, compute_dtype, fit, dtype, least)
    return row


def prefill_row(
    spec: ModelSpec,
    gpu: GpuSpec,
    batch: int,
    prompt: int,
    dtype: str | None,
    kv_dtype: str,
    compute_dtype: str,
    *,
    dep: Deployment = SINGLE,
    staged: tuple[Stage, ...] | None = None,
    util: tuple[float, float] | None = None,
) -> RooflineRow:
    """The prompt pass: every prompt token through the weights, K/V written once, the all-reduces
    carrying batch x prompt activations."""
    staged = staged or stages(spec, dep, dtype)
    # each sequence's final state written once (none read: a new prompt)
    rest = [
        (kv_bytes(st, batch, prompt, kv_dtype), batch * st.state_bytes, stage_prefill_flops(st, batch, prompt))
        for st in staged
    ]
    per_stage = [(weight_bytes_read(spec, st, batch * prompt), *r) for st, r in zip(staged, rest)]
    least = [weight_bytes_read(spec, st, batch * prompt, fewest=True) for st in staged]
    fit = memory_fit(gpu, dep, staged, batch, prompt, kv_dtype)
    comm = comm_seconds(spec, dep, batch * prompt, dtype)
    return _row(gpu, compute_dtype, batch, prompt, per_stage, comm, fit.fits, least, util, prompt=True)


def _explain_decode(
    steps: list[str],
    spec: ModelSpec,
    gpu: GpuSpec,
    dep: Deployment,
    staged: tuple[Stage, ...],
    per_stage: list[tuple[int, int, int, int]],
    row: RooflineRow,
    compute_dtype: str,
    fit: Fit,
    dtype: str | None,
    least: list[int],
) -> None:
    b, s = row.batch, row.seq
    steps += [f"batch {b:,}, context {s:,}:", f"  {attention_form(spec, 'decode')}"]
    if dep.gpus > 1:
        kv = (
            f"{kv_heads_per_rank(spec.kv_heads, dep.tp)} of {spec.kv_heads} KV heads"
            if not spec.is_mla
            else "the whole MLA latent"
        )
        steps.append(
            f"  per GPU (tp {dep.tp} x pp {dep.pp}): 1/{dep.tp} of the attention, MLP, expert, embedding and LM-head "
            f"matrices, norms and routers whole, {spec.num_heads // dep.tp} query heads and {kv} per rank"
        )
    bw, peak = gpu.bandwidth_bytes_per_s, gpu.peak_flop_per_s(compute_dtype)
    for st, (w, k, r, f), lw in zip(staged, per_stage, least):
        where = (
            f"  stage {st.number} (layers {st.start}-{st.end - 1}) per GPU:"
            if dep.pp > 1
            else "  per GPU:"
            if dep.gpus > 1
            else " "
        )
        m, c = lw + k + r, f
        moe = (
            f" (routed experts: those the batch's tokens are expected to reach; the ceiling reads {lw:,} B, the"
            f" {spec.experts_per_token} a layer that tokens routed alike reach, the fewest any step reads)"
            if lw != w
            else " (routed experts: those the batch's tokens are expected to reach)"
            if ceiling_routing(spec)
            else ""
        )
        state = f"; recurrent state read and written {r:,} B (2 x {b:,} x {st.state_bytes:,} B)" if r else ""
        steps += [
            f"{where} weights read {w:,} B{moe}; KV read {k:,} B ({b:,} sequence{'s' if b > 1 else ''} x {s:,} cached tokens){state}; FLOPs {f:,}",
            f"    max({m:,} B / {bw:,} B/s, {c:,} FLOP / {peak:,.0f} FLOP/s) = "
            f"max({fmt_seconds(m / bw)}, {fmt_seconds(c / peak)}) = {fmt_seconds(max(m / bw, c / peak))}",
        ]
    steps += comm_lines(spec, dep, b, dtype)
    summed = " + ".join(
        fmt_seconds(max(stage_seconds(gpu, compute_dtype, lw + k + r, f))) for lw, (_, k, r, f) in zip(least, per_stage)
    )
    steps += [
        f"  step >= {summed}"
        + (f" + communication {fmt_seconds(row.comm_seconds)}" if row.comm_seconds else "")
        + f" = {fmt_seconds(row.step_seconds)} ({row.bound}-bound, intensity {row.arithmetic_intensity:,.2f} FLOP/B"
        f" against a ridge of {gpu.ridge_flop_per_byte(compute_dtype):,.1f})",
        f"  tokens/s <= {b:,} / {fmt_seconds(row.step_seconds)} = {row.tokens_per_s:,.1f}",
        "  memory: " + fit.message(f"{'fits' if fit.fits else 'DOES NOT FIT'}"),
    ]


def comm_lines(spec: ModelSpec, dep: Deployment, tokens: int, dtype: str | None = None) -> list[str]:
    """--explain lines for the communication of a step over `tokens` tokens in flight."""
    if dep.gpus == 1 or dep.link is None:
        return []
    link, lines = dep.link, []
    message = tokens * spec.hidden_size * activation_bytes(spec, dtype)
    if dep.tp > 1:
        one = allreduce_seconds(message, dep.tp, link)
        count = allreduces_per_step(spec)
        per_layer = (
            f"2 per layer x {spec.num_layers} layers"
            if count == 2 * spec.num_layers
            else f"{count} (one after each mixer and each MLP of the {spec.num_layers} layers)"
        )
        bw = link.group_bandwidth(dep.tp)
        mesh = (
            f", a full mesh: {min(dep.tp - 1, link.mesh_peers)} of its {link.mesh_peers} peer links"
            if link.mesh_peers
            else ""
        )
        lines.append(
            f"  all-reduce ({link.name}, {fmt_rate(bw)} each way{mesh}): "
            f"{per_layer} x (alpha {fmt_seconds(link.latency_s)} + "
            f"2 x {dep.tp - 1}/{dep.tp} x {message:,} B / {fmt_rate(bw)}) "
            f"= {count} x {fmt_seconds(one)} = {fmt_seconds(count * one)}"
        )
    if dep.pp > 1:
        lines.append(
            f"  pipeline sends: {dep.pp - 1} x (alpha + {message:,} B / "
            f"{fmt_rate(link.group_bandwidth(2))}) = {fmt_seconds((dep.pp - 1) * send_seconds(message, link))}"
        )
    return lines


# the warning of rows kvcalc's arithmetic does not fit (an engine's own judgement may replace it: plan/engine_memory)
ROWS_DO_NOT_FIT = "rows do not fit on"


def roofline_report(
    spec: ModelSpec,
    gpu: GpuSpec,
    batches: list[int],
    seqs: list[int],
    dtype: str | None,
    kv_dtype: str,
    steps: list[str] | None = None,
    *,
    dep: Deployment = SINGLE,
    util: tuple[float, float] | None = None,
    engine: str | None = None,
    calibration: Calibration | None = None,
) -> RooflineResult:
    """Decode rows per batch x seq; with `engine`, each row also carries the calibrated estimate (with
    `calibration`'s constants: plan/calibration.constants_for)."""
    weight_dtype = dtype or spec.dtype
    from kvcalc.model.formats import matmul_dtype, weights_label

    compute_dtype = gpu.compute_dtype(matmul_dtype(spec, dtype))
    needs_link(dep, gpu)
    staged = stages(spec, dep, dtype)
    rows = [
        decode_row(spec, gpu, b, s, dtype, kv_dtype, compute_dtype, steps, dep=dep, staged=staged, util=util)
        for s in seqs
        for b in batches
    ]
    basis = None
    if engine is not None:
        from kvcalc.cost.estimate import step_time

        for r in rows:
            t = step_time(
                spec, gpu, dep, engine=engine, decode_batch=r.batch, decode_context=r.seq, dtype=dtype, kv_dtype=kv_dtype,
                staged=staged, calibration=calibration,
            )  # fmt: skip
            r.estimate = StepEstimate(
                step_s=t.estimate_s, tokens_per_s=r.batch / t.estimate_s, interval_s=[t.lo_s, t.hi_s]
            )
            basis = t.basis
    from kvcalc.cost.fabric import node_warnings

    warnings = [w for w in (context_warning(spec, max(seqs)),) if w] + node_warnings(dep, gpu.name)
    bad = [r for r in rows if not r.fits]
    if bad:
        worst = max(bad, key=lambda r: memory_fit(gpu, dep, staged, r.batch, r.seq, kv_dtype).over_bytes)
        fit = memory_fit(gpu, dep, staged, worst.batch, worst.seq, kv_dtype)
        where = f"{dep.tp * dep.pp} x {gpu.name}" if dep.gpus > 1 else f"one {gpu.name}"
        warnings.insert(
            0,
            f"{len(bad):,} of {len(rows):,} {ROWS_DO_NOT_FIT} {where} (fits: NO); the worst, batch {worst.batch:,} "
            f"x {worst.seq:,} tokens, per GPU" + fit.message(""),
        )
    return RooflineResult(
        model=spec.name,
        gpu=gpu.name,
        dtype=weight_dtype,
        kv_dtype=kv_dtype,
        compute_dtype=compute_dtype,
        weight_format=weights_label(spec, dtype),
        peak_flop_per_s=gpu.peak_flop_per_s(compute_dtype),
        bandwidth_bytes_per_s=gpu.bandwidth_bytes_per_s,
        ridge_flop_per_byte=gpu.ridge_flop_per_byte(compute_dtype),
        tp=dep.tp,
        pp=dep.pp,
        interconnect=dep.link.name if dep.link and dep.gpus > 1 else None,
        gpu_util=dep.gpu_util,
        reserve_bytes=dep.reserve_bytes,
        mbu=util[0] if util else None,
        mfu=util[1] if util else None,
        warnings=warnings,
        engine=engine,
        estimate_basis=basis,
        routed=ceiling_routing(spec),
        rows=rows,
    )
