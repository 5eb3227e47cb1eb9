"""SGLang's KV pool on one rank, the way SGLang sizes it at start-up (model_runner.py of 0.5.5,
profile_max_num_token and init_memory_pool; kv_cache_configurator.py of 0.5.23):

    pre_load  = free memory after distributed init (minimum over ranks): CUDA total - CUDA context - NCCL
    available = pre_load - weights
    rest      = available - pre_load x (1 - mem_fraction_static)
    #tokens   = floor(rest / cell) floored to page_size; the pool allocates #tokens + page_size slots

The cell is one token's K and V on one rank over the attention layers: max(1, kv_heads // attn_tp) x
(head_dim + v_head_dim) x element per layer, or MLA's latent (kv_lora_rank + qk_rope_head_dim) x element
replicated on every rank; attn_tp is tp, or tp / dp with DP attention. No profiling run: SGLang sizes
the pool before it captures CUDA graphs. "GB" in SGLang's logs is GiB (get_available_gpu_memory
divides by 1 << 30). Pure.
"""

import math
from collections.abc import Sequence

from kvcalc.cost.kvcache import elements_per_token, index_bytes_per_token
from kvcalc.engines.fp32 import sglang_gate_bytes
from kvcalc.engines.lengths import config_context_len
from kvcalc.engines.runtime import (
    CUDA_CONTEXT_BYTES,
    SGLANG_TP_INIT_NVLS_BYTES,
    SGLANG_TP_INIT_RING_BYTES,
    has_nvls,
)
from kvcalc.engines.sglang import dsv4, graphs, swa
from kvcalc.engines.sglang import release as rel
from kvcalc.engines.sglang.mamba import StatePool, stage_state, state_bytes_per_request, state_pool, too_few_states
from kvcalc.engines.weights import weight_bytes
from kvcalc.errors import UsageError
from kvcalc.hardware.family import gpu_family
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.formats import quantization_of
from kvcalc.model.spec import LayerKind, LayerRun, ModelSpec
from kvcalc.results import Result
from kvcalc.units import dtype_bits

GIB = 2**30


MIB = 2**20
# NOTE: "Load weight end. ... mem usage" is a drop in free memory, not torch's allocation: it also holds
# what loading leaves behind outside the tensors (CUDA modules loaded lazily by the first kernels, the
# allocator's rounding). Public logs show it 0.031 GiB above the tensors for Llama-3.1-8B and 0.056 GiB
# for Qwen2.5-0.5B on one GPU (0.134 GiB for Qwen3-14B at tp 4, left unexplained):
# ../shared/reference/sglang_logs.json.
LOAD_OVERHEAD_BYTES = round(0.04 * GIB)


# NOTE: no `from __future__ import annotations` here: Pydantic would compile every annotation string.
class SglangSettings(Result):
    """The SGLang options that decide the pool (SGLang's names; None: the release's default)."""

    release: str = rel.DEFAULT_RELEASE
    tp: int = 1
    pp: int = 1
    dp_attention: bool = False
    mem_fraction_static: float | None = None
    chunked_prefill_size: int | None = None
    page_size: int = 1
    max_running_requests: int | None = None
    max_mamba_cache_size: int | None = None  # a hybrid's recurrent-state slots (engines/sglang/mamba.state_pool)
    mamba_ssm_dtype: str | None = None  # --mamba-ssm-dtype (mamba.SSM_DTYPES); None: float32
    context_len: int | None = None  # --context-length; None: the model's max_position_embeddings
    kv_dtype: str | None = None  # --kv-cache-dtype; None: auto (the model dtype)


class SglangPool(Result):
    """SGLang's start-up figures for one rank (rank 0; the tightest pipeline stage decides #tokens)."""

    release: str
    mem_fraction_static: float
    mem_fraction_default: bool  # True: the release's default for this card, tp and chunked_prefill_size
    vlm_scaled: bool = False  # the fraction was scaled for a multimodal model (release.vlm_fraction)
    gpu_mem_mib: int  # what nvidia-smi reports, the default fraction's input
    cuda_total_bytes: int
    pre_load_free_bytes: int  # free after distributed init ("Load weight begin. avail mem")
    weights_bytes: int  # "Load weight end. ... mem usage"
    available_kv_bytes: int  # rest: what the pool may take on one rank
    cell_bytes: int  # one token's KV on one rank, all attention layers
    max_total_num_tokens: int
    page_size: int
    kv_dtype: str
    mla: bool
    k_bytes: int | None  # per rank; None for MLA (one buffer)
    v_bytes: int | None
    kv_bytes: int | None  # MLA's single latent buffer
    swa_tokens: int | None = None  # hybrid sliding window: the SWA layers' pool
    mamba_bytes: int = 0  # Mamba / GDN state carved out of rest first
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    max_running_requests: int
    context_len: int
    dp_size: int
    kv_capacity_tokens: int  # tokens the pool holds across the deployment (one pool per DP rank)
    seq: int
    batch: int
    max_concurrency: float  # kv_capacity_tokens / --seq
    fits: bool  # batch requests of seq tokens fit the pool(s) and SGLang starts
    refusal: str | None = None  # SGLang's own error when it would not start
    context_limit: int | None = None  # the config's context_length where --seq is refused for exceeding it
    log_lines: list[str] = []
    not_modelled: list[str] = []


def gpu_mem_mib(gpu: GpuSpec) -> int:
    """nvidia-smi's memory.total; without it in the preset, the CUDA total (a few hundred MiB lower)."""
    return gpu.nvidia_smi_memory_mib or gpu.capacity_bytes // MIB


def _elem_bits(kv_dtype: str) -> int:
    return int(dtype_bits(kv_dtype))


# DeepSeek Sparse Attention (0.5.23 model_overrides/deepseek_v2.py, DSATokenToKVPool): 64-token pages;
# --kv-cache-dtype auto is fp8_e4m3 on SM 10+ (Blackwell), else the model's; an fp8 latent is stored raw
# (576 B, trtllm on Blackwell) or, for flashmla_kv elsewhere, as 512 fp8 + 4 fp32 scales + 64 bf16 RoPE
# (656 B); each layer's indexer keys add 132 B (kv_cache_configurator.py calculate_mla_kv_cache_dim).
DSA_PAGE_TOKENS = 64
DSA_SCALED_FP8_EXTRA_BYTES = 656 - 576


def _blackwell(gpu: GpuSpec) -> bool:
    return gpu_family(gpu) == "blackwell"


def auto_kv_dtype(spec: ModelSpec, gpu: GpuSpec) -> str:
    """SGLang's --kv-cache-dtype auto: fp8 for a checkpoint whose quantization declares an fp8 KV cache, for a DSA
    model on Blackwell (SM 10+) and for DeepSeek-V4; otherwise the dtype the model is served in."""
    checkpoint_quant = spec.checkpoint.quantization if spec.checkpoint else None
    if spec.compressed_attention:  # DeepSeek-V4: fp8_e4m3 on every GPU (overrides.py _deepseek_v4_kv_cache_dtype)
        return "fp8"
    if (checkpoint_quant and checkpoint_quant.kv_cache_fp8) or (spec.is_sparse and _blackwell(gpu)):
        return "fp8"
    return _act_dtype(spec)


def cell_bytes(
    spec: ModelSpec, kv_dtype: str, attn_tp: int, layers: Sequence[int] | None = None, scaled_fp8: bool = False
) -> tuple[int, int, bool]:
    """(K+V bytes of one token on one rank over the attention layers, K bytes alone, MLA?); a DSA model's
    indexer keys included, its fp8 latent with flashmla's scales and bf16 RoPE where `scaled_fp8`."""
    bits = _elem_bits(kv_dtype)
    expanded = spec.expanded_layers()
    layers = layers if layers is not None else range(spec.num_layers)
    k_bits = total_bits = 0
    mla = False
    for i in layers:
        # NOTE: a layer that reads an earlier layer's K and V (Gemma 3n's last 15, Hunyuan's CLA) is still a layer of
        # SGLang's pool: profile_max_num_token's cell is KV heads x head_dim x num_effective_layers (every layer)
        run = expanded[i]
        if run.kind == LayerKind.MLA:
            mla = True
            total_bits += (spec.kv_lora_rank + spec.qk_rope_head_dim) * bits
            if spec.is_sparse:
                total_bits += 8 * index_bytes_per_token(spec, run)
                total_bits += 8 * DSA_SCALED_FP8_EXTRA_BYTES if scaled_fp8 and bits == 8 else 0
        elif run.kind.per_head_kv:
            heads = max(1, (run.kv_heads or spec.kv_heads) // attn_tp)
            d = spec.run_head_dim(run)
            k_bits += heads * d * bits
            total_bits += heads * (d + spec.run_v_dim(run)) * bits  # MHATokenToKVPool's own v_head_dim
    return total_bits // 8, k_bits // 8, mla


def _own(run: LayerRun) -> LayerRun:
    """The layer as SGLang's pool holds it: its own K and V slots even where it reads an earlier layer's."""
    return run.model_copy(update={"kv_shared": False}) if run.kv_shared else run


def _stage_ranges(spec: ModelSpec, pp: int) -> list[range]:
    if pp == 1:
        return [range(spec.num_layers)]
    from kvcalc.cost.shard import pp_indices

    return [range(*pp_indices(spec.num_layers, r, pp)) for r in range(pp)]


def _dist_init_bytes(gpu: GpuSpec, tp: int, pp: int) -> int:
    if tp * pp == 1:
        return 0
    if tp > 1 and has_nvls(gpu):
        return SGLANG_TP_INIT_NVLS_BYTES
    return SGLANG_TP_INIT_RING_BYTES


def _act_dtype(spec: ModelSpec) -> str:
    declared = spec.checkpoint.declared_dtype if spec.checkpoint else None
    declared = declared or (spec.dtype if spec.dtype in ("fp32", "bf16", "fp16") else "bf16")
    # NOTE: SGLang's --dtype auto serves float32 checkpoints in bf16 (model_config._get_and_verify_dtype).
    return "bf16" if declared == "fp32" else declared


def requests_held(tokens: int, page: int, max_running: int, dp: int, seq: int) -> int:
    """Requests of `seq` tokens SGLang's pools hold at once: each of the dp ranks' pools of `tokens` in whole
    pages a request, at most max_running_requests a rank."""
    return dp * min(tokens // (math.ceil(seq / page) * page), max_running)


def predict(
    spec: ModelSpec,
    gpu: GpuSpec,
    settings: SglangSettings,
    *,
    seq: int,
    batch: int = 1,
    dtype: str | None = None,
    pre_load_free_bytes: int | None = None,
    weights_bytes: int | None = None,
) -> SglangPool:
    """SGLang's pool and start-up lines for `spec` on `gpu`; `pre_load_free_bytes` / `weights_bytes`
    replace kvcalc's figures with logged ones ("Load weight begin/end" lines)."""
    version = rel.parse_release(settings.release)
    if refusal := rel.model_refusal(spec, version):
        raise UsageError(f"--engine sglang: {refusal[0]}", hint=refusal[1])
    if v4 := spec.compressed_attention:
        dsv4.check(version, settings.kv_dtype, gpu_family(gpu))
    tp, pp = settings.tp, settings.pp
    dp = tp if settings.dp_attention else 1
    attn_tp = tp // dp
    mib = gpu_mem_mib(gpu)
    chunk_default, graph_bs = rel.graph_defaults(version, mib, tp, settings.max_running_requests)
    chunk = settings.chunked_prefill_size if settings.chunked_prefill_size is not None else chunk_default
    act = _act_dtype(spec)
    kv_dtype = settings.kv_dtype or auto_kv_dtype(spec, gpu)
    scaled = spec.is_sparse and not _blackwell(gpu)
    ranges = _stage_ranges(spec, pp)
    has_mla = any(cell_bytes(spec, kv_dtype, attn_tp, r)[2] for r in ranges[:1])
    page = dsv4.PAGE_TOKENS if v4 else DSA_PAGE_TOKENS if spec.is_sparse else None
    page = page or rel.page_size(version, settings.page_size, spec, gpu, has_mla)
    fraction = settings.mem_fraction_static
    default = fraction is None
    vlm = graphs.multimodal(version, spec.architecture, bool(spec.checkpoint and spec.checkpoint.vision))
    if fraction is None:
        graph_mib = graphs.reserve_mib(
            version, spec, mla=has_mla, chunk=chunk, pp=pp, dp_attention=settings.dp_attention,
            amd=gpu_family(gpu).startswith("cdna"), multimodal=vlm,
        )  # fmt: skip
        fraction = rel.default_mem_fraction(
            version, mib, tp=tp, pp=pp, chunked_prefill_size=chunk, cuda_graph_max_bs=graph_bs,
            dp_attention=settings.dp_attention, prefill_graph_mib=graph_mib,
        )  # fmt: skip
    unscaled = fraction
    if vlm and spec.checkpoint:
        fraction = rel.vlm_fraction(version, fraction, default, spec.checkpoint.vision_shape or (24, 1024))
    if settings.dp_attention:
        # NOTE: server_args.py _handle_data_parallelism (after the default fraction is set): with DP
        # attention the chunked prefill size is divided by dp_size.
        chunk = max(1, chunk // dp)
    quant = quantization_of(spec, dtype if dtype not in (None, "fp32", "bf16", "fp16") else None)
    total = gpu.capacity_bytes
    pre = pre_load_free_bytes
    if pre is None:
        pre = total - CUDA_CONTEXT_BYTES - _dist_init_bytes(gpu, tp, pp)
    notes = _not_modelled(spec, version, settings, default)
    state_per_req = state_bytes_per_request(spec, settings.mamba_ssm_dtype)
    state_per_req = math.ceil(state_per_req / attn_tp) if state_per_req else 0
    state_per_req = stage_state(version, spec, state_per_req, ranges) if state_per_req else 0  # under PP
    large_hopper = gpu_family(gpu) == "hopper" and mib >= 60 * 1024  # a multimodal model's cache kept out of the pool
    vlm_reserve = MIB * graphs.multimodal_reserve_mib(
        version, spec.architecture, multimodal=vlm, large_hopper=large_hopper, max_running=settings.max_running_requests
    )
    stage_tokens = []
    first = None
    v4_pools: dsv4.Dsv4Pools | None = None
    given_running = settings.max_running_requests or (dsv4.MAX_RUNNING if v4 else None)
    router, mxfp4 = sglang_gate_bytes(spec, version), rel.mxfp4_layout(gpu, version)
    for stage, layers in enumerate(ranges):
        if v4:  # SGLang's own V4 loading is not read: kvcalc's shard, in the checkpoint's formats
            wb = dsv4.weights(spec, tp, stage, pp, dtype, settings.dp_attention) + LOAD_OVERHEAD_BYTES
        else:
            w = weight_bytes(
                spec, act, quant, tp=tp, layers=layers, router_bytes=router, mxfp4_layout=mxfp4, copies_16bit_mla=True
            )
            wb = w.total + LOAD_OVERHEAD_BYTES
            if attn_tp != tp:
                # DP attention: the attention projections, and MLA's copies of kv_b_proj, are split over the
                # attention-TP group only.
                group = weight_bytes(spec, act, quant, tp=attn_tp, layers=layers, copies_16bit_mla=True)
                wb += group.attention - w.attention + group.mla_absorbed - w.mla_absorbed
        if weights_bytes is not None and layers.start == 0:
            wb = weights_bytes
        available = pre - wb
        rest = available - pre * (1 - fraction)
        if vlm_reserve:
            rest -= vlm_reserve
        states: StatePool | None = None
        if state_per_req and rest > 0:
            states = state_pool(
                version, spec.architecture, rest, state_per_req, settings.max_running_requests,
                settings.max_mamba_cache_size, dp,
            )  # fmt: skip
            rest -= states.bytes
        cell, k_cell, mla = cell_bytes(spec, kv_dtype, attn_tp, layers, scaled)
        if v4:
            tokens, cell, v4_pools = dsv4.stage(spec, layers, rest, max(1, (given_running or 0) // dp), v4_pools)
        else:
            tokens = (int(rest // cell) if rest > 0 and cell else 0) // page * page
        stage_tokens.append(tokens)
        if first is None:
            first = (wb, available, rest, states, cell, k_cell, mla, layers)
    wb, available, rest, states, cell, k_cell, mla, layers0 = first
    tokens = min(stage_tokens)  # PP: an all-reduce MIN over the stages' counts
    swa_tokens = v4_pools.swa_tokens if v4_pools else None  # DeepSeek-V4's window pool (its layers are MLA-kind)
    expanded = spec.expanded_layers()
    full_layers = [i for i in layers0 if expanded[i].kind in (LayerKind.FULL, LayerKind.MLA)]
    # NOTE: Llama-4's chunked layers are the sliding side of its split (get_hybrid_layer_ids: (i + 1) % 4 != 0)
    swa_layers = [i for i in layers0 if expanded[i].kind in (LayerKind.SLIDING, LayerKind.CHUNKED)]
    split = bool(full_layers and swa_layers) and swa.splits(version, spec.architecture, blackwell=_blackwell(gpu))
    if split and version < swa.MEMORY_BASED_FROM:
        shapes = {elements_per_token(spec, _own(expanded[i]), attn_tp) for i in full_layers + swa_layers}
        if len(shapes) > 1:
            raise UsageError(
                f"--engine sglang: {spec.name}'s sliding and full layers cache different KV shapes; SGLang "
                f"{settings.release}'s split of the pool between them (by layer counts) is not modelled",
                hint=f"use --engine-version {rel.release_text(swa.MEMORY_BASED_FROM)} or later, --engine vllm, or "
                "kvcalc's own estimate without --engine",
            )
    if split and tokens > 0:
        full_cell = cell_bytes(spec, kv_dtype, attn_tp, full_layers)
        swa_cell = cell_bytes(spec, kv_dtype, attn_tp, swa_layers)
        tokens, swa_tokens = swa.full_tokens(tokens, full_cell[0], swa_cell[0], page)
    derived = config_context_len(spec)
    context_len = settings.context_len or derived or seq
    too_long = rel.context_refusal(version, settings.context_len, derived)  # before any memory is profiled
    refusal = too_long
    if tokens <= 0 and refusal is None:
        refusal = rel.refusal(version, fraction, available / GIB, pre / GIB)
    mrr = rel.max_running_requests(version, tokens, context_len, given_running, dp) if tokens > 0 else 0
    if states is not None:
        mrr = min(mrr, states.slots // states.per_request)
        if mrr <= 0 and tokens > 0 and refusal is None:
            refusal = too_few_states(version, states)
    slots = tokens + page
    if v4_pools is not None:
        k_b, v_b, kv_b = None, None, v4_pools.allocated_bytes
    elif mla:
        k_b = v_b = None
        kv_b = slots * cell
    elif swa_tokens is not None:
        # full layers hold `tokens` slots, SWA layers `swa_tokens` (the SWA pool's page is 1)
        (f_kv, f_k, _), (s_kv, s_k, _) = full_cell, swa_cell
        k_b = slots * f_k + (swa_tokens + 1) * s_k
        v_b, kv_b = slots * (f_kv - f_k) + (swa_tokens + 1) * (s_kv - s_k), None
    else:
        k_b, v_b, kv_b = slots * k_cell, slots * (cell - k_cell), None
    capacity = tokens * dp
    held = requests_held(tokens, page, mrr, dp, seq)
    fits = refusal is None and held >= 1 and batch <= held
    pool = SglangPool(
        release=settings.release,
        mem_fraction_static=fraction,
        mem_fraction_default=default,
        vlm_scaled=fraction != unscaled,
        gpu_mem_mib=mib,
        cuda_total_bytes=total,
        pre_load_free_bytes=pre,
        weights_bytes=wb,
        available_kv_bytes=max(0, int(rest)),
        cell_bytes=cell,
        max_total_num_tokens=tokens,
        page_size=page,
        kv_dtype=kv_dtype,
        mla=mla,
        k_bytes=k_b,
        v_bytes=v_b,
        kv_bytes=kv_b,
        swa_tokens=swa_tokens,
        mamba_bytes=states.bytes if states else 0,
        chunked_prefill_size=chunk,
        cuda_graph_max_bs=graph_bs,
        max_running_requests=mrr,
        context_len=context_len,
        dp_size=dp,
        kv_capacity_tokens=capacity,
        seq=seq,
        batch=batch,
        max_concurrency=capacity / seq if seq else 0.0,
        fits=fits,
        refusal=refusal,
        context_limit=derived if too_long else None,
        not_modelled=notes,
    )
    return pool.model_copy(update={"log_lines": log_lines(pool, spec, act)})


TORCH_DTYPES = {
    "bf16": "torch.bfloat16",
    "fp16": "torch.float16",
    "fp32": "torch.float32",
    "fp8": "torch.float8_e4m3fn",
}


def _gb(n: int | float) -> str:
    return f"{n / GIB:.2f}"


def log_lines(p: SglangPool, spec: ModelSpec, act: str) -> list[str]:
    """SGLang's own start-up lines (model_runner.py, scheduler.py) with the predicted values."""
    torch_dtype = TORCH_DTYPES.get(act, act)
    after = p.pre_load_free_bytes - p.weights_bytes
    lines = [
        f"Load weight begin. avail mem={_gb(p.pre_load_free_bytes)} GB",
        f"Load weight end. type={spec.name}, dtype={torch_dtype}, avail mem={_gb(after)} GB, "
        f"mem usage={_gb(p.weights_bytes)} GB.",
    ]
    if p.context_limit:
        return [p.refusal or ""]  # refused by the model config, before the weights load
    if p.refusal:
        return [*lines, p.refusal]
    if p.swa_tokens is not None:
        lines.append(
            f"Use Sliding window memory pool. full_layer_tokens={p.max_total_num_tokens}, "
            f"swa_layer_tokens={p.swa_tokens}"
        )
    head = "KV Cache is allocated. "
    if rel.parse_release(p.release) >= (0, 5, 13):
        # memory_pool.py's allocation log names the pool's dtype first from 0.5.13
        head += f"dtype: {TORCH_DTYPES.get(p.kv_dtype, p.kv_dtype)}, "
    if p.mla:
        lines.append(f"{head}#tokens: {p.max_total_num_tokens}, KV size: {_gb(p.kv_bytes or 0)} GB")
    else:
        lines.append(
            f"{head}#tokens: {p.max_total_num_tokens}, K size: {_gb(p.k_bytes or 0)} GB, V size: {_gb(p.v_bytes or 0)} GB"
        )
    lines.append(
        f"max_total_num_tokens={p.max_total_num_tokens}, chunked_prefill_size={p.chunked_prefill_size}, "
        f"max_running_requests={p.max_running_requests}, context_len={p.context_len}"
    )
    return lines


def _not_modelled(spec: ModelSpec, version: tuple[int, int, int], s: SglangSettings, default: bool) -> list[str]:
    out = []
    ck = spec.checkpoint
    if ck and ck.vision:
        out.append("the vision encoder's own memory at run time")
    if rel.rule_of(version) >= (0, 5, 23):
        out.append(
            "0.5.23's post-capture KV resizing (SGLANG_ENABLE_POST_CAPTURE_KV_SIZING, off by default, so not applied) and its "
            "logical-page sharding scratch (off by default)"
        )
    if s.pp > 1:
        out.append("NCCL send/receive buffers between pipeline stages")
    if rel.rule_of(version) < (0, 4, 6):
        out.append("chunked_prefill_size defaults of releases before 0.4.6 (taken as 0.4.6's)")
    return out
