"""max (with indices), its backward, and softmax's backward: every plugin against torch, per dtype and
shape (harness.py)."""

from harness import run

OPS = ("max", "max_backward", "softmax_backward")


def test_max(benchmark, case, bench_config):
    run(benchmark, case, bench_config)
