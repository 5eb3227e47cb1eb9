"""`fit --engine sglang`: its Typer options (the checks and the glue are plan/sglang.py).

Light at import (typing and typer only): `kvcalc cache` imports the command modules that register fit."""

from typing import Annotated, Optional

import typer


def _complete_releases(incomplete: str) -> list[str]:
    """SGLang's releases where kvcalc's reading changes (engines/sglang/release.turning_points)."""
    from kvcalc.engines.sglang.release import turning_points

    return [r for r in turning_points() if r.startswith(incomplete.removeprefix("v"))]


def _complete_versions(incomplete: str) -> list[str]:
    """fit's --engine-version: SGLang's releases, then llama.cpp's build eras (engines/llamacpp/eras.ERAS)."""
    from kvcalc.engines.llamacpp.eras import ERAS

    return _complete_releases(incomplete) + [e for e in ERAS if e.startswith(incomplete)]


EngineVersionOpt = Annotated[
    Optional[str],
    typer.Option(
        "--engine-version",
        help="SGLang release whose defaults and accounting to follow, e.g. 0.4.9 or 0.5.5 (default 0.5.23, the newest read); "
        "with --engine llamacpp a llama.cpp build era: 2026-04 (default), 2026-01, 2025-12, 2025-08, 2025-03 or b7108.",
        autocompletion=_complete_versions,
    ),
]
ServedVersionOpt = Annotated[
    Optional[str],
    typer.Option(
        "--engine-version",
        help="With --engine sglang: the SGLang release whose pool, default fraction and chunk size to follow, "
        "e.g. 0.5.5 (default 0.5.23, the newest read).",
        autocompletion=_complete_releases,
    ),
]
MemFractionOpt = Annotated[
    Optional[float],
    typer.Option(
        "--mem-fraction-static",
        help="SGLang --mem-fraction-static (0-1], a share of the free memory before the weights load, not of the "
        "card (default: the release's own pick for the card, tp x pp and chunked_prefill_size).",
    ),
]
ChunkedPrefillOpt = Annotated[
    Optional[int],
    typer.Option(
        "--chunked-prefill-size",
        help="SGLang chunked_prefill_size in tokens (default: the release's for the card, 2048-16384).",
    ),
]
PageSizeOpt = Annotated[Optional[int], typer.Option("--page-size", help="SGLang --page-size in tokens (default 1).")]
MaxRunningOpt = Annotated[
    Optional[int],
    typer.Option(
        "--max-running-requests",
        help="SGLang --max-running-requests (default: min(#tokens // 2, the request pool SGLang sizes)).",
    ),
]
MaxMambaOpt = Annotated[
    Optional[int],
    typer.Option(
        "--max-mamba-cache-size",
        help="SGLang --max-mamba-cache-size: a hybrid model's recurrent-state slots, the rest of the pool's memory "
        "going to KV (default: the release's split, mamba_full_memory_ratio 0.9; taken from 0.5.7, and by 0.5.5-0.5.6 "
        "only with the radix cache off).",
    ),
]
SsmDtypeOpt = Annotated[
    Optional[str],
    typer.Option(
        "--mamba-ssm-dtype",
        help="SGLang --mamba-ssm-dtype: float32 (default), bfloat16 or float16, the dtype of a hybrid model's SSM / "
        "linear-attention state (16-bit halves it, as SGLang's own warning suggests).",
    ),
]
DpAttentionOpt = Annotated[
    bool,
    typer.Option(
        "--dp-attention",
        help="Data-parallel attention (SGLang's enable_dp_attention, dp = tp): each rank keeps whole KV heads and "
        "its own pool (default off).",
    ),
]
