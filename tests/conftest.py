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

