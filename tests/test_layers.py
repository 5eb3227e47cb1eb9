"""The layering contract (docs/ARCHITECTURE.md): imports only go down, engines never import each other,
the model never imports an engine, and there is no import circle between modules.

Read from the source with `ast`, so lazy imports inside functions count as much as module-level ones.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "kvcalc"

# Top to bottom. A module may import its own layer and any layer below it, never one above.
# NOTE: hardware sits below model because the preset store (model/presets.py) reads GPU presets too;
# hardware imports nothing of model.
LAYERS = [
    ("cli",),
    ("api",),
    ("present",),
    ("lab",),
    ("plan",),
    ("engines",),
    ("cost",),
    ("model",),
    ("hardware",),
    ("units", "errors", "results"),
]
# The package root (__init__, __main__) is the entry point: it may import anything.
ENTRY = {"kvcalc", "kvcalc.__main__"}


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every kvcalc module this file imports, at any depth of its code."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "kvcalc"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] != "kvcalc":
                continue
            found.add(mod)
            for alias in node.names:  # `from kvcalc.cli import serving` imports the submodule
                if (PACKAGE.parent / Path(*f"{mod}.{alias.name}".split("."))).with_suffix(".py").exists() or (
                    PACKAGE.parent / Path(*f"{mod}.{alias.name}".split(".")) / "__init__.py"
                ).exists():
                    found.add(f"{mod}.{alias.name}")
    found.discard(name)
    return found


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    raise AssertionError(f"{module} is in no layer: add its subpackage to LAYERS and docs/ARCHITECTURE.md")


def upward(g: dict[str, set[str]]) -> list[str]:
    bad = []
    for mod, deps in g.items():
        if mod in ENTRY:
            continue
        for dep in deps:
            if dep in ENTRY:
                if dep == "kvcalc":  # `from kvcalc import __version__` names the root's version only
                    continue
                bad.append(f"{mod} -> {dep}")
            elif layer(dep) < layer(mod):
                bad.append(f"{mod} -> {dep}")
    return sorted(bad)


def cross_engine(g: dict[str, set[str]]) -> list[str]:
    def engine(m: str) -> str | None:
        parts = m.split(".")
        return parts[2] if len(parts) > 2 and parts[1] == "engines" and not m.endswith("__init__") else None

    bad = []
    for mod, deps in g.items():
        own = engine(mod)
        for dep in deps:
            other = engine(dep)
            # a module at engines/ top level (weights.py, runtime.py) is shared; engines/X/ is one engine's
            if own and other and own != other and (PACKAGE / "engines" / other).is_dir():
                bad.append(f"{mod} -> {dep}")
    return sorted(bad)


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), parents excluded: importing
    kvcalc.cost.step runs kvcalc.cost/__init__.py, which imports nothing."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in g:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in g:
        if v not in index:
            visit(v)
    return out


def test_every_module_is_in_a_layer():
    for mod in graph():
        if mod not in ENTRY:
            layer(mod)


def test_imports_only_go_down():
    assert upward(graph()) == []


def test_engines_never_import_each_other_and_the_model_never_imports_an_engine():
    g = graph()
    assert cross_engine(g) == []
    assert [f"{m} -> {d}" for m, ds in g.items() if m.startswith("kvcalc.model") for d in ds if ".engines" in d] == []


def test_no_import_circles():
    assert cycles(graph()) == []


def test_no_module_over_450_lines():
    long = {module_name(p): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 450}
    assert long == {}


def test_every_subpackage_says_what_it_owns():
    for init in PACKAGE.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc, f"{init} has no docstring"


# --- the checks catch what they are for ---------------------------------------------------------


def test_an_upward_import_is_caught():
    g = graph()
    g["kvcalc.cost.kvcache"] = g["kvcalc.cost.kvcache"] | {"kvcalc.plan.fit"}
    assert "kvcalc.cost.kvcache -> kvcalc.plan.fit" in upward(g)


def test_a_model_importing_an_engine_is_caught():
    g = graph()
    g["kvcalc.model.quant"] = g["kvcalc.model.quant"] | {"kvcalc.engines.vllm.memory"}
    assert "kvcalc.model.quant -> kvcalc.engines.vllm.memory" in upward(g)


def test_an_engine_importing_another_is_caught(tmp_path):
    g = {"kvcalc.engines.vllm.memory": {"kvcalc.engines.llamacpp.kv"}, "kvcalc.engines.llamacpp.kv": set()}
    if not (PACKAGE / "engines" / "llamacpp").is_dir():
        pytest.skip("needs a second engine subpackage")
    assert cross_engine(g) == ["kvcalc.engines.vllm.memory -> kvcalc.engines.llamacpp.kv"]


def test_a_circle_is_caught():
    g = graph()
    g["kvcalc.cost.kvcache"] = g["kvcalc.cost.kvcache"] | {"kvcalc.cost.step"}
    assert any({"kvcalc.cost.kvcache", "kvcalc.cost.step"} <= set(c) for c in cycles(g))


def test_lazy_imports_count(tmp_path):
    f = PACKAGE / "cost" / "kvcache.py"
    assert "kvcalc.hardware.gpu" in imports_of(f)  # imported under TYPE_CHECKING only, still an edge


def test_the_pure_core_reads_no_files():
    # The brief: cost/ computes cache bytes, shards, steps, ceilings and the calibrated estimate with no I/O;
    # the estimate's constants come in as an argument (plan/calibration.py reads them).
    io_modules = {"json", "os", "pathlib", "io", "shutil", "tempfile", "urllib", "socket"}
    found = []
    for path in sorted((PACKAGE / "cost").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found += [f"{path.name}: import {a.name}" for a in node.names if a.name.split(".")[0] in io_modules]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in io_modules:
                found.append(f"{path.name}: from {node.module}")
            elif isinstance(node, ast.Call) and (
                (isinstance(node.func, ast.Name) and node.func.id == "open")
                or (isinstance(node.func, ast.Attribute) and node.func.attr in {"read_text", "write_text", "open"})
            ):
                found.append(f"{path.name}:{node.lineno}: a file call")
    assert found == []
