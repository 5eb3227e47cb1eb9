"""The README: two quick-start commands, a test command that CI runs, and a tour that is current."""

import re
import subprocess
import sys

from conftest import REPO


def _quick_start():
    text = (REPO / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)\n```", section, re.S)


def test_quick_start_has_exactly_two_commands_and_ci_runs_the_second():
    install, tests = _quick_start()
    assert install.startswith("pip install . && kvcalc ")
    assert "pytest" in tests
    assert tests in (REPO / ".ci" / "run").read_text()


def test_tour_is_current():
    out = subprocess.run(
        [sys.executable, "scripts/readme_tour.py", "--check"], cwd=REPO, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
