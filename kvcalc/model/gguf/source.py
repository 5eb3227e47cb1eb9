"""MODEL text -> a GGUF model: a local .gguf (split parts read too) or a hub repo's quant (`org/repo:Q4_K_M`)."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import NamedTuple

from kvcalc.errors import NotFoundError, UsageError
from kvcalc.model.gguf.hub import SPLIT, GgufFile
from kvcalc.model.gguf.reader import Header, Tensor
from kvcalc.model.spec import ModelSpec

HUB_REF = r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+?)(?:@(?P<rev>[\w./-]+?))?(?::(?P<quant>[\w.-]+))?$"
PREFERRED = ("Q4_K_M", "UD-Q4_K_XL", "Q4_K_S", "Q5_K_M", "Q8_0", "MXFP4", "F16", "BF16")


class GgufModel(NamedTuple):
    spec: ModelSpec
    tensors: list[Tensor]  # every part's table
    label: str | None  # the quant: Q4_K_M
    location: str
    file_bytes: int  # sum of the parts' sizes (local: on disk; hub: as listed)
    header_bytes_read: int


def is_gguf_ref(text: str) -> bool:
    """A .gguf path, `org/repo:QUANT`, or a hub repo whose name says GGUF."""
    low = text.lower().partition("@")[0]
    if low.endswith(".gguf"):
        return True
    m = re.match(HUB_REF, text)
    return bool(m and (m.group("quant") or "gguf" in m.group("repo").lower()))


def _model(headers: list[Header], name: str, location: str, size: int) -> GgufModel:
    from kvcalc.model.gguf.arch import quant_label, spec_from_gguf

    tensors = [t for h in headers for t in h.tensors]
    spec = spec_from_gguf(headers[0], name, tensors)
    return GgufModel(spec, tensors, quant_label(name, headers[0]), location, size, sum(h.bytes_read for h in headers))


def _parts(path: Path) -> list[Path]:
    m = SPLIT.match(path.name)
    if not m:
        return [path]
    n = int(m.group("n"))
    parts = [path.with_name(f"{m.group('base')}-{k:05d}-of-{n:05d}.gguf") for k in range(1, n + 1)]
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        raise NotFoundError(f"{path}: split GGUF part(s) missing beside it: {', '.join(missing)}")
    return parts


def open_local(text: str) -> GgufModel:
    """A local file's model; read once per process while the file (and its parts) stay unchanged."""
    path = Path(text).expanduser()
    parts = _parts(path)
    stamp = tuple((p.stat().st_mtime_ns, p.stat().st_size) for p in parts)
    return _open_local(str(path), tuple(str(p) for p in parts), stamp)


@functools.lru_cache(maxsize=8)
def _open_local(path: str, parts: tuple[str, ...], stamp: tuple[tuple[int, int], ...]) -> GgufModel:
    from kvcalc.model.gguf.reader import read_local

    headers = [read_local(p) for p in parts]
    return _model(headers, Path(path).name, path, sum(size for _, size in stamp))


def pick(quants: list[GgufFile], want: str | None, repo: str) -> GgufFile:
    if want is None:
        by_label = {q.label.upper(): q for q in quants}
        return next((by_label[p] for p in PREFERRED if p in by_label), quants[len(quants) // 2])
    w = want.upper()
    found = [q for q in quants if q.label.upper() == w] or [q for q in quants if w in q.label.upper()]
    if len(found) != 1:
        labels = ", ".join(q.label for q in quants)
        what = "no quant" if not found else "several quants"
        raise NotFoundError(f"{repo} has {what} matching '{want}'", hint=f"its quants: {labels}")
    return found[0]


@functools.lru_cache(maxsize=64)
def open_hub(repo: str, revision: str | None, quant: GgufFile) -> GgufModel:
    from kvcalc.model.gguf.hub import FIRST_CHUNK, range_fetcher
    from kvcalc.model.gguf.reader import read_header

    headers = [read_header(range_fetcher(repo, p, revision), f"{repo}/{p}", FIRST_CHUNK) for p in quant.paths]
    at = f"{repo}@{revision}" if revision else repo
    m = _model(headers, quant.paths[0].rsplit("/", 1)[-1], f"{at}:{quant.label}", quant.size_bytes)
    return m._replace(spec=m.spec.model_copy(update={"name": f"{repo}:{quant.label}"}), label=quant.label)


def hub_listing(text: str) -> tuple[str, str | None, str | None, list[GgufFile]]:
    """(repo, revision, quant asked in the text, the repo's quants)."""
    from kvcalc.model.gguf.hub import list_gguf

    m = re.match(HUB_REF, text)
    if not m:
        raise UsageError(f"'{text}' is not a hub repository id (org/name, optionally :QUANT)")
    return m.group("repo"), m.group("rev"), m.group("quant"), list_gguf(m.group("repo"), m.group("rev"))


def open_gguf(text: str, quant: str | None = None) -> GgufModel:
    """One GGUF model: a local file, or a hub repo's quant (text's :QUANT, else `quant`, else Q4_K_M or the middle size)."""
    if text.lower().endswith(".gguf") or Path(text).expanduser().is_file():
        path = Path(text).expanduser()
        if not path.is_file():
            raise NotFoundError(f"no such file: {text}")
        return open_local(str(path))
    repo, rev, in_text, quants = hub_listing(text)
    if in_text and quant and in_text.upper() != quant.upper():
        raise UsageError(f"{text} names quant {in_text} but --quant says {quant}")
    return open_hub(repo, rev, pick(quants, in_text or quant, repo))
