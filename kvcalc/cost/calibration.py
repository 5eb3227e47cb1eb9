"""The estimate's constants: the shipped fit (cost/calibration.json, written by scripts/calibrate.py
from benchmarks/calibration/) loaded lazily on first use, and a user's own fit for one GPU + engine
(`kvcalc calibrate`, saved under $KVCALC_PRESETS/calibration/) laid over it."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from kvcalc.hardware.gpu import GpuSpec

SHIPPED = Path(__file__).with_name("calibration.json")

# NOTE: the starting point of a fit and the fallback if the shipped file is missing; values from
# speed_facts.md (AIC kernel tables, BLIS's vLLM overheads, nccl-tests), not a fit.
STARTING: dict[str, float] = {
    "bw_eff": 0.8,
    "kv_eff": 0.7,
    "mfu": 0.6,
    "gemv_layer_bytes": 4e6,
    "mfu_tokens": 64.0,
    "decode_layer_s": 15e-6,
    "prefill_layer_s": 60e-6,
    "attn_layer_s": 8e-6,
    "moe_layer_s": 40e-6,
    "ar_alpha_s": 6e-6,
    "ar_alpha_s.pcie": 7.5e-6,  # NCCL, 16 KB, 2 x L40S; x (1 + 0.8 (tp - 2)): 42 us at 8 (AIC nccl_perf)
    "ar_alpha_s.if": 12e-6,
    "ar_alpha_tp": 0.1,
    "ar_alpha_tp.pcie": 0.8,
    "ar_bw_eff": 0.75,
    "ar_bw_eff.pcie": 0.5,
    "step_s": 300e-6,
    "seq_s": 5e-6,
    "ttft_queue": 30.0,
    "interval.decode.lo": 0.8,
    "interval.decode.hi": 1.25,
    "interval.prefill.lo": 0.75,
    "interval.prefill.hi": 1.35,
}


@lru_cache(maxsize=1)
def shipped() -> tuple[dict[str, float], str]:
    """The package's fitted constants and their one-line provenance."""
    if not SHIPPED.exists():
        return dict(STARTING), "estimate (uncalibrated starting constants)"
    data = json.loads(SHIPPED.read_text())
    consts = dict(STARTING)
    consts.update(data["constants"])
    return consts, f"estimate (kvcalc calibration: {data['points']} public points, {data['sources']} sources)"


def user_file(gpu: str, engine: str) -> Path:
    from kvcalc.model.presets import user_dir

    return user_dir() / "calibration" / f"{gpu}--{engine}.json"


def constants_for(gpu: GpuSpec | str, engine: str) -> tuple[dict[str, float], str]:
    """(constants, basis) for a GPU + engine: the user's calibration when one was saved, else the shipped fit."""
    consts, basis = shipped()
    name = gpu if isinstance(gpu, str) else gpu.name
    path = user_file(name, engine)
    if path.exists():
        try:
            data = json.loads(path.read_text())
            mine = {k: float(v) for k, v in data["constants"].items()}
        except (OSError, ValueError, KeyError, TypeError):
            return consts, basis + f"; ignored unreadable {path}"
        merged = dict(consts)
        merged.update(mine)
        return merged, f"estimate (your calibration for {name} + {engine}: {data.get('points', '?')} points, {path})"
    return consts, basis
