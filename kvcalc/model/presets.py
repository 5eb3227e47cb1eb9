"""Lazy, strict loading of presets: shipped in the package, in the user's folder, or a YAML file by path.

A name resolves to one file through its stem or an alias index built from each file's `aliases:`
lines alone; only that one file is parsed and validated. A user preset never shadows a built-in
one: a name claimed by both is refused with the user file named (README, "Your own presets").
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, NamedTuple

from kvcalc.errors import NotFoundError, SpecError, UsageError
from kvcalc.model import presetyaml as presetyaml
from kvcalc.model.spec import ModelSpec
from kvcalc.model.validate import build

if TYPE_CHECKING:  # kvcalc/gpu.py is imported where a GPU is read, not by `kvcalc cache MODEL`
    from kvcalc.hardware.gpu import GpuSpec
    from kvcalc.model.named import Named

MODEL_DIR, GPU_DIR = "model_presets", "gpu_presets"
USER_SUBDIRS = {MODEL_DIR: "models", GPU_DIR: "gpus"}
SUFFIXES = (".yaml", ".yml")
# NOTE: patterns as strings, compiled by re on first use: a run that names a preset by its file never needs them.
NAME = r"^[a-z0-9][a-z0-9._-]*$"


class Found(NamedTuple):
    spec: ModelSpec | GpuSpec
    origin: str  # built-in | user | file
    location: str


# --- where presets live ------------------------------------------------------------------


def _folder(kind: str) -> Path:
    # NOTE: the package's own folder, as importlib.resources.files("kvcalc") gives for an installed
    # (unzipped) package, without importing importlib.resources at every start.
    return Path(__file__).parent.parent / kind


def user_dir() -> Path:
    """$KVCALC_PRESETS, else the platform's config folder for kvcalc (no dependency for it)."""
    if os.environ.get("KVCALC_PRESETS"):
        return Path(os.environ["KVCALC_PRESETS"]).expanduser()
    if os.name == "nt":
        base = os.environ.get("APPDATA") or str(Path.home() / "AppData" / "Roaming")
        return Path(base) / "kvcalc"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "kvcalc"
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "kvcalc"


def user_folder(kind: str) -> Path:
    return user_dir() / USER_SUBDIRS[kind]


def preset_names(kind: str) -> list[str]:
    """The built-in presets' file stems, without parsing any YAML."""
    return sorted(p.name[:-5] for p in _folder(kind).iterdir() if p.name.endswith(".yaml"))


def _user_files(kind: str) -> dict[str, Path]:
    """Stem (lower case, as names are looked up) -> file, listed afresh each call (cheap: one listdir)."""
    folder = user_folder(kind)
    if not folder.is_dir():
        return {}
    out: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        if path.suffix.lower() in SUFFIXES and path.is_file():
            out.setdefault(path.stem.lower(), path)
    return out


def all_names(kind: str) -> list[str]:
    """Built-in and user preset names, for shell completion: file listings only, no YAML parsed."""
    return sorted(set(preset_names(kind)) | set(_user_files(kind)))


# --- reading ------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _strict_loader() -> type:
    """PyYAML's safe loader, refusing a key given twice: PyYAML keeps the last silently, so a copied
    preset with `num_kv_heads: 4` appended would quietly replace the 8 above it (or not, if the
    copy was made the other way round)."""
    import yaml

    class Strict(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]  # C loader when built
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[object] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *base` merges keys that this mapping may override: not a repeat
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: PyYAML's own error follows
                    continue
                if duplicate:
                    raise yaml.constructor.ConstructorError(None, None, f"'{key}' is given twice", key_node.start_mark)
            return super().construct_mapping(node, deep)

    return Strict


def _yaml_text(text: str, where: str) -> object:
    plain = presetyaml.load(text)  # the shipped presets' plain subset, exactly, without PyYAML's 8 ms
    if plain is not None:
        return plain
    import yaml  # NOTE: imported here so that commands which read no preset never pay for it

    try:
        return yaml.load(text, Loader=_strict_loader())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise SpecError(f"{where}: malformed YAML{at}: {getattr(exc, 'problem', exc)}") from None


def _read(path: Path, where: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{where}: cannot be read: {exc}") from None


def _schema(kind: str) -> type[ModelSpec | GpuSpec]:
    if kind == MODEL_DIR:
        return ModelSpec
    from kvcalc.hardware.gpu import GpuSpec

    return GpuSpec


def _validate(kind: str, text: str, stem: str, where: str, strict_name: bool) -> ModelSpec | GpuSpec:
    data = _yaml_text(text, where)
    if not isinstance(data, dict):
        raise SpecError(f"{where}: expected a mapping of fields, got {type(data).__name__}")
    data.setdefault("name", stem)
    spec = build(_schema(kind), data, where)
    if strict_name and spec.name.lower() != stem:
        raise SpecError(f"{where}: name '{spec.name}' must match the file name '{stem}'")
    return spec


@lru_cache(maxsize=None)
def _load(kind: str, stem: str) -> ModelSpec | GpuSpec:
    where = f"{kind}/{stem}.yaml"
    return _validate(kind, _read(_folder(kind) / f"{stem}.yaml", where), stem, where, strict_name=True)


@lru_cache(maxsize=64)
def _load_path(kind: str, path: str, mtime_ns: int, strict_name: bool) -> ModelSpec | GpuSpec:
    # NOTE: keyed on the modification time, so a file rewritten in the same process is read again.
    p = Path(path)
    return _validate(kind, _read(p, path), p.stem.lower() if strict_name else p.stem, path, strict_name)


def _load_file(kind: str, path: Path, strict_name: bool) -> ModelSpec | GpuSpec:
    return _load_path(kind, str(path), path.stat().st_mtime_ns, strict_name)


_ALIASES = r"^aliases\s*:.*(?:\n(?:[ \t]+.*|-.*))*"


@lru_cache(maxsize=None)
def _aliases_in(text: str) -> tuple[str, ...]:
    """The `aliases:` entry of a preset's text, parsed alone: the rest of the file is not read."""
    m = re.search(_ALIASES, text, re.MULTILINE)
    if not m:
        return ()
    try:
        value = _yaml_text(m.group(0), "aliases")
    except SpecError:
        return ()  # the file's own error surfaces when it is loaded by name
    aliases = value.get("aliases") if isinstance(value, dict) else None
    return tuple(str(a).strip().lower() for a in aliases) if isinstance(aliases, list) else ()


def _builtin_texts(kind: str) -> Iterator[tuple[str, str]]:
    """(stem, text) of each built-in preset, in name order, read as it is asked for."""
    folder = _folder(kind)
    for stem in preset_names(kind):
        yield stem, (folder / f"{stem}.yaml").read_text(encoding="utf-8")


@lru_cache(maxsize=None)
def _alias_index(kind: str) -> dict[str, str]:
    index: dict[str, str] = {}
    for stem, text in _builtin_texts(kind):
        for alias in _aliases_in(text):
            index.setdefault(alias, stem)
    return index


def _alias_stem(kind: str, key: str) -> str | None:
    """The built-in preset whose aliases include `key` (the first, in name order, as in _alias_index).
    Files whose text does not contain the key are not parsed: shipped presets are plain YAML without
    escapes (tests/test_presetyaml.py), so an alias appears in its file as written."""
    for stem, text in _builtin_texts(kind):
        if key in text.lower() and key in _aliases_in(text):
            return stem
    return None


def _user_alias_index(kind: str) -> dict[str, str]:
    index: dict[str, str] = {}
    for stem, path in _user_files(kind).items():
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for alias in _aliases_in(text):
            index.setdefault(alias, stem)
    return index


def _builtin_names(kind: str) -> set[str]:
    return set(preset_names(kind)) | set(_alias_index(kind))


def _clash(kind: str, user_stem: str, name: str) -> SpecError:
    what = "model" if kind == MODEL_DIR else "GPU"
    path = _user_files(kind)[user_stem]
    return SpecError(
        f"user {what} preset {path} claims '{name}', which is a built-in {what} preset",
        hint="a user preset needs a name and aliases of its own: rename the file or drop that alias",
    )


# --- lookup -------------------------------------------------------------------------------


def _no_file(path: Path, text: str) -> NotFoundError:
    folder = path.parent
    if not folder.is_dir():
        return NotFoundError(f"no such preset file: {text}", hint=f"folder '{folder}' does not exist")
    close = difflib.get_close_matches(path.name, [p.name for p in folder.iterdir() if p.suffix in SUFFIXES], n=3)
    hint = "did you mean: " + ", ".join(str(folder / c) for c in close) + "?" if close else None
    return NotFoundError(f"no such preset file: {text}", hint=hint)


def is_preset_file(text: str) -> bool:
    return text.strip().lower().endswith(SUFFIXES)


def locate(kind: str, name: str) -> Found | None:
    """A preset by path (FILE.yaml), file stem or alias, built-in or user, case-insensitively.
    Reads one preset file (plus the alias lines when the name is not a stem)."""
    text = name.strip()
    if is_preset_file(text):
        path = Path(text).expanduser()
        if not path.is_file():
            raise _no_file(path, text)
        return Found(_load_file(kind, path, strict_name=False), "file", str(path))
    key = text.lower()
    builtin = key if key in preset_names(kind) else None
    users = _user_files(kind)
    user = key if key in users else None
    if builtin is None:
        builtin = _alias_stem(kind, key)
    if user is None:
        user = _user_alias_index(kind).get(key)
    if user is not None and builtin is not None:
        raise _clash(kind, user, text)
    if builtin is not None:
        return Found(_load(kind, builtin), "built-in", f"{kind}/{builtin}.yaml")
    if user is not None:
        spec = _load_file(kind, users[user], strict_name=True)
        taken = sorted({spec.name.lower(), *(a.lower() for a in spec.aliases)} & _builtin_names(kind))
        if taken:
            raise _clash(kind, user, taken[0])
        return Found(spec, "user", str(users[user]))
    return None


def find(kind: str, name: str) -> ModelSpec | GpuSpec | None:
    found = locate(kind, name)
    return found.spec if found else None


def load_all(kind: str) -> list[ModelSpec | GpuSpec]:
    """Every built-in preset, validated (for listings and tests)."""
    return [_load(kind, stem) for stem in preset_names(kind)]


def listing(kind: str) -> list[Found]:
    """Built-in presets, then the user's; a user preset claiming a built-in name is refused."""
    out = [Found(_load(kind, stem), "built-in", f"{kind}/{stem}.yaml") for stem in preset_names(kind)]
    taken = _builtin_names(kind)
    for stem, path in _user_files(kind).items():
        spec = _load_file(kind, path, strict_name=True)
        clashes = sorted({stem, *(a.lower() for a in spec.aliases)} & taken)
        if clashes:
            raise _clash(kind, stem, clashes[0])
        out.append(Found(spec, "user", str(path)))
    return out


def suggestions(kind: str, name: str) -> list[str]:
    key = name.strip().lower()
    names = all_names(kind)
    aliases = {**_user_alias_index(kind), **_alias_index(kind)}
    close = difflib.get_close_matches(key, names + list(aliases), n=3, cutoff=0.5)
    close += [n for n in names if key and (key in n or n in key) and n not in close]
    return list(dict.fromkeys(aliases.get(c, c) for c in close))[:4]


def _missing(kind: str, name: str) -> NotFoundError:
    what = "model" if kind == MODEL_DIR else "GPU"
    close = suggestions(kind, name)
    hint = f"did you mean: {', '.join(close)}?" if close else f"`kvcalc {what.lower()}s` lists them"
    return NotFoundError(f"unknown {what} '{name}'", hint=hint)


def by_name(text: str) -> Named | None:
    """A built-in preset plus a weight-format suffix (nvidia/Qwen3-32B-NVFP4): the base preset in that
    format (kvcalc/model/named.py), or None when the name is not one."""
    from kvcalc.model import named

    where = text.partition("@")[0].strip()
    parts = named.split(where)
    if parts is None:
        return None
    stem = named.base_stem(parts[0], parts[1], _alias_index(MODEL_DIR), preset_names(MODEL_DIR))
    if stem is None:
        return None
    spec = _load(MODEL_DIR, stem)
    return named.quantized(spec, f"{MODEL_DIR}/{stem}.yaml", parts[2], where) if isinstance(spec, ModelSpec) else None


def by_hub_name(name: str) -> Found | None:
    """The built-in model preset with a hub alias ORG/`name` for some org, when exactly one has: a hub
    name typed without its org (Llama-3.3-70B-Instruct for meta-llama/Llama-3.3-70B-Instruct). None
    otherwise; a name two presets share is never guessed."""
    from kvcalc.model import named

    key = name.strip().lower()
    if not key or "/" in key or "@" in key:
        return None
    stem = named.base_stem("", key, _alias_index(MODEL_DIR), [])
    return locate(MODEL_DIR, stem) if stem else None


def get_model(name: str) -> ModelSpec:
    spec = find(MODEL_DIR, name)
    if not isinstance(spec, ModelSpec):  # None: not found (the model kind only holds ModelSpecs)
        named = by_name(name)  # a quantized re-publication of a preset (named.py), under the base's name
        if named is None:
            found = by_hub_name(name)
            if found is None or not isinstance(found.spec, ModelSpec):
                raise _missing(MODEL_DIR, name)
            return found.spec
        return named.spec
    return spec


def get_gpu(name: str) -> GpuSpec:
    """A GPU preset by name, alias or file; else by how people spell it (`H100 SXM`, `NVIDIA A100-SXM4-80GB`,
    `h200_sxm`: hardware/names.py), kept only if the GPU found has the memory the name states."""
    from kvcalc.hardware.gpu import GpuSpec
    from kvcalc.hardware.names import same_memory, spellings

    spec = find(GPU_DIR, name)
    if isinstance(spec, GpuSpec):
        return spec
    if not is_preset_file(name.strip()):
        for spelling in spellings(name):
            spec = find(GPU_DIR, spelling.key)
            if isinstance(spec, GpuSpec) and same_memory(spelling.memory_bytes, spec.memory_bytes):
                return spec
    raise _missing(GPU_DIR, name)  # not found (the GPU kind only holds GpuSpecs)


# --- writing ------------------------------------------------------------------------------


def check_user_name(kind: str, name: str, replace: bool = False) -> Path:
    """The file a new user preset NAME would be written to; refuses built-in names and existing files."""
    what = "model" if kind == MODEL_DIR else "GPU"
    if not re.match(NAME, name):
        raise UsageError(
            f"preset name '{name}' is not a file stem", hint="lower-case letters, digits, '.', '_' and '-'"
        )
    if name in _builtin_names(kind):
        raise UsageError(f"'{name}' is a built-in {what} preset", hint="a user preset needs a name of its own")
    path = user_folder(kind) / f"{name}.yaml"
    if path.exists() and not replace:
        raise UsageError(f"user {what} preset {path} exists", hint="pick another name, or add --replace")
    return path


def save_user_preset(kind: str, name: str, data: dict[str, Any], header: str = "", replace: bool = False) -> Path:
    """Validate `data` as a preset and write it to the user folder as NAME.yaml; returns the path."""
    import yaml

    what = "model" if kind == MODEL_DIR else "GPU"
    path = check_user_name(kind, name, replace)
    build(_schema(kind), {"name": name, **data}, f"{what} preset '{name}'")
    path.parent.mkdir(parents=True, exist_ok=True)
    body = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=1000)
    path.write_text(header + body, encoding="utf-8")
    return path
