"""Test setup. Without a GPU, Triton kernels run in Triton's interpreter on the CPU; that has
to be decided before any plugin module imports triton."""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Compiled kernels go to one cache per test session, never the user's."""
    monkeypatch.setenv("KERNELZOO_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


# With `--reruns` (the README's test command), a failed first run is retried; its report is printed
# here in full, so that a failure the rerun did not repeat is still read in the log.
_first_failures: list = []


def pytest_runtest_logreport(report):
    if report.outcome == "rerun":
        _first_failures.append(report)


def pytest_terminal_summary(terminalreporter):
    if not _first_failures:
        return
    terminalreporter.write_sep("=", f"first runs that failed ({len(_first_failures)}), each then run again")
    for report in _first_failures:
        terminalreporter.write_sep("_", report.nodeid)
        terminalreporter.write_line(str(report.longrepr))
