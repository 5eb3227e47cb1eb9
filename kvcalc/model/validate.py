"""Pydantic validation at the boundary: a model built from data, or one line naming the field that is wrong and the
closest known name (the one error boundary's SpecError)."""

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from kvcalc.errors import SpecError

# The deepest model kvcalc lays out layer by layer (the largest published ones have a few hundred layers).
MAX_LAYERS = 100_000


def too_deep(layers: int) -> str | None:
    """Why kvcalc will not lay `layers` layers out one by one (a config's or a GGUF header's count); None: it will."""
    return (
        f"{layers:,} layers is not a model kvcalc can lay out (at most {MAX_LAYERS:,})" if layers > MAX_LAYERS else None
    )


def validation_message(exc: ValidationError, fields: list[str] | None = None) -> str:
    """The first error as 'field.path: message' (just the message for a whole-model invariant).
    An unknown field comes first, with the closest of `fields` (the model's own) where it is a top-level one: a
    typo (`num_layerz`) is the cause of the 'Field required' that Pydantic lists before it."""
    errors = exc.errors()
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    where = ".".join(str(p) for p in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        import difflib

        msg = "unknown field"
        known = fields if fields and len(err["loc"]) == 1 else []  # nested paths: none offered
        close = difflib.get_close_matches(str(err["loc"][-1]), known, n=1, cutoff=0.6)
        if close:
            msg += f" (did you mean {close[0]}?)"
    return f"{where}: {msg}" if where else msg


M = TypeVar("M", bound=BaseModel)


def build(model: type[M], data: object, where: str) -> M:
    """Validate data into a model, turning Pydantic's error into a one-line SpecError."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise SpecError(f"{where}: {validation_message(exc, list(model.model_fields))}") from None


def check_compressed(spec: Any) -> None:  # noqa: ANN401 (a ModelSpec: the spec module imports this one)
    """DeepSeek-V4's shape (ModelSpec's validator): a grouped output projection, a window on every MLA-kind layer,
    compressed entries that split a token's elements and index bytes evenly, an indexer where a layer picks a top-k."""
    if spec.o_groups is None or spec.o_lora_rank is None or spec.q_lora_rank is None:
        raise ValueError("DeepSeek-V4's compressed attention needs o_groups, o_lora_rank and q_lora_rank")
    if (spec.num_heads * spec.head_dim_effective) % spec.o_groups:
        raise ValueError(f"o_groups ({spec.o_groups}) must divide the heads' width")
    entry = spec.latent_rank + spec.rope_dim
    for run in spec.layer_pattern:
        r = run.compress_ratio
        if run.kind.value == "mla" and not run.latent_window:
            raise ValueError("a compressed-attention model's MLA layers all keep a window")
        if r and (entry % r or (run.compress_topk and spec.index_entry_bytes % r)):
            raise ValueError(f"compress_ratio {r} must divide an entry's {entry} elements and its index key's bytes")
        if run.compress_topk and spec.index_topk is None:
            raise ValueError("compress_topk layers need an indexer (index_heads, index_head_dim, index_topk)")
