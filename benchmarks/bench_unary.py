"""exp, log, tanh, pow and dropout: every plugin against torch, per dtype and shape (harness.py).
dropout's torch plugin computes this op's hashed mask with torch ops; F.dropout (a different
random stream) is not a candidate."""

from harness import run

OPS = ("exp", "log", "tanh", "pow", "dropout")


def test_unary(benchmark, case, bench_config):
    run(benchmark, case, bench_config)
