"""`generate --concurrency/--rate`: the serving simulation's options and output (called from
cli/serving.py's generate)."""

from typing import Annotated, Optional

import typer

from kvcalc.errors import UsageError

ConcurrencyOpt = Annotated[
    Optional[str],
    typer.Option(
        "--concurrency",
        "-c",
        help="Closed loop: this many clients, each sending its next --prompt/--new request when the last ends "
        "(a sweep: 1..256 doubles, or 1,8,64). Default: none (a static --batch).",
    ),
]
RateOpt = Annotated[
    Optional[float],
    typer.Option("--rate", help="Open loop: Poisson arrivals at this many requests/s. Default: none."),
]
RequestsOpt = Annotated[
    Optional[int],
    typer.Option(
        "--requests",
        help="Requests to simulate with --concurrency/--rate (default: 10 x concurrency, at least 16; 200 with --rate).",
    ),
]
SteadyOpt = Annotated[
    bool,
    typer.Option(
        "--steady-state",
        help="With --concurrency: clients spread over a request's life and figures over the steady state only "
        "(default: a benchmark's run, every client starting at once, figures over all requests).",
    ),
]
SeedOpt = Annotated[
    int, typer.Option("--seed", help="Seed of the --rate arrivals and --range-ratio lengths (default 0).")
]
RangeRatioOpt = Annotated[
    float,
    typer.Option(
        "--range-ratio",
        min=0.0,
        max=1.0,
        help="With --concurrency/--rate: each request's prompt and new tokens drawn uniformly from "
        "[ratio x --prompt, --prompt] and [ratio x --new, --new], as the random dataset of SGLang's and "
        "InferenceX's bench_serving draws it (their random_range_ratio; InferenceX runs 0.8; 0, SGLang's default, "
        "draws from 1 token up). Default 1: every request alike.",
    ),
]

MaxSeqsOpt = Annotated[
    Optional[int],
    typer.Option(
        "--max-num-seqs",
        help="With --concurrency/--rate: requests the engine runs at once, as launched (vLLM's max_num_seqs, "
        "SGLang's max_running_requests, TensorRT-LLM's max_batch_size, llama-server's -np). Default: the engine's "
        "(llama-server: 4 slots).",
    ),
]
MaxTokensOpt = Annotated[
    Optional[int],
    typer.Option(
        "--max-batched-tokens",
        help="With --concurrency/--rate: tokens one engine step may carry, as launched (vLLM's "
        "max_num_batched_tokens, SGLang's chunked_prefill_size, TensorRT-LLM's max_num_tokens, llama-server's "
        "-b). Default: the engine's. It sizes the KV pool as the engine does (vLLM's profiling forward, SGLang's "
        "memory fraction).",
    ),
]
MemFractionServeOpt = Annotated[
    Optional[float],
    typer.Option(
        "--mem-fraction-static",
        help="With --concurrency/--rate and --engine sglang: SGLang's --mem-fraction-static (0-1] as launched, a "
        "share of the free memory before the weights load (default: the release's pick for the card, tp x pp and "
        "chunk, which a large --max-batched-tokens lowers).",
    ),
]

SWEEP_LIMIT = 32  # concurrencies in one sweep


def serve_generate(
    spec,  # noqa: ANN001
    gpu_spec,  # noqa: ANN001
    dep,  # noqa: ANN001
    *,
    concurrency: str | None,
    rate: float | None,
    requests: int | None,
    seed: int,
    range_ratio: float = 1.0,
    prompt: int,
    new: int,
    batch_given: bool,
    util,  # noqa: ANN001
    engine: str | None,
    ceiling: bool,
    dtype: str | None,
    kv_dtype: str,
    fmt,  # noqa: ANN001
    plot: str | None,
    plot_size: str | None,
    steady: bool = False,
    max_num_seqs: int | None = None,
    max_batched_tokens: int | None = None,
    mem_fraction_static: float | None = None,
    reserve_given: bool = False,
    engine_version: str | None = None,
    max_mamba_cache_size: int | None = None,
    mamba_ssm_dtype: str | None = None,
) -> None:
    from kvcalc.cli.common import _draw, _emit
    from kvcalc.plan.serve_report import serve_report
    from kvcalc.present.serve_sheet import serve_sheet, sweep_sheet
    from kvcalc.units import parse_range

    if concurrency is not None and rate is not None:
        raise UsageError("give --concurrency (closed loop) or --rate (open loop), not both")
    if batch_given:
        raise UsageError("--batch is a static batch; --concurrency and --rate serve requests as they come")
    if util:
        raise UsageError(
            "--efficiency/--mbu/--mfu are static-batch what-ifs", hint="serving uses the calibrated estimate per step"
        )
    from kvcalc.plan.serve_launch import check_reserve

    check_reserve(engine or "vllm", reserve_given)
    levels = parse_range(concurrency, "--concurrency", SWEEP_LIMIT) if concurrency is not None else [None]
    if plot is not None and len(levels) < 2:
        raise UsageError("--plot with serving draws a sweep", hint="give --concurrency a range, e.g. 1..256")
    args = dict(
        prompt=prompt, new=new, rate=rate, requests=requests, seed=seed, range_ratio=range_ratio, engine=engine or "vllm", dtype=dtype,
        kv_dtype=kv_dtype, estimate=not ceiling, steady=steady, max_num_seqs=max_num_seqs,
        max_batched_tokens=max_batched_tokens, mem_fraction_static=mem_fraction_static, engine_version=engine_version,
        max_mamba_cache_size=max_mamba_cache_size, mamba_ssm_dtype=mamba_ssm_dtype,
    )  # fmt: skip
    results = [serve_report(spec, gpu_spec, dep, concurrency=c, **args) for c in levels]
    if len(results) == 1:
        _emit(fmt, results[0].model_dump(mode="json"), [serve_sheet(results[0])], [results[0].model_dump()])
    else:
        _emit(
            fmt,
            {"rows": [r.model_dump(mode="json") for r in results]},
            [sweep_sheet(results)],
            [r.model_dump() for r in results],
        )

    def chart():  # noqa: ANN202
        from kvcalc.present.chart_serving import serving_chart

        where = f"{dep.gpus} x {gpu_spec.name}" if dep.gpus > 1 else gpu_spec.name
        return serving_chart(f"Serving {spec.name} on {where}, {prompt:,} + {new:,} tokens", results)

    _draw(plot, chart, plot_size)
