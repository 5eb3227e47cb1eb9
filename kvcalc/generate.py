"""Pure end-to-end timing: prefill (TTFT), every decode step as the context grows, and what the cache saves."""

from __future__ import annotations

from kvcalc.kvcache import bytes_per_token
from kvcalc.params import compute_params, weight_bytes_read
from kvcalc.results import GenerateResult
from kvcalc.roofline import decode_attention_flops, decode_row, prefill_attention_flops, prefill_flops, prefill_row
from kvcalc.specs import GpuSpec, ModelSpec
from kvcalc.units import fmt_seconds


def step_time(flops: int, nbytes: int, gpu: GpuSpec, compute_dtype: str, mbu: float = 1.0, mfu: float = 1.0) -> float:
    """max(bytes / (bandwidth x MBU), FLOPs / (peak x MFU)): the ceiling when both are 1."""
    return max(nbytes / (gpu.bandwidth_bytes_per_s * mbu), flops / (gpu.peak_flop_per_s(compute_dtype) * mfu))


def decode_step_seconds(
    spec: ModelSpec,
    gpu: GpuSpec,
    batch: int,
    seq: int,
    dtype: str | None,
    kv_dtype: str,
    compute_dtype: str,
    mbu: float = 1.0,
    mfu: float = 1.0,
    weight_bytes: int | None = None,
) -> float:
    row = decode_row(spec, gpu, batch, seq, dtype, kv_dtype, compute_dtype, weight_bytes=weight_bytes)
    return step_time(row.flops, row.weight_bytes + row.kv_bytes, gpu, compute_dtype, mbu, mfu)


def prefill_seconds(
    spec: ModelSpec,
    gpu: GpuSpec,
    batch: int,
    prompt: int,
    dtype: str | None,
    kv_dtype: str,
    compute_dtype: str,
    mbu: float = 1.0,
    mfu: float = 1.0,
) -> float:
    row = prefill_row(spec, gpu, batch, prompt, dtype, kv_dtype, compute_dtype)
    return step_time(row.flops, row.weight_bytes + row.kv_bytes, gpu, compute_dtype, mbu, mfu)


def forward_flops(spec: ModelSpec, tokens: int) -> int:
    """FLOPs of one full forward pass over `tokens` tokens (no cache): what a cacheless step recomputes."""
    return 2 * compute_params(spec) * tokens + prefill_attention_flops(spec, tokens)


def concat_positions(prompt: int, new: int) -> int:
    """Positions copied when the cache grows by concatenation: every step copies the whole cache,
    (prompt + 1) + ... + (prompt + new); a preallocated buffer writes `new` positions instead."""
    return new * prompt + new * (new + 1) // 2


def generate_report(
    spec: ModelSpec,
    gpu: GpuSpec,
    *,
    batch: int,
    prompt: int,
    new: int,
    dtype: str | None,
    kv_dtype: str,
    compute_dtype: str,
    mbu: float = 1.0,
    mfu: float = 1.0,
    steps: list[str] | None = None,
) -> GenerateResult:
    """Prefill produces the first token; each of the other new - 1 tokens is one decode step over a
    context of prompt + t tokens (t = 1 .. new - 1)."""
    ttft = prefill_seconds(spec, gpu, batch, prompt, dtype, kv_dtype, compute_dtype, mbu, mfu)
    weight = weight_bytes_read(spec, batch, dtype)
    times = [
        decode_step_seconds(spec, gpu, batch, prompt + t, dtype, kv_dtype, compute_dtype, mbu, mfu, weight)
        for t in range(1, new)
    ]
    decode = sum(times)
    total = ttft + decode
    per_token = 2 * compute_params(spec)
    flops_cached = batch * (
        prefill_flops(spec, prompt) + sum(per_token + decode_attention_flops(spec, prompt + t) for t in range(1, new))
    )
    # Without a cache, token t (t = 0 .. new - 1) needs a full forward over all prompt + t tokens.
    flops_uncached = batch * sum(forward_flops(spec, prompt + t) for t in range(new))
    concat = concat_positions(prompt, new)
    per_position = batch * bytes_per_token(spec, kv_dtype)
    basis = "ceiling" if mbu == 1.0 and mfu == 1.0 else f"estimate (MBU {mbu:g}, MFU {mfu:g})"
    tokens_per_s = batch * new / total
    if steps is not None:
        steps += [
            f"[{basis}] prefill of {batch:,} × {prompt:,} tokens: FLOPs {batch:,} × {prefill_flops(spec, prompt):,} (every "
            f"prompt token through the layers, the LM head for the last one only, {prefill_attention_flops(spec, prompt):,} of "
            f"them causal attention); TTFT = max(FLOPs / peak, bytes / bandwidth) = {fmt_seconds(ttft)}",
            f"[{basis}] {len(times):,} decode steps over contexts {prompt + 1:,} .. {prompt + new - 1:,}: "
            f"first {fmt_seconds(times[0] if times else 0)}, last {fmt_seconds(times[-1] if times else 0)}, sum {fmt_seconds(decode)}",
            f"[{basis}] total = {fmt_seconds(ttft)} + {fmt_seconds(decode)} = {fmt_seconds(total)}; "
            f"tokens/s = {batch:,} × {new:,} / {fmt_seconds(total)} = {tokens_per_s:,.1f}",
        ]
    return GenerateResult(
        model=spec.name,
        gpu=gpu.name,
        batch=batch,
        prompt=prompt,
        new=new,
        ttft_s=ttft,
        tpot_s=decode / len(times) if times else 0.0,
        tpot_first_s=times[0] if times else 0.0,
        tpot_last_s=times[-1] if times else 0.0,
        total_s=total,
        tokens_per_s=tokens_per_s,
        basis=basis,
        mbu=mbu,
        mfu=mfu,
        flops_cached=flops_cached,
        flops_uncached=flops_uncached,
        concat_positions_copied=concat,
        prealloc_positions_written=new,
        concat_bytes_copied=concat * per_position,
        prealloc_bytes_written=new * per_position,
    )
