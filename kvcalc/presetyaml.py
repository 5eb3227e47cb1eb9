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

import json
import re

# Bare (plain) scalars read here, with PyYAML's meaning: decimal ints (YAML 1.1 allows `_`), floats
# with a dot and an optional signed exponent (PyYAML's float rule), and three words.
_INT = re.compile(r"-?(?:0|[1-9][0-9_]*)")
_FLOAT = re.compile(r"-?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+][0-9]+)?")
_WORDS = {"true": True, "false": False, "null": None}
_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*):(?:[ ]+(.*))?")
_COMMENT_TAIL = re.compile(r"\s*(?:\s#.*)?")
# Keys that YAML 1.1 resolves to booleans or null rather than strings.
_WORD_KEYS = {"yes", "no", "on", "off", "true", "false", "null"}
_DECODER = json.JSONDecoder(
    parse_constant=lambda name: _refuse(),  # NaN, Infinity: .nan/.inf in YAML
    parse_float=lambda text: float(text) if _FLOAT.fullmatch(text) else _refuse(),  # JSON 1e3 is YAML text
    object_pairs_hook=lambda pairs: dict(pairs) if len({k for k, _ in pairs}) == len(pairs) else _refuse(),
)


class _NotPlain(Exception):
    """The text leaves the subset: PyYAML reads it."""


def _refuse() -> None:
    raise _NotPlain


def _scalar(text: str) -> object:
    """One value with an optional trailing ` # comment`."""
    if text[:1] in ('"', "[", "{"):
        try:
            value, end = _DECODER.raw_decode(text)
        except ValueError:
            raise _NotPlain from None
        if "\\" in text[:end] or not _COMMENT_TAIL.fullmatch(text[end:]):
            raise _NotPlain  # escapes: YAML's and JSON's sets differ
        return value
    token, _, rest = text.partition(" ")
    if rest and not _COMMENT_TAIL.fullmatch(" " + rest):
        raise _NotPlain
    if token in _WORDS:
        return _WORDS[token]
    if _INT.fullmatch(token):
        return int(token.replace("_", ""))
    if _FLOAT.fullmatch(token):
        return float(token.replace("_", ""))
    raise _NotPlain


def _block(lines: list[str]) -> list | dict:
    """The indented lines under a bare `key:`: all `- item` (a list) or all `key: value` (a mapping)."""
    indent = len(lines[0]) - len(lines[0].lstrip(" "))
    if any(len(line) - len(line.lstrip(" ")) != indent for line in lines):
        raise _NotPlain
    items = [line[indent:] for line in lines]
    if all(item.startswith("- ") for item in items):
        return [_scalar(item[2:].lstrip(" ")) for item in items]
    out: dict = {}
    for item in items:
        m = _KEY.fullmatch(item)
        if not m or not m.group(2) or m.group(1) in out or m.group(1).lower() in _WORD_KEYS:
            raise _NotPlain
        out[m.group(1)] = _scalar(m.group(2))
    return out


def _parse(text: str) -> dict:
    lines = text.split("\n")
    # NOTE: str.isprintable refuses more than YAML does (tabs, controls, also no-break spaces and
    # format characters): those files go to PyYAML, which also reports what it refuses itself.
    if not all(line.isprintable() for line in lines):
        raise _NotPlain
    data: dict = {}
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


def load(text: str) -> dict | None:
    """The mapping `yaml.safe_load(text)` gives, when text is in the plain subset; else None."""
    try:
        return _parse(text)
    except _NotPlain:
        return None
