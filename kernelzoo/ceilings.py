"""What a device can do at best, and the floor time of a call: max(FLOPs / peak, bytes / bandwidth).

Known GPUs come from a small table (how its figures were measured: docs/perf/method.md); any other device uses
a measured calibration (copy bandwidth and matmul rates) when one was stored. Used by ``kernelzoo bench`` for
its "% floor" column and by the tuner to judge a winner against the floor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernelzoo.fingerprint import Fingerprint


@dataclass(frozen=True)
class Ceilings:
    """Memory bandwidth and matmul peak per dtype name, and where the figures come from."""

    bandwidth_gbs: float  # bytes read + written per second, in GB/s
    tflops: Mapping[str, float]  # dense matmul rate by dtype name ("float32", "float16", ...)
    source: str

    def floor_ms(self, flops: float, nbytes: float, dtype: str) -> float | None:
        """The least time a call can take here: max(FLOPs / peak, bytes / bandwidth), in ms.

        A dtype without its own peak (a CPU calibration measures float32 only) uses float32's:
        CPUs compute float16 and bfloat16 elementwise ops in float32. An 8-bit float without one gets twice
        bfloat16's, where that is known: the tensor cores that take 8-bit floats (Ada, Hopper) multiply them at
        twice their 16-bit rate. None without any of these.
        """
        memory = nbytes / (self.bandwidth_gbs * 1e9) * 1e3
        if flops <= 0:
            return memory
        peak = self.tflops.get(dtype)
        if peak is None and dtype.startswith("float8") and "bfloat16" in self.tflops:
            peak = 2 * self.tflops["bfloat16"]
        peak = peak or self.tflops.get("float32")
        return None if peak is None else max(memory, flops / (peak * 1e12) * 1e3)

    def to_dict(self) -> dict[str, Any]:
        return {"bandwidth_gbs": self.bandwidth_gbs, "tflops": dict(self.tflops), "source": self.source}


# (substring of the GPU name, bandwidth GB/s, {dtype: TFLOP/s}, source); the first match wins.
# fp32 is without TF32: torch's default for matmul.
_KNOWN: tuple[tuple[str, float, dict[str, float], str], ...] = (
    ("H100 80GB HBM3", 3000.0, {"bfloat16": 726.0, "float16": 691.0, "float32": 52.0},
     "docs/perf/method.md: H100 SXM measured, copy 3.0 TB/s, cuBLAS 4096^3"),
    ("H100 PCIe", 2000.0, {"bfloat16": 756.0, "float16": 756.0, "float32": 51.0},
     "H100 PCIe datasheet (not measured)"),
    ("H100", 3000.0, {"bfloat16": 726.0, "float16": 691.0, "float32": 52.0},
     "docs/perf/method.md H100 SXM figures (this H100 variant was not measured)"),
    ("H200", 4190.0, {"bfloat16": 780.0, "float16": 764.0, "float32": 51.4},
     "docs/perf/method.md: H200 measured by kernelzoo bench --calibrate, copy 4.19 TB/s, cuBLAS 4096^3"),
    ("A100", 2039.0, {"bfloat16": 312.0, "float16": 312.0, "float32": 19.5}, "A100 80GB datasheet (not measured)"),
)


def device_ceilings(fp: Fingerprint, measured: Mapping[str, Any] | None = None) -> Ceilings | None:
    """The ceilings of ``fp``: the built-in table for known GPUs, else ``measured`` (a stored calibration)."""
    if fp.kind == "cuda":
        for name, bandwidth, tflops, source in _KNOWN:
            if name in fp.name:
                return Ceilings(bandwidth, tflops, source)
    if measured:
        return Ceilings(float(measured["bandwidth_gbs"]), dict(measured["tflops"]),
                        measured.get("source", "measured calibration"))
    return None
