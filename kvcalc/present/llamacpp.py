"""Sheets for llama.cpp's figures: the buffers of one model (cache/fit --engine llamacpp) and the
which-quant-fits listing of a GGUF repo."""

from __future__ import annotations

from kvcalc.engines.llamacpp.memory import LlamaCppResult
from kvcalc.plan.quants import QuantFit
from kvcalc.present.sheet import Sheet
from kvcalc.units import fmt_bytes

MiB = 1 << 20


def _mib(n: int) -> str:
    return f"{n / MiB:,.2f} MiB"


def _settings(r: LlamaCppResult, placed: str | None = None) -> str:
    """The flags `r` was sized for; `placed`: what to say of -ngl and --n-cpu-moe instead of their values."""
    return (
        f"llama.cpp build era {r.build} ({r.build_note}); -c {r.n_ctx:,} -np {r.parallel}"
        f"{' --kv-unified' if r.kv_unified else ''} -ub {r.ubatch} -fa {'on' if r.flash_attn else 'off'}"
        f" -ctk {r.type_k} -ctv {r.type_v}{' --swa-full' if r.swa_full else ''} "
        + (placed or f"-ngl {r.ngl}{_cpu_moe(r)}")
    )


def _cpu_moe(r: LlamaCppResult) -> str:
    if not r.cpu_moe:
        return ""
    return " --cpu-moe" if r.cpu_moe >= r.total_layers - 1 else f" --n-cpu-moe {r.cpu_moe}"


def buffers_sheet(r: LlamaCppResult, title: str) -> Sheet:
    """One row per KV cache (as llama.cpp logs it), then one per device."""
    sheet = Sheet(title, ["Buffer", "Cells", "Layers", "K", "V", "Size"], text_columns=(0,))
    for p in r.kv_parts:
        cells = f"{p.cells:,}" + (f" x {p.streams} streams" if p.streams > 1 else "")
        v = f"{_mib(p.v_bytes)} ({p.v_type})" if p.v_type else "none"
        sheet.rows.append([f"{p.cache} KV", cells, str(p.layers), f"{_mib(p.k_bytes)} ({p.k_type})", v, _mib(p.bytes)])
    for d in r.devices:
        if d.name == "CPU":
            sheet.rows.append(["CPU_Mapped model", "", str(d.layers), "", "", _mib(d.model_bytes)])
            if d.kv_bytes:
                sheet.rows.append(["CPU KV", "", "", "", "", _mib(d.kv_bytes)])
            continue
        sheet.rows.append([f"{d.name} model", "", str(d.layers), "", "", _mib(d.model_bytes)])
        sheet.rows.append([f"{d.name} compute (estimate)", "", "", "", "", _mib(d.compute_bytes)])
        total = f"{fmt_bytes(d.total_bytes)}" + (f" of {fmt_bytes(d.capacity_bytes)}" if d.capacity_bytes else "")
        sheet.rows.append([f"{d.name} total", "", "", "", "", total])
    sheet.notes.append(_settings(r))
    sheet.notes.append(
        f"offloaded {r.gpu_layers}/{r.total_layers} layers (the output layer counts as one); token_embd stays "
        "on the CPU (CPU_Mapped)"
        + (
            f", and the routed experts of layers 0-{r.cpu_moe - 1} (llama.cpp's CPU_Mapped line prints the span of "
            "the file it maps, the GPU's tensors between them too)"
            if r.cpu_moe
            else ""
        )  # fmt: skip
        + ("" if r.weights_exact else "; weights estimated from parameters: no GGUF tensor table")
    )
    sheet.notes.append(
        "compute buffer: an estimate, the allocator's peak of the logits, one layer's FFN and (flash attention off) "
        "K*Q, with the attention masks: llama.cpp's own MiB on eight public logs, up to about 50% over it on others (a large "
        f"-ub, MoE, flash attention off at long contexts); totals add {_mib(r.compute_margin_bytes)} for what it "
        "leaves out (MoE routing, recurrent scratch, backend pieces)"
    )
    sheet.notes += [f"Warning: {w}" for w in r.warnings]
    if r.refusal:
        sheet.notes.append(f"llama.cpp would not start: {r.refusal}")
    elif r.fits is not None:
        partial = r.gpu_layers < r.total_layers
        verdict = f"fits with {r.gpu_layers}/{r.total_layers} layers on the GPU" if partial else "fits fully on the GPU"
        if r.cpu_moe:
            verdict = verdict.replace("fully ", "") + f", the routed experts of {r.cpu_moe} layers in system memory"
        sheet.notes.append(verdict if r.fits else "does not fit")
    return sheet


def _speed(v: float) -> str:
    return f"{v:,.1f}" if v >= 10 else f"{v:.2g}"


def _band(v: float | None, band: tuple[float, float] | None) -> str:
    if v is None:
        return "-"
    return _speed(v) + (f" ({_speed(band[0])}-{_speed(band[1])})" if band else "")


def quants_sheet(q: QuantFit) -> Sheet:
    sheet = Sheet(
        f"{q.model} on {q.gpu} ({fmt_bytes(q.capacity_bytes)}) at -c {q.n_ctx:,}: which quant fits",
        ["Quant", "File", "Weights", "KV", "Compute", "Total", "GPU layers"]
        + ["Decode tok/s (80%)", "ceiling", "Prompt tok/s (80%)"],
        text_columns=(0,),
    )
    for r in q.rows:
        where = "all (fits)" if r.fits_fully else f"{r.gpu_layers}/{r.total_layers}"
        if r.llamacpp.cpu_moe and r.llamacpp.fits:
            where += f", experts of {min(r.llamacpp.cpu_moe, r.total_layers - 1)} in RAM"
        if not r.llamacpp.fits:
            where = "does not fit"  # not even the compute buffer (or, on a Mac, not the working set)
        if r.refusal:
            where = "refused"
        sheet.rows.append(
            [
                r.quant,
                fmt_bytes(r.file_bytes) if r.file_bytes else "-",
                fmt_bytes(r.weights_bytes),
                fmt_bytes(r.kv_bytes),
                fmt_bytes(r.compute_bytes),
                fmt_bytes(r.total_bytes),
                where,
                _band(r.decode_tokens_per_s, r.decode_interval),
                _speed(r.decode_tokens_per_s_ceiling),
                _band(r.prompt_tokens_per_s, r.prompt_interval),
            ]
        )
    first = q.rows[0].llamacpp if q.rows else None
    if first is not None:
        placed = "-ngl: the most that fit" + (
            ", an MoE model's experts in system memory first, as llama.cpp's --fit places them" if first.cpu_moe else ""
        )
        sheet.notes.append(_settings(first, None if q.placed_by_user else placed))
    sheet.notes.append(
        f"{fmt_bytes(q.headroom_bytes)} of the GPU kept free for the CUDA context (--reserve), as llama.cpp's --fit does"
    )
    context = q.rows[0].decode_context if q.rows else q.n_ctx
    sheet.notes.append(
        f"Decode tok/s: one sequence holding {context:,} tokens; Prompt tok/s: a 512-token prompt (llama-bench"
        f" pp512). Each an estimate with its 80% interval; ceiling: a bound, not a promise"
    )
    sheet.notes.extend(f"speed: {b}" for b in sorted({r.speed_basis for r in q.rows}))
    sheet.notes.append(
        f"Decode ceiling: a {q.speed_label}; CPU layers at {q.cpu_bandwidth_bytes_per_s / 1e9:,.0f} GB/s (--cpu-bandwidth)"
    )
    sheet.notes.append(
        "Total: the GPU's share (model + KV + compute + 64 MiB margin); weights exact from each file's tensor table"
    )
    return sheet
