"""Pure end-to-end timing: prefill (TTFT), every decode step as the context grows, and what the cache
saves. Sums over decode steps are closed forms: a step's bytes and FLOPs are linear in the context
between window edges, so the sum of max(memory, compute) over a run of steps is two arithmetic series."""

from fractions import Fraction

from kvcalc.cost.flops import _qk_v_dims, index_flops, prefill_attention_flops, prefill_flops, sparse
from kvcalc.cost.kvcache import bytes_per_token
from kvcalc.cost.params import compute_params
from kvcalc.cost.roofline import at_ceiling, ceiling_routing, comm_lines, decode_row, prefill_row
from kvcalc.cost.step import (
    SINGLE,
    Deployment,
    Stage,
    comm_seconds,
    context_warning,
    decode_state_bytes,
    memory_fit,
    needs_link,
    stages,
    weight_bytes_read,
)
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import LayerKind, LayerRun, ModelSpec
from kvcalc.plan.estimated import Estimate
from kvcalc.results import Result
from kvcalc.units import dtype_bits, fmt_seconds


# NOTE: this command's result models live here, beside the function that returns them, so that
# another command does not define them at start-up; and no `from __future__ import annotations`
# in this module: Pydantic would compile every field's annotation string at import.
class GenerateLesson(Result):
    """What the KV cache saves (THEORY section 1): a lesson, not part of a deployment's answer."""

    flops_uncached: int  # every step recomputes its whole prefix
    concat_positions_copied: int  # growing the cache by concatenation
    prealloc_positions_written: int
    concat_bytes_copied: int
    prealloc_bytes_written: int


class GenerateResult(Result):
    model: str
    gpu: str
    batch: int
    prompt: int
    new: int
    tp: int = 1
    pp: int = 1
    kv_dtype: str = "bf16"  # the cache's element type: --kv-dtype, or the engine's default
    # weights + KV of prompt + new tokens + state + reserve within each GPU's budget, and under a serving engine its
    # pool and scheduler holding the batch at once (plan/engine_memory.py; memory_note then says why not)
    fits: bool = True
    comm_seconds_per_step: float = 0.0
    ttft_s: float
    tpot_s: float  # mean
    tpot_first_s: float
    tpot_last_s: float
    total_s: float
    tokens_per_s: float
    basis: str  # "ceiling" or "estimate (mbu, mfu)"
    mbu: float
    mfu: float
    flops_cached: int
    memory_note: str = ""
    warnings: list[str] = []
    lesson: GenerateLesson | None = None  # with --explain only: what the cache saves, for teaching
    engine: str | None = None  # the engine the estimate is calibrated for
    estimate: Estimate | None = None  # calibrated, beside the ceiling figures above (absent with --ceiling)
    routed: tuple[int, int] | None = None  # MoE: (experts a layer the ceiling reads: k, its tokens routed alike; E)


def forward_flops(spec: ModelSpec, tokens: int) -> int:
    """FLOPs of one full forward pass over `tokens` tokens (no cache): what a cacheless step recomputes."""
    return 2 * compute_params(spec) * tokens + prefill_attention_flops(spec, tokens)


def concat_positions(prompt: int, new: int) -> int:
    """Positions copied when the cache grows by concatenation: every step copies the whole cache,
    (prompt + 1) + ... + (prompt + new); a preallocated buffer writes `new` positions instead."""
    return new * prompt + new * (new + 1) // 2


# --- closed-form sums over a run of contexts a .. b --------------------------------------------


def _series(a: int, b: int) -> int:
    """a + (a + 1) + ... + b."""
    return (a + b) * (b - a + 1) // 2 if b >= a else 0


def _squares(a: int, b: int) -> int:
    def upto(n: int) -> int:
        return n * (n + 1) * (2 * n + 1) // 6

    return upto(b) - upto(a - 1) if b >= a else 0


def sum_held(window: int | None, a: int, b: int) -> int:
    """sum of min(c, window) for c = a .. b (the whole context when window is None)."""
    if window is None or b <= window:
        return _series(a, b)
    if a > window:
        return (b - a + 1) * window
    return _series(a, window) + (b - window) * window


def sum_causal_pairs(window: int | None, a: int, b: int) -> int:
    """sum of causal_pairs(c, window) for c = a .. b: c(c + 1)/2 up to the window, then linear."""
    edge = b if window is None else min(b, window)
    total = (_squares(a, edge) + _series(a, edge)) // 2 if edge >= a else 0
    if window is not None and b > window:
        lo = max(a, window + 1)
        n = b - lo + 1
        total += n * window * (window + 1) // 2 + window * (_series(lo, b) - n * window)
    return total


def _sum_max(b0: Fraction, b1: Fraction, f0: Fraction, f1: Fraction, a: int, b: int, mem: Fraction, flop: Fraction):  # noqa: ANN202
    """sum over c = a .. b of max((b0 + b1 c) / mem, (f0 + f1 c) / flop), exactly: the difference of
    two linear functions changes sign at most once, so the memory-bound steps are one run at an end."""
    if b < a:
        return Fraction(0)
    d0, d1 = b0 * flop - f0 * mem, b1 * flop - f1 * mem  # d0 + d1 c >= 0: memory-bound at c
    if d1 == 0:
        mlo, mhi = (a, b) if d0 >= 0 else (b + 1, b)
    elif d1 > 0:
        mlo, mhi = max(a, _ceil(-d0 / d1)), b
    else:
        mlo, mhi = a, min(b, _floor(-d0 / d1))

    def line(x0: Fraction, x1: Fraction, p: int, q: int) -> Fraction:
        return (q - p + 1) * x0 + x1 * _series(p, q) if q >= p else Fraction(0)

    if mlo > mhi:
        return line(f0, f1, a, b) / flop
    compute = line(f0, f1, a, mlo - 1) + line(f0, f1, mhi + 1, b)
    return line(b0, b1, mlo, mhi) / mem + compute / flop


def _ceil(x: Fraction) -> int:
    return -((-x.numerator) // x.denominator)


def _floor(x: Fraction) -> int:
    return x.numerator // x.denominator


def sum_chunked_pairs(chunk: int, a: int, b: int) -> int:
    """sum of chunked_pairs(c, chunk) for c = a .. b: whole cycles of the chunk, then a partial one."""

    def upto(n: int) -> int:  # c = 0 .. n; c = kC + r contributes k C(C + 1)/2 + r(r + 1)/2
        cycles, rest = divmod(n + 1, chunk)
        tri = chunk * (chunk + 1) // 2
        total = chunk * tri * cycles * (cycles - 1) // 2 + cycles * (chunk - 1) * chunk * (chunk + 1) // 6
        return total + rest * cycles * tri + (rest - 1) * rest * (rest + 1) // 6

    return upto(b) - upto(a - 1) if b >= a else 0


def _piece(run: LayerRun, end: int) -> tuple[Fraction, int, Fraction, int]:
    """(held, its slope, attended keys, their slope) of one layer over a run of contexts ending at
    `end` that does not cross its window: a layer's holding and keys are linear in the context there."""
    kind, w = run.kind, run.window_tokens
    if kind.windowed and end > w:
        # Past the window a sliding layer attends to W keys, a chunked one to (C + 1)/2 on average.
        return Fraction(w), 0, Fraction(w) if kind == LayerKind.SLIDING else Fraction(w + 1, 2), 0
    if kind == LayerKind.CROSS and run.cross_tokens is not None:
        return Fraction(run.cross_tokens), 0, Fraction(run.cross_tokens), 0
    if kind == LayerKind.STATELESS:
        return Fraction(0), 0, Fraction(0), 0
    return Fraction(0), 1, Fraction(0), 1


def decode_sum(
    spec: ModelSpec,
    gpu: GpuSpec,
    dep: Deployment,
    staged: tuple[Stage, ...],
    *,
    batch: int,
    lo: int,
    hi: int,
    dtype: str | None,
    kv_dtype: str,
    compute_dtype: str,
    mbu: float = 1.0,
    mfu: float = 1.0,
) -> float:
    """Seconds of the decode steps over contexts lo .. hi: per stage, max(bytes / bandwidth, FLOPs /
    peak) summed in closed form between window edges, plus each step's communication."""
    if hi < lo:
        return 0.0
    mem = Fraction(gpu.bandwidth_bytes_per_s * mbu)
    flop = Fraction(gpu.peak_flop_per_s(compute_dtype) * mfu)
    per_element = dtype_bits(kv_dtype) / 8
    total = Fraction(0)
    for st in staged:
        weights = weight_bytes_read(spec, st, batch, fewest=at_ceiling(mbu, mfu))  # a ceiling: the kindest routing
        edges = sorted({w for t in st.terms for w in (t.window, t.topk) if w is not None and lo <= w < hi})
        start = lo
        own = -(-batch // st.kv_ranks)  # DP attention: a rank reads only its own sequences' KV
        for end in [*edges, hi]:
            b0, b1 = Fraction(weights + decode_state_bytes(st, batch)), Fraction(0)
            f0, f1 = Fraction(2 * st.compute_params), Fraction(0)
            for t in st.terms:
                h0, h1, k0, k1 = _piece(t.run, end)
                # DeepSeek Sparse Attention: past top-k the latent read and the keys stop growing; the
                # indexer reads and scores every held token.
                r0, r1, k0, k1 = (t.topk, 0, t.topk, 0) if t.topk is not None and end > t.topk else (h0, h1, k0, k1)
                b0 += own * t.layers * (t.read_elements * r0 * per_element + t.index_bytes * h0)
                b1 += own * t.layers * (t.read_elements * r1 * per_element + t.index_bytes * h1)
                f0 += t.layers * (t.decode_flops * k0 + t.index_flops * h0)
                f1 += t.layers * (t.decode_flops * k1 + t.index_flops * h1)
            total += _sum_max(b0, b1, batch * f0, batch * f1, start, end, mem, flop)
            start = end + 1
    return float(total) + (hi - lo + 1) * comm_seconds(spec, dep, batch, dtype)


def _sum_keys(run: LayerRun, a: int, b: int) -> Fraction:
    """Keys one layer attends to, summed over decode contexts a .. b."""
    if b < a:
        return Fraction(0)
    w = run.window_tokens
    if run.kind == LayerKind.CHUNKED:
        past = max(0, b - max(a, w + 1) + 1)
        return _series(a, min(b, w)) + past * Fraction(w + 1, 2)
    if run.kind == LayerKind.SLIDING:
        return Fraction(sum_held(w, a, b))
    if run.kind == LayerKind.CROSS and run.cross_tokens is not None:
        return Fraction((b - a + 1) * run.cross_tokens)
    return Fraction(_series(a, b))


def _sum_pairs(run: LayerRun, a: int, b: int) -> int:
    """Query-key pairs of one layer's prompt pass, summed over prompt lengths a .. b (layer_pairs)."""
    if run.kind == LayerKind.CHUNKED:
        return sum_chunked_pairs(run.window_tokens, a, b)
    if run.kind == LayerKind.SLIDING:
        return sum_causal_pairs(run.window_tokens, a, b)
    if run.kind == LayerKind.CROSS:
        fixed = run.cross_tokens
        return _squares(a, b) if fixed is None else fixed * _series(a, b)
    return sum_causal_pairs(None, a, b)


def _attention_sums(spec: ModelSpec, lo: int, hi: int) -> tuple[int, int]:
    """(sum of decode attention FLOPs, sum of prefill attention FLOPs) over contexts lo .. hi, as
    decode_attention_flops and prefill_attention_flops count them (MLA absorbed in decode)."""
    decode, prefill = Fraction(0), 0
    for run, n in spec.layer_groups():
        if not run.kind.attends:
            continue
        qk, v = _qk_v_dims(spec, run=run)
        dqk, dv = _qk_v_dims(spec, absorbed=True, run=run)
        if sparse(spec, run) and spec.index_topk is not None:
            # DeepSeek Sparse Attention: top-k keys per query (a window's count) + the indexer's scoring of all
            index = 0 if run.index_shared else index_flops(spec)
            keys, pairs = Fraction(sum_held(spec.index_topk, lo, hi)), sum_causal_pairs(spec.index_topk, lo, hi)
            decode += n * index * _series(lo, hi)
            prefill += n * index * sum_causal_pairs(None, lo, hi)
        else:
            keys, pairs = _sum_keys(run, lo, hi), _sum_pairs(run, lo, hi)
        decode += n * 2 * spec.num_heads * (dqk + dv) * keys
        prefill += n * 2 * spec.num_heads * (qk + v) * pairs
    return int(decode), prefill


def generate_report(
    spec: ModelSpec,
    gpu: GpuSpec,
    *,
    batch: int,
    prompt: int,
    new: int,
    dtype: str | None,
    kv_dtype: str,
    compute_dtype: str,
    mbu: float = 1.0,
    mfu: float = 1.0,
    steps: list[str] | None = None,
    dep: Deployment = SINGLE,
    engine: str | None = None,
    deployed_on: str | None = None,
    ask_pool: bool = True,
    engine_version: str | None = None,
) -> GenerateResult:
    """Prefill produces the first token; each of the other new - 1 tokens is one decode step over a
    context of prompt + t tokens (t = 1 .. new - 1). `engine`: the engine whose estimate to add (None: the
    ceiling alone); `deployed_on`: the engine named, estimate or not, warned of where the GPU has no build of it,
    and (ask_pool) asked whether it starts and holds the batch (plan/engine_memory.py; `engine_version`: SGLang's
    release, as plan/serve_launch.sglang_release checked it)."""
    needs_link(dep, gpu)
    staged = stages(spec, dep, dtype)
    util = (mbu, mfu)
    pre = prefill_row(spec, gpu, batch, prompt, dtype, kv_dtype, compute_dtype, dep=dep, staged=staged, util=util)
    ttft = pre.estimate_step_seconds or pre.step_seconds
    lo, hi = prompt + 1, prompt + new - 1
    n_steps = max(new - 1, 0)
    decode = decode_sum(
        spec, gpu, dep, staged, batch=batch, lo=lo, hi=hi, dtype=dtype, kv_dtype=kv_dtype,
        compute_dtype=compute_dtype, mbu=mbu, mfu=mfu,
    )  # fmt: skip

    def row(context: int):  # noqa: ANN202
        return decode_row(spec, gpu, batch, context, dtype, kv_dtype, compute_dtype, dep=dep, staged=staged, util=util)

    rows = (row(lo), row(hi)) if n_steps else ()
    first, last = ((r.estimate_step_seconds or r.step_seconds) for r in rows) if rows else (0.0, 0.0)
    total = ttft + decode
    per_token = 2 * compute_params(spec)
    decode_attention, _ = _attention_sums(spec, lo, hi)
    _, prefill_attention = _attention_sums(spec, prompt, prompt + new - 1)
    # The cached run's prompt pass charges the LM head once (prefill_flops); each decode step once more.
    flops_cached = batch * (prefill_flops(spec, prompt) + n_steps * per_token + decode_attention)
    # Without a cache, token t (t = 0 .. new - 1) needs a full forward over all prompt + t tokens.
    flops_uncached = batch * (per_token * (new * prompt + new * (new - 1) // 2) + prefill_attention)
    basis = "ceiling" if at_ceiling(mbu, mfu) else f"estimate (MBU {mbu:g}, MFU {mfu:g})"
    tokens_per_s = batch * new / total
    comm = comm_seconds(spec, dep, batch, dtype)
    fit = memory_fit(gpu, dep, staged, batch, prompt + new, kv_dtype)
    from kvcalc.plan.engine_memory import engine_refusal, llamacpp_fit  # llama.cpp: judged by its own buffers

    lc = llamacpp_fit(spec, gpu, dep, engine, dtype=dtype, kv_dtype=kv_dtype, batch=batch, tokens=prompt + new)
    memory = lc[1] if lc else fit.message("fits" if fit.fits else "DOES NOT FIT")
    if steps is not None:
        _explain(steps, basis, (mbu, mfu), comm_lines(spec, dep, batch, dtype), batch, prompt, new, pre, ttft, rows,
                 decode, total, tokens_per_s, comm, fit, memory)  # fmt: skip
    estimate = None
    if engine is not None:
        from kvcalc.plan.estimated import static_estimate

        estimate = static_estimate(
            spec, gpu, dep, batch=batch, prompt=prompt, new=new, dtype=dtype, kv_dtype=kv_dtype, engine=engine
        )
    lesson = None
    if steps is not None and basis == "ceiling":  # the same lesson at any efficiency: told once
        concat = concat_positions(prompt, new)
        per_position = batch * bytes_per_token(spec, kv_dtype)
        lesson = GenerateLesson(
            flops_uncached=flops_uncached,
            concat_positions_copied=concat,
            prealloc_positions_written=new,
            concat_bytes_copied=concat * per_position,
            prealloc_bytes_written=new * per_position,
        )
        steps += _lesson_lines(flops_cached, lesson)
    from kvcalc.plan.calibration import refusal_warnings

    pool_engine = (deployed_on or engine) if ask_pool else None
    held = engine_refusal(
        spec, gpu, dep, pool_engine, dtype=dtype, kv_dtype=kv_dtype, batch=batch, prompt=prompt, new=new,
        release=engine_version,
    )  # fmt: skip
    return GenerateResult(
        engine=engine,
        estimate=estimate,
        model=spec.name,
        gpu=gpu.name,
        batch=batch,
        prompt=prompt,
        new=new,
        tp=dep.tp,
        pp=dep.pp,
        kv_dtype=kv_dtype,
        fits=(lc[0] if lc else fit.fits) and held is None,
        comm_seconds_per_step=comm,
        ttft_s=ttft,
        tpot_s=decode / n_steps if n_steps else 0.0,
        tpot_first_s=first,
        tpot_last_s=last,
        total_s=total,
        tokens_per_s=tokens_per_s,
        basis=basis,
        mbu=mbu,
        mfu=mfu,
        flops_cached=flops_cached,
        routed=ceiling_routing(spec),
        lesson=lesson,
        memory_note=held or memory,
        warnings=[w for w in (context_warning(spec, prompt + new),) if w]
        + _node_warnings(dep, gpu.name)
        + refusal_warnings(deployed_on or engine, gpu.name, spec, dtype, kv_dtype),
    )


def _lesson_lines(flops_cached: int, lesson: GenerateLesson) -> list[str]:
    from kvcalc.units import fmt_bytes, fmt_flop_count

    def size(n: int) -> str:
        return f"{fmt_bytes(n)}, {n:,} B"

    return [
        f"[lesson] FLOPs with a KV cache {fmt_flop_count(flops_cached)}, without one (every step "
        f"recomputes the prefix) {fmt_flop_count(lesson.flops_uncached)}: {lesson.flops_uncached / flops_cached:,.1f}x",
        f"[lesson] growing the cache by concatenation copies {lesson.concat_positions_copied:,} positions "
        f"({size(lesson.concat_bytes_copied)}); a preallocated buffer writes {lesson.prealloc_positions_written:,} "
        f"({size(lesson.prealloc_bytes_written)}): "
        f"{lesson.concat_positions_copied / lesson.prealloc_positions_written:,.1f}x",
    ]


def _explain(
    steps, basis, util, comm_lines_for, batch, prompt, new, pre, ttft, rows, decode, total, tokens_per_s, comm, fit, memory
):  # noqa: ANN001, ANN202  # fmt: skip
    n = max(new - 1, 0)
    mbu, mfu = util

    def terms(r, what: str, prompt: bool = False) -> str:  # noqa: ANN001
        ceiling = at_ceiling(*util)  # a MoE's bytes then its tokens routed alike; a what-if's, the bytes moved
        nbytes = ((ceiling and r.ceiling_weight_bytes) or r.weight_bytes) + r.kv_bytes + r.state_bytes
        mem = fmt_seconds(r.memory_seconds if ceiling else r.estimate_memory_seconds)
        comp = fmt_seconds(r.compute_seconds / mfu)
        if fit.stages > 1:
            # Decode stages run one after another (each stage's max, summed); a prompt fed in chunks keeps
            # every stage busy at once, so its bound is the busiest stage's (memory and compute shown summed).
            how = "the busiest" if prompt else "sum over"
            return f"{how} of {fit.stages} stages of max(bytes / (bandwidth x {mbu:g}), FLOPs / (peak x {mfu:g})); memory {mem}, compute {comp} in all"
        return f"max({nbytes:,} B / (bandwidth x {mbu:g}) = {mem}, {r.flops:,} FLOPs{what} / (peak x {mfu:g}) = {comp})"

    comm_text = f" + communication {fmt_seconds(pre.comm_seconds)}" if pre.comm_seconds else ""
    steps.append(
        f"[{basis}] prefill of {batch:,} x {prompt:,} tokens, per GPU: "
        + terms(pre, " (every prompt token through the layers, the LM head for the last one only)", prompt=True)
        + f"{comm_text}: TTFT = {fmt_seconds(ttft)}"
    )
    steps += [f"[{basis}] per decode step: " + line.strip() for line in comm_lines_for]
    for label, r in zip(("first", "last"), rows):
        step = r.estimate_step_seconds or r.step_seconds
        steps.append(
            f"[{basis}] {label} decode step (context {r.seq:,}): "
            + terms(r, "")
            + (f" + communication {fmt_seconds(comm)}" if comm else "")
            + f" = {fmt_seconds(step)}"
        )
    steps += [
        f"[{basis}] {n:,} decode steps over contexts {prompt + 1:,} .. {prompt + new - 1:,}: sum {fmt_seconds(decode)} "
        "(closed form: bytes and FLOPs grow linearly with the context between window edges, so the memory-bound and "
        "compute-bound runs of steps are arithmetic series)",
        f"[{basis}] memory at {prompt + new:,} tokens: " + memory,
        f"[{basis}] total = {fmt_seconds(ttft)} + {fmt_seconds(decode)} = {fmt_seconds(total)}; "
        f"tokens/s = {batch:,} x {new:,} / {fmt_seconds(total)} = {tokens_per_s:,.1f}",
    ]


def _node_warnings(dep, gpu_name: str) -> list[str]:  # noqa: ANN001
    from kvcalc.cost.fabric import node_warnings

    return node_warnings(dep, gpu_name)
