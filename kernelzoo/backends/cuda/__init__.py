"""Raw CUDA backend: NVRTC compiles CUDA C++ to cubins, the driver API loads and launches them (cffi ABI).

No nvcc, no torch extension, no CUDA header: a source is compiled as PRELUDE + defines + source, and PRELUDE
declares, header-free, what kernels share:

* ``kz_half`` / ``kz_bf16``: 2-byte structs with the bits of torch.float16 / torch.bfloat16 (a ``kz_half*``
  parameter takes a half tensor); ``kz_h2`` / ``kz_bf2``: 4-byte aligned pairs of them.
* ``float kz_to_float(v)`` for float, kz_half and kz_bf16, and ``kz_from_float<X>(float)`` back, rounding
  to nearest even; ``kz_to_float2(pair)`` / ``kz_from_float2<X2>(float2)`` for the pairs.
* ``KZ_INF``: +infinity as a float.
* ``kz_wait_prior_grids()`` / ``kz_launch_dependents()``: programmatic dependent launch (sm_90 on, no-ops
  before). A kernel launched with ``dependent=True`` may start while the kernel before it on the stream still
  runs; ``kz_wait_prior_grids()`` returns once that kernel has finished and its writes are visible, so it goes
  before the first read of anything that kernel wrote. ``kz_launch_dependents()`` lets the dependent kernel's
  blocks start before this kernel ends (without it they start as its last blocks exit).

A kernel is written once for an element type ``T``, computes in float, and is compiled per dtype with
``defines={"T": dtype_define(x.dtype)}``, so ``T`` is float, kz_half or kz_bf16::

    extern "C" __global__ void scale(const T* x, T* y, float a, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = kz_from_float<T>(a * kz_to_float(x[i]));
    }

    k = load(SRC, defines={"T": dtype_define(x.dtype)}).function("scale")
    k(x, y, 2.0, x.numel(), grid=(x.numel() + 255) // 256, block=256)

``extern "C"`` keeps the name unmangled. Defines become ``#define`` lines after the prelude, not ``-D``
options (see _source). Launch arguments: a CUDA tensor is passed as its data_ptr(), None as a null pointer,
bool/int as a 32-bit int, float as a 32-bit float, ``I64(n)`` as a long long, a numpy scalar as its own type
(numpy.int64: long long, numpy.float64: double).

The backend's modules: ``bindings`` (cffi declarations, loading NVRTC and the driver, error checks), ``compiler``
(NVRTC compile and cache, with PRELUDE in ``prelude.cuh``), ``launch`` (Module, Kernel, argument packing,
streams), ``tma`` (tensor maps) and ``plugin`` (the plugins' base class). What plugins and tools use is
re-exported here.
"""

from kernelzoo.backends.cuda.bindings import (
    available,
    compile_available,
    dependent_launch,
    nvrtc_library,
    nvrtc_version,
    tensor_map_launch,
)
from kernelzoo.backends.cuda.compiler import PRELUDE, compile_cubin, device_arch, dtype_define, last_log
from kernelzoo.backends.cuda.launch import I64, Kernel, Module, load
from kernelzoo.backends.cuda.plugin import CudaImplementation
from kernelzoo.backends.cuda.tma import TensorMap, tensor_map, tma_strides
from kernelzoo.errors import CompileError, CudaError

__all__ = [
    "I64", "PRELUDE", "CompileError", "CudaError", "CudaImplementation", "Kernel", "Module", "TensorMap",
    "available", "compile_available", "compile_cubin", "dependent_launch", "device_arch", "dtype_define",
    "last_log", "load", "nvrtc_library", "nvrtc_version", "tensor_map", "tensor_map_launch", "tma_strides",
]
