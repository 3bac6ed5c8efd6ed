"""adam_update_ and adam_update_foreach_: every plugin against torch, per dtype and shape (harness.py)."""

from harness import run

OPS = ("adam_update_", "adam_update_foreach_")


def test_adam_update(benchmark, case, bench_config):
    run(benchmark, case, bench_config)
