"""Raw CUDA backend: NVRTC compiles CUDA C++ to a cubin, the driver API loads and launches it (cffi ABI mode).

There is no nvcc, no torch extension and no CUDA header: a source is compiled as ``PRELUDE + source``, and
PRELUDE declares, header-free, what kernels share:

* ``kz_half`` / ``kz_bf16``: 2-byte structs with the bits of torch.float16 / torch.bfloat16, so a ``kz_half*``
  parameter takes a half tensor; ``kz_h2`` / ``kz_bf2`` are 4-byte aligned pairs of them.
* ``float kz_to_float(v)`` for float, kz_half and kz_bf16, and ``kz_from_float<X>(float)`` back (round to
  nearest even); ``kz_to_float2`` / ``kz_from_float2<X2>`` do the same for the pairs.
* ``KZ_INF``, +infinity as a float.

A kernel is written once for an element type ``T``, computes in float, and is compiled per dtype with
``defines={"T": dtype_define(x.dtype)}`` (that is ``-DT=float|kz_half|kz_bf16``)::

    extern "C" __global__ void scale(const T* x, T* y, float a, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = kz_from_float<T>(a * kz_to_float(x[i]));
    }

    k = load(SRC, defines={"T": dtype_define(x.dtype)}).function("scale")
    k(x, y, 2.0, x.numel(), grid=(x.numel() + 255) // 256, block=256)

``extern "C"`` keeps the kernel's name unmangled. Launch arguments: a CUDA tensor is passed as its data_ptr(),
None as a null pointer, bool/int as a 32-bit int, float as a 32-bit float, ``I64(n)`` / numpy.int64 as a
long long, numpy.float64 as a double (any numpy scalar as its own C type).
"""

from __future__ import annotations

import ctypes.util
import functools
import glob
import hashlib
import importlib.util
import json
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import cffi
import torch

from kernelzoo.errors import CompileError, CudaError

__all__ = [
    "PRELUDE", "CompileError", "CudaError", "I64", "Kernel", "Module", "available", "compile_available",
    "compile_cubin", "device_arch", "dtype_define", "last_log", "load", "nvrtc_library", "nvrtc_version",
]

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

template <class KzT> __device__ KzT kz_from_float(float f);  /* no `T` here: kernels get -DT=... */
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
#else  /* sm_75 has no bf16 cvt: round to nearest even by hand, keeping NaN a NaN */
  unsigned u = __float_as_uint(f);
  h.x = (u & 0x7fffffffu) > 0x7f800000u ? (unsigned short)((u >> 16) | 0x40u)
                                        : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
  return h;
}

__device__ __forceinline__ float2 kz_to_float2(kz_h2 v) { return make_float2(kz_to_float(v.x), kz_to_float(v.y)); }
__device__ __forceinline__ float2 kz_to_float2(kz_bf2 v) { return make_float2(kz_to_float(v.x), kz_to_float(v.y)); }
template <class KzT2> __device__ KzT2 kz_from_float2(float2 f);
template <> __device__ __forceinline__ kz_h2 kz_from_float2<kz_h2>(float2 f) {
  kz_h2 r = {kz_from_float<kz_half>(f.x), kz_from_float<kz_half>(f.y)};
  return r;
}
template <> __device__ __forceinline__ kz_bf2 kz_from_float2<kz_bf2>(float2 f) {
  kz_bf2 r = {kz_from_float<kz_bf16>(f.x), kz_from_float<kz_bf16>(f.y)};
  return r;
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
CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                        unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);
""")

_NVRTC_ERROR_COMPILATION = 6
_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8  # CU_FUNC_ATTRIBUTE_*
_ATTRIBUTES = {"registers": 4, "static_shared_bytes": 1, "local_bytes": 3, "max_threads_per_block": 0}
_DTYPE_DEFINES = {torch.float32: "float", torch.float16: "kz_half", torch.bfloat16: "kz_bf16"}
# numpy scalars keep their own width: key is dtype.kind + itemsize.
_NUMPY_CTYPES = {"b1": "bool", "i1": "signed char", "u1": "unsigned char", "i2": "short", "u2": "unsigned short",
                 "i4": "int", "u4": "unsigned int", "i8": "long long", "u8": "unsigned long long",
                 "f4": "float", "f8": "double"}

_cubins: dict[str, tuple[bytes, str]] = {}  # cache key -> (cubin, NVRTC log)
_modules: dict[tuple[str, str, tuple[str, ...], int], Module] = {}
_last_log = ""


class I64(int):
    """An int kernel argument passed as a 64-bit ``long long`` instead of a 32-bit ``int``."""


# ---------------------------------------------------------------------------------------------- libraries


def nvrtc_library() -> str | None:
    """Path of libnvrtc: $KERNELZOO_NVRTC, the nvidia pip wheels, $CUDA_HOME / $CUDA_PATH / /usr/local/cuda, ld."""
    if path := os.environ.get("KERNELZOO_NVRTC"):
        return path  # an explicit choice; if it is wrong, loading it says so
    spec = importlib.util.find_spec("nvidia")
    for root in spec.submodule_search_locations or () if spec else ():
        found = [os.path.join(root, "cu13/lib/libnvrtc.so.13"), os.path.join(root, "cuda_nvrtc/lib/libnvrtc.so.12")]
        found += sorted(glob.glob(os.path.join(root, "*/lib/libnvrtc.so*")), reverse=True)
        for path in found:
            if os.path.isfile(path) and "builtins" not in os.path.basename(path):
                return path
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (found := sorted(glob.glob(os.path.join(home, "lib64", "libnvrtc.so*")), reverse=True)):
            return found[0]
    return ctypes.util.find_library("nvrtc")


@functools.cache
def _nvrtc() -> Any:
    path = nvrtc_library()
    if path is None:
        raise CudaError("NVRTC not found: pip install nvidia-cuda-nvrtc, or set KERNELZOO_NVRTC to libnvrtc.so")
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
    lib = _libcuda()
    _check("cuInit", lib.cuInit(0))  # once per process, before any other driver call
    return lib


def _check_nvrtc(fn: str, rc: int, error: type[RuntimeError] = CudaError) -> None:
    if rc != 0:
        raise error(f"{fn} failed: error {rc}: {_ffi.string(_nvrtc().nvrtcGetErrorString(rc)).decode()}")


def _check(fn: str, rc: int) -> None:
    if rc != 0:
        name, text = _ffi.new("const char **"), _ffi.new("const char **")
        lib = _libcuda()
        ok = lib.cuGetErrorName(rc, name) == 0 and lib.cuGetErrorString(rc, text) == 0
        detail = f"{_ffi.string(name[0]).decode()}: {_ffi.string(text[0]).decode()}" if ok else "unknown error"
        raise CudaError(f"{fn} failed: error {rc} ({detail})")


def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC in use."""
    major, minor = _ffi.new("int *"), _ffi.new("int *")
    _check_nvrtc("nvrtcVersion", _nvrtc().nvrtcVersion(major, minor))
    return major[0], minor[0]


@functools.cache
def compile_available() -> tuple[bool, str]:
    """Can kernels be compiled here (NVRTC found and loadable)? With the reason."""
    try:
        major, minor = nvrtc_version()
    except CudaError as e:
        return False, str(e)
    return True, f"NVRTC {major}.{minor} at {nvrtc_library()}"


@functools.cache
def available() -> tuple[bool, str]:
    """Can kernels be compiled and launched here (NVRTC, libcuda.so.1, a torch CUDA GPU)? With the reason."""
    ok, reason = compile_available()
    if not ok:
        return False, reason
    try:
        lib = _libcuda()
    except CudaError as e:
        return False, str(e)
    if not torch.cuda.is_available():
        return False, "no CUDA GPU: torch.cuda.is_available() is False"
    version = _ffi.new("int *")
    try:
        _check("cuDriverGetVersion", lib.cuDriverGetVersion(version))
        _driver()
    except CudaError as e:
        return False, str(e)
    driver, nvrtc = divmod(version[0], 1000)[0], nvrtc_version()[0]
    if driver < nvrtc:  # cubins of a newer major CUDA do not load on an older driver
        return False, f"the driver supports CUDA {driver} but NVRTC is {nvrtc}: update the driver or use an older NVRTC"
    return True, reason


def _supported_archs() -> list[int] | None:
    lib, count = _nvrtc(), _ffi.new("int *")
    try:
        get_count, get_archs = lib.nvrtcGetNumSupportedArchs, lib.nvrtcGetSupportedArchs
    except AttributeError:  # NVRTC < 11.2 cannot say
        return None
    _check_nvrtc("nvrtcGetNumSupportedArchs", get_count(count))
    archs = _ffi.new("int[]", count[0])
    _check_nvrtc("nvrtcGetSupportedArchs", get_archs(archs))
    return list(archs)


def device_arch(device_index: int | None = None) -> str:
    """The "sm_XY" to compile for a torch CUDA device: its own, or the highest below it that NVRTC knows."""
    major, minor = torch.cuda.get_device_capability(device_index)
    arch, supported = 10 * major + minor, _supported_archs()
    if supported is not None and arch not in supported:
        older = [a for a in supported if a <= arch]
        if not older:
            raise CudaError(f"NVRTC {nvrtc_version()} cannot compile for sm_{arch} (it supports {supported})")
        arch = max(older)  # runs on the device: a cubin runs on later minor versions of its major arch
    return f"sm_{arch}"


def dtype_define(dtype: torch.dtype) -> str:
    """The C type name for a torch dtype, as the value of the kernels' ``T`` define."""
    if dtype not in _DTYPE_DEFINES:
        raise TypeError(f"no CUDA element type for {dtype}; expected one of {list(_DTYPE_DEFINES)}")
    return _DTYPE_DEFINES[dtype]


# -------------------------------------------------------------------------------------------- compilation


def _options(options: Sequence[str], arch: str) -> list[str]:
    std = [] if any(o.startswith(("-std", "--std")) for o in options) else ["-std=c++17"]
    return [f"-arch={arch}", *std, *options]


def _source(source: str, defines: Mapping[str, int | float | str], name: str) -> str:
    # Defines are `#define` lines, not -D options: NVRTC's built-in header, compiled first, has its own
    # `template <typename T>` that -DT=float would break. `#line` keeps error lines those of `source`.
    lines = [PRELUDE]
    for key, value in sorted(defines.items()):
        if not key.isidentifier():
            raise ValueError(f"define name {key!r} is not a C identifier")
        lines.append(f"#define {key} {int(value) if isinstance(value, bool) else value}")
    return "\n".join([*lines, f'#line 1 "{name}"', source])


def _cache_dir() -> str:
    if root := os.environ.get("KERNELZOO_CACHE_DIR"):
        return os.path.join(root, "cuda")
    try:
        import platformdirs
    except ImportError:  # keep working without the optional dependency
        return os.path.join(os.path.expanduser("~"), ".cache", "kernelzoo", "cuda")
    return os.path.join(platformdirs.user_cache_dir("kernelzoo"), "cuda")


def _write_atomic(path: str, data: bytes) -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)  # readers see the old file or the whole new one, never a partial one
    except OSError:
        pass  # a read-only or full cache only costs a recompile next time


def _nvrtc_compile(text: str, name: str, opts: list[str], arch: str) -> tuple[bytes, str]:
    lib, prog = _nvrtc(), _ffi.new("nvrtcProgram *")
    _check_nvrtc("nvrtcCreateProgram", lib.nvrtcCreateProgram(prog, text.encode(), name.encode(), 0, _ffi.NULL,
                                                              _ffi.NULL))
    try:
        c_opts = [_ffi.new("char[]", o.encode()) for o in opts]
        rc = lib.nvrtcCompileProgram(prog[0], len(c_opts), _ffi.new("char *[]", c_opts))
        size = _ffi.new("size_t *")
        _check_nvrtc("nvrtcGetProgramLogSize", lib.nvrtcGetProgramLogSize(prog[0], size))
        buf = _ffi.new("char[]", size[0] + 1)
        _check_nvrtc("nvrtcGetProgramLog", lib.nvrtcGetProgramLog(prog[0], buf))
        log = _ffi.string(buf).decode(errors="replace")
        if rc != 0:
            what = "compilation error" if rc == _NVRTC_ERROR_COMPILATION else _ffi.string(lib.nvrtcGetErrorString(rc))
            raise CompileError(f"NVRTC could not compile {name} for {arch} ({what!s}), options {opts}:\n{log}")
        _check_nvrtc("nvrtcGetCUBINSize", lib.nvrtcGetCUBINSize(prog[0], size))
        cubin = _ffi.new("char[]", size[0])
        _check_nvrtc("nvrtcGetCUBIN", lib.nvrtcGetCUBIN(prog[0], cubin))
        return bytes(_ffi.buffer(cubin)), log
    finally:
        lib.nvrtcDestroyProgram(prog)


def compile_cubin(source: str, *, defines: Mapping[str, int | float | str] = {}, options: Sequence[str] = (),
                  arch: str, name: str = "kernel.cu") -> bytes:
    """Compile PRELUDE + source with NVRTC to a cubin for ``arch`` ("sm_90"); cached in memory and on disk."""
    global _last_log
    opts, text = _options(options, arch), _source(source, defines, name)
    key = hashlib.sha256(json.dumps([text, name, opts, nvrtc_version()]).encode()).hexdigest()
    if key not in _cubins:
        path = os.path.join(_cache_dir(), key)
        try:
            with open(path + ".cubin", "rb") as f:
                cubin = f.read()
            log = open(path + ".log", encoding="utf-8").read() if os.path.exists(path + ".log") else ""
        except OSError:
            cubin = b""
        if not cubin.startswith(b"\x7fELF"):
            cubin, log = _nvrtc_compile(text, name, opts, arch)
            if log.strip():
                _write_atomic(path + ".log", log.encode())  # before the cubin, so a hit always has its log
            _write_atomic(path + ".cubin", cubin)
        _cubins[key] = cubin, log
    cubin, _last_log = _cubins[key]
    return cubin


def last_log() -> str:
    """NVRTC's log (warnings) for the source of the latest compile_cubin / load call, cached or not."""
    return _last_log


# ------------------------------------------------------------------------------------- loading, launching


@functools.cache
def _primary_context(device: int) -> Any:
    lib, dev, ctx = _driver(), _ffi.new("CUdevice *"), _ffi.new("CUcontext *")
    _check("cuDeviceGet", lib.cuDeviceGet(dev, device))
    _check("cuDevicePrimaryCtxRetain", lib.cuDevicePrimaryCtxRetain(ctx, dev[0]))  # the one torch's runtime uses
    return ctx[0]


@contextmanager
def _context(device: int) -> Iterator[None]:
    """Make the primary context of ``device`` current for the block, disturbing torch as little as possible."""
    lib, ctx, current = _driver(), _primary_context(device), _ffi.new("CUcontext *")
    _check("cuCtxGetCurrent", lib.cuCtxGetCurrent(current))
    if current[0] == ctx:
        yield
    elif current[0] == _ffi.NULL and device == torch.cuda.current_device():
        _check("cuCtxSetCurrent", lib.cuCtxSetCurrent(ctx))  # what the runtime does itself on first use
        yield
    else:  # another device's context: borrow the thread, then give it back unchanged
        _check("cuCtxPushCurrent", lib.cuCtxPushCurrent_v2(ctx))
        try:
            yield
        finally:
            _check("cuCtxPopCurrent", lib.cuCtxPopCurrent_v2(current))


class Module:
    """A cubin loaded into one device's primary context."""

    def __init__(self, cubin: bytes, device: int, log: str = "") -> None:
        self.device, self.log, handle = device, log, _ffi.new("CUmodule *")
        self._functions: dict[str, Kernel] = {}
        with _context(device):
            _check("cuModuleLoadData", _driver().cuModuleLoadData(handle, _ffi.from_buffer(cubin)))
        self._handle = handle[0]  # never unloaded: modules are cached for the process's lifetime

    def function(self, name: str) -> Kernel:
        """The ``extern "C" __global__`` function ``name`` of this module."""
        if name not in self._functions:
            handle = _ffi.new("CUfunction *")
            with _context(self.device):
                _check(f"cuModuleGetFunction({name!r})", _driver().cuModuleGetFunction(handle, self._handle,
                                                                                        name.encode()))
            self._functions[name] = Kernel(self, name, handle[0])
        return self._functions[name]


def _dims(value: tuple[int, ...] | int, what: str) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(dims) <= 3 or any(not isinstance(d, int) or d < 0 for d in dims):
        raise ValueError(f"{what} must be an int or a tuple of 1 to 3 non-negative ints, got {value!r}")
    return (*dims, 1, 1)[:3]  # type: ignore[return-value]


def _arg(i: int, value: object) -> Any:
    """A C copy of launch argument ``value``, for cuLaunchKernel's kernelParams."""
    if isinstance(value, torch.Tensor):
        if not value.is_cuda:
            raise ValueError(f"kernel argument {i} is a tensor on {value.device}, not on a CUDA device")
        return _ffi.new("CUdeviceptr *", value.data_ptr())
    if value is None:
        return _ffi.new("CUdeviceptr *", 0)
    if type(value).__module__ == "numpy":  # first: numpy.float64 is a float subclass, but is passed as a double
        dtype = getattr(value, "dtype", None)
        if dtype is not None and (ctype := _NUMPY_CTYPES.get(f"{dtype.kind}{dtype.itemsize}")):
            return _ffi.new(f"{ctype} *", value.item())  # type: ignore[attr-defined]
    elif isinstance(value, I64):
        return _ffi.new("long long *", value)
    elif isinstance(value, int):  # bool included
        if not -(2**31) <= value < 2**31:
            raise OverflowError(f"kernel argument {i} = {value} does not fit a 32-bit int; pass I64({value})")
        return _ffi.new("int *", value)
    elif isinstance(value, float):
        return _ffi.new("float *", value)
    raise TypeError(f"kernel argument {i} has type {type(value).__name__}; expected a CUDA tensor, None, "
                    "bool, int, float, I64 or a numpy scalar")


class Kernel:
    """One ``__global__`` function of a loaded Module; calling it launches it."""

    def __init__(self, module: Module, name: str, handle: Any) -> None:
        self.module, self.name, self._handle = module, name, handle
        self._dynamic_shared_limit: int | None = None  # the function's current opt-in, read when first needed

    def _attribute(self, attribute: int) -> int:
        value = _ffi.new("int *")
        with _context(self.module.device):
            _check(f"cuFuncGetAttribute({self.name})", _driver().cuFuncGetAttribute(value, attribute, self._handle))
        return value[0]

    def attributes(self) -> dict[str, int]:
        """Registers per thread, static shared / local (spill and stack) bytes, and max threads per block."""
        return {key: self._attribute(attribute) for key, attribute in _ATTRIBUTES.items()}

    def __call__(self, *args: object, grid: tuple[int, ...] | int, block: tuple[int, ...] | int,
                 shared_mem: int = 0, stream: torch.cuda.Stream | int | None = None) -> None:
        """Launch (asynchronously) on ``stream``, by default torch's current stream of the kernel's device."""
        grid_dims, block_dims = _dims(grid, "grid"), _dims(block, "block")
        if 0 in grid_dims:
            return  # nothing to do, and CUDA would call a zero grid an error
        params = [_arg(i, a) for i, a in enumerate(args)]  # alive until the launch has copied them
        if stream is None:
            stream = torch.cuda.current_stream(self.module.device)
        c_stream = _ffi.cast("CUstream", getattr(stream, "cuda_stream", stream))
        lib = _driver()
        with _context(self.module.device):
            if shared_mem > 0:
                if self._dynamic_shared_limit is None:
                    self._dynamic_shared_limit = self._attribute(_MAX_DYNAMIC_SHARED_SIZE_BYTES)
                if shared_mem > self._dynamic_shared_limit:  # over 48 KiB (less static) needs an opt-in
                    _check(f"cuFuncSetAttribute({self.name}, MAX_DYNAMIC_SHARED_SIZE_BYTES, {shared_mem})",
                           lib.cuFuncSetAttribute(self._handle, _MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_mem))
                    self._dynamic_shared_limit = shared_mem
            _check(f"cuLaunchKernel({self.name}, grid={grid_dims}, block={block_dims}, shared_mem={shared_mem})",
                   lib.cuLaunchKernel(self._handle, *grid_dims, *block_dims, shared_mem, c_stream,
                                      _ffi.new("void *[]", params) if params else _ffi.NULL, _ffi.NULL))


def load(source: str, *, defines: Mapping[str, int | float | str] = {}, options: Sequence[str] = (),
         name: str = "kernel.cu") -> Module:
    """Compile (cached) ``source`` for torch's current CUDA device and load it there (cached)."""
    global _last_log
    torch.cuda.init()  # torch's runtime first, so that the context below is the one it uses
    device = torch.cuda.current_device()
    arch = device_arch(device)
    key = (source, tuple(sorted(defines.items())), tuple(options), name, device)
    if key not in _modules:
        cubin = compile_cubin(source, defines=defines, options=options, arch=arch, name=name)
        _modules[key] = Module(cubin, device, _last_log)
    _last_log = _modules[key].log
    return _modules[key]
