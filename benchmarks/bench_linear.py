"""linear and linear_backward: every plugin against torch, per dtype and shape (harness.py)."""

from harness import run

OPS = ("linear", "linear_backward")


def test_linear(benchmark, case, bench_config):
    run(benchmark, case, bench_config)
