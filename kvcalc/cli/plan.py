"""`kvcalc plan`: the cheapest deployment that serves the users and meets the goals, with its command."""

# NOTE: no `from __future__ import annotations` in the CLI modules (Typer evaluates annotations).
from typing import Annotated, Optional

import typer

from kvcalc.cli.common import Fmt, FmtOpt, ModelArg, _emit, app
from kvcalc.cli.sglang import ServedVersionOpt
from kvcalc.errors import UsageError
from kvcalc.units import DEFAULT_GPU_UTIL

EXIT_NONE_MEETS = 3  # no option meets the goals (the table and JSON are still printed)
# NOTE: plan/planner.py's DEFAULT_GPUS and MAX_GPUS, spelled out so `kvcalc cache` does not import the planner
# (tests/test_plan.py checks they agree).
DEFAULT_GPUS_HELP = "h100,h200,b200,mi300x,a100,l40s"
MAX_GPUS_HELP = 16


@app.command()
def plan(
    model: ModelArg,
    seq: Annotated[
        str,
        typer.Option(
            "--seq",
            "-s",
            help="Context each request may reach, tokens (8k, 32k, 128k): the engine's max model length.",
        ),
    ],
    users: Annotated[
        int,
        typer.Option(
            "--users",
            "-u",
            "--concurrency",
            help="Concurrent users, each sending its next request when the last ends (generate's --concurrency).",
        ),
    ],
    tpot_ms: Annotated[
        Optional[float], typer.Option("--tpot-ms", help="Goal: mean time per output token, ms (default: none).")
    ] = None,
    ttft_ms: Annotated[
        Optional[float],
        typer.Option(
            "--ttft-ms",
            help="Goal: time to first token with queueing, ms: p99 where simulated, else the mean (default: none).",
        ),
    ] = None,
    prompt: Annotated[
        Optional[str],
        typer.Option(
            "--prompt", help="Prompt tokens per request (default: half of --seq); the rest of --seq is generated."
        ),
    ] = None,
    new: Annotated[
        Optional[str], typer.Option("--new", help="Output tokens per request (default: --seq minus --prompt).")
    ] = None,
    gpu: Annotated[
        Optional[str],
        typer.Option("--gpu", "-g", help=f"GPU presets to choose from, comma-separated (default {DEFAULT_GPUS_HELP})."),
    ] = None,
    max_gpus: Annotated[
        int,
        typer.Option(
            "--max-gpus",
            help=f"Most GPUs per deployment, 1-{MAX_GPUS_HELP}; counts 1, 2, 4, 8, 16 (default 8; past a node flagged).",
        ),
    ] = 8,
    dtype: Annotated[
        Optional[str],
        typer.Option(
            "--dtype",
            help="Weight dtypes to try, comma-separated (default: the model's, plus fp8 where the GPU has fp8, with vLLM and SGLang; "
            "with llamacpp, GGUF quants such as q4_k_m,q8_0 for a model without a GGUF).",
        ),
    ] = None,
    kv_dtype: Annotated[
        Optional[str],
        typer.Option(
            "--kv-dtype",
            help="KV dtypes to try, comma-separated, 'auto' the engine's (default: auto, plus fp8 where the GPU has fp8, with vLLM and SGLang).",
        ),
    ] = None,
    engine: Annotated[str, typer.Option("--engine", help="vllm, sglang, trtllm or llamacpp (default vllm).")] = "vllm",
    price: Annotated[
        Optional[list[str]],
        typer.Option(
            "--price", help="GPU=USD per GPU-hour, repeatable (h200=3.5); overrides the presets' dated prices."
        ),
    ] = None,
    gpu_util: Annotated[
        float, typer.Option("--gpu-util", help="Fraction of each GPU the engine may use (default 0.9, vLLM's).")
    ] = DEFAULT_GPU_UTIL,
    top: Annotated[int, typer.Option("--top", help="Options shown in the table (default 10; JSON has all).")] = 10,
    fmt: FmtOpt = Fmt.table,
    engine_version: ServedVersionOpt = None,
) -> None:
    """The cheapest deployment for MODEL: USERS at --seq tokens within --tpot-ms / --ttft-ms.

    Searches GPU type x count x layout (tp, pp across nodes, expert parallelism and DP attention for MoE
    models, data-parallel replicas with vLLM and SGLang) x weight and KV dtype, only over layouts the engine
    accepts. Each option gets the engine's own memory accounting (vLLM 0.19's profile and KV pool; SGLang's
    and TensorRT-LLM's pools) and must hold every user's request at full length (prompt + new tokens) in its KV pool; its speed is the calibrated closed-loop estimate
    (the calibration's steady-state form, with its 80% interval), and "meets" is decided on that estimate;
    the first options as ranked are served again by the simulation of `generate --concurrency` (TTFT p99
    too), which then decides them.
    Options are ranked by $ per million output tokens, the cheapest meeting the goals first; GPUs without a
    price follow by GPU count. Each has the command that starts it and a `kvcalc generate --concurrency`
    line that simulates it (TTFT p99 too). Below the table: one line per rejected family and why.

    Exit status: 0 when an option meets the goals, 3 when none does, 2 for a usage error.
    """
    from kvcalc.plan.plan_inputs import plan_from_inputs

    result = plan_from_inputs(
        model, seq, users, tpot_ms=tpot_ms, ttft_ms=ttft_ms, prompt=prompt, new=new, gpu=gpu, max_gpus=max_gpus,
        dtype=dtype, kv_dtype=kv_dtype, engine=engine, price=price, gpu_util=gpu_util, engine_version=engine_version,
    )  # fmt: skip
    if top < 1:
        raise UsageError(f"--top must be at least 1, got {top}")

    def sheets():  # noqa: ANN202
        from kvcalc.present.plan import plan_sheet

        return [plan_sheet(result, top)]

    def rows():  # noqa: ANN202
        out = []
        for o in result.options:
            e = o.estimate
            out.append(
                {k: v for k, v in o.model_dump().items() if k not in ("estimate", "misses", "warnings")}
                | {"tpot_s": e.tpot_s, "ttft_s": e.ttft_s, "tokens_per_s": e.tokens_per_s}
            )
        return out

    _emit(fmt, lambda: result.model_dump(mode="json"), sheets, rows)
    if not any(o.meets for o in result.options):
        raise typer.Exit(EXIT_NONE_MEETS)
