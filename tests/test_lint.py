"""ruff: style, and TID253 keeping huggingface_hub, plotting and NumPy out of module-level imports."""

import shutil
import subprocess

import pytest
from conftest import REPO


def test_ruff_check_is_clean():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (it comes with the test extras)")
    out = subprocess.run([ruff, "check", str(REPO)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
