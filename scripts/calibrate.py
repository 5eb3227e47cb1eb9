"""Refit the speed estimate's constants from benchmarks/calibration/points.csv and write the file
the package ships, kvcalc/cost/calibration.json. Deterministic: the same points give the same file.

Each point is weighted by its source: a source of n points weighs ln(1 + n) in all, so NVIDIA's
5,280 aiconfigurator rows count about twice its 96 TensorRT-LLM doc points, not 55 times; and where
other sources hold ten or more points of the same engine and regime (static or served), no point
weighs more than one of a ten-point source (ln(1 + n) / max(n, 10); `reweighted`), so a source of two
points cannot set a constant against the dozen points of another that disagree (with ln(1 + n) / n,
MLC's two 2023 llama.cpp figures on a 4090 pinned llama.cpp's per-step cost at 8.3 ms against
XiongjieDai's 7-8B runs on five GPUs: every small model's llama.cpp TPOT read 2.5x slow).
Family and engine constants are fitted where the points hold that family or engine; the shared
constant each falls back on is their weighted geometric mean.

Run: python scripts/calibrate.py [--sweeps N]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POINTS = ROOT / "benchmarks" / "calibration" / "points.csv"
OUT = ROOT / "kvcalc" / "cost" / "calibration.json"
sys.path.insert(0, str(ROOT))


# NOTE: the weight cap: a point of a source of fewer than ten points weighs as one of a ten-point source
# where other sources measure its engine in its regime (static batch or served) with ten points or more.
FEW_POINTS = 10
SOURCE_ROWS: Counter = Counter()  # rows of each source in points.csv (load_points sets it)


def source_weight(n: int, rivals: int = FEW_POINTS) -> float:
    """The weight of each of a source's n points: ln(1 + n) / n, capped at ln(1 + n) / FEW_POINTS when
    other sources hold `rivals` >= FEW_POINTS points of the same engine and regime."""
    return math.log1p(n) / (max(n, FEW_POINTS) if rivals >= FEW_POINTS else n)


def reweighted(points) -> list:
    """`points` weighted for a fit on exactly them (source_weight). NOTE: the cap is there so that two
    points cannot outvote a dozen of another source; where a small source is all a fit has of an engine
    and regime (GPUStack's four served vLLM runs when aiconfigurator is held out), it keeps its full
    weight: capped there, the held-out fit let vLLM's prompt costs wander (its TTFT read 10x slow)."""

    from kvcalc.engines.kernels import engine_of

    def group(p) -> tuple:  # the point's engine (a build's, its engine's) and regime (a static batch or served)
        # NOTE: by engine, not build: a build's points read its engine's efficiencies (bw_eff.ada.llamacpp).
        # Keyed by build, MLC's two 2023 llama.cpp runs had no rivals once XiongjieDai's were held out and
        # outweighed today's build 5 to 1 there: bw_eff.ada.llamacpp went to 0.31, every 4090 read 2-3x slow.
        return engine_of(p.engine), p.sf.setup.concurrency is None

    regime = Counter(group(p) for p in points)
    own = Counter((p.source, group(p)) for p in points)
    rows = Counter(p.source for p in points)
    return [
        p._replace(
            weight=source_weight(
                SOURCE_ROWS.get(p.source) or rows[p.source], regime[group(p)] - own[p.source, group(p)]
            )
        )
        for p in points
    ]


def setup_of(r: dict, source_lengths: bool = False):
    """A points.csv row's measured configuration (`source_lengths`: see load_points)."""
    from kvcalc.cost.fitting import Setup

    return Setup(
        batch=int(r["batch"]) if r["batch"] else None,
        concurrency=int(r["concurrency"]) if r["concurrency"] else None,
        prompt=int(r["prompt"]),
        new=int(r["new"]),
        range_ratio=float(r.get("range_ratio") or 1.0) if source_lengths else 1.0,
        launch=launch_of(r.get("launch") or ""),
    )


def launch_of(text: str) -> tuple[tuple[str, int], ...]:
    """A points.csv `launch` cell ("max_num_seqs=128 max_num_batched_tokens=32768") as Setup.launch."""
    return tuple((k, int(v)) for k, _, v in (item.partition("=") for item in text.split()))


# A points.csv row's model, GPU, layout and formats: what its step features depend on besides the setup.
LAYOUT = ("model", "gpu", "tp", "pp", "ep", "dp_attention", "dtype", "kv_dtype")


def layout_of(r: dict) -> tuple[str, ...]:
    return tuple(r[f] for f in LAYOUT)


def scores_of(engine: str) -> int:
    """The micro-batch in which a point's prompt writes its attention scores to memory (0: on chip).
    NOTE: the llama.cpp points' prompts are llama-bench runs without flash attention (-fa 0: the 2023-2024
    runs of XiongjieDai and MLC, and the CUDA scoreboard's fixed profile): KQ went through memory, one
    n_ubatch (512) of queries at a time; today's builds pick flash attention where the backend has it (-fa auto)."""
    from kvcalc.engines.kernels import prompt_chunk

    return prompt_chunk(engine) if engine == "llamacpp" else 0


# NOTE: the SGLang release the calibration's SGLang runs are read under (their pools and default chunks): 0.5.5,
# the rules of the releases they ran (0.5.1-0.5.9: aiconfigurator's rows, InferenceX's images) as kvcalc reads
# them, and the release kvcalc's default was when the constants were fitted. kvcalc's default release for users
# (engines/sglang/release.DEFAULT_RELEASE) is the newest read and may move on without moving the fit.
CALIBRATION_SGLANG = "0.5.5"


def sglang_release(engine: str) -> str | None:
    return CALIBRATION_SGLANG if engine == "sglang" else None


def load_points(path: Path = POINTS, simulate: bool = True, source_lengths: bool = False):
    """Points (with their step features) from the calibration CSV; setups shared by several
    metrics are built once. `simulate`: closed-loop points as the serving simulation runs them
    (plan/serve_fit.py); False: cost/fitting.py's closed form (what the planner's estimate uses).

    Each closed-loop run is simulated under the scheduler limits it was launched with (column `launch`,
    scripts/inferencex_launch.py), not the engine's defaults.

    `source_lengths`: each closed-loop run with its requests' lengths drawn as the source's client
    drew them (column range_ratio: InferenceX's 0.8). Off by default, so every run is read as
    `generate --concurrency` reads it with no --range-ratio, requests alike. NOTE: with it on, the
    fit got worse in-sample (TTFT 36.1% against 32.8%; on the fixed-length gap-analysis runs 45%
    against 31%, and read with requests alike its constants miss InferenceX's TTFT by 54%). Those
    figures predate the clients' turnaround (plan/serve.turnaround_steps), when the simulation's
    identical requests stayed in lockstep for ever; not tried again since."""
    from kvcalc.cost.fitting import Point, setup_features
    from kvcalc.cost.shard import link_for
    from kvcalc.cost.step import Deployment
    from kvcalc.engines.kernels import engine_of, gpu_as_run_by, prompt_chunk
    from kvcalc.hardware.family import gpu_family
    from kvcalc.model.presets import get_gpu, get_model
    from kvcalc.plan.serve_fit import run_features

    rows = list(csv.DictReader(open(path, newline="")))
    SOURCE_ROWS.clear()
    SOURCE_ROWS.update(r["source"] for r in rows)
    cache: dict[tuple, object] = {}
    points, families = [], {}
    for r in rows:
        setup = setup_of(r, source_lengths)
        # NOTE: an engine column may name a build after a dot (llamacpp.legacy, import_calibration.py's
        # LEGACY_LLAMACPP): the step is the engine's, its constants the build's (estimate.time_of)
        engine = engine_of(r["engine"])
        chunk = prompt_chunk(engine)
        # NOTE: closed-loop points go through the serving simulation (its schedule depends on the
        # engine's limits and pool), the others through the static-batch steps.
        simulated = setup.concurrency is not None and simulate
        key = layout_of(r) + (setup, chunk)
        key += (engine,) if simulated else ()
        if key not in cache:
            spec, gpu = get_model(r["model"]), gpu_as_run_by(get_gpu(r["gpu"]), engine)
            tp, pp = int(r["tp"]), int(r["pp"])
            ep, dp = int(r["ep"] or 1), r["dp_attention"] == "1"
            dep = Deployment(tp=tp, pp=pp, link=link_for(gpu), ep=ep, dp_attention=dp)
            dtype, kv = r["dtype"] or None, r["kv_dtype"]
            try:
                if simulated:
                    cache[key] = run_features(
                        spec, gpu, dep, setup, engine=engine, dtype=dtype, kv_dtype=kv, release=sglang_release(engine)
                    )
                else:
                    cache[key] = setup_features(spec, gpu, dep, setup, dtype, kv, chunk, scores_of(engine))
            except Exception as e:  # a layout kvcalc refuses (tp not dividing heads, ...): counted, not fitted
                cache[key] = e
            families[key] = gpu_family(gpu)
        sf = cache[key]
        if isinstance(sf, Exception):
            continue
        points.append(
            Point(
                sf,
                r["engine"],
                r["metric"],
                float(r["value"]),
                0.0,  # reweighted below, with the whole set's sources
                r["source"],
                f"{r['model']} on {r['gpu']} {r['dtype'] or 'preset dtype'} (id {r['id']})",
            )  # fmt: skip
        )
    return reweighted(points)


def names_for(points) -> list[str]:
    fams = sorted({p.sf.decode.family for p in points})
    engines = sorted({p.engine for p in points})
    # NOTE: only NVLink's all-reduce terms have the points to fit them (hundreds of tp > 1 runs); PCIe
    # and Infinity Fabric keep nccl-tests' and RCCL's figures (calibration.STARTING, speed_facts §2.4).
    links = sorted({p.sf.decode.link for p in points if p.sf.decode.allreduces} & {"nvlink"})
    names = [f"{n}.{f}" for n in ("bw_eff", "mfu") for f in fams]
    # NOTE: llama.cpp runs its own kernels (MMVQ/MMQ on quantized blocks, not cuBLAS/CUTLASS GEMMs):
    # its bandwidth and FLOP efficiency are its own per family (mfu.ada.llamacpp), others share theirs.
    llama = sorted({p.sf.decode.family for p in points if p.engine.startswith("llamacpp")})
    names += [f"{n}.{f}.llamacpp" for n in ("bw_eff", "mfu") for f in llama]
    # NOTE: builds before June 2024 (llamacpp.legacy) multiplied quantized prompts by dequantizing to FP16
    # for cuBLAS; today's run int8 tensor-core MMQ (PRs #7676, #7860): a FLOP efficiency of their own, in a
    # family where both builds have points (elsewhere the legacy points are all llama.cpp has to fit it).
    today = {p.sf.decode.family for p in points if p.engine == "llamacpp"}
    legacy = sorted({p.sf.decode.family for p in points if p.engine == "llamacpp.legacy"} & today)
    names += [f"mfu.{f}.llamacpp.legacy" for f in legacy]
    names += ["kv_eff", "gemv_layer_bytes", "mfu_tokens", "attn_layer_s"]
    # NOTE: one efficiency for weight-only quantized weights (mxfp4 experts on Hopper, int4 checkpoints):
    # llama.cpp's is in its own bw_eff (calibration.STARTING keeps dequant_eff.llamacpp at 1)
    if any(p.sf.decode.dequant for p in points if not p.engine.startswith("llamacpp")):
        names += ["dequant_eff"]
    names += [f"{n}.{e}" for n in ("step_s", "seq_s", "decode_layer_s", "prefill_layer_s") for e in engines]
    if any(p.sf.first.scores for p in points):
        names += ["score_bytes.llamacpp"]
    served = sorted({p.engine for p in points if p.sf.run is not None})
    # NOTE: SGLang's API-server time keeps its start (calibration.STARTING, from public single-client runs of small
    # models): every SGLang run here is a large MoE deployment (DeepSeek, Qwen3-235B / 3.5-397B, GLM-5 at tp 4-8),
    # whose one-client excess a per-request constant would take whole. Fitted, it went to 173 ms, and every SGLang
    # request read at least ~190 ms of TTFT, a dense 8B's at one client included, against 20-50 ms measured
    # (docs/speed.md, "SGLang's API-server time"). The excess is its own term, per expert a prompt reaches in each
    # MoE layer (moe_server_s.sglang; fitting.server_seconds): 0 for a dense model.
    names += [f"server_s.{e}" for e in served if e != "sglang"]
    if any(p.sf.first.experts[2] for p in points if p.engine == "sglang" and p.sf.run is not None):
        names += ["moe_server_s.sglang"]
    # NOTE: TRT-LLM's served prompt steps get their own per-layer cost (fitting.served_view): its static
    # figures are compiled engines under gptSessionBenchmark, its served ones trtllm-serve's PyTorch
    # executor. vLLM's static figures come from the engine it serves with (benchmark_latency): no split.
    # The split holds without static points too: the compiled engine's cost then stays at its start
    # (fitted from served runs, it read held-out static prompts 91% slow: 345 us a layer against 85).
    names += [f"prefill_layer_s.{e}.served" for e in served if e == "trtllm"]
    if any(p.sf.prompts_per_step and p.sf.run is None for p in points):  # the closed form's queueing
        names += [f"ttft_queue.{e}" for e in engines]
    if any(p.sf.decode.stage_bytes[0][6] for p in points):
        names += [f"moe_layer_s.{e}" for e in engines]
        names += [f"moe_prefill_expert_s.{e}" for e in engines]
    # DeepSeek Sparse Attention's indexer kernels: fitted for the engines whose points run them; the others
    # take the shared value (the fitted engines' mean), the same DeepGEMM / FlashMLA kernels.
    names += [f"index_layer_s.{e}" for e in sorted({p.engine for p in points if p.sf.decode.index_layers})]
    names += [f"ar_alpha_s.{k}" for k in links] + [f"ar_bw_eff.{k}" for k in links]
    names += [f"ar_bw_eff_large.{k}" for k in links]
    a2a = sorted({p.sf.decode.link for p in points if p.sf.decode.a2a[0]})  # expert parallelism's all-to-all
    names += [f"a2a_alpha_s.{k}" for k in a2a] + [f"a2a_bw_eff.{k}" for k in a2a]
    return names


# NOTE: a constant fitted on a handful of points follows their noise. With TensorRT-LLM's docs held out,
# mfu.ampere was read by GPUStack's two A100 decode runs alone and went to 0.18: TensorRT-LLM's A100 static
# runs then read 2-3x slow. With XiongjieDai's tables held out, MLC's two 2023 runs alone set the legacy
# llama.cpp build's fixed costs (step_s 1.7 -> 5.4 ms): its TPOTs read 54% off. Below FEW_READERS points
# such a constant takes its fallback: a family's efficiency the fitted families' mean, a build's fixed
# cost its engine's.
FEW_READERS = 5
# NOTE: nor can one model's points tell a family's efficiency from that model's own costs. CDNA4's 18 points were
# all DeepSeek-V3 under SGLang (InferenceX, MI355X), whose served TTFTs the API-server and MoE prompt costs
# carry: fitted anyway, mfu.cdna4 went to 0.16 and bw_eff.cdna4 to its cap 1.0, and Llama-3.1-8B served by vLLM
# on one MI355X (held out: benchmarks/holdout/, rocm.blogs.amd.com) read its throughput 51% slow (the median of
# three dtypes), within 10% with the shared values. A family efficiency read by fewer than FEW_MODELS models takes the shared value too.
FEW_MODELS = 2


def builds_of(points) -> tuple[str, ...]:
    """The suffixes of the builds among the points' engines: `.llamacpp.legacy`, `.vllm.rocm`."""
    return tuple(sorted({f".{p.engine}" for p in points if "." in p.engine}))


def measured(points, names: list[str]) -> list[str]:
    """`names` less those that fewer than FEW_READERS points read, among a family's efficiencies (`bw_eff.<family>`,
    `mfu.<family>`, also where fewer than FEW_MODELS models read them: they fall back on the shared value, the fitted
    families' weighted geometric mean, shared_means) and a build's fixed costs (`step_s.llamacpp.legacy`, `seq_s.vllm.rocm`: on
    its engine's, `step_s.llamacpp`). Which points read a constant is what timing them looks up (fitting.IncrementalLoss).
    An engine's or build's own efficiency (`bw_eff.ada.llamacpp`, `mfu.ada.llamacpp.legacy`) stays, however
    few read it: its fallback is another engine's or build's kernels (the legacy build dequantized to FP16
    for cuBLAS where today's runs int8 MMQ), not a like value."""
    from kvcalc.cost.calibration import STARTING
    from kvcalc.cost.fitting import IncrementalLoss, started

    inc = IncrementalLoss(points, started(STARTING, names))

    def readers(name: str) -> int:
        return sum(len(inc.groups[i]) for i in inc.readers.get(name, ()))

    def models(name: str) -> int:
        return len({inc.groups[i][0].label.split(" on ")[0] for i in inc.readers.get(name, ())})  # "MODEL on GPU ..."

    def efficiency(name: str) -> bool:
        return name.split(".")[0] in ("bw_eff", "mfu")

    builds = builds_of(points)

    def optional(name: str) -> bool:
        return (efficiency(name) and name.count(".") == 1) or (name.endswith(builds) and not efficiency(name))

    def enough(name: str) -> bool:
        return readers(name) >= FEW_READERS and (not efficiency(name) or models(name) >= FEW_MODELS)

    return [n for n in names if not optional(n) or enough(n)]


def shared_means(points, c: dict[str, float], names: list[str]) -> None:
    """Set each shared constant to the weighted geometric mean of its family/engine values."""
    groups: dict[str, list[tuple[float, float]]] = {}
    for name in names:
        base, _, key = name.partition(".")
        if not key or "." in key:  # family x engine constants have no shared value of their own
            continue
        # NOTE: these shared values stay 0: flash attention keeps its scores on chip, and a MoE prompt's excess
        # outside the steps is measured of SGLang alone (the other engines' fitted server_s hold theirs)
        if base in ("score_bytes", "moe_server_s"):
            continue
        w = sum(p.weight for p in points if key in (p.sf.decode.family, p.engine, p.sf.decode.link))
        groups.setdefault(base, []).append((c[name], w))
    for base, vals in groups.items():
        total = sum(w for _, w in vals) or 1.0
        if all(v > 0 for v, _ in vals):
            c[base] = math.exp(sum(w * math.log(v) for v, w in vals) / total)


def calibrate(points, sweeps: int) -> dict[str, float]:
    from kvcalc.cost.calibration import STARTING
    from kvcalc.cost.fitting import IncrementalLoss, fit, interval

    points = reweighted(points)
    names = measured(points, names_for(points))
    c = fit(points, STARTING, names, sweeps=sweeps)
    # NOTE: a restart with fresh step sizes: a constant whose step had shrunk while the others were far
    # from their fit stays frozen where it was (bw_eff.ada.llamacpp at 0.40 left the 4090's llama.cpp
    # TPOT 2.3x high after 5 sweeps); two more sweeps from the fit let it move again.
    c = fit(points, c, names, sweeps=2)
    # NOTE: a build's constant on which no point's figure depends (a MoE layer cost where the build's runs are
    # all dense: their steps look it up all the same) stays where it started; kept, that start would stand in
    # for the engine's fitted value (plan/calibration.constants_for lays a build's constants over its engine's).
    inc, builds = IncrementalLoss(points, c), builds_of(points)
    for name in [n for n in names if n.endswith(builds)]:
        _, terms = inc.trial({**c, name: 2 * c[name]}, name)
        if all(v == inc.terms[i] for i, v in terms.items()):
            del c[name]
    shared_means(points, c, names)
    c.update(interval(points, c))
    return c


def fit_closed_form_queue(c: dict[str, float], sweeps: int) -> None:
    """Refit `ttft_queue.<engine>` (the queueing term of cost/fitting.py's closed form, which the
    planner uses where a simulation per option would be slow) so that the closed form tracks the
    measured closed-loop TTFTs with the step constants `c` fitted through the simulation."""
    from kvcalc.cost.fitting import fit

    points = [p for p in load_points(simulate=False) if p.metric == "ttft_ms" and p.sf.prompts_per_step]
    names = [f"ttft_queue.{e}" for e in sorted({p.engine for p in points})]
    c.update({n: v for n, v in fit(points, c, names, sweeps=sweeps).items() if n in names})
    shared_means(points, c, names)


# NOTE: the shipped "80%" interval is, per phase, the weighted t-th to (100 - t)-th percentile of the held-out
# residuals, t the first of INTERVAL_TAILS whose interval holds INTERVAL_COVERAGE of a source it never saw (each
# source against the other sources' residuals, nested_inside; benchmarks/speed_accuracy.py reports it). Scored that
# way the 10th-90th held 74% of the points and the 7th-93rd 80% until 2026-12-04, when the runs read from two
# sources were read from one (then the 5th-95th held 79.9%); one tail for every phase then held 84% of the served
# and prompt residuals but 77.5% of the decode ones, hence a tail per phase.
INTERVAL_COVERAGE = 0.80
INTERVAL_TAILS = (0.05, 0.045, 0.04, 0.035, 0.03, 0.025, 0.02)  # narrowest interval first


def nested_inside(residuals: list[dict], phase: str, tail: float) -> tuple[int, int]:
    """A phase's held-out residuals that fall inside the interval (weighted `tail` and 1 - `tail` quantiles)
    of the OTHER sources' residuals, and how many there are."""
    from kvcalc.cost.fitting import weighted_quantile

    inside = n = 0
    for src in sorted({r["source"] for r in residuals}):
        rest = [r for r in residuals if r["source"] != src and r["phase"] == phase]
        mine = [r for r in residuals if r["source"] == src and r["phase"] == phase]
        if not rest or not mine:
            continue
        vals, ws = [r["log_ratio"] for r in rest], [r["weight"] for r in rest]
        lo, hi = weighted_quantile(vals, ws, tail), weighted_quantile(vals, ws, 1 - tail)
        inside += sum(lo <= r["log_ratio"] <= hi for r in mine)
        n += len(mine)
    return inside, n


def phase_tail(residuals: list[dict], phase: str) -> float:
    """The first of INTERVAL_TAILS whose interval holds INTERVAL_COVERAGE of each phase's held-out points
    (nested_inside), else the widest."""
    for tail in INTERVAL_TAILS:
        inside, n = nested_inside(residuals, phase, tail)
        if inside >= INTERVAL_COVERAGE * n:
            return tail
    return INTERVAL_TAILS[-1]


def held_out_interval() -> dict[str, float]:
    """The 80% interval from the leave-one-source-out residuals benchmarks/speed_accuracy.py wrote
    (weighted phase_tail and 1 - phase_tail quantiles of measured / predicted, per phase); {} when absent."""
    from kvcalc.cost.fitting import INTERVAL_PHASES, weighted_quantile

    path = ROOT / "benchmarks" / "calibration" / "held_out_residuals.json"
    if not path.exists():
        return {}
    rs = json.loads(path.read_text())["residuals"]
    out = {}
    for phase in INTERVAL_PHASES:
        sel = [r for r in rs if r["phase"] == phase]
        if not sel:
            continue
        tail = phase_tail(rs, phase)
        vals, ws = [r["log_ratio"] for r in sel], [r["weight"] for r in sel]
        out[f"interval.{phase}.lo"] = min(1.0, math.exp(weighted_quantile(vals, ws, tail)))
        out[f"interval.{phase}.hi"] = max(1.0, math.exp(weighted_quantile(vals, ws, 1 - tail)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweeps", type=int, default=10, help="coordinate-descent sweeps (default 10)")
    ap.add_argument(
        "--intervals-only",
        action="store_true",
        help="keep the fitted constants and take only the 80%% interval anew from the held-out residuals "
        "benchmarks/speed_accuracy.py wrote",
    )
    ap.add_argument(
        "--source-lengths",
        action="store_true",
        help="read each closed-loop run with its client's length draw (column range_ratio), not requests alike",
    )
    args = ap.parse_args()
    from kvcalc.cost.fitting import median_abs_error

    if args.intervals_only:
        data = json.loads(OUT.read_text())
        data["constants"].update({k: float(f"{v:.6g}") for k, v in held_out_interval().items()})
        OUT.write_text(json.dumps(data, indent=1) + "\n")
        __import__("calibration_module").write()
        print(f"interval from held-out residuals -> {OUT.relative_to(ROOT)}")
        return 0
    points = load_points(source_lengths=args.source_lengths)
    c = calibrate(points, args.sweeps)
    fit_closed_form_queue(c, args.sweeps)
    c.update(held_out_interval())  # the shipped interval: from held-out residuals where they exist
    sources = sorted({p.source for p in points})
    OUT.write_text(
        json.dumps(
            {
                "about": "kvcalc speed-estimate constants, fitted by scripts/calibrate.py from "
                "benchmarks/calibration/points.csv (public measurements; see its README)",
                "points": len(points),
                "sources": len(sources),
                "constants": {k: float(f"{v:.6g}") for k, v in sorted(c.items())},
            },
            indent=1,
        )
        + "\n"
    )
    __import__("calibration_module").write()  # kvcalc/cost/calibration_data.py: the same numbers as a module
    print(f"{len(points)} points from {len(sources)} sources -> {OUT.relative_to(ROOT)}")
    for m in ("tpot_ms", "output_tok_s_total", "ttft_ms", "e2e_latency_s"):
        sel = [p for p in points if p.metric == m]
        print(f"  {m}: median error {median_abs_error(sel, c):.1%} on {len(sel)} points (in-sample)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
