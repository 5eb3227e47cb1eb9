"""fit's concurrency search: the largest closed-loop concurrency whose mean TPOT and p99 TTFT
(queueing included) meet the goals, decided on the estimate, with the concurrency the ceiling
would allow beside it. Both latencies grow with the concurrency (tests/test_serve.py pins it), so
the search doubles until a miss and then bisects."""

from collections.abc import Mapping

from kvcalc.results import Result

SEARCH_LIMIT = 1024  # clients at most: vLLM's largest default max_num_seqs


# NOTE: no `from __future__ import annotations`: Pydantic would compile each annotation string.
class ConcurrencySearch(Result):
    tpot_ms: float | None = None
    ttft_ms: float | None = None  # goal on the p99 TTFT
    prompt: int
    new: int
    concurrency: int  # the largest meeting the goals on the estimate; 0: not even one client
    ceiling_concurrency: int  # what the ceiling would allow (a bound: no more is possible)
    tpot_s: float  # the estimate at `concurrency` (at 1 when none meets)
    ttft_p99_s: float
    tokens_per_s: float
    per_user_tokens_per_s: float
    basis: str
    decided_on: str = "estimate"
    searched_up_to: int
    message: str


def largest_concurrency(
    spec,  # noqa: ANN001
    gpu,  # noqa: ANN001
    dep,  # noqa: ANN001
    *,
    prompt: int,
    new: int,
    tpot_ms: float | None,
    ttft_ms: float | None,
    engine: str = "vllm",
    dtype: str | None = None,
    kv_dtype: str = "bf16",
    launch: Mapping[str, int] | None = None,
    mem_fraction_static: float | None = None,
    release: str | None = None,
) -> ConcurrencySearch:
    """Search concurrency 1 .. min(max_num_seqs, 1024) for the goals, on the estimate and on the ceiling.
    `launch`: the scheduler limits the deployment is launched with (serving_limits), else the engine's;
    `mem_fraction_static`: SGLang's pool fraction as launched; `release`: SGLang's (None: the default)."""
    from kvcalc.plan.serve import Load
    from kvcalc.plan.serve_pool import serving_limits
    from kvcalc.plan.serve_report import step_timers
    from kvcalc.plan.serve_trace import runner

    limits, _ = serving_limits(
        spec, gpu, dep, engine=engine, dtype=dtype, kv_dtype=kv_dtype, prompt=prompt, new=new, launch=launch,
        mem_fraction_static=mem_fraction_static, release=release,
    )  # fmt: skip
    ceiling, estimate, _, _, basis = step_timers(spec, gpu, dep, engine=engine, dtype=dtype, kv_dtype=kv_dtype)
    top = min(limits.max_num_seqs, SEARCH_LIMIT)

    runs: dict = {}

    def run(timer, c: int):  # noqa: ANN001, ANN202
        # NOTE: read as generate --concurrency reads a run (every client starting at once, figures over
        # all), with 4 x c requests per probe (waves of identical requests repeat, so fewer change
        # little): the search runs about 14 probes per basis, each concurrency scheduled once for both.
        if c not in runs:
            runs[c] = runner(Load(prompt, new, max(4 * c, 16), concurrency=c, burst=True), limits)
        return runs[c](timer)

    def meets(stats) -> bool:  # noqa: ANN001
        ok_tpot = tpot_ms is None or stats.tpot_s * 1e3 <= tpot_ms
        return ok_tpot and (ttft_ms is None or stats.ttft_p99_s * 1e3 <= ttft_ms)

    def largest(timer, start: int = 1) -> tuple[int, object]:  # noqa: ANN001
        first = run(timer, start)
        if not meets(first):
            return 0, first
        good, best, bad = start, first, None
        while bad is None and good < top:
            c = min(good * 2, top)
            s = run(timer, c)
            if meets(s):
                good, best = c, s
            else:
                bad = c
        while bad is not None and bad - good > 1:
            c = (good + bad) // 2
            s = run(timer, c)
            if meets(s):
                good, best = c, s
            else:
                bad = c
        return good, best

    n, at = largest(estimate)
    m, _ = largest(ceiling, max(n, 1))  # the ceiling allows at least what the estimate does
    goal = " and ".join(
        g for g in (f"TPOT {tpot_ms:g} ms" if tpot_ms else "", f"p99 TTFT {ttft_ms:g} ms" if ttft_ms else "") if g
    )
    load = f"requests of {prompt:,} + {new:,} tokens"
    if n:
        cap = f" (searched up to {top:,})" if n == top else ""
        message = f"meets {goal} (estimate) up to concurrency {n:,}{cap}; the ceiling would allow {m:,}, {load}"
    else:
        message = f"no concurrency meets {goal} (estimate): one client sees TPOT {at.tpot_s * 1e3:.2f} ms, p99 TTFT {at.ttft_p99_s * 1e3:.1f} ms; the ceiling would allow {m:,}, {load}"
    return ConcurrencySearch(
        tpot_ms=tpot_ms, ttft_ms=ttft_ms, prompt=prompt, new=new, concurrency=n, ceiling_concurrency=m,
        tpot_s=at.tpot_s, ttft_p99_s=at.ttft_p99_s, tokens_per_s=at.tokens_per_s,
        per_user_tokens_per_s=at.per_user_tokens_per_s, basis=basis, searched_up_to=top, message=message,
    )  # fmt: skip
