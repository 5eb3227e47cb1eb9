"""Hybrid models: Mamba-1 / Mamba-2, Gated DeltaNet and short-conv layers (constant state) beside attention.

State shapes follow vLLM's MambaStateShapeCalculator (model_executor/layers/mamba/mamba_utils.py): a conv
window of kernel - 1 steps over the conv channels, plus the SSM / linear-attention state. Their dtypes
follow MambaStateDtypeCalculator: the conv state in the model's activation dtype, the SSM state in
mamba_ssm_cache_dtype as vLLM 0.19's per-model hooks resolve it (hf_reader._state_dtypes). The weight dtype
never enters (a --dtype int4 what-if does not shrink the state).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from kvcalc.model.hf.fields import Config
from kvcalc.model.spec import LayerKind, LayerRun


class StateDtypes(NamedTuple):
    conv: float  # bytes per element of conv windows
    ssm: float  # bytes per element of SSM / linear-attention state


class Mixer(NamedTuple):
    """One recurrent mixer: its state per sequence (bytes in the dtypes vLLM gives it, and elements, which
    an engine that picks its own dtype sizes from: llama.cpp keeps f32) and its parameters."""

    state_bytes: int
    state_elements: int
    params: int
    ssm_a: int = 0  # of params, Mamba-1's A (d_inner x d_state): LayerRun.ssm_a_params
    recurrent: int = 0  # of state_elements, the SSM / linear-attention state's: LayerRun.state_recurrent_elements

    @classmethod
    def of(cls, ssm: int, conv: int, params: int, el: StateDtypes) -> "Mixer":
        """From the SSM / linear-attention state's and the conv window's elements."""
        return cls(math.ceil(ssm * el.ssm) + math.ceil(conv * el.conv), ssm + conv, params, recurrent=ssm)

    def run(self, kind: LayerKind = LayerKind.STATELESS, **fields: Any) -> LayerRun:
        """A stateless layer running this mixer, or an attention layer running it beside its attention (fields:
        its MLP width, when it sets its own)."""
        return LayerRun(
            kind=kind,
            state_bytes=self.state_bytes,
            state_elements=self.state_elements,
            state_recurrent_elements=self.recurrent,
            mixer_params=self.params,
            ssm_a_params=self.ssm_a,
            **fields,
        )


def mamba2(cfg: Config, hidden: int, el: StateDtypes) -> Mixer:
    """One Mamba-2 layer's mixer, under Nemotron-H's and Granite-4.0-H's names."""
    heads = cfg.int_field("mamba_num_heads", "mamba_n_heads")
    d_inner_default = cfg.get("mamba_expand", "expand", default=2) * hidden
    head_dim = d_inner_default // heads
    if cfg.get("mamba_head_dim", "mamba_d_head") not in (None, "auto"):  # "auto": GraniteMoeHybridConfig's default
        head_dim = cfg.int_field("mamba_head_dim", "mamba_d_head")
    shape = Mamba2(
        hidden,
        heads,
        head_dim,
        cfg.int_field("ssm_state_size", "state_size", "mamba_d_state"),
        cfg.get("n_groups", "mamba_n_groups", default=1),
        cfg.get("conv_kernel", "mamba_d_conv", default=4),
    )
    return shape.mixer(el, conv_bias=True, in_bias=False, out_bias=False)


class Mamba2(NamedTuple):
    """One Mamba-2 mixer (transformers Mamba2Mixer; vLLM MambaMixer2 and mamba2_state_shape)."""

    hidden: int
    heads: int
    head_dim: int
    d_state: int
    groups: int
    kernel: int

    @property
    def conv_dim(self) -> int:
        """The channels the conv runs over: x, then B and C per group."""
        return self.heads * self.head_dim + 2 * self.groups * self.d_state

    def mixer(self, el: StateDtypes, conv_bias: bool, in_bias: bool, out_bias: bool, norm: bool = True) -> Mixer:
        """State: a heads x head_dim x d_state SSM state and a (kernel - 1) x conv_dim conv window per
        sequence. Parameters: in_proj (gate, x, B, C and dt per head), the depthwise conv, dt_bias, A_log and
        D per head, the gated RMS norm (optional in Falcon-H1), out_proj."""
        d_inner, h = self.heads * self.head_dim, self.hidden
        in_proj = d_inner + self.conv_dim + self.heads
        params = (
            h * in_proj
            + self.conv_dim * self.kernel
            + 3 * self.heads
            + (d_inner if norm else 0)
            + d_inner * h
            + (self.conv_dim if conv_bias else 0)
            + (in_proj if in_bias else 0)
            + (h if out_bias else 0)
        )
        return Mixer.of(self.heads * self.head_dim * self.d_state, (self.kernel - 1) * self.conv_dim, params, el)


def mamba1(cfg: Config, hidden: int, el: StateDtypes) -> Mixer:
    """One Jamba Mamba-1 layer's mixer (JambaMambaMixer: Mamba-1's, plus RMS norms over dt, B and C)."""
    d_inner = cfg.get("mamba_expand", default=2) * hidden
    d_state = cfg.get("mamba_d_state", default=16)
    dt_rank = cfg.get("mamba_dt_rank", default="auto")
    dt_rank = math.ceil(hidden / 16) if dt_rank == "auto" else dt_rank  # JambaConfig: "auto" is hidden / 16
    shape = Mamba1(hidden, d_inner, d_state, cfg.get("mamba_d_conv", default=4), dt_rank)
    conv_bias = bool(cfg.get("mamba_conv_bias", default=True))
    proj_bias = bool(cfg.get("mamba_proj_bias", default=False))
    mixer = shape.mixer(el, conv_bias, proj_bias)
    return mixer._replace(params=mixer.params + dt_rank + 2 * d_state)


class Mamba1(NamedTuple):
    """One Mamba-1 mixer (transformers MambaMixer; vLLM MambaMixer and mamba1_state_shape)."""

    hidden: int
    d_inner: int
    d_state: int
    kernel: int
    dt_rank: int

    def mixer(self, el: StateDtypes, conv_bias: bool, proj_bias: bool) -> Mixer:
        """State: a d_inner x d_state SSM state and a (kernel - 1) x d_inner conv window per sequence.
        Parameters: in_proj (x and gate), the depthwise conv, x_proj (dt, B, C), dt_proj with its bias,
        A_log, D, out_proj."""
        d, h = self.d_inner, self.hidden
        params = (
            h * 2 * d
            + d * self.kernel
            + d * (self.dt_rank + 2 * self.d_state)
            + self.dt_rank * d
            + d  # dt_proj's bias
            + d * self.d_state  # A_log
            + d  # D
            + d * h
            + (d if conv_bias else 0)
            + (2 * d + h if proj_bias else 0)
        )
        return Mixer.of(d * self.d_state, (self.kernel - 1) * d, params, el)._replace(ssm_a=d * self.d_state)


def gated_deltanet(cfg: Config, hidden: int, el: StateDtypes) -> Mixer:
    """Qwen3-Next / Qwen3.5 linear attention: a (k x v) state per value head plus a conv window."""
    k_heads = cfg.int_field("linear_num_key_heads")
    v_heads = cfg.int_field("linear_num_value_heads")
    dk = cfg.int_field("linear_key_head_dim")
    dv = cfg.int_field("linear_value_head_dim")
    kernel = cfg.get("linear_conv_kernel_dim", default=4)
    key_dim, value_dim = k_heads * dk, v_heads * dv
    conv_dim = 2 * key_dim + value_dim
    params = (
        hidden * (2 * key_dim + 2 * value_dim)
        + hidden * 2 * v_heads
        + conv_dim * kernel
        + 2 * v_heads
        + dv
        + value_dim * hidden
    )
    return Mixer.of(v_heads * dk * dv, (kernel - 1) * conv_dim, params, el)


def lightning(cfg: Config, hidden: int, el: StateDtypes) -> Mixer:
    """MiniMax-01's lightning attention (vLLM MiniMaxText01LinearAttention): qkv_proj and output_gate from hidden
    to heads x head_dim (x 3 and x 1), an RMS norm over that width, out_proj back; its state one head_dim x head_dim
    matrix per head (linear_attention_state_shape), in the cache dtype, no conv window."""
    heads = cfg.int_field("num_attention_heads")
    inner = heads * cfg.int_field("head_dim", default=hidden // heads)
    params = hidden * 3 * inner + hidden * inner + inner + inner * hidden
    return Mixer.of(heads * (inner // heads) ** 2, 0, params, el)


def kda(cfg: Config, hidden: int, el: StateDtypes) -> Mixer:
    """Kimi Linear's KDA (Kimi Delta Attention, vLLM 0.19 layers/kda.py): q, k, v projections to heads x head_dim,
    each through its own short conv; a low-rank decay gate (f_a, f_b) with a per-channel dt_bias, a per-head beta
    (b_proj), A_log per head, a low-rank output gate (g_a, g_b), a gated RMS norm of head_dim, o_proj. State
    (kda_state_shape): three conv windows of (kernel - 1) x heads x head_dim, and one head_dim x head_dim matrix per
    head, which vLLM keeps in float32 (kda_state_dtype) whatever the model's dtype."""
    lin: dict[str, Any] = cfg.get("linear_attn_config") or {}
    values = [lin.get("num_heads"), lin.get("head_dim"), lin.get("short_conv_kernel_size", 4)]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        raise cfg.refuse("linear_attn_config needs positive integers num_heads, head_dim and short_conv_kernel_size")
    heads, d, kernel = (int(v) for v in values)
    # Kimi-K3's use_full_rank_gate: a full-rank output gate (SGLang 0.5.23 kimi_k3.py fuses it with q, k and v as
    # fused_qkvg_proj), its decay gate still low-rank (f_a_proj, f_b_proj)
    full = bool(lin.get("use_full_rank_gate", False))
    return kda_mixer(heads, d, kernel, hidden, el, output_low_rank=not full)


def kda_mixer(
    heads: int,
    d: int,
    kernel: int,
    hidden: int,
    el: StateDtypes,
    low_rank: bool = True,
    output_low_rank: bool | None = None,
) -> Mixer:
    """A KDA layer of `heads` heads of `d`: Kimi Linear's low-rank decay and output gates (f_a, f_b; g_a, g_b:
    hidden -> d -> heads x d), or, `low_rank` off, full-rank ones (hidden -> heads x d: f_proj, g_proj; Ling 3's
    no_kda_lora); `output_low_rank` the output gate's own (None: as the decay gate's; Kimi-K3: full rank)."""
    p = heads * d

    def gate(lora: bool) -> int:
        return hidden * d + d * p if lora else hidden * p

    params = (
        3 * hidden * p  # q, k, v
        + gate(low_rank) + p  # the decay gate and its per-channel dt_bias
        + hidden * heads  # b_proj
        + 3 * p * kernel  # the q, k and v short convs
        + heads  # A_log
        + gate(low_rank if output_low_rank is None else output_low_rank)  # the output gate
        + d  # o_norm
        + p * hidden  # o_proj
    )  # fmt: skip
    recurrent = StateDtypes(conv=el.conv, ssm=4.0)  # float32 recurrent state
    return Mixer.of(heads * d * d, 3 * (kernel - 1) * p, params, recurrent)


def kimi_linear(cfg: Config, layers: int, hidden: int, el: StateDtypes) -> list[LayerRun]:
    """Kimi Linear: linear_attn_config lists, 1-based as vLLM's KimiLinearConfig reads them, the KDA layers and
    the full-attention (MLA) ones."""
    lin = cfg.get("linear_attn_config")
    if not isinstance(lin, dict):
        raise cfg.refuse("a kimi_linear config needs linear_attn_config (its KDA and full-attention layers)")
    kda_layers, full = lin.get("kda_layers"), lin.get("full_attn_layers")
    if not isinstance(full, list):
        raise cfg.refuse("linear_attn_config needs full_attn_layers (1-based layer numbers)")
    if kda_layers is None:  # the KDA layers are the others (KimiLinearConfig.is_kda_layer needs the list)
        kda_layers = [i + 1 for i in range(layers) if i + 1 not in full]
    if not isinstance(kda_layers, list) or sorted(kda_layers + full) != list(range(1, layers + 1)):
        raise cfg.refuse(
            f"linear_attn_config's kda_layers and full_attn_layers must number each of the {layers} layers once "
            "(1-based)"
        )
    mixer = kda(cfg, hidden, el)
    return [mixer.run() if i + 1 in kda_layers else LayerRun(kind=LayerKind.MLA) for i in range(layers)]


def short_conv(cfg: Config, hidden: int, el: StateDtypes) -> Mixer:
    """LFM2's gated short convolution: in_proj to B, C, x; a depthwise conv of conv_L_cache taps;
    out_proj. vLLM keeps conv_L_cache - 1 past steps of conv_dim channels (lfm2.py,
    short_conv_state_shape)."""
    dim = cfg.int_field("conv_dim", default=hidden)
    taps = cfg.int_field("conv_L_cache", default=3)
    bias = bool(cfg.get("conv_bias", default=False))
    params = hidden * 3 * dim + dim * taps + dim * hidden + (3 * dim + dim + hidden if bias else 0)
    return Mixer.of(0, (taps - 1) * dim, params, el)


def lfm2_intermediate(cfg: Config) -> int:
    """LFM2's SwiGLU width: block_ff_dim, shrunk to 2/3 and rounded up to block_multiple_of when
    block_auto_adjust_ff_dim (transformers models/lfm2/modeling_lfm2.py, Lfm2MLP)."""
    ff = cfg.int_field("block_ff_dim", "intermediate_size")
    if cfg.get("block_auto_adjust_ff_dim", default=True):
        ff = int(2 * ff / 3)
        ff = int(cfg.factor("block_ffn_dim_multiplier", 1.0) * ff)
        multiple = cfg.int_field("block_multiple_of", default=256)
        ff = multiple * ((ff + multiple - 1) // multiple)
    return ff


# NemotronHConfig (transformers 5) saves layers_block_type instead of hybrid_override_pattern, with these
# names (and the legacy mamba / attention ones that remap_legacy_layer_types renames).
NEMOTRON_SYMBOLS = {
    "linear_attention": "M",
    "mamba": "M",
    "full_attention": "*",
    "attention": "*",
    "mlp": "-",
    "moe": "E",
}


def nemotron_pattern(cfg: Config) -> str | None:
    """The block pattern as a hybrid_override_pattern string, from either spelling, or None."""
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str):
        return pattern
    types = cfg.get("layers_block_type", "layer_types")
    if not isinstance(types, list):
        return None
    unknown = sorted({str(t) for t in types} - set(NEMOTRON_SYMBOLS))
    if unknown:
        raise cfg.refuse(
            f"layers_block_type entry '{unknown[0]}' is not supported (known: {', '.join(NEMOTRON_SYMBOLS)})"
        )
    return "".join(NEMOTRON_SYMBOLS[t] for t in types)


def nemotron_h(cfg: Config, layers: int, hidden: int, el: StateDtypes) -> list[LayerRun]:
    pattern = nemotron_pattern(cfg)
    if pattern is None:
        raise cfg.refuse("a nemotron_h config needs hybrid_override_pattern or layers_block_type")
    if len(pattern) != layers:
        raise cfg.refuse(f"hybrid_override_pattern has {len(pattern)} layers, num_hidden_layers says {layers}")
    mamba = mamba2(cfg, hidden, el)
    inter = cfg.int_field("intermediate_size") if "-" in pattern else 0  # only MLP blocks ('-') need it
    runs = []
    for ch in pattern:
        if ch == "*":  # attention only, no MLP in this block
            runs.append(LayerRun(kind=LayerKind.FULL, intermediate_size=0))
        elif ch == "M":
            runs.append(mamba.run(intermediate_size=0))
        elif ch == "-":  # MLP only
            runs.append(LayerRun(kind=LayerKind.STATELESS, mixer_params=0, intermediate_size=inter))
        elif ch == "E":  # mixture of experts only (Nemotron 3): the spec's MoE fields describe it
            runs.append(LayerRun(kind=LayerKind.STATELESS, mixer_params=0))
        else:
            raise cfg.refuse(f"hybrid_override_pattern symbol '{ch}' is not supported (known: * M - E)")
    return runs


def jamba(cfg: Config, layers: int, hidden: int, el: StateDtypes) -> list[LayerRun]:
    """Jamba: attention at layer i when i % attn_layer_period == attn_layer_offset, Mamba-1 elsewhere."""
    period, offset = cfg.get("attn_layer_period"), cfg.get("attn_layer_offset", default=0)
    mamba = mamba1(cfg, hidden, el)
    moe_period, moe_offset = cfg.get("expert_layer_period", default=1), cfg.get("expert_layer_offset", default=0)
    inter = cfg.int_field("intermediate_size")
    experts = cfg.get("num_experts", default=0)
    if not isinstance(experts, int):
        raise cfg.refuse(f"field num_experts must be an integer for Jamba, got {experts!r}")
    runs = []
    for i in range(layers):
        dense: dict[str, Any] = {} if (experts > 1 and i % moe_period == moe_offset) else {"intermediate_size": inter}
        if i % period == offset:
            runs.append(LayerRun(kind=LayerKind.FULL, **dense))
        else:
            runs.append(mamba.run(**dense))
    return runs


def falcon_h1(cfg: Config, hidden: int, el: StateDtypes) -> list[LayerRun]:
    """Falcon-H1: every layer runs its attention and a Mamba-2 mixer side by side on one normed input (their
    outputs summed), then its MLP (transformers FalconH1DecoderLayer; vLLM FalconH1ParallelHybrid). The mixer
    is mamba_d_ssm wide (FalconH1Config: 1024 when the file omits it, expand x hidden when it is null), its
    gated norm optional (mamba_rms_norm), in_proj biased by mamba_proj_bias and out_proj by projectors_bias."""
    width = cfg.data.get("mamba_d_ssm", FALCON_H1_D_SSM)
    width = width if width is not None else cfg.get("mamba_expand", default=2) * hidden
    heads = cfg.int_field("mamba_n_heads")
    head_dim = cfg.get("mamba_d_head", default="auto")
    head_dim = width // heads if head_dim == "auto" else cfg.int_field("mamba_d_head")
    if not isinstance(width, int) or heads * head_dim != width:
        raise cfg.refuse(
            f"mamba_n_heads x mamba_d_head ({heads} x {head_dim}) differs from the mixer width {width!r} "
            "(mamba_d_ssm; FalconH1Config takes 1024 when the file omits it, and refuses such a config)"
        )
    shape = Mamba2(
        hidden, heads, head_dim, cfg.int_field("mamba_d_state"), cfg.int_field("mamba_n_groups", default=1),
        cfg.int_field("mamba_d_conv", default=4),
    )  # fmt: skip
    mixer = shape.mixer(
        el,
        conv_bias=bool(cfg.get("mamba_conv_bias", default=True)),
        in_bias=bool(cfg.get("mamba_proj_bias", default=False)),
        out_bias=bool(cfg.get("projectors_bias", default=False)),
        norm=bool(cfg.get("mamba_rms_norm", default=False)),
    )
    return [mixer.run(kind=LayerKind.FULL)]


FALCON_H1_D_SSM = 1024  # FalconH1Config's mamba_d_ssm default
