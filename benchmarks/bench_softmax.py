"""softmax: every plugin against torch, per dtype and shape (harness.py)."""

from harness import run

OPS = ("softmax",)


def test_softmax(benchmark, case, bench_config):
    run(benchmark, case, bench_config)
