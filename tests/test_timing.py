"""kernelzoo.timing: what the medians hold."""

from __future__ import annotations

import time

import pytest
import torch

from kernelzoo.timing import time_fn


def test_cpu_times_the_call() -> None:
    timing = time_fn(lambda: time.sleep(0.002), "cpu", budget_ms=20)
    assert 2.0 <= timing.median_ms < 50.0
    assert timing.host_ms is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_hide_host_keeps_the_host_out_of_gpu_times() -> None:
    x = torch.randn(1 << 20, device="cuda")

    def slow_host() -> None:  # 3 ms on the host before one small kernel
        time.sleep(0.003)
        x.mul_(1.0)

    shown = time_fn(slow_host, "cuda", budget_ms=30)
    hidden = time_fn(slow_host, "cuda", budget_ms=30, hide_host=True)
    assert shown.median_ms >= 2.5  # the events span the host's sleep
    assert hidden.median_ms < 0.5  # the kernel alone: a 4 MB in-place multiply
    assert 2.5 <= hidden.host_ms < 50.0
