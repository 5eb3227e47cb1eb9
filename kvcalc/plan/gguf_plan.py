"""`kvcalc plan GGUF --engine llamacpp`: each quant file of a GGUF repo (or the one GGUF given) is an option
on each GPU and count, judged by llama.cpp's own buffers (engines/llamacpp: the model buffer per GPU from
the file's tensor table, the KV of `-np U` slots of `--seq` cells each, the compute buffer) and timed by the
calibrated closed-loop estimate of steps built from that tensor table (plan/llamacpp_speed.py), ranked as
the planner ranks ($ per million output tokens, meeting the goals first), with the llama-server command; the
first options as ranked are then served by the simulation of their check line (plan/plan_check.py:
`generate --concurrency U --max-num-seqs U`, llama-server's -np U slots), which decides the TTFT p99 goal.

llama-server is one process on one machine: counts up to the GPU's scale-up domain, the layers split
over the GPUs (--split-mode layer), every layer on a GPU (an option must fit fully: layers left on the
CPU serve users at system-memory speed; `kvcalc fit REPO --engine llamacpp` lists such partial fits).
"""

from functools import partial

from kvcalc.engines.llamacpp.server import FIT_HEADROOM
from kvcalc.plan.closed_loop import PlanEstimate
from kvcalc.plan.inputs import weight_dtype
from kvcalc.plan.plan_check import check_first, simulated_estimate
from kvcalc.plan.planner import COUNTS, PlanOption, PlanResult, Rejection
from kvcalc.units import DEFAULT_GPU_UTIL, KV_DTYPES, normalize_dtype


def gguf_models(text: str) -> tuple[str, list]:
    """(name, [(quant label, file bytes, spec, tensor rows)]) of a GGUF reference: every quant of a hub repo
    (headers only, by range requests), or the one file or repo:QUANT given."""
    import re
    from concurrent.futures import ThreadPoolExecutor

    from kvcalc.engines.llamacpp.memory import rows_of
    from kvcalc.model.gguf.source import HUB_REF, hub_listing, open_gguf, open_hub

    m = re.match(HUB_REF, text)
    if m is not None and not text.lower().endswith(".gguf") and not m.group("quant"):
        repo, rev, _, quants = hub_listing(text)
        with ThreadPoolExecutor(max_workers=8) as pool:
            opened = list(pool.map(lambda q: open_hub(repo, rev, q), quants))
        return repo, [(g.label or "?", g.file_bytes, g.spec, rows_of(g.tensors)) for g in opened]
    g = open_gguf(text)
    return text.split(":")[0], [(g.label or "?", g.file_bytes, g.spec, rows_of(g.tensors))]


def plan_quants(
    models: list,
    gpus: list,
    *,
    repo: str,
    seq: int,
    users: int,
    prompt: int,
    new: int,
    tpot_ms: float | None = None,
    ttft_ms: float | None = None,
    max_gpus: int = 8,
    prices: dict[str, float] | None = None,
    version: str | None = None,
    estimated: bool = False,
) -> PlanResult:
    """`models`: (quant label, file bytes, spec, tensor rows) of each GGUF; the options over quant x GPU x
    count, cheapest meeting the goals first, and one line per rejected family."""
    from kvcalc.cost.fitting import Setup, SetupFeatures
    from kvcalc.engines.kernels import gpu_refusal
    from kvcalc.engines.llamacpp.eras import era
    from kvcalc.engines.llamacpp.memory import llamacpp_memory
    from kvcalc.plan.calibration import constants_for
    from kvcalc.plan.closed_loop import estimate_of
    from kvcalc.plan.llamacpp_speed import step_features
    from kvcalc.plan.planner import _families, _goal_misses, _judged, _rank
    from kvcalc.plan.price import usd_per_hour

    e_ = era(version)
    options: list[PlanOption] = []
    rejects: list[tuple[str, int, str, str, float]] = []
    judged = 0
    local = repo.lower().endswith(".gguf")
    specs: dict[tuple[str, str, int], tuple] = {}  # (quant, GPU, count) -> (spec, generate's --dtype)
    for label, _size, spec, rows in models:
        ref = repo if local else f"{repo}:{label}"
        source = f"-m {repo}" if local else f"-hf {ref}"
        as_dtype = None  # a GGUF's own spec carries its quant
        if estimated:  # a model without a GGUF: `label` is the quant its estimated table is laid out in
            quant = label.split()[0]
            as_dtype = weight_dtype("mxfp4" if quant == "MXFP4_MOE" else quant.lower())
            ref, source = f"{repo} --dtype {as_dtype}", f"-m {repo}-{quant}.gguf"
        for gpu in gpus:
            if why := gpu_refusal("llamacpp", gpu.name):
                rejects.append((gpu.name, 1, "refused", why, 1))
                continue
            unified = bool(gpu.unified_memory)
            domain = 1 if unified else gpu.scale_up_domain or 8
            for n in (c for c in COUNTS if c <= min(max_gpus, domain)):
                judged += 1
                what = f"{label} on {gpu.name} x{n}"
                r = llamacpp_memory(
                    spec, rows, users * seq, e_, weights_exact=True, parallel=users, n_gpus=n,
                    backend="metal" if unified else "cuda", capacity_bytes=gpu.capacity_bytes - FIT_HEADROOM,
                    unified_memory=unified,
                )  # fmt: skip
                cap = gpu.capacity_bytes - FIT_HEADROOM
                gpu_totals = [d.total_bytes for d in r.devices if d.name != "CPU"]
                over = sum(d.total_bytes for d in r.devices) - cap if unified else max(gpu_totals, default=0) - cap
                if r.refusal:
                    rejects.append((gpu.name, n, "refused", f"llama.cpp refuses {what}: {r.refusal}", n))
                    continue
                if not r.fits:
                    line = f"does not fit ({what}, -np {users} -c {users * seq:,}): {over / (1 << 30):,.2f} GiB over"
                    rejects.append((gpu.name, n, "does-not-fit", line, over))
                    continue
                c = constants_for(gpu, "llamacpp")
                decode, _, _ = step_features(
                    spec, rows, r, gpu, n, unified, context=prompt + new // 2, batch=users
                )  # fmt: skip
                first, _, _ = step_features(spec, rows, r, gpu, n, unified, prompt_tokens=prompt)
                setup = Setup(None, users, prompt, new)
                e = estimate_of(
                    SetupFeatures(setup, decode, first, users / max(new, 1) if users > 1 else 0.0), c, "llamacpp"
                )
                split = " --split-mode layer" if n > 1 else ""
                option = PlanOption(
                    gpu=gpu.name, gpus=n, tp=1, pp=n, ep=1, dp_attention=False, nodes=1, dtype=label,
                    kv_dtype=r.type_k, fits=True, headroom_bytes=-over, kv_capacity_tokens=r.kv_capacity_tokens,
                    users_held=users, meets=False, estimate=e, decided_on=e.method,
                    usd_per_hour=usd_per_hour(gpu, n, prices),
                    command=f"llama-server {source} -c {users * seq} -np {users} -ngl 999{split}",
                    check=f"kvcalc generate {ref} --gpu {gpu.name}" + (f" --pp {n}" if n > 1 else "")
                    + f" --concurrency {users} --prompt {prompt} --new {new} --engine llamacpp --max-num-seqs {users}",
                    buffers=f"kvcalc fit {ref} --engine llamacpp --gpu {gpu.name} --seq {seq}"
                    + (f" --gpus {n}" if n > 1 else "") + (f" --parallel {users}" if users > 1 else ""),
                    accounting=f"llama.cpp's buffers (build era {r.build}) from "
                    + ("an estimated tensor table: no GGUF given" if estimated else "each file's tensor table"),
                )  # fmt: skip
                options.append(_judged(option, e, users, tpot_ms, ttft_ms))
                specs[label, gpu.name, n] = (spec, as_dtype)
                if not _goal_misses(e, users, tpot_ms, ttft_ms):
                    break  # at U users more GPUs cost more per token
    by_name = {g.name: g for g in gpus}

    def simulate(o: PlanOption) -> PlanEstimate:
        """The option's check line: llama-server's -np U slots serving the users, steps timed from the model's
        parameters in the quant's bytes (the closed form reads the tensor table itself)."""
        spec, as_dtype = specs[o.dtype, o.gpu, o.gpus]
        return simulated_estimate(
            spec, by_name[o.gpu], o, users=users, prompt=prompt, new=new, engine="llamacpp", gpu_util=DEFAULT_GPU_UTIL,
            dtype=as_dtype, kv_dtype=normalize_dtype(o.kv_dtype, KV_DTYPES), max_num_seqs=users,
        )  # fmt: skip

    judge = partial(_judged, users=users, tpot_ms=tpot_ms, ttft_ms=ttft_ms)
    simulated = check_first(options, simulate, judge=judge, rank=_rank)
    for o in options:
        for kind, line in _goal_misses(o.estimate, users, tpot_ms, ttft_ms):
            where = f"{o.dtype} on {o.gpu} x{o.gpus}"
            rejects.append((o.gpu, o.gpus, kind, f"{line} ({where})", o.estimate.tpot_s))
    notes = [
        ("each quant is an option, its tensor table estimated from the parameters (no GGUF given)" if estimated
         else "each quant file of the GGUF is an option")
        + "; the table's Weights/KV is the quant / llama.cpp's cache type; the buffers line lists them"
        " (`fit --engine llamacpp`)"
    ]  # fmt: skip
    if any(o.usd_per_hour is None for o in options):
        unpriced = sorted({o.gpu for o in options if o.usd_per_hour is None})
        notes.append(
            f"no price for {', '.join(unpriced)}: listed after the priced options by GPU count; give --price GPU=USD/h"
        )
    rejected: list[Rejection] = _families(rejects, {(o.gpu, o.gpus) for o in options if o.meets})
    return PlanResult(
        model=repo, engine="llamacpp", seq=seq, prompt=prompt, new=new, users=users, tpot_ms=tpot_ms, ttft_ms=ttft_ms,
        gpus_searched=[g.name for g in gpus], max_gpus=max_gpus, candidates=judged, simulated=simulated, options=options,
        rejected=rejected, notes=notes,
    )  # fmt: skip
