"""`kvcalc plan`: the search for the cheapest deployment that serves U users at a context and meets the
latency goals. GPU type x count x layout (tp, pp, ep, DP attention) x weight and KV dtype, each
candidate judged by the engine's own memory accounting (plan/layout.py) and the calibrated closed-loop
estimate (plan/closed_loop.py), ranked by $ per million output tokens. Pure: specs and numbers in,
a PlanResult out.

What is searched: GPU counts 1, 2, 4, 8, 16 (up to max_gpus); tp = the count within a node, and past
a node both tp over the whole count (flagged: its all-reduce crosses nodes) and tp = the node with pp
across nodes; MoE models also with expert parallelism (ep = tp) and DP attention where the engine has
them; with vLLM and SGLang also data-parallel replicas of a smaller layout, the users split among them. Per (GPU, dtypes, layout kind) the counts stop one past the first that meets the goals: at a
fixed number of users more GPUs cost more per token."""

from kvcalc.engines.names import ENGINE_NAMES
from kvcalc.plan.closed_loop import PlanEstimate, scaled
from kvcalc.results import Result
from kvcalc.units import DEFAULT_GPU_UTIL

DEFAULT_GPUS = ("h100", "h200", "b200", "mi300x", "a100", "l40s")
COUNTS = (1, 2, 4, 8, 16)
MAX_GPUS = 16
BLOCK_TOKENS = {"vllm": 16, "trtllm": 32}  # KV block sizes by default (vLLM --block-size, TRT-LLM tokens_per_block)


# NOTE: no `from __future__ import annotations`: Pydantic would compile each annotation string.
class PlanOption(Result):
    """One deployment that starts and holds the users: its layout, memory, estimate, cost and command."""

    gpu: str
    gpus: int
    tp: int
    pp: int
    ep: int
    dp_attention: bool
    replicas: int = 1  # data-parallel copies of the tp x pp layout, the users split evenly among them
    nodes: int
    dtype: str
    kv_dtype: str
    weight_format: str = ""  # the weights' formats as a label ("mxfp4 experts + bf16"); dtype is --dtype's value
    fits: bool  # the engine starts and its KV pool holds every user's request at full length
    headroom_bytes: int  # per GPU, after one seq-long request (plan/layout.py)
    kv_capacity_tokens: int
    users_held: int  # requests of prompt + new tokens one replica's KV pool holds at once
    meets: bool  # decided on the estimate (central value), never on the ceiling
    decided_on: str  # the estimate that decided: the closed form, or the simulation for the first options
    misses: list[str] = []  # the goals the estimate misses
    estimate: PlanEstimate
    usd_per_hour: float | None = None
    usd_per_million_tokens: float | None = None  # output tokens at the estimate's tokens/s
    command: str  # starts it
    check: str  # `kvcalc generate --concurrency U`: the serving simulation of the same option
    buffers: str = ""  # llama.cpp: `kvcalc fit --engine llamacpp`, the option's buffers as llama.cpp allocates them
    accounting: str
    warnings: list[str] = []


class Rejection(Result):
    """A family of candidates left out, and why (`line`, as printed)."""

    gpu: str
    gpus: list[int]
    kind: str  # refused, does-not-fit, users, tpot, ttft
    line: str


class PlanResult(Result):
    model: str
    engine: str
    seq: int  # the engine's max model length in the command
    prompt: int
    new: int
    users: int
    tpot_ms: float | None = None
    ttft_ms: float | None = None  # goal on the p99 TTFT where simulated, the mean in the closed form (no tail)
    gpus_searched: list[str]
    max_gpus: int
    candidates: int  # layouts judged
    simulated: int  # options checked by the serving simulation (the first ones)
    options: list[PlanOption]  # the cheapest option meeting the goals first
    rejected: list[Rejection]
    notes: list[str] = []


# engines that run data-parallel replicas from one command: vLLM --data-parallel-size, SGLang --dp
REPLICA_ENGINES = ("vllm", "sglang")


def layouts(n: int, domain: int, moe: bool, engine: str) -> list[tuple[int, int, int, bool, int]]:
    """(tp, pp, ep, dp_attention, replicas) for n GPUs: tp inside a node; past it tp over all (flagged)
    and tp = node with pp across nodes; MoE: expert parallelism (ep = tp) and DP attention too; with
    vLLM and SGLang also n / m replicas of tp m inside a node, the users split among them."""
    shapes = [(n, 1)]
    if n > domain and domain > 1 and n % domain == 0:
        shapes.append((domain, n // domain))
    out = []
    for tp, pp in shapes:
        out.append((tp, pp, 1, False, 1))
        if moe and tp > 1 and engine != "llamacpp":
            out.append((tp, pp, tp, False, 1))
            out.append((tp, pp, tp, True, 1))
    if engine in REPLICA_ENGINES:
        out += [(m, 1, 1, False, n // m) for m in COUNTS if m < n and n % m == 0 and m <= domain]
    return out


# NOTE: fp8 is tried by default only where the command can say it: vLLM and SGLang quantize a 16-bit
# checkpoint with --quantization fp8 and take --kv-cache-dtype; trtllm-serve needs a pre-quantized
# checkpoint and llama.cpp GGUF quants (plan/quants.py), which the planner does not pick.
FP8_ENGINES = ("vllm", "sglang")


def weight_dtypes(spec, gpu, given: list[str] | None, engine: str = "vllm") -> list[str | None]:  # noqa: ANN001
    """None (the model's own) plus fp8 where the GPU has fp8 tensor cores and the model is 16-bit."""
    if given:
        return [None if d in ("auto", spec.dtype) else d for d in given]
    fp8 = "fp8" in gpu.peak_dense_tflop_per_s and spec.dtype in ("bf16", "fp16", "fp32") and engine in FP8_ENGINES
    return [None, "fp8"] if fp8 else [None]


def kv_dtypes(gpu, given: list[str] | None, engine: str = "vllm") -> list[str | None]:  # noqa: ANN001
    """None (the engine's auto: the dtype the model runs in) plus fp8 where the GPU has fp8."""
    if given:
        return [None if d == "auto" else d for d in given]
    return [None, "fp8"] if "fp8" in gpu.peak_dense_tflop_per_s and engine in FP8_ENGINES else [None]


def _goal_misses(e: PlanEstimate, users: int, tpot_ms: float | None, ttft_ms: float | None) -> list[tuple[str, str]]:
    """The goals the estimate misses: TPOT on its mean; TTFT on the p99 where the simulation gave one,
    else on the closed form's mean."""
    out = []
    if tpot_ms is not None and e.tpot_s * 1e3 > tpot_ms:
        out.append(("tpot", f"misses TPOT {tpot_ms:g} ms at {users:,} users (estimate {e.tpot_s * 1e3:.1f} ms)"))
    ttft, which = (e.ttft_p99_s, "p99 TTFT") if e.ttft_p99_s is not None else (e.ttft_s, "mean TTFT")
    if ttft_ms is not None and ttft * 1e3 > ttft_ms:
        out.append(("ttft", f"misses {which} {ttft_ms:g} ms at {users:,} users (estimate {ttft * 1e3:,.0f} ms)"))
    return out


def _judged(o: "PlanOption", e: PlanEstimate, users: int, tpot_ms: float | None, ttft_ms: float | None) -> "PlanOption":
    """The option with estimate `e`: its goals decided again, its $/M tokens at e's tokens/s."""
    from kvcalc.plan.price import usd_per_million_tokens

    misses = [m for _, m in _goal_misses(e, users, tpot_ms, ttft_ms)]
    cost = None if o.usd_per_hour is None else usd_per_million_tokens(o.usd_per_hour, e.tokens_per_s)
    return o.model_copy(
        update=dict(estimate=e, misses=misses, meets=not misses, usd_per_million_tokens=cost, decided_on=e.method)
    )


def _layout_name(tp: int, pp: int, ep: int, dp: bool, replicas: int = 1) -> str:
    parts = [f"tp {tp}"] + ([f"pp {pp}"] if pp > 1 else []) + ([f"ep {ep}"] if ep > 1 else [])
    return " ".join(parts) + (" DP-attention" if dp else "") + (f" x {replicas} replicas" if replicas > 1 else "")


def _replicated(command: str, engine: str, tp: int, replicas: int) -> str:
    """The command serving `replicas` data-parallel copies: vLLM --data-parallel-size, SGLang --dp."""
    if replicas == 1:
        return command
    if engine == "vllm":
        flag, extra = f"--tensor-parallel-size {tp} ", f"--data-parallel-size {replicas} "
    else:
        flag, extra = f"--tp {tp} ", f"--dp {replicas} "
    return (command + " ").replace(flag, flag + extra, 1).rstrip()


def _first_sentence(text: str) -> str:
    """The engine's refusal cut to its first sentence and the one naming the length that would start."""
    sentences = text.split(". ")
    head = sentences[0].rstrip(".")
    head += ")" * (head.count("(") - head.count(")"))
    extra = [x.rstrip(".") for x in sentences[1:] if "maximum model length" in x]
    return "; ".join([head, *extra])


def plan(
    spec,  # noqa: ANN001
    gpus: list,
    *,
    seq: int,
    users: int,
    prompt: int,
    new: int,
    tpot_ms: float | None = None,
    ttft_ms: float | None = None,
    max_gpus: int = 8,
    dtypes: list[str] | None = None,
    kv_dtypes_given: list[str] | None = None,
    engine: str = "vllm",
    prices: dict[str, float] | None = None,
    gpu_util: float = DEFAULT_GPU_UTIL,
    model_id: str | None = None,
    engine_version: str | None = None,
) -> PlanResult:
    """Search the candidates, rank the options, group the rejections. `engine_version`: SGLang's release."""
    from kvcalc.cost.step import needs_link
    from kvcalc.errors import KvcalcError
    from kvcalc.plan.closed_loop import closed_loop_estimate
    from kvcalc.plan.deploy import deployment
    from kvcalc.plan.layout import layout_facts
    from kvcalc.plan.price import usd_per_hour

    moe = spec.experts > 0
    name = ENGINE_NAMES.get(engine, engine)
    options: list[PlanOption] = []
    rejects: list[tuple[str, int, str, str, float]] = []  # gpu, count, kind, line, closeness (lower: closer)
    judged = 0
    for gpu in gpus:
        domain = gpu.scale_up_domain or 8
        for d in weight_dtypes(spec, gpu, dtypes, engine):
            # NOTE: a model without attention caches no KV: its state keeps its own dtype, so fp8 KV changes nothing
            for kv in (
                [None] if spec.attention_free and not kv_dtypes_given else kv_dtypes(gpu, kv_dtypes_given, engine)
            ):
                met_at: dict[tuple, int] = {}  # layout kind -> the first count that met
                facts: dict[tuple, object] = {}  # a replica's facts do not depend on how many there are
                for n in (c for c in COUNTS if c <= max_gpus):
                    for tp, pp, ep, dp, r in layouts(n, domain, moe, engine):
                        kind_key = (pp > 1, ep > 1, dp, r > 1)
                        if kind_key in met_at and n > 2 * met_at[kind_key]:
                            continue  # at U users more GPUs cost more per token
                        judged += 1
                        if (tp, pp, ep, dp) not in facts:
                            facts[tp, pp, ep, dp] = layout_facts(
                                spec, gpu, tp=tp, pp=pp, ep=ep, dp_attention=dp, engine=engine, dtype=d,
                                kv_dtype=kv, seq=seq, gpu_util=gpu_util, model_id=model_id, engine_version=engine_version,
                            )  # fmt: skip
                        f = facts[tp, pp, ep, dp]
                        u = -(-users // r)  # users on the busiest replica
                        what = f"{gpu.name} x{n} {_layout_name(tp, pp, ep, dp, r)} {f.weight_format or f.dtype}/{f.kv_dtype}"
                        # NOTE: whether it starts is a fact of one deployment of tp x pp GPUs, replicated or not:
                        # those families count the GPUs of one deployment
                        one = f"{gpu.name} x{tp * pp} {_layout_name(tp, pp, ep, dp)} {f.weight_format or f.dtype}/{f.kv_dtype}"
                        if not f.accepted:
                            rejects.append((gpu.name, tp * pp, "refused", f"{name} refuses {one}: {f.refusal}", n))
                            continue
                        if not f.fits:
                            why = _first_sentence(f.refusal) if f.refusal else "weights and reserve exceed the budget"
                            rejects.append(
                                (gpu.name, tp * pp, "does-not-fit", f"does not fit ({one}): {why}", -tp * pp)
                            )
                            continue
                        block = BLOCK_TOKENS.get(engine, 1)  # a request holds whole blocks
                        held = f.kv_capacity_tokens // (-(-(prompt + new) // block) * block)
                        if held < u:
                            each = " per replica" if r > 1 else ""
                            line = (
                                f"the KV pool holds {held:,} of {u:,} users{each} at {prompt + new:,} tokens "
                                f"({what}: {f.kv_capacity_tokens:,} tokens)"
                            )
                            rejects.append((gpu.name, n, "users", line, -held))
                            continue
                        try:
                            dep = deployment(
                                spec, gpu, tp=tp, pp=pp, interconnect=None, gpu_util=gpu_util, reserve="2GiB",
                                ep=ep, dp_attention=dp,
                            )  # fmt: skip
                            needs_link(dep, gpu)  # a preset without a sourced link cannot price tp x pp > 1
                            e = scaled(
                                closed_loop_estimate(
                                    spec, gpu, dep, users=u, prompt=prompt, new=new, dtype=d, kv_dtype=f.kv_dtype,
                                    engine=engine,
                                ),
                                users / u,
                            )  # fmt: skip
                        except KvcalcError as err:
                            rejects.append((gpu.name, n, "refused", f"{what}: {err.message}", n))
                            continue
                        misses = _goal_misses(e, users, tpot_ms, ttft_ms)
                        if not misses:
                            met_at.setdefault(kind_key, n)
                        option = PlanOption(
                            gpu=gpu.name, gpus=n, tp=tp, pp=pp, ep=ep, dp_attention=dp, replicas=r, nodes=f.nodes,
                            dtype=f.dtype, kv_dtype=f.kv_dtype, weight_format=f.weight_format, fits=True, headroom_bytes=f.headroom_bytes,
                            kv_capacity_tokens=f.kv_capacity_tokens, users_held=held, meets=False, estimate=e, decided_on=e.method,
                            usd_per_hour=usd_per_hour(gpu, n, prices), command=_replicated(_with_users(f.command, engine, u), engine, tp, r),
                            check=_check(spec, model_id, gpu.name, (tp, pp, ep, dp), d, f.kv_dtype, u, prompt, new, engine,
                                         gpu_util, engine_version),
                            accounting=f.accounting, warnings=f.warnings,
                        )  # fmt: skip
                        options.append(_judged(option, e, users, tpot_ms, ttft_ms))
    options.sort(key=_rank)
    from kvcalc.plan.plan_check import check_first, replica_simulation

    simulate = replica_simulation(
        spec, {g.name: g for g in gpus}, users=users, prompt=prompt, new=new, engine=engine, gpu_util=gpu_util,
        release=engine_version,
    )  # fmt: skip
    simulated = check_first(options, simulate, judge=lambda o, e: _judged(o, e, users, tpot_ms, ttft_ms), rank=_rank)
    for o in options:  # the misses as finally decided (the first options on the simulation)
        what = f"{o.gpu} x{o.gpus} {_layout_name(o.tp, o.pp, o.ep, o.dp_attention, o.replicas)} {o.weight_format or o.dtype}/{o.kv_dtype}"
        for kind, line in _goal_misses(o.estimate, users, tpot_ms, ttft_ms):
            rejects.append(
                (o.gpu, o.gpus, kind, f"{line} ({what})", o.estimate.tpot_s if kind == "tpot" else o.estimate.ttft_s)
            )
    notes = []
    if any(o.usd_per_hour is None for o in options):
        unpriced = sorted({o.gpu for o in options if o.usd_per_hour is None})
        notes.append(
            f"no price for {', '.join(unpriced)}: listed after the priced options by GPU count; give --price GPU=USD/h"
        )
    if not options and (other := _engines_serving(spec, engine)):
        notes.append(
            f"--engine {engine} does not serve {spec.architecture} (every option is refused there); "
            f"{other} {'does' if ' or ' not in other else 'do'}: pass --engine {other.split()[0]}"
        )
    known = {n.lower() for g in gpus for n in (g.name, *g.aliases)}
    unused = sorted(k for k in prices or {} if k not in known)
    if unused:
        notes.append(
            f"--price for {', '.join(unused)}: not among the GPUs searched ({', '.join(g.name for g in gpus)})"
        )
    return PlanResult(
        model=spec.name, engine=engine, seq=seq, prompt=prompt, new=new, users=users, tpot_ms=tpot_ms, ttft_ms=ttft_ms,
        gpus_searched=[g.name for g in gpus], max_gpus=max_gpus, candidates=judged, simulated=simulated, options=options,
        rejected=_families(rejects, {(o.gpu, o.gpus) for o in options if o.meets}), notes=notes,
    )  # fmt: skip


def _rank(o: PlanOption) -> tuple:
    """Meeting first; priced by $/M tokens, then unpriced by GPU count; ties by the faster estimate."""
    priced = o.usd_per_million_tokens is not None
    return (not o.meets, not priced, o.usd_per_million_tokens if priced else o.gpus, o.gpus, o.estimate.tpot_s)


def _with_users(command: str, engine: str, users: int) -> str:
    """The command's request limit raised to the users where the engine's default is lower; llama-server
    gets -np users slots and -c users x the context (its -c is shared by the slots)."""
    import re

    if engine == "llamacpp":
        m = re.search(r" -c (\d+)", command)
        return command if m is None else command.replace(m.group(0), f" -c {int(m.group(1)) * users} -np {users}")
    flag = {"vllm": "--max-num-seqs", "sglang": "--max-running-requests", "trtllm": "--max_batch_size"}.get(engine)
    if flag is None:
        return command
    m = re.search(rf"{flag} (\d+)", command)
    if m is None:
        return f"{command} {flag} {users}"
    return command if int(m.group(1)) >= users else command.replace(m.group(0), f"{flag} {users}")


def _check(spec, model_id, gpu, layout, dtype, kv, users, prompt, new, engine, gpu_util, release) -> str:  # noqa: ANN001
    """The `kvcalc generate --concurrency` line that serves the option as plan/plan_check simulates it: SGLang's
    pool at the fraction its launch command sets, of the release named."""
    tp, pp, ep, dp = layout
    parts = [f"kvcalc generate {model_id or spec.name} --gpu {gpu} --tp {tp}"]
    parts += [f"--pp {pp}"] if pp > 1 else []
    parts += [f"--ep {ep}"] if ep > 1 else []
    parts += ["--dp-attention"] if dp else []
    parts += [f"--dtype {dtype}"] if dtype else []
    parts += [f"--kv-dtype {kv} --concurrency {users} --prompt {prompt} --new {new} --engine {engine}"]
    if engine == "sglang":
        parts += [f"--mem-fraction-static {gpu_util:g}"] + ([f"--engine-version {release}"] if release else [])
    return " ".join(parts)


def _families(rejects: list[tuple[str, int, str, str, float]], met: set[tuple[str, int]]) -> list[Rejection]:
    """One line per (GPU, kind): the counts it covers and the closest candidate's reason. Misses and
    short pools of a (GPU, count) that has a meeting option (another dtype or layout) are left out."""
    groups: dict[tuple[str, str], list[tuple[int, str, float]]] = {}
    for gpu, n, kind, line, closeness in rejects:
        if kind in ("tpot", "ttft", "users") and (gpu, n) in met:
            continue
        groups.setdefault((gpu, kind), []).append((n, line, closeness))
    out = []
    for (gpu, kind), items in groups.items():
        counts = sorted({n for n, _, _ in items})
        _, line, _ = min(items, key=lambda t: t[2])
        where = f"{gpu} x{'/'.join(map(str, counts))}"
        out.append(Rejection(gpu=gpu, gpus=counts, kind=kind, line=f"{where}: {line}"))
    return out


def _engines_serving(spec, engine: str) -> str | None:  # noqa: ANN001
    """Where `engine` has no class for the model's architecture, the engines kvcalc models that do ("sglang or
    trtllm"); None where it has one (its options were rejected for other reasons) or none does."""
    from kvcalc.engines.sglang.release import DEFAULT_RELEASE, model_refusal, parse_release
    from kvcalc.engines.trtllm.models import architecture_refusal
    from kvcalc.engines.vllm.startup import unsupported_architecture

    refused = {
        "vllm": unsupported_architecture(spec) is not None,
        "sglang": model_refusal(spec, parse_release(DEFAULT_RELEASE)) is not None,
        "trtllm": architecture_refusal(spec) is not None,
    }
    if not refused.get(engine):
        return None
    serving = [name for name, no in refused.items() if not no]
    return " or ".join(serving) or None
