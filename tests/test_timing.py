"""kernelzoo.timing: what the medians hold."""

from __future__ import annotations

import time

import pytest
import torch

from kernelzoo import timing
from kernelzoo.timing import time_fn, time_rounds


def test_rounds_time_every_candidate_once_a_round_each_round_in_its_own_order(monkeypatch) -> None:
    calls: list[str] = []

    def one_run(fn, device, **options):  # time_fn, one run a call: what matters here is the order
        fn()
        return timing.Timing((float(len(calls)),))

    monkeypatch.setattr(timing, "time_fn", one_run)
    times = time_rounds({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, "cpu", rounds=3)
    assert {k: len(t) for k, t in times.items()} == {"a": 3, "b": 3}
    rounds = [calls[i:i + 2] for i in range(0, 6, 2)]
    assert all(sorted(r) == ["a", "b"] for r in rounds)  # each candidate once a round
    assert {r[0] for r in rounds} == {"a", "b"}  # and not always in the same order
    assert [times["a"][i] < times["b"][i] for i in range(3)] == [r[0] == "a" for r in rounds]


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
