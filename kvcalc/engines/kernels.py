"""How an engine's kernels see a GPU where that differs from its datasheet peaks (hardware/gpu.py)."""

from __future__ import annotations

from kvcalc.hardware.family import gpu_family
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import ModelSpec


def gpu_as_run_by(gpu: GpuSpec, engine: str | None) -> GpuSpec:
    """`gpu` with the peaks `engine`'s kernels can reach. NOTE: llama.cpp's CUDA backend runs its
    GEMMs on FP16 with FP16 accumulation (ggml-cuda.cu, batched_mul_mat_traits<GGML_TYPE_F16>:
    CUBLAS_COMPUTE_16F; quantized blocks are dequantized to F16 first) on NVIDIA GPUs since Turing, so
    on a GeForce card it reaches the FP16-accumulate rate, twice the FP32-accumulate peak that
    PyTorch's GEMMs (vLLM, SGLang) and the datasheet's fp16 figure use. Without it a 70B F16 prompt
    on six RTX 3090s (XiongjieDai's llama.cpp table: pp512 at 579 tokens/s) beat its ceiling. Quantized
    prompts run int8 tensor-core MMQ since June 2024 (PRs #7676, #7860), which GeForce cards do not halve
    either (3090: 284 int8 TOPS): the raised peak is also what llama.cpp's FLOP efficiency multiplies. On the
    CUDA scoreboard's pp512 a 3090 reaches 49% of it and an A40 41%, where the datasheet's FP32-accumulate
    figures read 98% and 41%."""
    return gpu.fp16_accumulating() if _llamacpp(engine) else gpu


def prompt_chunk(engine: str | None) -> int:
    """Tokens of a prompt one step takes at most: llama.cpp's n_ubatch (512), the others' token
    budget (8192: vLLM's max_num_batched_tokens on a big GPU, SGLang's chunked prefill size)."""
    return 512 if _llamacpp(engine) else 8192


def _llamacpp(engine: str | None) -> bool:
    return engine is not None and str(engine).lower() == "llamacpp"


def engine_of(build: str) -> str:
    """The engine a build named as the calibration names it runs: "vllm.rocm" is vLLM, "llamacpp.legacy"
    llama.cpp; an engine's own name is itself."""
    return build.partition(".")[0]


# NOTE: accelerators llama.cpp has no ggml backend for (ggml/src: CUDA, HIP, Metal, Vulkan, SYCL, CANN, MUSA, OpenCL,
# CPU; none for Google's TPUs, Intel's Gaudi or AWS's Trainium, which run XLA / SynapseAI / Neuron graphs).
NO_GGML_BACKEND = ("tpu-", "gaudi", "trainium")


def gpu_refusal(engine: str, gpu_name: str) -> str | None:
    """Why `engine` has no build for the GPU named `gpu_name`, or None: TensorRT-LLM is NVIDIA's, built for
    CUDA GPUs only (no ROCm, Metal or Gaudi build), where vLLM, SGLang and llama.cpp have AMD builds too;
    llama.cpp has no backend for TPUs, Gaudi or Trainium (NO_GGML_BACKEND)."""
    family = gpu_family(gpu_name)
    if engine_of(engine) == "trtllm" and (family.startswith("cdna") or family == "apple" or "gaudi" in gpu_name):
        return f"TensorRT-LLM runs on NVIDIA GPUs only; {gpu_name} is not one (vllm, sglang or llamacpp run there)"
    if engine_of(engine) == "llamacpp" and gpu_name.lower().startswith(NO_GGML_BACKEND):
        return (
            f"llama.cpp has no backend for {gpu_name} (its builds: CUDA, HIP, Metal, Vulkan, SYCL and the CPU's); "
            "vllm runs there"
        )
    return None


def checkpoint_refusal(spec: ModelSpec, engine: str | None, dtype: str | None) -> str | None:
    """Why `engine` would not serve `spec`'s checkpoint as --dtype `dtype`, or None. vLLM and SGLang load a
    quantized checkpoint in its own format: vLLM's config/model.py _verify_quantization raises where a
    `quantization` differs from the checkpoint's quant_method, and SGLang takes the checkpoint's; neither
    re-quantizes it (a 16-bit --dtype is the activations' type, which both take)."""
    quantized = spec.checkpoint.quantization if spec.checkpoint else None
    name = engine_of(engine) if engine else None
    if quantized is None or dtype in (None, "fp32", "bf16", "fp16") or name not in ("vllm", "sglang"):
        return None
    head = f"--engine {name}: {spec.name} is already quantized ({quantized.method}); "
    if name == "vllm":
        return head + f"vLLM will not re-quantize it as --dtype {dtype}"
    return head + f"SGLang loads the checkpoint's own format, not --dtype {dtype}"


def build_of(engine: str, gpu_name: str) -> str:
    """The build of `engine` that runs on the GPU named `gpu_name`, as the calibration names it: vLLM on an
    AMD Instinct GPU (a CDNA family: mi210 ... mi355x) is ROCm's ("vllm.rocm": AITER kernels, HIP graphs), whose
    per-step, per-sequence and per-layer costs are fitted apart from vLLM's on NVIDIA GPUs; else `engine` itself."""
    return "vllm.rocm" if engine == "vllm" and gpu_family(gpu_name).startswith("cdna") else engine


def kernel_family(gpu: GpuSpec) -> str:
    """gpu_family with Blackwell split as kernel selection sees it: "blackwell" for the SM100 parts (B200, GB200,
    B300, GB300), "blackwell-sm120" for the GeForce and RTX PRO ones, which many kernels do not run on."""
    family = gpu_family(gpu)
    if family == "blackwell" and gpu.name.lower().startswith(("rtx-5", "rtx-pro")):
        return "blackwell-sm120"
    return family


# Architectures of kvcalc's presets that neither vLLM 0.19's registry (vllm/model_executor/models/registry.py) nor
# SGLang 0.5.x's (srt/models) holds and transformers does not define: their checkpoints ship remote code only. Both
# engines then serve a model through their Transformers backend only where its class says it can
# (is_backend_compatible: _supports_attention_backend, transformers 4.48 on); Tencent-Hunyuan-Large's
# modeling_hunyuan.py was written for transformers 4.41.2 (its config.json). (vLLM's hunyuan_v1.py and SGLang's
# hunyuan.py serve HunYuanMoEV1ForCausalLM and HunYuanDenseV1ForCausalLM: Hunyuan-A13B and the dense 7B.)
REMOTE_CODE_ONLY = frozenset({"HunYuanForCausalLM"})


def remote_code_only(spec: ModelSpec) -> bool:
    """A model neither vLLM nor SGLang has a class for, whose remote code their Transformers backend refuses."""
    return spec.architecture in REMOTE_CODE_ONLY
