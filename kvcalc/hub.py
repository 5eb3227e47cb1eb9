"""Fetch a config.json from the Hugging Face hub (or its local cache) with huggingface_hub."""

from __future__ import annotations

import os

from kvcalc.errors import HubError, NotFoundError

LOGIN_HINT = "accept the licence on the model page, then `hf auth login` or set HF_TOKEN"


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def fetch_config(repo_id: str, revision: str | None) -> tuple[str, str]:
    """(path of config.json, 'hub' or 'cache'). Raises HubError / NotFoundError with a hint."""
    # NOTE: imported here, not at module level: it costs ~0.3 s and only hub ids need it.
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
    from huggingface_hub.utils import disable_progress_bars, logging

    # NOTE: results go to stdout and one error line to stderr; the library's retry warnings and
    # progress bars would break that contract.
    logging.set_verbosity_error()
    disable_progress_bars()
    at = f"{repo_id}@{revision}" if revision else repo_id
    offline = _offline()
    try:
        path = hf_hub_download(repo_id, "config.json", revision=revision, local_files_only=offline)
    except GatedRepoError:
        raise HubError(f"{at} is a gated repository: access needs approval and a token", hint=LOGIN_HINT) from None
    except RevisionNotFoundError:
        raise NotFoundError(f"revision '{revision}' of {repo_id} does not exist on the hub") from None
    except RepositoryNotFoundError:
        raise NotFoundError(
            f"{repo_id} is not a repository on the hub (or it is private)",
            hint="check the id; for a private repository log in with `hf auth login` or set HF_TOKEN",
        ) from None
    # NOTE: LocalEntryNotFoundError subclasses EntryNotFoundError: catch it first.
    except (LocalEntryNotFoundError, OfflineModeIsEnabled):
        why = "offline mode is on (HF_HUB_OFFLINE)" if offline else "the hub could not be reached"
        raise HubError(
            f"{at}: {why} and config.json is not in the local Hugging Face cache",
            hint="use a preset (`kvcalc models`), a local config.json or folder, or go online once to cache it"
            + ("" if offline else "; HF_HUB_OFFLINE=1 skips the network"),
        ) from None
    except EntryNotFoundError:
        raise NotFoundError(f"{at} has no config.json", hint="pass a local config.json or folder instead") from None
    except HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status in (401, 403):
            raise HubError(f"{at}: the hub refused access (HTTP {status})", hint=LOGIN_HINT) from None
        raise HubError(f"{at}: the hub answered HTTP {status}: {str(exc).splitlines()[0]}") from None
    return path, "cache" if offline else "hub"
