"""llama.cpp's calibrated speed against the llama-bench points of benchmarks/calibration/points.csv.

For each llama.cpp point (tg N as TPOT, pp512 as TTFT; today's builds: the llama.cpp CUDA scoreboard and pull
requests' baselines; the legacy build, `llamacpp.legacy`: XiongjieDai/GPU-Benchmarks-on-LLM-Inference and
mlc-ai/llm-perf-bench, 2023 and May 2024), each timed with its build's constants, the median
|predicted / measured - 1| by build and GPU family, three ways:
- `int4`: the calibration path (cost/fitting.py) with the GGUF priced as int4, as points.csv had it;
- `ftype`: the same path with the point's llama.cpp ftype (q4_k_m, q4_0: model/gguf/mix.py);
- `table`: plan/llamacpp_speed.py, what `fit REPO-GGUF --engine llamacpp` prints: the step built from a
  llama-quantize tensor table (model/gguf/mix.tensor_table) placed as llama.cpp places it.
In-sample unless the constants were fitted without these points.

`--refit` isolates the pricing: starting from the shipped constants, the llama.cpp-keyed terms
(step_s, decode_layer_s, prefill_layer_s .llamacpp) are refitted on these points alone, once with the GGUFs
priced as int4 and once by their ftype, and the median error is given in-sample and leave-one-GPU-out
(each GPU predicted by a fit on the others).

    python benchmarks/llamacpp_speed.py [--constants kvcalc/cost/calibration.json] [--refit]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvcalc.cost.calibration import STARTING  # noqa: E402
from kvcalc.cost.fitting import Point, Setup, fit, predict, setup_features, tagged_view  # noqa: E402
from kvcalc.cost.shard import link_for  # noqa: E402
from kvcalc.cost.step import Deployment  # noqa: E402
from kvcalc.engines.kernels import gpu_as_run_by  # noqa: E402
from kvcalc.engines.llamacpp.buffers import TensorRow  # noqa: E402
from kvcalc.engines.llamacpp.eras import era  # noqa: E402
from kvcalc.engines.llamacpp.memory import llamacpp_memory  # noqa: E402
from kvcalc.hardware.family import gpu_family  # noqa: E402
from kvcalc.model.gguf.mix import FTYPES, tensor_table  # noqa: E402
from kvcalc.model.presets import get_gpu, get_model  # noqa: E402
from kvcalc.plan.llamacpp_speed import PROMPT_TOKENS, llamacpp_speed  # noqa: E402

POINTS = ROOT / "benchmarks" / "calibration" / "points.csv"


def table_figure(r: dict[str, str], c: dict[str, float]) -> float:
    # plan/llamacpp_speed.py times today's build: the legacy one's constants laid over llama.cpp's
    engine, _, build = r["engine"].partition(".")
    c = dict(tagged_view(c, engine, build)) if build else c
    spec, gpu = get_model(r["model"]), get_gpu(r["gpu"])
    ftype = "f16" if r["dtype"] == "fp16" else r["dtype"]
    rows = [TensorRow(*t) for t in tensor_table(spec, ftype)]
    pp = int(r["pp"])
    prompt, new = int(r["prompt"]), int(r["new"])
    res = llamacpp_memory(
        spec, rows, max(512, prompt + new), era(None), weights_exact=True, n_gpus=pp,
        backend="metal" if gpu.unified_memory else "cuda", flash_attn=False,
    )  # fmt: skip
    decode, prompt_speed = llamacpp_speed(
        spec, rows, res, gpu, 64e9, (c, "x"), n_gpus=pp, unified=gpu.unified_memory, context=prompt + new // 2
    )
    if r["metric"] == "tpot_ms":
        return 1000 / decode.tokens_per_s
    if prompt_speed is None:
        return float("nan")
    return 1000 * PROMPT_TOKENS / prompt_speed.tokens_per_s


def path_figure(r: dict[str, str], c: dict[str, float], dtype: str) -> float:
    spec, gpu = get_model(r["model"]), gpu_as_run_by(get_gpu(r["gpu"]), "llamacpp")
    dep = Deployment(tp=1, pp=int(r["pp"]), link=link_for(gpu))
    setup = Setup(batch=1, concurrency=None, prompt=int(r["prompt"]), new=int(r["new"]))
    sf = setup_features(spec, gpu, dep, setup, dtype, r["kv_dtype"], 512, SCORES)
    return predict(sf, r["metric"], c, r["engine"])


NAMES = tuple(f"{n}.llamacpp{b}" for b in ("", ".legacy") for n in ("step_s", "decode_layer_s", "prefill_layer_s"))
# NOTE: these llama-bench runs predate flash attention by default (-fa 0): their prompts' scores went
# through memory in micro-batches of 512, as scripts/calibrate.scores_of prices them.
SCORES = 512


def refit(rows: list[dict[str, str]], c: dict[str, float]) -> None:
    """In-sample and leave-one-GPU-out median error of the llama.cpp terms refitted per pricing."""
    print("| pricing | figure | points | in-sample | leave-one-GPU-out |")
    print("|---|---|---|---|---|")
    for how in ("int4", "ftype"):
        pts = []
        for r in rows:
            dtype = r["dtype"] if how == "ftype" or r["dtype"] == "fp16" else "int4"
            spec, gpu = get_model(r["model"]), gpu_as_run_by(get_gpu(r["gpu"]), "llamacpp")
            dep = Deployment(tp=1, pp=int(r["pp"]), link=link_for(gpu))
            setup = Setup(1, None, int(r["prompt"]), int(r["new"]))
            sf = setup_features(spec, gpu, dep, setup, dtype, "bf16", 512, SCORES)
            pts.append((r["gpu"], Point(sf, r["engine"], r["metric"], float(r["value"]))))
        inside = fit([p for _, p in pts], c, NAMES)
        held: dict[int, float] = {}
        for g in sorted({g for g, _ in pts}):
            cg = fit([p for h, p in pts if h != g], c, NAMES)
            held.update(
                {i: abs(predict(p.sf, p.metric, cg, p.engine) / p.value - 1) for i, (h, p) in enumerate(pts) if h == g}
            )
        for metric in ("tpot_ms", "ttft_ms"):
            idx = [i for i, (_, p) in enumerate(pts) if p.metric == metric]
            ins = statistics.median(
                abs(predict(pts[i][1].sf, metric, inside, pts[i][1].engine) / pts[i][1].value - 1) for i in idx
            )
            out = statistics.median(held[i] for i in idx)
            print(f"| {how} | {metric} | {len(idx)} | {ins:.1%} | {out:.1%} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--constants", default=str(ROOT / "kvcalc" / "cost" / "calibration.json"))
    ap.add_argument("--refit", action="store_true", help="refit the llama.cpp terms per pricing (see above)")
    args = ap.parse_args()
    c = dict(STARTING)
    c.update(json.loads(Path(args.constants).read_text())["constants"])
    rows = [
        r for r in csv.DictReader(open(POINTS, newline=""))
        if r["engine"].startswith("llamacpp") and (r["metric"] == "tpot_ms" or (r["metric"] == "ttft_ms" and r["prompt"] == "512"))
    ]  # fmt: skip
    if args.refit:
        refit(rows, c)
        return
    errs: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for r in rows:
        build = "legacy" if r["engine"].endswith(".legacy") else "today"
        fam = f"{build}: {gpu_family(get_gpu(r['gpu']))}"
        v = float(r["value"])
        old = "int4" if r["dtype"] not in ("fp16", "bf16") else r["dtype"]
        for how, pred in (
            ("int4", path_figure(r, c, old)),
            ("ftype", path_figure(r, c, r["dtype"])),
            ("table", table_figure(r, c) if r["dtype"] in FTYPES or r["dtype"] == "fp16" else float("nan")),
        ):
            e = abs(pred / v - 1)
            if e != e:  # no tensor table for the ftype (mxfp4): the point is left out of that column
                continue
            errs[(r["metric"], fam, how)].append(e)
            errs[(r["metric"], f"{build}: all", how)].append(e)
    print(f"constants: {args.constants}")
    print("| figure | build: GPU family | points | int4 (before) | ftype mix | tensor table |")
    print("|---|---|---|---|---|---|")
    for metric, fam in sorted({(m, f) for m, f, _ in errs}):
        name = "TPOT (tg)" if metric == "tpot_ms" else "TTFT (pp512)"
        med = [f"{statistics.median(errs[(metric, fam, h)]):.1%}" for h in ("int4", "ftype", "table")]
        print(f"| {name} | {fam} | {len(errs[(metric, fam, 'int4')])} | " + " | ".join(med) + " |")


if __name__ == "__main__":
    main()
