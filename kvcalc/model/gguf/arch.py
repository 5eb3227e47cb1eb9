"""GGUF metadata -> ModelSpec: the attention geometry llama.cpp reads for each architecture.

Keys are `{arch}.block_count`, `.embedding_length`, `.attention.head_count(_kv)` (a number, or
an array per layer), `.attention.key_length` / `value_length`, `.attention.sliding_window` and
`.attention.sliding_window_pattern`, MLA's `.attention.kv_lora_rank`, MoE's `.expert_*`, SSM's
`.ssm.*` (llama.cpp src/llama-arch.cpp LLM_KV_NAMES; per-arch defaults from src/models/*.cpp).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from kvcalc.errors import SpecError
from kvcalc.model.gguf.experts import expert_width, shared_width
from kvcalc.model.gguf.reader import Header, MetadataError, Tensor, tokens_listed
from kvcalc.model.gguf.reader import arch_value as _get
from kvcalc.model.quant import Checkpoint
from kvcalc.model.spec import LayerKind, LayerRun, ModelSpec
from kvcalc.model.validate import build, too_deep, validation_message

# Sliding-window layer pattern by GGUF architecture when the file has no sliding_window_pattern:
# (n_pattern, dense_first, kind), as each src/models/<arch>.cpp calls load_swa_pattern.
SWA_DEFAULT: dict[str, tuple[int, bool, LayerKind]] = {
    "gemma2": (2, False, LayerKind.SLIDING),
    "gemma3": (6, False, LayerKind.SLIDING),
    "gemma3n": (5, False, LayerKind.SLIDING),
    "gemma-embedding": (6, False, LayerKind.SLIDING),
    "gpt-oss": (2, False, LayerKind.SLIDING),
    "cohere2": (4, False, LayerKind.SLIDING),
    "exaone4": (4, False, LayerKind.SLIDING),
    "olmo2": (4, False, LayerKind.SLIDING),
    "llama4": (4, False, LayerKind.CHUNKED),  # 3 chunked (attention_chunk_size) + 1 full
    "afmoe": (4, False, LayerKind.SLIDING),  # where the file gives a window
    "exaone-moe": (4, False, LayerKind.SLIDING),
    "cohere2moe": (4, True, LayerKind.SLIDING),  # load_swa_pattern(ml, 4, true): every 4th layer from 0 is full
    "laguna": (4, True, LayerKind.SLIDING),  # XS.2, where the file gives a window: full at il % 4 == 0
    "mellum": (4, False, LayerKind.SLIDING),  # where the file gives a window
    "smallthinker": (4, True, LayerKind.SLIDING),  # where the file gives a window: full at il % 4 == 0
    "plamo3": (8, False, LayerKind.SLIDING),  # where the file gives a window: 7 sliding, then 1 full
    "muse-glimmer": (4, False, LayerKind.SLIDING),
}
# Windows a loader sets whatever the file says, where the file gives one (smallthinker.cpp: n_swa = 4096)
SWA_FORCED = {"smallthinker": 4096}
# Architectures read the same way as llama (dense or MoE, GQA, optional SWA): the families kvcalc
# reads from config.json that llama.cpp serves. Others are refused by name.
SUPPORTED = {
    "llama", "mistral3", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "phi3", "gemma", "gemma2", "gemma3",
    "gemma-embedding", "gemma3n", "gemma4", "command-r", "cohere2", "deepseek2", "mistral4", "gpt-oss", "granite",
    "granitemoe", "olmo2", "starcoder2", "exaone4", "llama4", "glm4", "glm4moe", "internlm2", "mamba", "mamba2",
    "falcon-h1", "granitehybrid", "nemotron_h", "nemotron_h_moe", "stablelm", "smollm3", "hunyuan-moe", "ernie4_5",
    "ernie4_5-moe", "qwen3next", "qwen35", "qwen35moe", "jamba", "falcon", "gpt2", "gptneox", "mpt", "baichuan",
    "starcoder", "refact", "bloom", "qwen", "olmo", "olmoe", "minicpm", "qwen2vl", "qwen3vl", "qwen3vlmoe",
    # full attention over every layer, dense or MoE, nothing beyond llama's keys (src/models/<arch>.cpp)
    "seed_oss", "apertus", "arcee", "hunyuan-dense", "exaone", "dbrx", "xverse", "orion", "grok", "phimoe",
    "dots1", "minimax-m2", "bailingmoe", "bailingmoe2", "phi2", "chatglm", "nemotron", "codeshell", "plamo", "jais",
    "hy_v3", "grovemoe", "deepseek", "arctic", "jais2", "maincoder", "bitnet", "chameleon", "cogvlm", "hunyuan_vl",
    # query and KV heads and MLP widths per layer (openelm.cpp: one fused QKV, every layer full)
    "openelm",
    # sliding layers in a fixed pattern (SWA_DEFAULT), MoE
    "afmoe", "exaone-moe", "cohere2moe", "laguna", "mellum", "smallthinker", "plamo3", "muse-glimmer",
    # sliding layers listed per layer, KV heads per layer, values narrower than keys
    "mimo2", "step35", "maple", "spark2_5", "granite_swa",
    # KV heads per layer, 0 where Nemotron-NAS's search made the attention a no-op or one linear map (deci.cpp)
    "deci",
    # MLA's projections run as plain attention (engines/llamacpp/kv.MLA_AS_MHA)
    "minicpm3",
    # MLA with DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2, GLM-5; HY-V4 where the file has one):
    # its keys cached apart
    "deepseek32", "glm-dsa", "hy_v4",
    # DeepSeek-V4's compressed attention: a window in every layer, compressed caches by ratio (model/gguf/deepseek4.py)
    "deepseek4",
    # Kimi Delta Attention layers (no KV heads: recurrent, a head_dim x head_dim state a head) beside MLA ones
    "kimi-linear",
    # lightning attention layers (recurrent: a head_dim x head_dim state a head) beside full attention (MiniMax-01, M1)
    "minimax-01",
    # short-convolution layers (no KV heads) beside attention layers, dense or MoE
    "lfm2", "lfm2moe",
    # Mamba-2 layers where a layer has no KV heads, attention elsewhere (plamo2.cpp: is_recr = n_head_kv(il) == 0)
    "plamo2",
    # RWKV: every layer recurrent, a token shift and a wkv state a sequence (n_embd_r / n_embd_s)
    "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7",
}  # fmt: skip
# DeepSeek Sparse Attention: MLA layers with a lightning indexer whose keys llama.cpp caches apart (llama-kv-cache-dsa)
DSA = ("deepseek32", "glm-dsa", "hy_v4")
# Layers that hold K and V before the rest read an earlier layer's (src/models/gemma3n.cpp sets
# n_layer_kv_from_start to 20 whatever the file says: E2B's 30 layers and E4B's 35 alike)
KV_FROM_START = {"gemma3n": 20}
# Gated DeltaNet hybrids (src/models/qwen3next.cpp, qwen35.cpp, qwen35moe.cpp): recurrent layers as
# attention.recurrent_layers lists them, else all but every full_attention_interval-th (4); Mamba-style state
GATED_DELTA = ("qwen3next", "qwen35", "qwen35moe")
# Recurrent layers as attention.recurrent_layers lists them, else all but every full_attention_interval-th, whose
# default each loader sets: Gated DeltaNet's 4, MiniMax-01's lightning attention 8 (minimax-01.cpp)
RECURRENT_INTERVAL = dict.fromkeys(GATED_DELTA, 4) | {"minimax-01": 8}
# Recurrent where a layer has no KV heads even in an MLA model (kimi-linear.cpp: is_recr = n_head_kv(il) == 0)
RECURRENT_BESIDE_MLA = ("kimi-linear",)
# Every layer recurrent (llama-arch.cpp llm_arch_is_recurrent), whatever KV heads RWKV6-Qwen2 / ARWKV7 files give
RECURRENT_ALL = ("mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7")
# The config.json class a GGUF architecture was converted from, where an engine's rule names it
ARCHITECTURES = {"minicpm3": "MiniCPM3ForCausalLM"}
QUANT_IN_NAME = r"(?i)(?:^|[-_.])((?:UD-)?(?:I?Q\d(?:_[A-Z0-9]+)*|F16|BF16|F32|MXFP4(?:_MOE)?|TQ\d_0))(?:[-_.]|$)"
# general.file_type (llama.h enum llama_ftype) -> the label files carry, for a name without one
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
    19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
    26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16",
    36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE",
}  # fmt: skip


def quant_label(filename: str, header: Header | None = None) -> str | None:
    """Q4_K_M from 'Qwen3-8B-Q4_K_M.gguf'; else the header's general.file_type."""
    stem = re.sub(r"(?i)(-\d{5}-of-\d{5})?\.gguf$", "", filename.rsplit("/", 1)[-1])
    found = re.findall(QUANT_IN_NAME, stem)
    if found:
        return str(found[-1]).upper()
    ft = header.metadata.get("general.file_type") if header else None
    return FILE_TYPES.get(ft) if isinstance(ft, int) else None


def _per_layer(value: Any, n: int, what: str, name: str, nextn: int = 0) -> list[int]:
    """One value per trunk layer (a list may also list the `nextn` MTP layers after them)."""
    if isinstance(value, list):
        if len(value) not in (n, n + nextn):
            raise SpecError(f"{name}: {what} has {len(value)} entries for {n} layers")
        return [int(v) for v in value[:n]]
    return [int(value)] * n


def _swa_layers(md: dict[str, Any], arch: str, n: int) -> list[bool] | None:
    window = _get(md, arch, "attention.sliding_window")
    # NOTE: phi3.cpp and phimoe.cpp set no SWA type: a window in their files is not a sliding cache
    if not window or arch in ("phi3", "phimoe"):
        return None
    pattern = _get(md, arch, "attention.sliding_window_pattern")
    if isinstance(pattern, list):  # one bool per layer
        return [bool(p) for p in pattern[:n]] + [False] * (n - len(pattern))
    n_pattern, dense_first, _ = SWA_DEFAULT.get(arch, (0, False, LayerKind.SLIDING))
    if isinstance(pattern, int):
        n_pattern = pattern
    if arch not in SWA_DEFAULT and not isinstance(pattern, int):
        n_pattern = 0  # a window with no pattern: every layer slides (mistral v0.1's style)
    if dense_first:
        return [n_pattern == 0 or il % n_pattern != 0 for il in range(n)]
    return [n_pattern == 0 or il % n_pattern < n_pattern - 1 for il in range(n)]


def spec_from_gguf(header: Header, name: str, tensors: list[Tensor] | None = None) -> ModelSpec:
    """The ModelSpec llama.cpp would build from this header (tensors: all shards' tables)."""
    try:
        return _spec(header, name, tensors)
    except (MetadataError, ValidationError) as exc:  # ValidationError: a value no layer takes (an array for a window)
        why = exc.message if isinstance(exc, MetadataError) else f"GGUF metadata: {validation_message(exc)}"
        raise SpecError(f"{name}: {why}") from None


def _spec(header: Header, name: str, tensors: list[Tensor] | None) -> ModelSpec:
    md = header.metadata
    arch = header.architecture
    if arch is None:
        raise SpecError(f"{name}: GGUF header has no general.architecture")
    if arch not in SUPPORTED:
        raise SpecError(
            f"{name}: GGUF architecture '{arch}' is not one kvcalc reads",
            hint="supported: " + ", ".join(sorted(SUPPORTED)),
        )
    n = _get(md, arch, "block_count")
    hidden = _get(md, arch, "embedding_length")
    if not isinstance(n, int) or not isinstance(hidden, int) or not n or not hidden:
        raise SpecError(f"{name}: GGUF metadata lacks {arch}.block_count or {arch}.embedding_length (or gives 0)")
    if why := too_deep(n):
        raise SpecError(f"{name}: {arch}.block_count {why}")
    # NOTE: block_count counts the multi-token-prediction blocks kept at the end (GLM-4.5's blk.92, Ling 2.0's):
    # llama.cpp builds its cache over the trunk alone (llama_hparams::n_layer() = n_layer_all - n_layer_nextn, the
    # memory's layer filter il < n_layer()) and runs only the trunk. Their tensors stay in the parameter total.
    nextn = _get(md, arch, "nextn_predict_layers", 0)
    nextn = nextn if isinstance(nextn, int) and 0 < nextn < n else 0
    n -= nextn
    heads = _per_layer(_get(md, arch, "attention.head_count", 0), n, "head_count", name, nextn)
    kv = _per_layer(_get(md, arch, "attention.head_count_kv", max(heads) or 1), n, "head_count_kv", name, nextn)
    kv = [0] * n if arch in RECURRENT_ALL else kv  # no attention: the KV heads a file gives are not read
    n_heads = max(heads) or 1
    ff = _get(md, arch, "feed_forward_length", 0)
    ff = max(ff) if isinstance(ff, list) else int(ff or 0)
    vocab = _get(md, arch, "vocab_size") or tokens_listed(md) or None
    tensors = tensors if tensors is not None else header.tensors
    names = {t.name for t in tensors}
    if vocab is None:
        emb = next((t for t in tensors if t.name == "token_embd.weight"), None)
        vocab = emb.shape[1] if emb is not None else None
    spec: dict[str, Any] = {
        "name": name,
        "source": f"GGUF header of {name}",
        "num_layers": n,
        "hidden_size": hidden,
        "num_heads": n_heads,
        "intermediate_size": ff,
        "vocab_size": vocab,
        "tie_embeddings": "output.weight" not in names,
        "max_position_embeddings": _get(md, arch, "context_length"),
        "params": sum(t.elements for t in tensors) or None,
        "dtype": _weight_dtype(quant_label(name, header)),
    }
    key_len, val_len = _get(md, arch, "attention.key_length"), _get(md, arch, "attention.value_length")
    rank = _get(md, arch, "attention.kv_lora_rank")
    if rank:  # MLA (deepseek2 and its kin)
        rope = _get(md, arch, "rope.dimension_count", 64)
        k_mla = _get(md, arch, "attention.key_length_mla") or key_len
        if not k_mla or k_mla <= rope:  # llama.cpp's n_embd_head_k_mla holds the rotary part
            raise SpecError(f"{name}: MLA needs {arch}.attention.key_length_mla (or key_length) past rope dims")
        spec.update(
            kv_lora_rank=rank,
            qk_rope_head_dim=rope,
            qk_nope_head_dim=k_mla - rope,
            v_head_dim=_get(md, arch, "attention.value_length_mla") or val_len,
            q_lora_rank=_get(md, arch, "attention.q_lora_rank") or None,
            head_dim=k_mla,
        )
        keys = ("head_count", "key_length", "top_k")
        found = [_get(md, arch, f"attention.indexer.{k}") for k in keys]
        # deepseek32.cpp / glm-dsa.cpp read the indexer keys with get_key (required); hy-v4.cpp only where top_k > 0
        # (its all-full-attention checkpoints have none)
        if arch in DSA and (arch != "hy_v4" or found[2]):
            if not all(isinstance(v, int) and v > 0 for v in found):
                raise SpecError(f"{name}: GGUF metadata lacks {arch}.attention.indexer.head_count / key_length / top_k")
            spec.update(index_heads=found[0], index_head_dim=found[1], index_topk=found[2])
    else:
        spec["num_kv_heads"] = max(kv) or 1
        if key_len:
            spec["head_dim"] = key_len
        elif heads[0] and len(set(heads)) > 1:
            # llama.cpp's default head width is n_embd / n_head(0): layer 0's count, not the widest layer's
            spec["head_dim"] = hidden // heads[0]
        if key_len and val_len and val_len != key_len:
            spec["v_head_dim"] = val_len  # n_embd_head_v: values narrower than keys (mimo2: 128 beside 192)
    experts = _get(md, arch, "expert_count", 0) or 0
    if experts:
        spec.update(
            experts=experts,
            experts_per_token=max(
                _per_layer(_get(md, arch, "expert_used_count", 1), n, "expert_used_count", name, nextn)
            ),
            expert_intermediate_size=(expert := expert_width(md, arch, name)),
            shared_expert_intermediate_size=shared_width(md, arch, expert or 0, ff),
            dense_layers=_get(md, arch, "leading_dense_block_count", 0) or 0,
        )
    if nextn:
        spec["checkpoint"] = Checkpoint(mtp_blocks=nextn)
    if arch in ARCHITECTURES:
        spec["architecture"] = ARCHITECTURES[arch]
    if arch == "deepseek4":
        from kvcalc.model.gguf import deepseek4

        v4 = deepseek4.fields(lambda key, default=None: _get(md, arch, key, default), n, name)
        return build(ModelSpec, {**spec, **v4}, f"{name} (GGUF)")
    swa_width, full_width, k_as_v = _own_widths(md, arch, n, names)
    if swa_width is not None:
        spec["head_dim"] = swa_width
    spec["layer_pattern"] = _pattern(
        md, arch, n, kv, n_heads, bool(rank), spec.get("num_kv_heads"), name, nextn,
        full_width=full_width, k_as_v=k_as_v, kv_from=_kv_from(md, arch, n), q_counts=heads,
    )  # fmt: skip
    return build(ModelSpec, spec, f"{name} (GGUF)")


def _weight_dtype(label: str | None) -> str:
    # NOTE: kvcalc's PyTorch-engine paths take one weight dtype; llama.cpp's own figures use the
    # tensor table instead (engines/llamacpp), so this is only the nearest label.
    label = (label or "").upper().removeprefix("UD-")
    if label in ("F32", "BF16"):
        return {"F32": "fp32", "BF16": "bf16"}[label]
    if label == "F16":
        return "fp16"
    if label.startswith("Q8") or label.startswith("Q6"):
        return "int8"
    return "mxfp4" if label.startswith("MXFP4") else "int4"


def _own_widths(
    md: dict[str, Any], arch: str, n: int, names: set[str]
) -> tuple[int | None, int | None, frozenset[int]]:
    """(the model's head width where the sliding layers set it, the full layers' own, the layers whose V is their
    K). llama_hparams: a sliding layer's head is attention.key_length_swa wide (default key_length), a full
    layer's key_length; where they differ the spec's head_dim is the sliding layers' (Gemma 4: 256, its full
    layers 512). gemma4.cpp takes Vcur = Kcur on a layer whose file has no attn_v (Gemma 4's attention_k_eq_v)."""
    key_len, swa_len = _get(md, arch, "attention.key_length"), _get(md, arch, "attention.key_length_swa")
    own: tuple[int | None, int | None] = (None, None)
    if isinstance(swa_len, int) and isinstance(key_len, int) and swa_len != key_len and _swa_layers(md, arch, n):
        own = (swa_len, key_len)
    k_as_v: frozenset[int] = frozenset()
    if arch == "gemma4":
        k_as_v = frozenset(
            il
            for il in range(n)
            if f"blk.{il}.attn_k.weight" in names
            and not {f"blk.{il}.attn_v.weight", f"blk.{il}.attn_qkv.weight"} & names
        )
    return *own, k_as_v


def _kv_from(md: dict[str, Any], arch: str, n: int) -> int | None:
    """The first layer that reads an earlier layer's K and V (llama_hparams.n_layer_kv_from_start), None if all
    hold their own: Gemma 3n's fixed 20, Gemma 4's block count less attention.shared_kv_layers."""
    if arch == "gemma4":
        shared = _get(md, arch, "attention.shared_kv_layers", 0)
        return n - shared if isinstance(shared, int) and 0 < shared < n else None
    return KV_FROM_START.get(arch)


def _pattern(
    md: dict[str, Any],
    arch: str,
    n: int,
    kv: list[int],
    n_heads: int,
    mla: bool,
    kv_max: int | None,
    name: str,
    nextn: int = 0,
    full_width: int | None = None,
    k_as_v: frozenset[int] = frozenset(),
    kv_from: int | None = None,
    q_counts: list[int] | None = None,
) -> list[LayerRun]:
    swa = _swa_layers(md, arch, n)
    shared_index = _shared_indexers(md, arch, n, name)
    window = _get(md, arch, "attention.sliding_window")
    window = SWA_FORCED.get(arch, window) if window else window
    kind_swa = SWA_DEFAULT.get(arch, (0, False, LayerKind.SLIDING))[2]
    if arch == "llama4":
        window = _get(md, arch, "attention.chunk_size", 8192)
        swa = [il % 4 < 3 for il in range(n)] if window else None
    state = _state_bytes(md, arch)
    ff = _per_layer(_get(md, arch, "feed_forward_length", 1), n, "feed_forward_length", name, nextn)
    listed = _get(md, arch, "attention.recurrent_layers") if arch in RECURRENT_INTERVAL else None
    interval = _get(md, arch, "full_attention_interval", RECURRENT_INTERVAL[arch]) if arch in RECURRENT_INTERVAL else 0
    runs: list[LayerRun] = []
    for il in range(n):
        # an attention layer's own query heads where the file gives fewer than the widest (openelm.cpp's n_head(il))
        q_heads = q_counts[il] if q_counts and 0 < q_counts[il] != n_heads else None
        # NOTE: which layers are recurrent, as each src/models/<arch>.cpp sets is_recr: Qwen3-Next / 3.5 as
        # attention.recurrent_layers lists them, else by interval; nemotron_h (and its MoE, which loads alike)
        # where a layer has neither KV heads nor an MLP; the others where kv == 0
        if isinstance(listed, list) and len(listed) >= n:
            recurrent = bool(listed[il])
        else:
            recurrent = arch in RECURRENT_ALL or (
                (il + 1) % interval != 0 if interval else kv[il] == 0 and (not mla or arch in RECURRENT_BESIDE_MLA)
            )
        if arch in ("nemotron_h", "nemotron_h_moe") and kv[il] == 0 and ff[il] != 0:
            runs.append(LayerRun(kind=LayerKind.STATELESS))  # an MLP-only layer: no cache, no state
        elif recurrent:
            runs.append(LayerRun(kind=LayerKind.STATELESS, state_bytes=state, state_elements=state // 4))
        elif mla:
            runs.append(LayerRun(kind=LayerKind.MLA, index_shared=il in shared_index))
        elif swa and swa[il]:
            runs.append(
                LayerRun(
                    kind=kind_swa,
                    window_tokens=window,
                    kv_heads=kv[il] if kv[il] != kv_max else None,
                    num_heads=q_heads,
                )
            )
        else:
            # NOTE: a Falcon-H1 layer is attention and a Mamba-2 mixer side by side: its state rides on the layer
            beside = state if arch == "falcon-h1" else 0
            heads = kv[il] if kv[il] != kv_max else None
            runs.append(
                LayerRun(
                    kind=LayerKind.FULL,
                    kv_heads=heads,
                    state_bytes=beside,
                    state_elements=beside // 4,
                    head_dim=full_width,
                    num_heads=q_heads,
                    v_is_k=il in k_as_v,
                )
            )
    if kv_from is not None and kv_from < n:
        runs = [r if il < kv_from else r.model_copy(update={"kv_shared": True}) for il, r in enumerate(runs)]
    if all(r == runs[0] for r in runs) and runs[0].kind in (LayerKind.FULL, LayerKind.MLA) and not runs[0].state_bytes:
        return []
    # NOTE: the shortest period that repeats (gemma2: [sliding, full]), else one run per layer
    for period in range(1, n + 1):
        if all(runs[i] == runs[i % period] for i in range(n)):
            return _compress(runs[:period])
    return _compress(runs)


def _compress(runs: list[LayerRun]) -> list[LayerRun]:
    out: list[LayerRun] = []
    for r in runs:
        if out and out[-1].model_copy(update={"count": 1}) == r:
            out[-1] = out[-1].model_copy(update={"count": out[-1].count + 1})
        else:
            out.append(r)
    return out


def _shared_indexers(md: dict[str, Any], arch: str, n: int, name: str) -> frozenset[int]:
    """Layers without an indexer of their own (glm-dsa.cpp is_indexer_full: attention.indexer.types, one value or one
    a layer; else every layer for GLM-5 / 5.1, whose context_length is under 1,048,576, and GLM-5.2's table: layers 0
    and 1, then every fourth from 2; hy_v4: attention.indexer.types, else none, which hy-v4.cpp refuses).
    deepseek32: none."""
    if arch not in ("glm-dsa", "hy_v4") or not _get(md, arch, "attention.indexer.top_k"):
        return frozenset()
    types = _get(md, arch, "attention.indexer.types")
    if arch == "hy_v4" and not (types[0] if isinstance(types, list) and types else types):
        raise SpecError(f"{name}: {arch} layer 0 must own an indexer (attention.indexer.types), as hy-v4.cpp requires")
    if isinstance(types, list):
        full = [bool(t) for t in types[:n]] + [False] * (n - len(types))
    elif isinstance(types, int):
        full = [bool(types)] * n
    elif (_get(md, arch, "context_length") or 0) < 1048576:
        full = [True] * n
    else:
        full = [il < 2 or (il < 78 and (il - 2) % 4 == 0) for il in range(n)]
    return frozenset(il for il in range(n) if not full[il])


def _state_bytes(md: dict[str, Any], arch: str) -> int:
    """Recurrent state of one layer and one sequence, f32 (llama-hparams.cpp n_embd_r/s): LFM2's short convolution
    keeps its last l_cache - 1 inputs, n_embd wide; Kimi Delta Attention its Q / K / V convolutions and a square
    state a head; Mamba-style layers their conv inputs and SSM state."""
    l_cache = _get(md, arch, "shortconv.l_cache", 0)
    if l_cache:
        return int(4 * _get(md, arch, "embedding_length", 0) * (l_cache - 1))
    if wkv := _get(md, arch, "wkv.head_size", 0):  # RWKV: token_shift_count (2) x n_embd shifts, n_embd x head size
        n_embd = _get(md, arch, "embedding_length", 0)
        return int(4 * (_get(md, arch, "token_shift_count", 2) * n_embd + n_embd * wkv))
    if arch == "minimax-01":  # lightning attention (n_embd_head_la = the key width): head_dim^2 a head, no conv
        heads = _get(md, arch, "attention.head_count", 0)
        heads = int(heads[0] if isinstance(heads, list) else heads)
        width = _get(md, arch, "attention.key_length") or _get(md, arch, "embedding_length", 0) // max(heads, 1)
        return int(4 * width * width * heads)
    if kda := _get(md, arch, "kda.head_dim", 0):
        # Kimi Delta Attention (n_embd_r / n_embd_s): Q, K and V convolutions keep d_conv - 1 steps (3 if the
        # file gives no kernel) of n_head x head_dim each; the state is head_dim x head_dim a head
        heads = _get(md, arch, "attention.head_count", 0)
        heads = int(heads[0] if isinstance(heads, list) else heads)
        d_conv = _get(md, arch, "ssm.conv_kernel", 0)
        return int(4 * (3 * (d_conv - 1 if d_conv else 3) * heads * kda + kda * kda * heads))
    d_conv, d_inner = _get(md, arch, "ssm.conv_kernel", 0), _get(md, arch, "ssm.inner_size", 0)
    d_state, groups = _get(md, arch, "ssm.state_size", 0), _get(md, arch, "ssm.group_count", 0)
    r = (d_conv - 1) * (d_inner + 2 * groups * d_state) if d_conv else 0
    return int(4 * (r + d_state * d_inner))
