"""Weights as the PyTorch engines (vLLM 0.19, SGLang) hold them on one GPU: each tensor's per-rank shape times its stored format.

Pure. Sharding follows vllm/model_executor/layers/linear.py and vocab_parallel_embedding.py:
column-parallel layers (QKV, gate/up, MLA q_b/kv_b, experts' w13) split their output rows over tp,
row-parallel layers (o_proj, down, experts' w2) their input columns; KV heads are replicated when
tp exceeds them; the vocabulary is padded to a multiple of 64 and split; norms, the MoE router and
MLA's q_a/kv_a projections are replicated. Pipeline stages hold only their own layers, the first the
embedding, the last the final norm and LM head.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import NamedTuple

from kvcalc.cost.params import (
    counted_vocab,
    end_norm_params,
    layer_norm_params,
    output_gate_rows,
    per_param_bytes,
    sink_params,
)
from kvcalc.model.formats import rotary_dim
from kvcalc.model.quant import LinearFormat, Quantization, plain
from kvcalc.model.spec import LayerKind, ModelSpec
from kvcalc.results import Result

VOCAB_PADDING = 64  # vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE
MIB = 2**20


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def allocated(size: int) -> int:
    """Bytes PyTorch's caching allocator books for one tensor (c10/cuda/CUDACachingAllocator.cpp).

    Requests round up to 512 B. A tensor of 10 MiB or more gets its own segment rounded up to
    2 MiB (kRoundLarge), and the segment is split only if more than 1 MiB (kSmallSize) would be
    left over; otherwise the whole segment is the tensor's block, and vLLM's weight figure
    (torch.cuda.max_memory_allocated after loading) counts it.
    """
    size = max(512, round_up(size, 512))
    if size < 10 * MIB:
        return size
    segment = round_up(size, 2 * MIB)
    return size if segment - size > MIB else segment


class WeightBytes(Result):
    """One rank's weight bytes by component (the rank's pipeline stage only)."""

    embedding: int
    lm_head: int
    attention: int
    mlp: int  # dense MLPs and shared experts
    experts: int  # routed experts
    router: int
    norms: int
    mixers: int  # SSM / linear-attention mixers, in the attention's format (16-bit unless the checkpoint quantizes it)
    mla_absorbed: int  # bf16 copies of kv_b_proj that MLA decode multiplies with (vLLM: a quantized one's only)
    extra: int  # outside the decoder: a vision tower and projector (spec.extra_params), 16-bit, split by tp
    rotary_cache: int | None  # None: the checkpoint's max_position_embeddings is unknown
    total: int
    per_layer_inputs: int = 0  # Gemma 3n / 4's per-layer table and projections (_per_layer_inputs)


def padded_vocab(vocab: int) -> int:
    return round_up(vocab, VOCAB_PADDING)


def weight_bytes(
    spec: ModelSpec,
    act_dtype: str,
    quant: Quantization | None,
    *,
    tp: int = 1,
    layers: range | None = None,
    absorbs: bool = True,
    copies_16bit_mla: bool = False,
    mxfp4_layout: str | None = None,
    router_bytes: int | None = None,
    rotary_bytes: int | None = None,
    ssm_a_bytes: int | None = None,
) -> WeightBytes:
    """Bytes one tensor-parallel rank of the stage holding `layers` (default: all) keeps. `absorbs`: the engine
    runs MLA absorbed, keeping 16-bit copies of a quantized kv_b_proj (False where it runs MLA as plain heads);
    `copies_16bit_mla`: of a 16-bit one too (SGLang's w_kc / w_vc are contiguous copies whatever kv_b_proj holds).
    `mxfp4_layout`: how the engine's MoE kernels hold mxfp4 experts (MXFP4_LAYOUTS); None: the checkpoint's layout.
    `router_bytes`: bytes per router weight where the engine builds the gate in its own dtype (fp32: 4); None: the
    model's. `rotary_bytes`: the same for the rope's cos/sin cache, `ssm_a_bytes` for a Mamba-1 mixer's A."""
    layers = layers if layers is not None else range(spec.num_layers)
    first, last = layers.start == 0, layers.stop == spec.num_layers
    a = plain(act_dtype)
    linear = quant.linear if quant and quant.linear else a
    attn = quant.attention if quant and quant.attention else linear if quant is None or quant.attention_quantized else a
    expert = quant.experts if quant and quant.experts else linear
    h, heads = spec.hidden_size, spec.num_heads
    hr, ab = math.ceil(heads / tp), a.weight_bits // 8

    def lin(fmt: LinearFormat, out_rows: int, in_cols: int, copies: int = 1) -> int:
        return sum(allocated(t) for t in fmt.tensor_bytes(out_rows, in_cols, copies))

    vocab_rows = math.ceil(padded_vocab(counted_vocab(spec)) / tp)
    embedding = lin(a, vocab_rows, h) if first else 0
    head_fmt = linear if quant and quant.lm_head_quantized else a
    # NOTE: a tied LM head is the embedding tensor itself, unless the two sit on different stages.
    lm_head = lin(head_fmt, vocab_rows, h) if last and (not spec.tie_embeddings or not first) else 0
    lm_head += allocated(vocab_rows * ab) if last and spec.lm_head_bias and not spec.tie_embeddings else 0

    attention = mlp = experts = router = mixers = absorbed = 0
    expanded, routed = spec.expanded_layers(), spec.routes_experts()
    norms = (end_norm_params(spec) if last else 0) + sum(
        layer_norm_params(spec, expanded[i], routed[i]) for i in layers
    )
    # NOTE: a recurrent mixer's projections (GDN's in_proj_qkvz / out_proj, Mamba's in_proj / out_proj) are linear
    # layers that a checkpoint quantizes with the attention (NVIDIA's Qwen3.6 NVFP4: linear_attn in fp8), as the cost
    # layer's shard formats read them; its few other weights (convs, norms, dt_bias) go with them, under 0.1%.
    # Mamba-1's A is built in float32 (`ssm_a_bytes`).
    mixer_per = per_param_bytes(attn) if attn.weight_bits < a.weight_bits else Fraction(ab)
    for i in layers:
        run = expanded[i]
        # a recurrent mixer, alone (a stateless layer) or beside the attention (Falcon-H1)
        own = (run.mixer_params or 0) * mixer_per + run.ssm_a_params * ((ssm_a_bytes or ab) - mixer_per)
        mixers += math.ceil(own / tp)
        if run.kind == LayerKind.MLA:
            nope, rope = spec.qk_nope_head_dim or 0, spec.qk_rope_head_dim
            v = spec.v_head_dim or nope
            if spec.q_lora_rank:
                attention += lin(attn, spec.q_lora_rank, h) + lin(attn, hr * (nope + rope), spec.q_lora_rank)
                norms += spec.q_lora_rank
            else:
                attention += lin(attn, hr * (nope + rope), h)
            attention += lin(attn, spec.kv_lora_rank + rope, h) + lin(attn, hr * (nope + v), spec.kv_lora_rank)
            attention += lin(attn, h, hr * v)
            norms += spec.kv_lora_rank
            if spec.index_heads and spec.index_head_dim and not run.index_shared:
                # DSA's indexer, replicated on every rank (vLLM deepseek_v2.py Indexer: ReplicatedLinear):
                # wq_b in the checkpoint's format; wk and weights_proj fused into one 16-bit wk_weights_proj
                # (an fp8 wk is upcast at load); k_norm's weight and bias.
                ih = spec.index_heads * spec.index_head_dim
                attention += lin(attn, ih, spec.q_lora_rank or h)
                attention += lin(a, spec.index_head_dim + spec.index_heads, h)
                norms += 2 * spec.index_head_dim
            if absorbs and (attn.weight_bits < 16 or copies_16bit_mla):
                # NOTE: MLA (vllm/model_executor/layers/attention/mla_attention.py
                # process_weights_after_loading) dequantizes kv_b_proj into bf16 W_UK / W_UV
                # and keeps them beside the quantized original; a 16-bit one vLLM takes as views. SGLang
                # (deepseek_weight_loader.py post_load_weights, 0.5.23; minicpm3, kimi_linear, bailing alike)
                # makes w_kc / w_vc contiguous copies either way and keeps kv_b_proj for its prompt path.
                absorbed += allocated(hr * (nope + v) * spec.kv_lora_rank * (2 if attn.weight_bits < 16 else ab))
        elif run.kind != LayerKind.STATELESS:
            # NOTE: a k_eq_v layer (Gemma 4) still gets QKVParallelLinear's V slot, loaded with k_proj.
            g, dr, vr = max(1, (run.kv_heads or spec.kv_heads) // tp), spec.run_head_dim(run), spec.run_v_dim(run)
            hr = math.ceil(spec.run_heads(run) / tp)  # a layer's own query heads (Laguna)
            # NOTE: a per-head output gate as wide as the queries (attn_output_gate): qwen3_next.py (Qwen3-Next,
            # Qwen3.5) fuses it into QKVParallelLinear as twice the query heads; afmoe.py keeps its own gate_proj
            gate = output_gate_rows(spec, hr, dr)
            fused = gate if spec.attn_output_gate is True and spec.architecture != "AfmoeForCausalLM" else 0
            attention += lin(attn, (hr + g) * dr + fused + g * vr, h) + lin(attn, h, hr * vr)
            attention += lin(attn, gate - fused, h) if gate - fused else 0
            if run.sparse and spec.index_heads and spec.index_head_dim:
                # a sparse layer's indexer (SGLang minimax_m3.py index_qkv_proj): its query heads split over the
                # ranks, its one key whole on each; the index q / k norms
                ih = math.ceil(spec.index_heads / tp)
                attention += lin(attn, (ih + 1) * spec.index_head_dim, h)
                norms += 2 * spec.index_head_dim
            if sinks := sink_params(spec, run):
                # GptOssAttention.sinks: one logit per local head, in the model's dtype (torch.empty under vLLM's
                # default dtype), a 512 B block of its own
                attention += allocated(math.ceil(sinks / tp) * ab)
            # NOTE: linear.py: a column-parallel bias is split with its rows, a row-parallel one (o_proj) is
            # whole on every rank (added once, after the all-reduce); both in the model's dtype
            if spec.attention_bias:
                attention += allocated(((hr + g) * dr + g * vr) * ab)
            if spec.o_proj_bias:
                attention += allocated(h * ab)
        if run.intermediate_size is not None:
            mlp += _mlp(spec, linear, run.intermediate_size, tp, ab)
        elif routed[i]:
            inter = spec.expert_intermediate_size or spec.intermediate_size
            per, w = math.ceil(inter / tp), spec.expert_width
            # fused MoE: one w13 [E, 2I/tp, w] (gate and up; [E, I/tp, w] for a non-gated activation such as
            # Nemotron 3's relu2: is_act_and_mul=False) and one w2 [E, w, I/tp] tensor per layer
            up = (2 if spec.mlp_gated else 1) * per
            if mxfp4_layout and expert.name == "mxfp4":
                experts += mxfp4_experts(mxfp4_layout, spec.experts, per, w, spec.mlp_gated, spec.mlp_bias, ab)
            else:
                experts += lin(expert, up, w, spec.experts) + lin(expert, w, per, spec.experts)
                if spec.mlp_bias:  # FusedMoE(has_bias=True): w13_bias [E, up] and w2_bias [E, w]
                    experts += allocated(spec.experts * up * ab) + allocated(spec.experts * w * ab)
            router += allocated(spec.experts * h * (router_bytes or ab))
            router += allocated(spec.experts * 4) if spec.router_bias else 0
            if spec.moe_latent_size:
                # LatentMoE's fc1/fc2_latent_proj: ReplicatedLinear, left unquantized by ModelOpt checkpoints
                router += lin(a, w, h) + lin(a, h, w) + (allocated(w * ab) if spec.moe_latent_norm else 0)
            if spec.shared_expert_intermediate_size:
                mlp += _mlp(spec, linear, spec.shared_expert_intermediate_size, tp, ab)
                mlp += allocated(h * ab) if spec.shared_expert_gate else 0  # ReplicatedLinear(hidden, 1)
        else:
            mlp += _mlp(spec, linear, spec.intermediate_size, tp, ab)
    norms *= ab
    per_layer = _per_layer_inputs(spec, a, linear, tp, layers) if spec.per_layer_input else 0
    rotary = None
    ck = spec.checkpoint
    if spec.max_position_embeddings:
        # NOTE: a cos/sin cache of rows x rotary_dim in the model dtype (or `rotary_bytes`) per distinct rope setting
        # (rotary_embedding/base.py registers cos_sin_cache; get_rope shares equal instances). The rows
        # are max_position_embeddings unless the scaling lengthens the table (model/hf/positions.rotary_rows).
        rows = (ck.rotary_rows if ck and ck.rotary_rows else None) or (spec.max_position_embeddings,)
        widths = (ck.rotary_widths if ck and ck.rotary_widths else None) or (rotary_dim(spec),) * len(rows)
        rotary = sum(allocated(r * w * (rotary_bytes or ab)) for r, w in zip(rows, widths))
    # NOTE: vLLM's vision encoders (mllama, SigLIP, Qwen-VL ViTs) use tensor-parallel linear layers
    # and sit on the first pipeline stage; checkpoints leave them unquantized.
    extra = 0
    if first and spec.extra_params:
        extra = math.ceil(spec.extra_params * ab / tp)
    elif first and ck and ck.vision_params:
        split, replicated = ck.vision_params
        extra = (math.ceil(split / tp) + replicated) * ab
    parts = (
        embedding,
        lm_head,
        attention,
        mlp,
        experts,
        router,
        norms,
        mixers,
        absorbed,
        rotary or 0,
        extra,
        per_layer,
    )
    return WeightBytes(
        embedding=embedding,
        lm_head=lm_head,
        attention=attention,
        mlp=mlp,
        experts=experts,
        router=router,
        norms=norms,
        mixers=mixers,
        mla_absorbed=absorbed,
        extra=extra,
        rotary_cache=rotary,
        total=sum(parts),
        per_layer_inputs=per_layer,
    )


def _per_layer_inputs(spec: ModelSpec, a: LinearFormat, linear: LinearFormat, tp: int, layers: range) -> int:
    """Gemma 3n / 4's per-layer embeddings on one rank of the stage holding `layers` (vLLM gemma3n.py, gemma4.py):
    on the first stage the table (VocabParallelEmbedding, its rows padded and split, in the model dtype), the
    projection into its width and Gemma 3n's AltUp projections (ColumnParallelLinear) and the norm; in each layer the
    gate to it and the projection from it (ReplicatedLinear, whole on every rank) and their norm; Gemma 3n's AltUp
    coefficients and router (ReplicatedLinear), router norm and float32 output scale, LAuReL's column- and
    row-parallel pair and norm."""
    p, h, width = spec.per_layer_input, spec.hidden_size, spec.num_layers * spec.per_layer_input
    n, r, ab = spec.altup_inputs, spec.laurel_rank, a.weight_bits // 8

    def lin(fmt: LinearFormat, out_rows: int, in_cols: int) -> int:
        return sum(allocated(t) for t in fmt.tensor_bytes(out_rows, in_cols))

    out = 0
    if layers.start == 0:
        out += lin(a, math.ceil(padded_vocab(spec.per_layer_vocab or spec.vocab) / tp), width)
        out += lin(linear, math.ceil(width / tp), h) + allocated(p * ab)
        out += 2 * max(n - 1, 0) * lin(linear, math.ceil(h / tp), h)
    one = lin(linear, p, h) + lin(linear, h, p) + allocated(h * ab)
    if n:
        one += lin(linear, n, n) + lin(linear, n * n, n) + lin(linear, n, h) + allocated(h * ab) + allocated(h * 4)
    if r:
        one += lin(linear, math.ceil(r / tp), h) + lin(linear, h, math.ceil(r / tp)) + allocated(h * ab)
    return out + len(layers) * one


def _mlp(spec: ModelSpec, fmt: LinearFormat, inter: int, tp: int, bias_bytes: int) -> int:
    if not inter:
        return 0
    per = math.ceil(inter / tp)
    up = (2 if spec.mlp_gated else 1) * per
    out = sum(allocated(t) for t in fmt.tensor_bytes(up, spec.hidden_size) + fmt.tensor_bytes(spec.hidden_size, per))
    if spec.mlp_bias:  # the up projection's bias split with its rows, the down projection's whole
        out += allocated(up * bias_bytes) + allocated(spec.hidden_size * bias_bytes)
    return out


class Mxfp4Layout(NamedTuple):
    """How an engine's MoE kernels hold mxfp4 experts after loading (4-bit values, one e8m0 byte per 32)."""

    inter: int  # the rank's intermediate size is rounded up to a multiple of this
    hidden: int  # and the hidden size to this
    swizzle: tuple[int, int] | None  # triton_kernels' Hopper value layout: (rows, byte columns) padded to these
    scale_copy: str | None  # a second set of scales beside the checkpoint's: "swizzled" (Hopper), "same" (CDNA4)
    bias_bytes: int | None  # the experts' biases after loading: 4 (fp32); None: the model dtype
    per_expert_fp32: int = 0  # fp32 [E] tensors the kernels add (TRT-LLM's gemm1 alpha, beta, clamp limit)
    permute_cache: bool = False  # int64 row permutations cached for each distinct tensor shape (vLLM's FlashInfer)
    # SGLang's Mxfp4MoEMethod.create_weights registers w13 / w2 biases (zeros) on CUDA whether the checkpoint has any
    # or not (0.5.5-0.5.16 always; from 0.5.17 `with_bias or not _is_hip`): Kimi-K3's compressed-tensors experts too.
    always_bias: bool = False


# The default layouts, by engine and GPU (engines/vllm/memory.mxfp4_layout, engines/sglang/release.mxfp4_layout).
# vLLM 0.19: fused_moe/oracle/mxfp4.py picks FlashInfer's TRT-LLM kernels on SM100, triton_kernels (vendored:
# vllm/third_party/triton_kernels) on SM90 and ROCm, Marlin below SM90; mxfp4_round_up_hidden_size_and_
# intermediate_size pads the sizes; Hopper's swizzled values are padded to 64 both ways and the checkpoint's scale
# Parameters stay registered beside the swizzled copies (quantization/mxfp4.py _setup_kernel); CDNA4 keeps a
# CDNA4MXScaleLayout copy. SGLang 0.5.5 (quantization/mxfp4.py, server_args.py's gpt-oss defaults): flashinfer_mxfp4
# on SM100, triton_kernel elsewhere, with sgl-kernel 0.3.16's triton_kernels (rows to 16, byte columns to 32; a
# strided view below SM90), the intermediate size to 32, the scales kept beside the swizzled ones likewise.
MXFP4_LAYOUTS = {
    "vllm-triton": Mxfp4Layout(64, 1, (64, 64), "swizzled", 4),
    "vllm-trtllm": Mxfp4Layout(256, 256, None, None, 4, per_expert_fp32=3, permute_cache=True),
    "vllm-marlin": Mxfp4Layout(128, 256, None, None, None),
    "vllm-rocm": Mxfp4Layout(256, 256, None, None, 4),
    "vllm-rocm-cdna4": Mxfp4Layout(256, 256, None, "same", 4),
    "sglang-triton": Mxfp4Layout(32, 1, (16, 32), "swizzled", 4, always_bias=True),
    "sglang-flashinfer": Mxfp4Layout(256, 256, None, None, 4, per_expert_fp32=3, always_bias=True),
    "sglang-strided": Mxfp4Layout(32, 1, None, None, 4, always_bias=True),
    # SGLang's later releases (sglang/release.mxfp4_layout): triton_kernel pads the intermediate size to 64 from
    # 0.5.10; flashinfer_mxfp4 to 128 from 0.5.17; SM120 ran flashinfer_mxfp4 with 32 to 0.5.9 and from 0.5.17
    # FlashInfer's CUTLASS kernel (scales interleaved in place, biases in the model dtype, 4 fp32 [E] tensors).
    "sglang-triton-64": Mxfp4Layout(64, 1, (16, 32), "swizzled", 4, always_bias=True),
    "sglang-strided-64": Mxfp4Layout(64, 1, None, None, 4, always_bias=True),
    "sglang-flashinfer-128": Mxfp4Layout(128, 256, None, None, 4, per_expert_fp32=3, always_bias=True),
    "sglang-flashinfer-sm120": Mxfp4Layout(32, 256, None, None, 4, per_expert_fp32=3, always_bias=True),
    "sglang-cutlass-sm120": Mxfp4Layout(128, 256, None, None, None, per_expert_fp32=4, always_bias=True),
}


def mxfp4_experts(layout: str, e: int, inter: int, width: int, gated: bool, bias: bool, act_bytes: int) -> int:
    """One MoE layer's mxfp4 experts on one rank in an engine's layout (MXFP4_LAYOUTS): `inter` the rank's
    intermediate size, `width` the experts' hidden width."""
    lay = MXFP4_LAYOUTS[layout]
    k = 2 if gated else 1
    i, h = round_up(inter, lay.inter), round_up(width, lay.hidden)
    scales = (k * i * (h // 32), h * (i // 32))
    values = (k * i * h // 2, h * i // 2)
    if lay.swizzle:  # the transposed [E, K/2 bytes, N] tensors, N padded to rows, K/2 to byte columns
        n, c = lay.swizzle
        values = (round_up(k * i, n) * round_up(h // 2, c), round_up(h, n) * round_up(i // 2, c))
    copies = {
        "swizzled": (round_up(k * i, 256) * round_up(h // 32, 2), round_up(h, 256) * round_up(i // 32, 2)),
        "same": scales,
        None: (),
    }[lay.scale_copy]
    out = sum(allocated(e * t) for t in values + scales + copies) + lay.per_expert_fp32 * allocated(e * 4)
    if lay.permute_cache:
        out += (3 if bias else 2) * (allocated(k * i * 8) + allocated(h * 8))
    b, bias = lay.bias_bytes or act_bytes, bias or lay.always_bias
    return out + (allocated(e * k * i * b) + allocated(e * h * b) if bias else 0)
