"""GGUF metadata -> an MoE layer's expert widths, as each llama.cpp loader (src/models/<arch>.cpp) builds them."""

from __future__ import annotations

from typing import Any

from kvcalc.errors import SpecError
from kvcalc.model.gguf.reader import arch_value as _get

# How src/models/<arch>.cpp sizes the shared experts' ffn_*_shexp (one MLP): "count" n_expert_shared x n_ff_exp;
# "length x count" (expert_shared_feed_forward_length, else n_ff_exp) x n_expert_shared; "length or count" the
# length, else n_expert_shared x n_ff_exp; "length or one" the length, else n_ff_exp. Others: the length alone
# (ernie4_5-moe, qwen2moe: no shared experts without it).
SHARED_RULES = {
    "deepseek": "count", "deepseek2": "count", "deepseek32": "count", "glm-dsa": "count", "hy_v4": "count",
    "deepseek4": "count",
    "mistral4": "count", "glm4moe": "count", "dots1": "count", "bailingmoe": "count",
    "afmoe": "count", "bailingmoe2": "length x count", "cohere2moe": "length or count", "exaone-moe": "length or one",
    "gemma4": "ff",  # gemma4.cpp: "for expert layers, we use normal FFN as shared expert"
    "kimi-linear": "count or one",  # n_ff_exp x (n_expert_shared, or 1)
    "laguna": "length, else count or one",  # laguna.cpp: the count defaults to 1
}  # fmt: skip


def shared_width(md: dict[str, Any], arch: str, expert: int, ff: int) -> int:
    """The shared experts' MLP width, as llama.cpp builds the ffn_*_shexp tensors (expert: n_ff_exp; ff: the
    dense MLP's feed_forward_length, the widest layer's)."""
    length = int(_get(md, arch, "expert_shared_feed_forward_length", 0) or 0)
    count = int(_get(md, arch, "expert_shared_count", 0) or 0)
    rule = SHARED_RULES.get(arch)
    if rule == "count":
        return count * expert
    if rule == "length x count":
        return count * (length or expert)
    if rule == "length or count":
        return length or count * expert
    if rule == "length or one":
        return length or expert
    if rule == "count or one":
        return max(count, 1) * expert
    if rule == "length, else count or one":
        return length or max(count, 1) * expert
    if rule == "ff":
        return ff
    return length


def expert_width(md: dict[str, Any], arch: str, name: str) -> int | None:
    """expert_feed_forward_length: one number, or one per layer (0 on dense layers) that must agree."""
    value = _get(md, arch, "expert_feed_forward_length")
    if not isinstance(value, list):
        return int(value) if isinstance(value, int) else None
    widths = {int(v) for v in value if v}
    if len(widths) > 1:
        raise SpecError(f"{name}: expert_feed_forward_length differs between layers ({sorted(widths)}); not read")
    return widths.pop() if widths else None
