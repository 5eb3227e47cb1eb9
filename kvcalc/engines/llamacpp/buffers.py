"""llama.cpp's model buffers per device (from a tensor table) and its compute buffer (an estimate).

Placement (src/llama-model.cpp load_tensors, src/llama-model-loader.cpp create_tensor):
`i_gpu_start = max(n_layer - ngl, 0)`, `act_gpu_layers = min(ngl, n_layer + 1)`: the last ngl
layers go to the GPUs, split by cumulative --tensor-split fractions (upper_bound of
(il - i_gpu_start) / act_gpu_layers), the output layer counts as the (n_layer + 1)-th and goes
only when ngl > n_layer, and token_embd (the input layer) always stays on the CPU (CPU_Mapped with
mmap). A tied output duplicates token_embd onto the output layer's device. CUDA pads each
quantized tensor by a partial row up to MATRIX_ROW_PADDING 512 elements and aligns to 128 bytes
(ggml-cuda.cu ggml_backend_cuda_buffer_type_get_alloc_size / get_alignment).
"""

from __future__ import annotations

import bisect
import re
from fractions import Fraction
from typing import NamedTuple

from kvcalc.model.gguf.types import BY_NAME, is_quantized
from kvcalc.model.spec import ModelSpec

MATRIX_ROW_PADDING = 512
CUDA_ALIGNMENT = 128
CPU_ALIGNMENT = 32
_BLK = re.compile(r"^blk\.(\d+)\.")
# llama-arch.cpp LLM_TENSOR_INFOS: the output layer's tensors (on the output device) and the input layer's (on the
# CPU); Gemma 3n's per-layer token embeddings are input, its AltUp projections output
_OUTPUT = ("output.", "output_norm.", "cls.", "cls_out.", "cls_norm.", "altup_proj.", "altup_unembd_proj.")
_INPUT = ("token_embd.", "token_types", "position_embd", "per_layer_token_embd.")
# common/common.h LLM_FFN_EXPS_REGEX: the routed experts' tensors (weights and biases, matched anywhere in the name)
# that --cpu-moe keeps in system memory (a tensor buffer override to the CPU buffer type), and --n-cpu-moe N those
# of blk.0 ... blk.N-1
_EXPS = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps")
CPU_MOE_ALL = 1 << 30  # --cpu-moe: every layer's experts


def expert_on_cpu(name: str, cpu_moe: int) -> bool:
    """Whether --n-cpu-moe `cpu_moe` (CPU_MOE_ALL: --cpu-moe) keeps tensor `name` in system memory wherever its
    layer is: a routed expert tensor of one of the first cpu_moe layers."""
    if cpu_moe <= 0 or not _EXPS.search(name):
        return False
    m = _BLK.match(name)
    return m is not None and int(m.group(1)) < cpu_moe


class TensorRow(NamedTuple):
    """What placement needs of a tensor: name, row length (ne0), type, bytes."""

    name: str
    ne0: int
    type: str
    nbytes: int


def cuda_alloc(t: TensorRow) -> int:
    size = t.nbytes
    if is_quantized(t.type) and t.ne0 % MATRIX_ROW_PADDING:
        _, block, bsize = BY_NAME[t.type]
        size += (MATRIX_ROW_PADDING - t.ne0 % MATRIX_ROW_PADDING) // block * bsize
    return -(-size // CUDA_ALIGNMENT) * CUDA_ALIGNMENT


def layer_devices(n_layer: int, ngl: int, n_gpus: int, split: list[float] | None = None) -> list[int | None]:
    """Device of each layer 0..n_layer-1 and of the output layer (index n_layer): a GPU index or None (CPU)."""
    if n_gpus == 0 or ngl <= 0:
        return [None] * (n_layer + 1)
    weights = [Fraction(x).limit_denominator(10**6) for x in (split or [1] * n_gpus)]
    total = sum(weights)
    cum, acc = [], Fraction(0)
    for w in weights:
        acc += w
        cum.append(acc / total)
    start = max(n_layer - ngl, 0)
    act = min(ngl, n_layer + 1)

    def dev(il: int) -> int:
        return min(bisect.bisect_right(cum, Fraction(il - start, act)), n_gpus - 1)

    out: list[int | None] = [dev(il) if il >= start else None for il in range(n_layer)]
    out.append(dev(n_layer) if ngl > n_layer else None)
    return out


def is_input(name: str) -> bool:
    """An input layer's tensor: looked up a row per token (get_rows), kept on the CPU."""
    return name.startswith(_INPUT)


def tensor_device(name: str, n_layer: int, devices: list[int | None], cpu_moe: int = 0) -> int | None:
    """The device whose buffer holds tensor `name` (None: the CPU): its layer's device (`devices`, as layer_devices
    gives them), the output layer's for the output tensors, the CPU for the input layer's and for the experts
    --n-cpu-moe `cpu_moe` keeps in system memory, layer 0's for the rest (rope_freqs and kin, created with it). A
    tied output's duplicate of token_embd is the caller's (model_buffers stores it, llamacpp_speed reads it)."""
    m = _BLK.match(name)
    if m:
        il = int(m.group(1))
        return devices[il] if il < n_layer and not expert_on_cpu(name, cpu_moe) else None
    if name.startswith(_OUTPUT):
        return devices[n_layer]
    if is_input(name):
        return None
    return devices[0]


def model_buffers(
    tensors: list[TensorRow], n_layer: int, devices: list[int | None], backend: str = "cuda", cpu_moe: int = 0
) -> tuple[dict[int, int], int, int]:
    """(bytes per GPU, CPU_Mapped bytes, CPU bytes of other tensors). backend: cuda (also HIP) or metal; cpu_moe:
    --n-cpu-moe (the experts of its first layers stay mapped from the file). CPU_Mapped is the tensors' bytes:
    llama.cpp's line prints the span of the file it maps, which also covers the GPU's tensors lying between."""
    gpu: dict[int, int] = {}
    cpu_mapped = 0
    names = {t.name for t in tensors}
    for t in tensors:
        dev = tensor_device(t.name, n_layer, devices, cpu_moe)
        tied = t.name == "token_embd.weight" and "output.weight" not in names
        if tied and devices[n_layer] is not None and backend == "cuda":
            # NOTE: tied output: create_tensor(TOKEN_EMBD, TENSOR_DUPLICATED) is loaded as the output tensor,
            # a copy in GPU memory; Metal maps the file itself, so the duplicate is the same mapped bytes
            gpu[devices[n_layer]] = gpu.get(devices[n_layer], 0) + device_alloc(t, backend)
        if dev is None:
            cpu_mapped += t.nbytes
        else:
            gpu[dev] = gpu.get(dev, 0) + device_alloc(t, backend)
    return gpu, cpu_mapped, 0


def device_alloc(t: TensorRow, backend: str) -> int:
    if backend == "cuda":
        return cuda_alloc(t)
    return -(-t.nbytes // CPU_ALIGNMENT) * CPU_ALIGNMENT


def spec_tensors(spec: ModelSpec, wtype: str = "f16", experts_type: str | None = None) -> list[TensorRow]:
    """A tensor table for a spec without a GGUF: per layer one row of its parameters and one of its routed experts,
    in `experts_type` where given (an estimate)."""
    from kvcalc.cost.params import param_counts

    c = param_counts(spec)
    # the routed experts apart (as one stacked tensor per MoE layer, so decode reads experts_per_token of them and
    # --n-cpu-moe can place them); the rest of the layers' parameters spread evenly
    routed = spec.routes_experts() if c.moe_layers else [False] * spec.num_layers
    experts = c.experts // c.moe_layers if c.moe_layers else 0
    rest = c.total - c.embedding - c.lm_head - c.extra - c.per_layer_table - experts * sum(routed)
    per_layer = rest // spec.num_layers

    def row(name: str, n: int, typ: str = wtype) -> TensorRow:
        _, block, bsize = BY_NAME[typ]
        return TensorRow(name, spec.hidden_size, typ, -(-n // block) * bsize)

    rows = [row("token_embd.weight", c.embedding)]
    if c.per_layer_table:  # Gemma 3n / 4's per-layer table: an input-layer tensor, with token_embd
        rows.append(row("per_layer_token_embd.weight", c.per_layer_table))
    for il in range(spec.num_layers):
        rows.append(row(f"blk.{il}.weights", per_layer))
        if routed[il]:
            rows.append(row(f"blk.{il}.ffn_gate_up_exps.weight", experts, experts_type or wtype))
    if c.lm_head:
        rows.append(row("output.weight", c.lm_head))
    return rows


# NOTE: the compute buffer has no formula in llama.cpp: gallocr's peak of live tensors over the
# reserved pp graph (src/llama-context.cpp graph_reserve). Three moments compete, in f32 columns of
# n_ubatch x 4 B: the output, the logits beside the final norm (n_vocab + n_embd); a layer's FFN, gate, up
# and their product beside four n_embd-wide tensors (3 n_ff + 4 n_embd); with FA off, the K*Q scores
# n_kv x n_head beside q, k-side and residual tensors (2 n_embd + 2 n_head x head_dim). The attention
# masks stay live throughout: n_kv x n_ubatch per cache (the sliding-window one too), f32, or their f16
# copies where FA is on. Checked against llama.cpp's own reservation (llama-fit-params --fit-print, a
# 2026-10 build, on synthetic GGUFs whose widths are varied one at a time) and against the public logs of
# ../shared/reference/llamacpp_rules.md 2.3, equal to the MiB on eight: Mistral-7B FA off 164 at 2k and 2,144
# at 32k, Qwen2.5-32B 2,664 at 32k, Qwen3-30B-A3B 1,958.63 at 30,016, R1-Distill-Qwen-32B 307, Qwen2.5-3B
# 300.75, Pythia-1.4B 102.25 (n_ubatch 512) and 25.56 (128); Pythia-2.8B reads 152 against 162 (GPT-NeoX's
# parallel residual). Each GPU's buffer is the peak of its own part of the graph (ggml_backend_sched's splits): the
# logits moment only on the GPU that runs the output layer, its own or, left on the CPU, the first GPU's by op
# offload (llama.cpp#13545, 2 x MI50: 300.75 MiB of logits on the second GPU, 120 on the first). The FFN moment
# is llama.cpp's own figure only where n_ff is at least about 3 n_embd
# (it reads 5 columns, not 7, at n_ff = n_embd, where gallocr reuses the freed n_embd blocks). fit adds
# COMPUTE_MARGIN to its total for what this leaves out (MoE routing, recurrent scratch, backend pieces).
COMPUTE_MARGIN = 64 << 20


def compute_buffer(
    spec: ModelSpec,
    n_kv: int,
    ubatch: int,
    n_ctx: int,
    flash_attn: bool,
    n_kv_swa: int = 0,
    logits: bool = True,
    output_copy: int = 0,
) -> int:
    """One device's compute buffer; `logits`: whether its part of the graph has the output layer's moment, beside
    `output_copy` bytes of the output weight where that matmul is offloaded from the CPU."""
    n_tokens = min(n_ctx, ubatch)
    column = n_tokens * 4
    h = spec.hidden_size
    ff = spec.intermediate_size
    if spec.is_moe:
        ff = max(ff, (spec.expert_intermediate_size or ff) * spec.experts_per_token)
    masks = (n_kv + n_kv_swa) * n_tokens * (2 if flash_attn else 4)
    out = ((spec.vocab_size or 0) + h) * column + output_copy if logits else 0
    ffn = (3 * ff + 4 * h) * column + masks
    attn = masks
    if not flash_attn:
        attn += (n_kv * spec.num_heads + 2 * h + 2 * spec.num_heads * spec.head_dim_effective) * column
    if spec.is_sparse:  # the fused lightning indexer's scores (f32) over the cache, and their mask (f16)
        attn += n_kv * n_tokens * (4 + 2)
    return max(out, ffn, attn)
