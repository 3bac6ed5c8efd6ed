"""Parametrises every benchmark that takes ``case`` over the ops its module names in ``OPS``.

    pytest benchmarks/ --benchmark-only -k softmax --benchmark-group-by=group
    pytest benchmarks/bench_relu.py --benchmark-disable -q      # each case run once, as a test

``--bench-device cpu|cuda`` picks the device (default: cuda if there is a GPU). Triton's interpreter is
never benchmarked, so TRITON_INTERPRET is left as the environment sets it.
"""

from __future__ import annotations

import pytest
import torch
from harness import BenchConfig, cuda_event_timer

from kernelzoo.bench.cases import cases
from kernelzoo.registry import registry


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--bench-device", choices=("cpu", "cuda"), default=None,
                     help="device of the kernelzoo benchmarks (default: cuda if there is a GPU)")


def _device(config: pytest.Config) -> torch.device:
    return torch.device(config.getoption("bench_device") or ("cuda" if torch.cuda.is_available() else "cpu"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" not in metafunc.fixturenames:
        return
    device = _device(metafunc.config)
    # CUDA events time the GPU rounds (harness.cuda_event_timer); the CPU keeps the default timer
    marks = [pytest.mark.benchmark(timer=cuda_event_timer)] if device.type == "cuda" else []
    params = []
    for op in metafunc.module.OPS:
        if op not in registry.load().ops:  # a benchmark file committed before its op's plugins
            params.append(pytest.param(None, id=f"{op}-not-registered", marks=pytest.mark.skip(
                reason=f"{op} is not a registered op (known: {', '.join(sorted(registry.ops))})")))
            continue
        params += [pytest.param(c, id=str(c), marks=marks) for c in cases(op, device.type)]
    metafunc.parametrize("case", params)


@pytest.fixture(scope="session")
def bench_config(pytestconfig: pytest.Config) -> BenchConfig:
    device = _device(pytestconfig)
    if device.type == "cuda" and not torch.cuda.is_available():
        pytest.skip("--bench-device cuda, but torch sees no CUDA GPU")
    return BenchConfig(device, int(pytestconfig.getoption("benchmark_min_rounds")),
                       float(pytestconfig.getoption("benchmark_max_time")))
