"""embedding and embedding_backward: every plugin against torch, per dtype and shape (harness.py)."""

from harness import run

OPS = ("embedding", "embedding_backward")


def test_embedding(benchmark, case, bench_config):
    run(benchmark, case, bench_config)
