"""cffi bindings of NVRTC and the CUDA driver API: their declarations, where the libraries are found and loaded,
error checks, what this machine supports, and the device's primary context."""

from __future__ import annotations

import ctypes.util
import functools
import glob
import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import cffi
import torch

from kernelzoo.errors import CudaError

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
