"""attention and attention_backward: every plugin against torch, per dtype and shape (harness.py)."""

from harness import run

OPS = ("attention", "attention_backward")


def test_attention(benchmark, case, bench_config):
    run(benchmark, case, bench_config)
