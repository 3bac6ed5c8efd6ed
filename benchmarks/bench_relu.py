"""relu: every plugin against torch, per dtype and shape (harness.py)."""

from harness import run

OPS = ("relu",)


def test_relu(benchmark, case, bench_config):
    run(benchmark, case, bench_config)
