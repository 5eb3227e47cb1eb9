"""kvcalc/presetyaml.py reads the plain YAML of preset files exactly as PyYAML does, or not at all."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc.model import presetyaml as presetyaml

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted([*ROOT.glob("model_presets/*.yaml"), *ROOT.glob("gpu_presets/*.yaml")], key=lambda p: p.name)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shipped_preset_is_read_without_pyyaml_and_exactly(path: Path) -> None:
    # Every shipped file must take the fast path (else `kvcalc cache` pays PyYAML's import again)
    # and give what PyYAML gives, types included (1 is not 1.0, True is not 1).
    text = path.read_text(encoding="utf-8")
    plain = presetyaml.load(text)
    assert plain is not None, f"{path.name} leaves the plain subset: write it as the other presets are"
    assert repr(plain) == repr(yaml.safe_load(text))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("memory_bytes: 80_000_000_000  # as marketed\n", {"memory_bytes": 80_000_000_000}),
        ("link_latency_s: 3.7e-6\n", {"link_latency_s": 3.7e-6}),
        ('aliases: ["a/b", "c"]\n', {"aliases": ["a/b", "c"]}),
        ('note: "a # inside quotes"  # a comment\n', {"note": "a # inside quotes"}),
        ("peaks:\n  fp16: 989.4\n  fp8: 1978.9\n", {"peaks": {"fp16": 989.4, "fp8": 1978.9}}),
        ('sources:\n  - "x"\n  - "y"\n', {"sources": ["x", "y"]}),
        ('layer_pattern: # two kinds\n  - {"kind": "full"}\n', {"layer_pattern": [{"kind": "full"}]}),
        ("tie_embeddings: true\nbias: null\n", {"tie_embeddings": True, "bias": None}),
        # flow values, tight or padded, nested, with YAML's plain scalars inside
        ('x: {"a":1}\n', {"x": {"a": 1}}),
        ("x: [1,2]\ny: [ ]\nz: { }\n", {"x": [1, 2], "y": [], "z": {}}),
        ("x: [1_000, -0, 1., -1, 2.5e-3]\n", {"x": [1000, 0, 1.0, -1, 0.0025]}),
        ('x: {"a": [true, null], "b": {}}  # c\n', {"x": {"a": [True, None], "b": {}}}),
        ('x: ["\u00e9 \u2713"]\n', {"x": ["\u00e9 \u2713"]}),
    ],
)
def test_plain_forms_read(text: str, expected: dict) -> None:
    assert presetyaml.load(text) == expected == yaml.safe_load(text)


@pytest.mark.parametrize(
    "text",
    [
        "x: 1e3\n",  # a string to PyYAML (YAML 1.1 floats need a dot), a number to JSON
        "x: [1.5e3]\n",  # the same inside a flow list
        "x: yes\n",  # a boolean to YAML 1.1
        "yes: 1\n",  # a boolean key
        "x: 0o17\n",  # octal / sexagesimal / hex: YAML 1.1 numbers
        "x: 1:30\n",
        "x: 0x1f\n",
        "x: 017\n",
        "x: 'single'\n",
        'x: "tab\\there"\n',  # escapes differ between YAML and JSON
        "x: .inf\n",
        "x: [NaN]\n",
        "x: ~\n",
        "x:\n",  # null
        "x: h100\n",  # a bare word: a string to YAML, left to PyYAML
        "x: &a 1\ny: *a\n",
        "x: 1\nx: 2\n",  # duplicate keys
        'x: {"a": 1, "a": 2}\n',
        "x:\n  a:\n    b: 1\n",  # deeper nesting
        "x:\n- 1\n",  # a block list at the key's own indentation
        "x: 1\n  y: 2\n",
        "\tx: 1\n",
        "---\nx: 1\n",
        "",
        "# only a comment\n",
        "x: 1 # fine\ny: 2 #fine\nz: 3#not a comment\n",
        "x: \x85\n",  # characters YAML refuses, and some it accepts that this reader leaves alone
        "x: 1\r\ny: 2\r\n",
        'x: "no\xa0break"\n',
        "x: [1,]\n",  # a trailing comma: YAML reads it, JSON does not; left to PyYAML
        'x: {"a": 1,}\n',
        'x: ["a":1]\n',  # a one-pair mapping inside a list, to YAML
        "x: [1:2]\n",  # sexagesimal 62 inside a flow list
        'x: {"a": 1:2}\n',
        'x: ["a""b"]\n',  # malformed: PyYAML reports it
        "x: [a]\n",  # a bare word inside a flow list
        "x: " + "[" * 17 + "]" * 17 + "\n",  # deeper than MAX_DEPTH
        "x: " + "[" * 5000 + "]" * 5000 + "\n",  # PyYAML refuses this depth with a message; no RecursionError here
    ],
)
def test_everything_else_is_left_to_pyyaml(text: str) -> None:
    assert presetyaml.load(text) is None


def test_a_malformed_file_is_still_reported_by_pyyaml(tmp_path: Path) -> None:
    from kvcalc.errors import SpecError
    from kvcalc.model.presets import _yaml_text

    with pytest.raises(SpecError, match=r"bad.yaml: malformed YAML \(line \d+, column \d+\): "):
        _yaml_text('name: "x"\nlayers: [1, 2\n', "bad.yaml")


# Property: whatever the fast path reads, PyYAML reads the same way. Documents are built from scalars
# chosen to sit on the borders between YAML 1.1 and JSON.
_TOKENS = st.sampled_from(
    "0 -0 1 10 1_000 007 1.5 -2.25 1. 1.0e+3 1.0e-3 1e3 1.5e3 .5 true false null True yes no on off ~ "
    "h100 0x10 1:30 .inf .nan NaN".split()
)
_STRINGS = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12).map(
    lambda s: '"' + s.replace("\\", "").replace('"', "") + '"'
)
_SCALAR = st.one_of(_TOKENS, _STRINGS)
# Separators as written by hand: tight, spaced, padded inside the brackets, or a trailing comma.
_COMMA = st.sampled_from([", ", ",", " , ", ",  "])
_COLON = st.sampled_from([": ", ":", " : ", ":  "])
_PAD = st.sampled_from(["", " "])
_TRAIL = st.sampled_from(["", "", "", ","])


@st.composite
def _flow_list(draw: st.DrawFn, inner: st.SearchStrategy[str]) -> str:
    pad = draw(_PAD)
    return "[" + pad + draw(_COMMA).join(draw(st.lists(inner, max_size=3))) + draw(_TRAIL) + pad + "]"


@st.composite
def _flow_map(draw: st.DrawFn, inner: st.SearchStrategy[str]) -> str:
    pad, colon = draw(_PAD), draw(_COLON)
    pairs = [f"{k}{colon}{v}" for k, v in draw(st.dictionaries(_STRINGS, inner, max_size=3)).items()]
    return "{" + pad + draw(_COMMA).join(pairs) + draw(_TRAIL) + pad + "}"


_FLOW = st.recursive(_SCALAR, lambda inner: st.one_of(_flow_list(inner), _flow_map(inner)), max_leaves=6)
_KEYS = st.sampled_from(["a", "b_c", "num_layers", "yes", "on", "null", "x1"])
_COMMENTS = st.sampled_from(["", "  # note", " #x", "#x"])


@st.composite
def _documents(draw: st.DrawFn) -> str:
    lines = []
    for key in draw(st.lists(_KEYS, min_size=1, max_size=4)):
        shape = draw(st.sampled_from(["scalar", "list", "mapping"]))
        if shape == "scalar":
            lines.append(f"{key}: {draw(_FLOW)}{draw(_COMMENTS)}")
        elif shape == "list":
            lines.append(f"{key}:")
            lines += [f"  - {v}{draw(_COMMENTS)}" for v in draw(st.lists(_FLOW, min_size=1, max_size=3))]
        else:
            lines.append(f"{key}:")
            lines += [f"  {k}: {draw(_FLOW)}" for k in draw(st.lists(_KEYS, min_size=1, max_size=3))]
    return "\n".join(lines) + "\n"


@settings(max_examples=1500, deadline=None)
@given(_documents())
def test_the_fast_path_agrees_with_pyyaml_or_declines(text: str) -> None:
    plain = presetyaml.load(text)
    if plain is None:
        return
    assert repr(plain) == repr(yaml.safe_load(text)), text
