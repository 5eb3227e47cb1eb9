"""Attention variants of a base model for `kvcalc compare`: mha, gqa[:G], mqa, mla[:R+r], swa:W, +dtype."""

import re

from kvcalc.cost.kvcache import cache_report
from kvcalc.errors import UsageError
from kvcalc.model.spec import LayerKind, LayerRun, ModelSpec
from kvcalc.results import Result
from kvcalc.units import KV_DTYPES, normalize_dtype, parse_count

VARIANTS = ("mha", "gqa", "gqa:G", "mqa", "mla", "mla:R+r", "swa:W")
_VARIANT = re.compile(r"(mha|gqa|mqa|mla|swa)(?::([0-9a-z+]+))?")


# NOTE: this command's result models live here, beside the function that returns them, so that
# another command does not define them at start-up; and no `from __future__ import annotations`
# in this module: Pydantic would compile every field's annotation string at import.
class CompareRow(Result):
    name: str
    kv_heads: int | None
    kv_dtype: str
    bytes_per_token: int
    total_bytes: int
    ratio: float | None  # total_bytes / first row's total_bytes; None when the first caches nothing (Mamba)
    # kv_heads: None for an MLA latent, 0 for a model without attention
    state_bytes: int = 0  # the batch's constant recurrent state (SSM / linear attention) beside the KV cache


class CompareResult(Result):
    model: str | None  # the base model of the variants; None when only models are compared
    batch: int
    seq: int
    rows: list[CompareRow]


def split_dtype(item: str) -> tuple[str, str | None]:
    """'gqa+fp8' -> ('gqa', 'fp8')."""
    base, plus, dtype = item.rpartition("+")
    if plus and dtype.lower() in KV_DTYPES and base:
        return base, normalize_dtype(dtype, KV_DTYPES)
    return item, None


def is_variant(item: str) -> bool:
    return _VARIANT.fullmatch(split_dtype(item)[0].lower()) is not None


def _with_kv_heads(base: ModelSpec, kv_heads: int, name: str, mha: bool = False) -> ModelSpec:
    # Per-head K/V everywhere: MLA layers become full attention of the base model's head shape; under MHA a layer
    # with query heads of its own (Laguna) gets as many KV heads.
    pattern = [
        run.model_copy(update={"kind": LayerKind.FULL, "kv_heads": None})
        if run.kind == LayerKind.MLA
        else run.model_copy(update={"kv_heads": run.num_heads if mha else None})
        for run in base.layer_pattern
    ]
    if base.num_heads % kv_heads:
        raise UsageError(
            f"{name}: {base.num_heads} query heads cannot be split into {kv_heads} KV-head groups",
            hint=f"use a divisor of {base.num_heads}",
        )
    # NOTE: the heads replace the latent, and with it DeepSeek Sparse Attention's indexer (it selects latent rows).
    no_indexer = {"index_heads": None, "index_head_dim": None, "index_topk": None}
    # an MLA model's v_head_dim is its up-projected values' width: its per-head stand-in caches K and V alike
    v = {"v_head_dim": None} if base.is_mla else {}
    return base.with_changes(
        name=name, num_kv_heads=kv_heads, kv_lora_rank=None, layer_pattern=pattern, **no_indexer, **v
    )


def apply_variant(base: ModelSpec, item: str) -> ModelSpec:
    """The base model with its attention replaced as `item` says."""
    text, _ = split_dtype(item)
    m = _VARIANT.fullmatch(text.lower())
    if not m:
        raise UsageError(
            f"unknown variant '{item}'", hint=f"variants: {', '.join(VARIANTS)}, each optionally +fp8/+int4"
        )
    kind, arg = m.groups()
    if kind == "mha":
        return _with_kv_heads(base, base.num_heads, item, mha=True)
    if kind == "mqa":
        return _with_kv_heads(base, 1, item)
    if kind == "gqa":
        if arg:
            groups = _int(arg, item)
        else:
            groups = base.kv_heads if base.kv_heads < base.num_heads and not base.is_mla else 8
        return _with_kv_heads(base, groups, item)
    if kind == "mla":
        rank, rope = 512, 64
        if arg:
            parts = arg.split("+")
            if len(parts) != 2:
                raise UsageError(f"'{item}': write the latent as mla:RANK+ROPE, e.g. mla:512+64")
            rank, rope = _int(parts[0], item), _int(parts[1], item)
        pattern = [
            run.model_copy(update={"kind": LayerKind.MLA, "kv_heads": None, "window_tokens": None})
            if run.kind.self_head_kv
            else run
            for run in base.layer_pattern
        ]
        return base.with_changes(name=item, kv_lora_rank=rank, qk_rope_head_dim=rope, layer_pattern=pattern)
    # swa
    if not arg:
        raise UsageError(f"'{item}': give the window, e.g. swa:4096")
    window = _int(arg, item)
    runs = base.layer_pattern or [LayerRun(kind=LayerKind.MLA if base.is_mla else LayerKind.FULL)]
    pattern = [
        run.model_copy(update={"kind": LayerKind.SLIDING, "window_tokens": window}) if run.kind.self_head_kv else run
        for run in runs
    ]
    return base.with_changes(name=item, layer_pattern=pattern)


def _int(text: str, item: str) -> int:
    return parse_count(text, f"'{item}'")


def compare_report(
    rows: list[tuple[str, ModelSpec, str]], batch: int, seq: int, base_name: str | None, steps: list[str] | None = None
) -> CompareResult:
    """Cache size of each (label, spec, kv dtype) at batch × seq, relative to the first row."""
    out: list[CompareRow] = []
    for label, spec, kv_dtype in rows:
        row_steps: list[str] = []
        cache = cache_report(spec, batch, seq, kv_dtype, steps=row_steps)
        if steps is not None:
            ratio = (
                f" = {cache.total_bytes / out[0].total_bytes:.4g}x the first row" if out and out[0].total_bytes else ""
            )
            steps.append(f"{label}:")
            steps.extend(f"  {line}" for line in row_steps)
            if ratio:
                steps[-1] += ratio
        out.append(
            CompareRow(
                name=label,
                # an MLA model's attention layers cache a latent, not heads (a hybrid's too: Kimi-K3's MLA layers)
                kv_heads=0
                if spec.attention_free
                else None
                if spec.is_mla and not any(run.kind.per_head_kv for run, _ in spec.layer_groups())
                else spec.cached_kv_heads,
                kv_dtype=kv_dtype,
                bytes_per_token=cache.bytes_per_token,
                total_bytes=cache.total_bytes,
                state_bytes=cache.state_bytes,
                ratio=(cache.total_bytes / out[0].total_bytes if out[0].total_bytes else None) if out else 1.0,
            )
        )
    return CompareResult(model=base_name, batch=batch, seq=seq, rows=out)
