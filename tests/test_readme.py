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
