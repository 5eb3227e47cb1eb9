"""Tensors an engine builds in float32 whatever the model dtype, read from its model files.

An MoE model's gate (router) weight: a replicated linear outside the quantized layers, so a float32 one costs
every rank 2 bytes more a weight than a bf16 one (GLM-4.5: 139 MiB a rank). A rope's cos/sin cache where the
model file asks get_rope for float32 (gpt-oss: 32 MiB where bf16 would be 16). A Mamba-1 mixer's A (Falcon-Mamba-7B:
16 MiB more than bf16). `engines/weights.py` takes the answers as `router_bytes`, `rotary_bytes` and `ssm_a_bytes`.
"""

from __future__ import annotations

from kvcalc.engines.kernels import kernel_family
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import ModelSpec

# Models whose MoE gate vLLM 0.19 builds in float32 whatever the model dtype: ReplicatedLinear(...,
# params_dtype=torch.float32) in minimax_m2.py, minimax_text_01.py, ernie45_moe.py and step3p5.py; nn.Linear(...,
# dtype=torch.float32) in glm4_moe.py (GLM-4.5 to 4.7; glm4_moe_lite.py's Glm4MoeLite inherits it) and afmoe.py
VLLM_FP32 = frozenset(
    {
        "MiniMaxM2ForCausalLM",
        "MiniMaxText01ForCausalLM",
        "MiniMaxM1ForCausalLM",
        "MiniMaxForCausalLM",
        "Ernie4_5_MoeForCausalLM",
        "Step3p5ForCausalLM",
        "Glm4MoeForCausalLM",
        "Glm4MoeLiteForCausalLM",
        "AfmoeForCausalLM",
    }
)
# Models whose rope cos/sin cache vLLM 0.19 builds in float32: get_rope(..., dtype=torch.float32) in gpt_oss.py,
# minimax_text_01.py and bailing_moe_linear.py (rotary_embedding/base.py casts the cache to that dtype; the load's
# "Model loading took" counts it, and under torch.compile, vLLM's default, _match_cos_sin_cache_dtype converts
# per call instead of swapping the buffer for a copy in the query's dtype)
VLLM_FP32_ROPE = frozenset(
    {
        "GptOssForCausalLM",
        "MiniMaxText01ForCausalLM",
        "MiniMaxM1ForCausalLM",
        "MiniMaxForCausalLM",
        "BailingMoeV2_5ForCausalLM",
    }
)
# vLLM 0.19's MambaMixer (layers/mamba/mamba_mixer.py; Mamba, Falcon-Mamba, Jamba) builds A as
# nn.Parameter(torch.empty(intermediate_size // tp, ssm_state_size, dtype=torch.float32)) and loads -exp(A_log)
# into it; its D and the dt bias stay in the model dtype. (MambaMixer2's A, D and dt_bias are per head: a few
# hundred bytes a layer, not counted.) SGLang's mixers are not read here.
VLLM_SSM_A_BYTES = 4
# Models whose gate dtype the config chooses (router_dtype / moe_router_dtype), with vLLM's choice when it is
# silent: mimo_v2_flash.py getattr(config, "moe_router_dtype", "float32"); bailing_moe_linear.py float32 unless
# the config names another; bailing_moe.py and longcat_flash.py the model dtype unless it says float32
VLLM_DECLARED: dict[str, str | None] = {
    "MiMoV2FlashForCausalLM": "fp32",
    "BailingMoeV2_5ForCausalLM": "fp32",
    "BailingMoeForCausalLM": None,
    "BailingMoeV2ForCausalLM": None,
    "LongcatFlashForCausalLM": None,
}
# SGLang: ReplicatedLinear(..., params_dtype=torch.float32) in models/minimax_m2.py and grok.py; and where the
# config asks for it, bailing_moe.py's BailingMoEGate (router_dtype "fp32", else the model dtype)
SGLANG_FP32 = frozenset({"MiniMaxM2ForCausalLM", "Grok1ForCausalLM"})
SGLANG_DECLARED = frozenset({"BailingMoeForCausalLM", "BailingMoeV2ForCausalLM"})
# and from a release on, read in the released wheels 0.5.5-0.5.23: Glm4MoeGate / Glm4MoeLiteGate hold their weight in
# float32 from 0.5.19 ("GLM requires FP32 gate projection"; torch.empty in the model dtype up to 0.5.18); MiMo-V2-Flash
# from 0.5.7 (mimo_v2_flash.py; from 0.5.21 the config's moe_router_dtype, float32 by default); Ling-2.5
# (bailing_moe_linear.py) from 0.5.9; Sarvam-MoE 0.5.10; Hunyuan-V3 0.5.11; Laguna 0.5.12; IQuest-Q1 0.5.21; Beam 0.5.23
SGLANG_FP32_SINCE = {
    "Glm4MoeForCausalLM": (0, 5, 19), "Glm4MoeLiteForCausalLM": (0, 5, 19), "MiMoV2FlashForCausalLM": (0, 5, 7),
    "BailingMoeV2_5ForCausalLM": (0, 5, 9), "SarvamMoEForCausalLM": (0, 5, 10), "HYV3ForCausalLM": (0, 5, 11),
    "LagunaForCausalLM": (0, 5, 12), "IQuestQ1ForCausalLM": (0, 5, 21), "BeamForCausalLM": (0, 5, 23),
}  # fmt: skip
# Ling 3 (bailing_moe_v3.py, from 0.5.19): float32 unless the config's router_dtype names another
SGLANG_DECLARED_FP32_SINCE = {"BailingMoeV3ForCausalLM": (0, 5, 19)}
# Nemotron-H's MoE router (nemotron_h.py) in float32 in 0.5.6-0.5.12 only, the model dtype before and after
SGLANG_NEMOTRON_H_FP32 = ((0, 5, 6), (0, 5, 12))


def _declared(spec: ModelSpec) -> str | None:
    return spec.checkpoint.router_dtype if spec.checkpoint else None


def vllm_gate_bytes(spec: ModelSpec, gpu: GpuSpec) -> int | None:
    """Bytes per MoE gate weight where vLLM 0.19 builds the gate in float32 (4), else None (the model dtype)."""
    arch = spec.architecture or ""
    if arch in VLLM_FP32:
        return 4
    if arch in VLLM_DECLARED:
        return 4 if (_declared(spec) or VLLM_DECLARED[arch]) == "fp32" else None
    if arch == "NemotronHForCausalLM" and spec.experts:
        # nemotron_h.py: GateLinear(force_fp32_compute=True) stores its weight in float32 unless the SM90 / SM100
        # router kernels can take the bf16 one (gate_linear.py: CUDA, Hopper or datacenter Blackwell, no bias)
        return None if kernel_family(gpu) in ("hopper", "blackwell") else 4
    return None


def sglang_gate_bytes(spec: ModelSpec, release: tuple[int, int, int]) -> int | None:
    """Bytes per MoE gate weight where SGLang `release` builds the gate in float32 (4), else None (the model
    dtype)."""
    arch = spec.architecture or ""
    since = SGLANG_FP32_SINCE.get(arch)
    fp32 = arch in SGLANG_FP32 or (since is not None and release >= since)
    first, last = SGLANG_NEMOTRON_H_FP32
    fp32 |= arch == "NemotronHForCausalLM" and bool(spec.experts) and first <= release <= last
    fp32 |= arch in SGLANG_DECLARED and _declared(spec) == "fp32"
    declared_since = SGLANG_DECLARED_FP32_SINCE.get(arch)
    fp32 |= declared_since is not None and release >= declared_since and (_declared(spec) or "fp32") == "fp32"
    return 4 if fp32 else None


def vllm_rotary_bytes(spec: ModelSpec) -> int | None:
    """Bytes per cos/sin element where vLLM 0.19 builds the rope cache in float32 (4), else None (the model
    dtype)."""
    return 4 if spec.architecture in VLLM_FP32_ROPE else None
