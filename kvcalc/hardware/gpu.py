"""Pydantic input model of an accelerator: memory, HBM bandwidth, dense peaks and scale-up link.

Its own module so that a command without --gpu (`kvcalc cache MODEL`) does not define it at start-up.
"""

# NOTE: no `from __future__ import annotations` in the Pydantic model modules: Pydantic would compile
# every field's annotation string at import.
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kvcalc.errors import SpecError

Pos = Annotated[int, Field(gt=0)]

PEAK_DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp4")


class GpuSpec(BaseModel):
    """One accelerator: memory, HBM bandwidth and dense peak FLOP/s per dtype."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    name: str = Field(min_length=1)
    full_name: str
    aliases: list[str] = []
    memory_bytes: Pos  # as marketed, converted with the marketed unit (GB -> 1e9, GiB -> 2^30)
    usable_memory_bytes: Pos | None = None  # measured, where a source has it
    hbm_bandwidth_bytes_per_s: Pos
    peak_dense_tflop_per_s: dict[str, float]
    # GeForce tensor cores run FP16 at twice their FP32-accumulate rate (the fp16 peak above) when the
    # products are accumulated in FP16 (GA102/AD102 whitepapers: RTX 3090 142 against 71 TFLOP/s); a
    # kernel that does so (llama.cpp's cuBLAS GEMMs) gets this peak instead (fp16_accumulating).
    fp16_accumulate_tflop_per_s: Annotated[float, Field(gt=0)] | None = None
    # Set by fp16_accumulating() only: its 16-bit peaks are already raised (a second call leaves it as it
    # is). The raised peak is the ceiling's and what llama.cpp's FLOP efficiency (mfu) multiplies.
    fp16_raised: bool = Field(default=False, exclude=True, repr=False)
    sources: list[str] = []
    notes: str | None = None
    # Scale-up link for tensor parallelism: ONE direction's bandwidth per GPU (half a vendor's
    # bidirectional figure) and a small-message all-reduce latency floor (kvcalc/parallel.py).
    interconnect: str | None = None
    link_bandwidth_bytes_per_s: Pos | None = None
    link_latency_s: Annotated[float, Field(gt=0)] | None = None
    # A fully connected mesh without a switch (AMD Infinity Fabric: 7 links, one to each peer of an
    # 8-GPU board): the link bandwidth is split over this many peer links, and a tensor-parallel
    # group of t GPUs reaches only the t - 1 links to its own members.
    link_mesh_peers: Pos | None = None
    # Nodes and cost (issue 20). scale_up_domain: GPUs joined by `interconnect` (8 on an HGX board or an
    # MI300X platform, 72 in a GB200/GB300 NVL72 rack, a PCIe server's GPU count); ranks beyond it talk
    # over the scale-out link, ONE direction's bandwidth per GPU (a 400 Gb/s NIC per GPU: 50 GB/s).
    scale_up_domain: Pos | None = None
    scale_out: str | None = None
    scale_out_bandwidth_bytes_per_s: Pos | None = None
    scale_out_latency_s: Annotated[float, Field(gt=0)] | None = None
    # On-demand US$ per GPU-hour where a public price list has one; price_source dates and names it.
    price_usd_per_hour: Annotated[float, Field(gt=0)] | None = None
    price_source: str | None = None
    # What `nvidia-smi --query-gpu=memory.total` prints, in MiB (a few hundred MiB above the CUDA
    # total): SGLang picks its default --mem-fraction-static from it (engines/sglang/release.py).
    nvidia_smi_memory_mib: Pos | None = None
    # One memory shared by CPU and GPU (Apple Silicon): memory_bytes is the unified RAM and
    # usable_memory_bytes the GPU working set macOS allows (Metal's recommendedMaxWorkingSetSize).
    unified_memory: bool = False

    @field_validator("peak_dense_tflop_per_s")
    @classmethod
    def _peaks(cls, v: dict[str, float]) -> dict[str, float]:
        out = {}
        for key, value in v.items():
            if key not in PEAK_DTYPES:
                raise ValueError(f"unknown dtype '{key}' (allowed: {', '.join(PEAK_DTYPES)})")
            if value <= 0:
                raise ValueError(f"peak for {key} must be positive")
            out[key] = value
        return out

    @property
    def capacity_bytes(self) -> int:
        """Capacity used for fitting: the measured figure if known, else the marketed one."""
        return self.usable_memory_bytes or self.memory_bytes

    @property
    def bandwidth_bytes_per_s(self) -> int:
        return self.hbm_bandwidth_bytes_per_s

    def compute_dtype(self, weight_dtype: str) -> str:
        """The tensor-core format a matmul with these weights runs in on this GPU."""
        # NOTE: int4 / mxfp4 weights are usually dequantized and multiplied in bf16
        # (weight-only quantization); fp8 and int8 use their own tensor-core rates.
        wanted = {"int4": "bf16", "mxfp4": "bf16", "nvfp4": "bf16"}.get(weight_dtype, weight_dtype)
        # NOTE: fp32 last: a device measured by `kvcalc probe` on a CPU has only an fp32 rate, and a
        # CPU runtime without 16-bit units widens bf16 weights to fp32 to multiply them.
        for candidate in (wanted, "bf16", "fp16", "fp32"):
            if candidate in self.peak_dense_tflop_per_s:
                return candidate
        raise SpecError(
            f"GPU '{self.name}' has no sourced dense peak for {wanted}, bf16, fp16 or fp32",
            hint="add peak_dense_tflop_per_s to its preset, or pick another --gpu",
        )

    def fp16_accumulating(self) -> "GpuSpec":
        """The GPU as a kernel that accumulates 16-bit products in FP16 sees it: its 16-bit peaks
        raised to fp16_accumulate_tflop_per_s where the preset has one (the same GPU otherwise, and a GPU
        already raised)."""
        fast = self.fp16_accumulate_tflop_per_s
        if fast is None or self.fp16_raised:
            return self
        peaks = dict(self.peak_dense_tflop_per_s)
        for key in ("fp16", "bf16"):
            peaks[key] = max(peaks.get(key, 0.0), fast)
        return self.model_copy(update={"peak_dense_tflop_per_s": peaks, "fp16_raised": True})

    def peak_flop_per_s(self, dtype: str) -> float:
        return self.peak_dense_tflop_per_s[dtype] * 1e12

    def ridge_flop_per_byte(self, dtype: str) -> float:
        return self.peak_flop_per_s(dtype) / self.bandwidth_bytes_per_s
