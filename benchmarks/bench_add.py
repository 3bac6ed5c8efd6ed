"""add: every plugin against torch, per dtype and shape (harness.py)."""

from harness import run

OPS = ("add",)


def test_add(benchmark, case, bench_config):
    run(benchmark, case, bench_config)
