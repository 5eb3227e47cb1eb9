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


def test_readme_and_docs_name_only_files_a_clone_has():
    # NOTE: the team's reference data (../shared, THEORY.md) sits beside a developer's checkout, not in a clone.
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = doc.read_text()
        assert "../shared" not in text and "THEORY.md" not in text, doc.name
        for target in re.findall(r"\]\(([^)#\s]+)\)", text):
            if "://" not in target:
                assert (doc.parent / target).exists(), f"{doc.name} links to {target}, which is not in the repo"


def test_readme_starts_with_quick_start_then_the_tour():
    heads = re.findall(r"^## (.+)$", (REPO / "README.md").read_text(), re.M)
    assert heads[:3] == ["Quick start", "A tour", "Reference"]
