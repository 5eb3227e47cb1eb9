"""The tensor mix of a llama.cpp quant as `llama-quantize` makes it: which ggml type each weight matrix of a
model gets under an ftype (Q4_K_M, Q4_0, ...), and from that the exact bytes per parameter of each group
the cost layer prices (the ends, attention, dense MLPs, routed experts). So `--dtype q4_k_m` costs what a
Q4_K_M file holds (about 4.9 bits per weight on Llama 3 8B: attn_v and ffn_down in half the layers and the
output in Q6_K), not the 4 bits its name suggests.

Rules read from llama.cpp's src/llama-quant.cpp (llama_tensor_get_type_impl and tensor_type_fallback, the
copy vendored by llama-cpp-python 0.3.36): a matrix whose row is not a whole number of the type's blocks
falls back (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0); norms, routers and biases stay f32 and are not
counted (under 0.2% of a model, as for the other formats). Checked against files: Llama-3-8B Q4_K_M
(193 q4_K + 33 q6_K tensors, 4.58 GiB), Llama-3-70B, Llama-2-7B Q4_0, Qwen3-30B-A3B and Gemma-3-27B Q4_K_M
within 0.5% of the published sizes. Files quantized by older builds can differ (Mixtral GGUFs of Dec 2023
stored each expert as its own tensor and counted ffn_down per tensor); a file's own header is exact.
"""

from __future__ import annotations

from fractions import Fraction
from typing import NamedTuple

from kvcalc.model.gguf.types import BY_NAME
from kvcalc.model.spec import LayerKind, ModelSpec

# ftype -> the default type of its matrices (llama_model_quantize_impl's switch on ftype)
FTYPES: dict[str, str] = {
    "q4_0": "q4_0",
    "q8_0": "q8_0",
    "q4_k_m": "q4_K",
    "q5_k_m": "q5_K",
    "q6_k": "q6_K",
    # MXFP4_MOE: routed experts (ne[2] > 1) MXFP4, every other matrix Q8_0, the output and token_embd too; what
    # ggml-org's gpt-oss GGUFs hold ("file type = MXFP4 MoE")
    "mxfp4_moe": "q8_0",
}
_FALLBACK = {"q4_K": "q5_0", "q5_K": "q5_1", "q6_K": "q8_0"}


def is_ftype(dtype: str | None) -> bool:
    return dtype is not None and dtype.lower() in FTYPES


def per_element(ggml_type: str) -> Fraction:
    """Bytes per weight of a ggml type: its block's bytes over its elements (Q4_K: 144 / 256)."""
    _, block, size = BY_NAME[ggml_type]
    return Fraction(size, block)


def _use_more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _fit(t: str, ne0: int) -> str:
    """tensor_type_fallback: a row that is not whole blocks of `t` takes a 32-block type."""
    _, block, _ = BY_NAME[t]
    return _FALLBACK.get(t, t) if ne0 % block else t


class Role(NamedTuple):
    name: str  # output, attn_v, ffn_down, other
    layer: int  # the counter llama.cpp uses for the layer rules (i_attention_wv / i_ffn_down)
    of: int  # how many of that tensor the model has (n_attention_wv / n_ffn_down)
    expert: bool = False  # a routed expert's stacked matrix (ffn_*_exps, ne[2] > 1)


def tensor_type(spec: ModelSpec, ftype: str, role: Role, ne0: int) -> str:
    """The ggml type `llama-quantize --ftype` gives one matrix (llama_tensor_get_type_impl's branches
    for the ftypes of FTYPES)."""
    ftype = ftype.lower()
    base = FTYPES[ftype]
    if ftype == "mxfp4_moe":  # llama-quant.cpp: "MoE tensors -> MXFP4, other tensors -> Q8_0", the output Q8_0
        return "mxfp4" if role.expert and not role.name == "output" else "q8_0"
    n_expert = spec.experts
    t = base
    if role.name == "output":
        t = "q8_0" if ne0 % BY_NAME[base][1] else (base if base == "q8_0" else "q6_K")
    elif role.name == "attn_v":
        if ftype in ("q4_k_m", "q5_k_m") and _use_more_bits(role.layer, role.of):
            t = "q6_K"
        # NOTE: llama.cpp's LLM_TYPE_70B (80 layers with grouped KV heads) takes Q5_K for a Q4_K attn_v.
        if spec.num_layers == 80 and spec.kv_heads < spec.num_heads and t == "q4_K":
            t = "q5_K"
        if n_expert == 8:
            t = "q8_0"
    elif role.name == "attn_k" and n_expert == 8:
        t = "q8_0"
    elif role.name == "ffn_down":
        if ftype in ("q4_k_m", "q5_k_m") and _use_more_bits(role.layer, role.of):
            t = "q6_K"
    elif role.name == "attn_output" and n_expert == 8 and ftype == "q4_k_m":
        t = "q5_K"
    return _fit(t, ne0)


class MixShard(NamedTuple):
    """Bytes per parameter of each cost/params.Shard group under an ftype."""

    ends: Fraction  # the output matrix (a tied embedding takes the output's type)
    mixers: Fraction  # attention projections
    dense: Fraction  # dense MLPs and shared experts
    experts: Fraction  # routed experts


def _mlp_rate(spec: ModelSpec, ftype: str, inter: int, layers: list[int], n: int, expert: bool = False) -> Fraction:
    """Mean bytes per parameter of gate/up/down over `layers` (ffn_down counted as llama.cpp counts it)."""
    if not layers or not inter:
        return per_element(FTYPES[ftype.lower()])
    up = (2 if spec.mlp_gated else 1) * spec.hidden_size * inter
    down = spec.hidden_size * inter
    up_rate = per_element(tensor_type(spec, ftype, Role("ffn_up", 0, n, expert), spec.hidden_size))
    total = Fraction(0)
    for i in layers:
        total += up * up_rate + down * per_element(tensor_type(spec, ftype, Role("ffn_down", i, n, expert), inter))
    return total / (len(layers) * (up + down))


def mix_shard(spec: ModelSpec, ftype: str) -> MixShard:
    """Exact bytes per parameter of the ends, attention, dense MLPs and experts of `spec` as a GGUF of
    `ftype` stores them, from the per-tensor rules applied to every layer of the model."""
    h, d, hidden = spec.num_heads, spec.head_dim_effective, spec.hidden_size
    runs = spec.expanded_layers()
    attn = [i for i, r in enumerate(runs) if r.kind not in (LayerKind.STATELESS,)]
    n_v = len(attn)

    def rate(role: Role, ne0: int) -> Fraction:
        return per_element(tensor_type(spec, ftype, role, ne0))

    attn_bytes = attn_params = Fraction(0)
    for k, i in enumerate(attn):
        run = runs[i]
        if run.kind == LayerKind.MLA:
            # NOTE: attn_kv_b is attn_v-like for the rules; the other MLA projections take the base type.
            nope, rope = spec.qk_nope_head_dim or 0, spec.rope_dim
            kv_b = spec.latent_rank * h * (nope + (spec.v_head_dim or nope))
            rest = (
                hidden * h * (nope + rope) + hidden * (spec.latent_rank + rope) + h * (spec.v_head_dim or nope) * hidden
            )
            attn_bytes += kv_b * rate(Role("attn_v", k, n_v), spec.latent_rank) + rest * rate(
                Role("attn_q", k, n_v), hidden
            )
            attn_params += kv_b + rest
            continue
        g = 0 if run.kv_shared else run.kv_heads or spec.kv_heads
        q = hidden * h * d * (2 if spec.attn_output_gate is True else 1)
        kv = hidden * g * d
        o = h * d * hidden
        attn_bytes += q * rate(Role("attn_q", k, n_v), hidden) + kv * rate(Role("attn_k", k, n_v), hidden)
        attn_bytes += kv * rate(Role("attn_v", k, n_v), hidden) + o * rate(Role("attn_output", k, n_v), h * d)
        attn_params += q + 2 * kv + o
    base = per_element(FTYPES[ftype.lower()])
    mixers = attn_bytes / attn_params if attn_params else base
    n = spec.num_layers
    # NOTE: which layers are dense and which MoE, as cost/params.param_counts walks them.
    moe = [i for i, routed in enumerate(spec.routes_experts()) if routed]
    dense_layers = [i for i, routed in enumerate(spec.routes_experts()) if not routed]
    if moe and spec.shared_expert_intermediate_size and not dense_layers:
        dense = _mlp_rate(spec, ftype, spec.shared_expert_intermediate_size, moe, n)
    else:
        dense = _mlp_rate(spec, ftype, spec.intermediate_size, dense_layers, n)
    inter = spec.expert_intermediate_size or spec.intermediate_size
    experts = _mlp_rate(spec, ftype, inter, moe, n, expert=True) if moe else base
    ends = per_element(tensor_type(spec, ftype, Role("output", 0, 1), hidden))
    return MixShard(ends, mixers, dense, experts)


def tensor_table(spec: ModelSpec, ftype: str) -> list[tuple[str, int, str, int]]:
    """(name, ne0, ggml type, bytes) of each weight matrix a `llama-quantize` of `spec` to `ftype` (or "f16",
    the converter's unquantized file) writes,
    for a GGUF not at hand (a quant's speed before any download, the calibration points' files). Standard
    attention and (gated) MLP or MoE layers; norms and routers (f32, tiny) are left out."""
    from kvcalc.errors import SpecError

    ftype = ftype.lower()
    runs = spec.expanded_layers()
    if any(r.kind in (LayerKind.MLA, LayerKind.STATELESS, LayerKind.CROSS) for r in runs) or spec.vocab_size is None:
        raise SpecError(f"no llama-quantize tensor table for {spec.name}: only standard attention layers are laid out")
    h, d, hidden = spec.num_heads, spec.head_dim_effective, spec.hidden_size
    n = spec.num_layers

    def t(name: str, ne0: int, rows: int, role: Role) -> tuple[str, int, str, int]:
        typ = "f16" if ftype == "f16" else tensor_type(spec, ftype, role, ne0)  # F16: nothing is requantized
        _, block, size = BY_NAME[typ]
        return (name, ne0, typ, rows * ne0 // block * size)

    out = []
    embd_role = Role("output", 0, 1) if spec.tie_embeddings else Role("token_embd", 0, 1)
    out.append(t("token_embd.weight", hidden, spec.vocab_size, embd_role))
    if not spec.tie_embeddings:
        out.append(t("output.weight", hidden, spec.vocab_size, Role("output", 0, 1)))
    routed = spec.routes_experts()
    for il, run in enumerate(runs):
        g = run.kv_heads or spec.kv_heads
        b = f"blk.{il}."
        out.append(
            t(b + "attn_q.weight", hidden, h * d * (2 if spec.attn_output_gate is True else 1), Role("attn_q", il, n))
        )
        if not run.kv_shared:
            out.append(t(b + "attn_k.weight", hidden, g * d, Role("attn_k", il, n)))
            out.append(t(b + "attn_v.weight", hidden, g * d, Role("attn_v", il, n)))
        out.append(t(b + "attn_output.weight", h * d, hidden, Role("attn_output", il, n)))
        moe = routed[il]
        inter = (
            (spec.expert_intermediate_size or spec.intermediate_size)
            if moe
            else (run.intermediate_size or spec.intermediate_size)
        )
        copies, suffix = (spec.experts, "_exps") if moe else (1, "")
        if spec.mlp_gated:
            out.append(t(b + f"ffn_gate{suffix}.weight", hidden, inter * copies, Role("ffn_gate", il, n, moe)))
        out.append(t(b + f"ffn_up{suffix}.weight", hidden, inter * copies, Role("ffn_up", il, n, moe)))
        out.append(t(b + f"ffn_down{suffix}.weight", inter, hidden * copies, Role("ffn_down", il, n, moe)))
        if moe and spec.shared_expert_intermediate_size:
            s = spec.shared_expert_intermediate_size
            for part in ("gate", "up") if spec.mlp_gated else ("up",):
                out.append(t(b + f"ffn_{part}_shexp.weight", hidden, s, Role(f"ffn_{part}", il, n)))
            out.append(t(b + "ffn_down_shexp.weight", s, hidden, Role("ffn_down", il, n)))
    return out
