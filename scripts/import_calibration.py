"""Copy the public speed measurements kvcalc's estimate is fitted on into benchmarks/calibration/.

Reads ../shared/reference/speed_calibration.json (670 public points, each with its source URL and a
verbatim quote), aic_silicon_sample.csv (NVIDIA aiconfigurator's measured serving runs, Apache-2.0) and
benchmarks/calibration/inferencex_rows.json and llamacpp_rows.json (public figures found since, kept in the
repository with their sources), and writes benchmarks/calibration/points.csv: one row per measured figure,
mapped to kvcalc presets.

Nothing is hand-picked: a point is kept when kvcalc can model its setup (a model and GPU preset, a
tensor / pipeline / expert / attention-DP layout kvcalc's Deployment expresses, no speculative decoding, a known batch or concurrency) and its
regime is a static batch, batch 1 or closed-loop concurrency; every other point is skipped with the
reason counted in benchmarks/calibration/README.md, but for trtllm-bench's offline max-throughput runs, which are
written to benchmarks/holdout/points.csv as the bursts they ran (trtllm_bench_burst). Run: python scripts/import_calibration.py
"""

from __future__ import annotations

import csv
import json
import math
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from inferencex_launch import launch, script_layout  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "reference"
OUT = ROOT / "benchmarks" / "calibration" / "points.csv"
HOLDOUT = ROOT / "benchmarks" / "holdout" / "points.csv"
# NOTE: models whose presets came after the fit's points were taken: their rows (TensorRT-LLM 0.5 and 0.9
# static runs of GPT-J 6B and Falcon-180B, 56 figures) are written to the held-out set instead, a check of
# the shipped fit on two models it never saw. Refitted with them (2026-12-02), the leave-one-source-out TPOT,
# TTFT under load and throughput got worse (17.9% -> 19.8%, 35.2% -> 40.8%, 23.1% -> 30.5%; TTFT at a fixed
# batch and static totals better, 40.2% -> 35.6% and 50.6% -> 47.1%); the Falcon rows carry TensorRT-LLM 0.9's GQA decode, which read each KV head once per query head
# (docs/speed.md, "Not modelled"); those figures predate reading each aiconfigurator run once. GLM-5's
# aiconfigurator rows (SGLang, 58 runs) were held out with them from DeepSeek Sparse Attention's modelling to
# 2026-12-03; they now fit its indexer's cost (index_layer_s), the only DSA runs there are.
HELD_OUT_MODELS = ("gpt-j-6b", "falcon-180b")
# NOTE: llama.cpp's speed moved with its builds: CUDA graphs for batch-1 decode (PR #6766, May 2024) and
# int8 tensor-core MMQ for quantized prompts (PRs #7676 / #7860, June 2024), then fused kernels. These
# sources' llama-bench runs are 2023 and May 2024 snapshots (the README's "snapshots in May 2024", MLC's
# 2023 table): they are read as the legacy build ("llamacpp.legacy", whose per-step and per-layer costs and
# FLOP efficiency are fitted apart from today's builds, `llamacpp`, the engine kvcalc estimates).
LEGACY_LLAMACPP = ("github.com/XiongjieDai/GPU-Benchmarks-on-LLM-Inference", "github.com/mlc-ai/llm-perf-bench")
LLAMACPP_ROWS = ROOT / "benchmarks" / "calibration" / "llamacpp_rows.json"
FIELDS = [
    "id", "source", "model", "gpu", "tp", "pp", "ep", "dp_attention", "engine", "dtype", "kv_dtype", "regime", "batch",
    "concurrency", "prompt", "new", "range_ratio", "launch", "metric", "value", "source_url", "quote",
]  # fmt: skip

# NOTE: trtllm-bench's offline max-throughput runs (TensorRT-LLM's perf-overview tables) queue every request of a
# synthetic dataset at once: a burst of N requests alike, read as `--rate inf --requests N`. N per ISL / OSL is
# the table "Preparing a Dataset" prints in the revision the figures come from (00f37686: docs/source/performance/
# perf-overview.md; 03e27c7d: docs/source/developer-guide/perf-overview.md, which gives no count for 1000 / 1000
# and is read with the earlier revision's 3,000). These rows are held out (benchmarks/holdout/points.csv): the fit
# simulates no bursts.
TRTLLM_BENCH_REQUESTS = {
    (128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (1000, 2000): 1500, (2048, 128): 3000,
    (2048, 2048): 1500, (5000, 500): 1500, (1000, 1000): 3000, (500, 2000): 3000, (20000, 2000): 1000,
    (1024, 1024): 3000, (8192, 1024): 1500, (1024, 8192): 1500, (32768, 1024): 1000, (1024, 32768): 1000,
}  # fmt: skip

# InferenceX's bench_serving client: --random-range-ratio 0.8 (SemiAnalysisAI/InferenceX,
# .github/workflows/benchmark-tmpl.yml), lengths uniform in [int(0.8 L), L] (utils/bench_serving).
INFERENCEX_RANGE_RATIO = 0.8
GPU = {"h200-sxm": "h200", "h100-sxm": "h100", "a100-80gb-sxm": "a100", "gh200-144gb": "gh200"}
AIC_GPU = {"h100_sxm": "h100", "h200_sxm": "h200", "b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200"}


def engine_of(text: str) -> str | None:
    t = text.lower()
    for key, name in (("tensorrt", "trtllm"), ("lmdeploy", "trtllm"), ("sglang", "sglang"), ("llama.cpp", "llamacpp")):
        if key in t:
            return name
    if "vllm" in t or t.startswith("tgi"):
        return "vllm"
    return None  # MLC, ExLlama: no engine of the four


def dtype_of(text: str | None) -> str | None:
    t = (text or "").lower()
    if t.startswith("fp8"):
        return "fp8"
    if t.startswith("fp4") or "nvfp4" in t:
        return "nvfp4"
    if t.startswith("mxfp4"):
        return None  # the preset's native checkpoint
    if "gguf" in t:
        # a GGUF's llama.cpp quant (q4_k_m, q4_0, ...): priced by its per-tensor mix (model/gguf/mix.py)
        from kvcalc.model.gguf.mix import FTYPES

        named = [f for f in FTYPES if f in t]
        if named:
            return named[0]
    if "q4" in t or "int4" in t:
        return "int4"
    if t.startswith(("f16", "fp16")):
        return "fp16"
    if t.startswith("bf16"):
        return "bf16"
    return None


def resolve_model(*names: str | None) -> str | None:
    from kvcalc.model.presets import get_model

    for name in names:
        if not name:
            continue
        name = re.sub(r"\s*\(.*$", "", name).strip()
        # NOTE: a quantized checkpoint (Qwen/Qwen3-235B-A22B-FP8, nvidia/...-NVFP4) is its base model's
        # preset; the point's dtype column says how it was quantized.
        for candidate in (name, re.sub(r"[-_](fp8|nvfp4|fp4)$", "", name, flags=re.I)):
            try:
                return get_model(candidate).name
            except Exception:
                continue
    return None


def gpu_preset(gid: str | None) -> str | None:
    from kvcalc.model.presets import get_gpu

    if not gid:
        return None
    try:
        return get_gpu(GPU.get(gid, gid)).name
    except Exception:
        return None


def trtllm_bench_burst(p: dict) -> dict:
    """A trtllm-bench offline max-throughput point as the burst it ran (TRTLLM_BENCH_REQUESTS), its layout as
    the perf overview's recipes set it: DEP N (and, in the earlier revision, every MoE model's recipe) enables
    attention DP (`enable_attention_dp: true`) with experts over the N GPUs; unchanged when its lengths have no
    request count."""
    n = TRTLLM_BENCH_REQUESTS.get((p.get("input_len"), p.get("output_len")))
    if not n:
        return p
    from kvcalc.model.presets import get_model

    model = resolve_model(p.get("base_model"), p["model"])
    q = {**p, "regime": "burst_all_at_once", "batch_size": n}
    gpus = p.get("num_gpus") or 1
    if gpus > 1 and model and get_model(model).experts:
        q.update(
            tensor_parallel=gpus, expert_parallel=gpus, notes=(p.get("notes") or "") + " enable_attention_dp: true"
        )
    return q


def from_points(skipped: Counter) -> list[dict]:
    rows = []
    for p in json.loads((SHARED / "speed_calibration.json").read_text()):
        regime, metric = p["regime"], p["metric"]
        if regime == "offline_max_throughput" and "trtllm-bench" in (p["engine"] or ""):
            p = trtllm_bench_burst(p)
            regime = p["regime"]
        elif regime == "burst_all_at_once":
            regime = "burst_all_at_once, request count not read"  # GPUStack's, price-compass's: in their notes
        if regime not in ("static_batch", "single_stream_batch1", "closed_loop_concurrency", "burst_all_at_once"):
            skipped[f"regime {regime}"] += 1
            continue
        if p.get("speculative_decoding"):
            skipped["speculative decoding"] += 1
            continue
        engine = engine_of(p["engine"] or "")
        model = resolve_model(p.get("base_model"), p["model"])
        gpu = gpu_preset(p.get("gpu_id") or p.get("gpu_id_guess"))
        if not (engine and model and gpu):
            skipped["no engine, model or GPU preset"] += 1
            continue
        tp, pp, ep, n = (p.get(k) or 1 for k in ("tensor_parallel", "pipeline_parallel", "expert_parallel", "num_gpus"))
        if n not in (tp * pp, tp) and not (engine == "llamacpp" and tp == 1):
            skipped["data-parallel replicas (GPUs > tp x pp)"] += 1
            continue
        # NOTE: TensorRT-LLM's --tp N --ep M runs attention over the N ranks unless the config enables
        # attention DP; the sources say so in their quote (enable_attention_dp) or row (decode_dp_attention).
        text = (p["quote"] + " " + (p.get("notes") or "")).replace(" ", "").lower()
        dp_attention = "enable_attention_dp:true" in text or '"decode_dp_attention":true' in text
        why = unexpressed(model, tp, ep, dp_attention) if model else None
        if why:
            skipped[why] += 1
            continue
        if engine == "llamacpp" and n > 1 and tp == 1:
            pp = n  # llama.cpp's default layer split
        value = float(p["value"])
        if metric == "output_tok_s_per_gpu":
            metric, value = "output_tok_s_total", value * n
        if metric == "prefill_tok_s":
            if not p.get("input_len"):
                skipped["prompt speed without a prompt length"] += 1
                continue
            metric, value = "ttft_ms", 1000 * p["input_len"] / value
        if metric == "output_tok_s_per_user":
            metric, value = "tpot_ms", 1000 / value
        if metric == "itl_ms":
            metric = "tpot_ms"
        if metric not in ("tpot_ms", "ttft_ms", "output_tok_s_total", "e2e_latency_s"):
            skipped[f"metric {metric}"] += 1
            continue
        if regime == "burst_all_at_once" and model.startswith("gpt-oss"):
            # NOTE: the perf overview's GPT-OSS runs are OpenAI's MXFP4 checkpoints (its FP4 / FP8 model lists, the
            # ModelOpt checkpoints, do not name them; "(FP4)" / "(FP8)" is the column's precision); its recipe's
            # `kv_cache_config: dtype: fp8` is for Blackwell ("# Hopper: use auto": the model's bf16)
            p = {**p, "weight_dtype": "mxfp4", "kv_cache_dtype": "bf16" if gpu in ("h100", "h200") else "fp8"}
        batch = p.get("batch_size") if regime != "closed_loop_concurrency" else None
        conc = p.get("concurrency") if regime == "closed_loop_concurrency" else None
        if regime == "single_stream_batch1":
            batch = 1
        if not (batch or conc) or not p.get("input_len") and metric != "tpot_ms":
            skipped["no batch, concurrency or lengths"] += 1
            continue
        kv = "fp8" if str(p.get("kv_cache_dtype") or "").startswith("fp8") else "bf16"
        if (
            p.get("kv_cache_dtype") is None
            and engine == "trtllm"
            and dtype_of(p.get("weight_dtype")) in ("fp8", "nvfp4")
        ):
            # NOTE: TensorRT-LLM's fp8/fp4 checkpoints (trtllm-bench, the perf-overview tables) quantize
            # the KV cache with the weights; with bf16 KV several of these points would beat the ceiling.
            kv = "fp8"
        source = (
            "/".join(p["source_url"].split("/")[2:5])
            if "github.com" in p["source_url"]
            else p["source_url"].split("/")[2]
        )
        if engine == "llamacpp" and source in LEGACY_LLAMACPP:
            engine = "llamacpp.legacy"
        row = dict(id=p["id"], source=source, model=model, gpu=gpu, tp=tp, pp=pp, ep=ep, dp_attention=int(dp_attention), engine=engine,
                 dtype=dtype_of(p.get("weight_dtype")) or "", kv_dtype=kv, regime=regime, batch=batch or "",
                 concurrency=conc or "", prompt=p.get("input_len") or 0, new=p.get("output_len") or 128,
                 range_ratio=INFERENCEX_RANGE_RATIO if "InferenceX" in p["source_url"] and conc else "",
                 metric=metric, value=value, source_url=p["source_url"], quote=p["quote"])  # fmt: skip
        run = re.search(r"InferenceX\b.*? dated (\d{4}-\d{2}-\d{2})", p.get("notes") or "")  # its rows say when
        if not (run and relaid(row, run.group(1), skipped, "InferenceX")):
            rows.append(row)
    return rows


def measured_stamp(r: dict) -> str:
    """An aiconfigurator row's `measured=` stamp as written (2026-01-14T22:26:21Z: its sweep's commit time,
    SPECULATIVE_SWEEPS; 2025-10-29T00:00:00.000Z: a day), "" where the row has none (the gap-analysis CSVs)."""
    found = re.search(r"measured=(\d{4}-\d{2}-\d{2}[^;,\s]*)", r["silicon_data_source"])
    return found.group(1) if found else ""


def measured_on(r: dict) -> str:
    """An aiconfigurator row's measured date (YYYY-MM-DD), "" where the row has none (the gap-analysis CSVs)."""
    return measured_stamp(r)[:10]


def aic_range_ratio(data_source: str) -> float | str:
    """InferenceX's runs (the DB dump's rows and the dated CSVs: its 1k/1k, 1k/8k, 8k/1k grid, the
    same TPOTs as its published rows) draw each request's lengths from [0.8 L, L]; the
    gap-analysis CSVs say nothing, so their lengths are taken as fixed ("")."""
    return "" if "gap-analysis" in data_source else INFERENCEX_RANGE_RATIO


def delay_batching(model: str, gpu: str, dtype: str, isl: int, osl: int, tp: int, conc: int, version: str) -> bool:
    """Whether an InferenceX TensorRT-LLM run held new prompts back by TensorRT-LLM's delay batching
    (batch_wait_timeout_iters, batch_wait_max_tokens_ratio; both 0, off, by default): a prompt waits up to
    that many iterations for others to fill the token budget, so the run's TTFT measures the setting, not
    the default scheduler kvcalc models. Its TTFT is not fitted; its TPOT is.
    NOTE: InferenceX's launch scripts (github.com/SemiAnalysisAI/InferenceX): benchmarks/70b_fp8_b200_trt_slurm.sh,
    70b_fp4_b200_trt_slurm.sh and 70b_fp8_h200_trt_slurm.sh, from 1b563c85 (2025-09-18) until Llama-3.1-70B left
    the sweep (2582bce4, 2025-10-29; the sample's rows are all measured that day): `if ISL == 1024 && OSL == 1024
    && TP < 8`: 20 iterations, ratio 0.9; benchmarks/dsr1_fp8_b200_trt.sh from ec7bafaa (2026-01-29, the
    release:1.2.0rc6.post2 container on): 1k / 1k at CONC >= 64: 40 iterations, ratio 0.8. On the Llama runs it
    shows: at 4 clients on one B200 the 1k / 1k TTFT is 383 ms, the 1k / 8k one 104 ms, same prompts."""
    if isl != 1024 or osl != 1024:
        return False
    if model == "llama-3.1-70b":
        return tp < 8
    before = version == "" or version.startswith(("1.0", "1.1"))
    return model == "deepseek-v3" and gpu == "b200" and dtype == "fp8" and conc >= 64 and not before


def client_cap_as_concurrency(model: str, gpu: str, engine: str, conc: int, date: str) -> bool:
    """Whether an InferenceX run's recorded concurrency is its client's cap, not its clients: from d22bf9ca
    (2025-11-21) until 4e135fd3 ("fix h100 docker error", 2025-12-08), benchmarks/gptoss_fp4_h100_docker.sh
    called bench_serving with `--max-concurrency 512` and `--num-prompts $(( CONC * 10 ))`, so each run sent
    its 10 x CONC prompts at once and was recorded at 512 clients, whatever CONC was. The run kvcalc would
    simulate is not the one measured (its TPOTs read up to 10x under the ceiling), and CONC is not in the
    row: neither figure is fitted."""
    return (model, gpu, engine, conc) == ("gpt-oss-120b", "h100", "vllm", 512) and "2025-11-21" <= date <= "2025-12-08"


def disaggregated_as_agg(gpu: str, date: str) -> bool:
    """Whether an aiconfigurator "agg" row is one of InferenceX's early GB200 runs: until 93e1b3ca ("multinode
    first class integration", 2025-12-05) its GB200 runner (runners/launch_gb200-nv.sh) launched only Dynamo's
    disaggregated multi-node jobs (TensorRT-LLM's submit_disagg.sh, SGLang's prefill / decode configs), and the
    database recorded the runs of 2025-11 as aggregated with tp the job's GPU count (12 to 72). kvcalc would
    read one engine of tp 32 or 64 serving every client (a TPOT 3-14x over the measured one): not fitted."""
    return gpu == "gb200" and bool(date) and date < "2025-12-05"


# NOTE: an aiconfigurator row's `measured=` stamp is the time of the InferenceX commit whose sweep ran it, 3-5 s
# after it (github.com/SemiAnalysisAI/InferenceX: 2026-01-14T22:26:21Z is bf3456727's 22:26:18, 2026-03-27T08:01:51Z
# cec542a9's 08:01:48; 42 of the sample's 55 stamps, 2025-12-31 to 2026-03-27, are 3-5 s after a commit), and a
# PR's sweep runs the configurations it changed. These four PRs changed only `spec-decoding: mtp` configurations
# (.github/configs/nvidia-master.yaml), so their sweeps' runs decoded speculatively, several tokens a step, while
# the dump records neither the flag nor the draft: read as plain decoding, their TPOTs are 1.4-1.6x under what one
# token a step takes (DeepSeek-R1 under TensorRT-LLM; two were the only TPOTs under the ceiling), beside 0.8-1.07x
# for the same setups' other runs. Not fitted.
SPECULATIVE_SWEEPS = {
    "2026-01-14T22:26:21Z": "bf3456727, #392 Add MTP Benchmark Support for DeepSeek-R1 TRT",
    "2026-02-05T19:55:05Z": "5d517074c, #632 dsr1 fp8 b200 trt agg mtp update",
    "2026-02-06T17:21:58Z": "0aae52d4c, #642 dsr1 fp4 b200 trt agg mtp update",
    "2026-03-20T22:08:23Z": "35d4bb367, #898 Add Qwen3.5 FP8 B200 SGLang MTP config (EAGLE, 3 steps, 4 draft tokens)",
}


def speculative_sweep(r: dict) -> bool:
    """Whether an aiconfigurator row was measured by the sweep of an InferenceX PR that changed only speculative
    decoding (MTP) configurations (SPECULATIVE_SWEEPS)."""
    return measured_stamp(r) in SPECULATIVE_SWEEPS


def relaid(row: dict, date: str, skipped: Counter, source: str) -> bool:
    """Give an InferenceX run recorded at ep 1 without DP attention the layout its launch script chose
    (inferencex_launch.script_layout), in place, with the launch flags of that layout; True where kvcalc cannot
    run that layout (the run is then not fitted). A run is matched to its other copies (RUN_COLUMNS) before this,
    on the layout its row records."""
    if (int(row["ep"]), row["dp_attention"]) != (1, 0):
        return False
    args = (row["engine"], row["model"], row["gpu"], row["dtype"], row["prompt"], row["new"], row["tp"])
    chosen = script_layout(*args, row["concurrency"], date)
    if chosen is None:
        return False
    ep, dp = chosen
    if unexpressed(row["model"], row["tp"], ep, dp):
        skipped[f"{source}: the layout its launch script chose, refused by kvcalc"] += 1
        return True
    row.update(ep=ep, dp_attention=int(dp))
    if "launch" in row:  # the shared points carry no launch flags
        row["launch"] = launch(*args, row["concurrency"], date, dp)
    skipped[f"{source}: read with the layout its launch script chose, not the one its row records (kept)"] += 1
    return False


INFERENCEX_APP = "github.com/vngcloud/InferenceX-app"  # InferenceX's own rows (its app's fixture), a source of points
# A run's configuration in points.csv columns, its figures aside.
RUN_COLUMNS = ("model", "gpu", "tp", "ep", "dp_attention", "engine", "dtype", "concurrency", "prompt", "new")


def from_aic(skipped: Counter) -> list[dict]:
    rows = []
    seen: set[tuple] = set()
    with open(SHARED / "aic_silicon_sample.csv", newline="") as fh:
        # NOTE: a run in several of the sample's files is read from a dated copy where it has one: the date
        # says how it was launched (inferencex_launch) and that its client drew its lengths (aic_range_ratio)
        sample = sorted(csv.DictReader(fh), key=lambda r: measured_on(r) == "")
        for r in sample:
            date = measured_on(r)
            if r["mode"] != "agg":
                skipped["aiconfigurator: disaggregated"] += 1
                continue
            model = resolve_model(r["model_path"])
            gpu = AIC_GPU.get(r["system"])
            if not (model and gpu):
                skipped["aiconfigurator: no model or GPU preset"] += 1
                continue
            layout = aic_layout(r, model)
            if isinstance(layout, str):
                skipped[f"aiconfigurator: {layout}"] += 1
                continue
            tp, ep, dp_attention = layout
            found = re.search(r"silicon_concurrency=(\d+)", r["silicon_data_source"])
            if not found:
                skipped["aiconfigurator: no concurrency in the row"] += 1
                continue
            conc = int(found.group(1))
            if unstated_schedulers(r, conc, tp, dp_attention):
                skipped["aiconfigurator: concurrency over more schedulers than the layout states"] += 1
                continue
            prec = r["precision"]
            dtype = {"fp8": "fp8", "int4": "int4", "bf16": "bf16"}.get(prec, "nvfp4" if prec == "fp4" else "")
            if model.startswith("gpt-oss") and prec == "fp4":
                dtype = ""  # its native mxfp4 experts
            base = dict(source="github.com/ai-dynamo/aiconfigurator", model=model, gpu=gpu, tp=tp,
                        pp=1, ep=ep, dp_attention=int(dp_attention), engine=r["backend"], dtype=dtype, kv_dtype="fp8" if prec in ("fp8", "fp4") else "bf16",
                        regime="closed_loop_concurrency", batch="", concurrency=conc, prompt=int(r["isl"]),
                        new=int(r["osl"]), range_ratio=aic_range_ratio(r["silicon_data_source"]),
                        launch=launch(r["backend"], model, gpu, dtype, int(r["isl"]), int(r["osl"]), tp, conc, date, dp_attention), source_url="https://github.com/ai-dynamo/aiconfigurator/blob/095f58a51/aic-core/src/aiconfigurator_core/systems/silicon_sample.csv",
                        quote=f"row {r['id']}")  # fmt: skip
            # NOTE: the sample gathers several snapshot files, and some runs are in two or three of them (ids such
            # as 2026_03_25_..._486 and 2026_04_06_..._1476): one run, kept once. Compared to the hundredth of a
            # millisecond, the precision of the gap-analysis CSVs, which copy InferenceX's runs rounded (765.49 for
            # 765.4942006920464), and past the float noise between the dated CSVs (13.342251993056447 / ...449).
            run = tuple(str(base[k]) for k in RUN_COLUMNS)
            run += (f"{float(r['silicon_ttft_ms']):.2f}", f"{float(r['silicon_tpot_ms']):.2f}")
            if run in seen:
                skipped["aiconfigurator: a run already read from another snapshot file of the sample"] += 1
                continue
            seen.add(run)
            if speculative_sweep(r):
                skipped["aiconfigurator: a speculative-decoding (MTP) sweep's run recorded as plain decoding"] += 1
                continue
            if relaid(base, date, skipped, "aiconfigurator"):
                continue
            if disaggregated_as_agg(gpu, date):
                skipped[
                    "aiconfigurator: a disaggregated GB200 run recorded as aggregated (InferenceX's 2025-11 runner)"
                ] += 1
                continue
            if client_cap_as_concurrency(model, gpu, r["backend"], conc, date):
                skipped[
                    "aiconfigurator: concurrency recorded as the client's cap (InferenceX's gpt-oss H100 script)"
                ] += 1
                continue
            if r["backend"] == "trtllm" and delay_batching(
                model, gpu, dtype, int(r["isl"]), int(r["osl"]), tp, conc, r["backend_version"]
            ):
                skipped["aiconfigurator: TTFT under TensorRT-LLM's delay batching (InferenceX's launch flags)"] += 1
            else:
                rows.append(dict(base, id=r["id"] + ":ttft", metric="ttft_ms", value=float(r["silicon_ttft_ms"])))
            rows.append(dict(base, id=r["id"] + ":tpot", metric="tpot_ms", value=float(r["silicon_tpot_ms"])))
    return rows


def from_inferencex(skipped: Counter) -> list[dict]:
    """InferenceX's DeepSeek-R1 rows on B200, B300, MI300X, MI325X and MI355X (benchmarks/calibration/
    inferencex_rows.json, copied from the InferenceX-app fixture the shared H200 points come from): mean
    TTFT and TPOT. Their per-GPU throughput is left out: the rows' GPU count reads tp x ep on EP runs."""
    data = json.loads((ROOT / "benchmarks" / "calibration" / "inferencex_rows.json").read_text())
    rows = []
    for x in data["rows"]:
        hw, engine = x["hardware"], {"trt": "trtllm"}.get(x["framework"], x["framework"])
        if hw.startswith("mi") and x["precision"] == "fp4":
            # NOTE: AMD's MXFP4 DeepSeek runs its GEMMs in fp4 on CDNA4; kvcalc multiplies mxfp4 in 16-bit
            skipped["InferenceX: MXFP4 (w4a4) on MI355X, not modelled"] += 1
            continue
        model = resolve_model("deepseek-ai/DeepSeek-R1-0528")
        tp, ep, dp = x["decode_tp"], x["decode_ep"], bool(x["decode_dp_attention"])
        why = unexpressed(model, tp, ep, dp) if model else "no model preset"
        if why:
            skipped[f"InferenceX: {why}"] += 1
            continue
        dtype = "fp8" if x["precision"] == "fp8" else "nvfp4"
        # the shared InferenceX points' rule: TensorRT-LLM's quantized checkpoints quantize the KV cache
        kv = "fp8" if engine == "trtllm" else "bf16"
        layout = f"tp{tp}ep{ep}" + ("dp" if dp else "")
        name = f"ix-{hw}-{x['framework']}-{x['precision']}-{layout}-{x['isl']}-{x['osl']}-c{x['conc']}"
        base = dict(source=INFERENCEX_APP, model=model, gpu=hw, tp=tp, pp=1, ep=ep,
                    dp_attention=int(dp), engine=engine, dtype=dtype, kv_dtype=kv, regime="closed_loop_concurrency",
                    batch="", concurrency=x["conc"], prompt=x["isl"], new=x["osl"], range_ratio=INFERENCEX_RANGE_RATIO,
                    launch=launch(engine, model, hw, dtype, x["isl"], x["osl"], tp, x["conc"], x["date"], dp),
                    source_url=data["source_url"])  # fmt: skip
        if relaid(base, x["date"], skipped, "InferenceX"):
            continue
        m = x["metrics"]
        metrics = [("ttft_ms", "mean_ttft"), ("tpot_ms", "mean_tpot")]
        version = (x["image"] or "").rpartition("release:")[2]
        if engine == "trtllm" and delay_batching(model, hw, dtype, x["isl"], x["osl"], tp, x["conc"], version):
            skipped["InferenceX: TTFT under TensorRT-LLM's delay batching (its launch flags)"] += 1
            metrics = metrics[1:]
        for metric, key in metrics:
            quote = (
                f"{hw} {x['framework']} dsr1 {x['precision']} {layout} isl {x['isl']} osl {x['osl']} conc {x['conc']}"
            )
            quote += f" ({x['image']}, {x['date']}, {x['run_url']}): {key} {m[key]}"
            rows.append(dict(base, id=f"{name}-{metric[:4]}", metric=metric, value=1000 * m[key], quote=quote))
    return rows


def inferencex_not_in(aic: list[dict], rows: list[dict], skipped: Counter) -> list[dict]:
    """`rows` less InferenceX's own figures of runs aiconfigurator's sample also holds: the sample is a dump of
    InferenceX's database, so a run there with the same configuration and the same figures (to 1e-4) is the same
    run, which read from both sources would weigh twice and, left one source out, be predicted by a fit that saw
    it. A figure only InferenceX's row has (the shared H200 rows' output throughput) stays."""

    def runs(rows: list[dict], base) -> dict[str, dict]:  # each run's configuration and figures, by id
        out: dict[str, dict] = {}
        for r in rows:
            run = out.setdefault(base(r["id"]), {"config": tuple(str(r[k]) for k in RUN_COLUMNS), "figures": {}})
            run["figures"][r["metric"]] = float(r["value"])
        return out

    held: dict[tuple, list[dict]] = {}
    for run in runs(aic, lambda i: i.rpartition(":")[0]).values():
        held.setdefault(run["config"], []).append(run["figures"])

    def same(mine: dict, theirs: dict) -> set[str]:  # the figures both hold, where they agree
        both = mine.keys() & theirs.keys()
        return both if all(math.isclose(mine[k], theirs[k], rel_tol=1e-4) for k in both) else set()

    ix = [r for r in rows if r["source"] == INFERENCEX_APP]
    twice: dict[str, set[str]] = {}
    for name, run in runs(ix, lambda i: i.rpartition("-")[0]).items():
        for figures in held.get(run["config"], []):
            twice[name] = twice.get(name) or same(run["figures"], figures)
    kept = [
        r for r in rows if r["source"] != INFERENCEX_APP or r["metric"] not in twice.get(r["id"].rpartition("-")[0], ())
    ]
    skipped["InferenceX: a figure of a run aiconfigurator's sample also holds"] += len(rows) - len(kept)
    return kept


def from_llamacpp() -> list[dict]:
    """llama-bench runs of recent llama.cpp builds on one GPU (benchmarks/calibration/llamacpp_rows.json):
    tg128 as TPOT (128 tokens from an empty cache), pp512 as TTFT (512 / its tokens/s)."""
    data = json.loads(LLAMACPP_ROWS.read_text())
    rows = []
    for x in data["rows"]:
        for test, speed in x["tests"].items():
            tokens = int(test[2:])
            prompt, metric, value = (
                (0, "tpot_ms", 1000 / speed) if test.startswith("tg") else (tokens, "ttft_ms", 1000 * tokens / speed)
            )
            rows.append(dict(
                id=f"lcpp-{x['gpu']}-{x['model']}-{x['quant']}-{x['build'].split()[-1].strip('()')}-{test}".replace(" ", ""),
                source="github.com/ggml-org/llama.cpp", model=x["model"], gpu=x["gpu"], tp=1, pp=1, ep=1, dp_attention=0,
                engine="llamacpp", dtype=x["quant"], kv_dtype="bf16", regime="single_stream_batch1", batch=1, concurrency="",
                prompt=prompt, new=tokens if test.startswith("tg") else 128, range_ratio="", metric=metric, value=value,
                source_url=x["source_url"], quote=x["quote"],
            ))  # fmt: skip
    return rows


def unexpressed(model: str, tp: int, ep: int, dp_attention: bool) -> str | None:
    """Why kvcalc cannot run (tp, ep, dp_attention) for `model` (cost/fabric.check_layout), or None."""
    from kvcalc.cost.fabric import check_layout
    from kvcalc.model.presets import get_model

    try:
        check_layout(get_model(model), tp, ep, dp_attention)
    except Exception:
        return "expert layout kvcalc refuses (ep must divide tp and the expert count)"
    return None


def unstated_schedulers(r: dict, concurrency: int, tp: int, dp_attention: bool) -> bool:
    """Whether an aiconfigurator row's clients were spread over schedulers its layout does not state.
    NOTE: batch_size is one scheduler's share of the clients, so concurrency / batch_size is the number
    of schedulers: the attention-DP ranks (tp of them with DP attention) or 1. Otherwise the row is one
    of several replicas or an unstated DP layout: Qwen3-32B NVFP4 on tp 2 at 416 clients has a batch_size
    of 13 (32 schedulers); read as one engine, its 13.7 ms TPOT beat the ceiling 1.6 times."""
    return bool(r["batch_size"]) and concurrency != int(r["batch_size"]) * (tp if dp_attention else 1)


def aic_layout(r: dict, model: str) -> tuple[int, int, bool] | str:
    """An aiconfigurator row's layout as kvcalc's (tp = GPUs, ep, dp_attention), or why it has none.

    aiconfigurator writes attention as tp_size x attention_dp_size and MoE as moe_tp_size x moe_ep_size
    over the same GPUs (0 or empty: 1). kvcalc's tp is those GPUs; its DP attention is attention DP over
    all of them (attention tp 1); its ep divides tp, each expert split over tp / ep ranks (moe_tp)."""
    from kvcalc.model.presets import get_model

    def n(key: str) -> int:
        return int(r[key]) if r[key] not in ("", "0") else 1

    tp, dp, mtp, mep = n("tp_size"), n("attention_dp_size"), n("moe_tp_size"), n("moe_ep_size")
    if n("pp_size") != 1:
        return "pipeline layout"
    moe = get_model(model).is_moe
    if dp == 1 and mep == 1:
        if moe and mtp > tp:  # e.g. tp 1 with moe_tp 2: a data-parallel attention the row does not state
            return "MoE tensor parallelism over more GPUs than attention's, attention DP not stated"
        return tp, 1, False  # tensor parallel alone (a dense model's MoE columns mean nothing)
    if mtp == mep:
        # NOTE: every such row has tp x dp = moe_tp x moe_ep = N^2 GPUs, while ids such as
        # ..._tp2_ep2_927 (tp_size 4) name N: a dump artefact; which N x N layout ran is ambiguous.
        return "moe_tp = moe_ep with tp x dp their product (ambiguous: the id names half the GPUs)"
    gpus = tp * dp
    if mtp * mep != gpus:
        return "attention and MoE layouts over different GPU counts"
    if dp > 1 and tp > 1:
        return "attention DP with attention TP > 1 (kvcalc's DP attention is attention TP 1)"
    if gpus > 8 and not r["system"].startswith("gb"):
        return "more GPUs than one 8-GPU node"
    if not moe:
        return "expert parallelism on a dense model"
    why = unexpressed(model, gpus, mep, dp > 1)
    return why if why else (gpus, mep, dp > 1)


def write_rows(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, FIELDS)
        w.writeheader()
        w.writerows(rows)


def write_held_out(held: list[dict], fitted: set[str]) -> None:
    """The held-out set's rows of HELD_OUT_MODELS and its bursts replaced by `held`; its other rows kept as they
    are, less those the fit now reads (ids in `fitted`: a model taken off HELD_OUT_MODELS moves to the
    calibration). Written in the file's own columns."""
    with open(HOLDOUT, newline="") as fh:
        reader = csv.DictReader(fh)
        columns = list(reader.fieldnames or FIELDS)
        drop = fitted | {r["id"] for r in held}
        kept = [r for r in reader if r["model"] not in HELD_OUT_MODELS and r["id"] not in drop]
    with open(HOLDOUT, "w", newline="") as fh:
        w = csv.DictWriter(fh, columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(kept + held)


def main() -> int:
    if not SHARED.exists():
        print(f"needs {SHARED}", file=sys.stderr)
        return 1
    sys.path.insert(0, str(ROOT))
    skipped: Counter = Counter()
    shared, aic, ix = from_points(skipped), from_aic(skipped), from_inferencex(skipped)
    rows = inferencex_not_in(aic, shared, skipped) + aic + inferencex_not_in(aic, ix, skipped) + from_llamacpp()
    # asked of the command line, engines as users name them: HELD_OUT_MODELS and the bursts (trtllm_bench_burst)
    held = [r for r in rows if r["model"] in HELD_OUT_MODELS or r["regime"] == "burst_all_at_once"]
    rows = [r for r in rows if r["model"] not in HELD_OUT_MODELS and r["regime"] != "burst_all_at_once"]
    from kvcalc.engines.kernels import build_of

    # NOTE: vLLM on an AMD Instinct GPU runs ROCm's build (AITER kernels, HIP graphs; the calibration's runs are
    # AMD's rocm/vllm-dev, vLLM 0.10, timed offline by benchmark_latency, whose synchronous loop runs each
    # sequence's scheduling, input preparation and sampling between GPU steps): "vllm.rocm", its per-step,
    # per-sequence and per-layer costs fitted apart from vLLM's on NVIDIA GPUs. Read as one build, ROCm's batch
    # sweep (Llama-3.1-70B on 8 x MI300X: 8.5 ms a token at batch 1, 25.6 ms at 128) had set vLLM's
    # per-sequence cost to 63 us on every NVIDIA step too.
    for r in rows:
        r["engine"] = build_of(r["engine"], r["gpu"])
    OUT.parent.mkdir(parents=True, exist_ok=True)
    write_rows(OUT, rows)
    print(f"{len(rows)} points -> {OUT.relative_to(ROOT)}")
    write_held_out(held, {r["id"] for r in rows})
    print(f"  held out {len(held)}: {', '.join(HELD_OUT_MODELS)}, trtllm-bench bursts -> {HOLDOUT.relative_to(ROOT)}")
    for why, n in skipped.most_common():
        print(f"  skipped {n}: {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
