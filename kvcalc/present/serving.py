"""The serving answers as sheets: fit (one row or a batch x seq grid) and generate."""

from __future__ import annotations

from kvcalc.present.render import _bytes, gpus_of, moe_ceiling_note
from kvcalc.present.sheet import Sheet
from kvcalc.units import fmt_seconds, plural


def _reserve_note(result) -> str:  # noqa: ANN001
    v = result.vllm
    if v is not None and v.profile_peak_bytes is not None:
        return "vLLM profiling peak + non-torch memory"
    if result.accounting.startswith("kvcalc weights; reserve from vLLM"):
        return "vLLM 0.19's profiling peak + non-torch memory"
    return "activations, graphs, buffers (--reserve)"


def _total_note(result, within: bool) -> str:  # noqa: ANN001
    """The total row's word: fits / DOES NOT FIT, and where an engine's own pool decides memory and disagrees
    with these bytes (its pages, groups and fraction differ from kvcalc's), both, the pool's deciding."""
    said = "fits" if result.fits else "DOES NOT FIT"
    if result.capacity_basis == "kvcalc" or within == result.fits:
        return said
    return f"{'within' if within else 'over'} this budget; {said} in {result.capacity_basis}'s pool"


def _kvcalc_rows(result) -> list[list[str]]:  # noqa: ANN001
    """fit's per-GPU table by kvcalc's arithmetic: weights, KV, state and reserve against the budget."""
    p = result.per_gpu
    total = p.weight_bytes + p.kv_bytes + p.state_bytes + p.reserve_bytes
    kv_note = f"batch {result.batch:,}, blocks of {result.block_size}"
    if result.kv_heads_per_rank is not None:
        kv_note += f", {plural(result.kv_heads_per_rank, 'KV head')} per rank"
    rows = [
        [
            "weights",
            _bytes(p.weight_bytes),
            ("attention whole per rank, the rest split" if result.dp_attention else "split across ranks")
            if result.tp > 1
            else "",
        ],
        ["KV cache", _bytes(p.kv_bytes), kv_note],
        ["SSM / linear state", _bytes(p.state_bytes), "constant per sequence"] if p.state_bytes else None,
        ["reserve", _bytes(p.reserve_bytes), _reserve_note(result)],
        ["total", _bytes(total), _total_note(result, total <= p.budget_bytes)],
        ["budget", _bytes(p.budget_bytes), f"{_bytes(p.capacity_bytes)} x {result.gpu_util:g}"],
    ]
    if result.capacity_basis.startswith("TensorRT-LLM"):
        # NOTE: its pool is free_gpu_memory_fraction of what the weights and the profiling peak leave
        # (engines/trtllm/pool.kv_memory), not a share of the whole GPU as vLLM's budget is
        left = max(0, p.capacity_bytes - p.weight_bytes - p.reserve_bytes)
        rows[-2:] = [
            ["left", _bytes(left), f"{_bytes(p.capacity_bytes)} - weights - reserve"],
            [
                "KV pool",
                _bytes(int(result.gpu_util * left)),
                f"{result.gpu_util:g} (free_gpu_memory_fraction) x left: {result.kv_capacity_tokens:,} tokens, "
                f"{'fits' if result.fits else 'DOES NOT FIT'}",
            ],
        ]
    return [r for r in rows if r]


def fit_sheet(result) -> Sheet:  # noqa: ANN001
    from kvcalc.plan.fit import FitResult

    assert isinstance(result, FitResult)
    where = f"one {result.gpu}"
    if result.tp * result.pp > 1:
        where = f"{result.tp * result.pp} x {result.gpu} (tp {result.tp}, pp {result.pp}; the tightest GPU)"
    sheet = Sheet(
        title=f"Fit: {result.model} on {where}, {result.batch:,} x {result.seq:,} tokens, {result.weight_format or result.dtype} weights, {result.kv_dtype} KV",
        columns=["per GPU", "bytes", ""],
        text_columns=(0, 2),
    )
    if result.sglang is not None:  # SGLang's pool decides: its own division (no pool where it would not start)
        from kvcalc.present.sglang import table_rows

        sheet.rows = table_rows(result)
    else:
        sheet.rows = _kvcalc_rows(result)
    sheet.notes.append(
        f"Verdict: {result.verdict.rstrip('.')}." if result.verdict else f"Fits: {'yes' if result.fits else 'no'}."
    )
    sheet.notes.append(f"Accounting: {result.accounting}.")
    if result.dp_attention or result.ep > 1:
        ranks = f"DP attention over {result.tp} ranks (each keeps its own requests' KV)" if result.dp_attention else ""
        experts = f"expert parallelism {result.ep}" if result.ep > 1 else ""
        sheet.notes.append(f"Layout: {', '.join(x for x in (ranks, experts) if x)}; KV capacity counts every rank.")
    whose = "" if result.capacity_basis == "kvcalc" else f" ({result.capacity_basis}'s pool)"
    sheet.notes.append(f"Largest batch at {result.seq:,} tokens{whose}: {result.max_batch:,}.")
    sheet.notes.append(f"Largest context at batch {result.batch:,}{whose}: {_largest_context(result)}.")
    basis = "" if result.capacity_basis == "kvcalc" else f" ({result.capacity_basis}'s definition)"
    # Windowed layers stop growing at their window: requests of --seq tokens then hold more tokens than the
    # capacity counted at every layer's rate (vLLM's definition too). Say both rather than leave them to disagree.
    held = int(result.max_concurrency * result.seq)
    windows = (
        f" with every layer caching each token ({held:,} in {result.seq:,}-token requests, their windowed"
        " layers capped)"
        if result.capacity_basis == "kvcalc" and held > result.kv_capacity_tokens * 1.01
        else ""
    )
    sheet.notes.append(
        f"KV capacity{basis}: {result.kv_capacity_tokens:,} tokens{windows}; "
        f"concurrency for {result.seq:,}-token requests: {result.max_concurrency:.2f}x."
    )
    if result.kv_heads_replicated:
        sheet.notes.append(
            f"Replicated KV heads: tp {result.tp} exceeds the model's KV heads, so each rank keeps a whole head "
            "(more cache per rank than an even split)."
        )
    if result.vllm:
        v = result.vllm
        sheet.notes.append(
            f"vLLM {v.version} accounting ({v.num_blocks:,} blocks of {v.block_size}, page {v.page_bytes_per_layer:,} B per layer, "
            f"{v.kv_cache_groups} group(s) of {v.group_size} layers):"
        )
        if v.requested_bytes is not None:
            sheet.notes.append(
                f"  predicted: requested {_bytes(v.requested_bytes)} ({_bytes(v.gpu_total_bytes)} x {result.gpu_util:g})"
                f" - weights {_bytes(v.weights_bytes)} ({v.weight_format}) - profiling peak "
                f"{_bytes(v.profile_peak_bytes)} - non-torch {_bytes(v.non_torch_bytes)}"
            )
        sheet.notes += [f"  {line}" for line in v.log_lines]
        if v.startup is not None and v.startup.refusal:
            sheet.notes.append(
                f"  start-up check (max_model_len {v.startup.max_model_len:,}): ValueError: {v.startup.refusal}"
            )
        sheet.notes += [f"  not sized (left out of the figures above): {u}" for u in v.not_sized]
    if result.sglang:
        from kvcalc.present.sglang import notes

        sheet.notes += notes(result.sglang)
    if result.slo:
        s = result.slo
        goal = " and ".join(
            g
            for g in (
                f"TPOT <= {s.tpot_ms:g} ms" if s.tpot_ms else "",
                f"TTFT <= {s.ttft_ms:g} ms" if s.ttft_ms else "",
            )
            if g
        )
        if s.met:
            sheet.notes.append(
                f"Largest batch meeting {goal} ({s.basis}): {s.batch:,}; TPOT {fmt_seconds(s.tpot_s)}, "
                f"{s.tokens_per_s:,.1f} tokens/s"
                + (f", TTFT {fmt_seconds(s.ttft_s)}" if s.ttft_s is not None else "")
                + (f"; the ceiling would allow {s.ceiling_batch:,}" if s.ceiling_batch is not None else "")
            )
        else:
            sheet.notes.append(
                f"No batch meets {goal} ({s.basis}): batch 1 takes TPOT {fmt_seconds(s.tpot_s)}"
                + (f", TTFT {fmt_seconds(s.ttft_s)}" if s.ttft_s is not None else "")
            )
    if result.concurrency_slo:
        sheet.notes.append(f"Serving (closed loop, continuous batching): {result.concurrency_slo.message}.")
    sheet.notes += [f"Warning: {w}" for w in result.warnings]
    return sheet


def _largest_context(result) -> str:  # noqa: ANN001
    """The capped figure, saying when memory would hold more than the model's maximum context."""
    memory = result.max_seq_memory
    if result.max_seq is None:
        return "unbounded by memory (no layer's cache grows with the context)"
    if result.max_seq == 0:
        return f"none: {result.batch:,} requests are never held at once"
    if memory is None or memory > result.max_seq:
        held = "any length: no layer's cache grows with it" if memory is None else f"{memory:,}"
        limit = result.max_seq_limit or "the model's max_position_embeddings"
        return f"{result.max_seq:,} tokens, {limit} (memory would hold {held})"
    return f"{result.max_seq:,} tokens"


def fit_grid_sheet(results: list) -> Sheet:
    """One row per batch x seq combination (fit with lists or ranges), the verdict of each."""
    first = results[0]
    where = gpus_of(first) if first.tp * first.pp > 1 else f"one {first.gpu}"
    goals = first.slo is not None
    many = len({r.gpu for r in results}) > 1  # fit --gpu h100,h200: a GPU column
    if many:
        where = f"{first.tp * first.pp} x each GPU (tp {first.tp}, pp {first.pp})"
    sheet = Sheet(
        title=f"Fit: {first.model} on {where}, {first.weight_format or first.dtype} weights, {first.kv_dtype} KV, per GPU",
        columns=[
            *(["gpu"] if many else []),
            "batch",
            "seq",
            "weights",
            "KV cache",
            "total",
            "budget",
            "fits",
            "largest\nbatch",
            *(["batch for\ngoals"] if goals else []),
            *(["SGLang\n#tokens", "SGLang\nfits"] if first.sglang else []),
        ],
        text_columns=(0,) if many else (),
        # NOTE: the verdict (fits) stays longest; weights and budget are the same on every row
        optional=tuple(i + many for i in (2, 5, 4, 7, 3)),  # weights, budget, total, largest batch, KV cache
    )
    for r in results:
        p = r.per_gpu
        sheet.rows.append(
            [
                *([r.gpu] if many else []),
                f"{r.batch:,}",
                f"{r.seq:,}",
                _bytes(p.weight_bytes),
                _bytes(p.kv_bytes + p.state_bytes),
                _bytes(p.weight_bytes + p.kv_bytes + p.state_bytes + p.reserve_bytes),
                _bytes(p.budget_bytes),
                "yes" if r.fits else "NO",
                f"{r.max_batch:,}",
                *([f"{r.slo.batch:,}" if r.slo and r.slo.met else "none"] if goals else []),
                *([f"{r.sglang.max_total_num_tokens:,}", "yes" if r.sglang.fits else "NO"] if r.sglang else []),
            ]
        )
    bad = [r for r in results if not r.ok]
    sheet.notes.append(
        f"Verdict: all {len(results):,} combinations fit" + (" and meet the goals." if goals else ".")
        if not bad
        else f"Verdict: {len(bad):,} of {len(results):,} do not; the first: {bad[0].verdict.rstrip('.')}."
    )
    sheet.notes += [f"Warning: {w}" for w in dict.fromkeys(w for r in results for w in r.warnings)]
    return sheet


def generate_sheet(results: list) -> Sheet:
    first = results[0]
    where = gpus_of(first)
    est = first.estimate
    sheet = Sheet(
        title=f"Generate: {first.model} on {where}, batch {first.batch:,}, prompt {first.prompt:,} + {first.new:,} new tokens, "
        f"KV {first.kv_dtype}",
        columns=["", *[r.basis for r in results], *([f"estimate ({est.engine}) [80% interval]"] if est else [])],
    )

    def band(name: str, fmt=fmt_seconds) -> list[str]:  # noqa: ANN001
        if est is None:
            return []
        lo, hi = est.interval[name]
        return [f"{fmt(getattr(est, name))} [{fmt(lo)} - {fmt(hi)}]"]

    def rate(x: float) -> str:
        return f"{x:,.1f}"

    sheet.rows += [
        ["time to first token", *[fmt_seconds(r.ttft_s) for r in results], *band("ttft_s")],
        ["time per output token (first)", *[fmt_seconds(r.tpot_first_s) for r in results], *([""] if est else [])],
        ["time per output token (last)", *[fmt_seconds(r.tpot_last_s) for r in results], *([""] if est else [])],
        ["time per output token (mean)", *[fmt_seconds(r.tpot_s) for r in results], *band("tpot_s")],
        ["total", *[fmt_seconds(r.total_s) for r in results], *band("total_s")],
        ["tokens/s (all sequences)", *[f"{r.tokens_per_s:,.1f}" for r in results], *band("tokens_per_s", rate)],
    ]
    pad = [""] if est else []
    if first.tp * first.pp > 1:
        sheet.rows.append(["communication per step", *[fmt_seconds(r.comm_seconds_per_step) for r in results], *pad])
    sheet.rows.append(["fits in memory", *["yes" if r.fits else "NO" for r in results], *pad])
    if est:
        sheet.notes.append(
            f"{est.basis[:1].upper()}{est.basis[1:]}: a run is predicted to measure it, and 8 in 10 to fall in the interval."
        )
    sheet.notes.append(
        "Ceilings: no real run beats them."
        if len(results) == 1
        else "The ceiling is a bound; the estimate scales both roofs."
    )
    if first.routed and first.basis == "ceiling":
        sheet.notes.append(moe_ceiling_note(first.routed))
    sheet.notes.append(f"Memory per GPU at {first.prompt + first.new:,} tokens: {first.memory_note}.")
    sheet.notes += [f"Warning: {w}" for w in first.warnings]
    return sheet
