"""Pure fitting of the estimate's constants to measured serving figures, and the figures a setup is
predicted to show: TTFT, TPOT, total time and output tokens/s of a static batch or of closed-loop
concurrency, from the step estimate (cost/estimate.py). Used by scripts/calibrate.py (the shipped fit),
benchmarks/speed_accuracy.py (leave-one-source-out errors) and `kvcalc calibrate`. No file is read here.

Closed-loop concurrency C (each client sends its next request when the last ends) is fitted as
`generate --concurrency` prints it: the serving simulation's schedule as weighted steps (a WeightedRun,
built by plan/serve_fit.py), each figure a weighted sum of step times. The planner, which weighs too many
options to simulate each, uses a steady-state closed form instead (setup_features): a token of each request
takes a decode step of the C sequences plus the prefill of the C / new prompts that arrive per step on
average; a request's TTFT is its own prompt pass, plus half a step of waiting, plus queueing behind the
other arriving prompts: `ttft_queue` x sqrt(C / new) prompt passes (an empirical form, fitted per engine).
The ceiling of the same figures is the bare steps: no arriving prompts, no queueing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import NamedTuple

from kvcalc.cost.constants import ConstantsMemo
from kvcalc.cost.estimate import StepFeatures, expert_layers, features, time_of
from kvcalc.cost.step import Deployment, stages
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import ModelSpec

METRICS = ("tpot_ms", "ttft_ms", "output_tok_s_total", "e2e_latency_s")
INTERVAL_PHASES = ("decode", "prefill", "served")  # each figure kind its own interval (interval_phase)


class Setup(NamedTuple):
    """One measured configuration: static `batch` or closed-loop `concurrency` (one of them)."""

    batch: int | None
    concurrency: int | None
    prompt: int
    new: int
    range_ratio: float = 1.0  # closed loop: request lengths uniform in [int(ratio x L), L] (plan/serve_load.lengths)
    launch: tuple[tuple[str, int], ...] = ()  # closed loop: the limits its launch flags set (plan/serve.Limits names)


class WeightedRun(NamedTuple):
    """A closed-loop run as the serving simulation schedules it (plan/serve_fit.py): each figure is a
    weighted sum of step times, e.g. mean TTFT = sum(ttft[i] x time(steps[i]))."""

    steps: tuple[StepFeatures, ...]
    ttft: tuple[float, ...]  # mean TTFT
    tpot: tuple[float, ...]  # mean over requests of (finish - first token) / (new - 1)
    total: tuple[float, ...]  # mean request latency
    duration: tuple[float, ...]  # the whole run (steps alike in each group)
    tokens: int  # output tokens of every request
    rate_bound: float | None = None  # tokens/s no schedule of the run beats (plan/serve_bound.tokens_per_s_bound)


class SetupFeatures(NamedTuple):
    setup: Setup
    decode: StepFeatures  # a decode step of every sequence (one micro-batch of them with pp > 1);
    # a simulated run's: its decode steps alone at their TPOT-weighted mean batch and context (the TPOT bound)
    first: StepFeatures  # the prompt pass that yields a request's first token
    prompts_per_step: float  # closed loop: prompts arriving per decode step (C / new)
    run: WeightedRun | None = None  # closed loop through the simulation: figures are its weighted sums
    # a simulated run's decode steps in its TPOT, per decode step a request makes: 1, more where a preempted
    # request waits out the others' steps (the TPOT bound is `decode` times it)
    decode_weight: float = 1.0


def setup_features(
    spec: ModelSpec, gpu: GpuSpec, dep: Deployment, setup: Setup, dtype: str | None, kv_dtype: str,
    chunk: int = 8192, scores_ubatch: int = 0,
) -> SetupFeatures:  # fmt: skip
    """The steps whose times make a setup's figures, computed once so a fit re-times them cheaply.
    With pp > 1 decode keeps min(pp, sequences) micro-batches in flight and a prompt goes through the
    pipeline in chunks of `chunk` tokens (llama.cpp's n_ubatch 512; 8192 for the others).
    `scores_ubatch`: the prompt's attention scores go through memory (estimate.features)."""
    staged = stages(spec, dep, dtype)
    p, n = setup.prompt, max(1, setup.new)
    ctx = p + n // 2

    def f(**kw: object) -> StepFeatures:
        return features(spec, gpu, dep, dtype=dtype, kv_dtype=kv_dtype, staged=staged, **kw)  # type: ignore[arg-type]

    def decode(users: int) -> StepFeatures:
        m = min(dep.pp, users)
        return f(decode_batch=-(-users // m), decode_context=ctx, microbatches=m)

    def prompt(tokens: int, seqs: int) -> StepFeatures:
        return f(
            prefill_tokens=max(1, tokens),
            prefill_seqs=seqs,
            microbatches=-(-tokens // chunk),
            scores_ubatch=scores_ubatch,
        )

    c = setup.concurrency or 1
    if setup.concurrency is None or c == 1:
        # NOTE: one client alone is a batch of 1: its prompt never shares a step with a decode.
        b = setup.batch or 1
        return SetupFeatures(setup, decode(b), prompt(b * p, b), 0.0)
    # NOTE: the prompts that arrive while a request decodes (c of them per `new` steps) are charged
    # as their own prefill passes amortized over the steps, not as a few prompt tokens in every step
    # (which would count a MoE's expert reads as if each step touched more experts).
    return SetupFeatures(setup, decode(c), prompt(p, 1), c / n)


class Figures(NamedTuple):
    ttft_s: float
    tpot_s: float
    total_s: float  # a request's (closed loop) or the whole batch's (static) time to its last token
    tokens_per_s: float  # output tokens of all sequences / total_s


def figures(sf: SetupFeatures, time: Callable[[StepFeatures], float], c: Mapping[str, float], engine: str) -> Figures:
    """The setup's figures with each step timed by `time` (time_of with constants, or the ceiling)."""
    s = sf.setup
    if sf.run is not None:
        r = sf.run
        t = [time(f) for f in r.steps]

        def dot(w: Sequence[float]) -> float:
            return sum(a * b for a, b in zip(w, t))

        fig = Figures(dot(r.ttft), dot(r.tpot), dot(r.total), r.tokens / dot(r.duration))
        if not c:
            return bounded(fig, time(sf.first), s.new, r.rate_bound, time(sf.decode) * sf.decode_weight)
        return served(fig, server_seconds(c, engine, sf.first))
    n = max(1, s.new)
    step = time(sf.decode)
    ttft = time(sf.first)
    # the bound (no constants) leaves out what the steady state may overlap: arriving prompts, queueing
    tpot = step + (sf.prompts_per_step * ttft if c else 0.0)
    users = s.concurrency or s.batch or 1
    if sf.prompts_per_step and c:
        # NOTE: queueing behind the prompts that arrive together; grows as sqrt(C / new) on the
        # aiconfigurator and InferenceX runs (linear in C overshoots 3-5x at C = 128), scaled by a
        # fitted per-engine `ttft_queue` (AIC itself multiplies prefill by 1 + log2(C)/8 for vLLM).
        queue = c.get(f"ttft_queue.{engine}", c.get("ttft_queue", 0.0)) * math.sqrt(sf.prompts_per_step)
        ttft += 0.5 * step + queue * ttft
    if s.concurrency is not None:  # a served request; a static batch (an offline benchmark) has no server
        ttft += server_seconds(c, engine, sf.first)
    total = ttft + (n - 1) * tpot
    return Figures(ttft, tpot, total, users * n / total)


def bounded(fig: Figures, alone: float, new: int, rate_bound: float | None, decoding: float = math.inf) -> Figures:
    """A simulated closed loop's ceiling figures as a bound: how far real clients drift apart is modelled
    (plan/serve.turnaround_steps), not known, so a bound cannot count their queueing. No TTFT above the prompt's own
    pass `alone`. No TPOT above `decoding`, the same schedule's decode steps with the prompts in them left out: how
    much of the other requests' prompts lands between a request's tokens is the scheduler's choice (chunked prefill
    mixes them in, a prefill-first engine runs them apart, a measured run may reuse a cached prefix), so a bound
    cannot count it either. Latency bounded with them; tokens/s by `rate_bound`, the work every schedule of the run
    has to do (plan/serve_bound.py), where the simulated schedule is slower."""
    steps = max(1, new) - 1
    tpot = min(fig.tpot_s, decoding)
    total = min(fig.total_s, alone + steps * tpot)
    rate = fig.tokens_per_s if rate_bound is None else max(fig.tokens_per_s, rate_bound)
    return Figures(min(fig.ttft_s, alone), tpot, total, rate)


def served(fig: Figures, srv: float) -> Figures:
    """The figures a client of the API server sees: `srv` more on each TTFT and latency, and, as a
    client sends its next request only after it, the run stretched by (latency + srv) / latency."""
    return Figures(
        fig.ttft_s + srv, fig.tpot_s, fig.total_s + srv, fig.tokens_per_s * fig.total_s / (fig.total_s + srv)
    )


def server_seconds(c: Mapping[str, float], engine: str, first: StepFeatures | None = None) -> float:
    """A served request's time outside the engine's steps (the API server's HTTP, tokenizing and detokenizing; a
    request's hop to the scheduler), added to its TTFT and latency; 0 for the bound. Static batches (offline
    benchmarks: benchmark_latency, gptSessionBenchmark) have none. With the request's prompt step `first`, a MoE
    model's `moe_server_s` for each expert its prompt reaches in each MoE layer (estimate.expert_layers: its launch-
    bound prompt pass, hidden under load)."""
    if not c:
        return 0.0
    moe = c.get(f"moe_server_s.{engine}", c.get("moe_server_s", 0.0)) * expert_layers(first) if first else 0.0
    return c.get(f"server_s.{engine}", c.get("server_s", 0.0)) + moe


def served_view(c: Mapping[str, float], engine: str) -> Mapping[str, float]:
    """The constants a served request's steps take: `name.<engine>.served` in place of `name.<engine>` where the fit
    has one. NOTE: an engine's server (trtllm-serve's PyTorch executor, vLLM's and SGLang's schedulers) is not the
    offline benchmark its static figures come from (TRT-LLM's doc figures are gptSessionBenchmark on compiled
    engines): a prompt step may cost it more."""
    return tagged_view(c, engine, "served")


def tagged_view(c: Mapping[str, float], engine: str, tag: str) -> Mapping[str, float]:
    """`c` with each `name.<engine>.<tag>` laid over `name.<engine>` (`c` itself where none is tagged)."""
    suffix = f".{engine}.{tag}"
    over = {k[: -len(tag) - 1]: v for k, v in c.items() if k.endswith(suffix)}
    return {**c, **over} if over else c


def predict(sf: SetupFeatures, metric: str, c: Mapping[str, float], engine: str) -> float:
    """A setup's predicted figure in the metric's unit (ms, tokens/s or s)."""
    if sf.setup.concurrency is not None:
        c = served_view(c, engine)
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
    label: str = ""  # the setup in words (model, GPU, dtype), for reports


def log_error(p: Point, c: Mapping[str, float]) -> float:
    """log(predicted / measured): 0 is exact; the median of |.| is the fit's loss."""
    return math.log(predict(p.sf, p.metric, c, p.engine) / p.value)


def loss(points: Sequence[Point], c: Mapping[str, float]) -> float:
    """Weighted sum of |log error|; a setup measured in several metrics is timed once, and each set of
    constants resolved once per GPU family, engine, phase and link (time_of's memo). Summed exactly
    (math.fsum): the same total in whatever order the terms come, as IncrementalLoss needs."""
    ctx = _Timing(c)
    return math.fsum(_group_term(g, ctx) for g in _groups(points))


def _groups(points: Sequence[Point]) -> list[list[Point]]:
    """The points by setup and engine: one set of figures serves every metric measured on it."""
    out: dict[tuple[int, str], list[Point]] = {}
    for p in points:
        out.setdefault((id(p.sf), p.engine), []).append(p)
    return list(out.values())


class _Timing:
    """One set of constants' served views and resolved-constant memos, for timing many setups."""

    def __init__(self, c: Mapping[str, float]) -> None:
        self.c = c
        self.views: dict[str, Mapping[str, float]] = {}
        self.memos: dict[int, ConstantsMemo] = {}  # by id of the constants (c or a served view), alive in views

    def view(self, engine: str, served: bool) -> Mapping[str, float]:
        if not served:
            return self.c
        v = self.views.get(engine)
        if v is None:
            v = self.views[engine] = served_view(self.c, engine)
        return v


def _group_term(g: Sequence[Point], ctx: _Timing) -> float:
    """The group's share of the loss, timed with `ctx`'s constants."""
    p0 = g[0]
    cv = ctx.view(p0.engine, p0.sf.setup.concurrency is not None)
    timed = partial(time_of, c=cv, engine=p0.engine, memo=ctx.memos.setdefault(id(cv), {}))
    return _term(g, figures(p0.sf, timed, cv, p0.engine))


def _term(g: Sequence[Point], fig: Figures) -> float:
    return sum(p.weight * abs(math.log(_in_unit(fig, p.metric) / p.value)) for p in g)


class _Reads(Mapping[str, float]):
    """A mapping that records the names read from it."""

    def __init__(self, c: Mapping[str, float]) -> None:
        self.c = c
        self.read: set[str] = set()

    def __getitem__(self, k: str) -> float:
        self.read.add(k)
        return self.c[k]

    def __contains__(self, k: object) -> bool:
        if isinstance(k, str):
            self.read.add(k)
        return k in self.c

    def __iter__(self):  # type: ignore[no-untyped-def]
        self.read.update(self.c)
        return iter(self.c)

    def __len__(self) -> int:
        return len(self.c)


class IncrementalLoss:
    """loss() kept term by term, for a search that moves one constant at a time: a trial value of a constant re-times
    only the setups whose figures read it (recorded once, from the lookups timing them makes; which names a setup
    reads depends on its features and on which names exist, not on their values). The total is math.fsum of the
    terms, so it equals loss() to the last bit."""

    def __init__(self, points: Sequence[Point], c: Mapping[str, float]) -> None:
        self.groups = _groups(points)
        self.readers: dict[str, list[int]] = {}
        self.terms: list[float] = []
        for i, g in enumerate(self.groups):
            engine = g[0].engine
            served = g[0].sf.setup.concurrency is not None
            # NOTE: a served setup reads its engine's served view, in which name.<engine> holds
            # c's name.<engine>.served where that exists: a read of it depends on the latter.
            reads = _Reads(served_view(c, engine) if served else c)
            over = {k[: -len(".served")] for k in c if served and k.endswith(f".{engine}.served")}
            fig = figures(g[0].sf, partial(time_of, c=reads, engine=engine), reads, engine)
            self.terms.append(_term(g, fig))
            for k in {f"{k}.served" if k in over else k for k in reads.read}:
                self.readers.setdefault(k, []).append(i)
        self.total = math.fsum(self.terms)

    def trial(self, c: Mapping[str, float], name: str) -> tuple[float, dict[int, float]]:
        """The loss with `c` (which differs from the last committed constants in `name` alone), and the
        new terms of the setups that read `name`."""
        ctx = _Timing(c)
        new = {i: _group_term(self.groups[i], ctx) for i in self.readers.get(name, ())}
        if not new:
            return self.total, new
        terms = list(self.terms)
        for i, v in new.items():
            terms[i] = v
        return math.fsum(terms), new

    def commit(self, total: float, new: Mapping[int, float]) -> None:
        for i, v in new.items():
            self.terms[i] = v
        self.total = total


_CAPPED = ("bw_eff", "kv_eff", "mfu", "ar_bw_eff", "ar_bw_eff_large", "a2a_bw_eff")
# NOTE: those fractions of a rated figure are at most 1. No GEMM was measured above 0.91 of a dense peak (A100 bf16;
# speed_facts 2.2; uncapped, CDNA3's and CDNA4's ran to 1.0), nor decode attention above 0.9 of the bandwidth (2.3).
CAPS = {"mfu": 0.91, "kv_eff": 0.9}
# NOTE (docs/speed.md has each): a small all-reduce is no faster than the fastest measured, 3.7 us (a one-shot custom
# all-reduce of 512 B on 2 x H100: sglang PR #2904; unfloored, 0.35 us), nor slower over NVLink than NCCL over PCIe
# (ar_alpha_s.pcie, 7.5 us; a refit reached 7.97). Nor a decode attention kernel under 0.7 of the bandwidth at the
# margin, the lowest measured (h200_decode.json; unfloored, a fit without TensorRT-LLM's tables took 0.45), nor a score
# llama.cpp's prompt materializes under 16 B, the graph's f32 passes (unfloored, without XiongjieDai's pp4096: 0.09).
FLOORS = {"ar_alpha_s": 3.7e-6, "kv_eff": 0.7, "score_bytes.llamacpp": 16.0}  # by base name, or whole
CEILINGS = {"ar_alpha_s.nvlink": 7.5e-6}


def floor_of(name: str) -> float:
    """The least a fitted constant may take: FLOORS by its whole name, else by its base name, else 0."""
    return FLOORS.get(name, FLOORS.get(name.split(".")[0], 0.0))


def fit(
    points: Sequence[Point],
    start: Mapping[str, float],
    names: Sequence[str],
    sweeps: int = 12,
) -> dict[str, float]:
    """Pattern search in log space on the weighted sum of |log error| (a weighted-median fit, robust to a few odd
    points): each constant in turn tries its own step up and down, keeps a move that lowers the loss (and widens its
    step), else halves its step. Deterministic; constants not in `names` stay as given."""
    c = started(start, names)
    step = dict.fromkeys(names, 0.7)
    inc = IncrementalLoss(points, c)
    best = inc.total
    for _ in range(sweeps):
        for name in names:
            if step[name] < 1e-3:
                continue
            here, moved, base = c[name], False, name.split(".")[0]
            for k in (1.0, -1.0):
                trial = here * math.exp(k * step[name])
                if base in _CAPPED:
                    trial = min(trial, CAPS.get(base, 1.0))
                trial = min(max(trial, floor_of(name)), CEILINGS.get(name, math.inf))
                c[name] = trial
                v, new = inc.trial(c, name)
                if v < best - 1e-12:
                    best, here, moved = v, trial, True
                    inc.commit(v, new)
                    break
            c[name] = here
            step[name] = step[name] * 1.5 if moved else step[name] * 0.5
    return c


def started(start: Mapping[str, float], names: Sequence[str]) -> dict[str, float]:
    """`start` with each of `names` it lacks set to the value it falls back on (`_base`)."""
    c = dict(start)
    for name in names:
        c.setdefault(name, _base(c, name))
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


def interval_phase(p: Point) -> str:
    """Which interval a figure takes: `decode` (TPOT, throughput, a batch's total), `prefill` (a static
    batch's TTFT) or `served` (a TTFT under closed-loop load, queueing included: a wider spread)."""
    if p.metric != "ttft_ms":
        return "decode"
    return "served" if (p.sf.setup.concurrency or 1) > 1 else "prefill"


def interval(points: Sequence[Point], c: Mapping[str, float]) -> dict[str, float]:
    """The 80% interval as factors on the estimate, from the weighted 10th and 90th percentiles of measured /
    estimated, per interval_phase."""
    out = {}
    for phase in INTERVAL_PHASES:
        sel = [p for p in points if interval_phase(p) == phase]
        if not sel:
            continue
        r = [-log_error(p, c) * (-1 if p.metric == "output_tok_s_total" else 1) for p in sel]  # as a time
        w = [p.weight for p in sel]
        out[f"interval.{phase}.lo"] = min(1.0, math.exp(weighted_quantile(r, w, 0.1)))
        out[f"interval.{phase}.hi"] = max(1.0, math.exp(weighted_quantile(r, w, 0.9)))
    return out


def median_abs_error(points: Sequence[Point], c: Mapping[str, float]) -> float:
    """Median |predicted / measured - 1| (unweighted), as a fraction."""
    errs = sorted(abs(math.exp(log_error(p, c)) - 1) for p in points)
    return errs[len(errs) // 2] if errs else float("nan")
