"""Every model preset is what kvcalc's reader makes of a real config.json whose provenance is recorded.

The index is tests/fixtures/real_configs/PROVENANCE.yaml; scripts/make_presets.py writes the presets from
it. Configs stored beside the index are always checked; those in ../shared/configs skip without it.
"""

import importlib.util
import re

import pytest
from conftest import FIXTURES, REPO

from kvcalc.model import presets as presets
from kvcalc.model.hf.reader import spec_from_config

_spec = importlib.util.spec_from_file_location("make_presets", REPO / "scripts" / "make_presets.py")
make_presets = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_presets)

INDEX = make_presets.load_index()
ENTRIES = INDEX["presets"]
GENERATED = sorted(name for name, entry in ENTRIES.items() if not entry.get("pending"))
HAND_WRITTEN = INDEX["hand_written"]
MODELS = presets.preset_names(presets.MODEL_DIR)
# REPOSITORY @ COMMIT : PATH, the commit at least 7 hex digits; a hub page is huggingface.co/ORG/NAME.
# a repository at a commit, or a released package (pypi:NAME==VERSION, a wheel as pip downloads it)
READ_FROM = re.compile(r"^((huggingface\.co/)?[\w.-]+/[\w.-]+ @ [0-9a-f]{7,40}|pypi:[\w.-]+==[\w.]+) : \S.*$")


def _config(entry: dict) -> dict:
    path = make_presets.config_path(entry)
    if "shared" in entry and not path.exists():
        pytest.skip(f"{path} is not here (../shared is only beside a developer's checkout)")
    return make_presets.hub_config(entry)


def test_at_least_80_presets_come_from_real_configs():
    assert len(GENERATED) >= 80, f"{len(GENERATED)} generated presets"


def test_every_preset_has_a_provenance_record_and_every_record_a_preset():
    assert set(MODELS) == set(GENERATED) | set(HAND_WRITTEN)
    assert not set(GENERATED) & set(HAND_WRITTEN)


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_provenance_record_is_complete(name):
    entry = ENTRIES[name]
    assert set(entry) <= {
        "hub",
        "siblings",
        "aliases",
        "file",
        "shared",
        "read_from",
        "description",
        "note",
        "pending",
        "hub_values",
    }
    assert re.fullmatch(r"[\w.-]+/[\w.-]+", entry["hub"]), entry["hub"]
    assert ("file" in entry) != ("shared" in entry), "exactly one of file / shared"
    assert READ_FROM.match(entry["read_from"]), entry["read_from"]
    assert entry["description"] and len(entry["description"]) <= 72
    assert entry["note"]
    if "file" in entry:
        assert (FIXTURES / "real_configs" / entry["file"]).is_file()


def test_stored_configs_are_all_indexed():
    stored = {p.name for p in (FIXTURES / "real_configs").glob("*.json")}
    assert stored == {entry["file"] for entry in ENTRIES.values() if "file" in entry}


@pytest.mark.parametrize("name", GENERATED)
def test_preset_is_what_the_reader_makes_of_its_config(name):
    entry = ENTRIES[name]
    expected = spec_from_config(_config(entry), name, make_presets.source_line(entry))
    preset = presets.get_model(name)
    own = {"name", "aliases", "description", "source", "layer_pattern"}
    assert preset.model_dump(exclude=own) == expected.model_dump(exclude=own)
    # The preset writes the reader's per-layer list as its repeating unit; layer by layer they agree.
    one = {"count": 1}
    assert [r.model_copy(update=one) for r in preset.expanded_layers()] == [
        r.model_copy(update=one) for r in expected.expanded_layers()
    ]
    assert preset.aliases[0] == entry["hub"] and preset.source == make_presets.source_line(entry)


@pytest.mark.parametrize("name", GENERATED)
def test_preset_file_is_exactly_what_the_script_writes(name):
    entry = ENTRIES[name]
    _config(entry)  # skips when the config is in an absent ../shared
    text = (REPO / "model_presets" / f"{name}.yaml").read_text(encoding="utf-8")
    assert text == make_presets.render(make_presets.spec_for(name, entry)), "run python scripts/make_presets.py"


def test_aliases_name_one_preset_each():
    seen: dict[str, str] = {}
    for name in MODELS:
        for alias in presets.get_model(name).aliases:
            key = alias.lower()
            assert key not in seen and key not in MODELS, f"{alias} of {name} is also {seen.get(key, key)}"
            seen[key] = name


PENDING = sorted(name for name, entry in ENTRIES.items() if entry.get("pending"))


@pytest.mark.parametrize("name", PENDING)
def test_a_pending_config_is_refused_in_one_line(name):
    # a real config the reader cannot read yet (DeepSeek-V4, MiniMax-M3) is refused, naming what stops it, rather
    # than estimated
    from conftest import run

    result = run("cache", str(FIXTURES / "real_configs" / ENTRIES[name]["file"]))
    assert result.exit_code != 0 and result.stderr.count("\n") == 1 and "is not read" in result.stderr
