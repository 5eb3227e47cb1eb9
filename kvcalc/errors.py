"""Domain errors: the core raises these, the CLI turns them into one line on stderr."""

from __future__ import annotations


class KvcalcError(Exception):
    """A user-facing error: a one-line message plus an optional hint."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(KvcalcError):
    """Impossible or malformed numbers and options."""

    exit_code = 2


class DoesNotFitError(KvcalcError):
    """The deployment cannot run what was asked: its engine would not start there, or one request does not fit
    its pool, so there is nothing to time. Exit status 3, as `fit` exits for a setup that does not fit."""

    exit_code = 3


class NotFoundError(KvcalcError):
    """An unknown preset, file, repository or revision."""


class SpecError(KvcalcError):
    """A model or GPU description that is malformed or inconsistent."""


class HubError(KvcalcError):
    """The Hugging Face hub refused, or could not be reached."""


class MissingExtraError(KvcalcError):
    """An optional dependency is not installed."""

    def __init__(self, module: str, extra: str, purpose: str) -> None:
        super().__init__(
            f"{purpose} needs the optional package '{module}', which is not installed.",
            hint=f"pip install 'kvcalc[{extra}]'",
        )
