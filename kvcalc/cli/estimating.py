"""Typer options for the calibrated estimate that roofline and generate share: --engine, --ceiling."""

import sys
from typing import Annotated, Optional

import typer


def _engine(value: str | None) -> str | None:
    """--engine as one of the four engines kvcalc models (engines/names.py); a stand-in is said on stderr. None:
    not given (the estimate is vLLM's; memory is kvcalc's arithmetic, the engine's pool is not asked)."""
    if value is None:
        return None
    from kvcalc.engines.names import engine_name

    name, note = engine_name(value)
    if note:
        sys.stderr.write(f"kvcalc: {note}\n")
    return name


EngineOpt = Annotated[
    Optional[str],
    typer.Option(
        "--engine",
        help="Engine the estimate is calibrated for: vllm, sglang, trtllm or llamacpp (default vllm); "
        "lmdeploy is estimated as trtllm, tgi as vllm, ollama as llamacpp. Given, its pool and seats decide "
        "whether the batch fits (vllm, sglang, trtllm).",
        callback=_engine,
    ),
]
CeilingOpt = Annotated[
    bool,
    typer.Option("--ceiling", help="The physics bound alone, without the calibrated estimate (default: both)."),
]


def engine_for_estimate(engine: str, ceiling: bool) -> str | None:
    """The engine to estimate for, None with --ceiling (plan.estimated's check, imported when called:
    `kvcalc cache` imports this module at start-up)."""
    from kvcalc.plan.estimated import engine_for_estimate as check

    return check(engine, ceiling)
