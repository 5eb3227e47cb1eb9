"""Fetch a config.json from the Hugging Face hub (or its local cache) with huggingface_hub."""

from __future__ import annotations

import os
import sys
import threading

from kvcalc.errors import HubError, NotFoundError

LOGIN_HINT = "accept the licence on the model page, then `hf auth login` or set HF_TOKEN"
# NOTE: seconds the hub has to answer the first request (HEAD of config.json). huggingface_hub
# 2.4.0 waits 10 s (constants.DEFAULT_ETAG_TIMEOUT), and when that HEAD fails with a network error
# and nothing is cached, hf_hub_download retries it with a 60 s timeout and http_backoff's 5
# retries (waits 1+2+4+8+8 s; file_download.py, `_ETAG_RETRY_TIMEOUT`, utils/_http.py): 23.5 s
# here. We ask once with this deadline, enforced by a thread because name resolution is not
# covered by httpx's timeouts. HF_HUB_ETAG_TIMEOUT overrides it, as it does in the library.
PROBE_SECONDS = 1.5
_TRANSIENT = (408, 429, 500, 502, 503, 504)  # the statuses huggingface_hub itself retries


class HubUnreachable(HubError):
    """Offline or no answer, and config.json is not in the local cache (the name is all there is)."""


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _probe_seconds() -> float:
    try:
        return max(0.1, float(os.environ["HF_HUB_ETAG_TIMEOUT"]))
    except (KeyError, ValueError):
        return PROBE_SECONDS


class _Status:
    """'fetching config.json … from the hub…' on a terminal's stderr while waiting, erased after.
    Not written when stderr is a file or pipe: there an error stays exactly one line."""

    def __init__(self, at: str) -> None:
        self.tty = sys.stderr.isatty()
        if self.tty:
            sys.stderr.write(f"kvcalc: fetching config.json for {at} from the hub…")
            sys.stderr.flush()

    def done(self) -> None:
        if self.tty:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self.tty = False


def _ask_hub(repo_id: str, revision: str | None, seconds: float) -> BaseException | None:
    """One HEAD of config.json within `seconds`, no retries: None if it answered, else the error
    (a TimeoutError when it did not answer at all)."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    outcome: list[BaseException | None] = []

    def ask() -> None:
        try:
            get_hf_file_metadata(hf_hub_url(repo_id, "config.json", revision=revision), timeout=seconds)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001  (handed to the caller)
            outcome.append(exc)

    worker = threading.Thread(target=ask, daemon=True)
    worker.start()
    worker.join(seconds)
    return outcome[0] if outcome else TimeoutError(f"no answer within {seconds:g} s")


def fetch_config(repo_id: str, revision: str | None) -> tuple[str, str]:
    """(path of config.json, 'hub' or 'cache'). Raises HubError / NotFoundError with a hint."""
    # NOTE: imported here, not at module level: it costs ~0.3 s and only hub ids need it. The library
    # reads its HF_* variables on import and raises on a malformed one (printing a line of its own).
    import contextlib
    import io

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            from huggingface_hub import file_download, hf_hub_download, try_to_load_from_cache  # noqa: F401
    except ValueError as exc:
        raise HubError(
            f"huggingface_hub cannot start: {exc}",
            hint="check the HF_* environment variables: HF_HUB_ETAG_TIMEOUT and HF_HUB_DOWNLOAD_TIMEOUT take whole seconds",
        ) from None
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
    from huggingface_hub.utils import logging
    from huggingface_hub.utils.tqdm import disable_progress_bars

    # NOTE: results go to stdout and one error line to stderr; the library's retry warnings and
    # progress bars would break that contract.
    logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    disable_progress_bars()
    at = f"{repo_id}@{revision}" if revision else repo_id
    offline = _offline()
    status = None if offline else _Status(at)
    try:
        reached = True
        if not offline:
            seconds = _probe_seconds()
            error = _ask_hub(repo_id, revision, seconds)
            status_code = getattr(getattr(error, "response", None), "status_code", None)
            if error is not None and (not isinstance(error, HfHubHTTPError) or status_code in _TRANSIENT):
                reached = False  # no usable answer: a network error, the deadline, or a server error
            elif error is not None:
                raise error
        if reached and not offline:
            path = hf_hub_download(repo_id, "config.json", revision=revision, etag_timeout=_probe_seconds())
            return path, "hub"
        # Offline, or the hub did not answer: what the local cache holds. NOTE: try_to_load_from_cache
        # reads only files; hf_hub_download(local_files_only=True) first builds request headers,
        # which fetches the hub's agent registry (utils/_detect_agent.py, 3 s more when unreachable).
        cached = try_to_load_from_cache(repo_id, "config.json", revision=revision)
        if not isinstance(cached, str):
            raise LocalEntryNotFoundError("config.json is not in the local cache")
        return cached, "cache"
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
        raise HubUnreachable(
            f"{at}: {why} and config.json is not in the local Hugging Face cache",
            hint="use a preset (`kvcalc models`), a local config.json or folder, or go online once to cache it"
            + ("" if offline else "; HF_HUB_OFFLINE=1 skips the network"),
        ) from None
    except EntryNotFoundError:
        raise NotFoundError(f"{at} has no config.json", hint="pass a local config.json or folder instead") from None
    except HfHubHTTPError as exc:
        status_code = getattr(getattr(exc, "response", None), "status_code", None)
        if status_code in (401, 403):
            raise HubError(f"{at}: the hub refused access (HTTP {status_code})", hint=LOGIN_HINT) from None
        raise HubError(f"{at}: the hub answered HTTP {status_code}: {str(exc).splitlines()[0]}") from None
    finally:
        if status is not None:
            status.done()
