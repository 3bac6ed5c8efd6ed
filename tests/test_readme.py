"""The README as a new user reads it on a CPU machine: its Python snippets run as written, in a fresh process with
a database of its own; its first command installs torch's CPU build before kernelzoo, and the test command CI runs
is there."""

from __future__ import annotations

import re

import pytest
from tuning_helpers import ROOT, python, temporary_db

README = (ROOT / "README.md").read_text()
SNIPPETS = re.findall(r"^```python\n(.*?)^```", README, re.MULTILINE | re.DOTALL)


def test_the_readme_has_its_snippets_and_commands():
    assert len(SNIPPETS) >= 3  # using it, tuning from Python, mytorch
    first = re.search(r"## Two commands.*?^```\n(.*?)^```", README, re.MULTILINE | re.DOTALL).group(1).strip()
    torch_cpu, kernelzoo = first.index("download.pytorch.org/whl/cpu"), first.index("pip install .")
    assert first.startswith("pip install torch") and torch_cpu < kernelzoo and "kernelzoo demo" in first
    assert 'pip install ".[gpu]"' in README  # the one line for GPU machines
    test_command = README.split("<!-- test-command -->", 1)[1].split("```")[1].strip()
    assert test_command.startswith('pip install -q -e ".[dev]" && ruff check . && python -m pytest')


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[f"snippet{i}" for i in range(len(SNIPPETS))])
def test_a_readme_snippet_runs_on_the_cpu_as_written(snippet, tmp_path, monkeypatch):
    # a user's process: no Triton interpreter (the tests' conftest turns it on in this process)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with temporary_db(tmp_path, monkeypatch):
        done = python(snippet, env={"CUDA_VISIBLE_DEVICES": ""}, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
