"""The README's API example runs as written (on CPU through the Triton interpreter)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_api_example_runs_and_passes_the_strict_check(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README.md has no python example"
    exec(compile(blocks[0], "README.md", "exec"), {})
    assert "strict pass" in capsys.readouterr().out


def test_readme_states_the_test_command_that_ci_runs():
    text = README.read_text()
    command = "pip install torch==2.13.0 && pip install -e '.[test,bench]' && TRITON_INTERPRET=1 python -m pytest -q"
    assert command in text
    assert command in (README.parent / ".ci" / "run").read_text()


def test_readme_and_docs_link_only_to_files_in_the_repository():
    """A clone alone explains the project: every relative link of README.md and docs/*.md names a
    file of the repository, and none points outside it."""
    root = README.parent
    for doc in [README, *sorted((root / "docs").glob("*.md"))]:
        text = doc.read_text()
        assert "../shared" not in text and "/work/" not in text, f"{doc.name} points outside the repository"
        for target in re.findall(r"\]\(([^)#\s]+)", text):
            if "://" in target:
                continue
            assert (doc.parent / target).resolve().is_file(), f"{doc.name} links to {target}, which does not exist"
