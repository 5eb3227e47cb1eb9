"""GGUF files on the Hugging Face hub: list a repo's .gguf files (split -0000k-of-0000n parts
grouped) and read each header by HTTP range requests, never the tensor data."""

from __future__ import annotations

import re
from types import ModuleType
from typing import Callable, NamedTuple

from kvcalc.errors import HubError, NotFoundError

SPLIT = re.compile(r"^(?P<base>.*)-(?P<k>\d{5})-of-(?P<n>\d{5})\.gguf$", re.IGNORECASE)
FIRST_CHUNK = 256 << 10  # bytes of the first range request; each next one doubles up to 4 MiB (a header is 1-10 MB)


class GgufFile(NamedTuple):
    """One quant: its file, or the parts of a split file in order."""

    label: str  # Q4_K_M, or the file name when it carries no quant label
    paths: tuple[str, ...]
    size_bytes: int  # the files' total size as the hub lists it


def _hub() -> ModuleType:
    import contextlib
    import io

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            import huggingface_hub
    except ValueError as exc:
        raise HubError(f"huggingface_hub cannot start: {exc}") from None
    from huggingface_hub.utils import logging
    from huggingface_hub.utils.tqdm import disable_progress_bars

    logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    disable_progress_bars()
    return huggingface_hub


def group_files(files: list[tuple[str, int]]) -> list[GgufFile]:
    """Quants of a listing of (path, size): split parts joined; mmproj (vision projector) files left out."""
    from kvcalc.model.gguf.arch import quant_label

    groups: dict[str, list[tuple[str, int]]] = {}
    for path, size in files:
        name = path.rsplit("/", 1)[-1]
        if not name.lower().endswith(".gguf") or name.lower().startswith("mmproj"):
            continue
        m = SPLIT.match(path)
        groups.setdefault(m.group("base") if m else path, []).append((path, size))
    out = []
    for base, parts in groups.items():
        parts.sort()
        label = quant_label(base if base.lower().endswith(".gguf") else base + ".gguf") or base.rsplit("/", 1)[-1]
        out.append(GgufFile(label, tuple(p for p, _ in parts), sum(s for _, s in parts)))
    out.sort(key=lambda f: f.size_bytes)
    return out


def _reachable(repo: str, revision: str | None) -> None:
    """Fail in seconds when the hub does not answer: huggingface_hub's own retries of a connection
    error take ~24 s (kvcalc/model/hub.py probes config.json the same way, once, with a deadline)."""
    from kvcalc.model.hub import _TRANSIENT, _ask_hub, _offline, _probe_seconds

    if _offline():
        return  # list_repo_tree refuses at once
    from huggingface_hub.errors import HfHubHTTPError

    error = _ask_hub(repo, revision, _probe_seconds())
    status = getattr(getattr(error, "response", None), "status_code", None)
    if error is not None and (not isinstance(error, HfHubHTTPError) or status in _TRANSIENT):
        why = (
            "did not answer in time"
            if isinstance(error, TimeoutError)
            else f"could not be reached ({type(error).__name__})"
        )
        raise HubError(f"{repo}: the hub {why}", hint="a local .gguf file needs no network")


def list_gguf(repo: str, revision: str | None) -> list[GgufFile]:
    hf = _hub()
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    _reachable(repo, revision)
    try:
        entries = hf.HfApi().list_repo_tree(repo, recursive=True, revision=revision)
        files = [(e.path, int(getattr(e, "size", 0) or 0)) for e in entries if e.path.lower().endswith(".gguf")]
    except GatedRepoError:
        raise HubError(f"{repo} is a gated repository: access needs approval and a token") from None
    except RevisionNotFoundError:
        raise NotFoundError(f"revision '{revision}' of {repo} does not exist on the hub") from None
    except RepositoryNotFoundError:
        raise NotFoundError(f"{repo} is not a repository on the hub (or it is private)") from None
    except HfHubHTTPError as exc:
        raise HubError(f"{repo}: the hub answered: {str(exc).splitlines()[0]}") from None
    except hf.errors.OfflineModeIsEnabled:
        raise HubError(
            f"{repo}: offline mode is on (HF_HUB_OFFLINE) and GGUF headers are read from the hub, not cached",
            hint="pass a local .gguf file, or go online",
        ) from None
    except OSError as exc:  # a network error: httpx's ConnectError and kin
        raise HubError(f"{repo}: the hub could not be reached ({type(exc).__name__})") from None
    except Exception as exc:  # noqa: BLE001  (httpx errors are not OSErrors)
        if type(exc).__module__.startswith(("httpx", "httpcore")):
            raise HubError(f"{repo}: the hub could not be reached ({type(exc).__name__})") from None
        raise
    quants = group_files(files)
    if not quants:
        raise NotFoundError(f"{repo} holds no .gguf files", hint="a repository of GGUF quants, e.g. org/Model-GGUF")
    return quants


def range_fetcher(repo: str, path: str, revision: str | None) -> Callable[[int, int], bytes]:
    """fetch(start, length) by HTTP Range on the file's resolve URL (redirects followed)."""
    hf = _hub()
    from huggingface_hub.utils._headers import build_hf_headers
    from huggingface_hub.utils._http import get_session

    url = hf.hf_hub_url(repo, path, revision=revision)
    session = get_session()

    def fetch(start: int, length: int) -> bytes:
        headers = build_hf_headers()
        headers["Range"] = f"bytes={start}-{start + length - 1}"
        try:
            r = session.get(url, headers=headers, follow_redirects=True)
        except Exception as exc:  # noqa: BLE001
            raise HubError(f"{repo}/{path}: the hub could not be reached ({type(exc).__name__})") from None
        if r.status_code == 416:
            return b""
        if r.status_code in (401, 403):
            raise HubError(
                f"{repo}: the hub refused access (HTTP {r.status_code})", hint="`hf auth login` or set HF_TOKEN"
            )
        if r.status_code == 404:
            raise NotFoundError(f"{repo} has no file {path}")
        if r.status_code == 200:  # the server ignored Range: keep the part asked for
            return bytes(r.content[start : start + length])
        if r.status_code != 206:
            raise HubError(f"{repo}/{path}: the hub answered HTTP {r.status_code}")
        return bytes(r.content)

    return fetch
