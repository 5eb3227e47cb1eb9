"""llama.cpp build eras: the allocation rules that changed between builds (2025-2026).

Read from llama.cpp's code (the llama-cpp-python 0.3.36 sdist vendors a 2026 tree:
src/llama-context.cpp, src/llama-kv-cache.cpp, src/llama-kv-cache-iswa.cpp) and, for older and
newer builds, the PRs and vendored copies cited in ../shared/reference/llamacpp_rules.md.

| era     | context padding               | SWA layers' cache                                   | MLA cache        | SWA part type |
|---------|-------------------------------|-----------------------------------------------------|------------------|---------------|
| 2025-03 | PAD(n_ctx, FA ? 256 : 32)     | full context (no iSWA cache yet)                    | per-head K and V | -ctk/-ctv     |
| 2025-08 | PAD(n_ctx_seq, FA ? 256 : 32) | min(size, PAD(n_swa*(unified ? np : 1) + ubatch))   | K 576 + V 512    | -ctk/-ctv     |
| 2025-12 | PAD(n_ctx, 256) (b7108)       | PAD(min(size, n_swa*(unified ? np : 1) + ubatch), 256) | K 576 + V 512 | -ctk/-ctv     |
| 2026-01 | as 2025-12                    | as 2025-12                                          | K only (#19067)  | -ctk/-ctv     |
| 2026-04 | as 2025-12                    | as 2025-12                                          | K only           | f16 (#21277)  |

DeepSeek Sparse Attention (deepseek32, glm-dsa) has a cache of its own only in the 2026-04 era (llama_kv_cache_dsa,
PR #21149: the MLA latent plus one indexer key a token and layer, in -ctk's type). From 2026-01, --fit (on by default)
places an MoE model that does not fit whole with its routed experts in system memory first (common/fit.cpp).
"""

from __future__ import annotations

from typing import NamedTuple

from kvcalc.errors import UsageError


class Era(NamedTuple):
    key: str
    note: str
    pad_256: bool  # context padded to 256 whatever FA says (else 256 with FA, 32 without)
    iswa: str  # "none" | "min_pad" (PR #13833) | "pad_min" (b7108, issue 17037)
    streams: bool  # --parallel without kv_unified gets one stream per sequence (PR #14363)
    mla: str  # "mha" (per-head K/V, pre PR #12801) | "kv" (latent K 576 + V 512) | "k" (K only)
    swa_f16: bool  # the SWA part of an iSWA cache stays f16 (PR #21277)
    dsa: bool = False  # DeepSeek Sparse Attention's cache: the latent and an indexer key cache (PR #21149)
    # --fit (on by default from December 2025, common/fit.cpp) places what the user left unset: an MoE model that
    # does not fit whole keeps its routed experts in system memory before it leaves layers to the CPU
    fit_moe: bool = False


ERAS: dict[str, Era] = {
    "2025-03": Era("2025-03", "before PR #13194 (vendored de4c07f93): no SWA cache, MLA as per-head K/V", False, "none", False, "mha", False),
    "2025-08": Era("2025-08", "PR #13833 window cache, streams (vendored 1a19df1f3)", False, "min_pad", True, "kv", False),
    "2025-12": Era("2025-12", "b7108 / ec98e2002: context and SWA cache padded to 256", True, "pad_min", True, "kv", False),
    "2026-01": Era("2026-01", "PR #19067 V-less cache: MLA keeps the K latent only (as llama-cpp-python 0.3.36 vendors)", True, "pad_min", True, "k", False, fit_moe=True),
    "2026-04": Era("2026-04", "PR #21277: the SWA part of the cache stays f16 whatever -ctk/-ctv say", True, "pad_min", True, "k", True, True, fit_moe=True),
}  # fmt: skip
DEFAULT_ERA = "2026-04"
# NOTE: the build numbers the rules name; a bNNNN between two is the older era.
BUILDS = ((7108, "2025-12"), (6840, "2025-08"))


def era(text: str | None) -> Era:
    """--engine-version: an era (2025-12) or a build (b7108); default the newest era read."""
    if text is None:
        return ERAS[DEFAULT_ERA]
    key = text.strip().lower()
    if key in ERAS:
        return ERAS[key]
    if key.startswith("b") and key[1:].isdigit():
        n = int(key[1:])
        found = next((e for b, e in BUILDS if n >= b), None)
        if found is None or (n > BUILDS[0][0]):
            raise UsageError(
                f"llama.cpp build {text}: kvcalc places only b6840-b7108 by number",
                hint="give the era the build falls in: " + ", ".join(ERAS),
            )
        return ERAS[found]
    raise UsageError(f"unknown llama.cpp --engine-version '{text}'", hint="eras: " + ", ".join(ERAS) + " (or b7108)")
