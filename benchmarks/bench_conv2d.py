"""conv2d and conv2d_backward: every plugin against torch, per dtype and shape (harness.py)."""

from harness import run

OPS = ("conv2d", "conv2d_backward")


def test_conv2d(benchmark, case, bench_config):
    run(benchmark, case, bench_config)
