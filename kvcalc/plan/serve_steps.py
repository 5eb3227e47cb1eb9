"""One engine step of the serving simulation timed by cost/estimate.py, fast: the decoding sequences
are given as a count and a context sum (each holding c or c + 1 tokens), so a step of 256 sequences
costs two context evaluations, not 256.

The figures are exactly estimate.step_time's for the list [c] * (n - r) + [c + 1] * r: the step's
bytes and FLOPs are sums over the sequences (tests/test_serve.py checks the two agree)."""

from __future__ import annotations

from collections.abc import Callable

from kvcalc.cost.constants import ConstantsMemo
from kvcalc.cost.estimate import ENGINES, StepFeatures, StepTime, features, layout_fields, stage_bound, timed
from kvcalc.cost.shard import link_for
from kvcalc.cost.step import (
    Deployment,
    Stage,
    comm_seconds,
    decode_state_bytes,
    dequant_share,
    pipelined,
    stage_decode_flops,
    weight_bytes_read,
)
from kvcalc.errors import UsageError
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import ModelSpec
from kvcalc.units import elements_to_bytes


def uniform_step_time(
    spec: ModelSpec,
    gpu: GpuSpec,
    dep: Deployment,
    *,
    engine: str,
    decodes: int,
    context_sum: int,
    prefill_tokens: int,
    prefill_context: int,
    prefill_seqs: int,
    dtype: str | None,
    kv_dtype: str,
    staged: tuple[Stage, ...],
    constants: tuple[dict[str, float], str] | None = None,
    base: StepFeatures | None = None,
    comm: Callable[[int], float] | None = None,
    memo: ConstantsMemo | None = None,
) -> StepTime:
    """step_time for `decodes` sequences whose contexts sum to `context_sum`, spread evenly.
    `constants` (calibration.constants_for), `base` (prompt_features), `comm` (step.comm_seconds
    by the step's tokens) and `memo` (estimate.time_of's, for those constants) may be passed in when timing
    many steps of one setup."""
    from kvcalc.plan.calibration import constants_for

    if engine not in ENGINES:
        raise UsageError(f"unknown engine '{engine}'", hint=f"one of {', '.join(ENGINES)}")
    if base is None:
        base = prompt_features(spec, gpu, dep, prefill_tokens, prefill_context, prefill_seqs, dtype, kv_dtype, staged)
    n = decodes
    c, r = divmod(context_sum, n) if n else (0, 0)
    tokens = n + prefill_tokens
    rows, ideal = [], []
    for st, (_, kv, state, flops, layers, attn, moe) in zip(staged, base.stage_bytes):
        w = weight_bytes_read(spec, st, tokens)
        if n:
            short, long = -(-(n - r) // st.kv_ranks), -(-r // st.kv_ranks)
            elements = index = 0
            for t in st.terms:
                (e0, i0), (e1, i1) = t.reads(c), t.reads(c + 1)
                elements += t.layers * (short * e0 + long * e1)
                index += t.layers * (short * i0 + long * i1)
            kv += elements_to_bytes(elements, kv_dtype) + index
            state += decode_state_bytes(st, n)
            # NOTE: per context, as features() pairs them: expert parallelism's imbalance is not linear in the batch
            flops += (stage_decode_flops(st, n - r, c) if n - r else 0) + (stage_decode_flops(st, r, c + 1) if r else 0)
        rows.append((w, kv, state, flops, layers, attn, moe))
        ideal.append(stage_bound(spec, st, tokens, kv, state, flops, base.bandwidth, base.peak))
    link = dep.link or (link_for(gpu) if dep.gpus > 1 else None)
    pseqs = max(1, prefill_seqs) if prefill_tokens else 0
    f = base._replace(
        stage_bytes=tuple(rows),
        dequant=dequant_share(spec, gpu, staged, tokens),
        **layout_fields(spec, dep, link, tokens, n, pseqs, dtype),
        ceiling_s=pipelined(ideal, 1, bool(prefill_tokens), bound=True)
        + (comm(tokens) if comm else comm_seconds(spec, dep, tokens, dtype)),
    )
    return timed(f, constants or constants_for(gpu, engine), engine, memo if constants else None)


def prompt_features(
    spec: ModelSpec,
    gpu: GpuSpec,
    dep: Deployment,
    prefill_tokens: int,
    prefill_context: int,
    prefill_seqs: int,
    dtype: str | None,
    kv_dtype: str,
    staged: tuple[Stage, ...],
) -> StepFeatures:
    """The prompt part of a step (and the per-stage counts) as features() gives them without decodes."""
    return features(
        spec, gpu, dep, prefill_tokens=prefill_tokens, prefill_context=prefill_context,
        prefill_seqs=prefill_seqs, dtype=dtype, kv_dtype=kv_dtype, staged=staged,
    )  # fmt: skip
