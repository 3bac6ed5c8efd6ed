"""matmul: every plugin against torch, per dtype and shape (harness.py)."""

from harness import run

OPS = ("matmul",)


def test_matmul(benchmark, case, bench_config):
    run(benchmark, case, bench_config)
