"""mean: every plugin against torch, per dtype and shape (harness.py)."""

from harness import run

OPS = ("mean",)


def test_mean(benchmark, case, bench_config):
    run(benchmark, case, bench_config)
