"""Steady-state cost of dispatch: choosing what runs a call once its key is cached (budget: 10 µs).

Run with ``pytest benchmarks/bench_dispatch.py --benchmark-only``. ``explain`` is exactly what
every ``kernelzoo.ops.<op>`` call does before its kernel: look the op up, check the
arguments, choose (forced plugin, cached tuned winner or default order, ``supports()``).
The op-call pair measures the whole call on a 16-element tensor and its kernel alone on
the same call; their difference is the overhead a user pays.
"""

from __future__ import annotations

import pytest
import torch

import kernelzoo
from kernelzoo import dispatch
from kernelzoo.db import lookup
from kernelzoo.db.records import Winner, save_winner
from kernelzoo.db.store import forget_stores, open_store
from kernelzoo.fingerprint import cpu_fingerprint
from kernelzoo.registry import registry

BUDGET_S = 10e-6
X = torch.randn(16)  # relu's bucket n=2^4


@pytest.fixture
def tuned(tmp_path, monkeypatch):
    """A temporary database where torch won relu at n=2^4 on this CPU; the key read once."""
    url = f"sqlite:///{tmp_path / 'tuning.sqlite'}"
    monkeypatch.setenv("KERNELZOO_DB", url)
    impl = registry.impl("relu", "torch")
    save_winner(open_store(url), Winner(op="relu", plugin="torch", source_hash=impl.source_hash,
                                        device=cpu_fingerprint(), dtype="float32", bucket=(4,), flags="",
                                        config={}, time_ms=0.001, spread=0.0, shape="16"))
    lookup.winners.reset()
    dispatch.clear_cache()
    assert kernelzoo.explain("relu", X).reason == "tuned (exact bucket n=2^4)"  # reads the database
    yield
    lookup.winners.reset()
    dispatch.clear_cache()
    forget_stores()


def _within_budget(benchmark, budget_s: float = BUDGET_S) -> None:
    benchmark.extra_info["budget_us"] = budget_s * 1e6
    assert benchmark.stats.stats.median < budget_s


def test_explain_tuned(benchmark, tuned):
    choice = benchmark(kernelzoo.explain, "relu", X)
    assert choice.reason.startswith("tuned")
    _within_budget(benchmark)


def test_explain_forced(benchmark, tuned):
    def forced():
        with kernelzoo.use("torch"):
            return kernelzoo.explain("relu", X)

    assert benchmark(forced).reason == "forced"
    _within_budget(benchmark)


def test_op_call_tuned(benchmark, tuned):
    benchmark(kernelzoo.ops.relu, X)


def test_kernel_alone(benchmark, tuned):
    impl = registry.impl("relu", "torch")
    call = registry.op("relu").check(X)
    benchmark(impl.run, call, impl.config())
