"""Quantized re-publications of a known model, read from their name when their config.json cannot be.

`nvidia/Qwen3-235B-A22B-NVFP4`, `nvidia/DeepSeek-R1-NVFP4`, `RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic`,
`Qwen/Qwen3-32B-AWQ`: the base model's preset (the name without its format suffix, matched exactly,
case-insensitively, against a built-in preset's name or the NAME part of one of its hub aliases, any org) with
every decoder linear layer in the format the suffix names, as `--dtype` models it. Used only where
the checkpoint's own config.json (with its quantization_config) is out of reach: offline, not in the
Hugging Face cache, or a preset lookup that never asks the hub (presets.get_model). The lookup
itself is presets.by_name: this module holds the rules and imports no preset store.
"""

from __future__ import annotations

from typing import NamedTuple

from kvcalc.model.spec import ModelSpec

# NOTE: suffix (lower case, after the base name) -> kvcalc's weight dtype. Longest first, so that
# "-fp8-dynamic" is not read as a base "...-fp8" plus "-dynamic". "-fp4" is NVIDIA's own spelling of
# its ModelOpt NVFP4 checkpoints (nvidia/DeepSeek-R1-0528-FP4), trusted only under the nvidia org:
# elsewhere an fp4 could as well be MXFP4; "-fp4-v2" is its second release of the same format. AMD's Quark
# checkpoints end "-fp8-kv" (FP8 weights, with the FP8 KV-cache scales the engine uses only under
# --kv-cache-dtype fp8, so the weights are all the name says) and "-mxfp4-preview" (amd/DeepSeek-R1-0528-MXFP4-Preview).
# Only formats whose bytes kvcalc models are listed.
SUFFIXES: tuple[tuple[str, str], ...] = (
    ("-mxfp4-preview", "mxfp4"),
    ("-fp8-dynamic", "fp8"),
    ("-fp8-kv", "fp8"),
    ("-fp8-block", "fp8"),
    ("-awq-int4", "int4"),
    ("-gptq-int4", "int4"),
    ("-gptq-int8", "int8"),
    ("-quantized.w4a16", "int4"),
    ("-quantized.w8a8", "int8"),
    ("-w4a16", "int4"),
    ("-w8a8", "int8"),
    ("-nvfp4", "nvfp4"),
    ("-mxfp4", "mxfp4"),
    ("-fp8", "fp8"),
    ("-awq", "int4"),
    ("-fp4-v2", "nvfp4"),
    ("-fp4", "nvfp4"),
)
NVIDIA_ONLY = ("-fp4-v2", "-fp4")
# NOTE: AWQ's own spelling and hugging-quants' (hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4).
AWQ = ("-awq", "-awq-int4")
W4A4_MXFP4 = ("-mxfp4-preview",)


class Named(NamedTuple):
    spec: ModelSpec  # the base preset's spec, named as the base, in the suffix's weight format
    base: str  # the base preset's name
    dtype: str  # the weight format, as --dtype names it
    source: str  # one line: what was resolved and that no config.json was read
    location: str  # the base preset's file


def split(text: str) -> tuple[str, str, str] | None:
    """(org, base name, dtype) for a name ending in a known format suffix; None otherwise."""
    org, _, name = text.strip().rpartition("/")
    key = name.lower()
    for suffix, dtype in SUFFIXES:
        if key.endswith(suffix) and len(key) > len(suffix):
            if suffix in NVIDIA_ONLY and org.lower() != "nvidia":
                return None
            return org, name[: -len(suffix)], dtype
    return None


def base_stem(org: str, base: str, aliases: dict[str, str], stems: list[str]) -> str | None:
    """The one preset whose name, or the NAME of one of whose hub aliases (alias -> stem), is `base`
    exactly (case-insensitively); the same org's alias first. None when none or more than one matches:
    a size is never guessed."""
    key = base.lower()
    same_org = aliases.get(f"{org.lower()}/{key}") if org else None
    if same_org is not None:
        return same_org
    found = {stem for alias, stem in aliases.items() if alias.rpartition("/")[2] == key}
    if key in stems:
        found.add(key)
    return found.pop() if len(found) == 1 else None


def quantized(spec: ModelSpec, location: str, dtype: str, where: str) -> Named:
    """The base preset's spec with every decoder linear layer in `dtype` (as `--dtype` models it),
    named as the base; `where` is the name it was read from."""
    from kvcalc.model.quant import Checkpoint, Quantization, named

    source = f"base preset {spec.name} with {dtype} weights, from the name {where}; its config.json was not read"
    fmt = named(dtype)
    if fmt is not None and where.lower().endswith(AWQ):
        # NOTE: AWQ is asymmetric: a packed zero point per group beside each scale (model/hf/quantization.py _gptq_awq).
        fmt = fmt.model_copy(update={"zero_points": True})
    if fmt is not None and where.lower().endswith(W4A4_MXFP4):
        # NOTE: AMD's Quark MXFP4 checkpoints quantize the activations to MXFP4 too (QuarkOCP_MX, fp4 input_tensors:
        # model/hf/quantization._quark); AMD serves them on MI350X / MI355X only, at CDNA4's fp4 rate, where
        # `--dtype mxfp4` (gpt-oss's weight-only experts) multiplies in 16 bits.
        fmt = fmt.model_copy(update={"compute": "fp4"})
    quant = Quantization(method=f"named {dtype} (the name's suffix; config.json not read)", linear=fmt)
    checkpoint = (spec.checkpoint or Checkpoint()).model_copy(update={"quantization": quant})
    changed = spec.with_changes(dtype=dtype, expert_dtype=None, checkpoint=checkpoint, description=source)
    return Named(changed, spec.name, dtype, source, location)
