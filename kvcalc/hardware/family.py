"""A GPU's family (Ampere, Ada, Hopper, Blackwell, CDNA2/3/4, Apple): the estimate's efficiencies and the
engines' kernel choices are keyed by it, and a preset's family comes from its name."""

from __future__ import annotations

from kvcalc.hardware.gpu import GpuSpec

# GPU families the terms are keyed by; a preset's family comes from its name (gpu_family).
_FAMILY_PREFIXES = (
    ("apple", "apple"),
    ("m1", "apple"),
    ("m2", "apple"),
    ("m3", "apple"),
    ("m4", "apple"),
    ("mi355", "cdna4"),
    ("mi350", "cdna4"),
    ("mi3", "cdna3"),
    ("mi2", "cdna2"),
    ("gb", "blackwell"),
    ("b1", "blackwell"),
    ("b2", "blackwell"),
    ("b3", "blackwell"),
    ("rtx-5", "blackwell"),
    ("rtx-pro", "blackwell"),
    ("rtx-a", "ampere"),  # RTX A6000: GA102, as the 3090
    ("gh", "hopper"),
    ("h", "hopper"),
    ("l4", "ada"),
    ("l40", "ada"),
    ("l20", "ada"),  # AD102, as the L40
    ("rtx-4", "ada"),
    ("rtx-6000-ada", "ada"),
    ("a", "ampere"),
    ("rtx-3", "ampere"),
)


def gpu_family(gpu: GpuSpec | str) -> str:
    """ampere, ada, hopper, blackwell, cdna2/3/4, apple, or "other" (terms then use the shared value)."""
    name = (gpu if isinstance(gpu, str) else gpu.name).lower()
    if name.startswith("rtx-6000-ada"):
        return "ada"
    for prefix, family in _FAMILY_PREFIXES:
        if name.startswith(prefix):
            return family
    return "other"
