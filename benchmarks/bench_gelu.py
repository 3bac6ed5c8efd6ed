"""gelu: every plugin against torch, per dtype and shape (harness.py)."""

from harness import run

OPS = ("gelu",)


def test_gelu(benchmark, case, bench_config):
    run(benchmark, case, bench_config)
