"""Result models as sheets (title, columns, rows, notes); sheet.py lays them out as Rich, Markdown or CSV."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.present.sheet import PLAIN_ROWS, Sheet, to_csv, to_markdown, to_rich  # noqa: F401  (the layout: sheet.py)
from kvcalc.units import fmt_bytes, fmt_flops, fmt_params, fmt_rate, plural

if TYPE_CHECKING:  # annotations only: each command imports the result models of its own core module
    from kvcalc.cost.roofline import RooflineResult
    from kvcalc.plan.variants import CompareResult, CompareRow
    from kvcalc.results import CacheResult


def _bytes(n: int) -> str:
    return f"{fmt_bytes(n)}"


def cache_sheet(results: list[CacheResult]) -> Sheet:
    first = results[0]
    tp = f", tp {first.tp} (per rank)" if first.tp > 1 else ""
    sheet = Sheet(
        title=f"KV cache: {first.model}, {first.kv_dtype}{tp}",
        columns=["layers", "kind", "KV\nheads", "elements per\ntoken, layer", "per\ntoken", "tokens\nheld"],
        optional=(3, 5, 2, 4),  # elements, tokens held, KV heads, then bytes per token (also in the notes)
    )
    for layer in first.layers:
        kind = layer.kind + (f" W={layer.window_tokens:,}" if layer.window_tokens else "")
        kind += f" + 1/{layer.compress_ratio}" if layer.compress_ratio else ""
        sheet.rows.append(
            [
                str(layer.layers),
                kind,
                "-" if layer.kv_heads is None else str(layer.kv_heads),
                f"{layer.elements_per_token:,}",
                _bytes(layer.bytes_per_token),
                f"{layer.tokens_held:,}" if layer.elements_per_token else "-",
            ]
        )
    if all(layer.kind == "stateless" for layer in first.layers):
        sheet.notes.append("No KV cache: no layer attends; each holds a constant state per sequence.")
    else:
        sheet.notes.append(
            f"Per token (while every window grows): {_bytes(first.bytes_per_token)} ({first.bytes_per_token:,} B)"
        )
        past = first.bytes_per_token_past_windows
        if past is not None and past != first.bytes_per_token:
            sheet.notes.append(f"Per token once every window is full: {_bytes(past)} ({past:,} B)")
    for r in results:
        line = f"Batch {r.batch:,} x {r.seq:,} tokens: {_bytes(r.total_bytes)} ({r.total_bytes:,} B)"
        if r.state_bytes:
            line += f" + constant recurrent state {_bytes(r.state_bytes)}"
        if r.gpu_memory_share is not None:
            line += f" = {r.gpu_memory_share:.1%} of one {r.gpu} ({_bytes(r.gpu_memory_bytes)})"
        sheet.notes.append(line)
    if first.kv_heads_replicated:
        sheet.notes.append(
            f"KV heads are replicated: tp {first.tp} exceeds a layer's KV heads, so each rank keeps one whole head."
        )
    beyond = [r for r in results if r.warnings]
    if beyond:  # the longest context only: a range would repeat it per value
        sheet.notes += [f"Warning: {w}" for w in max(beyond, key=lambda r: r.seq).warnings]
    return sheet


def _unit(values: list[float], units: list[tuple[str, float]], by=max) -> tuple[str, float]:  # noqa: ANN001
    """The largest unit the column's biggest (or smallest) value reaches: one unit per column."""
    top = by(values, default=0)
    for name, size in units:
        if top >= size:
            return name, size
    return units[-1]


BYTE_UNITS = [("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1)]
FLOP_UNITS = [("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("FLOP", 1)]
TIME_UNITS = [("s", 1), ("ms", 1e-3), ("µs", 1e-6)]


def _fixed(value: float, decimals: int) -> str:
    """A figure in its column's unit: `decimals` places, or three significant digits below 0.1. The
    column's unit follows its largest value, so batch 1 beside batch 32,768 printed 18 ms as '0.02' s
    and 512 KiB as '0.00' GiB."""
    import math

    if value == 0 or abs(value) >= 0.1:
        return f"{value:,.{decimals}f}"
    return f"{value:,.{max(decimals, 2 - math.floor(math.log10(abs(value))))}f}"


def gpus_of(r) -> str:  # noqa: ANN001
    """The GPUs a result ran on, as its titles name them: "h100", or "4 x h100 (tp 4, pp 1)"."""
    return r.gpu if r.tp * r.pp == 1 else f"{r.tp * r.pp} x {r.gpu} (tp {r.tp}, pp {r.pp})"


def moe_ceiling_note(routed: tuple[int, int]) -> str:
    """What a MoE model's ceiling reads (cost/roofline.ceiling_routing), beside its estimate."""
    k, e = routed
    return (
        f"MoE: the ceiling routes every token to the same {k} of {e} experts a layer (identical prompts do), the"
        " fewest a step reads; the estimate, the experts varied tokens reach."
    )


def roofline_sheet(result: RooflineResult) -> Sheet:
    rows = result.rows
    wu, ws = _unit([r.weight_bytes for r in rows], BYTE_UNITS)
    ku, ks = _unit([r.kv_bytes for r in rows], BYTE_UNITS)
    fu, fs = _unit([r.flops for r in rows], FLOP_UNITS, by=min)
    tu, ts = _unit([r.step_seconds for r in rows], TIME_UNITS)
    parallel = result.tp * result.pp > 1
    where = result.gpu
    if parallel:
        where = f"{result.tp * result.pp} x {result.gpu} (tp {result.tp}, pp {result.pp}, {result.interconnect})"
    estimate = result.mbu is not None
    calibrated = bool(rows) and rows[0].estimate is not None
    sheet = Sheet(
        title=(
            f"Decode roofline: {result.model} on {where} ({result.weight_format or result.dtype} weights, {result.kv_dtype} KV, "
            f"{result.compute_dtype} peak {fmt_flops(result.peak_flop_per_s)}, HBM {fmt_rate(result.bandwidth_bytes_per_s)}, "
            f"ridge {result.ridge_flop_per_byte:,.1f} FLOP/B)" + ("; bytes and FLOPs per GPU" if parallel else "")
        ),
        columns=[
            "batch",
            "seq",
            f"weights read\n{wu}",
            f"KV read\n{ku}",
            fu,
            "FLOP/B",
            "bound",
            *([f"comm\n{tu}"] if parallel else []),
            f"step\n{tu} >=",
            "tok/s\n<=",
            *(["tok/s\nestimate"] if estimate else []),
            *([f"step {tu}\nestimate", "80%\ninterval", f"tok/s\n{result.engine}"] if calibrated else []),
            "fits",
        ],
        # weights (one value), FLOPs, intensity, bound, KV read; then the comm and the estimate's tok/s
        optional=(
            *(2, 4, 5, 6, 3),
            *((7,) if parallel else ()),
            *((11 + parallel + estimate, 10 + parallel + estimate) if calibrated else ()),
        ),
    )
    for r in rows:
        sheet.rows.append(
            [
                f"{r.batch:,}",
                f"{r.seq:,}",
                _fixed(r.weight_bytes / ws, 2),
                _fixed(r.kv_bytes / ks, 2),
                _fixed(r.flops / fs, 1),
                _fixed(r.arithmetic_intensity, 2),
                r.bound,
                *([_fixed(r.comm_seconds / ts, 2)] if parallel else []),
                _fixed(r.step_seconds / ts, 2),
                _fixed(r.tokens_per_s, 1),
                *([_fixed(r.estimate_tokens_per_s, 1)] if estimate else []),
                *(
                    [
                        _fixed(r.estimate.step_s / ts, 2),
                        f"{r.estimate.interval_s[0] / ts:,.2f}-{r.estimate.interval_s[1] / ts:,.2f}",
                        _fixed(r.estimate.tokens_per_s, 1),
                    ]
                    if calibrated and r.estimate
                    else []
                ),
                "yes" if r.fits else "NO",
            ]
        )
    sheet.notes.append(
        "Ceilings: step time >= max(bytes / bandwidth, FLOPs / peak)"
        + (" per stage + all-reduces and sends" if parallel else "")
        + ", tokens/s <= batch / step time; real kernels reach a fraction of both roofs."
    )
    if result.routed:
        k, e = result.routed
        sheet.notes.append(
            f"MoE: weights read are the experts of {e} a layer that varied tokens are expected to reach; the ceiling"
            f" (and FLOP/B) counts only the {k} that tokens routed alike reach (identical prompts are), the fewest any step reads."
        )
    if calibrated:
        sheet.notes.append(
            f"{result.estimate_basis[:1].upper()}{result.estimate_basis[1:]}, {result.engine}: a run is predicted to measure it, and 8 in 10 to fall in the interval."
        )
    if estimate:
        sheet.notes.append(f"What-if: both roofs scaled by MBU {result.mbu:g} and MFU {result.mfu:g} (not a bound).")
    state = max(r.state_bytes for r in rows)
    if state:
        sheet.notes.append(
            f"Bytes also count the SSM / linear-attention state each step reads and writes back: up to {fmt_bytes(state)}"
            + (" per GPU." if parallel else ".")
        )
    sheet.notes += [f"Warning: {w}" for w in result.warnings]
    return sheet


def _compared(result: CompareResult) -> str:
    return f"variants of {result.model}" if result.model else ", ".join(r.name for r in result.rows)


def compare_sheet(result: CompareResult) -> Sheet:
    state = any(r.state_bytes for r in result.rows)
    sheet = Sheet(
        title=f"KV cache compared: {_compared(result)}, batch {result.batch:,} x {result.seq:,} tokens",
        columns=["variant", "KV heads", "KV dtype", "per token", "total", "vs first", *(["+ state"] if state else [])],
        # NOTE: the answer (total, then per token) goes last; the heads and dtype are in the variant's name
        optional=(2, 1, 5, 3),  # KV dtype, KV heads, vs first, per token
    )
    sheet.rows.extend(_compare_cells(r, state) for r in result.rows)
    return sheet


def _compare_cells(r: CompareRow, state: bool = False) -> list[str]:
    """A compared row's cells; `state`: with the batch's constant recurrent state (a hybrid's) after the ratio."""
    kv_heads = "latent" if r.kv_heads is None else str(r.kv_heads or "none")
    ratio = "-" if r.ratio is None else f"{r.ratio:.3g}x"
    cells = [r.name, kv_heads, r.kv_dtype, _bytes(r.bytes_per_token), _bytes(r.total_bytes), ratio]
    return cells + ([_bytes(r.state_bytes) if r.state_bytes else "-"] if state else [])


def compare_grid_sheet(results: list[CompareResult]) -> Sheet:
    """Several --batch x --seq values as one table, a row per (batch, seq, item). NOTE: a table
    each took Rich 28 s for 16,000 batch values."""
    first = results[0]
    state = any(r.state_bytes for result in results for r in result.rows)
    sheet = Sheet(
        title=f"KV cache compared: {_compared(first)}, each relative to the first at the same batch x seq",
        columns=["batch", "seq", "variant", "KV heads", "KV dtype", "per token", "total", "vs first"]
        + (["+ state"] if state else []),
        text_columns=(2,),
        optional=(4, 3, 7, 5),  # KV dtype, KV heads, vs first, per token
    )
    for result in results:
        sheet.rows.extend([f"{result.batch:,}", f"{result.seq:,}", *_compare_cells(r, state)] for r in result.rows)
    return sheet


def _origin(row: dict) -> str:
    """A preset's name, marked when it comes from the user's folder."""
    return f"{row['name']} (user)" if row.get("origin") == "user" else row["name"]


def _user_note(sheet: Sheet, rows: list[dict]) -> None:
    users = [r["location"] for r in rows if r.get("origin") == "user"]
    if users:
        sheet.notes.append(f"(user): from your preset folder, {users[0].rsplit('/', 1)[0].rsplit(chr(92), 1)[0]}")


def models_sheet(rows: list[dict]) -> Sheet:
    sheet = Sheet(
        title="Model presets (params: total / active per token)",
        columns=["name", "layers", "heads", "KV\nheads", "head\ndim", "attention", "params", "KV / token\n(bf16)"],
        text_columns=(0, 5, 6),
        optional=(2, 4, 1, 5),  # query heads, head dim, layers, attention kinds
    )
    for r in rows:
        sheet.rows.append(
            [
                _origin(r),
                str(r["num_layers"]),
                str(r["num_heads"]),
                "latent" if r["kv_heads"] is None else str(r["kv_heads"]),
                str(r["head_dim"]),
                r["attention"],
                "unknown"
                if r["params"] is None
                else fmt_params(r["params"])
                + (f" / {fmt_params(r['active_params'])}" if r["active_params"] != r["params"] else ""),
                _bytes(r["kv_bytes_per_token_bf16"]),
            ]
        )
    _user_note(sheet, rows)
    return sheet


def gpus_sheet(rows: list[dict]) -> Sheet:
    sheet = Sheet(
        title="GPU presets (dense peaks, no sparsity; memory as used by fit)",
        columns=["name", "memory", "HBM", "bf16\nTFLOP/s", "fp8\nTFLOP/s", "ridge bf16\nFLOP/B"],
        notes=["Full names, aliases, every dtype's peak and the sources: kvcalc gpus --format json."],
    )
    for r in rows:
        bf16, fp8 = r["peak_dense_tflop_per_s"].get("bf16"), r["peak_dense_tflop_per_s"].get("fp8")
        ridge = bf16 * 1e12 / r["bandwidth_bytes_per_s"] if bf16 else None
        sheet.rows.append(
            [
                _origin(r),
                _bytes(r["capacity_bytes"]),
                fmt_rate(r["bandwidth_bytes_per_s"]),
                f"{bf16:,g}" if bf16 else "-",
                f"{fp8:,g}" if fp8 else "-",
                f"{ridge:,.0f}" if ridge else "-",
            ]
        )
    _user_note(sheet, rows)
    return sheet


def _field_rows(key: str, value: object) -> list[list[str]]:
    """A spec field as rows; a nested record (the checkpoint's quantization) as one row per set
    sub-field, `checkpoint.quantization.method`, rather than a Python dict printed whole."""
    if not isinstance(value, dict):
        return [[key, str(value)]]
    return [row for k, v in value.items() if v not in (None, False, [], {}, "") for row in _field_rows(f"{key}.{k}", v)]


def _kv_heads_shown(spec) -> str:  # noqa: ANN001
    """The KV heads the cache holds: the model's (ModelSpec.cached_kv_heads), and the layers' own where some
    set a different figure (Gemma 4's full layers)."""
    if spec.compressed_attention:
        width = spec.latent_rank + spec.rope_dim
        return (
            f"1, K = V: one {width}-element entry ({spec.kv_lora_rank} + {spec.qk_rope_head_dim} RoPE) per entry held"
        )
    if spec.is_mla:
        return f"none: an MLA latent of {spec.kv_lora_rank} + {spec.qk_rope_head_dim} elements per token"
    heads = spec.cached_kv_heads
    named = sorted(k for k in spec.layer_kv_heads if k is not None and k != heads)
    return f"{heads}; {', '.join(map(str, named))} on the layers that set their own" if named else str(heads)


def show_sheet(resolved, counts, kv_bytes_per_token_bf16: int | None = None) -> Sheet:  # noqa: ANN001
    spec = resolved.spec
    sheet = Sheet(
        title=f"{spec.name} (from {resolved.source}: {resolved.location})",
        columns=["field", "value"],
        text_columns=(0, 1),
    )
    skip = {"name", "layer_pattern", "aliases", "description"}
    if spec.attention_free:  # its num_heads is a placeholder, and it has no MLP to gate
        skip |= {"num_heads", "mlp_gated"}
    for key, value in spec.model_dump(mode="json").items():
        if key not in skip and value not in (None, 0, [], "") or key in {"num_layers", "num_heads"} - skip:
            sheet.rows += _field_rows(key, value)
    if spec.attention_free:
        sheet.rows.append(["attention", "none: state-space layers only, no KV cache"])
    else:
        sheet.rows.append(["head_dim (effective)", str(spec.head_dim_effective)])
        sheet.rows.append(["KV heads (effective)", _kv_heads_shown(spec)])
    for run, n in spec.layer_groups():
        detail = f"{n} x {run.kind.value}"
        if run.window_tokens:
            detail += f" (W {run.window_tokens:,})"
        if run.kv_heads:
            detail += f", {plural(run.kv_heads, 'KV head')}"
        if run.head_dim:
            detail += f", head dim {run.head_dim}"
        if run.v_is_k:
            detail += ", V = K (one projection; both cached)"
        if run.state_bytes:
            beside = " (a Mamba-2 mixer beside the attention)" if run.parallel_mixer else ""
            detail += f", state {fmt_bytes(run.state_bytes)} per sequence{beside}"
        if run.kv_shared:
            detail += ", reading an earlier layer's K and V (no cache of their own)"
        if run.compress_ratio:
            detail += f" + one compressed entry per {run.compress_ratio} tokens" + (
                f", attending to an indexer's top {spec.index_topk:,} of them" if run.compress_topk else ", all read"
            )
        elif run.kind.value == "mla" and spec.compressed_attention:
            detail += ", window only"
        elif run.kind.value == "mla" and spec.is_sparse:
            detail += (
                ", reusing an earlier layer's top-k (no indexer of their own)"
                if run.index_shared
                else f", each with an indexer choosing its top {spec.index_topk:,} tokens"
            )
        if run.sparse:
            detail += f", sparse: each with an indexer choosing its top {spec.index_topk:,} tokens"
        sheet.rows.append(["layers", detail])
    if kv_bytes_per_token_bf16 is not None:  # the figure the JSON carries, in the table too
        sheet.rows.append(
            [
                "KV cache per token (bf16)",
                f"{fmt_bytes(kv_bytes_per_token_bf16)} ({kv_bytes_per_token_bf16:,} B, while every window grows)",
            ]
        )
    if counts is None:
        sheet.rows.append(["parameters", f"unknown: {spec.params_unknown}"])
        return sheet
    sheet.rows.append(["parameters (from the architecture)", f"{fmt_params(counts.total)} ({counts.total:,})"])
    if counts.per_layer_table:
        sheet.rows.append(
            [
                "of which per-layer embeddings",
                f"{fmt_params(counts.per_layer_table)} (a lookup table, like the input's)",
            ]
        )
    if counts.active != counts.total:
        sheet.rows.append(
            [
                "active per token",
                f"{fmt_params(counts.active)}; {fmt_params(counts.active_excl_embedding)} without the input embedding"
                + ("s" if counts.per_layer_table else ""),
            ]
        )
    if spec.params:
        sheet.notes.append(f"Explicit params {spec.params:,} are used for weight bytes and FLOPs.")
    return sheet


def lab_sheet(result) -> Sheet:  # noqa: ANN001
    sheet = Sheet(
        title=f"kvcalc lab (seed {result.seed}, float64)",
        columns=["check", "claim", "measured", "verdict"],
        text_columns=(0, 1, 2),
    )
    for c in result.checks:
        sheet.rows.append([c.name, c.claim, c.measured, "pass" if c.passed else "FAIL"])
    if result.bench:
        sheet.notes.append(
            "Speed: " + "; ".join(f"T={r['tokens']}: {r['speedup']:.1f}x faster with the cache" for r in result.bench)
        )
    return sheet
