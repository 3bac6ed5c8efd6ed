"""Device fingerprints: what about a machine decides which kernel config is fastest on it.

A tuned winner is keyed by :attr:`Fingerprint.hash`, so any change of GPU, driver, CUDA,
NVRTC, Triton, CPU, core count or C compiler is a miss, never a stale hit.
:attr:`Fingerprint.hardware_hash` covers the chip alone; shipped winners match on it.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch

# The fields that name the chip; the rest are its software.
HARDWARE_FIELDS = ("kind", "name", "capability", "sm_count", "isa", "cores")


@dataclass(frozen=True)
class Fingerprint:
    """One device as far as tuning cares; empty fields do not apply to its kind."""

    kind: str  # "cuda" or "cpu"
    name: str  # GPU name, or CPU model name
    capability: str = ""  # compute capability, "9.0"
    sm_count: int = 0
    driver: str = ""  # kernel driver release and the CUDA version it supports
    cuda: str = ""  # torch's CUDA runtime version
    nvrtc: str = ""
    triton: str = ""
    isa: str = ""  # CPU feature flags, as /proc/cpuinfo lists them
    cores: int = 0  # cores this process may run on
    compiler: str = ""  # first line of `$CC --version`

    @property
    def hash(self) -> str:
        """Stable hash of every field: the device part of a tuning key."""
        return _digest(asdict(self))

    @property
    def hardware_hash(self) -> str:
        """Stable hash of the chip's fields only (software versions left out)."""
        return _digest({k: getattr(self, k) for k in HARDWARE_FIELDS})

    def describe(self) -> str:
        """One line for people: 'NVIDIA H100 80GB HBM3 (sm 9.0, 132 SMs)'."""
        if self.kind == "cuda":
            return f"{self.name} (sm {self.capability}, {self.sm_count} SMs)"
        return f"{self.name or 'unknown CPU'} ({self.cores} cores)"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fingerprint:
        """The fingerprint of ``data`` (unknown keys, from a newer kernelzoo, are ignored)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def _digest(data: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


@functools.cache
def cpu_fingerprint() -> Fingerprint:
    """This CPU, its usable cores and the C compiler that builds the OpenMP plugins."""
    from kernelzoo.backends.openmp import compiler_version, cpu_model

    model, isa = cpu_model()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return Fingerprint(kind="cpu", name=model, isa=isa, cores=cores, compiler=compiler_version())


@functools.cache
def gpu_fingerprint(index: int) -> Fingerprint:
    """CUDA device ``index``; creates torch's CUDA context, so never call it in the tuner's parent."""
    from kernelzoo.backends import triton as triton_backend

    props = torch.cuda.get_device_properties(index)
    return Fingerprint(
        kind="cuda", name=props.name, capability=f"{props.major}.{props.minor}",
        sm_count=props.multi_processor_count, driver=driver_version(), cuda=torch.version.cuda or "",
        nvrtc=_nvrtc_version(), triton=triton_backend.version())


def fingerprint(device: torch.device | str) -> Fingerprint:
    """The fingerprint of a torch device ('cpu', 'cuda', 'cuda:1')."""
    device = torch.device(device)
    if device.type == "cuda":
        return gpu_fingerprint(device.index if device.index is not None else torch.cuda.current_device())
    return cpu_fingerprint()


def driver_version() -> str:
    """'580.65.06, CUDA 13.0': the kernel module's release and the driver API's CUDA version."""
    release = ""
    try:
        with open("/proc/driver/nvidia/version") as f:
            words = f.readline().split()
        release = next((w for w in words if w[:1].isdigit() and "." in w), "")
    except OSError:
        pass
    try:
        version = ctypes.c_int()
        if ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(version)) == 0:
            cuda = f"CUDA {version.value // 1000}.{version.value % 1000 // 10}"
            return f"{release}, {cuda}" if release else cuda
    except OSError:
        pass
    return release


def _nvrtc_version() -> str:
    from kernelzoo.backends import cuda
    from kernelzoo.errors import CudaError

    try:
        major, minor = cuda.nvrtc_version()
    except (CudaError, OSError):
        return ""
    return f"{major}.{minor}"
