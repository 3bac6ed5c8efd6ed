"""scaled_matmul: every plugin against torch._scaled_mm, per input dtype, shape and kind of scales (harness.py)."""

from harness import run

OPS = ("scaled_matmul",)


def test_scaled_matmul(benchmark, case, bench_config):
    run(benchmark, case, bench_config)
