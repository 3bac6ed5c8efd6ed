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
"""

from __future__ import annotations

import contextlib
import ctypes.util
import functools
import glob
import hashlib
import importlib.util
import json
import operator
import os
import struct
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

import cffi
import torch

from kernelzoo.errors import CompileError, CudaError
from kernelzoo.paths import cache_dir
from kernelzoo.registry import FLOATS, Availability, Implementation

PRELUDE = r"""
#define KZ_INF __int_as_float(0x7f800000)
struct __align__(2) kz_half { unsigned short x; };
struct __align__(2) kz_bf16 { unsigned short x; };
struct __align__(4) kz_h2 { kz_half x, y; };
struct __align__(4) kz_bf2 { kz_bf16 x, y; };

__device__ __forceinline__ float kz_to_float(float v) { return v; }
__device__ __forceinline__ float kz_to_float(kz_half v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.x));
  return f;
}
__device__ __forceinline__ float kz_to_float(kz_bf16 v) { return __uint_as_float((unsigned)v.x << 16); }

/* KzT, not T: kernels #define T */
template <class KzT> __device__ KzT kz_from_float(float f);
template <> __device__ __forceinline__ float kz_from_float<float>(float f) { return f; }
template <> __device__ __forceinline__ kz_half kz_from_float<kz_half>(float f) {
  kz_half h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.x) : "f"(f));
  return h;
}
template <> __device__ __forceinline__ kz_bf16 kz_from_float<kz_bf16>(float f) {
  kz_bf16 h;
#if __CUDA_ARCH__ >= 800
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.x) : "f"(f));
#else /* no bf16 cvt before sm_80: round to nearest even by hand, keeping a NaN a NaN */
  unsigned u = __float_as_uint(f);
  h.x = (u & 0x7fffffffu) > 0x7f800000u ? (unsigned short)((u >> 16) | 0x40u)
                                        : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
  return h;
}

__device__ __forceinline__ float2 kz_to_float2(kz_h2 v) {
  return make_float2(kz_to_float(v.x), kz_to_float(v.y));
}
__device__ __forceinline__ float2 kz_to_float2(kz_bf2 v) {
  return make_float2(kz_to_float(v.x), kz_to_float(v.y));
}
template <class KzT2> __device__ KzT2 kz_from_float2(float2 f);
template <> __device__ __forceinline__ kz_h2 kz_from_float2<kz_h2>(float2 f) {
  return kz_h2{kz_from_float<kz_half>(f.x), kz_from_float<kz_half>(f.y)};
}
template <> __device__ __forceinline__ kz_bf2 kz_from_float2<kz_bf2>(float2 f) {
  return kz_bf2{kz_from_float<kz_bf16>(f.x), kz_from_float<kz_bf16>(f.y)};
}

__device__ __forceinline__ void kz_wait_prior_grids() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void kz_launch_dependents() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
"""

_ffi = cffi.FFI()
_ffi.cdef("""
typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;
const char *nvrtcGetErrorString(nvrtcResult result);
nvrtcResult nvrtcVersion(int *major, int *minor);
nvrtcResult nvrtcGetNumSupportedArchs(int *numArchs);
nvrtcResult nvrtcGetSupportedArchs(int *supportedArchs);
nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name, int numHeaders,
                               const char * const *headers, const char * const *includeNames);
nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog);
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char * const *options);
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *cubinSizeRet);
nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin);
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *logSizeRet);
nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log);

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
CUresult cuGetErrorName(CUresult error, const char **pStr);
CUresult cuGetErrorString(CUresult error, const char **pStr);
CUresult cuInit(unsigned int flags);
CUresult cuDriverGetVersion(int *driverVersion);
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuCtxGetCurrent(CUcontext *pctx);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxPushCurrent_v2(CUcontext ctx);
CUresult cuCtxPopCurrent_v2(CUcontext *pctx);
CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);
CUresult cuFuncGetAttribute(int *pi, int attrib, CUfunction hfunc);
CUresult cuFuncSetAttribute(CUfunction hfunc, int attrib, int value);
CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize);
CUresult cuFuncGetParamCount(CUfunction func, size_t *paramCount);
CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                        unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);
typedef struct {  /* CUlaunchAttribute: an id, then a 64-byte, 8-aligned union of values */
    int id;
    char pad[4];
    union { char pad[64]; int programmaticStreamSerializationAllowed; void *align; } value;
} CUlaunchAttribute;
typedef struct {
    unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;
CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra);
typedef struct { unsigned long long opaque[16]; } CUtensorMap;
CUresult cuTensorMapEncodeTiled(CUtensorMap *tensorMap, int tensorDataType, unsigned int tensorRank,
                                void *globalAddress, const unsigned long long *globalDim,
                                const unsigned long long *globalStrides, const unsigned int *boxDim,
                                const unsigned int *elementStrides, int interleave, int swizzle, int l2Promotion,
                                int oobFill);
""")

_NVRTC_ERROR_COMPILATION = 6
_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # a CUlaunchAttributeID
_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8  # a CU_FUNC_ATTRIBUTE_*, like the values of _ATTRIBUTES
_ATTRIBUTES = {"registers": 4, "static_shared_bytes": 1, "local_bytes": 3, "max_threads_per_block": 0}
_DTYPE_DEFINES = {torch.float32: "float", torch.float16: "kz_half", torch.bfloat16: "kz_bf16"}
_cubins: dict[str, tuple[bytes, str]] = {}  # cache key -> (cubin, NVRTC log)
_modules: dict[tuple[Any, ...], Module] = {}
_last_log = ""


class I64(int):
    """An int launch argument passed as a 64-bit ``long long`` rather than a 32-bit ``int``."""


class TensorMap:
    """A launch argument that is a CUtensorMap (128 bytes): how a kernel reads a tensor through the TMA unit
    (``cp.async.bulk.tensor``), taking it as a ``__grid_constant__`` parameter. Made by :func:`tensor_map`.
    A launch that passes one packs every argument at the offset the kernel's compiled parameter list gives it
    (cuFuncGetParamInfo): the map is 64-byte aligned in the constant bank, and the bank's parameters start past
    a header, so its offset in the buffer is not a multiple of 64 (48 for a first parameter on sm_90)."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes) -> None:
        if len(raw) != 128:
            raise ValueError(f"a CUtensorMap is 128 bytes, not {len(raw)}")
        self.raw = raw


_TMA_DTYPES = {torch.float16: 6, torch.float32: 7, torch.bfloat16: 9}  # CU_TENSOR_MAP_DATA_TYPE_*
_TMA_SWIZZLES = {0: 0, 32: 1, 64: 2, 128: 3}  # bytes -> CU_TENSOR_MAP_SWIZZLE_*


def tensor_map(tensor: torch.Tensor, box: Sequence[int], swizzle: int = 128) -> TensorMap:
    """The tiled tensor map of ``tensor`` (on a CUDA device, its last dim contiguous): boxes of ``box`` elements
    (innermost dim first, as the kernel's coordinates), stored in shared memory with the ``swizzle``-byte swizzle
    (0, 32, 64 or 128; the box's inner extent must then be that many bytes or fewer); elements past the tensor's
    bounds arrive as zeros. The TMA unit's limits are checked here: a 16-byte aligned address, strides in
    nonzero multiples of 16 bytes (a dim of one element takes any: see tma_strides), 1 to 5 dims, boxes of 1 to
    256 a dim. Encoded once per tensor layout and box (cached), no GPU work."""
    if tensor.dtype not in _TMA_DTYPES or swizzle not in _TMA_SWIZZLES:
        raise ValueError(f"tensor_map: dtype {tensor.dtype} or swizzle {swizzle} not supported")
    size = tensor.element_size()
    dims, strides = tuple(reversed(tensor.shape)), tma_strides(tensor.shape, tensor.stride(), size)
    if not tensor.is_cuda or tensor.dim() != len(box) or not 1 <= tensor.dim() <= 5 or tensor.stride(-1) != 1:
        raise ValueError(f"tensor_map: a CUDA tensor of 1-5 dims, the last contiguous, and a box of as many "
                         f"dims; got {tuple(tensor.shape)} strides {tensor.stride()} box {tuple(box)}")
    if tensor.data_ptr() % 16 or any(s % 16 or not s for s in strides) or not all(1 <= b <= 256 for b in box) or (
            swizzle and box[0] * size > swizzle):
        raise ValueError(f"tensor_map: address and strides must be (nonzero) multiples of 16 bytes and the box fit "
                         f"the swizzle; got strides {tensor.stride()} box {tuple(box)} swizzle {swizzle}")
    return _encoded(tensor.data_ptr(), _TMA_DTYPES[tensor.dtype], dims, strides, tuple(box), swizzle)


def tma_strides(shape: Sequence[int], stride: Sequence[int], size: int) -> tuple[int, ...]:
    """The byte strides of dims 1.. (innermost first, as cuTensorMapEncodeTiled takes them) of a tensor of
    ``shape`` and element ``stride`` (outermost first, as torch gives them), ``size`` bytes an element. A dim of
    one element is never stepped along, so any stride serves: it gets the extent of the dims inside it, rounded
    up to 16 bytes (torch may give such a dim a stride the TMA unit refuses)."""
    dims, out = tuple(reversed(shape)), []
    for i, step in enumerate(reversed(stride[:-1]), start=1):
        if dims[i] == 1:
            inside = out[-1] * dims[i - 1] if out else size * dims[0]
            out.append(-(-inside // 16) * 16)
        else:
            out.append(step * size)
    return tuple(out)


@functools.lru_cache(maxsize=256)
def _encoded(address: int, dtype: int, dims: tuple[int, ...], strides: tuple[int, ...], box: tuple[int, ...],
             swizzle: int) -> TensorMap:
    rank = len(dims)
    out = _ffi.new("CUtensorMap *")
    rc = _driver().cuTensorMapEncodeTiled(
        out, dtype, rank, _ffi.cast("void *", address), _ffi.new("unsigned long long[]", dims),
        _ffi.new("unsigned long long[]", strides or [0]), _ffi.new("unsigned int[]", box),
        _ffi.new("unsigned int[]", [1] * rank), 0, _TMA_SWIZZLES[swizzle], 2, 0)  # L2 promotion 128 B, zero fill
    _check(f"cuTensorMapEncodeTiled(dims={dims}, strides={strides}, box={box}, swizzle={swizzle})", rc)
    return TensorMap(bytes(_ffi.buffer(out)))


def nvrtc_library() -> str | None:
    """Path of libnvrtc: $KERNELZOO_NVRTC, the nvidia pip wheels, a CUDA toolkit, then the linker's path."""
    if path := os.environ.get("KERNELZOO_NVRTC"):
        return path  # an explicit choice: if it is wrong, loading it says so
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or ()) if spec else ():
        wheels = [os.path.join(root, p) for p in ("cu13/lib/libnvrtc.so.13", "cuda_nvrtc/lib/libnvrtc.so.12")]
        for path in wheels + sorted(glob.glob(os.path.join(root, "*/lib/libnvrtc.so*")), reverse=True):
            if os.path.isfile(path) and "builtins" not in os.path.basename(path):
                return path
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (found := sorted(glob.glob(os.path.join(home, "lib64", "libnvrtc.so*")), reverse=True)):
            return found[0]
    return ctypes.util.find_library("nvrtc")


@functools.cache
def _nvrtc() -> Any:
    if (path := nvrtc_library()) is None:
        raise CudaError("NVRTC not found: pip install nvidia-cuda-nvrtc, or set KERNELZOO_NVRTC to its path")
    try:
        return _ffi.dlopen(path)
    except OSError as e:
        raise CudaError(f"cannot load NVRTC from {path}: {e}") from None


@functools.cache
def _libcuda() -> Any:
    try:
        return _ffi.dlopen("libcuda.so.1")
    except OSError as e:
        raise CudaError(f"libcuda.so.1 cannot be loaded (no NVIDIA driver?): {e}") from None


@functools.cache
def _driver() -> Any:
    _check("cuInit", _libcuda().cuInit(0))  # once, before any other driver call
    return _libcuda()


def _check_nvrtc(fn: str, rc: int) -> None:
    if rc != 0:
        raise CudaError(f"{fn} failed: error {rc} ({_ffi.string(_nvrtc().nvrtcGetErrorString(rc)).decode()})")


def _check(fn: str, rc: int) -> None:
    if rc != 0:
        name, text = _ffi.new("const char **"), _ffi.new("const char **")
        if _libcuda().cuGetErrorName(rc, name) == 0 and _libcuda().cuGetErrorString(rc, text) == 0:
            raise CudaError(f"{fn} failed: error {rc} ({_ffi.string(name[0]).decode()}: "
                            f"{_ffi.string(text[0]).decode()})")
        raise CudaError(f"{fn} failed: error {rc} (unknown to this driver)")


def nvrtc_version() -> tuple[int, int]:
    """(major, minor) version of the NVRTC in use."""
    major, minor = _ffi.new("int *"), _ffi.new("int *")
    _check_nvrtc("nvrtcVersion", _nvrtc().nvrtcVersion(major, minor))
    return major[0], minor[0]


@functools.cache
def compile_available() -> tuple[bool, str]:
    """Whether kernels can be compiled here (NVRTC found and loadable), and why (not)."""
    try:
        major, minor = nvrtc_version()
    except CudaError as e:
        return False, str(e)
    return True, f"NVRTC {major}.{minor} at {nvrtc_library()}"


@functools.cache
def available() -> tuple[bool, str]:
    """Whether kernels can be compiled and launched here (NVRTC, libcuda.so.1, a CUDA GPU), and why (not)."""
    ok, reason = compile_available()
    if not ok:
        return False, reason
    version = _ffi.new("int *")
    try:
        _check("cuDriverGetVersion", _libcuda().cuDriverGetVersion(version))
        if not torch.cuda.is_available():
            return False, "no CUDA GPU: torch.cuda.is_available() is False"
        _driver()
    except CudaError as e:
        return False, str(e)
    if version[0] // 1000 < nvrtc_version()[0]:  # a newer major CUDA's cubins do not load on an older driver
        return False, f"the driver supports CUDA {version[0] // 1000}, older than NVRTC {nvrtc_version()}"
    return True, reason


def _missing_symbol(name: str) -> str | None:
    """Why the driver library has no function ``name`` (an older driver, or none loads), or None if it has."""
    try:
        getattr(_libcuda(), name)
    except (AttributeError, CudaError) as e:
        return str(e)
    return None


@functools.cache
def tensor_map_launch() -> tuple[bool, str]:
    """Whether kernels that take tensor maps can be launched here, and why (not): their arguments are packed at the
    offsets cuFuncGetParamInfo gives (drivers of CUDA 12.4 on)."""
    if missing := _missing_symbol("cuFuncGetParamInfo"):
        return False, f"the driver has no cuFuncGetParamInfo (CUDA 12.4 drivers on): {missing}"
    return True, "cuFuncGetParamInfo found"


@functools.cache
def dependent_launch(device: int) -> tuple[bool, str]:
    """Whether a kernel can be launched on ``device`` as a programmatic dependent of the kernel before it
    (``Kernel(..., dependent=True)``: an sm_90 device and a driver with cuLaunchKernelEx), and why (not)."""
    major, _ = torch.cuda.get_device_capability(device)
    if major < 9:
        return False, f"sm_{major}x: programmatic dependent launch needs sm_90"
    if missing := _missing_symbol("cuLaunchKernelEx"):
        return False, f"the driver has no cuLaunchKernelEx: {missing}"
    return True, "sm_90 and cuLaunchKernelEx"


def device_arch(device_index: int | None = None) -> str:
    """The "sm_XY" to compile for a torch CUDA device: its own, or the highest older one NVRTC supports."""
    major, minor = torch.cuda.get_device_capability(device_index)
    arch, lib, count = 10 * major + minor, _nvrtc(), _ffi.new("int *")
    if not hasattr(lib, "nvrtcGetSupportedArchs"):  # NVRTC < 11.2 cannot tell: try the device's own
        return f"sm_{arch}"
    _check_nvrtc("nvrtcGetNumSupportedArchs", lib.nvrtcGetNumSupportedArchs(count))
    supported = _ffi.new("int[]", count[0])
    _check_nvrtc("nvrtcGetSupportedArchs", lib.nvrtcGetSupportedArchs(supported))
    best = max((a for a in supported if a <= arch), default=0)
    if best // 10 != major:  # a cubin runs on later minors of its major only: sm_86 runs on sm_89, not sm_90
        raise CudaError(f"NVRTC {nvrtc_version()} cannot compile for sm_{arch}; it knows {list(supported)}")
    return f"sm_{best}"


def dtype_define(dtype: torch.dtype) -> str:
    """The kernel element type for a torch dtype: the value of the ``T`` define."""
    if dtype not in _DTYPE_DEFINES:
        raise TypeError(f"no CUDA kernel element type for {dtype}; expected one of {list(_DTYPE_DEFINES)}")
    return _DTYPE_DEFINES[dtype]


def _source(source: str, defines: Mapping[str, int | float | str], name: str) -> str:
    # `#define`s, not -D options: NVRTC's built-in header, which -D would reach, has its own
    # `template <typename T>` that -DT=float breaks. `#line` keeps error lines those of `source`.
    lines = [PRELUDE]
    for key, value in sorted(defines.items()):
        if not key.isidentifier():
            raise ValueError(f"define name {key!r} is not a C identifier")
        lines.append(f"#define {key} {int(value) if isinstance(value, bool) else value}")
    return "\n".join([*lines, f'#line 1 "{name}"', source])


def _write_atomic(path: str, data: bytes) -> None:
    tmp = None
    try:  # a read-only or full cache only costs a compile next time: never an error
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)  # a reader sees no file or a whole one, never a partial one
    except OSError:
        with contextlib.suppress(OSError):
            if tmp is not None:
                os.unlink(tmp)


def _nvrtc_compile(text: str, name: str, opts: list[str], what: str) -> tuple[bytes, str]:
    lib, prog, size = _nvrtc(), _ffi.new("nvrtcProgram *"), _ffi.new("size_t *")
    _check_nvrtc("nvrtcCreateProgram", lib.nvrtcCreateProgram(prog, text.encode(), name.encode(), 0,
                                                              _ffi.NULL, _ffi.NULL))
    try:
        c_opts = [_ffi.new("char[]", o.encode()) for o in opts]
        rc = lib.nvrtcCompileProgram(prog[0], len(c_opts), _ffi.new("char *[]", c_opts))
        _check_nvrtc("nvrtcGetProgramLogSize", lib.nvrtcGetProgramLogSize(prog[0], size))
        log = _ffi.new("char[]", size[0] + 1)
        _check_nvrtc("nvrtcGetProgramLog", lib.nvrtcGetProgramLog(prog[0], log))
        if rc != 0:
            error = _ffi.string(lib.nvrtcGetErrorString(rc)).decode()
            raise CompileError(f"NVRTC could not compile {what}: {error}\n{_ffi.string(log).decode()}")
        _check_nvrtc("nvrtcGetCUBINSize", lib.nvrtcGetCUBINSize(prog[0], size))
        cubin = _ffi.new("char[]", size[0])
        _check_nvrtc("nvrtcGetCUBIN", lib.nvrtcGetCUBIN(prog[0], cubin))
        return bytes(_ffi.buffer(cubin)), _ffi.string(log).decode(errors="replace")
    finally:  # unchecked: its failure must not hide the compile error, and leaks a program at worst
        lib.nvrtcDestroyProgram(prog)


def compile_cubin(source: str, *, defines: Mapping[str, int | float | str] = {}, options: Sequence[str] = (),
                  arch: str, name: str = "kernel.cu") -> bytes:
    """NVRTC-compile PRELUDE + ``source`` to a cubin for ``arch`` ("sm_90"); cached in memory and on disk."""
    global _last_log
    if not arch.startswith("sm_"):  # compute_XY would make PTX, not a cubin
        raise ValueError(f"arch must be a real GPU architecture like 'sm_90', got {arch!r}")
    std = [] if any(o.startswith(("-std", "--std")) for o in options) else ["-std=c++17"]
    opts, text = [f"-arch={arch}", *std, *options], _source(source, defines, name)
    key = hashlib.sha256(json.dumps([text, name, opts, nvrtc_version()]).encode()).hexdigest()
    if key not in _cubins:
        path, cubin, log = os.path.join(cache_dir("cuda"), key), b"", ""
        try:
            with open(path + ".cubin", "rb") as f:
                cubin = f.read()
            if os.path.exists(path + ".log"):
                with open(path + ".log", encoding="utf-8") as f:
                    log = f.read()
        except OSError:
            pass
        if not cubin.startswith(b"\x7fELF"):
            what = f"{name} for {arch} (options {opts}, defines {dict(defines)})"
            cubin, log = _nvrtc_compile(text, name, opts, what)
            if log.strip():  # written first, so that a cached cubin always finds its log
                _write_atomic(path + ".log", log.encode())
            _write_atomic(path + ".cubin", cubin)
        _cubins[key] = cubin, log
    cubin, _last_log = _cubins[key]
    return cubin


def last_log() -> str:
    """NVRTC's log (warnings) for the latest compile_cubin or load, also when it came from a cache."""
    return _last_log


@functools.cache
def _primary_context(device: int) -> Any:
    dev, ctx = _ffi.new("CUdevice *"), _ffi.new("CUcontext *")
    _check("cuDeviceGet", _driver().cuDeviceGet(dev, device))
    _check("cuDevicePrimaryCtxRetain", _driver().cuDevicePrimaryCtxRetain(ctx, dev[0]))  # torch's context
    return ctx[0]


@contextmanager
def _context(device: int) -> Iterator[None]:
    """Make ``device``'s primary context current in the block, disturbing torch as little as possible."""
    lib, ctx, current = _driver(), _primary_context(device), _ffi.new("CUcontext *")
    _check("cuCtxGetCurrent", lib.cuCtxGetCurrent(current))
    if current[0] == ctx:
        yield
    elif current[0] == _ffi.NULL and device == torch.cuda.current_device():
        _check("cuCtxSetCurrent", lib.cuCtxSetCurrent(ctx))  # what torch's runtime does on its first use
        yield
    else:  # another device's context is current: borrow the thread, and give it back as it was
        _check("cuCtxPushCurrent", lib.cuCtxPushCurrent_v2(ctx))
        try:
            yield
        finally:
            _check("cuCtxPopCurrent", lib.cuCtxPopCurrent_v2(current))


class Module:
    """A cubin loaded into one device's primary context; never unloaded."""

    def __init__(self, cubin: bytes, device: int, log: str = "") -> None:
        self.device, self.log, handle = device, log, _ffi.new("CUmodule *")
        self._functions: dict[str, Kernel] = {}
        with _context(device):
            _check("cuModuleLoadData", _driver().cuModuleLoadData(handle, _ffi.from_buffer(cubin)))
        self._handle = handle[0]

    def function(self, name: str) -> Kernel:
        """The kernel ``name`` (an ``extern "C" __global__`` function) of this module."""
        if name not in self._functions:
            handle = _ffi.new("CUfunction *")
            with _context(self.device):
                rc = _driver().cuModuleGetFunction(handle, self._handle, name.encode())
            _check(f"cuModuleGetFunction({name!r})", rc)
            self._functions[name] = Kernel(self, name, handle[0])
        return self._functions[name]


def _dims(value: tuple[int, ...] | int, what: str) -> tuple[int, int, int]:
    if type(value) is int and value >= 0:  # the common case, without the checks below
        return value, 1, 1
    try:  # operator.index: numpy and torch integers are welcome, floats are not
        dims = tuple(map(operator.index, value if isinstance(value, (tuple, list)) else (value,)))
    except TypeError:
        dims = ()
    if not 1 <= len(dims) <= 3 or min(dims) < 0:
        raise ValueError(f"{what} must be an int or 1 to 3 non-negative ints, got {value!r}")
    return (*dims, 1, 1)[:3]  # type: ignore[return-value]


# Launch arguments reach cuLaunchKernel as one buffer, laid out as a C struct of the kernel's parameters
# (each at its natural alignment: struct's native "@" layout), through its `extra` argument
# (CU_LAUNCH_PARAM_BUFFER_POINTER, CU_LAUNCH_PARAM_BUFFER_SIZE, CU_LAUNCH_PARAM_END). One struct.pack per
# launch instead of a C copy per argument: 28 arguments took 7.7 µs as copies, 0.4 µs packed (2-core Xeon).
_BUFFER_POINTER, _BUFFER_SIZE, _LAUNCH_END = _ffi.cast("void *", 1), _ffi.cast("void *", 2), _ffi.NULL
# the launch attribute of a dependent launch (cuLaunchKernelEx): programmatic stream serialization allowed
_DEPENDENT = _ffi.new("CUlaunchAttribute *", {"id": _PROGRAMMATIC_STREAM_SERIALIZATION,
                                              "value": {"programmaticStreamSerializationAllowed": 1}})
_STRUCT_CODES = {int: "i", bool: "i", float: "f", I64: "q", type(None): "Q"}  # a tensor: "Q", its address
_NUMPY_CODES = {  # numpy dtype.kind + itemsize -> struct code
    "b1": "?", "i1": "b", "u1": "B", "i2": "h", "u2": "H", "i4": "i", "u4": "I", "i8": "q", "u8": "Q",
    "f4": "f", "f8": "d",
}


class _Layout:
    """How launch arguments of one tuple of types are packed: the struct, its size for the driver, and the
    positions of the arguments that are not passed as they are (tensors, None, numpy scalars). ``params``, the
    kernel's (offset, size) of each parameter, places each argument there instead of where a C struct would."""

    def __init__(self, args: Sequence[object], params: Sequence[tuple[int, int]] | None = None) -> None:
        codes = []
        self.converted: list[int] = []
        if params is not None and len(params) != len(args):
            raise TypeError(f"the kernel takes {len(params)} arguments, {len(args)} were given")
        end = 0
        for i, value in enumerate(args):
            code = "128s" if isinstance(value, TensorMap) else _STRUCT_CODES.get(type(value))
            if code is None:
                code = _numpy_code(value) or ("Q" if isinstance(value, torch.Tensor) else None)
                if code is None:
                    raise TypeError(f"kernel argument {i} is a {type(value).__name__}; expected a CUDA tensor, None, "
                                    "bool, int, float, I64, a TensorMap or a numpy scalar")
            if code == "Q" or type(value) not in _STRUCT_CODES:
                self.converted.append(i)
            if params is not None:
                offset, size = params[i]
                if struct.calcsize(code) != size:
                    hint = "; pass I64 for a long long" if code == "i" and size == 8 else ""
                    raise TypeError(f"kernel argument {i} packs as {struct.calcsize(code)} bytes, the kernel's "
                                    f"parameter {i} is {size}{hint}")
                code, end = f"{offset - end}x{code}", offset + size
            codes.append(code)
        self.struct = struct.Struct(("<" if params is not None else "@") + "".join(codes))
        self.size = _ffi.new("size_t *", self.struct.size)  # read by the driver at each launch


def _numpy_code(value: object) -> str | None:
    dtype = getattr(value, "dtype", None)  # numpy first: numpy.float64 is a float, but goes as a double
    if type(value).__module__ == "numpy" and getattr(value, "shape", None) == () and dtype is not None:
        return _NUMPY_CODES.get(f"{dtype.kind}{dtype.itemsize}")
    return None


def _converted(i: int, value: object) -> object:
    """The value packed for launch argument ``i`` that is a tensor (its address), None (0) or a numpy scalar."""
    if value is None:
        return 0
    if isinstance(value, TensorMap):
        return value.raw
    if isinstance(value, torch.Tensor):
        if not value.is_cuda:
            raise ValueError(f"kernel argument {i} is a tensor on {value.device}, not on a CUDA device")
        return value.data_ptr()
    return value.item()  # type: ignore[attr-defined]


def _pack(args: tuple[object, ...], layouts: dict[tuple[type, ...], _Layout],
          params: Callable[[int], Sequence[tuple[int, int]]] | None = None) -> tuple[bytes, _Layout]:
    """The launch arguments as the kernel's parameter buffer, and its layout (cached in ``layouts`` by the
    arguments' types). A layout with a TensorMap is built from ``params(len(args))``, the kernel's parameter
    offsets and sizes, so its cache must be the kernel's own; others are laid out as a C struct."""
    kinds = tuple(map(type, args))
    layout = layouts.get(kinds)
    if layout is None:
        if TensorMap in kinds and params is None:
            raise TypeError("a launch that passes a TensorMap packs at the kernel's offsets: pass its params")
        layout = layouts[kinds] = _Layout(args, params(len(args)) if TensorMap in kinds else None)
    values = list(args)
    for i in layout.converted:
        values[i] = _converted(i, values[i])
    try:
        return layout.struct.pack(*values), layout
    except struct.error:
        for i, value in enumerate(args):
            if type(value) in (int, bool) and not -(2**31) <= value < 2**31:
                raise OverflowError(f"kernel argument {i} = {value} does not fit a 32-bit int; pass I64({value})") \
                    from None
        raise


@functools.cache
def _raw_stream_function() -> Any:
    return getattr(torch._C, "_cuda_getCurrentRawStream", None)  # the address alone: no Stream object made


def _stream_handle(stream: torch.cuda.Stream | int | None, device: int) -> int:
    """The CUstream address of ``stream``; by default torch's current stream on ``device``."""
    if stream is None:
        current = _raw_stream_function()
        if current is not None:
            return current(device)
        stream = torch.cuda.current_stream(device)
    return getattr(stream, "cuda_stream", stream)  # type: ignore[return-value]


def _is_current(device: int) -> bool:
    """Whether ``device``'s primary context is the thread's current one (then a launch needs no switch)."""
    current = _ffi.new("CUcontext *")
    return _driver().cuCtxGetCurrent(current) == 0 and current[0] == _primary_context(device)


class Kernel:
    """One kernel of a loaded Module; calling it launches it."""

    def __init__(self, module: Module, name: str, handle: Any) -> None:
        self.module, self.name, self._handle = module, name, handle
        self._dynamic_shared_limit: int | None = None  # the function's opt-in, read when first needed
        self._layouts: dict[tuple[type, ...], _Layout] = {}  # by argument types (a TensorMap's: this kernel's)

    def params(self, passed: int) -> list[tuple[int, int]]:
        """The (offset, size) in bytes of each of the kernel's parameters in its parameter buffer, from the
        compiled kernel (cuFuncGetParamInfo, CUDA 12.4 drivers on), for a launch that passes ``passed`` arguments.
        Where the driver cannot count the parameters (cuFuncGetParamCount: documented from CUDA 13.4; the 13.0
        driver of the H100 machine has none), those of the first ``passed`` indices: asking past the last is an
        API error that compute-sanitizer reports, so a kernel with more parameters than that is not caught here."""
        ok, reason = tensor_map_launch()
        if not ok:
            raise CudaError(f"{self.name}: a launch that passes a tensor map: {reason}")
        driver = _driver()
        out, offset, size, count = [], _ffi.new("size_t *"), _ffi.new("size_t *"), _ffi.new("size_t *")
        with _context(self.module.device):
            try:
                _check(f"cuFuncGetParamCount({self.name})", driver.cuFuncGetParamCount(self._handle, count))
                last = count[0]
            except AttributeError:
                last = passed
            while len(out) < last and driver.cuFuncGetParamInfo(self._handle, len(out), offset, size) == 0:
                out.append((offset[0], size[0]))
        return out

    def _attribute(self, attribute: int) -> int:
        value = _ffi.new("int *")
        with _context(self.module.device):
            rc = _driver().cuFuncGetAttribute(value, attribute, self._handle)
        _check(f"cuFuncGetAttribute({self.name}, {attribute})", rc)
        return value[0]

    def attributes(self) -> dict[str, int]:
        """Registers per thread, static shared and local (spill, stack) bytes, and max threads per block."""
        return {key: self._attribute(attribute) for key, attribute in _ATTRIBUTES.items()}

    def __call__(self, *args: object, grid: tuple[int, ...] | int, block: tuple[int, ...] | int,
                 shared_mem: int = 0, stream: torch.cuda.Stream | int | None = None, dependent: bool = False) -> None:
        """Launch, asynchronously, on ``stream``: by default torch's current stream on the kernel's device.

        ``dependent``: where the device allows it (:func:`dependent_launch`), as a programmatic dependent of the
        kernel before it on the stream, whose blocks may then start before that kernel ends: the kernel must call
        ``kz_wait_prior_grids()`` before it reads what that kernel wrote. Elsewhere an ordinary launch."""
        grid_dims, block_dims = _dims(grid, "grid"), _dims(block, "block")
        if 0 in grid_dims:
            return  # nothing to do, and CUDA calls an empty grid an error
        data, layout = _pack(args, self._layouts, self.params)  # kept alive until the launch has copied it
        device = self.module.device
        c_stream = _ffi.cast("CUstream", _stream_handle(stream, device))
        if shared_mem > 0:
            self._allow_dynamic_shared(shared_mem)
        extra = (_ffi.new("void *[5]", [_BUFFER_POINTER, _ffi.from_buffer(data), _BUFFER_SIZE, layout.size,
                                        _LAUNCH_END]) if args else _ffi.NULL)
        if dependent and dependent_launch(device)[0]:
            config = _ffi.new("CUlaunchConfig *", [*grid_dims, *block_dims, shared_mem, c_stream, _DEPENDENT, 1])
            launch, what, launch_args = _driver().cuLaunchKernelEx, "cuLaunchKernelEx", (config, self._handle)
        else:
            launch, what = _driver().cuLaunchKernel, "cuLaunchKernel"
            launch_args = (self._handle, *grid_dims, *block_dims, shared_mem, c_stream)
        if _is_current(device):
            rc = launch(*launch_args, _ffi.NULL, extra)
        else:
            with _context(device):
                rc = launch(*launch_args, _ffi.NULL, extra)
        if rc != 0:
            _check(f"{what}({self.name}, grid={grid_dims}, block={block_dims}, shared_mem={shared_mem})", rc)

    def _allow_dynamic_shared(self, size: int) -> None:
        if self._dynamic_shared_limit is None:
            self._dynamic_shared_limit = self._attribute(_MAX_DYNAMIC_SHARED_SIZE_BYTES)
        if size > self._dynamic_shared_limit:  # above 48 KiB (less the static shared) needs an opt-in
            with _context(self.module.device):
                rc = _driver().cuFuncSetAttribute(self._handle, _MAX_DYNAMIC_SHARED_SIZE_BYTES, size)
            _check(f"cuFuncSetAttribute({self.name}, MAX_DYNAMIC_SHARED_SIZE_BYTES, {size})", rc)
            self._dynamic_shared_limit = size


def load(source: str, *, defines: Mapping[str, int | float | str] = {}, options: Sequence[str] = (),
         name: str = "kernel.cu", arch: Callable[[str], str] | None = None) -> Module:
    """Compile ``source`` for torch's current CUDA device and load it there; both cached. ``arch`` maps the
    device's "sm_XY" to the target compiled for (Hopper's "sm_90a" features, say), where given."""
    global _last_log
    torch.cuda.init()  # torch's runtime first, so that the context used below is the one it uses
    device = torch.cuda.current_device()
    target = device_arch(device) if arch is None else arch(device_arch(device))
    key = (source, tuple(sorted(defines.items())), tuple(options), name, device, target)
    if key not in _modules:
        cubin = compile_cubin(source, defines=defines, options=options, arch=target, name=name)
        _modules[key] = Module(cubin, device, _last_log)
    _last_log = _modules[key].log
    return _modules[key]


class CudaImplementation(Implementation):
    """Base of the ``cuda`` plugins: the ``.cu`` beside the module, compiled per dtype and config.

    Config entries in UPPER_CASE shape the code and become ``-D`` defines; lower-case
    entries are launch parameters the wrapper reads itself. ``T`` is the element type.
    """

    plugin: ClassVar[str] = "cuda"
    dtypes: ClassVar[Mapping[str, tuple[torch.dtype, ...]]] = {"cuda": FLOATS}
    sources: ClassVar[tuple[str, ...]] = ("cuda.cu",)

    def available(self) -> Availability:
        return Availability(*available())

    def defines(self, dtype: torch.dtype, config: Mapping[str, Any]) -> dict[str, int | float | str]:
        """The ``-D`` defines of ``config`` for ``dtype``."""
        return {"T": dtype_define(dtype), **{k: v for k, v in config.items() if k.isupper()}}

    def target(self, config: Mapping[str, Any], arch: str) -> str:
        """The target that ``config`` compiles for on a device of ``arch``: the arch itself, unless the config
        uses features of an arch-specific target (sm_90a's wgmma, for one)."""
        return arch

    def kernel(self, name: str, dtype: torch.dtype, config: Mapping[str, Any]) -> Kernel:
        """Kernel ``name`` of this plugin's source, built for ``dtype`` and ``config``, on the current device."""
        # config's items in their order: the same config in another order is another key to the same module
        key = (name, dtype, tuple(config.items()), torch.cuda.current_device())
        kernels = self.__dict__.setdefault("_kernels", {})  # a dict lookup per launch, once built
        if key not in kernels:
            source = self.read_source(self.sources[0])
            module = load(source, defines=self.defines(dtype, config), name=self.sources[0],
                          arch=functools.partial(self.target, config))
            kernels[key] = module.function(name)
        return kernels[key]

    def compile(self, dtype: torch.dtype, config: Mapping[str, Any], arch: str) -> bytes:
        """The cubin for a device of ``arch`` (no GPU needed): how CI checks every ``.cu`` compiles."""
        return compile_cubin(self.read_source(self.sources[0]), defines=self.defines(dtype, config),
                             arch=self.target(config, arch), name=self.sources[0])
