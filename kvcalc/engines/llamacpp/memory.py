"""llama-server's memory for one model and settings: KV, model and compute buffers per device, and the fit.

The pure entry point the planner calls like every engine's: `llamacpp_memory(...)` returns a
LlamaCppResult with kv_capacity_tokens, fits and llama.cpp's refusal in its own words.
"""

from __future__ import annotations

from kvcalc.engines.llamacpp.buffers import (
    COMPUTE_MARGIN,
    TensorRow,
    compute_buffer,
    device_alloc,
    layer_devices,
    model_buffers,
)
from kvcalc.engines.llamacpp.eras import Era
from kvcalc.engines.llamacpp.kv import KvPart, kv_parts
from kvcalc.model.spec import ModelSpec
from kvcalc.results import Result


class Device(Result):
    name: str  # "GPU0", "CPU"
    layers: int  # repeating layers held (the output layer not counted)
    model_bytes: int
    kv_bytes: int
    compute_bytes: int
    total_bytes: int
    capacity_bytes: int | None = None


class LlamaCppResult(Result):
    engine: str = "llama.cpp"
    build: str  # the era whose rules apply (--engine-version)
    build_note: str
    n_ctx: int  # -c as given
    parallel: int
    kv_unified: bool
    flash_attn: bool
    ubatch: int
    type_k: str
    type_v: str
    swa_full: bool
    ngl: int
    cpu_moe: int = 0  # --n-cpu-moe: the first layers whose routed experts stay in system memory (all: --cpu-moe)
    gpu_layers: int  # "offloaded N/M layers": repeating layers on GPUs + the output layer
    total_layers: int  # n_layer + 1
    kv_cells: int  # cells per stream of the full-attention cache (the log's "N cells")
    kv_streams: int
    kv_bytes: int
    kv_parts: list[KvPart]
    model_buffer_bytes: int  # on the GPUs
    cpu_mapped_bytes: int  # token_embd and the layers left on the CPU (mmap view of the file)
    compute_buffer_bytes: int  # the largest GPU's (the logits' GPU); an estimate (see compute_margin_bytes)
    compute_margin_bytes: int
    weights_exact: bool  # from the GGUF's tensor table (else from the spec's parameters)
    devices: list[Device]
    kv_capacity_tokens: int  # tokens the full-attention cache holds across streams
    fits: bool | None = None  # None without a GPU
    refusal: str | None = None  # llama.cpp's own words when it would not start
    warnings: list[str] = []


def llamacpp_memory(
    spec: ModelSpec,
    tensors: list[TensorRow],
    n_ctx: int,
    era: Era,
    *,
    weights_exact: bool,
    parallel: int = 1,
    kv_unified: bool = False,
    ubatch: int = 512,
    flash_attn: bool = True,
    type_k: str = "f16",
    type_v: str = "f16",
    swa_full: bool = False,
    ngl: int = 999,
    cpu_moe: int = 0,
    n_gpus: int = 1,
    split: list[float] | None = None,
    backend: str = "cuda",
    capacity_bytes: int | None = None,
    unified_memory: bool = False,
) -> LlamaCppResult:
    """Buffers per device for -c n_ctx; capacity_bytes: each GPU's (or the Mac's working set)."""
    # -ngl places every block, the GGUF's trailing multi-token-prediction blocks too (llama_model's dev_layer
    # spans n_layer_all); the cache holds the trunk's layers alone
    n_layer = spec.num_layers + (spec.checkpoint.mtp_blocks if spec.checkpoint else 0)
    parts, refusal = kv_parts(
        spec,
        n_ctx,
        era,
        parallel=parallel,
        unified=kv_unified,
        ubatch=ubatch,
        flash_attn=flash_attn,
        type_k=type_k,
        type_v=type_v,
        swa_full=swa_full,
    )
    devs = layer_devices(n_layer, ngl if n_gpus else 0, n_gpus, split)
    warnings = (
        [] if spec.is_moe or not cpu_moe else [f"--cpu-moe / --n-cpu-moe: {spec.name} routes no experts, nothing moves"]
    )
    cpu_moe = min(cpu_moe, n_layer) if spec.is_moe else 0
    gpu_model, cpu_mapped, _ = model_buffers(tensors, n_layer, devs, backend, cpu_moe)
    base = next((p for p in parts if p.cache == "non-SWA"), None) or next((p for p in parts if p.cache == "SWA"), None)
    cells, streams = (base.cells, base.streams) if base else (0, 1)
    swa = next((p for p in parts if p.cache == "SWA"), None) if base and base.cache == "non-SWA" else None
    seen = streams if kv_unified or streams == 1 else 1  # the cells one sequence's attention reads
    n_kv, n_swa = cells * seen, swa.cells * seen if swa else 0
    # the GPUs holding layers (-ngl 0: the first GPU, where offloaded ops still run)
    holding = [g for g in range(n_gpus) if g in devs] or ([0] if n_gpus else [])
    # the output layer's GPU, or the first GPU where the output is left to the CPU (op offload of its matmul)
    out_gpu = devs[n_layer] if devs[n_layer] is not None else (holding[0] if holding else None)
    copied = 0
    if devs[n_layer] is None and holding and backend == "cuda":  # Metal offloads no op: one memory
        # NOTE: the output matmul of a -ngl that leaves the output layer on the CPU is offloaded (a batch of 32 or
        # more) to the first GPU, which copies the output weight into its compute buffer beside the logits: an Ollama
        # log of QwQ-32B Q4_K_M at 29/65 layers reads 916.08 MiB = 307.00 of logits + 609.08 of Q6_K output (5,120 x
        # 152,064); llama.cpp#16188 (Vulkan, gpt-oss-20b, -ngl 24/25, -fa off) 985.20 = 398.38 of logits + 586.82 of
        # Q8_0 output, its larger moment than the 548 MiB of scores: the copy lives beside the logits alone. Ollama's
        # own estimate (fs/ggml GraphSize, partialOffload) adds the same embedding x vocab x 105/128.
        out_name = "output.weight" if any(t.name == "output.weight" for t in tensors) else "token_embd.weight"
        copied = sum(device_alloc(t, backend) for t in tensors if t.name == out_name)
    compute_of = {
        g: compute_buffer(spec, n_kv, ubatch, n_ctx, flash_attn, n_swa, logits=g == out_gpu,
                          output_copy=copied if g == out_gpu else 0)
        for g in holding
    }  # fmt: skip
    compute = max(compute_of.values(), default=0)
    kv_dev: dict[int | None, int] = {}
    for p in parts:
        if not p.layers:
            continue  # DeepSeek-V4's full half holds no layer (engines/llamacpp/kv.dsv4_parts)
        per_layer = p.bytes // p.layers
        for il in p.layer_ids:
            kv_dev[devs[il]] = kv_dev.get(devs[il], 0) + per_layer
    devices = []
    for g in range(n_gpus):
        held = sum(1 for d in devs[:n_layer] if d == g)
        if held == 0 and devs[n_layer] != g:
            continue
        total = gpu_model.get(g, 0) + kv_dev.get(g, 0) + compute_of[g] + COMPUTE_MARGIN
        devices.append(
            Device(
                name=f"GPU{g}",
                layers=held,
                model_bytes=gpu_model.get(g, 0),
                kv_bytes=kv_dev.get(g, 0),
                compute_bytes=compute_of[g],
                total_bytes=total,
                capacity_bytes=capacity_bytes,
            )
        )
    cpu_layers = sum(1 for d in devs[:n_layer] if d is None)
    devices.append(
        Device(
            name="CPU",
            layers=cpu_layers,
            model_bytes=cpu_mapped,
            kv_bytes=kv_dev.get(None, 0),
            compute_bytes=0,
            total_bytes=cpu_mapped + kv_dev.get(None, 0),
        )
    )
    fits = None
    if capacity_bytes is not None:
        if unified_memory:
            # NOTE: one memory: the Mac's GPU working set holds the mapped file and every buffer.
            need = sum(d.total_bytes for d in devices)
            fits = need <= capacity_bytes
        else:
            fits = all(d.total_bytes <= capacity_bytes for d in devices if d.name != "CPU")
        fits = fits and refusal is None
    return LlamaCppResult(
        build=era.key,
        build_note=era.note,
        n_ctx=n_ctx,
        parallel=parallel,
        kv_unified=kv_unified,
        flash_attn=flash_attn,
        ubatch=ubatch,
        type_k=type_k,
        type_v=type_v,
        swa_full=swa_full,
        ngl=ngl,
        cpu_moe=cpu_moe,
        gpu_layers=sum(1 for d in devs if d is not None),
        total_layers=n_layer + 1,
        kv_cells=cells,
        kv_streams=streams,
        kv_bytes=sum(p.bytes for p in parts),
        kv_parts=parts,
        model_buffer_bytes=sum(gpu_model.values()),
        cpu_mapped_bytes=cpu_mapped,
        compute_buffer_bytes=compute if n_gpus else 0,
        compute_margin_bytes=COMPUTE_MARGIN,
        weights_exact=weights_exact,
        devices=devices,
        kv_capacity_tokens=cells * streams,
        fits=fits,
        refusal=refusal,
        warnings=warnings,
    )


def rows_of(tensors: list) -> list[TensorRow]:
    """TensorRows of a GGUF tensor table (model/gguf/reader.Tensor)."""
    return [TensorRow(t.name, t.shape[0], t.type, t.nbytes) for t in tensors]
