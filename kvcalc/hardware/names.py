"""How people spell a GPU, read as a preset name: `H100 SXM`, `h200_sxm` (aiconfigurator's system names),
`NVIDIA H100 80GB HBM3` and `NVIDIA A100-SXM4-80GB` (what nvidia-smi prints), `AMD Instinct MI300X`,
`GeForce RTX 4090`. Pure: the preset store (model/presets.get_gpu) tries these spellings only when the name
itself is no preset or alias, and keeps a match only if the GPU it finds has the memory the name states.
"""

from __future__ import annotations

import re
from typing import NamedTuple

# NOTE: words that name the vendor or the product line, never the part: dropped first.
VENDOR_WORDS = frozenset({"nvidia", "amd", "geforce", "instinct", "apple", "tesla", "intel", "habana", "radeon"})
# NOTE: words that name the package or the memory technology of a part the rest of the name already
# fixes (every H100 SXM is an SXM5; "HBM3" beside a capacity), or the box it sits in (DGX, HGX).
# Dropped second. Not "pcie" or "nvl": those name other parts (h100-pcie, h100-nvl).
PACKAGE_WORDS = frozenset(
    {"sxm", "sxm2", "sxm4", "sxm5", "sxm6", "hbm2", "hbm2e", "hbm3", "hbm3e", "gddr6", "gddr6x", "gddr7"}
    | {"dgx", "hgx", "gpu", "gpus"}
)
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)(gb|g|gib)$")
# NOTE: a stated capacity within 7% of the preset's marketed one is the same part: B200 is sold as 180 GB
# and was announced as 192 GB (6.7% apart); the nearest distinct parts are 17% apart (H100 NVL 94 GB
# against H100 80 GB).
MEMORY_TOLERANCE = 0.07


class Spelling(NamedTuple):
    key: str  # a preset name or alias to look up
    memory_bytes: int | None  # the capacity the name states, which the GPU found must have (None: no check)


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[\s_\-/,()]+", name.strip().lower()) if w]


def spellings(name: str) -> list[Spelling]:
    """Keys to try, most literal first: the words joined by '-' without the vendor's, then without the
    package's, then without a stated capacity (kept as a check on the match)."""
    words = [w for w in _words(name) if w not in VENDOR_WORDS]
    out = [Spelling("-".join(words), None)]
    words = [w for w in words if w not in PACKAGE_WORDS]
    out.append(Spelling("-".join(words), None))
    memory = [(w, m) for w in words if (m := _MEMORY.match(w))]
    if len(memory) == 1:
        word, m = memory[0]
        size = float(m.group(1)) * (2**30 if m.group(2) == "gib" else 1e9)
        out.append(Spelling("-".join(w for w in words if w != word), int(size)))
    unique: list[Spelling] = []
    for s in out:
        if s.key and s.key not in {u.key for u in unique}:
            unique.append(s)
    return unique


def same_memory(stated: int | None, marketed: int) -> bool:
    """Whether a capacity a name states is the preset's (MEMORY_TOLERANCE)."""
    return stated is None or abs(stated - marketed) <= MEMORY_TOLERANCE * marketed
