"""sgd_update_: every plugin against torch, per dtype and shape (harness.py)."""

from harness import run

OPS = ("sgd_update_",)


def test_sgd_update(benchmark, case, bench_config):
    run(benchmark, case, bench_config)
