"""The estimate's constants as the package and the user hold them: the shipped fit (kvcalc/cost/calibration.json,
written by scripts/calibrate.py from benchmarks/calibration/, and the same numbers as the module
cost/calibration_data.py that scripts/calibration_module.py writes from it), and a user's own fit for one
GPU + engine (`kvcalc calibrate`, saved under $KVCALC_PRESETS/calibration/) laid over it. The cost layer
takes the constants as an argument and reads no file."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from kvcalc.cost.calibration import STARTING, Calibration
from kvcalc.hardware.gpu import GpuSpec

if TYPE_CHECKING:
    from kvcalc.model.spec import ModelSpec


@lru_cache(maxsize=1)
def shipped() -> Calibration:
    """The package's fitted constants and their one-line provenance."""
    # NOTE: the module, not the json: every roofline and generate run loads the fit, and the module comes
    # from its bytecode without importing json (start-up time, benchmarks/startup.py).
    try:
        from kvcalc.cost import calibration_data as data
    except ImportError:  # pragma: no cover  (a checkout without the generated module)
        return dict(STARTING), "estimate (uncalibrated starting constants)"
    consts = dict(STARTING)
    consts.update(data.CONSTANTS)
    return consts, f"estimate (kvcalc calibration: {data.POINTS} public points, {data.SOURCES} sources)"


def user_file(gpu: str, engine: str) -> Path:
    from kvcalc.model.presets import user_dir

    return user_dir() / "calibration" / f"{gpu}--{engine}.json"


def refusal_warnings(
    engine: str | None, gpu_name: str, spec: ModelSpec | None = None, dtype: str | None = None,
    kv_dtype: str | None = None,
) -> list[str]:  # fmt: skip
    """The warnings a result carries where `engine` has no build for the GPU (engines/kernels.gpu_refusal),
    would not serve `spec`'s quantized checkpoint as `dtype` (checkpoint_refusal), has no such weight or cache type
    (llama.cpp: plan/quants.llamacpp_weights, engines/llamacpp/kv.cache_type, as `fit --engine llamacpp` refuses
    them) or, TensorRT-LLM and vLLM, serves no class for its architecture (engines/trtllm/models,
    engines/vllm/startup.unsupported_architecture): its figures, ceiling or estimate, are for a deployment that
    cannot be made as stated (a checkpoint quantized so could be served; another backend might be)."""
    from kvcalc.engines.kernels import checkpoint_refusal, gpu_refusal

    why = gpu_refusal(engine, gpu_name) if engine else None
    out = [f"not a real deployment: {why}"] if why else []
    if spec is not None and (why := checkpoint_refusal(spec, engine, dtype)):
        out.append(f"not a real deployment: {why}; the figures are the model's quantized as --dtype {dtype}")
    if dtype is not None and engine and engine.lower() == "llamacpp":  # a GGUF holds llama.cpp's types alone
        from kvcalc.errors import UsageError
        from kvcalc.plan.quants import llamacpp_weights

        try:
            llamacpp_weights(dtype)
        except UsageError as err:
            out.append(
                f"not a real deployment: {err.message} ({err.hint}); the figures are kvcalc's at --dtype {dtype}"
            )
    if kv_dtype is not None and engine and engine.lower() == "llamacpp":
        from kvcalc.engines.llamacpp.kv import cache_type
        from kvcalc.model.gguf.types import KV_CACHE_TYPES

        if cache_type(kv_dtype) is None:
            out.append(
                f"not a real deployment: llama.cpp has no {kv_dtype} KV cache "
                f"(-ctk/-ctv: {', '.join(KV_CACHE_TYPES)}); the figures are kvcalc's at --kv-dtype {kv_dtype}"
            )
    if spec is not None and engine and engine.lower() == "trtllm":
        from kvcalc.engines.trtllm.models import architecture_refusal

        if why := architecture_refusal(spec):
            out.append(f"not a real deployment: TensorRT-LLM would not start: {why}")
    if spec is not None and engine and engine.lower() == "vllm":
        from kvcalc.engines.vllm.startup import unsupported_architecture

        if why := unsupported_architecture(spec):
            out.append(f"not a real deployment: vLLM 0.19 would not start: {why}")
    return out


def constants_for(gpu: GpuSpec | str, engine: str) -> Calibration:
    """(constants, basis) for a GPU + engine: the user's calibration when one was saved, else the shipped fit."""
    consts, basis = shipped()
    name = gpu if isinstance(gpu, str) else gpu.name
    from kvcalc.engines.kernels import build_of, gpu_refusal

    if why := gpu_refusal(engine, name):  # no such deployment: the estimate says so wherever it is printed
        basis = basis[:-1] + f"; NOT A REAL DEPLOYMENT: {why}; timed as if it were)"
    build = build_of(engine, name)
    if build != engine:  # vLLM on ROCm: its build's fixed costs in place of vLLM's (NVIDIA-fitted) ones
        from kvcalc.cost.fitting import tagged_view

        consts = dict(tagged_view(consts, engine, build.partition(".")[2]))
        basis = basis[:-1] + f"; {engine} on {name}: the {build} build's fixed costs)"
    from kvcalc.hardware.family import gpu_family

    family = gpu_family(name)
    if not any(f"{b}.{family}" in consts or f"{b}.{family}.{engine}" in consts for b in ("bw_eff", "mfu")):
        # NOTE: no calibration run on the family (CDNA4, CDNA2, "other"): its bandwidth and FLOP efficiencies are
        # the fitted families' shared values, a guess the interval was not measured on
        where = f"{family} GPUs" if family != "other" else f"{name}'s family"
        basis = basis[:-1] + f"; no calibration run on {where}: the fitted families' shared efficiencies)"
    path = user_file(name, engine)
    if os.path.exists(path):  # NOTE: json is imported only when a user's file is there (start-up time)
        import json

        try:
            data = json.loads(path.read_text())
            mine = {k: float(v) for k, v in data["constants"].items()}
        except (OSError, ValueError, KeyError, TypeError):
            return consts, basis + f"; ignored unreadable {path}"
        merged = dict(consts)
        merged.update(mine)
        return merged, f"estimate (your calibration for {name} + {engine}: {data.get('points', '?')} points, {path})"
    return consts, basis


def calibration_for(gpu: GpuSpec, engine: str | None) -> Calibration | None:
    """The constants an estimate for `engine` on `gpu` uses; None where no estimate is asked for (a ceiling)."""
    return None if engine is None else constants_for(gpu, engine)
