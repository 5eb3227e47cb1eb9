"""vLLM 0.19's KV-cache budget before anyone runs vLLM: weights, profiling peak, non-torch memory.

vllm/v1/worker/gpu_worker.py (v0.19.0) determine_available_memory:

    requested    = gpu_memory_utilization x total memory CUDA reports
    available KV = requested - (weights + torch peak increase during profile_run + non-torch increase)

(In 0.19 the CUDA-graph memory is estimated and logged - "Estimated CUDA graph memory" - but not
subtracted; subtracting it became the default in 0.21, VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS.)

The torch peak comes from gpu_model_runner.py profile_run: a dummy forward of max_num_batched_tokens
tokens (_dummy_run), then on the last pipeline stage a sampler warm-up (_dummy_sampler_run) on
R = min(max_num_seqs, max_num_batched_tokens) rows of logits. The logits are gathered to the full
vocabulary on every tensor-parallel rank (LogitsProcessor._gather_logits), so this term does not
shrink with tp and grows with the vocabulary.
"""

from __future__ import annotations

import math

from kvcalc.cost.params import counted_vocab, output_gate_rows
from kvcalc.engines.fp32 import VLLM_SSM_A_BYTES, vllm_gate_bytes, vllm_rotary_bytes
from kvcalc.engines.runtime import NVLS_BYTES, has_nvls
from kvcalc.engines.weights import WeightBytes, allocated, padded_vocab, weight_bytes
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.formats import quantization_of
from kvcalc.model.quant import Quantization
from kvcalc.model.spec import LayerKind, ModelSpec
from kvcalc.results import Result
from kvcalc.units import DEFAULT_GPU_UTIL

GIB = 2**30

# NOTE: non-torch memory that grows between the worker's first snapshot (CUDA context already
# there) and the end of profiling: cuBLAS/cuBLASLt handles, attention and Triton kernel modules.
# 0.24-0.26 GiB on one H100 in public vLLM 0.19 logs (llm-d-incubation/llm-d-planner PR #205,
# accuracy/results/v0.19.0/logs: Llama-3.1-8B, Qwen2.5-7B, DeepSeek-V2-Lite, Gemma-2-2B, Phi-4).
NON_TORCH_BASE_BYTES = round(0.25 * GIB)
# NVLS_BYTES: NCCL's NVLink SHARP buffers on NVSwitch systems (engines/runtime.py, shared with SGLang).
# Without NVLS the ring buffers are not sized; pipeline stages' send/receive buffers are not sized either.
# NOTE: torch-allocated library workspaces created by the first GEMMs of the profiling run
# (PyTorch's cuBLAS + cuBLASLt workspaces, 32 MiB each per handle and stream on Hopper;
# CUBLAS_WORKSPACE_CONFIG default :4096:8) and small sampler scratch buffers.
WORKSPACE_BYTES = 96 * 2**20


def default_limits(gpu: GpuSpec) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) the OpenAI server picks on this GPU.

    vllm/engine/arg_utils.py _set_default_args: 1024 and 8192 on GPUs of at least 70 GiB that are
    not A100s (H100, H200, MI300X, B200), else 256 and 2048."""
    if gpu.capacity_bytes >= 70 * GIB and "a100" not in gpu.name.lower():
        return 1024, 8192
    return 256, 2048


class Settings(Result):
    """The vLLM options that decide the pool (vLLM's names, OpenAI-server defaults on an H100)."""

    gpu_memory_utilization: float = DEFAULT_GPU_UTIL
    max_num_seqs: int = 1024
    max_num_batched_tokens: int = 8192
    tp: int = 1
    pp: int = 1


class StageMemory(Result):
    """One pipeline stage's rank: what determine_available_memory sees."""

    layers: int
    weights_bytes: int
    profile_peak_bytes: int
    non_torch_bytes: int
    available_kv_bytes: int


class MemoryTerms(Result):
    gpu_total_bytes: int
    requested_bytes: int
    weights_bytes: int  # rank 0 (the stage vLLM logs first)
    profile_peak_bytes: int
    non_torch_bytes: int
    available_kv_bytes: int
    activation_dtype: str
    weight_format: str
    stages: list[StageMemory]
    weights: WeightBytes
    unsized: list[str]  # terms kvcalc cannot size for this model, left out of the sums above


def activation_dtype(spec: ModelSpec, gpu: GpuSpec, dtype: str | None) -> str:
    """vLLM's `--dtype auto`: the config's 16-bit type; float32 checkpoints are served in 16-bit."""
    if dtype in ("fp32", "bf16", "fp16"):
        return dtype
    declared = spec.checkpoint.declared_dtype if spec.checkpoint else None
    declared = declared or (spec.dtype if spec.dtype in ("fp32", "bf16", "fp16") else "bf16")
    if declared == "fp32":
        # NOTE: vllm/config/model.py _resolve_auto_dtype: float32 is downcast to the platform's
        # first supported dtype, bf16 from compute capability 8.0 on, else fp16.
        return "bf16" if "bf16" in gpu.peak_dense_tflop_per_s else "fp16"
    return declared


def pp_layers(num_layers: int, pp: int) -> list[range]:
    """Each pipeline stage's layers, as vLLM's get_pp_indices splits them."""
    from kvcalc.cost.shard import pp_indices

    return [range(*pp_indices(num_layers, rank, pp)) for rank in range(pp)]


def forward_peak_bytes(spec: ModelSpec, act: int, tokens: int, tp: int, layers: range) -> int:
    """Largest set of live activations in one decoder layer of a `tokens`-token forward, one rank."""
    h = spec.hidden_size
    hr = math.ceil(spec.num_heads / tp)
    # hidden states + residual; Gemma 3n's AltUp keeps altup_inputs streams of them and as many predictions
    stream = 2 * max(spec.altup_inputs, 1) * tokens * h * act
    if tp > 1:
        stream += tokens * h * act  # the all-reduce output
    # Gemma 3n / 4's per-layer inputs, tokens x layers x width (gathered whole on every rank), held through the layers
    stream += tokens * spec.num_layers * spec.per_layer_input * act
    peak = 0
    expanded, routed = spec.expanded_layers(), spec.routes_experts()
    for i in layers:
        run = expanded[i]
        if run.kind == LayerKind.MLA:
            nope, rope = spec.qk_nope_head_dim or 0, spec.qk_rope_head_dim
            v = spec.v_head_dim or nope
            # prefill (non-absorbed): q, the up-projected k/v, and the attention output
            attn = tokens * hr * ((nope + rope) + (nope + v) + (nope + rope) + v) * act
        elif run.kind == LayerKind.STATELESS:
            attn = 0
        else:
            g, d, v = max(1, (run.kv_heads or spec.kv_heads) // tp), spec.run_head_dim(run), spec.run_v_dim(run)
            gate = output_gate_rows(spec, hr, d)
            attn = tokens * ((hr + g) * d + gate + g * v + hr * v) * act
        inter = run.intermediate_size
        if inter is None and not routed[i]:
            inter = spec.intermediate_size
        mlp = 0
        if inter:
            per = math.ceil(inter / tp)
            mlp = tokens * ((2 if spec.mlp_gated else 1) * per + per) * act
        elif spec.is_moe:
            mlp = moe_workspace_bytes(spec, act, tokens, tp, layers) + tokens * h * act
        peak = max(peak, attn, mlp)
    return stream + peak


def moe_workspace_bytes(spec: ModelSpec, act: int, tokens: int, tp: int, layers: range) -> int:
    """The fused-MoE workspaces, sized for `tokens` tokens and kept for reuse after profiling."""
    if not spec.is_moe or not any(i >= spec.dense_layers for i in layers):
        return 0
    # NOTE: fused_moe.py TritonExperts.workspace_shapes: (M, topk, max(activation out, K)) and
    # (M, topk, max(N, K)) with N the w13 rows (2 x intermediate / tp, or 1 x for a non-gated activation,
    # whose output is N wide) and K the experts' width; the modular kernel takes them from vLLM's
    # workspace manager, which keeps the largest buffer allocated.
    inter = math.ceil((spec.expert_intermediate_size or spec.intermediate_size) / tp)
    k, h = spec.experts_per_token, spec.expert_width
    n = (2 if spec.mlp_gated else 1) * inter
    return tokens * k * (max(inter, h) + max(n, h)) * act


def sampler_peak_bytes(spec: ModelSpec, act: int, rows: int) -> int:
    """The sampler warm-up's logits: the model-dtype logits plus three float32 [rows, vocab] tensors."""
    # NOTE: _dummy_sampler_run holds compute_logits' output (rows x padded vocab, model dtype);
    # Sampler.forward works on float32 logits; vLLM 0.19 logs "FlashInfer top-p/top-k sampling is
    # available but disabled by default", so TopKTopPSampler.forward_native runs: the Triton top-k /
    # top-p mask works in place, then softmax(dtype=float32) makes the probabilities and random_sample
    # an exponential-noise tensor of the same shape (topk_topp_sampler.py). Three float32 tensors for
    # float32 models too: vLLM 0.19's own log for Llama-3.1-8B --dtype float32 (llm-d-planner PR #205,
    # ...tp1pp1dp1--8192-dtf32.log) shows a 2.21 GiB torch peak, 1,024 x 128,256 x (4 + 3 x 4) B plus
    # the hidden states and workspaces; two float32 tensors would give 1.72 GiB.
    vocab = counted_vocab(spec)
    return rows * padded_vocab(vocab) * act + 3 * rows * vocab * 4


def per_layer_buffer_bytes(spec: ModelSpec, act: int, tokens: int) -> int:
    """The per-layer inputs buffer vLLM's Gemma 3n / 4 keep for CUDA graphs (gemma3n_mm.py, gemma4_mm.py: torch.zeros
    of max_num_batched_tokens x num_layers x hidden_size_per_layer_input in the model dtype, made while loading, so in
    the weights figure); 0 for other models and for the text-only Gemma3nForCausalLM / Gemma4ForCausalLM."""
    wrappers = ("Gemma3nForConditionalGeneration", "Gemma4ForConditionalGeneration")
    if not spec.per_layer_input or spec.architecture not in wrappers:
        return 0
    return allocated(tokens * spec.num_layers * spec.per_layer_input * act)


def image_profile_bytes(spec: ModelSpec, act: int, tokens: int) -> int:
    """Dummy images and their embeddings, held through the language model's profiling forward."""
    ck = spec.checkpoint
    if not (ck and ck.image_profile):
        return 0
    # NOTE: gpu_model_runner.py profile_run (first pipeline stage): the encoder runs on
    # max(max_num_batched_tokens, tokens per image) // tokens per image dummy images, its outputs stay
    # in encoder_cache["tmp"] and the batched dummy inputs in a local until profile_run returns, so both
    # are live during _dummy_run and the sampler warm-up. The pixel values count in the model dtype:
    # vLLM 0.19 logged 3.89 / 3.94 / 3.99 GiB of torch peak for Gemma-3 4B / 12B / 27B, 0.25-0.29 GiB
    # above their language models, where 32 x (3 x 896^2 + 256 x hidden) x 2 B is 0.18-0.23 GiB (float32
    # pixels would give 0.33-0.37); the rest, 0.065 GiB, Gemma-2-2B shows as well without images.
    # Mistral-Small-3.1 (two 1540^2 images of 3,080 tokens): 2.03 GiB logged, its language model 1.94.
    per_image, pixels = ck.image_profile
    images = max(tokens, per_image) // per_image
    return images * (per_image * spec.hidden_size + pixels) * act


def predict(
    spec: ModelSpec,
    gpu: GpuSpec,
    settings: Settings,
    *,
    dtype: str | None = None,
    steps: list[str] | None = None,
) -> MemoryTerms:
    """Each term of vLLM 0.19's KV budget on every pipeline stage; rank 0's figures on top."""
    act_dtype = activation_dtype(spec, gpu, dtype)
    act = 4 if act_dtype == "fp32" else 2
    quant = quantization_of(spec, dtype if dtype not in ("fp32", "bf16", "fp16") else None)
    total = gpu.capacity_bytes
    requested = int(total * settings.gpu_memory_utilization)
    tokens = settings.max_num_batched_tokens
    rows = min(settings.max_num_seqs, tokens)
    tp, pp = settings.tp, settings.pp
    mxfp4 = mxfp4_layout(gpu)
    unsized = _unsized(spec, quant, mxfp4)
    nvls = has_nvls(gpu)
    non_torch = NON_TORCH_BASE_BYTES + (NVLS_BYTES if tp > 1 and nvls else 0)
    if tp > 1 and not nvls:
        unsized.append(f"NCCL ring buffers of the tensor-parallel group ({gpu.interconnect or 'no NVLink SHARP'})")
    if pp > 1:
        unsized.append("NCCL send/receive buffers between pipeline stages")
    if any(run.state_bytes for run, _ in spec.layer_groups()):
        unsized.append("the SSM / linear-attention mixers' activations in the profiling forward")
    stages: list[StageMemory] = []
    first_weights: WeightBytes | None = None
    from kvcalc.engines.vllm.figures import MLA_AS_MHA  # NOTE: here, not at the top: roofline starts without it

    # MiniCPM3 runs its MLA projections as plain attention under vLLM: no absorbed 16-bit copies
    absorbs = spec.architecture not in MLA_AS_MHA
    ranges = pp_layers(spec.num_layers, pp) if pp > 1 else [range(spec.num_layers)]
    for layers in ranges:
        w = weight_bytes(
            spec, act_dtype, quant, tp=tp, layers=layers, absorbs=absorbs, mxfp4_layout=mxfp4,
            router_bytes=vllm_gate_bytes(spec, gpu), rotary_bytes=vllm_rotary_bytes(spec), ssm_a_bytes=VLLM_SSM_A_BYTES,
        )  # fmt: skip
        first_weights = first_weights or w
        held = w.total + (per_layer_buffer_bytes(spec, act, tokens) if layers.start == 0 else 0)
        peak = forward_peak_bytes(spec, act, tokens, tp, layers)
        # NOTE: mxfp4 experts on Hopper, Blackwell and ROCm run a monolithic kernel (oracle/mxfp4.py
        # backend_to_kernel_cls prefers OAITritonMxfp4ExpertsMonolithic / TrtLlmMxfp4ExpertsMonolithic; AiterExperts
        # asks for no workspace), which allocates its intermediates per call: no workspace outlives the forward.
        # Marlin's (Ampere, Ada) is modular and keeps its workspaces as TritonExperts does.
        monolithic = quant is not None and quant.experts is not None and quant.experts.name == "mxfp4" and mxfp4 in (
            "vllm-triton", "vllm-trtllm", "vllm-rocm", "vllm-rocm-cdna4",
        )  # fmt: skip
        workspace = 0 if monolithic else moe_workspace_bytes(spec, act, tokens, tp, layers)
        if layers.start > 0:
            # later stages receive hidden states and residual into buffers sized for
            # max_num_batched_tokens, made during the dummy run and kept (intermediate_tensors)
            peak += 2 * tokens * spec.hidden_size * act
        if layers.stop == spec.num_layers:
            # the sampler runs while the dummy run's hidden states [tokens, hidden] (and the
            # rows picked for logits, and their random stand-in) are still referenced
            live = (tokens + 2 * rows) * spec.hidden_size * act + workspace
            peak = max(peak, live + sampler_peak_bytes(spec, act, rows))
        if layers.start == 0:
            peak += image_profile_bytes(spec, act, tokens)
        peak += WORKSPACE_BYTES
        stages.append(
            StageMemory(
                layers=len(layers),
                weights_bytes=held,
                profile_peak_bytes=peak,
                non_torch_bytes=non_torch,
                available_kv_bytes=requested - held - peak - non_torch,
            )
        )
    s0 = stages[0]
    if steps is not None:
        steps += _explain(spec, gpu, settings, act_dtype, quant, requested, s0, stages, rows, unsized)
    return MemoryTerms(
        gpu_total_bytes=total,
        requested_bytes=requested,
        weights_bytes=s0.weights_bytes,
        profile_peak_bytes=s0.profile_peak_bytes,
        non_torch_bytes=s0.non_torch_bytes,
        available_kv_bytes=s0.available_kv_bytes,
        activation_dtype=act_dtype,
        weight_format=_format_name(quant, act_dtype),
        stages=stages,
        weights=first_weights,
        unsized=unsized,
    )


def _format_name(quant: Quantization | None, act_dtype: str) -> str:
    if quant is None:
        return act_dtype
    parts = [f"{quant.method}:"]
    if quant.linear:
        parts.append(f"linear {quant.linear.name}")
    if quant.experts:
        parts.append(f"experts {quant.experts.name}")
    return " ".join(parts)


def mxfp4_layout(gpu: GpuSpec) -> str | None:
    """How vLLM 0.19's default MoE kernels hold mxfp4 experts on `gpu` (engines/weights.MXFP4_LAYOUTS), or None
    where kvcalc does not size it (SM120 Blackwell: FlashInfer's CUTLASS or Marlin; Apple and others)."""
    from kvcalc.engines.kernels import kernel_family

    return {
        "blackwell": "vllm-trtllm",
        "hopper": "vllm-triton",
        "ampere": "vllm-marlin",
        "ada": "vllm-marlin",
        "cdna3": "vllm-rocm",
        "cdna4": "vllm-rocm-cdna4",
    }.get(kernel_family(gpu))


def _unsized(spec: ModelSpec, quant: Quantization | None, mxfp4: str | None) -> list[str]:
    out = []
    if quant is not None and quant.problem:
        out.append(f"quantized weights ({quant.method}: {quant.problem}); counted in the activation dtype")
    if quant is not None and quant.experts is not None and quant.experts.name == "mxfp4" and mxfp4 is None:
        out.append(
            "the MoE backend's re-layout of the mxfp4 experts (padding, swizzled scale copies); counted as plain mxfp4"
        )
    ck = spec.checkpoint
    if not spec.max_position_embeddings and not spec.attention_free:
        out.append("the rotary cos/sin cache (max_position_embeddings unknown for this model)")
    if ck and ck.vision:
        if not spec.extra_params and not ck.vision_params:
            out.append("the vision encoder's weights (vision_config not sized for this family)")
        if ck.image_profile:
            out.append(
                "the vision encoder's own forward on the dummy images (taken as below the language model's peak)"
            )
        else:
            out.append("the vision encoder's dummy-image profiling run and encoder cache")
    return out


def _explain(spec, gpu, settings, act_dtype, quant, requested, s0, stages, rows, unsized) -> list[str]:
    g = GIB
    lines = [
        f"vLLM 0.19 requested memory: {gpu.capacity_bytes:,} B (CUDA total) × {settings.gpu_memory_utilization:g}"
        f" = {requested:,} B ({requested / g:.2f} GiB)",
        f"weights as loaded ({_format_name(quant, act_dtype)}, activations {act_dtype}, tp {settings.tp}): "
        f"{s0.weights_bytes:,} B ({s0.weights_bytes / g:.2f} GiB) per GPU",
        f"profiling peak: forward of {settings.max_num_batched_tokens:,} tokens, sampler warm-up of {rows:,} rows × "
        f"{spec.vocab_size:,} vocabulary (model-dtype logits + 3 float32 copies) + workspaces = "
        f"{s0.profile_peak_bytes:,} B ({s0.profile_peak_bytes / g:.2f} GiB)",
        f"non-torch: {NON_TORCH_BASE_BYTES / g:.2f} GiB libraries + {NVLS_BYTES / g:.2f} GiB of NCCL NVLS buffers "
        f"when tp ≥ 2 over NVSwitch = {s0.non_torch_bytes:,} B ({s0.non_torch_bytes / g:.2f} GiB)",
        f"available KV = {requested:,} − {s0.weights_bytes:,} − {s0.profile_peak_bytes:,} − {s0.non_torch_bytes:,} "
        f"= {s0.available_kv_bytes:,} B ({s0.available_kv_bytes / g:.2f} GiB)",
    ]
    if len(stages) > 1:
        lines.append(
            "pipeline stages (layers, available KV GiB): "
            + ", ".join(f"{s.layers}: {s.available_kv_bytes / g:.2f}" for s in stages)
        )
    lines += [f"not sized: {u}" for u in unsized]
    return lines
