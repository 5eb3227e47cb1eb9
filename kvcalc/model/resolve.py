"""MODEL on the command line -> ModelSpec: a preset, a local config.json or folder, or a hub id."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, NamedTuple

from kvcalc.errors import HubError, NotFoundError, SpecError, UsageError
from kvcalc.model.presets import MODEL_DIR, locate, suggestions
from kvcalc.model.spec import LayerKind, LayerRun, ModelSpec

# NOTE: patterns as strings, compiled by re on first use: a run that names a preset never needs them.
HUB_ID = r"^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?$"


class Resolved(NamedTuple):
    spec: ModelSpec
    source: str  # preset | user preset | preset file | file | hub | cache | gguf | a named base's line (named.py)
    location: str


def _read_config(path: Path, name: str, source: str, overrides: dict[str, Any]) -> Resolved:
    import json

    from kvcalc.model.hf.reader import spec_from_config

    if _is_gguf(path):  # a GGUF file by another name (model.bin): its header, not JSON
        from kvcalc.model.gguf.source import open_local

        g = open_local(str(path))
        return Resolved(override(g.spec, overrides), "gguf", g.location)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise SpecError(f"{path}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except RecursionError:  # json's own limit on nesting: no config.json nests more than a few levels
        raise SpecError(f"{path}: not a model config: JSON nested too deeply to read") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: cannot be read: {exc}") from None
    # NOTE: a llama.cpp quant (--dtype q4_k_m) is no element type of the spec (apply_overrides): the reader
    # keeps the checkpoint's, and the cost layer prices the quant from the --dtype beside the spec
    read = {k: v for k, v in overrides.items() if k != "dtype" or not _is_ftype(v)}
    spec = spec_from_config(raw, name, str(path), read)
    if "images" in overrides or "encoder_seq" in overrides:
        spec = spec.with_changes(layer_pattern=_cross_tokens(spec, _per_layer(spec), overrides))
    return Resolved(spec, source, str(path))


def _is_gguf(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def _per_layer(spec: ModelSpec) -> list[LayerRun]:
    """The layers one run each, as a pattern of num_layers. NOTE: expanded_layers() repeats the
    pattern's runs with their counts kept (a `count: 3` run three times): as a pattern again, Llama
    3.2 Vision's 3 + 1 + 1 period became 11 per 5 layers and every --images was refused."""
    return [run.model_copy(update={"count": 1}) for run in spec.expanded_layers()]


def _is_ftype(dtype: str) -> bool:
    from kvcalc.model.gguf.mix import is_ftype  # NOTE: only for a --dtype: the GGUF tables are not on start-up's path

    return is_ftype(dtype)


def apply_overrides(spec: ModelSpec, overrides: dict[str, Any]) -> ModelSpec:
    """What-if overrides on a preset: --layers, --kv-heads, --head-dim, --window, --dtype."""
    changes: dict[str, Any] = {}
    if "layers" in overrides:
        changes["num_layers"] = overrides["layers"]
        changes["params"] = None
    if "kv_heads" in overrides:
        changes["num_kv_heads"] = overrides["kv_heads"]
        changes["layer_pattern"] = [r.model_copy(update={"kv_heads": None}) for r in spec.layer_pattern]
    if "head_dim" in overrides:
        changes["head_dim"] = overrides["head_dim"]
    if "dtype" in overrides and not _is_ftype(overrides["dtype"]):
        # NOTE: a llama.cpp quant (q4_k_m) is no element type of the spec: the cost layer prices it from
        # the --dtype passed beside the spec (model/gguf/mix.py), as the calibration does.
        changes["dtype"], changes["expert_dtype"] = overrides["dtype"], None
    if "images" in overrides or "encoder_seq" in overrides:
        changes["layer_pattern"] = _cross_tokens(spec, changes.get("layer_pattern") or _per_layer(spec), overrides)
    if "window" in overrides:
        w = overrides["window"]
        runs = changes.get("layer_pattern", spec.layer_pattern)
        if any(r.kind == LayerKind.SLIDING for r in runs):
            runs = [r.model_copy(update={"window_tokens": w}) if r.kind == LayerKind.SLIDING else r for r in runs]
        else:
            base = runs or [spec.expanded_layers()[0]]
            runs = [
                r.model_copy(update={"kind": LayerKind.SLIDING, "window_tokens": w}) if r.kind == LayerKind.FULL else r
                for r in base
            ]
        changes["layer_pattern"] = runs
    return spec.with_changes(**changes) if changes else spec


# NOTE: a name ending in a letters-only suffix (.json, .jsn, .yaml, .txt) is a file name; hub repo
# names carry version dots followed by digits (Qwen2.5-7B, Mistral-7B-v0.1, gpt-neo-1.3B).
FILE_SUFFIX = r"\.[A-Za-z]{2,5}$"


def _looks_like_path(text: str) -> bool:
    """A path (with a typo) rather than a hub id: a file suffix, a separator a hub id cannot have,
    or an org/ part that is a folder here."""
    if text.startswith((".", "/", "~")) or "\\" in text or re.search(FILE_SUFFIX, text.partition("@")[0]):
        return True
    if not re.match(HUB_ID, text):
        return "/" in text
    return Path(text.partition("/")[0]).is_dir()


def _missing_path(text: str) -> NotFoundError:
    import difflib

    path = Path(text).expanduser()
    folder = path.parent
    hint = None
    if folder.is_dir():
        try:
            names = [p.name for p in folder.iterdir()]
        except OSError:
            names = []
        close = difflib.get_close_matches(path.name, names, n=3, cutoff=0.6)
        if close:
            hint = "did you mean: " + ", ".join(str(folder / c) for c in close) + "?"
    else:
        hint = f"folder '{folder}' does not exist"
    return NotFoundError(f"no such file or folder: {text}", hint=hint)


def _refuse_meaningless(spec: ModelSpec, overrides: dict[str, Any]) -> None:
    """What-if overrides that would be silently ignored are refused, with the reason."""
    kinds = {run.kind for run, _ in spec.layer_groups()}
    if LayerKind.MLA in kinds:
        latent = f"a latent of kv_lora_rank + qk_rope_head_dim = {spec.kv_lora_rank} + {spec.qk_rope_head_dim}"
        if "kv_heads" in overrides:
            raise UsageError(
                f"--kv-heads has no meaning for {spec.name}: its MLA cache holds {latent} elements per token, not KV heads",
                hint="compare MLA with GQA by `kvcalc compare` variants, e.g. gqa:8 mla",
            )
        if "window" in overrides:
            raise UsageError(
                f"--window has no meaning for {spec.name}: its MLA latent layers keep every token",
                hint="a sliding window needs full or sliding attention layers",
            )
    if "window" in overrides and not kinds & {LayerKind.SLIDING, LayerKind.CHUNKED}:
        raise UsageError(f"--window has no meaning for {spec.name}: it has no attention layer a window could bound")


def _cross_tokens(spec: ModelSpec, runs: list[LayerRun], overrides: dict[str, Any]) -> list[LayerRun]:
    """--images N (N x the model's tokens per image) or --encoder-seq on cross-attention layers."""
    if not any(r.kind == LayerKind.CROSS for r in runs):
        raise UsageError(f"model '{spec.name}' has no cross-attention layers: --images / --encoder-seq do not apply")
    if "images" in overrides:
        if spec.image_tokens is None:
            raise UsageError(f"model '{spec.name}' does not cross-attend to images", hint="use --encoder-seq")
        tokens = overrides["images"] * spec.image_tokens
    else:
        tokens = overrides["encoder_seq"]
    return [r.model_copy(update={"cross_tokens": tokens}) if r.kind == LayerKind.CROSS else r for r in runs]


def override(spec: ModelSpec, overrides: dict[str, Any]) -> ModelSpec:
    """apply_overrides, refusing what-ifs that would be ignored (a spec from a preset or from Python)."""
    if "kv_heads" in overrides:
        _refuse_meaningless(spec, {"kv_heads": overrides["kv_heads"]})  # before the heads are replaced
    try:
        changed = apply_overrides(spec, overrides)
    except SpecError as exc:  # a what-if the model cannot take (--kv-heads 3 of 32 heads): a usage error
        raise UsageError(exc.message, exc.hint) from None
    _refuse_meaningless(changed, overrides)
    return changed


def resolve_model(text: str, overrides: dict[str, Any] | None = None) -> Resolved:
    overrides = overrides or {}
    resolved = _resolve(text, overrides)
    _refuse_meaningless(resolved.spec, overrides)
    return resolved


def _preset_at(found: Any, repo: str, revision: str, overrides: dict[str, Any]) -> Resolved:  # noqa: ANN401
    """ORG/NAME@REV where ORG/NAME is a preset's alias. NOTE: presets are read from a repository's
    config.json as published (main), so @main is the preset, offline; another revision is asked of
    the hub, and when the hub cannot answer the error says what the preset stands for."""
    source = {"built-in": "preset", "user": "user preset", "file": "preset file"}[found.origin]
    if revision == "main":
        return Resolved(override(found.spec, overrides), source, f"{found.location} (as {repo}@main)")
    from kvcalc.model.hub import fetch_config

    try:
        file, where = fetch_config(repo, revision)
    except HubError as exc:
        raise HubError(
            exc.message,
            hint=f"the preset {found.spec.name} is {repo} at main ({found.spec.source or found.location}); "
            f"name {repo} or {repo}@main to use it offline",
        ) from None
    resolved = _read_config(Path(file), repo, where, overrides)
    return Resolved(resolved.spec, where, f"{repo}@{revision} ({file})")


def _by_name(text: str, overrides: dict[str, Any] | None = None) -> Resolved | None:
    from kvcalc.model.presets import by_name

    found = by_name(text)
    if found is None:
        return None
    return Resolved(
        override(found.spec.with_changes(name=text.partition("@")[0]), overrides or {}), found.source, found.location
    )


def _resolve(text: str, overrides: dict[str, Any]) -> Resolved:
    if not text.strip():
        raise NotFoundError("the model name is empty", hint="`kvcalc models` lists the presets")
    # NOTE: the file system refuses names over 255 bytes (ENAMETOOLONG, an OSError from is_dir);
    # no preset, file or hub id is that long.
    if len(text) > 1024 or any(len(part.encode()) > 255 for part in re.split(r"[/\\]", text)):
        raise NotFoundError(f"no preset, file or hub id is named '{text[:40]}…' ({len(text):,} characters)")
    if "huggingface.co" in text.lower() or text.lower().startswith(("hf.co/", "http://hf.co", "https://hf.co")):
        from kvcalc.model.hubref import hub_id

        text = hub_id(text)  # a pasted hub address: ORG/NAME[@REV]
    found = locate(MODEL_DIR, text)  # a preset name or alias, built-in or user, or a FILE.yaml in its schema
    if found is not None and isinstance(found.spec, ModelSpec):  # the model kind only holds ModelSpecs
        source = {"built-in": "preset", "user": "user preset", "file": "preset file"}[found.origin]
        return Resolved(override(found.spec, overrides), source, found.location)
    repo, at, revision = text.partition("@")
    if at and re.match(HUB_ID, text) and not Path(text).expanduser().exists():
        found = locate(MODEL_DIR, repo)
        if found is not None:
            return _preset_at(found, repo, revision, overrides)
    if text.lower().partition("@")[0].endswith(".gguf") or ":" in text or "gguf" in text.lower():
        from kvcalc.model.gguf.source import is_gguf_ref, open_gguf

        if is_gguf_ref(text):  # a .gguf file, org/repo:QUANT or a GGUF repo: the header, read by range
            g = open_gguf(text)
            return Resolved(override(g.spec, overrides), "gguf", g.location)
    path = Path(text).expanduser()
    if path.is_dir():
        config = path / "config.json"
        if not config.is_file():
            raise NotFoundError(
                f"folder {path} holds no config.json",
                hint="pass the folder of a Hugging Face model, or its config.json",
            )
        return _read_config(config, path.resolve().name, "file", overrides)
    if path.is_file():
        return _read_config(
            path, path.resolve().parent.name if path.name == "config.json" else path.stem, "file", overrides
        )
    if _looks_like_path(text):
        raise _missing_path(text)
    if re.match(HUB_ID, text):
        from kvcalc.model.hub import HubUnreachable, fetch_config

        repo, _, revision = text.partition("@")
        try:
            file, source = fetch_config(repo, revision or None)
        except HubError as exc:  # unreachable: a quantized re-publication of a preset, by its name
            named = _by_name(text, overrides) if isinstance(exc, HubUnreachable) and revision in ("", "main") else None
            if named is None:
                raise
            return named
        resolved = _read_config(Path(file), repo, source, overrides)
        return Resolved(resolved.spec, source, f"{text} ({file})")
    named = _by_name(text, overrides)  # a preset's name plus a format suffix (Qwen3-32B-AWQ), no org
    if named is not None:
        return named
    from kvcalc.model.presets import by_hub_name

    hub_named = by_hub_name(text)  # a hub name without its org (Llama-3.3-70B-Instruct)
    if hub_named is not None and isinstance(hub_named.spec, ModelSpec):
        return Resolved(override(hub_named.spec, overrides), "preset", f"{hub_named.location} (as {text.strip()})")
    close = suggestions(MODEL_DIR, text)
    hint = (
        f"did you mean: {', '.join(close)}?"
        if close
        else "`kvcalc models` lists the presets; a hub id (org/name) or a config.json path also works"
    )
    raise NotFoundError(f"unknown model '{text}'", hint=hint)
