"""sum: every plugin against torch, per dtype and shape (harness.py)."""

from harness import run

OPS = ("sum",)


def test_sum(benchmark, case, bench_config):
    run(benchmark, case, bench_config)
