"""The plain YAML that preset files are written in, read without importing PyYAML.

Importing PyYAML costs about 8 ms, a sixth of what `kvcalc cache` adds to a bare Typer app
(benchmarks/startup.py), to read one small file. Preset files use a narrow, regular subset:
top-level `key: value` lines whose values are JSON-like scalars or flow collections, and one level
of block list (`- item`) or block mapping under a bare `key:`. `load` reads exactly that subset and
returns what `yaml.safe_load` returns for it; for anything else it returns None, and the caller
parses the text with PyYAML (which also reports the errors). Exact or nothing: a form whose
YAML 1.1 meaning differs from JSON's (`1e3` is a string to PyYAML, `yes` a boolean, `0o7` and
`1:30` numbers, escapes, anchors, single quotes) is never read here.
"""

from __future__ import annotations

import re
from typing import Any

# Bare (plain) scalars read here, with PyYAML's meaning: decimal ints (YAML 1.1 allows `_`), floats
# with a dot and an optional signed exponent (PyYAML's float rule), and three words.
_INT = re.compile(r"-?(?:0|[1-9][0-9_]*)")
_FLOAT = re.compile(r"-?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+][0-9]+)?")
_WORDS = {"true": True, "false": False, "null": None}
_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*):(?:[ ]+(.*))?")
_COMMENT_TAIL = re.compile(r"\s*(?:\s#.*)?")
# Keys that YAML 1.1 resolves to booleans or null rather than strings.
_WORD_KEYS = {"yes", "no", "on", "off", "true", "false", "null"}
# One token of a flow value: a double-quoted string without escapes (YAML's and JSON's escape sets
# differ), a flow indicator, or a bare run read by the scalar rules above (anything else refuses).
MAX_DEPTH = 16  # presets nest flow values 3 deep (checkpoint: quantization: linear)
_FLOW_TOKEN = re.compile(r' *(?:("[^"\\]*")|([][{},:])|([-+.\w]+))')


class _NotPlain(Exception):
    """The text leaves the subset: PyYAML reads it."""


def _scalar(text: str) -> object:
    """One value with an optional trailing ` # comment`."""
    if text[:1] in ('"', "[", "{"):
        value, end = _flow(text, 0)
        if not _COMMENT_TAIL.fullmatch(text[end:]):
            raise _NotPlain
        return value
    token, _, rest = text.partition(" ")
    if rest and not _COMMENT_TAIL.fullmatch(" " + rest):
        raise _NotPlain
    return _bare(token)


def _bare(token: str) -> object:
    """An unquoted int, float or one of three words, as PyYAML resolves it."""
    if token in _WORDS:
        return _WORDS[token]
    if _INT.fullmatch(token):
        return int(token.replace("_", ""))
    if _FLOAT.fullmatch(token):
        return float(token.replace("_", ""))
    raise _NotPlain


def _token(text: str, pos: int) -> tuple[str | None, str | None, str | None, int]:
    m = _FLOW_TOKEN.match(text, pos)
    if not m:
        raise _NotPlain
    string, punct, bare = m.groups()
    return string, punct, bare, m.end()


def _flow(text: str, pos: int, depth: int = 0) -> tuple[object, int]:
    """The value starting at text[pos] and where it ends. JSON's shapes only: a "string", a bare
    scalar, a [list] or a {"key": mapping} of these, comma-separated with no trailing comma (the
    JSON-compatible part of YAML's flow style; PyYAML reads the rest). At most MAX_DEPTH levels
    deep: deeper is left to PyYAML, which refuses it cleanly, where recursing here would not."""
    if depth >= MAX_DEPTH:
        raise _NotPlain
    string, punct, bare, pos = _token(text, pos)
    if string is not None:
        return string[1:-1], pos
    if bare is not None:
        return _bare(bare), pos
    if punct not in ("[", "{"):
        raise _NotPlain
    close = "]" if punct == "[" else "}"
    items: list[Any] = []
    pairs: dict[str, Any] = {}
    _, first, _, after = _token(text, pos)
    if first == close:
        return (items if punct == "[" else pairs), after
    while True:
        if punct == "[":
            value, pos = _flow(text, pos, depth + 1)
            items.append(value)
        else:
            key, _, _, pos = _token(text, pos)
            _, colon, _, pos = _token(text, pos)
            if key is None or colon != ":" or key[1:-1] in pairs:
                raise _NotPlain  # keys are quoted strings, each once
            pairs[key[1:-1]], pos = _flow(text, pos, depth + 1)
        _, punct_after, _, pos = _token(text, pos)
        if punct_after == close:
            return (items if punct == "[" else pairs), pos
        if punct_after != ",":
            raise _NotPlain


def _block(lines: list[str]) -> list[Any] | dict[str, Any]:
    """The indented lines under a bare `key:`: all `- item` (a list) or all `key: value` (a mapping)."""
    indent = len(lines[0]) - len(lines[0].lstrip(" "))
    if any(len(line) - len(line.lstrip(" ")) != indent for line in lines):
        raise _NotPlain
    items = [line[indent:] for line in lines]
    if all(item.startswith("- ") for item in items):
        return [_scalar(item[2:].lstrip(" ")) for item in items]
    out: dict[str, Any] = {}
    for item in items:
        m = _KEY.fullmatch(item)
        if not m or not m.group(2) or m.group(1) in out or m.group(1).lower() in _WORD_KEYS:
            raise _NotPlain
        out[m.group(1)] = _scalar(m.group(2))
    return out


def _parse(text: str) -> dict[str, Any]:
    lines = text.split("\n")
    # NOTE: str.isprintable refuses more than YAML does (tabs, controls, also no-break spaces and
    # format characters): those files go to PyYAML, which also reports what it refuses itself.
    if not all(line.isprintable() for line in lines):
        raise _NotPlain
    data: dict[str, Any] = {}
    key: str | None = None  # a bare `key:` whose block is being collected
    block: list[str] = []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#") or not stripped:
            continue
        if line[0] == " ":
            if key is None:
                raise _NotPlain
            block.append(line.rstrip(" "))
            continue
        if key is not None:
            if not block:
                raise _NotPlain  # `key:` alone is null to YAML; not written in presets
            data[key], key, block = _block(block), None, []
        m = _KEY.fullmatch(line.rstrip(" "))
        if not m or m.group(1) in data or m.group(1).lower() in _WORD_KEYS:
            raise _NotPlain
        value = m.group(2)
        if value is None or value.startswith("#"):
            key = m.group(1)
        else:
            data[m.group(1)] = _scalar(value)
    if key is not None:
        if not block:
            raise _NotPlain
        data[key] = _block(block)
    if not data:
        raise _NotPlain  # an empty file is null to YAML
    return data


def load(text: str) -> dict[str, Any] | None:
    """The mapping `yaml.safe_load(text)` gives, when text is in the plain subset; else None."""
    try:
        return _parse(text)
    except _NotPlain:
        return None
