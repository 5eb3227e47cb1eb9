"""mypy, strict on the pure layers (model/ and cost/; the files and flags are in pyproject's [tool.mypy])."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_mypy_strict_on_model_and_cost_passes():
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary"], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_strict_check_covers_the_pure_layers():
    # NOTE: guards the configuration itself: a pyproject edit that drops strict or a layer would pass the
    # check above while checking less.
    import tomllib

    conf = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    assert conf["strict"] is True
    assert {"kvcalc/model", "kvcalc/cost"} <= set(conf["files"])
