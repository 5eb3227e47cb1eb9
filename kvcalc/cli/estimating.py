"""Typer options for the calibrated estimate that roofline and generate share: --engine, --ceiling."""

import sys
from typing import Annotated

import typer


def _engine(value: str) -> str:
    """--engine as one of the four engines kvcalc models (engines/names.py); a stand-in is said on stderr."""
    from kvcalc.engines.names import engine_name

    name, note = engine_name(value)
    if note:
        sys.stderr.write(f"kvcalc: {note}\n")
    return name


EngineOpt = Annotated[
    str,
    typer.Option(
        "--engine",
        help="Engine the estimate is calibrated for: vllm, sglang, trtllm or llamacpp (default vllm); "
        "lmdeploy is estimated as trtllm, tgi as vllm, ollama as llamacpp.",
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
