"""The floor a tuned time is compared with: max(FLOPs / peak, bytes / bandwidth) from device_ceilings."""

from __future__ import annotations

import pytest

from kernelzoo.ceilings import device_ceilings
from kernelzoo.fingerprint import Fingerprint

H100 = Fingerprint(kind="cuda", name="NVIDIA H100 80GB HBM3", capability="9.0", sm_count=132)


def test_h100_ceilings_are_the_measured_figures():
    ceilings = device_ceilings(H100)
    assert (ceilings.bandwidth_gbs, ceilings.tflops["bfloat16"], ceilings.tflops["float32"]) == (3000, 726, 52)
    # gelu 16384^2 fp32: 2 GiB moved, memory-bound: a 0.716 ms floor at 3.0 TB/s
    assert ceilings.floor_ms(8 * 16384**2, 8 * 16384**2, "float32") == pytest.approx(0.716, rel=1e-3)
    # bf16 matmul 4096^3 is compute-bound: 2 * 4096^3 FLOPs at 726 TFLOP/s
    assert ceilings.floor_ms(2 * 4096**3, 3 * 2 * 4096**2, "bfloat16") == pytest.approx(0.1893, rel=1e-3)
    # an FP8 GEMM of the same size runs at twice bf16's rate: half that floor
    assert ceilings.floor_ms(2 * 4096**3, 3 * 4096**2, "float8_e4m3fn") == pytest.approx(0.1893 / 2, rel=1e-3)


def test_other_devices_use_a_stored_calibration_or_have_none():
    cpu = Fingerprint(kind="cpu", name="Some CPU", cores=2)
    assert device_ceilings(cpu) is None
    measured = device_ceilings(cpu, {"bandwidth_gbs": 10.0, "tflops": {"float32": 0.1}})
    assert measured.floor_ms(0, 10e6, "float32") == pytest.approx(1.0)
    assert measured.floor_ms(1e9, 0, "bfloat16") == pytest.approx(10.0)  # float32's peak stands in
    assert measured.floor_ms(1e9, 0, "float8_e4m3fn") == pytest.approx(10.0)  # no bfloat16 peak to double
