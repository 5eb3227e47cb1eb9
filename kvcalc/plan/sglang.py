"""`fit --engine sglang` below the CLI: SGLang's options checked, its pool for each fit row, and fit's
verdict under that pool (the Python API and the command share them). Pure: raises UsageError, prints nothing."""

from __future__ import annotations


def check_options(
    engine: str | None,
    *,
    engine_version: str | None,
    mem_fraction_static: float | None,
    chunked_prefill_size: int | None,
    page_size: int | None,
    max_running_requests: int | None,
    dp_attention: bool,
    max_mamba_cache_size: int | None = None,
    mamba_ssm_dtype: str | None = None,
) -> bool:
    """True for --engine sglang; refuse SGLang's options without it and values SGLang would refuse."""

    from kvcalc.errors import UsageError

    sglang = engine is not None and engine.lower() == "sglang"
    given = [
        flag
        for flag, value in (
            ("--engine-version", engine_version),
            ("--mem-fraction-static", mem_fraction_static),
            ("--chunked-prefill-size", chunked_prefill_size),
            ("--page-size", page_size),
            ("--max-running-requests", max_running_requests),
            ("--max-mamba-cache-size", max_mamba_cache_size),
            ("--mamba-ssm-dtype", mamba_ssm_dtype),
            # --dp-attention is also kvcalc's own layout option (issue 20: each rank keeps its requests' KV)
        )
        if value is not None
    ]
    if given and not sglang:
        from kvcalc.plan.serve_launch import version_hint

        hint = (
            version_hint(str(engine).lower())
            if given[0] == "--engine-version"
            else "it is one of SGLang's server arguments"
        )
        raise UsageError(f"{given[0]} needs --engine sglang", hint=hint)
    if not sglang:
        return False
    if mem_fraction_static is not None:
        from kvcalc.engines.sglang.release import check_mem_fraction

        check_mem_fraction(mem_fraction_static)
    for flag, value in (
        ("--chunked-prefill-size", chunked_prefill_size),
        ("--page-size", page_size),
        ("--max-running-requests", max_running_requests),
        ("--max-mamba-cache-size", max_mamba_cache_size),
    ):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be at least 1, got {value}")
    if mamba_ssm_dtype is not None:
        from kvcalc.engines.sglang.mamba import check_ssm_dtype

        check_ssm_dtype(mamba_ssm_dtype)
    if engine_version is not None:
        from kvcalc.engines.sglang.release import parse_release

        parse_release(engine_version)
    return True


def predict(
    spec,  # noqa: ANN001
    gpu,  # noqa: ANN001
    *,
    tp: int,
    pp: int,
    seq: int,
    batch: int,
    dtype: str | None,
    kv_dtype: str | None,
    engine_version: str | None,
    mem_fraction_static: float | None,
    chunked_prefill_size: int | None,
    page_size: int | None,
    max_running_requests: int | None,
    dp_attention: bool,
    steps: list[str] | None,
    context_given: bool = True,
    max_mamba_cache_size: int | None = None,
    mamba_ssm_dtype: str | None = None,
):  # noqa: ANN201
    """SGLang's pool for one --seq (the context length, SGLang's --context-length) and --batch. `context_given`
    False (--seq left out): SGLang launched without --context-length, its context_len the config's own (the
    figure its max_running_requests follows from), while the fit's question stays --seq's default."""
    from kvcalc.cost.shard import check_pp
    from kvcalc.engines.sglang.pool import SglangSettings
    from kvcalc.engines.sglang.pool import predict as pool_predict
    from kvcalc.engines.sglang.release import DEFAULT_RELEASE
    from kvcalc.errors import UsageError

    check_pp(spec, pp)
    if kv_dtype not in (None, "bf16", "fp8"):
        # NOTE: server_args.py (0.5.5) --kv-cache-dtype choices: auto, fp8_e5m2, fp8_e4m3, bf16/bfloat16, fp4_e2m1
        raise UsageError(
            f"SGLang does not take --kv-dtype {kv_dtype}",
            hint="its --kv-cache-dtype is auto (the model dtype), bf16 or fp8 (fp8_e4m3 / fp8_e5m2)",
        )
    from kvcalc.engines.kernels import checkpoint_refusal

    if why := checkpoint_refusal(spec, "sglang", dtype):
        raise UsageError(why, hint="drop --dtype to predict the checkpoint's own format")
    settings = SglangSettings(
        release=engine_version or DEFAULT_RELEASE,
        tp=tp,
        pp=pp,
        dp_attention=dp_attention,
        mem_fraction_static=mem_fraction_static,
        chunked_prefill_size=chunked_prefill_size,
        page_size=page_size or 1,
        max_running_requests=max_running_requests,
        max_mamba_cache_size=max_mamba_cache_size,
        mamba_ssm_dtype=mamba_ssm_dtype,
        context_len=seq if context_given else None,
        kv_dtype=kv_dtype,
    )
    pool = pool_predict(spec, gpu, settings, seq=seq, batch=batch, dtype=dtype)
    if steps is not None:
        from kvcalc.engines.sglang.steps import explain

        steps += explain(pool)
    return pool


def held_at(p):  # noqa: ANN001, ANN201
    """requests of s tokens -> how many SGLang's pool holds at once (none where SGLang would not start)."""
    from kvcalc.engines.sglang.pool import requests_held

    def held(s: int) -> int:
        # NOTE: refused for its --context-length alone, SGLang starts with one up to the config's
        started = not p.refusal or (p.context_limit is not None and s <= p.context_limit)
        return (
            requests_held(p.max_total_num_tokens, p.page_size, p.max_running_requests, p.dp_size, s) if started else 0
        )

    return held


def verdict(result) -> tuple[bool, str]:  # noqa: ANN001
    """fit's verdict under SGLang's pool: one --seq request per pool, --batch of them across the DP ranks."""
    p = result.sglang
    from kvcalc.plan.fit import engine_verdict, gpus_named

    where = gpus_named(result)
    label = f"SGLang {p.release}"
    if p.refusal:
        return False, f"SGLang would not start on {where}: {p.refusal}"
    if p.max_total_num_tokens < result.seq:
        return False, (
            f"DOES NOT FIT under {label}: one {result.seq:,}-token request needs more than the pool's "
            f"{p.max_total_num_tokens:,} tokens (mem_fraction_static {p.mem_fraction_static:g})"
        )
    if not p.fits:
        return False, (
            f"DOES NOT FIT under {label}: batch {result.batch:,} x {result.seq:,} tokens exceeds the pool "
            f"({p.max_concurrency:.2f}x concurrency, max_running_requests {p.max_running_requests:,}); the largest "
            f"batch it holds is {result.max_batch:,}"
        )
    return engine_verdict(result, label, p.max_concurrency)  # the goals as fit words them; SGLang's pool, memory
