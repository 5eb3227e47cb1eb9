"""Lazy, strict loading of the model and GPU presets shipped in the package."""

from __future__ import annotations

import difflib
from functools import lru_cache
from importlib.resources import files
from importlib.resources.abc import Traversable

from kvcalc.errors import NotFoundError, SpecError
from kvcalc.specs import GpuSpec, ModelSpec, build

MODEL_DIR, GPU_DIR = "model_presets", "gpu_presets"


def _folder(kind: str) -> Traversable:
    return files("kvcalc") / kind


def preset_names(kind: str) -> list[str]:
    """File stems, without parsing any YAML."""
    return sorted(p.name[:-5] for p in _folder(kind).iterdir() if p.name.endswith(".yaml"))


def _load_yaml(path: Traversable, where: str) -> object:
    import yaml  # NOTE: imported here so that commands which read no preset never pay for it

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise SpecError(f"{where}: malformed YAML{at}: {getattr(exc, 'problem', exc)}") from None


@lru_cache(maxsize=None)
def _load(kind: str, stem: str) -> ModelSpec | GpuSpec:
    path = _folder(kind) / f"{stem}.yaml"
    where = f"{kind}/{stem}.yaml"
    data = _load_yaml(path, where)
    if not isinstance(data, dict):
        raise SpecError(f"{where}: expected a mapping of fields, got {type(data).__name__}")
    data.setdefault("name", stem)
    spec = build(ModelSpec if kind == MODEL_DIR else GpuSpec, data, where)
    if spec.name != stem:
        raise SpecError(f"{where}: name '{spec.name}' must match the file name '{stem}'")
    return spec


def load_all(kind: str) -> list[ModelSpec] | list[GpuSpec]:
    return [_load(kind, stem) for stem in preset_names(kind)]


@lru_cache(maxsize=None)
def _alias_index(kind: str) -> dict[str, str]:
    return {alias.lower(): spec.name for spec in load_all(kind) for alias in spec.aliases}


def find(kind: str, name: str) -> ModelSpec | GpuSpec | None:
    """A preset by file name (fast: one file) or by alias (loads all), case-insensitively."""
    key = name.strip().lower()
    if key in preset_names(kind):
        return _load(kind, key)
    stem = _alias_index(kind).get(key)
    return _load(kind, stem) if stem else None


def suggestions(kind: str, name: str) -> list[str]:
    key = name.strip().lower()
    names = preset_names(kind)
    candidates = names + list(_alias_index(kind))
    close = difflib.get_close_matches(key, candidates, n=3, cutoff=0.5)
    close += [n for n in names if key and (key in n or n in key) and n not in close]
    return list(dict.fromkeys(_alias_index(kind).get(c, c) for c in close))[:4]


def _missing(kind: str, name: str) -> NotFoundError:
    what = "model" if kind == MODEL_DIR else "GPU"
    close = suggestions(kind, name)
    hint = f"did you mean: {', '.join(close)}?" if close else f"`kvcalc {what.lower()}s` lists them"
    return NotFoundError(f"unknown {what} '{name}'", hint=hint)


def get_model(name: str) -> ModelSpec:
    spec = find(MODEL_DIR, name)
    if spec is None:
        raise _missing(MODEL_DIR, name)
    return spec


def get_gpu(name: str) -> GpuSpec:
    spec = find(GPU_DIR, name)
    if spec is None:
        raise _missing(GPU_DIR, name)
    return spec
