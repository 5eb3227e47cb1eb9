"""The wheel carries the presets as real files and works outside the repository."""

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from conftest import REPO


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(REPO)],
        check=True,
        capture_output=True,
        text=True,
    )
    (path,) = out.glob("kvcalc-*.whl")
    return path


def test_wheel_holds_presets_as_files(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    models = [n for n in names if n.startswith("kvcalc/model_presets/") and n.endswith(".yaml")]
    gpus = [n for n in names if n.startswith("kvcalc/gpu_presets/") and n.endswith(".yaml")]
    assert len(models) == len(list((REPO / "model_presets").glob("*.yaml"))) >= 25
    assert len(gpus) == len(list((REPO / "gpu_presets").glob("*.yaml"))) >= 20
    info = zipfile.ZipFile(wheel).getinfo("kvcalc/model_presets/7b.yaml")
    assert info.file_size > 100  # a real file, not a symlink entry


def test_installed_wheel_runs_from_another_directory(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    subprocess.run([bin_dir / "python", "-m", "pip", "install", "--quiet", str(wheel)], check=True, capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    out = subprocess.run(
        [bin_dir / "kvcalc", "models", "--format", "json"], cwd=elsewhere, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert '"name": "llama-3-8b"' in out.stdout
    cache = subprocess.run(
        [bin_dir / "kvcalc", "cache", "llama-3-8b", "--batch", "16", "--seq", "8k", "-f", "json"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
    )
    assert '"total_bytes": 17179869184' in cache.stdout
