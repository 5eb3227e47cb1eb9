"""Pure fitting of the estimate's constants to measured serving figures, and the figures a setup is
predicted to show: TTFT, TPOT, total time and output tokens/s of a static batch or of closed-loop
concurrency, from the step estimate (cost/estimate.py).

Used by scripts/calibrate.py (the shipped fit), benchmarks/speed_accuracy.py (leave-one-source-out
errors) and `kvcalc calibrate` (a user's own points). No file is read here.

Closed-loop concurrency C (each client sends its next request when the last ends) uses a
steady-state closed form, not a simulation: a mean decode step carries the C decoding sequences and
the prompt tokens that arrive per step on average (C x prompt / new, chunked prefill as vLLM, SGLang
and TensorRT-LLM run it); a request's TTFT is one such step carrying its own prompt, plus half a
step of waiting, plus a fitted share (`ttft_wave`) of the prefill of all C prompts at once: the
benchmark's first wave, whose queueing the mean TTFT includes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from kvcalc.cost.estimate import StepFeatures, features, time_of
from kvcalc.cost.step import Deployment, stages
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import ModelSpec

METRICS = ("tpot_ms", "ttft_ms", "output_tok_s_total", "e2e_latency_s")


class Setup(NamedTuple):
    """One measured configuration: static `batch` or closed-loop `concurrency` (one of them)."""

    batch: int | None
    concurrency: int | None
    prompt: int
    new: int


class SetupFeatures(NamedTuple):
    setup: Setup
    decode: StepFeatures  # a mean decode step (closed loop: with the prompt tokens arriving per step)
    first: StepFeatures  # the step that yields a request's first token
    wave: StepFeatures | None  # closed loop: all C prompts at once


def setup_features(
    spec: ModelSpec,
    gpu: GpuSpec,
    dep: Deployment,
    setup: Setup,
    dtype: str | None,
    kv_dtype: str,
) -> SetupFeatures:
    """The steps whose times make a setup's figures, computed once so a fit re-times them cheaply."""
    staged = stages(spec, dep, dtype)
    p, n = setup.prompt, max(1, setup.new)
    ctx = p + n // 2

    def f(**kw: object) -> StepFeatures:
        return features(spec, gpu, dep, dtype=dtype, kv_dtype=kv_dtype, staged=staged, **kw)  # type: ignore[arg-type]

    if setup.concurrency is None:
        b = setup.batch or 1
        return SetupFeatures(setup, f(decode_contexts=[ctx] * b), f(prefill_tokens=max(1, b * p), prefill_seqs=b), None)
    c = setup.concurrency
    arriving = (c * p) // n  # prompt tokens per decode step in steady state
    decode = f(decode_contexts=[ctx] * c, prefill_tokens=arriving, prefill_seqs=max(1, -(-c // n)))
    first = f(decode_contexts=[ctx] * max(0, c - 1), prefill_tokens=max(1, p + arriving), prefill_seqs=1 + c // n)
    wave = f(prefill_tokens=max(1, c * p), prefill_seqs=c) if c > 1 else None
    return SetupFeatures(setup, decode, first, wave)


class Figures(NamedTuple):
    ttft_s: float
    tpot_s: float
    total_s: float  # a request's (closed loop) or the whole batch's (static) time to its last token
    tokens_per_s: float  # output tokens of all sequences / total_s


def figures(sf: SetupFeatures, time: Callable[[StepFeatures], float], c: Mapping[str, float], engine: str) -> Figures:
    """The setup's figures with each step timed by `time` (time_of with constants, or the ceiling)."""
    s = sf.setup
    n = max(1, s.new)
    tpot = time(sf.decode)
    ttft = time(sf.first)
    users = s.concurrency or s.batch or 1
    if sf.wave is not None:
        ttft += 0.5 * tpot + c.get(f"ttft_wave.{engine}", c.get("ttft_wave", 0.0)) * time(sf.wave)
    total = ttft + (n - 1) * tpot
    return Figures(ttft, tpot, total, users * n / total)


def predict(sf: SetupFeatures, metric: str, c: Mapping[str, float], engine: str) -> float:
    """A setup's predicted figure in the metric's unit (ms, tokens/s or s)."""
    fig = figures(sf, lambda f: time_of(f, c, engine), c, engine)
    return _in_unit(fig, metric)


def ceiling(sf: SetupFeatures, metric: str) -> float:
    """The same figure with every step at its ceiling and no queueing (the bound)."""
    fig = figures(sf, lambda f: f.ceiling_s, {}, "")
    return _in_unit(fig, metric)


def _in_unit(fig: Figures, metric: str) -> float:
    return {
        "tpot_ms": fig.tpot_s * 1000,
        "ttft_ms": fig.ttft_s * 1000,
        "output_tok_s_total": fig.tokens_per_s,
        "e2e_latency_s": fig.total_s,
    }[metric]


class Point(NamedTuple):
    sf: SetupFeatures
    engine: str
    metric: str
    value: float
    weight: float = 1.0
    source: str = ""


def log_error(p: Point, c: Mapping[str, float]) -> float:
    """log(predicted / measured): 0 is exact; the median of |.| is the fit's loss."""
    return math.log(predict(p.sf, p.metric, c, p.engine) / p.value)


def loss(points: Sequence[Point], c: Mapping[str, float]) -> float:
    return sum(p.weight * abs(log_error(p, c)) for p in points)


# NOTE: efficiencies are fractions of a rated figure; they cannot pass 1 (time_of clamps them).
_CAPPED = ("bw_eff", "kv_eff", "mfu", "ar_bw_eff")


def fit(
    points: Sequence[Point],
    start: Mapping[str, float],
    names: Sequence[str],
    sweeps: int = 6,
) -> dict[str, float]:
    """Coordinate descent in log space on the weighted sum of |log error| (a weighted-median fit,
    robust to a few odd points): each constant in turn is scaled by the best of a few factors, the
    factors narrowing each sweep. Deterministic; constants not in `names` stay as given."""
    c = dict(start)
    for name in names:
        c.setdefault(name, _base(c, name))
    best = loss(points, c)
    for sweep in range(sweeps):
        step = 2.0 / (1 + sweep)
        for name in names:
            here = c[name]
            for k in (-1.0, -0.5, 0.5, 1.0):
                trial = here * math.exp(k * step * 0.7)
                if name.split(".")[0] in _CAPPED:
                    trial = min(trial, 1.0)
                if name.startswith("ttft_wave") and here == 0:
                    trial = 0.05 * (1 + k)
                c[name] = trial
                v = loss(points, c)
                if v < best - 1e-12:
                    best, here = v, trial
            c[name] = here
    return c


def _base(c: Mapping[str, float], name: str) -> float:
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        v = c.get(".".join(parts[:i]))
        if v is not None:
            return v
    return 0.0


def weighted_quantile(values: Sequence[float], weights: Sequence[float], q: float) -> float:
    pairs = sorted(zip(values, weights))
    total = sum(w for _, w in pairs)
    acc = 0.0
    for v, w in pairs:
        acc += w
        if acc >= q * total:
            return v
    return pairs[-1][0]


def interval(points: Sequence[Point], c: Mapping[str, float]) -> dict[str, float]:
    """The 80% interval as factors on the estimate, from the weighted 10th and 90th percentiles of
    measured / estimated, for decode-step figures (TPOT, throughput) and first-token figures (TTFT)."""
    out = {}
    for phase, metrics in (("decode", ("tpot_ms", "output_tok_s_total", "e2e_latency_s")), ("prefill", ("ttft_ms",))):
        sel = [p for p in points if p.metric in metrics]
        if not sel:
            continue
        # measured / estimated as a time: throughput inverts
        r = [-log_error(p, c) * (-1 if p.metric == "output_tok_s_total" else 1) for p in sel]
        w = [p.weight for p in sel]
        out[f"interval.{phase}.lo"] = min(1.0, math.exp(weighted_quantile(r, w, 0.1)))
        out[f"interval.{phase}.hi"] = max(1.0, math.exp(weighted_quantile(r, w, 0.9)))
    return out


def median_abs_error(points: Sequence[Point], c: Mapping[str, float]) -> float:
    """Median |predicted / measured - 1| (unweighted), as a fraction."""
    errs = sorted(abs(math.exp(log_error(p, c)) - 1) for p in points)
    return errs[len(errs) // 2] if errs else float("nan")
