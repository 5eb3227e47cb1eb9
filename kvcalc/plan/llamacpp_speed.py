"""llama.cpp's speed for one GGUF as placed: decode tokens/s at a context and prompt processing tokens/s
(llama-bench's pp512), each as the calibrated estimate with its 80% interval beside the physics ceiling.

The step's features (cost/estimate.StepFeatures) are filled from the GGUF's tensor table and llama.cpp's
placement rather than from a dtype: each tensor's bytes as its ggml type stores it (Q4_K_M's q4_K / q6_K
mix, exactly), on the device -ngl and the layer split put it, routed experts by top-k / experts (decode)
or the experts a prompt's tokens reach; KV from llama.cpp's own cache parts (its cache types, SWA window,
streams). Each GPU holding layers is one pipeline stage (llama.cpp's layer split). The estimate's
constants are plan/calibration.constants_for(gpu, "llamacpp"), fitted on the llama-bench points of
benchmarks/calibration/points.csv.

Weights left on the CPU (layers or --n-cpu-moe experts): decode reads them and their KV at CPU_EFFICIENCY of the
system-memory bandwidth given (the ceiling at all of it); a prompt's matmuls of CPU-held weights run on the GPU
after the weights cross PCIe (llama.cpp's op offload for batches of 32+ tokens), at HOST_LINK, not calibrated: the
interval's fast end allows a CPU-side product instead, the ceiling only the weights' one read from memory. The
basis says which weights the CPU holds.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from kvcalc.cost.calibration import Calibration
from kvcalc.engines.llamacpp.buffers import TensorRow, layer_devices
from kvcalc.engines.llamacpp.kv import DSV4_CSA, DSV4_HCA
from kvcalc.engines.llamacpp.memory import LlamaCppResult
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.gguf.types import BY_NAME
from kvcalc.model.spec import LayerKind, ModelSpec

# NOTE: PCIe 4.0 x16 as host-to-device copies achieve it (about 25 of 32 GB/s): what a prompt's op
# offload of CPU-held weights pays per ubatch. Stated, not calibrated.
HOST_LINK = 25e9
PROMPT_TOKENS = 512  # llama-bench's pp512: one ubatch of 512 tokens from an empty cache


class Speed(NamedTuple):
    """One figure: the estimate, its 80% interval and the ceiling, all in tokens/s."""

    tokens_per_s: float
    lo: float
    hi: float
    ceiling: float


def _elements(t: TensorRow) -> int:
    _, block, size = BY_NAME[t.type]
    return t.nbytes // size * block


# The fraction of --cpu-bandwidth llama.cpp's CPU side reaches in decode, for the weights it holds (layers -ngl leaves
# there, experts --n-cpu-moe keeps there): the median and the 10th and 90th percentiles over 16 public runs, CPU-only
# and hybrid, where the GPU's part is the calibrated estimate (benchmarks/llamacpp_cpu_eff.py, .md). Threads' barriers
# and each split's GPU<->CPU hand-over are inside it: hybrid runs read 0.30-0.65, CPU-only ones 0.50-0.84.
CPU_EFFICIENCY = (0.55, 0.34, 0.78)  # (estimate, slow end, fast end)
SYSTEM_EXPERTS = -1  # _reads' key for the experts --n-cpu-moe keeps in system memory, wherever their layer runs


def _reads(
    spec: ModelSpec,
    tensors: list[TensorRow],
    devs: list[int | None],
    tokens: int,
    logits: int = 1,
    cpu_moe: int = 0,
    fewest: bool = False,
) -> dict[int | None, tuple[float, float, float]]:
    """(weight bytes read, matmul FLOPs, of those bytes the quantized blocks') per device (None: the CPU;
    SYSTEM_EXPERTS: the experts --n-cpu-moe `cpu_moe` leaves in system memory) for a step over `tokens` tokens that
    computes `logits` rows of the output (each decoded sequence's, a prompt's last token's). `fewest`: the experts
    the kindest routing reads (k a layer: the ceiling's, as cost/step.weight_bytes_read reads them)."""
    from kvcalc.cost.shard import reached_experts
    from kvcalc.engines.llamacpp.buffers import is_input, tensor_device
    from kvcalc.model.gguf.types import is_quantized

    n = spec.num_layers
    tied = not any(t.name.startswith("output.weight") for t in tensors)
    out: dict[int | None, tuple[float, float, float]] = {}
    reached = (
        float(reached_experts(spec.experts, spec.experts_per_token, 1 if fewest else tokens)) if spec.experts else 0.0
    )
    for t in tensors:
        tied_output = tied and t.name.startswith("token_embd.")
        if tied_output:
            dev = devs[n]  # read as the output layer, where it runs (its GPU copy or the CPU's table)
        else:
            dev = tensor_device(t.name, n, devs)
            if dev is not None and tensor_device(t.name, n, devs, cpu_moe) is None:
                dev = SYSTEM_EXPERTS  # kept in system memory while its layer runs on a GPU
        elems = _elements(t)
        output = tied_output or t.name.startswith("output.")
        if is_input(t.name) and not output:
            read, flops = 0.0, 0.0  # a row per token
        elif "_exps." in t.name and spec.experts:
            read = t.nbytes * reached / spec.experts
            flops = 2.0 * tokens * elems * spec.experts_per_token / spec.experts
        elif output:
            read, flops = float(t.nbytes), 2.0 * elems * logits
        else:
            read, flops = float(t.nbytes), 2.0 * tokens * elems
        w, f, q = out.get(dev, (0.0, 0.0, 0.0))
        out[dev] = (w + read, f + flops, q + (read if is_quantized(t.type) else 0.0))
    return out


# DeepSeek-V4's caches (engines/llamacpp/kv.dsv4_parts): a compressed entry per this many tokens
COMPRESSED = {"CSA": DSV4_CSA, "CSA indexer": DSV4_CSA, "HCA": DSV4_HCA}


def _kv(
    r: LlamaCppResult, devs: list[int | None], cells: int, prompt: bool, topk: int | None = None
) -> dict[int | None, float]:
    """KV bytes read per device: `cells` cells of each attention layer's stream (its window at most);
    a recurrent layer's whole state is read and written back. DeepSeek-V4's compressed caches: one entry per ratio
    tokens (a CSA layer's attention the indexer's `topk` of them)."""
    out: dict[int | None, float] = {}
    for p in r.kv_parts:
        if not p.layers or not p.cells:
            continue
        per_cell = p.bytes / (p.layers * p.cells * p.streams)
        entries = min(cells // COMPRESSED.get(p.cache, 1), p.cells)
        if p.cache == "CSA" and topk and not prompt:
            entries = min(entries, topk)
        for il in p.layer_ids:
            dev = devs[il] if il < len(devs) - 1 else None
            if p.cache in ("recurrent", "compressor state"):
                moved = 0.0 if prompt else 2.0 * p.bytes / (p.layers * p.streams)
            else:
                moved = per_cell * entries
            out[dev] = out.get(dev, 0.0) + moved
    return out


def _attention_flops(spec: ModelSpec, context: int, tokens: int, prefill: bool) -> float:
    """Attention FLOPs of the whole model: one token over `context` keys (decode), or a prompt of
    `tokens` tokens from an empty cache."""
    from kvcalc.cost.step import SINGLE, stages

    (st,) = stages(spec, SINGLE, None)
    if prefill:
        return float(sum(t.layers * t.prefill_attention_flops(tokens) for t in st.terms))
    return float(sum(t.layers * t.decode_attention_flops(context) for t in st.terms))


def matmul_peak(gpu: GpuSpec, spec: ModelSpec) -> float:
    """FLOP/s of llama.cpp's matmuls on `gpu`: the peak its kernels reach (the ceiling's, and what the
    estimate's mfu multiplies); infinite where the preset has no peak: compute is then not charged, so
    only memory-bound (decode) figures are given."""
    from kvcalc.engines.kernels import gpu_as_run_by
    from kvcalc.errors import SpecError
    from kvcalc.model.formats import matmul_dtype

    try:
        fast = gpu_as_run_by(gpu, "llamacpp")
        dtype = fast.compute_dtype(matmul_dtype(spec, "fp16"))
        return fast.peak_flop_per_s(dtype)
    except SpecError:
        return math.inf


def step_features(
    spec: ModelSpec,
    tensors: list[TensorRow],
    r: LlamaCppResult,
    gpu: GpuSpec,
    n_gpus: int,
    unified: bool,
    *,
    context: int = 0,
    prompt_tokens: int = 0,
    batch: int = 1,
):  # noqa: ANN201 (StepFeatures, CPU-side bytes, CPU-held weight bytes a prompt copies)
    """The GPU side of one llama.cpp step as cost/estimate.StepFeatures (one stage per GPU holding
    layers), and the bytes left to the CPU: (features, cpu_bytes_read, cpu_weight_bytes). A decode step
    of `batch` sequences each holding `context` tokens (llama-server's -np slots), or a prompt of
    `prompt_tokens` tokens from an empty cache."""
    from kvcalc.cost.estimate import StepFeatures, link_kind
    from kvcalc.cost.flops import materialized_scores
    from kvcalc.cost.shard import link_for
    from kvcalc.cost.step import Deployment, pipelined
    from kvcalc.hardware.family import gpu_family

    n = spec.num_layers
    devs = layer_devices(n, r.ngl, 0 if r.ngl <= 0 else n_gpus)
    if unified:
        devs = [0] * (n + 1)  # one memory: Metal maps the file, every layer runs on the GPU
    prefill = prompt_tokens > 0
    seqs = 1 if prefill else max(1, batch)
    tokens = prompt_tokens if prefill else seqs
    reads = _reads(spec, tensors, devs, tokens, 1 if prefill else seqs, r.cpu_moe)
    routed = spec.experts and tokens > 1  # the ceiling's experts differ from uniform routing's
    kindest = _reads(spec, tensors, devs, tokens, 1 if prefill else seqs, r.cpu_moe, True) if routed else reads
    kv = {d: seqs * b for d, b in _kv(r, devs, tokens if prefill else context, prefill, spec.index_topk).items()}
    runs = spec.expanded_layers()
    attends = [run.kind != LayerKind.STATELESS for run in runs]
    moe, sub = spec.routes_experts(), spec.sub_blocks()
    attn_total = _attention_flops(spec, context, tokens, prefill) * (1 if prefill else seqs)
    n_attn = max(1, sum(attends))
    bw = float(gpu.bandwidth_bytes_per_s)
    peak = matmul_peak(gpu, spec)
    gpus = sorted(d for d in set(devs) if d is not None)
    cpu_layers = [i for i in range(n) if devs[i] is None]
    rows, ideal = [], []

    def row(layer_ids: list[int], w: float, kv_b: float, mm: float, least: float) -> None:
        a = sum(attends[i] for i in layer_ids)
        flops = mm + attn_total * a / n_attn
        blocks = sum(sub[i] for i in layer_ids) / 2  # per-layer costs by block, as cost/estimate counts them
        rows.append((int(w), int(kv_b), 0, int(flops), blocks, a, sum(moe[i] for i in layer_ids)))
        ideal.append(max((least + kv_b) / bw, flops / peak))

    # NOTE: --n-cpu-moe's experts: a decode step's CPU multiplies the experts its tokens reach where they lie; a
    # prompt's ubatch (32 tokens or more) is offloaded to the first GPU, the experts copied to it (charged by the
    # caller, as for CPU-held layers)
    sys_w, sys_mm, _ = reads.get(SYSTEM_EXPERTS, (0.0, 0.0, 0.0))
    gpu_w = gpu_q = 0.0  # the GPUs' bytes read, and of those the quantized blocks' (ggml widens each in its kernels)
    for g in gpus:
        ids = [i for i in range(n) if devs[i] == g]
        w, mm, q = reads.get(g, (0.0, 0.0, 0.0))
        row(ids, w, kv.get(g, 0.0), mm + (sys_mm if prefill and g == gpus[0] else 0.0), kindest.get(g, (0.0,))[0])
        gpu_w, gpu_q = gpu_w + w, gpu_q + q
    cpu_w, cpu_mm, _ = reads.get(None, (0.0, 0.0, 0.0))
    cpu_kv = kv.get(None, 0.0)
    cpu_bytes = cpu_w + cpu_kv + (0.0 if prefill else sys_w)
    if prefill and (cpu_layers or cpu_mm):
        # NOTE: op offload: the GPU multiplies the CPU-held weights (copied over PCIe, charged by the caller)
        row(cpu_layers, 0.0, cpu_kv, cpu_mm, 0.0)
        cpu_bytes = 0.0
    link = link_for(gpu) if len(rows) > 1 else None
    # NOTE: llama.cpp hands f32 activations from one GPU's layers to the next (ggml's graph split copies)
    message = tokens * spec.hidden_size * 4
    # a preset without a sourced link (most GeForce cards): the copies cross PCIe at HOST_LINK
    send = (link.group_bandwidth(2) if link else HOST_LINK) if len(rows) > 1 else 0.0
    ceiling = pipelined(ideal, 1, prefill) + (len(rows) - 1) * (message / send if send else 0.0)
    f = StepFeatures(
        family=gpu_family(gpu),
        bandwidth=bw,
        peak=peak,
        tp=1,
        pp=max(1, len(rows)),
        link=link_kind(Deployment(pp=max(1, len(rows)), link=link)),
        link_bandwidth=0.0,
        send_bandwidth=send,
        stage_bytes=tuple(rows),
        allreduces=0,
        message_bytes=message,
        tokens=tokens,
        seqs=seqs,
        prefill=prefill,
        ceiling_s=ceiling,
        # without flash attention each micro-batch's KQ scores go through memory (-fa off)
        scores=materialized_scores(spec, sum(attends), tokens, 0, r.ubatch) if prefill and not r.flash_attn else 0.0,
        dequant=gpu_q / max(1.0, gpu_w),
    )
    return f, cpu_bytes, cpu_w + sys_w if prefill else 0.0


def _speed(tokens: int, est: float, lo: float, hi: float, ceiling: float) -> Speed:
    def rate(s: float) -> float:
        return float(f"{tokens / s:.4g}") if s > 0 else 0.0

    return Speed(rate(est), rate(hi), rate(lo), rate(ceiling))


def llamacpp_speed(
    spec: ModelSpec,
    tensors: list[TensorRow],
    r: LlamaCppResult,
    gpu: GpuSpec,
    cpu_bandwidth: float,
    calibration: Calibration,
    *,
    n_gpus: int = 1,
    unified: bool = False,
    context: int | None = None,
) -> tuple[Speed, Speed | None]:
    """(decode, prompt) of one GGUF as `r` places it: decode one token of one sequence holding
    `context` tokens (default: its whole share of -c), and a pp512 prompt from an empty cache (None
    where the GPU preset has no sourced FLOP/s, as Apple's have none)."""
    from kvcalc.cost.estimate import timed

    if context is None:
        context = r.n_ctx if r.kv_unified or r.parallel == 1 else r.n_ctx // r.parallel
    f, cpu_bytes, _ = step_features(spec, tensors, r, gpu, n_gpus, unified, context=context)
    st = timed(f, calibration, "llamacpp")
    cpu = cpu_bytes / cpu_bandwidth  # the ceiling's: the CPU's bytes at the full bandwidth
    mid, slow, fast = CPU_EFFICIENCY
    decode = _speed(1, st.estimate_s + cpu / mid, st.lo_s + cpu / fast, st.hi_s + cpu / slow, st.ceiling_s + cpu)
    if math.isinf(f.peak):
        return decode, None  # a prompt is compute-bound: no figure without the GPU's FLOP/s
    f, _, copied = step_features(spec, tensors, r, gpu, n_gpus, unified, prompt_tokens=PROMPT_TOKENS)
    st = timed(f, calibration, "llamacpp")
    # NOTE: CPU-held weights a prompt multiplies: the estimate copies them over PCIe at HOST_LINK (the op offload);
    # a build that multiplies them on the CPU instead (repacked weights are not offloaded) can be faster, which the
    # interval's fast end allows (read at the fast end of CPU_EFFICIENCY). The ceiling takes only what no schedule
    # avoids: every such byte leaves the system memory once, at its full bandwidth. (carteakey's gpt-oss-120b with
    # 31 layers' experts on the CPU reads 428 tok/s of pp512 where the PCIe copy alone would allow 240.)
    copy, least = copied / HOST_LINK, copied / cpu_bandwidth
    fast = min(copy, least / CPU_EFFICIENCY[2])
    prompt = _speed(PROMPT_TOKENS, st.estimate_s + copy, st.lo_s + fast, st.hi_s + copy, st.ceiling_s + least)
    return decode, prompt
