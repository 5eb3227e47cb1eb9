"""What every CUDA/PyTorch engine's process holds outside its weights and KV cache: the CUDA context and
the NCCL buffers of a tensor-parallel group. Shared by engines/vllm and engines/sglang (engines never
import each other), sized from public start-up logs.
"""

from __future__ import annotations

from kvcalc.hardware.gpu import GpuSpec

GIB = 2**30

# NOTE: the CUDA context (driver state, kernels of torch and the engine loaded lazily on first use)
# that the first torch.cuda call creates: SGLang 0.5.2's Grok-2 log on 8 x H100 80GB reads 77.43 GiB
# free after a 1.25 GiB distributed init out of the 79.19 GiB CUDA total, 0.51 GiB before; its
# 2025-10-16 log on 8 x H200 reads 137.29 GiB after 1.96 GiB of the 139.80 GiB total, 0.55 GiB
# (../shared/reference/sglang_logs.json).
CUDA_CONTEXT_BYTES = round(0.52 * GIB)
# NOTE: on NVSwitch systems with NVLink SHARP (H100/H200/B200 SXM, NVLink 4 and 5) NCCL sets up
# NVLS buffers outside torch for the tensor-parallel group's collectives: vLLM PR #10511 logged
# non-torch memory rising from 1.79 to 3.58 GiB going from tp 1 to tp 2 (Llama-3-8B, H100), the
# vLLM 0.19 logs of llm-d-planner PR #205 from 0.25 to 2.07 (tp 2) and 2.13 GiB (tp 4); NVIDIA's
# NeMo launcher sets NCCL_NVLS_ENABLE=0 "for memory saving" (NeMo-Framework-Launcher PR #127).
# Without NVLS (PCIe, NVLink bridges, A100) the ring buffers are far smaller (0.09 GiB in all at
# tp 4 in a public vLLM log).
NVLS_BYTES = round(1.85 * GIB)
# NOTE: what SGLang's "Init torch distributed ends. mem usage=" line shows for a tensor-parallel
# group over NVSwitch: NCCL (with NVLS) plus SGLang's custom all-reduce IPC buffers, measured by
# free memory before and after init_torch_distributed. 1.25 GiB at tp 8 on H100 (SGLang 0.5.2,
# Grok-2), 1.96 GiB at tp 8 on H200 (main of 2025-10-16, PR #11716). The smaller figure is taken:
# the larger one moves a 106 GiB pool by 0.6 %, the other way round would move Grok-2's 27 GiB
# pool by 1.1 %.
SGLANG_TP_INIT_NVLS_BYTES = round(1.25 * GIB)
# NOTE: the same line over PCIe (no NVLS; custom all-reduce off beyond two PCIe GPUs): NCCL's ring
# buffers only. A 4 x 24 GB log of Qwen3-14B (SGLang, tp 4) reads 23.08 GiB free before the
# weights out of the RTX 4090's 23.65 GiB total: 0.57 GiB with the CUDA context.
SGLANG_TP_INIT_RING_BYTES = round(0.05 * GIB)


def has_nvls(gpu: GpuSpec) -> bool:
    """NVLink SHARP through NVSwitch: NVLink 4 / 5 parts (not the bridged PCIe / NVL cards)."""
    return bool(gpu.interconnect) and gpu.interconnect.startswith(("NVLink 4", "NVLink 5"))
