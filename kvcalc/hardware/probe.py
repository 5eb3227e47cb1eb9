"""`kvcalc probe`: what this machine achieves, memory bandwidth and matmul FLOP/s per dtype.

On a CUDA or ROCm GPU through PyTorch when it is installed, else on the CPU through NumPy (both
imported lazily). Bandwidth kernels follow STREAM (McCalpin): copy a = b counts 2 arrays of bytes,
triad a = b + s*c counts 3, and a read (sum) counts 1; write-allocate traffic is not counted, as in
STREAM. Each kernel runs a few times; the best rate is the figure (STREAM's convention: the least
disturbed run), the median and the spread say how steady it was.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone
from typing import Callable

from kvcalc.errors import MissingExtraError, UsageError
from kvcalc.results import Result

Progress = Callable[[str, int, int], None]  # (what, done, total)
MiB = 2**20
CPU_DTYPES = {"fp32": "float32", "fp64": "float64"}  # BLAS dtypes; NumPy's float16 matmul is not BLAS
GPU_DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8")


class Stat(Result):
    kernel: str  # copy | triad | read | matmul
    dtype: str
    size: str  # what one repetition works on
    work: int  # bytes counted (bandwidth) or FLOPs per repetition
    seconds: list[float]
    best: float  # B/s or FLOP/s
    median: float
    worst: float

    @property
    def spread(self) -> float:
        """(best - worst) / median of the rates."""
        return (self.best - self.worst) / self.median if self.median else 0.0


class ProbeResult(Result):
    device: str
    backend: str  # cpu (numpy) | cuda (torch) | rocm (torch)
    threads: int
    memory_bytes: int
    date: str
    method: str
    quick: bool
    bandwidth: list[Stat]
    matmul: list[Stat]
    skipped: list[str] = []
    bandwidth_bytes_per_s: int  # the best kernel's best rate
    peak_tflop_per_s: dict[str, float]  # best per dtype
    preset: str | None = None
    preset_match: str | None = None  # how the preset was chosen
    preset_bandwidth_bytes_per_s: int | None = None
    preset_peak_tflop_per_s: dict[str, float] = {}
    mbu: float | None = None  # measured / preset bandwidth: what --mbu means
    mfu: dict[str, float] = {}  # measured / preset peak per dtype: what --mfu means


def _stat(kernel: str, dtype: str, size: str, work: int, seconds: list[float]) -> Stat:
    rates = sorted(work / s for s in seconds)
    return Stat(
        kernel=kernel,
        dtype=dtype,
        size=size,
        work=work,
        seconds=seconds,
        best=rates[-1],
        median=rates[len(rates) // 2] if len(rates) % 2 else (rates[len(rates) // 2 - 1] + rates[len(rates) // 2]) / 2,
        worst=rates[0],
    )


def _repeat(fn: Callable[[], float], reps: int, budget_s: float, label: str, progress: Progress) -> list[float]:
    """Time fn (which returns its own seconds) up to reps times, at least twice, within budget_s."""
    seconds: list[float] = []
    start = time.perf_counter()
    for i in range(reps):
        progress(label, i, reps)
        seconds.append(fn())
        if len(seconds) >= 2 and time.perf_counter() - start > budget_s:
            break
    progress(label, len(seconds), len(seconds))
    return seconds


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# --- the CPU, through NumPy -------------------------------------------------------------------


def _np():  # noqa: ANN202
    try:
        import numpy as np
    except ImportError:
        raise MissingExtraError("numpy", "probe", "kvcalc probe on the CPU") from None
    return np


def threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def last_level_cache_bytes() -> int:
    """The largest cache the OS reports (Linux sysfs), else 64 MiB as a guess."""
    sizes = []
    base = "/sys/devices/system/cpu/cpu0/cache"
    for entry in os.listdir(base) if os.path.isdir(base) else []:
        try:
            text = open(os.path.join(base, entry, "size")).read().strip()
        except OSError:
            continue
        unit = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        sizes.append(int(text.rstrip("KMG")) * unit)
    return max(sizes, default=64 * MiB)


def memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "CPU"


def _parallel(pool, n_threads: int, n: int, fn: Callable[[int, int], object]) -> None:  # noqa: ANN001
    """fn(lo, hi) on n_threads slices at once: NumPy releases the GIL inside its loops."""
    edges = [n * i // n_threads for i in range(n_threads + 1)]
    list(pool.map(lambda i: fn(edges[i], edges[i + 1]), range(n_threads)))


def cpu_bandwidth(array_bytes: int, reps: int, budget_s: float, progress: Progress) -> list[Stat]:
    """STREAM copy, triad and read over three float64 arrays of array_bytes each, on every core."""
    from concurrent.futures import ThreadPoolExecutor

    np = _np()
    n = array_bytes // 8
    n_threads = threads()
    a, b, c = np.ones(n), np.full(n, 2.0), np.full(n, 0.5)  # written, so every page is really mapped
    block = 64 * 1024  # 512 KiB of float64: the triad's temporary stays in L2

    def copy(lo: int, hi: int) -> None:
        np.copyto(a[lo:hi], b[lo:hi])

    def triad(lo: int, hi: int) -> None:
        # NOTE: blocked, so that b + s*c makes no array-sized temporary: memory sees b and c read, a written.
        tmp = np.empty(block)
        for s in range(lo, hi, block):
            e = min(s + block, hi)
            np.multiply(c[s:e], 3.0, out=tmp[: e - s])
            np.add(b[s:e], tmp[: e - s], out=a[s:e])

    def read(lo: int, hi: int) -> None:
        np.add.reduce(b[lo:hi])

    out = []
    size = f"{array_bytes / MiB:,.0f} MiB arrays, {n_threads} threads"
    with ThreadPoolExecutor(n_threads) as pool:
        for name, fn, arrays in (("copy", copy, 2), ("triad", triad, 3), ("read", read, 1)):
            _parallel(pool, n_threads, n, fn)  # warm-up
            seconds = _repeat(
                lambda fn=fn: _timed(lambda: _parallel(pool, n_threads, n, fn)), reps, budget_s / 3, name, progress
            )
            out.append(_stat(name, "fp64", size, arrays * n * 8, seconds))
    return out


def cpu_matmul(dtype: str, target_s: float, max_n: int, reps: int, budget_s: float, progress: Progress) -> Stat:
    """C = A @ B, square, sized so one product takes about target_s (2 n^3 FLOPs)."""
    np = _np()
    kind = getattr(np, CPU_DTYPES[dtype])
    rng = np.random.default_rng(0)
    n = 256
    while True:  # grow until one product takes a measurable time, then size from that rate
        x = rng.standard_normal((n, n)).astype(kind)
        seconds = _timed(lambda: x @ x)
        if seconds > target_s / 8 or n >= max_n:
            break
        n *= 2
    rate = 2 * n**3 / max(seconds, 1e-9)
    n = int(min(max_n, max(256, (target_s * rate / 2) ** (1 / 3))) // 64 * 64)
    a, b = rng.standard_normal((n, n)).astype(kind), rng.standard_normal((n, n)).astype(kind)
    _ = a @ b
    seconds_list = _repeat(lambda: _timed(lambda: a @ b), reps, budget_s, f"matmul {dtype}", progress)
    return _stat("matmul", dtype, f"{n:,} x {n:,} @ {n:,} x {n:,}", 2 * n**3, seconds_list)


def probe_cpu(quick: bool, reps: int, progress: Progress) -> ProbeResult:
    np = _np()
    # Working set: three arrays that together hold three times the last-level cache, at least
    # 256 MiB, at most 1.5 GiB and a quarter of memory. --quick: 8 MiB arrays (figures then are cache rates).
    if quick:
        array_bytes = 8 * MiB
    else:
        total = min(max(3 * last_level_cache_bytes(), 256 * MiB), 1536 * MiB, memory_bytes() // 4)
        array_bytes = max(total // 3 // MiB, 1) * MiB
    budget = 1.0 if quick else 6.0
    bandwidth = cpu_bandwidth(array_bytes, reps, budget, progress)
    matmul = [
        cpu_matmul(d, 0.01 if quick else 0.3, 256 if quick else 4096, reps, budget / 2, progress) for d in CPU_DTYPES
    ]
    return _result(
        cpu_name(),
        "cpu (numpy)",
        threads(),
        memory_bytes(),
        bandwidth,
        matmul,
        f"NumPy {np.__version__} on {threads()} threads: STREAM copy/triad/read over {array_bytes / MiB:,.0f} MiB "
        f"float64 arrays, square BLAS matmul per dtype; best of {reps}",
        quick,
        ["fp16, bf16: NumPy has no BLAS matmul for 16-bit floats (measure with PyTorch)"],
    )


# --- a GPU, through PyTorch ----------------------------------------------------------------


def torch_gpu():  # noqa: ANN202
    """PyTorch when it is installed and sees a CUDA or ROCm device, else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def probe_gpu(torch, quick: bool, reps: int, progress: Progress) -> ProbeResult:  # noqa: ANN001
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    free, total = torch.cuda.mem_get_info(dev)
    n = min((64 if quick else 1024) * MiB, free // 8) // 4  # float32 elements per array
    a, b, c = (torch.full((n,), v, device=dev, dtype=torch.float32) for v in (1.0, 2.0, 0.5))

    def timed(fn: Callable[[], object], times: int) -> float:
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(times):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / times

    bandwidth = _gpu_bandwidth(torch, a, b, c, reps, progress, timed)
    del a, b, c  # free the arrays before the matmuls
    matmul, skipped = [], []
    m = 2048 if quick else 8192
    for dtype in GPU_DTYPES:
        try:
            fn = _gpu_matmul(torch, dtype, m, dev)
            fn()
        except Exception as exc:  # noqa: BLE001  (a dtype this device or PyTorch build lacks)
            skipped.append(f"{dtype}: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}")
            continue
        times = max(1, int(0.05 / max(timed(fn, 1), 1e-6)))  # about 50 ms per repetition
        seconds = _repeat(lambda fn=fn, times=times: timed(fn, times), reps, 2.0, f"matmul {dtype}", progress)
        matmul.append(_stat("matmul", dtype, f"{m:,} x {m:,} @ {m:,} x {m:,}", 2 * m**3, seconds))
    torch.backends.cuda.matmul.allow_tf32 = False
    backend = "rocm (torch)" if getattr(torch.version, "hip", None) else "cuda (torch)"
    return _result(
        torch.cuda.get_device_name(dev),
        backend,
        props.multi_processor_count,
        total,
        bandwidth,
        matmul,
        f"PyTorch {torch.__version__} ({backend.split()[0]}): STREAM copy/triad/read over {n * 4 / MiB:,.0f} MiB "
        f"float32 arrays ({INNER} launches per timing, CUDA events), square {m:,} matmul per dtype; best of {reps}",
        quick,
        skipped,
    )


INNER = 20  # launches per timed repetition: one kernel on 1 GiB lasts well under a millisecond


def _gpu_bandwidth(torch, a, b, c, reps: int, progress: Progress, timed) -> list[Stat]:  # noqa: ANN001
    n = a.numel()
    size = f"{n * 4 / MiB:,.0f} MiB arrays"
    kernels = (
        ("copy", lambda: a.copy_(b), 2),
        ("triad", lambda: torch.add(b, c, alpha=3.0, out=a), 3),  # one fused kernel: b, c read, a written
        ("read", lambda: b.sum(), 1),
    )
    out = []
    for name, fn, arrays in kernels:
        timed(fn, 2)
        seconds = _repeat(lambda fn=fn: timed(fn, INNER), reps, 4.0, name, progress)
        out.append(_stat(name, "fp32", size, arrays * n * 4, seconds))
    return out


def _gpu_matmul(torch, dtype: str, m: int, dev) -> Callable[[], object]:  # noqa: ANN001
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    if dtype in ("fp32", "tf32", "fp16", "bf16"):
        kind = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(dtype, torch.float32)
        x, y = torch.randn(m, m, device=dev, dtype=kind), torch.randn(m, m, device=dev, dtype=kind)
        return lambda: torch.matmul(x, y)
    if dtype == "int8":
        x = torch.randint(-8, 8, (m, m), device=dev, dtype=torch.int8)
        y = torch.randint(-8, 8, (m, m), device=dev, dtype=torch.int8)
        return lambda: torch._int_mm(x, y)
    # fp8 (e4m3): torch._scaled_mm wants the second operand column-major and per-tensor scales.
    x = torch.randn(m, m, device=dev).to(torch.float8_e4m3fn)
    y = torch.randn(m, m, device=dev).to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=dev)
    return lambda: torch._scaled_mm(x, y, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


# --- comparison with a preset ------------------------------------------------------------------


def _result(device, backend, n_threads, memory, bandwidth, matmul, method, quick, skipped) -> ProbeResult:  # noqa: ANN001
    peaks: dict[str, float] = {}
    for s in matmul:
        peaks[s.dtype] = max(peaks.get(s.dtype, 0.0), s.best / 1e12)
    return ProbeResult(
        device=device,
        backend=backend,
        threads=n_threads,
        memory_bytes=memory,
        date=datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        method=method,
        quick=quick,
        bandwidth=bandwidth,
        matmul=matmul,
        skipped=skipped,
        bandwidth_bytes_per_s=int(max(s.best for s in bandwidth)),
        peak_tflop_per_s=peaks,
    )


def match_preset(device: str, names: list[str]) -> str | None:
    """The built-in preset whose name's words all appear in the device name, the most specific first:
    'NVIDIA A100-SXM4-40GB' -> a100-40gb, 'NVIDIA H100 80GB HBM3' -> h100, 'NVIDIA L40S' -> l40s."""
    import re

    words = set(re.findall(r"[a-z0-9]+", device.lower()))
    fits = [n for n in names if set(re.findall(r"[a-z0-9]+", n)) <= words]
    return max(fits, key=lambda n: (len(re.findall(r"[a-z0-9]+", n)), len(n)), default=None)


def compare(result: ProbeResult, gpu, how: str) -> ProbeResult:  # noqa: ANN001
    """Measured over the preset's sourced peaks: the utilizations --mbu and --mfu stand for."""
    peaks = gpu.peak_dense_tflop_per_s
    return result.model_copy(
        update={
            "preset": gpu.name,
            "preset_match": how,
            "preset_bandwidth_bytes_per_s": gpu.bandwidth_bytes_per_s,
            "preset_peak_tflop_per_s": peaks,
            "mbu": result.bandwidth_bytes_per_s / gpu.bandwidth_bytes_per_s,
            "mfu": {d: v / peaks[d] for d, v in result.peak_tflop_per_s.items() if d in peaks},
        }
    )


def run_probe(device: str, quick: bool, reps: int, progress: Progress) -> ProbeResult:
    if reps < 2:
        raise UsageError(f"--repeat must be at least 2 (a spread needs two runs), got {reps}")
    torch = torch_gpu() if device in ("auto", "gpu") else None
    if device == "gpu" and torch is None:
        raise UsageError(
            "no GPU found: --device gpu needs PyTorch with a CUDA or ROCm device",
            hint="install torch for your GPU, or use --device cpu",
        )
    return probe_gpu(torch, quick, reps, progress) if torch is not None else probe_cpu(quick, reps, progress)


def preset_data(result: ProbeResult, name: str) -> tuple[str, dict]:
    """A user GPU preset (header comment, fields) holding the measured figures and how they were taken."""
    from kvcalc import __version__
    from kvcalc.hardware.gpu import PEAK_DTYPES

    peaks = {d: float(f"{v:.4g}") for d, v in result.peak_tflop_per_s.items() if d in PEAK_DTYPES}
    kernels = ", ".join(f"{s.kernel} {s.best / 1e9:,.1f} GB/s" for s in result.bandwidth)
    data = {
        "full_name": f"{result.device} (measured)",
        "memory_bytes": result.memory_bytes,
        "hbm_bandwidth_bytes_per_s": result.bandwidth_bytes_per_s,
        "peak_dense_tflop_per_s": peaks,
        "sources": [f"measured by kvcalc {__version__} probe on {result.date}: {result.method}"],
        "notes": f"Achieved, not peak: best bandwidth kernel of {kernels}; matmul best per dtype."
        + (" --quick sizes: the arrays may sit in a cache." if result.quick else ""),
    }
    if not result.backend.startswith("cpu"):
        # NOTE: PyTorch's total is what the driver lets a process see, the figure vLLM budgets from.
        data = {
            **dict(list(data.items())[:2]),
            "usable_memory_bytes": result.memory_bytes,
            **dict(list(data.items())[2:]),
        }
    header = f"# {name}: written by `kvcalc probe --save {name}` on {result.date} ({result.backend}).\n"
    return header, data
