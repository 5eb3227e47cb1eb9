"""The sheet of `kvcalc plan`: the options ranked by $ per million output tokens, the command that
starts each, and one note per rejected family of candidates."""

from __future__ import annotations

from kvcalc.plan.planner import PlanOption, PlanResult
from kvcalc.present.sheet import Sheet
from kvcalc.units import fmt_bytes


def _band(value: float, band: list[float], scale: float, digits: int) -> str:
    lo, hi = band
    return f"{value * scale:,.{digits}f} ({lo * scale:,.{digits}f}-{hi * scale:,.{digits}f})"


def _layout(o: PlanOption) -> str:
    parts = [f"tp {o.tp}"] + ([f"pp {o.pp}"] if o.pp > 1 else []) + ([f"ep {o.ep}"] if o.ep > 1 else [])
    text = (
        " ".join(parts)
        + (" DP-attn" if o.dp_attention else "")
        + (f" x {o.replicas} replicas" if o.replicas > 1 else "")
    )
    return text + (f", {o.nodes} nodes" if o.nodes > 1 else "")


def _money(value: float | None, digits: int) -> str:
    return "no price" if value is None else f"${value:,.{digits}f}"


def plan_sheet(r: PlanResult, top: int) -> Sheet:
    """The first `top` options; the rest are counted in a note (all of them are in JSON)."""
    goals = [f"TPOT <= {r.tpot_ms:g} ms" if r.tpot_ms is not None else "", ""]
    goals[1] = f"TTFT <= {r.ttft_ms:g} ms" if r.ttft_ms is not None else ""
    goal = " and ".join(g for g in goals if g) or "no latency goal"
    title = (
        f"Plan: {r.model} for {r.users:,} users at {r.seq:,} tokens ({r.prompt:,} + {r.new:,} per request), "
        f"{goal}, {r.engine}"
    )
    columns = ["#", "GPUs", "Layout", "Weights/KV", "Meets", "Holds", "Headroom/GPU", "TPOT ms (80%)", "TTFT s (80%)"]
    columns += ["TTFT p99 s", "Tokens/s (80%)", "$/hour", "$/M tokens", "Estimate"]
    sheet = Sheet(title, columns, text_columns=(1, 2, 3, 4, 13), optional=(6, 9, 5, 13, 8, 3))
    for i, o in enumerate(r.options[:top], 1):
        e = o.estimate
        flag = " (!)" if o.warnings else ""
        sheet.rows.append(
            [
                str(i),
                f"{o.gpus} x {o.gpu}{flag}",
                _layout(o),
                f"{o.weight_format or o.dtype}/{o.kv_dtype}",
                "yes" if o.meets else "no: " + "; ".join(m.split(" (")[0] for m in o.misses),
                f"{o.users_held:,} users",
                fmt_bytes(o.headroom_bytes),
                _band(e.tpot_s, e.interval["tpot_s"], 1e3, 1),
                _band(e.ttft_s, e.interval["ttft_s"], 1, 2),
                "-" if e.ttft_p99_s is None else f"{e.ttft_p99_s:,.2f}",
                _band(e.tokens_per_s, e.interval["tokens_per_s"], 1, 0),
                _money(o.usd_per_hour, 2),
                _money(o.usd_per_million_tokens, 2),
                "simulated" if e.ttft_p99_s is not None else "closed form",
            ]
        )
    notes = []
    if r.options:
        best = r.options[0]
        verdict = "cheapest meeting the goals" if best.meets else "closest; none meets the goals"
        if best.meets and r.ttft_ms is not None and best.estimate.ttft_p99_s is None:
            spent = f"the {r.simulated} simulations spent: run its check"
            verdict += f" on the closed form's mean TTFT; its p99 not simulated, {spent}"
        notes.append(f"#1 ({verdict}): {best.command}")
        notes.append(f"check it with the serving simulation (TTFT p99 too): {best.check}")
        if best.buffers:
            notes.append(f"its buffers, as llama.cpp allocates them: {best.buffers}")
    else:
        notes.append(f"no option starts and holds {r.users:,} users at {r.prompt + r.new:,} tokens")
    if len(r.options) > top:
        notes.append(f"{len(r.options) - top} more options in --format json (--top N shows more)")
    notes += [f"memory: {a}" for a in sorted({o.accounting for o in r.options[:top] if o.accounting})]
    flagged = sorted({w for o in r.options[:top] for w in o.warnings})
    notes += [f"(!) {w}" for w in flagged]
    notes.append(
        ""
        if not r.options
        else f"Estimates are calibrated, for {r.users:,} closed-loop user{'s' if r.users != 1 else ''}: what a run "
        "is predicted to measure, not a bound; goals are decided on the central value. 'closed form': the "
        "calibration's steady state (no TTFT tail; --ttft-ms is checked on the mean)"
        + (
            f"; 'simulated': the serving simulation of `kvcalc generate --concurrency` (--ttft-ms on the p99), run on "
            f"the first {r.simulated} as ranked"
            if r.simulated
            else " (none simulated)"
        )
        + ". Holds: "
        "full-length requests one replica's KV pool holds at once; headroom: per GPU after one full-length request. "
        f"$/M tokens = $/hour / (tokens/s x 3600) x 1e6. {r.candidates} layout{'s' if r.candidates != 1 else ''} judged."
    )
    notes = [n for n in notes if n] + r.notes
    notes += [f"rejected: {x.line}" for x in r.rejected]
    sheet.notes = notes
    return sheet
