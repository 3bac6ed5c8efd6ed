"""layer_norm and layer_norm_backward: every plugin against torch, per dtype and shape (harness.py)."""

from harness import run

OPS = ("layer_norm", "layer_norm_backward")


def test_layer_norm(benchmark, case, bench_config):
    run(benchmark, case, bench_config)
