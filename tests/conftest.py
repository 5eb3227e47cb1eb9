"""Shared test helpers: run the CLI in-process, and find ../shared when it exists."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvcalc.cli.app import app

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(autouse=True)
def _no_user_presets(tmp_path_factory, monkeypatch):
    """Tests see the built-in presets only, whatever the developer keeps in ~/.config/kvcalc."""
    monkeypatch.setenv("KVCALC_PRESETS", str(tmp_path_factory.getbasetemp() / "no-user-presets"))


def run(*args: str, env: dict[str, str] | None = None):
    """Invoke kvcalc in-process; the result has exit_code, stdout and stderr."""
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


def run_json(*args: str, status: int = 0) -> dict:
    """The command's JSON, asserting its exit status (3: printed, but the setup does not fit)."""
    result = run(*args, "--format", "json")
    assert result.exit_code == status, result.stderr or result.stdout
    return json.loads(result.stdout)


def shared_path(*parts: str) -> Path:
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is not here (../shared is only beside a developer's checkout)")
    return path


GiB = 2**30
MiB = 2**20

# A hang guard, never a speed test: time bounds are measured in benchmarks/bounds.py, on a quiet machine.
HANG_GUARD_S = 60
