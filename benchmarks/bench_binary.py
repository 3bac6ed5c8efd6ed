"""mul, div, relu_backward, gelu_backward and copy_: every plugin against torch, per dtype and shape
(harness.py)."""

from harness import run

OPS = ("mul", "div", "relu_backward", "gelu_backward", "copy_")


def test_binary(benchmark, case, bench_config):
    run(benchmark, case, bench_config)
