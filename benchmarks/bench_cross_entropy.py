"""cross_entropy and cross_entropy_backward: every plugin against torch, per dtype and shape (harness.py)."""

from harness import run

OPS = ("cross_entropy", "cross_entropy_backward")


def test_cross_entropy(benchmark, case, bench_config):
    run(benchmark, case, bench_config)
