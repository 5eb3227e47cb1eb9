"""The scheduler limits InferenceX launched its engines with, for the calibration's runs that are InferenceX's
(aiconfigurator's DB-dump rows with a measured date, and InferenceX's own rows, up to READ_UNTIL):
scripts/import_calibration.py writes them to points.csv's `launch` column, and the fit simulates each run under
them (plan/serve_pool.serving_limits) instead of under the engine's defaults.

Read from github.com/SemiAnalysisAI/InferenceX, the launch script in effect on the run's date (benchmarks/*.sh,
from 2026-02-19 benchmarks/single_node/fixed_seq_len/*.sh). Only flags that move the scheduler are kept, as
kvcalc's Limits names: max_num_seqs (vLLM --max-num-seqs, SGLang --max-running-requests, TensorRT-LLM
--max_batch_size), max_num_batched_tokens (vLLM --max-num-batched-tokens, SGLang --chunked-prefill-size,
TensorRT-LLM --max_num_tokens), max_prefill_tokens (SGLang --max-prefill-tokens) and recv_interval (SGLang
--scheduler-recv-interval: new requests are read every that many decode iterations; SGLang refuses it with DP
attention). A flag that cannot bind (--max-num-seqs equal to the clients, or 512 against at most 512) is left
out. Runs without a measured date (the gap-analysis CSVs: Llama-3.1-8B, Qwen3-32B, Qwen3-235B; InferenceX has no
scripts for them) and combinations whose script was not read (DeepSeek-R1 under SGLang on B300 and GB200) or
that set no such flag (GLM-5 on H200) keep the engine's defaults. NOTE: the pool flags (--mem-fraction-static, free_gpu_memory_fraction,
--gpu-memory-utilization) are not applied: the pool stays the engine model's default.

script_layout gives the expert and attention-DP layout a script chose where the run's row records another
(scripts/import_calibration.py reads the run with it)."""

from __future__ import annotations

READ_UNTIL = "2026-04-30"  # the scripts were read up to this date; later runs keep the defaults

SG_32K = {"max_num_batched_tokens": 32768, "max_prefill_tokens": 32768}
SG_16K = {"max_num_batched_tokens": 16384, "max_prefill_tokens": 16384}


def _recv(model: str, gpu: str, dtype: str, tp: int, conc: int, date: str) -> dict[str, int]:
    """--scheduler-recv-interval: dsr1_fp{8,4}_b200*.sh ("recv every ~10 requests; if CONC >= 16, relax to ~30"; 10 on
    the fp8 tp 4 recipe), qwen3.5_*_b200.sh and B300's bf16 / fp4 (30 above 4 clients, else 10), qwen3.5_fp8_b300.sh
    (10), GLM-5 fp4 from 475cc1db (10)."""
    if model == "deepseek-v3" and gpu == "b200":
        return {"recv_interval": 10 if tp == 4 and dtype == "fp8" else (30 if conc >= 16 else 10)}
    if model == "qwen3.5-397b-a17b" and gpu in ("b200", "b300"):
        return {"recv_interval": 10 if (gpu, dtype) == ("b300", "fp8") else (30 if conc > 4 else 10)}
    if model == "glm-5" and dtype == "nvfp4" and gpu in ("b200", "b300") and date >= "2026-04-09":
        return {"recv_interval": 10}
    return {}


def _sglang(model: str, gpu: str, dtype: str, isl: int, osl: int, tp: int, conc: int, date: str) -> dict[str, int]:
    if model == "deepseek-v3":
        if gpu == "h200":  # dsr1_fp8_h200_slurm.sh (e9dd89c0 on): 512 seats at 1k / 1k, else 256
            return {"max_num_seqs": 512 if (isl, osl) == (1024, 1024) else 256, **SG_32K}
        # dsr1_fp8_b200_docker.sh; its tp 4 8k / 1k recipe from 1d29967c (2026-01-13)
        if gpu == "b200" and dtype == "fp8":
            if tp == 4 and (isl, osl) == (8192, 1024) and date >= "2026-01-13":
                return {"max_num_seqs": 32, "max_num_batched_tokens": 8192, "max_prefill_tokens": 8192}
            return {"max_num_seqs": 128, **SG_32K}
        if gpu == "b200" and dtype == "nvfp4":  # dsr1_fp4_b200_docker.sh: --max-prefill-tokens left at 16,384
            return {"max_num_seqs": 256, "max_num_batched_tokens": 16384}
        return {}
    if model == "qwen3.5-397b-a17b":
        if gpu == "h200":  # qwen3.5_fp8_h200.sh (f65d6b4b)
            return {"max_num_seqs": 128, "max_num_batched_tokens": 16384}
        if gpu == "b300" and dtype == "fp8":  # qwen3.5_fp8_b300.sh (c0f62a2e): --max-running-requests $CONC
            return dict(SG_16K)
        if gpu == "b200" and dtype == "fp8" and date >= "2026-04-30":  # 51529419: 16k budgets, seats unset
            return dict(SG_16K)
        return {"max_num_seqs": 128, **SG_32K}  # the B200 recipe (bf16, fp8, fp4; B300's bf16 and fp4)
    if model == "glm-5" and gpu in ("b200", "b300"):
        if dtype == "nvfp4" and date < "2026-04-09":  # d43805fc (2026-03-28): one 131,072-token chunk
            return {"max_num_batched_tokens": 131072}
        return dict(SG_32K)  # fp8 (13930ca6): --max-running-requests $CONC; fp4 from 475cc1db: seats unset
    return {}


def _vllm(model: str, gpu: str, dtype: str, isl: int, conc: int, date: str) -> dict[str, int]:
    if model == "minimax-m2.5":
        if gpu == "h100":  # minimaxm2.5_fp8_h100.sh (ac0d2a85)
            return {"max_num_seqs": 256} if conc > 256 else {}
        if gpu == "b300" or (gpu == "b200" and (dtype == "nvfp4" or date >= "2026-04-03")):
            return {"max_num_batched_tokens": 2 * isl}  # bddbf403 (2026-04-03) on: --max-num-batched-tokens $((ISL*2))
    if model == "kimi-k2.5" and gpu == "b200" and dtype == "nvfp4" and date >= "2026-04-20":
        return {"max_num_batched_tokens": 2 * isl}  # 6c3acebf
    return {}


def _trtllm(model: str, gpu: str, dtype: str, isl: int, conc: int, date: str) -> dict[str, int]:
    if model == "llama-3.1-70b":  # 70b_*_trt_slurm.sh: --max_num_tokens 16384, no --max_batch_size
        return {"max_num_batched_tokens": 16384}
    if model == "gpt-oss-120b":  # gptoss_fp4_{h200,b200}_trt_slurm.sh: --max_num_tokens 20000
        return {"max_num_batched_tokens": 20000}
    if model == "deepseek-v3" and dtype == "fp8" and gpu in ("h200", "b200"):
        # dsr1_fp8_{h200,b200}_trt*.sh: --max_num_tokens C + ISL + 64 up to a multiple of 64 (at least 8,192 from
        # 64af5a77, 2026-01-21)
        tokens = -(-(conc + isl + 64) // 64) * 64
        return {"max_num_batched_tokens": max(tokens, 8192) if date >= "2026-01-21" else tokens}
    return {}


def launch(
    engine: str, model: str, gpu: str, dtype: str, isl: int, osl: int, tp: int, conc: int, date: str, dp: bool
) -> str:
    """The points.csv `launch` cell of an InferenceX run measured on `date` (YYYY-MM-DD; "": unknown, no flags).
    NOTE: InferenceX's SGLang scripts cap the seats (--max-running-requests) at or above their sweep's last
    concurrency; a run with more clients than the cap did not come from the script read (aiconfigurator's
    2026-03-25 snapshot holds DeepSeek-R1 fp8 and Qwen3.5 fp8 runs on B200 at 256 and 512 clients, beyond the
    128-seat scripts' sweeps, whose TTFTs of 2-3 s show no client waited for a seat): it keeps the defaults."""
    if not date or date > READ_UNTIL:
        return ""
    if engine == "sglang":
        flags = _sglang(model, gpu, dtype, isl, osl, tp, conc, date)
        if conc > flags.get("max_num_seqs", conc):
            return ""
        flags |= {} if dp else _recv(model, gpu, dtype, tp, conc, date)
    elif engine == "vllm":
        flags = _vllm(model, gpu, dtype, isl, conc, date)
    elif engine == "trtllm":
        flags = _trtllm(model, gpu, dtype, isl, conc, date)
    else:
        flags = {}
    return " ".join(f"{k}={v}" for k, v in flags.items())


LAYOUT_RECORDED = "2025-11-03"  # 17d5e204f: InferenceX's results record EP_SIZE and DP_ATTENTION from this day


def script_layout(
    engine: str, model: str, gpu: str, dtype: str, isl: int, osl: int, tp: int, conc: int, date: str
) -> tuple[int, bool] | None:
    """(ep, dp_attention) of an InferenceX run whose row records ep 1 without DP attention while its launch script
    chose otherwise; None where the row stands (or the run's date is unknown).

    - Until 17d5e204f (2025-11-03) InferenceX's results recorded neither (utils/process_result.py kept tp alone;
      aiconfigurator's dump reads ep 1, no DP), and its TensorRT-LLM scripts chose both from ISL, OSL and CONC
      (benchmarks/*_trt_slurm.sh as of e06929c7): dsr1_fp8_{b200,h200}: EP_SIZE=$TP, DP attention above a
      concurrency; dsr1_fp4_b200: expert parallelism above one, DP attention from 256 clients (8k / 1k: with it);
      gptoss_fp4_h200: --ep_size=$TP; gptoss_fp4_b200: EP and DP attention from 256 clients.
    - SGLang's dsr1_fp4_b200_docker.sh passed --enable-ep-moe (ep = tp) until d8fe8f73 (2025-11-10), whose
      --ep-size $EP_SIZE came with ep = tp in the config; the runs of those days read ep 1.
    - vLLM's minimaxm2.5_fp8_b200.sh from f342df18 (2026-03-11) until bddbf403 (2026-04-03) and _h200.sh from
      5e2c705d (2026-03-13) until 8014ee63 (2026-05-26) tested `[ "$EP_SIZE" -ge 1 ]`, so every run passed
      --enable-expert-parallel (vLLM's ep = tp) whatever the config's ep 1 said."""
    if not date or tp == 1:
        return None
    if engine == "trtllm" and date < LAYOUT_RECORDED:
        return _trt_layout_2025(model, gpu, dtype, isl, osl, tp, conc)
    if engine == "sglang" and (model, gpu, dtype) == ("deepseek-v3", "b200", "nvfp4") and date <= "2025-11-10":
        return tp, False
    if engine == "vllm" and (model, dtype) == ("minimax-m2.5", "fp8"):
        window = {"b200": ("2026-03-11", "2026-04-03"), "h200": ("2026-03-13", "2026-05-26")}.get(gpu)
        if window and window[0] <= date < window[1]:
            return tp, False
    return None


def _trt_layout_2025(
    model: str, gpu: str, dtype: str, isl: int, osl: int, tp: int, conc: int
) -> tuple[int, bool] | None:
    if model == "gpt-oss-120b":
        if gpu == "h200":
            return tp, False
        return (tp, True) if gpu == "b200" and conc >= 256 else None
    if model != "deepseek-v3" or gpu not in ("b200", "h200"):
        return None
    if dtype == "fp8":  # DP attention above this many clients
        over = {1024: {1024: 32 if gpu == "b200" else 64, 8192: 64}, 8192: {1024: 64 if gpu == "b200" else 32}}
        above = over.get(isl, {}).get(osl)
        return tp, above is not None and conc > above
    if dtype != "nvfp4" or gpu != "b200":
        return None
    ep_above = {(4, 1024, 1024): 32, (4, 1024, 8192): 32, (4, 8192, 1024): 32}
    ep_above |= {(8, 1024, 1024): 8, (8, 1024, 8192): 16, (8, 8192, 1024): 32}
    above = ep_above.get((tp, isl, osl))
    if above is None or conc <= above:
        return None
    return tp, conc >= 256 or isl == 8192
