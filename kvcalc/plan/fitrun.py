"""One `kvcalc fit` question, answered the same way for the CLI and kvcalc.fit(): the reserve (vLLM's
terms with --engine vllm, an engine-derived default otherwise), one FitResult per (seq, batch), vLLM's
start-up figures and refusal, and the latency goals."""

from __future__ import annotations

from functools import partial

from kvcalc.plan.fit import FitResult


def plain_reserve_bytes(spec, gpu, dep, dtype: str | None, max_num_seqs: int, max_batched_tokens: int):  # noqa: ANN001, ANN201
    """fit's default reserve without --engine: what vLLM 0.19 keeps beside the weights on this layout
    (the profiling run's activation peak, non-torch memory with NCCL's NVLS buffers at tp >= 2), so
    the plain fit does not promise more KV than the engine gives. None where that model does not apply."""
    from kvcalc.engines.vllm.memory import Settings, predict

    if spec.params or getattr(spec, "params_unknown", None) or spec.vocab_size is None:
        return None
    settings = Settings(
        gpu_memory_utilization=dep.gpu_util,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_batched_tokens,
        tp=dep.tp,
        pp=dep.pp,
    )
    terms = predict(spec, gpu, settings, dtype=dtype)
    return max(s.profile_peak_bytes + s.non_torch_bytes for s in terms.stages)


def goal_engine(engine: str | None, ceiling: bool) -> str | None:
    """The engine whose calibrated estimate decides fit's latency goals: the one fit models, vLLM's for none
    (or no --engine), None (the ceiling alone) with --ceiling."""
    return None if ceiling else (engine if engine in ("sglang", "trtllm", "llamacpp") else "vllm")


def fit_rows(
    spec,  # noqa: ANN001
    gpu,  # noqa: ANN001
    dep,  # noqa: ANN001
    *,
    seqs: list[int],
    batches: list[int],
    dtype: str | None,
    kv_dtype: str,
    block_size: int,
    is_vllm: bool,
    kv_logged: int | None,
    max_num_seqs: int,
    max_batched_tokens: int,
    reserve_given: bool,
    tpot_ms: float | None = None,
    ttft_ms: float | None = None,
    prompt: int | None = None,
    util: tuple[float, float] | None = None,
    steps: list[str] | None = None,
    estimate_engine: str | None = None,
    pool: str | None = None,
    sglang: dict | None = None,
) -> list[FitResult]:
    """One FitResult per (seq, batch). `pool`: "trtllm" or "sglang" (with `sglang`, SGLang's options and the
    KV dtype given to it, None for its auto) when that engine's own pool decides memory: its capacity, the
    verdict, and the largest batch a latency goal may reach."""
    from kvcalc.cost.fabric import node_warnings, nodes_spanned
    from kvcalc.cost.step import stages
    from kvcalc.plan import vllm_fit
    from kvcalc.plan.fit import adopt_engine_capacity, capped_context, engine_limit, fit_report, verdict

    terms = None
    accounting = "kvcalc: --reserve as given"
    if is_vllm and kv_logged is None:
        # vLLM's own terms stand in for --reserve, so fit's budget and vLLM's lines agree.
        terms = vllm_fit.predict_terms(
            spec,
            gpu,
            dtype=dtype,
            gpu_util=dep.gpu_util,
            tp=dep.tp,
            pp=dep.pp,
            max_num_seqs=max_num_seqs,
            max_batched_tokens=max_batched_tokens,
            steps=steps,
        )
        accounting = "vLLM 0.19: weights as loaded, profiling peak and non-torch memory"
    reserve_bytes = dep.reserve_bytes
    if terms is not None:
        reserve_bytes = terms.profile_peak_bytes + terms.non_torch_bytes
    elif is_vllm:
        accounting = "vLLM 0.19: KV memory as logged (--kv-memory)"
    elif not reserve_given:
        derived = plain_reserve_bytes(spec, gpu, dep, dtype, max_num_seqs, max_batched_tokens)
        if derived is not None:
            reserve_bytes = derived
            accounting = "kvcalc weights; reserve from vLLM 0.19's profiling peak and non-torch memory"
            if steps is not None:
                steps.append(
                    f"reserve (no --reserve): vLLM 0.19's activation peak + non-torch memory on this layout = "
                    f"{reserve_bytes:,} B (--engine none keeps a flat --reserve)"
                )
        else:
            accounting = "kvcalc: flat 2 GiB reserve (no engine model for this spec)"
    goals = tpot_ms is not None or ttft_ms is not None
    staged = stages(spec, dep, dtype)
    slos: dict[int, object] = {}  # the latency search depends on the context, not on --batch
    results = []
    for s in seqs:
        for b in batches:
            if steps is not None and len(seqs) * len(batches) > 1:
                steps.append(f"batch {b:,} x {s:,} tokens:")
            result = fit_report(
                spec,
                gpu,
                tp=dep.tp,
                pp=dep.pp,
                seq=s,
                batch=b,
                dtype=dtype,
                kv_dtype=kv_dtype,
                gpu_util=dep.gpu_util,
                reserve_bytes=reserve_bytes,
                block_size=block_size,
                steps=steps,
                weights_per_gpu=terms.weights_bytes if terms else None,
                staged=staged,
                kv_ranks=dep.kv_ranks,
            )
            result.ep, result.dp_attention, result.gpus_per_node = dep.ep, dep.dp_attention, dep.gpus_per_node
            result.nodes = nodes_spanned(dep.gpus, dep.gpus_per_node)
            result.warnings += node_warnings(dep, gpu.name)
            result.accounting = accounting
            per = result.per_gpu
            available = per.budget_bytes - per.weight_bytes - per.reserve_bytes
            if is_vllm and (kv_logged is not None or available > 0):
                at = partial(  # vLLM's figures for requests of `seq` tokens, one pool at every seq
                    vllm_fit.figures, spec, terms, kv_logged, available, kv_dtype=kv_dtype, tp=dep.tp,
                    block_size=block_size, max_batched_tokens=max_batched_tokens, steps=None,
                )  # fmt: skip
                result.vllm = at(seq=s, steps=steps)
                result.vllm.startup = vllm_fit.startup(spec, terms, kv_logged, result.vllm, s, max_batched_tokens)
                v = result.vllm
                held_at = vllm_fit.held_at(at, max_num_seqs)
                # one request: the longest max_model_len vLLM's start-up check accepts (adopt keeps it)
                one = result.batch == 1
                if one:
                    mem = vllm_fit.largest_context(spec, terms, kv_logged, v, max_batched_tokens)
                    longest = engine_limit(result, spec, "vllm")
                    result.max_seq_memory, result.max_seq = mem, capped_context(spec, mem, longest)
                basis = f"vLLM {v.version}"
                adopt_engine_capacity(
                    result, basis, v.kv_cache_tokens, v.max_concurrency, spec=spec, held_at=held_at, context=not one,
                    engine="vllm",
                )  # fmt: skip
            if pool == "trtllm":
                from kvcalc.plan import trtllm_fit

                trtllm_fit.adopt_pool(result, spec, gpu, dep, dtype)
            elif pool == "sglang":
                from kvcalc.plan import sglang as sglang_fit

                result.sglang = sglang_fit.predict(
                    spec, gpu, tp=dep.tp, pp=dep.pp, seq=s, batch=b, dtype=dtype, steps=steps, **(sglang or {})
                )
                p = result.sglang
                from kvcalc.engines.sglang.mamba import size_warnings

                given = sglang or {}
                result.warnings += size_warnings(
                    spec, p.release, given.get("max_mamba_cache_size"), given.get("mamba_ssm_dtype")
                )
                basis = f"SGLang {p.release}"
                held_at = sglang_fit.held_at(p)
                from kvcalc.engines.sglang import release as rel

                refuses = rel.parse_release(p.release) >= rel.CONTEXT_REFUSED_FROM  # a longer --context-length
                adopt_engine_capacity(
                    result, basis, p.kv_capacity_tokens, p.max_concurrency, spec=spec, held_at=held_at,
                    engine="sglang" if refuses else None,
                )  # fmt: skip
                result.accounting = (
                    f"SGLang {p.release}: weights as it loads them, mem_fraction_static of the memory free before load"
                )
            if goals and s in slos:
                result.slo = slos[s]
            elif goals:
                from kvcalc.plan.slo import largest_batch

                result.slo = slos[s] = largest_batch(
                    spec,
                    gpu,
                    result,
                    tpot_ms=tpot_ms,
                    ttft_ms=ttft_ms,
                    prompt=prompt or s,
                    dtype=dtype,
                    kv_dtype=kv_dtype,
                    mbu=util[0] if util else 1.0,
                    mfu=util[1] if util else 1.0,
                    dep=dep,
                    steps=steps,
                    engine=estimate_engine,  # the calibrated estimate decides the latency goals (None: the ceiling)
                )
            # an engine's own pool holds the requests and decides the verdict, where one does
            judge = trtllm_fit.verdict if pool == "trtllm" else sglang_fit.verdict if pool == "sglang" else verdict
            result.ok, result.verdict = judge(result)
            results.append(result)
    if goals and estimate_engine is not None:
        concurrency_searches(
            results, spec, gpu, dep, prompt, tpot_ms, ttft_ms, estimate_engine, dtype, kv_dtype,
            launch=search_launch(estimate_engine, max_num_seqs, max_batched_tokens, sglang),
            fraction=(sglang or {}).get("mem_fraction_static") if estimate_engine == "sglang" else None,
            release=(sglang or {}).get("engine_version") if estimate_engine == "sglang" else None,
        )  # fmt: skip
    return results


def search_launch(
    engine: str, max_num_seqs: int, max_batched_tokens: int, sglang: dict | None
) -> dict[str, int] | None:
    """The scheduler limits fit's concurrency search runs under: vLLM's --max-num-seqs / --max-batched-tokens
    (its defaults on the GPU where not given, as vllm_fit.check_options fills them), SGLang's
    --max-running-requests / --chunked-prefill-size where given; else the engine's defaults (None)."""
    if engine == "vllm":
        return dict(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_batched_tokens)
    if engine == "sglang" and sglang:
        given = dict(
            max_num_seqs=sglang.get("max_running_requests"), max_num_batched_tokens=sglang.get("chunked_prefill_size")
        )
        return {k: v for k, v in given.items() if v} or None
    return None


def concurrency_searches(
    results, spec, gpu, dep, prompt, tpot_ms, ttft_ms, engine, dtype, kv_dtype, launch=None, fraction=None, release=None
) -> None:  # noqa: ANN001
    """fit's latency goals under closed-loop serving: the largest concurrency meeting them on the engine's
    estimate (plan/serve_search), once per seq, requests of `prompt` (default half the seq) + the rest; in the
    pool the engine sizes under the launch flags fit was given (`fraction`: SGLang's --mem-fraction-static,
    `release`: its --engine-version)."""
    from kvcalc.plan.serve_search import largest_concurrency

    found: dict[int, object] = {}
    for r in results:
        if r.max_batch == 0:
            continue  # not one request of this length fits: the verdict says so, and there is nothing to search
        if r.seq not in found:
            p = prompt if prompt is not None and prompt < r.seq else max(r.seq // 2, 1)
            found[r.seq] = largest_concurrency(
                spec, gpu, dep, prompt=p, new=max(r.seq - p, 1), tpot_ms=tpot_ms, ttft_ms=ttft_ms,
                engine=engine, dtype=dtype, kv_dtype=kv_dtype, launch=launch, mem_fraction_static=fraction,
                release=release,
            )  # fmt: skip
        r.concurrency_slo = found[r.seq]
