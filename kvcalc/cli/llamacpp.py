"""`--engine llamacpp` on cache and fit: llama.cpp's options, and the runs that answer them."""

# NOTE: no `from __future__ import annotations` in the CLI modules (Typer evaluates annotations).
from typing import Annotated, Any, Optional

import typer

from kvcalc.errors import UsageError

EngineVersionOpt = Annotated[
    Optional[str],
    typer.Option(
        "--engine-version",
        help="llama.cpp build era whose rules apply: 2026-04 (default, newest read), 2026-01, 2025-12, 2025-08, 2025-03, or b7108.",
    ),
]
QuantOpt = Annotated[
    Optional[str], typer.Option("--quant", help="GGUF quant of a hub repo: Q4_K_M (same as org/repo:Q4_K_M).")
]
ParallelOpt = Annotated[
    int, typer.Option("--parallel", "-np", help="llama.cpp -np: sequences served at once (default 1).")
]
KvUnifiedOpt = Annotated[
    bool, typer.Option("--kv-unified", help="llama.cpp --kv-unified: one cache shared by the --parallel sequences.")
]
UbatchOpt = Annotated[
    int, typer.Option("--ubatch", "-ub", help="llama.cpp -ub: physical batch in tokens (default 512).")
]
FlashAttnOpt = Annotated[
    str, typer.Option("--flash-attn", "-fa", help="llama.cpp -fa on|off (default on; a quantized V cache needs on).")
]
NglOpt = Annotated[
    Optional[int],
    typer.Option(
        "--ngl",
        help="llama.cpp -ngl: layers on the GPU, the output layer counting as one (default: all; fit: the most that fit).",
    ),
]
CpuMoeOpt = Annotated[
    bool,
    typer.Option(
        "--cpu-moe", "-cmoe",
        help="llama.cpp --cpu-moe: every layer's routed experts stay in system memory (the CPU multiplies them).",
    ),
]  # fmt: skip
NCpuMoeOpt = Annotated[
    Optional[int],
    typer.Option("--n-cpu-moe", "-ncmoe", help="llama.cpp --n-cpu-moe N: the routed experts of the first N layers stay "
                 "in system memory, the rest of those layers on the GPU."),
]  # fmt: skip
SwaFullOpt = Annotated[
    bool, typer.Option("--swa-full", help="llama.cpp --swa-full: sliding-window layers keep the whole context.")
]
CpuBwOpt = Annotated[
    float,
    typer.Option(
        "--cpu-bandwidth",
        help="System memory GB/s (nominal: channels x MT/s x 8 B) for weights left on the CPU, layers or --n-cpu-moe "
        "experts (default 64: dual-channel DDR5-4000); llama.cpp reaches about 0.55 of it.",
    ),
]


def cache_types(kv_dtype: Optional[str]) -> tuple[str, str]:
    """-ctk/-ctv from --kv-dtype: llama.cpp's names (f16, q8_0, ...) or kvcalc's (fp16, bf16, fp32, int8, int4)."""
    from kvcalc.engines.llamacpp.kv import cache_type
    from kvcalc.model.gguf.types import KV_CACHE_TYPES

    name = cache_type(kv_dtype)
    if name is None:
        raise UsageError(
            f"--kv-dtype {kv_dtype} is not a llama.cpp cache type",
            hint="llama.cpp's -ctk/-ctv: " + ", ".join(KV_CACHE_TYPES) + " (int8, int4: q8_0, q4_0)",
        )
    return name, name


def cpu_moe_layers(cpu_moe: bool, n_cpu_moe: Optional[int]) -> int:
    """The first layers whose experts stay in system memory: --cpu-moe (all) or --n-cpu-moe N (0: none)."""
    from kvcalc.engines.llamacpp.buffers import CPU_MOE_ALL

    if n_cpu_moe is not None and n_cpu_moe < 0:
        raise UsageError(f"--n-cpu-moe takes a number of layers, 0 or more, not {n_cpu_moe}")
    return CPU_MOE_ALL if cpu_moe else n_cpu_moe or 0


def settings(
    parallel: int,
    kv_unified: bool,
    ubatch: int,
    flash_attn: str,
    swa_full: bool,
    kv_dtype: Optional[str],
    cpu_moe: int = 0,
) -> dict[str, Any]:
    if parallel < 1 or ubatch < 1:
        raise UsageError("--parallel and --ubatch must be at least 1")
    fa = flash_attn.strip().lower()
    if fa not in ("on", "off"):
        raise UsageError(f"--flash-attn takes on or off, not '{flash_attn}'")
    tk, tv = cache_types(kv_dtype)
    return dict(
        parallel=parallel,
        kv_unified=kv_unified,
        ubatch=ubatch,
        flash_attn=fa == "on",
        swa_full=swa_full,
        type_k=tk,
        type_v=tv,
        cpu_moe=cpu_moe,
    )


def _model(model: str, quant: Optional[str], dtype: Optional[str] = None):  # noqa: ANN202
    """(spec, tensor rows, quant label, exact weights?, file bytes) of MODEL: a GGUF (its own tensor table), or any
    model, its weights from its parameters: f16, or --dtype's llama.cpp quant laid out as llama-quantize would
    write it (model/gguf/mix.tensor_table; one type for every matrix where that has no table, as for MLA)."""
    from kvcalc.engines.llamacpp.memory import rows_of
    from kvcalc.model.gguf.source import is_gguf_ref, open_gguf
    from kvcalc.plan.quants import llamacpp_weights

    wtype = llamacpp_weights(dtype)
    if is_gguf_ref(model) or quant:
        if wtype is not None:
            raise UsageError(
                "--dtype does not apply to a GGUF: its tensors keep the file's types",
                hint="--quant Q4_K_M picks another quant of a hub repo",
            )
        g = open_gguf(model, quant)
        return g.spec, rows_of(g.tensors), g.label, True, g.file_bytes
    from kvcalc.plan.inputs import resolve
    from kvcalc.plan.quants import estimated_table

    spec = resolve(model, {}).spec
    rows, label = estimated_table(spec, wtype)
    return spec, rows, label, False, 0


def _backend(gpu_spec) -> str:  # noqa: ANN001
    return "metal" if gpu_spec is not None and gpu_spec.unified_memory else "cuda"


def run_cache(
    model: str,
    seqs: list[int],
    gpu_spec,
    kv_dtype: Optional[str],
    quant: Optional[str],
    version: Optional[str],
    ngl: Optional[int],
    opts: dict[str, Any],
    dtype: Optional[str] = None,
):  # noqa: ANN001, ANN201
    """(payload, sheets) of `cache --engine llamacpp`: llama.cpp's buffers at each -c."""
    from kvcalc.engines.llamacpp.eras import era
    from kvcalc.engines.llamacpp.memory import llamacpp_memory

    spec, rows, label, exact, _ = _model(model, quant, dtype)
    e = era(version)
    results = []
    for s in seqs:
        r = llamacpp_memory(
            spec,
            rows,
            s,
            e,
            weights_exact=exact,
            ngl=999 if ngl is None else ngl,
            n_gpus=1,
            backend=_backend(gpu_spec),
            capacity_bytes=gpu_spec.capacity_bytes if gpu_spec else None,
            unified_memory=bool(gpu_spec and gpu_spec.unified_memory),
            **opts,
        )
        results.append(
            {"model": spec.name, "quant": label, "seq": s, "gpu": gpu_spec.name if gpu_spec else None, "llamacpp": r}
        )
    return results


def run_fit(
    model: str,
    gpu_spec,
    seq: int,
    kv_dtype: Optional[str],
    quant: Optional[str],
    version: Optional[str],
    ngl: Optional[int],
    cpu_gb_s: float,
    opts: dict[str, Any],
    headroom: int | None = None,
    dtype: Optional[str] = None,
):  # noqa: ANN001, ANN201
    """QuantFit for MODEL on the GPU at -c seq: every quant of a GGUF repo, or the one model given; `headroom` kept
    free (default llama.cpp's --fit margin)."""
    import re
    from concurrent.futures import ThreadPoolExecutor

    from kvcalc.engines.llamacpp.eras import era
    from kvcalc.engines.llamacpp.memory import rows_of
    from kvcalc.engines.llamacpp.server import FIT_HEADROOM
    from kvcalc.model.gguf.source import HUB_REF, hub_listing, is_gguf_ref, open_hub
    from kvcalc.plan.calibration import constants_for
    from kvcalc.plan.quants import QuantFit, quant_row

    if cpu_gb_s <= 0:
        raise UsageError("--cpu-bandwidth must be positive (GB/s)")
    e = era(version)
    unified = bool(gpu_spec.unified_memory)
    if unified and opts.get("n_gpus", 1) > 1:
        raise UsageError(f"{gpu_spec.name} is one unified-memory chip: --gpus does not apply")
    headroom = FIT_HEADROOM if headroom is None else headroom
    capacity = gpu_spec.capacity_bytes - headroom
    if capacity <= 0:
        raise UsageError(f"--reserve leaves nothing of {gpu_spec.name}'s memory")
    common = dict(
        capacity=capacity,
        cpu_bw=int(cpu_gb_s * 1e9),
        unified=unified,
        gpu=gpu_spec,
        calibration=constants_for(gpu_spec, "llamacpp"),
    )
    settings_ = dict(opts, backend=_backend(gpu_spec), weights_exact=True)
    m = re.match(HUB_REF, model)
    is_repo = (
        m is not None
        and not model.lower().endswith(".gguf")
        and not m.group("quant")
        and not quant
        and is_gguf_ref(model)
    )
    if is_repo and dtype is not None:
        from kvcalc.plan.quants import llamacpp_weights

        llamacpp_weights(dtype)  # a bad --dtype is named as such first
        raise UsageError("--dtype does not apply to a GGUF repo: each quant's file keeps its types",
                         hint="--quant Q4_K_M (or org/repo:Q4_K_M) for one of its quants")  # fmt: skip
    if is_repo:
        repo, rev, _, quants = hub_listing(model)
        with ThreadPoolExecutor(max_workers=8) as pool:
            models = list(pool.map(lambda q: open_hub(repo, rev, q), quants))
        items = [(g.label or "?", g.file_bytes, g.spec, rows_of(g.tensors)) for g in models]
        name = repo
    else:
        spec, rows, label, exact, size = _model(model, quant, dtype)
        settings_["weights_exact"] = exact
        items = [(label or ("f16 (estimated)" if not exact else "?"), size, spec, rows)]
        name = spec.name
    out = []
    for label, size, spec, rows in items:
        out.append(quant_row(label, size, spec, rows, seq, e, ngl=ngl, **common, **settings_))
    return QuantFit(
        model=name,
        gpu=gpu_spec.name if opts.get("n_gpus", 1) == 1 else f"{opts['n_gpus']} x {gpu_spec.name}",
        capacity_bytes=capacity,
        headroom_bytes=headroom,
        n_ctx=seq,
        cpu_bandwidth_bytes_per_s=int(cpu_gb_s * 1e9),
        placed_by_user=ngl is not None,
        rows=out,
    )


def _check_engine(engine: str) -> None:
    if engine.strip().lower() not in ("llamacpp", "llama.cpp", "llama-cpp"):
        raise UsageError(
            f"cache --engine takes llamacpp, not '{engine}'", hint="vLLM's figures: `kvcalc fit --engine vllm`"
        )


def cache_command(
    model: str,
    engine: str,
    batches: list[int],
    seqs: list[int],
    gpu: Optional[str],
    tp: int,
    kv_dtype: Optional[str],
    quant: Optional[str],
    version: Optional[str],
    ngl: Optional[int],
    fmt,
    opts: dict[str, Any],
    dtype: Optional[str] = None,
) -> None:  # noqa: ANN001
    """`kvcalc cache MODEL --engine llamacpp`: print llama.cpp's buffers at each --seq (-c)."""
    from kvcalc.cli.common import _emit, _gpu, _gpu_names

    _check_engine(engine)
    if batches != [1]:
        raise UsageError(
            "--batch does not apply to llama.cpp", hint="--parallel N: sequences llama-server serves at once"
        )
    if tp != 1:
        raise UsageError("--tp does not apply to llama.cpp", hint="llama.cpp splits layers over GPUs, not tensors")
    names = _gpu_names(gpu)
    if len(names) > 1:
        raise UsageError("cache takes one --gpu")
    gpu_spec = _gpu(names[0]) if names else None
    rows = run_cache(model, seqs, gpu_spec, kv_dtype, quant, version, ngl, opts, dtype)

    def payload() -> dict[str, Any]:
        dumped = [{**r, "llamacpp": r["llamacpp"].model_dump(mode="json")} for r in rows]
        return dumped[0] if len(dumped) == 1 else {"rows": dumped}

    def sheets() -> list:
        from kvcalc.present.llamacpp import buffers_sheet

        return [
            buffers_sheet(
                r["llamacpp"],
                f"{r['model']}{f' {q}' if (q := r['quant']) else ''} with llama.cpp at -c {r['seq']:,}"
                + (f" on {r['gpu']}" if r["gpu"] else ""),
            )
            for r in rows
        ]

    def csv_rows() -> list[dict[str, Any]]:
        keys = (
            "kv_bytes",
            "kv_cells",
            "kv_streams",
            "model_buffer_bytes",
            "cpu_mapped_bytes",
            "compute_buffer_bytes",
            "gpu_layers",
            "fits",
        )
        return [
            {"model": r["model"], "quant": r["quant"], "seq": r["seq"], **{k: getattr(r["llamacpp"], k) for k in keys}}
            for r in rows
        ]

    _emit(fmt, payload, sheets, csv_rows)


def fit_command(
    model: str,
    gpu: str,
    seqs: list[int],
    batches: list[int],
    kv_dtype: Optional[str],
    quant: Optional[str],
    version: Optional[str],
    ngl: Optional[int],
    cpu_gb_s: float,
    fmt,  # noqa: ANN001
    opts: dict[str, Any],
    reserve: Optional[str] = None,
    dtype: Optional[str] = None,
) -> int:
    """`kvcalc fit MODEL --gpu G --engine llamacpp`: which quant fits; returns the exit status (0 when one fits fully)."""
    from kvcalc.cli.common import _emit, _gpu

    if batches != [1]:
        raise UsageError(
            "--batch does not apply to llama.cpp", hint="--parallel N: sequences llama-server serves at once"
        )
    if len(seqs) != 1:
        raise UsageError("fit --engine llamacpp takes one --seq (llama.cpp's -c)")
    from kvcalc.units import parse_bytes

    headroom = parse_bytes(reserve, "--reserve") if reserve is not None else None
    q = run_fit(model, _gpu(gpu), seqs[0], kv_dtype, quant, version, ngl, cpu_gb_s, opts, headroom, dtype)

    def sheets() -> list:
        from kvcalc.present.llamacpp import buffers_sheet, quants_sheet

        out = [quants_sheet(q)]
        if len(q.rows) == 1:
            out.append(buffers_sheet(q.rows[0].llamacpp, f"{q.model} with llama.cpp at -c {q.n_ctx:,} on {q.gpu}"))
        return out

    def csv_rows() -> list[dict[str, Any]]:
        return [{k: v for k, v in r.model_dump().items() if k != "llamacpp"} for r in q.rows]

    _emit(fmt, lambda: q.model_dump(mode="json"), sheets, csv_rows)
    return 0 if any(r.fits_fully for r in q.rows) else 3


def wanted(engine: Optional[str]) -> bool:
    return engine is not None and engine.strip().lower() in ("llamacpp", "llama.cpp", "llama-cpp")


def fit_exit(
    model: str,
    gpu: str,
    seq: str,
    batch: str,
    kv_dtype: Optional[str],
    quant: Optional[str],
    version: Optional[str],
    ngl: Optional[int],
    cpu_gb_s: float,
    fmt,
    reserve: Optional[str],
    ranks: tuple,
    llama: tuple,
    dtype: Optional[str] = None,
) -> None:  # noqa: ANN001
    """`fit --engine llamacpp` from fit's options: prints, then exits 0 when a quant fits fully, else 3."""
    from kvcalc.units import parse_range

    tp, pp, gpus = ranks
    if tp is not None or pp is not None:
        raise UsageError("llama.cpp splits layers over GPUs: give --gpus N, not --tp / --pp")
    *own, cpu_moe = llama
    opts = settings(*own, kv_dtype, cpu_moe=cpu_moe)
    opts["n_gpus"] = gpus or 1
    seqs, batches = parse_range(seq, "--seq"), parse_range(batch, "--batch")
    raise typer.Exit(
        fit_command(model, gpu, seqs, batches, kv_dtype, quant, version, ngl, cpu_gb_s, fmt, opts, reserve, dtype)
    )
