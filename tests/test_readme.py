"""The README as a new user reads it on a CPU machine: its Python snippets run as written, in a fresh process with
a database of its own; its first command installs torch's CPU build before kernelzoo, and the test command CI runs
is there. The slow test (marked fresh_venv) runs that first command as written in a new virtual environment, then
the snippets with that environment's Python."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version
from tuning_helpers import ROOT, python, temporary_db

README = (ROOT / "README.md").read_text()
PYPROJECT = (ROOT / "pyproject.toml").read_text()
SNIPPETS = re.findall(r"^```python\n(.*?)^```", README, re.MULTILINE | re.DOTALL)
SET_UP = re.search(r"## Two commands.*?^```\n(.*?)^```", README, re.MULTILINE | re.DOTALL).group(1).strip()


def _torch_pin(command: str) -> Version:
    """The version of ``torch==X`` in a shell command."""
    return Version(re.search(r"\btorch==([0-9][0-9a-z.+]*)", command).group(1))


def test_the_readme_has_its_snippets_and_commands():
    assert len(SNIPPETS) >= 3  # using it, tuning from Python, mytorch
    first = SET_UP
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


def test_the_readme_torch_is_one_the_project_accepts_and_ci_installs():
    """The set-up's torch pin is inside pyproject's torch requirement, and CI installs the same release."""
    dependencies = re.search(r"^dependencies = \[(.*?)^\]", PYPROJECT, re.MULTILINE | re.DOTALL).group(1)
    torch = next(r for r in map(Requirement, re.findall(r'"([^"]+)"', dependencies)) if r.name == "torch")
    pin = _torch_pin(SET_UP)
    assert torch.specifier.contains(pin), f"README installs torch {pin}; pyproject asks for {torch}"
    assert f"torch {str(torch.specifier).removeprefix('>=')} or newer" in README
    assert _torch_pin((ROOT / ".ci" / "run").read_text()) == pin


# what a clone of the repository does not hold: build outputs, caches, virtual environments
_NOT_IN_A_CLONE = shutil.ignore_patterns(".git", ".venv", "venv", "build", "dist", "*.egg-info", "__pycache__",
                                         ".pytest_cache", ".ruff_cache", ".benchmarks", ".hypothesis", ".whl", "*.so")


def _run(args: list[str] | str, cwd: Path, env: dict, timeout: float, shell: bool = False) -> str:
    argv = ["bash", "-eo", "pipefail", "-c", args] if shell else args
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{output[-6000:]}"
    return done.stdout


@pytest.mark.fresh_venv
def test_the_readme_set_up_runs_as_written_in_a_fresh_virtual_environment(tmp_path):
    """A new user's path on a CPU machine: a clone, a new virtual environment (no system site packages), the
    set-up command verbatim (torch, kernelzoo, ``kernelzoo list``, ``kernelzoo demo``), then ``kernelzoo
    --version`` and every Python snippet of the README with that environment's Python, outside the clone, so
    that they import the installed package."""
    clone, venv, user = tmp_path / "kernelzoo", tmp_path / "venv", tmp_path / "user"
    shutil.copytree(ROOT, clone, ignore=_NOT_IN_A_CLONE)
    user.mkdir()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()
    bin_ = venv / "bin"
    # the environment of a shell with the venv activated: none of this test process's Python settings, its own
    # database and kernel cache, no GPU
    env = {k: v for k, v in os.environ.items()
           if k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "TRITON_INTERPRET"}
           and not k.startswith(("KERNELZOO_", "PYTEST_"))}
    env.update(PATH=os.pathsep.join([str(bin_), env.get("PATH", "")]), VIRTUAL_ENV=str(venv), CUDA_VISIBLE_DEVICES="",
               KERNELZOO_DB=str(tmp_path / "tuning.sqlite"), KERNELZOO_CACHE_DIR=str(tmp_path / "cache"))

    out = _run(SET_UP, clone, env, timeout=1800, shell=True)
    assert "every output within tolerance" in out, out[-3000:]
    assert (bin_ / "kernelzoo").is_file(), "pip install . made no kernelzoo command in the virtual environment"

    # the CPU install: torch without CUDA, and no Triton or nvidia-* wheels pulled in
    found = json.loads(_run([str(bin_ / "python"), "-c",
                             "import json, torch, kernelzoo, importlib.metadata as m; print(json.dumps("
                             "[torch.version.cuda, kernelzoo.__file__, [d.metadata['Name'] for d in m.distributions()]]"
                             "))"], user, env, timeout=300))
    cuda, kernelzoo_file, names = found
    assert cuda is None, f"torch is a CUDA {cuda} build"
    assert Path(kernelzoo_file).is_relative_to(venv), kernelzoo_file
    gpu_only = [n for n in names if n.lower() == "triton" or n.lower().startswith("nvidia-")]
    assert not gpu_only, f"the CPU set-up installed {gpu_only}"

    version = re.search(r'^version = "([^"]+)"', PYPROJECT, re.MULTILINE).group(1)
    assert _run(["kernelzoo", "--version"], user, env, timeout=300).strip() == f"kernelzoo {version}"

    for i, snippet in enumerate(SNIPPETS):
        try:
            _run([str(bin_ / "python"), "-c", snippet], user, env, timeout=900)
        except AssertionError as e:
            raise AssertionError(f"README snippet {i}:\n{snippet}\n{e}") from None
    shutil.rmtree(venv)  # a gigabyte, of no use once the test passed (a failed run keeps it to look into)
