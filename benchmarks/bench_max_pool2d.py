"""max_pool2d and max_pool2d_backward: every plugin against torch, per dtype and shape (harness.py)."""

from harness import run

OPS = ("max_pool2d", "max_pool2d_backward")


def test_max_pool2d(benchmark, case, bench_config):
    run(benchmark, case, bench_config)
