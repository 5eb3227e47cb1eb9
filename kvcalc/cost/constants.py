"""Which constant a step of the estimate takes (cost/estimate.time_of): the most specific name that exists,
`bw_eff.hopper.vllm`, then `bw_eff.hopper`, then the shared `bw_eff`. Resolved once per GPU family, engine,
phase and link (StepConstants), since a fit times many steps with one set of constants."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import NamedTuple


@functools.cache
def _candidates(name: str, keys: tuple[str, ...]) -> tuple[str, ...]:
    """The names _get tries, most specific first (joined once: a fit looks them up millions of times)."""
    return tuple(".".join((name, *keys[:i])) for i in range(len(keys), 0, -1))


def _get(c: Mapping[str, float], name: str, *keys: str) -> float:
    """The most specific constant: name.key1.key2, then name.key1, then name."""
    for key in _candidates(name, keys):
        v = c.get(key)
        if v is not None:
            return v
    return c[name]


class StepConstants(NamedTuple):
    """The constants a step of one GPU family, engine, phase and link takes, each its most specific
    name resolved (`_get`). None where the shared name is missing too: an error only if the step uses it."""

    bw_eff: float
    kv_eff: float
    dequant_eff: float
    mfu: float
    gemv: float
    fill: float
    layer_s: float
    attn_s: float
    moe_s: float
    moe_prefill_expert_s: float | None
    index_s: float | None
    score_bytes: float | None
    ar_alpha_s: float | None
    ar_alpha_tp: float | None
    ar_bw_eff: float | None
    ar_bw_eff_large: float | None
    a2a_alpha_s: float | None
    a2a_bw_eff: float | None
    step_s: float
    seq_s: float


def step_constants(c: Mapping[str, float], family: str, engine: str, prefill: bool, link: str) -> StepConstants:
    """The constants of `time_of` for a step of `family`, `engine` (a build after a dot falls back on the
    engine's constants, then on the shared ones), phase and link."""
    eng = tuple(engine.split(".")) if "." in engine else (engine,)
    phase = "prefill" if prefill else "decode"

    def opt(name: str, *keys: str) -> float | None:
        return _get(c, name, *keys) if name in c or any(k in c for k in _candidates(name, keys)) else None

    return StepConstants(
        bw_eff=min(1.0, _get(c, "bw_eff", family, *eng)),
        kv_eff=min(1.0, _get(c, "kv_eff", family)),
        dequant_eff=min(1.0, opt("dequant_eff", *eng) or 1.0),  # constants from before the term: none widened
        mfu=min(1.0, _get(c, "mfu", family, *eng)),
        gemv=_get(c, "gemv_layer_bytes", family),
        fill=_get(c, "mfu_tokens", family),
        layer_s=_get(c, f"{phase}_layer_s", *eng),
        attn_s=_get(c, "attn_layer_s", family),
        moe_s=_get(c, "moe_layer_s", *eng),
        moe_prefill_expert_s=opt("moe_prefill_expert_s", *eng),
        index_s=opt("index_layer_s", *eng),
        score_bytes=opt("score_bytes", *eng),
        ar_alpha_s=opt("ar_alpha_s", link, phase),
        ar_alpha_tp=opt("ar_alpha_tp", link),
        ar_bw_eff=opt("ar_bw_eff", link),
        ar_bw_eff_large=opt("ar_bw_eff_large", link),
        a2a_alpha_s=opt("a2a_alpha_s", link, phase),
        a2a_bw_eff=opt("a2a_bw_eff", link),
        step_s=_get(c, "step_s", *eng),
        seq_s=_get(c, "seq_s", *eng),
    )


# time_of's memo: the resolved constants by (family, engine, prefill, link), for one unchanged set of constants
ConstantsMemo = dict[tuple[str, str, bool, str], StepConstants]


def used(v: float | None, name: str) -> float:
    if v is None:
        raise KeyError(name)
    return v


# NOTE: the engines' custom all-reduce (one-shot / two-shot over peer memory, in the CUDA graph) takes messages up to
# 8 MiB (vLLM's custom_all_reduce max_size = 8192 * 1024; SGLang's the same); a larger one, a long prompt's
# activations, goes to NCCL, whose large-message bus bandwidth is its own (nccl-tests on 8 x H200: 2 MB 38.5 us,
# 32 MB 197 us; speed_facts 2.4): ar_bw_eff_large where the constants have it.
CUSTOM_ALLREDUCE_MAX = 8 << 20


def ar_eff(k: StepConstants, message: float) -> float:
    """The all-reduce's achieved share of the link's bandwidth for a message of `message` bytes."""
    large = k.ar_bw_eff_large if message > CUSTOM_ALLREDUCE_MAX else None
    return min(1.0, large if large is not None else used(k.ar_bw_eff, "ar_bw_eff"))
