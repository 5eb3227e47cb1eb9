"""Pydantic validation at the boundary: a model built from data, or one line naming the field that is wrong and the
closest known name (the one error boundary's SpecError)."""

from typing import TypeVar

from pydantic import BaseModel, ValidationError

from kvcalc.errors import SpecError


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
