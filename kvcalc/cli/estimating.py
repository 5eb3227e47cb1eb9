"""Typer options for the calibrated estimate that roofline and generate share: --engine, --ceiling."""

from typing import Annotated

import typer

from kvcalc.plan.estimated import engine_for_estimate  # noqa: F401  (the commands call it through here)

EngineOpt = Annotated[
    str,
    typer.Option(
        "--engine",
        help="Engine the estimate is calibrated for: vllm, sglang, trtllm or llamacpp (default vllm).",
    ),
]
CeilingOpt = Annotated[
    bool,
    typer.Option("--ceiling", help="The physics bound alone, without the calibrated estimate (default: both)."),
]
