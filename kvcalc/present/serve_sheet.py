"""The answers of `generate --concurrency/--rate` as sheets: one load's figures (ceiling, estimate,
its 80% interval), or one row per concurrency of a sweep."""

from __future__ import annotations

from kvcalc.present.render import gpus_of, moe_ceiling_note
from kvcalc.present.sheet import Sheet
from kvcalc.units import fmt_seconds

ROWS = (
    ("time to first token (mean, queueing included)", "ttft_s", True),
    ("time to first token (p50)", "ttft_p50_s", True),
    ("time to first token (p99)", "ttft_p99_s", True),
    ("time per output token (mean)", "tpot_s", True),
    ("inter-token latency (mean)", "itl_s", True),
    ("end-to-end latency (mean)", "total_s", True),
    ("output tokens/s (all users)", "tokens_per_s", False),
    ("output tokens/s per user", "per_user_tokens_per_s", False),
    ("requests/s", "requests_per_s", False),
    ("preemptions", "preemptions", False),
)


def _cell(value: float, seconds: bool) -> str:
    if seconds:
        return fmt_seconds(value)
    if isinstance(value, int):
        return f"{value:,.0f}"
    # NOTE: a slow load's rates (0.03 requests/s behind a pool that holds one request) keep three significant
    # figures rather than reading "0.0"
    return f"{value:.3g}" if 0 < abs(value) < 10 else f"{value:,.1f}"


def _load(r) -> str:  # noqa: ANN001
    if r.concurrency is not None:
        how = f"{r.concurrency:,} clients (closed loop)"
    else:
        how = f"Poisson arrivals at {r.rate:g} requests/s (seed {r.seed})"
    return (
        f"{r.model} on {gpus_of(r)}, {how}, {r.requests:,} requests of {r.prompt:,} + {r.new:,} tokens, KV {r.kv_dtype}"
    )


def serve_sheet(r) -> Sheet:  # noqa: ANN001
    """One load: the ceiling (every step at its bound), the estimate and its 80% interval."""
    e = r.estimate
    columns = ["", "ceiling", *(["estimate", "80% interval"] if e else [])]
    sheet = Sheet(title=f"Serving: {_load(r)}", columns=columns)
    for label, key, seconds in ROWS:
        row = [label, _cell(getattr(r, key), seconds)]
        if e:
            row.append(_cell(getattr(e, key), seconds))
            band = e.interval.get(key)
            row.append(f"{_cell(band[0], seconds)} - {_cell(band[1], seconds)}" if band else "")
        sheet.rows.append(row)
    sheet.notes += _notes(r)
    return sheet


def sweep_sheet(results: list) -> Sheet:
    """One row per concurrency: per-user and total tokens/s, TTFT p99 and TPOT, estimate and ceiling."""
    first = results[0]
    sheet = Sheet(
        title=f"Serving sweep: {first.model} on {gpus_of(first)}, {first.prompt:,} + {first.new:,} tokens a request",
        columns=[
            "concurrency",
            "tokens/s per user",
            "tokens/s (all)",
            "TTFT p99",
            "TPOT",
            "ceiling tokens/s per user",
            "ceiling tokens/s (all)",
        ],
    )
    for r in results:
        e = r.estimate or r
        sheet.rows.append(
            [
                f"{r.concurrency:,}",
                _cell(e.per_user_tokens_per_s, False),
                f"{e.tokens_per_s:,.0f}",
                fmt_seconds(e.ttft_p99_s),
                fmt_seconds(e.tpot_s),
                _cell(r.per_user_tokens_per_s, False),
                f"{r.tokens_per_s:,.0f}",
            ]
        )
    sheet.notes += _notes(first, sweep=True)
    return sheet


def _notes(r, sweep: bool = False) -> list[str]:  # noqa: ANN001
    sched = {
        "sglang": "SGLang's scheduler does it: each step either a prefill batch (the running decodes paused) or a "
        "decode batch; admission reserves the running requests' expected tokens; retraction when the pool is full",
        "trtllm": "TensorRT-LLM's scheduler does it: whole prompts beside the decodes in one step; admitted only "
        "if prompt + max new tokens fit (GUARANTEED_NO_EVICT), queued otherwise; no preemption",
        "llamacpp": "llama-server does it (as vLLM's V1 scheduler orders a step): each pass every generating slot's "
        "next token, then prompt tokens up to n_batch; a request waits for a free slot",
    }.get(
        r.engine,
        "vLLM's V1 scheduler does it"
        + ("" if r.engine == "vllm" else f" (no {r.engine} scheduler model)")
        + ": chunked prefill mixed with decodes; preemption by recompute when the pool is full",
    )
    notes = [
        f"Continuous batching scheduled as {sched}. KV pool: {r.kv_pool}.",
        "The ceiling is every step at its physics bound, a request's TTFT no more than its prompt's own pass and "
        "its TPOT no more than the decode steps without the prompts mixed in"
        + (
            ", its tokens/s no more than the decode steps and FLOPs every schedule must run allow"
            if r.concurrency
            else ""
        )
        + ": no real server beats it."
        + (f" The estimate: {r.estimate.basis}." if r.estimate else ""),
    ]
    if r.routed:
        notes.append(moe_ceiling_note(r.routed))
    if r.concurrency is not None and r.steady_state:
        notes.append(
            f"Steady state: figures over {r.measured_requests:,} of {r.requests:,} requests (the start-up burst and "
            "the drain left out)."
        )
    elif r.concurrency is not None:
        many = "10 x concurrency requests a row" if sweep else f"{r.requests:,} requests"
        notes.append(
            f"A benchmark's run ({many}): every client sends its first request at once and the figures are over "
            "all requests, as `vllm bench serve --max-concurrency` and AIPerf report them (--steady-state: the "
            "steady state alone)."
        )
    if r.range_ratio < 1:
        notes.append(
            f"Request lengths drawn uniformly (seed {r.seed}): prompts {max(1, int(r.prompt * r.range_ratio)):,}-{r.prompt:,} "
            f"tokens, {max(1, int(r.new * r.range_ratio)):,}-{r.new:,} new (bench_serving's --random-range-ratio {r.range_ratio:g})."
        )
    notes += [f"Warning: {w}" for w in r.warnings]
    return notes
