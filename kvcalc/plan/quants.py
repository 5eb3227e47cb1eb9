"""Which GGUF quant fits: for each quant file of a repo, llama.cpp's buffers on a GPU at a context,
the most layers that fit (llama.cpp's -ngl), and its decode and prompt speed: the calibrated estimate
with its 80% interval (plan/llamacpp_speed.py) beside the decode ceiling."""

from __future__ import annotations

from typing import Any

from kvcalc.cost.calibration import Calibration
from kvcalc.engines.llamacpp.buffers import TensorRow
from kvcalc.engines.llamacpp.eras import Era
from kvcalc.engines.llamacpp.memory import LlamaCppResult, llamacpp_memory
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import ModelSpec
from kvcalc.results import Result

SPEED_LABEL = (
    "ceiling: weights and KV read once per token at memory bandwidth, its FLOPs at peak where slower (not calibrated)"
)
ESTIMATE_LABEL = (
    "estimate: llama.cpp's calibrated speed with an 80% interval; decode of one sequence holding its whole -c,"
    " prompt processing as llama-bench's pp512"
)


class QuantRow(Result):
    quant: str
    file_bytes: int
    weights_bytes: int  # every tensor of the file (GPU + CPU)
    kv_bytes: int
    compute_bytes: int
    total_bytes: int  # what the GPU(s) (or the Mac's working set) must hold
    fits_fully: bool
    gpu_layers: int  # -ngl that fits: layers offloaded, the output layer counting as one
    total_layers: int
    # The calibrated estimate (plan/llamacpp_speed.py) beside its ceiling: tokens/s of one sequence at
    # `decode_context` tokens, and of a 512-token prompt (pp512; None where the GPU has no sourced FLOP/s),
    # each with its 80% interval.
    decode_tokens_per_s_ceiling: float
    decode_tokens_per_s: float
    decode_interval: tuple[float, float]
    decode_context: int
    prompt_tokens_per_s: float | None = None
    prompt_interval: tuple[float, float] | None = None
    prompt_tokens_per_s_ceiling: float | None = None
    speed_basis: str
    refusal: str | None = None
    llamacpp: LlamaCppResult


class QuantFit(Result):
    model: str
    gpu: str
    capacity_bytes: int  # the GPU's capacity (or the Mac's working set) less headroom_bytes
    headroom_bytes: int  # kept free for the CUDA context and driver (--reserve, default 1 GiB)
    n_ctx: int
    speed_label: str = SPEED_LABEL
    estimate_label: str = ESTIMATE_LABEL
    cpu_bandwidth_bytes_per_s: int
    placed_by_user: bool = False  # -ngl given: llama.cpp's --fit leaves the layers where the user put them
    rows: list[QuantRow]


def llamacpp_weights(dtype: str | None) -> str | None:
    """--dtype under --engine llamacpp: a quant llama-quantize writes (q4_k_m, q8_0, ..., mxfp4: MXFP4_MOE) or "f16"
    for a 16-bit file (convert_hf_to_gguf's f16 / bf16, the same bytes); None when not given. Other formats (fp8,
    int4, nvfp4) are no GGUF weight type: refused, not silently read as f16."""
    if dtype is None:
        return None
    from kvcalc.errors import UsageError
    from kvcalc.model.gguf.mix import FTYPES
    from kvcalc.plan.inputs import weight_dtype

    key = weight_dtype(dtype)
    if key == "mxfp4":  # mxfp4 experts, the rest Q8_0: the one llama.cpp quant that writes MXFP4
        return "mxfp4_moe"
    if key in FTYPES:
        return key
    if key in ("bf16", "fp16"):
        return "f16"
    raise UsageError(
        f"--dtype {dtype} is not a llama.cpp weight type",
        hint=f"a quant llama-quantize writes ({', '.join(FTYPES)}) or bf16 / fp16",
    )


def estimated_table(spec: ModelSpec, wtype: str | None) -> tuple[list[TensorRow], str | None]:
    """(tensor rows, quant label; None for the 16-bit file) of `spec` as a GGUF would hold it, without one: f16 by
    default, or `wtype`'s llama.cpp quant laid out as llama-quantize writes it (model/gguf/mix.tensor_table; one
    type for every matrix where that has no table, as for MLA). A checkpoint shipped with mxfp4 experts (gpt-oss)
    is its MXFP4_MOE file, what ggml-org's GGUFs of it hold, not a 16-bit conversion of the experts."""
    from kvcalc.engines.llamacpp.buffers import spec_tensors
    from kvcalc.errors import SpecError
    from kvcalc.model.gguf.mix import FTYPES, tensor_table

    note = "estimated"
    if wtype is None and spec.expert_dtype == "mxfp4":
        wtype, note = "mxfp4_moe", "estimated, the checkpoint's experts"
    if wtype is None or wtype == "f16":
        return spec_tensors(spec, "f16"), None
    try:
        rows = [TensorRow(*t) for t in tensor_table(spec, wtype)]
    except SpecError:
        rows = spec_tensors(spec, FTYPES[wtype], "mxfp4" if wtype == "mxfp4_moe" else None)
    return rows, f"{wtype.upper()} ({note})"


def offload_hint(
    spec: ModelSpec, gpu: GpuSpec, tokens: int, gpus: int = 1, dtype: str | None = None, batch: int = 1
) -> str:
    """generate's word on a model that does not fit, under llama.cpp: it would leave what does not fit to the CPU
    (an MoE model's routed experts first), which `fit --engine llamacpp` sizes and times, on the same `gpus` GPUs
    and --dtype, `batch` sequences of `tokens` at once (-np over one cache of batch x tokens cells)."""
    if gpu.unified_memory:
        return ""
    what = "the routed experts, then layers," if spec.is_moe else "layers"
    flags = (f" --dtype {dtype}" if dtype else "") + (f" --gpus {gpus}" if gpus > 1 else "")
    flags += f" --seq {batch * tokens}" + (f" --parallel {batch} --kv-unified" if batch > 1 else "")
    return (
        f"; llama.cpp would leave {what} to the CPU: `kvcalc fit {spec.name} --engine llamacpp --gpu {gpu.name}{flags}`"
        " sizes that placement and its speed"
    )


def largest_fit(
    spec: ModelSpec, tensors: list[TensorRow], n_ctx: int, era: Era, capacity: int, unified: bool, **settings: Any
) -> LlamaCppResult:
    """llama.cpp's buffers as its --fit places the layers the user left unset: the largest -ngl whose GPU side fits
    (0: everything on the CPU); for an MoE model that does not fit whole, from the 2026-01 era, its routed experts
    go to system memory first (common/fit.cpp steps 3 and 4): every layer on the GPU with the experts of the fewest
    layers in system memory that fits, or, where even the layers without their experts do not all fit, the most
    such layers."""
    from kvcalc.engines.llamacpp.buffers import CPU_MOE_ALL

    def at(ngl: int, **over: Any) -> LlamaCppResult:
        return llamacpp_memory(
            spec, tensors, n_ctx, era, ngl=ngl, capacity_bytes=capacity, unified_memory=unified, **{**settings, **over}
        )

    # -ngl counts a GGUF's trailing multi-token-prediction blocks as layers (engines/llamacpp/memory.py)
    top = spec.num_layers + (spec.checkpoint.mtp_blocks if spec.checkpoint else 0)

    def most_layers(**over: Any) -> LlamaCppResult:
        for ngl in range(top + 1, -1, -1):
            r = at(ngl, **over)
            if r.fits or ngl == 0:
                return r
        raise AssertionError("unreachable")

    whole = at(top + 1)
    if whole.fits or not (era.fit_moe and spec.is_moe and not settings.get("cpu_moe") and not unified):
        return whole if whole.fits else most_layers()
    # NOTE: llama.cpp fills the first layers whole and leaves the experts of the last ones in system memory;
    # --n-cpu-moe k (the first k) holds the same bytes on the GPU, layers being alike
    if not at(top + 1, cpu_moe=top).fits:
        return most_layers(cpu_moe=CPU_MOE_ALL)
    lo, hi = 0, top  # the fewest layers whose experts must leave: not lo, hi fits
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if at(top + 1, cpu_moe=mid).fits else (mid, hi)
    return at(top + 1, cpu_moe=hi)


def server_setup(
    spec: ModelSpec, gpu: GpuSpec, n_gpus: int, dtype: str | None, kv_dtype: str
) -> tuple[list[TensorRow], str, dict[str, Any]] | None:
    """What llama.cpp would run `spec` with under --dtype / --kv-dtype, without a GGUF: the estimated tensor table
    (estimated_table), its label, and llamacpp_memory's settings on `n_gpus` GPUs: each holding its capacity less
    --fit's headroom, one cache unified over the slots in the cache type. None where --dtype or --kv-dtype is no
    llama.cpp type (int4, fp8), for kvcalc's own arithmetic to answer."""
    from kvcalc.engines.llamacpp.kv import cache_type
    from kvcalc.engines.llamacpp.server import FIT_HEADROOM
    from kvcalc.errors import UsageError

    cache = cache_type(kv_dtype)
    try:
        rows, label = estimated_table(spec, llamacpp_weights(dtype))
    except UsageError:
        return None
    if cache is None:
        return None
    unified = bool(gpu.unified_memory)
    settings = dict(
        weights_exact=False, kv_unified=True, type_k=cache, type_v=cache, n_gpus=n_gpus, unified_memory=unified,
        capacity_bytes=gpu.capacity_bytes - FIT_HEADROOM, backend="metal" if unified else "cuda",
    )  # fmt: skip
    return rows, f"{label or 'F16 (estimated)'} weights, -ctk {cache}", settings


def whole_on_gpus(r: LlamaCppResult) -> bool:
    """Every layer on the GPUs and every GPU within its capacity."""
    return bool(r.fits) and r.gpu_layers == r.total_layers


def largest_context(spec: ModelSpec, tensors: list[TensorRow], era: Era, **settings: Any) -> int:
    """The largest -c (a multiple of 256, as llama.cpp pads it) whose buffers (llamacpp_memory with `settings`, a
    capacity among them) fit with every layer on the GPUs; 0 where not even 256 cells do. llama.cpp's --fit lowers
    -c toward it (common/fit.cpp)."""

    def fits(cells: int) -> bool:
        return whole_on_gpus(llamacpp_memory(spec, tensors, cells, era, **settings))

    step = 256
    if not fits(step):
        return 0
    lo, hi = 1, 2  # in steps of 256 cells: lo fits, hi does not (doubling, at most 2^23 cells)
    while hi < 1 << 16 and fits(hi * step):
        lo, hi = hi, hi * 2
    if hi >= 1 << 16:
        return lo * step
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid * step) else (lo, mid)
    return lo * step


def quant_row(
    label: str,
    file_bytes: int,
    spec: ModelSpec,
    tensors: list[TensorRow],
    n_ctx: int,
    era: Era,
    capacity: int,
    cpu_bw: int,
    unified: bool,
    gpu: GpuSpec,
    calibration: Calibration,
    ngl: int | None = None,
    **settings: Any,
) -> QuantRow:
    """One quant's row: at the largest -ngl that fits, or at the -ngl given, with its calibrated decode and prompt
    speeds on `gpu` (plan/llamacpp_speed.py; `calibration`: (constants, basis) for llamacpp on it)."""
    from kvcalc.engines.kernels import gpu_refusal
    from kvcalc.plan.llamacpp_speed import CPU_EFFICIENCY, llamacpp_speed

    if ngl is None:
        r = largest_fit(spec, tensors, n_ctx, era, capacity, unified, **settings)
    else:
        r = llamacpp_memory(
            spec, tensors, n_ctx, era, ngl=ngl, capacity_bytes=capacity, unified_memory=unified, **settings
        )
    no_build = gpu_refusal("llamacpp", gpu.name)  # no such deployment: it would not start there
    if no_build and not r.refusal:
        r = r.model_copy(update={"refusal": no_build, "fits": False})
    gpus = [d for d in r.devices if d.name != "CPU"]
    total = sum(d.total_bytes for d in r.devices) if unified else sum(d.total_bytes for d in gpus)
    context = r.n_ctx if r.kv_unified or r.parallel == 1 else r.n_ctx // r.parallel
    dec, pp = llamacpp_speed(
        spec, tensors, r, gpu, cpu_bw, calibration, n_gpus=settings.get("n_gpus", 1), unified=unified, context=context
    )
    held = [f"{r.total_layers - r.gpu_layers} layers"] if r.gpu_layers < r.total_layers else []
    held += [f"the routed experts of {r.cpu_moe} layers"] if r.cpu_moe else []
    basis = calibration[1] + (
        f"; {' and '.join(held)} on the CPU, read at {CPU_EFFICIENCY[0]:g} of --cpu-bandwidth"
        f" ({CPU_EFFICIENCY[1]:g}-{CPU_EFFICIENCY[2]:g} in the interval; 16 public runs)"
        if held and not unified
        else ""
    )
    if pp is None:
        basis += f"; no prompt speed: {gpu.name} has no sourced FLOP/s (decode from its bandwidth)"
    return QuantRow(
        quant=label,
        file_bytes=file_bytes,
        weights_bytes=sum(t.nbytes for t in tensors),
        kv_bytes=r.kv_bytes,
        compute_bytes=r.compute_buffer_bytes,
        total_bytes=total,
        # whole on the GPU, but for experts the user sent to system memory (--cpu-moe), not --fit
        fits_fully=whole_on_gpus(r) and r.cpu_moe <= settings.get("cpu_moe", 0),
        gpu_layers=r.gpu_layers,
        total_layers=r.total_layers,
        decode_tokens_per_s_ceiling=dec.ceiling,
        decode_tokens_per_s=dec.tokens_per_s,
        decode_interval=(dec.lo, dec.hi),
        decode_context=context,
        prompt_tokens_per_s=pp.tokens_per_s if pp else None,
        prompt_interval=(pp.lo, pp.hi) if pp else None,
        prompt_tokens_per_s_ceiling=pp.ceiling if pp else None,
        speed_basis=basis,
        refusal=r.refusal,
        llamacpp=r,
    )
