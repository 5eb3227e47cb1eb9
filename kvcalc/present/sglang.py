"""SGLang's predicted start-up figures on fit's sheet (fit --engine sglang): its per-GPU table and notes."""

from __future__ import annotations

from kvcalc.units import fmt_bytes


def table_rows(result) -> list[list[str]]:  # noqa: ANN001
    """fit's per-GPU table as SGLang divides one rank's memory: what was in use before the weights load
    (CUDA context, NCCL), the weights as loaded, the share mem_fraction_static holds back (activations, CUDA
    graphs), the state and KV pools, and what the requested batch takes of the pool, with the verdict word."""
    p = result.sglang
    pool = (p.k_bytes or 0) + (p.v_bytes or 0) + (p.kv_bytes or 0)
    held = int(p.pre_load_free_bytes * (1 - p.mem_fraction_static))
    before = p.cuda_total_bytes - p.pre_load_free_bytes
    left = p.cuda_total_bytes - before - p.weights_bytes - held - p.mamba_bytes - pool
    dp = f" (a DP rank's; {p.dp_size} ranks)" if p.dp_size > 1 else ""
    tokens = -(-result.batch // p.dp_size) * (-(-result.seq // p.page_size) * p.page_size)
    need = "" if p.swa_tokens is not None else fmt_bytes(tokens * p.cell_bytes)
    word = "fits" if p.fits else "DOES NOT FIT"
    pool_row = ["KV pool", fmt_bytes(pool), f"{p.max_total_num_tokens:,} tokens{dp}"]
    asked = (
        f"{result.batch:,} x {result.seq:,} tokens: {tokens:,} of the pool's {p.max_total_num_tokens:,}"
        f"{' a rank' if p.dp_size > 1 else ''}, {word}"
    )
    if p.context_limit:  # refused for the length alone: the pool is what SGLang would have at its own length
        asked = (
            f"{result.batch:,} x {result.seq:,} tokens: SGLang would not start (--context-length beyond the "
            f"config's {p.context_limit:,})"
        )
    elif p.refusal:  # no pool: the weights and the held-back share take all the memory free before load
        over = p.weights_bytes + held + p.mamba_bytes - p.pre_load_free_bytes
        by = f" by {fmt_bytes(over)}" if over > 0 else ""
        pool_row = ["KV pool", fmt_bytes(0), f"none: weights + held back exceed the memory free before load{by}"]
        asked, left = f"{result.batch:,} x {result.seq:,} tokens: SGLang would not start", 0
    rows = [
        ["before load", fmt_bytes(before), "CUDA context, NCCL (in use before the weights load)"],
        ["weights", fmt_bytes(p.weights_bytes), f"as SGLang {p.release} loads them"],
        [
            "held back",
            fmt_bytes(held),
            f"(1 - mem_fraction_static {p.mem_fraction_static:g}) x {fmt_bytes(p.pre_load_free_bytes)} free before "
            "load: activations, CUDA graphs",
        ],
        ["state pool", fmt_bytes(p.mamba_bytes), "SSM / linear-attention states"] if p.mamba_bytes else None,
        pool_row,
        ["not allocated", fmt_bytes(left), "the pool's whole pages and reserves"] if left > 0 else None,
        ["GPU memory", fmt_bytes(p.cuda_total_bytes), f"CUDA total (nvidia-smi {p.gpu_mem_mib:,} MiB)"],
        ["batch's KV", need, asked],
    ]
    return [r for r in rows if r]


def notes(p) -> list[str]:  # noqa: ANN001
    """The "SGLang <release> accounting" block under fit's sheet: SGLang's own lines, then concurrency."""
    how = "the release's default for this card" if p.mem_fraction_default else "given"
    how += ", scaled for the vision tower" if p.vlm_scaled else ""
    out = [
        f"SGLang {p.release} accounting (predicted; 'GB' in SGLang's lines is GiB), mem_fraction_static "
        f"{p.mem_fraction_static:g} ({how}; nvidia-smi {p.gpu_mem_mib:,} MiB):"
    ]
    out += [f"  {line}" for line in p.log_lines]
    if not p.refusal:
        per = f" per DP rank x {p.dp_size}" if p.dp_size > 1 else ""
        out.append(
            f"  concurrency for {p.seq:,}-token requests: {p.max_concurrency:.2f}x "
            f"({p.max_total_num_tokens:,} tokens{per}); fits: {'yes' if p.fits else 'no'}"
        )
    out += [f"  not modelled: {u}" for u in p.not_modelled]
    return out
