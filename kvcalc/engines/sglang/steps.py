"""SGLang's pool rule as --explain steps: each term with its bytes (fit --engine sglang)."""

from __future__ import annotations

GIB = 2**30


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def explain(p) -> list[str]:  # noqa: ANN001
    """--explain: each term of SGLang's rule with its bytes."""
    pre, w = p.pre_load_free_bytes, p.weights_bytes
    slack = round(pre * (1 - p.mem_fraction_static))
    lines = [
        f"SGLang {p.release}: free before the weights = CUDA total {p.cuda_total_bytes:,} B - CUDA context - NCCL "
        f"= {pre:,} B ({_gib(pre)})",
        f"weights as SGLang loads them: {w:,} B ({_gib(w)}) per GPU",
        f"rest = (free before - weights) - free before x (1 - {p.mem_fraction_static:g}) = {pre - w:,} - {slack:,} "
        f"= {p.available_kv_bytes + p.mamba_bytes:,} B",
    ]
    if p.mamba_bytes:
        lines.append(f"Mamba / linear-attention state carved out first: {p.mamba_bytes:,} B")
    lines.append(
        f"#tokens = floor({p.available_kv_bytes:,} / {p.cell_bytes:,} B per token) floored to page {p.page_size}"
        f" = {p.max_total_num_tokens:,}"
    )
    return lines
