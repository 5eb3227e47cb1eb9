"""What a request names, checked once for the CLI and the API: the model with its what-if overrides.

Kept off `kvcalc cache`'s heavy path: resolution and the step model load only when used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvcalc.errors import UsageError
from kvcalc.units import WEIGHT_DTYPES, normalize_dtype, parse_count

if TYPE_CHECKING:
    from kvcalc.model.resolve import Resolved


def cross_overrides(images: int | None, encoder_seq: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if images is not None:
        if images < 0:
            raise UsageError(f"--images must be 0 or more, got {images}")
        out["images"] = images
    if encoder_seq is not None:
        out["encoder_seq"] = parse_count(encoder_seq, "--encoder-seq")
    if len(out) == 2:
        raise UsageError("give --images or --encoder-seq, not both")
    return out


GOAL_OPTIONS = ("prompt", "ceiling", "efficiency", "mbu", "mfu")  # fit's, shaping a latency goal's verdict
SERVED_LAUNCH = (
    "max_num_seqs",
    "max_batched_tokens",
    "mem_fraction_static",
    "max_mamba_cache_size",
    "mamba_ssm_dtype",
)  # generate's, a served run's
SERVED_REQUESTS = ("requests", "range_ratio", "steady_state")
_DEFAULTS = {"range_ratio": 1.0}  # a served option at this value was not given


def _given(options: dict[str, Any], names: tuple[str, ...]) -> list[str]:
    """The names among `names` whose option was given: not None, not False, not its default."""
    return [
        k
        for k in names
        if (v := options.get(k)) is not None and v is not False and not (k in _DEFAULTS and v == _DEFAULTS[k])
    ]


def _known(options: dict[str, Any], names: tuple[str, ...]) -> None:
    if unknown := sorted(set(options) - set(names)):
        raise TypeError(f"not one of {names}: {unknown}")  # a caller's slip, not the user's


def unread_goal_options(*, plot: bool = False, **options: Any) -> list[str]:
    """Of fit's options that only shape a latency goal's verdict (GOAL_OPTIONS), those given: what `fit` and
    api.fit refuse without a TPOT / TTFT goal. --plot's chart draws the speed ones, so with it only prompt counts."""
    _known(options, GOAL_OPTIONS)
    return _given(options, GOAL_OPTIONS[:1] if plot else GOAL_OPTIONS)


def served_options(**options: Any) -> tuple[list[str], list[str]]:
    """Of generate's options that describe a served run, those given: (a serving engine's launch flags, the
    requests' options). A static batch refuses both (`generate` and api.generate)."""
    _known(options, SERVED_LAUNCH + SERVED_REQUESTS)
    return _given(options, SERVED_LAUNCH), _given(options, SERVED_REQUESTS)


# NOTE: upper bounds for the what-if overrides: real models have at most a few hundred layers and
# a few hundred heads; far larger values only make the per-layer arithmetic slow.
OVERRIDE_LIMITS = {"layers": 10_000, "kv_heads": 65_536, "head_dim": 65_536}


def what_ifs(
    layers: int | None, kv_heads: int | None, head_dim: int | None, window: str | None, dtype: str | None
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim)):
        if value is not None:
            flag = f"--{key.replace('_', '-')}"
            if value <= 0:
                raise UsageError(f"{flag} must be a positive integer, got {value}")
            if value > OVERRIDE_LIMITS[key]:
                raise UsageError(f"{flag} must be at most {OVERRIDE_LIMITS[key]:,}, got {value:,}")
            out[key] = value
    if window is not None:
        out["window"] = parse_count(window, "--window")
    if dtype is not None:
        out["dtype"] = weight_dtype(dtype)
    return out


def weight_dtype(text: str) -> str:
    """--dtype: a weight format (fp8, int4, nvfp4, ...) or a llama.cpp quant (q4_k_m, q4_0, ...), which the
    cost layer prices by the per-tensor mix llama-quantize writes (model/gguf/mix.py)."""
    from kvcalc.model.gguf.mix import FTYPES

    key = str(text).strip().lower()
    if key in FTYPES:
        return key
    try:
        return normalize_dtype(text, WEIGHT_DTYPES)
    except UsageError as err:
        raise UsageError(err.message, hint=f"{err.hint}, or a llama.cpp quant: {', '.join(FTYPES)}") from None


def with_context_warning(result, spec):  # noqa: ANN001, ANN201
    """A cache result beyond the model's trained context carries the warning roofline gives."""
    limit = spec.max_position_embeddings
    if limit is not None and result.seq > limit:
        from kvcalc.cost.step import context_warning  # NOTE: only then: step.py is not on cache's start-up path

        result.warnings.append(context_warning(spec, result.seq))
    return result


def resolve(text: str, overrides: dict[str, Any] | None = None) -> Resolved:
    """MODEL as the commands take it (preset, alias, hub id, file or folder), with the what-if overrides applied."""
    from kvcalc.model.resolve import resolve_model

    return resolve_model(text, overrides)
