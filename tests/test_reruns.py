"""The README's test command runs pytest with --reruns 1: a failed first run is retried, and tests/conftest.py
prints the first run's failure in full, so that a failure the rerun did not repeat is still in CI's log."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FLAKY = '''
from pathlib import Path

def test_fails_on_its_first_run_only():
    marker = Path(__file__).with_name("ran-once")
    first = not marker.exists()
    marker.touch()
    assert not first, "the first run went wrong"
'''


def test_a_first_run_failure_is_printed_and_the_rerun_decides(tmp_path):
    pytest.importorskip("pytest_rerunfailures")
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_flaky.py").write_text(FLAKY)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "--reruns", "1", "-p", "no:cacheprovider",
                           str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed, 1 rerun" in done.stdout
    section = done.stdout.split("first runs that failed (1)", 1)
    assert len(section) == 2 and "the first run went wrong" in section[1], done.stdout
