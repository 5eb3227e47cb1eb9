"""SGLang's predicted start-up figures as fit's sheet notes (fit --engine sglang)."""

from __future__ import annotations


def notes(p) -> list[str]:  # noqa: ANN001
    """The "SGLang <release> accounting" block under fit's sheet: SGLang's own lines, then concurrency."""
    how = "the release's default for this card" if p.mem_fraction_default else "given"
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
