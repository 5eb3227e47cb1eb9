"""Hugging Face addresses people paste, read as a hub id: https://huggingface.co/ORG/NAME, with
/tree/REV, /blob/REV/config.json or /resolve/REV/config.json, becomes ORG/NAME@REV."""

from __future__ import annotations

from kvcalc.errors import UsageError

HOSTS = ("huggingface.co", "hf.co", "www.huggingface.co")
KINDS = ("tree", "blob", "resolve")  # the hub's page, file and download routes


def hub_id(text: str) -> str:
    """ORG/NAME[@REV] for a hub URL; any other text unchanged. Refuses a URL kvcalc cannot read
    (a dataset or Space, a file other than config.json) in one line."""
    from urllib.parse import unquote, urlsplit

    if "://" in text:
        url = urlsplit(text)
        if url.scheme not in ("http", "https"):
            return text
        host, route = url.netloc.lower(), url.path
    elif text.lower().startswith(tuple(h + "/" for h in HOSTS)):
        host, _, route = text.partition("/")
        host, route = host.lower(), "/" + route
    else:
        return text
    if host not in HOSTS:
        return text
    parts = [unquote(p) for p in route.split("/") if p]
    if parts and parts[0] in ("datasets", "spaces"):
        raise UsageError(f"{text} is a hub {parts[0][:-1]}, not a model", hint="paste a model's address")
    if len(parts) < 2:
        raise UsageError(f"{text} names no model repository", hint="e.g. https://huggingface.co/ORG/NAME")
    repo = f"{parts[0]}/{parts[1]}"
    if len(parts) == 2:
        return repo
    kind, rest = parts[2], parts[3:]
    if kind not in KINDS or not rest:
        raise UsageError(
            f"{text}: kvcalc reads a model repository's config.json",
            hint=f"paste https://huggingface.co/{repo}, or its /tree/REVISION",
        )
    revision, path = rest[0], "/".join(rest[1:])
    if kind != "tree" and path != "config.json":
        raise UsageError(
            f"{text} points at {path or 'no file'}; kvcalc reads config.json",
            hint=f"paste https://huggingface.co/{repo}/blob/{revision}/config.json or the repository",
        )
    return f"{repo}@{revision}"
