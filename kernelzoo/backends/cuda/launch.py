"""Loading cubins and launching their kernels: Module, Kernel, launch-argument packing and streams."""

from __future__ import annotations

import functools
import operator
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from kernelzoo.backends.cuda import compiler
from kernelzoo.backends.cuda.bindings import (
    _ATTRIBUTES,
    _MAX_DYNAMIC_SHARED_SIZE_BYTES,
    _PROGRAMMATIC_STREAM_SERIALIZATION,
    _check,
    _context,
    _driver,
    _ffi,
    _primary_context,
    dependent_launch,
    tensor_map_launch,
)
from kernelzoo.backends.cuda.compiler import compile_cubin, device_arch
from kernelzoo.backends.cuda.tma import TensorMap
from kernelzoo.errors import CudaError

_modules: dict[tuple[Any, ...], Module] = {}


class I64(int):
    """An int launch argument passed as a 64-bit ``long long`` rather than a 32-bit ``int``."""



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
    if type(value) is int and value >= 0:  # the common cases, without the checks below
        return value, 1, 1
    if type(value) is tuple and len(value) == 3:
        x, y, z = value
        if type(x) is int and type(y) is int and type(z) is int and x >= 0 and y >= 0 and z >= 0:
            return value
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
# launch instead of a C copy per argument, which costs a cffi conversion each (docs/perf/call-path.md).
_BUFFER_POINTER, _BUFFER_SIZE, _LAUNCH_END = _ffi.cast("void *", 1), _ffi.cast("void *", 2), _ffi.NULL
# the C types of a launch's per-call cffi objects, parsed once: by name, cffi looks each up again at every call
_STREAM_TYPE, _EXTRA_TYPE = _ffi.typeof("CUstream"), _ffi.typeof("void *[5]")
_CONTEXT_POINTER_TYPE, _CONFIG_POINTER_TYPE = _ffi.typeof("CUcontext *"), _ffi.typeof("CUlaunchConfig *")
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
    if isinstance(value, torch.Tensor):  # the common case first
        if not value.is_cuda:
            raise ValueError(f"kernel argument {i} is a tensor on {value.device}, not on a CUDA device")
        return value.data_ptr()
    if value is None:
        return 0
    if isinstance(value, TensorMap):
        return value.raw
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
    current = _ffi.new(_CONTEXT_POINTER_TYPE)
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
        Where the driver cannot count the parameters (cuFuncGetParamCount: documented from CUDA 13.4; a 13.0
        driver has none), those of the first ``passed`` indices: asking past the last is an
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
        c_stream = _ffi.cast(_STREAM_TYPE, _stream_handle(stream, device))
        if shared_mem > 0:
            self._allow_dynamic_shared(shared_mem)
        extra = (_ffi.new(_EXTRA_TYPE, [_BUFFER_POINTER, _ffi.from_buffer(data), _BUFFER_SIZE, layout.size,
                                        _LAUNCH_END]) if args else _ffi.NULL)
        if dependent and dependent_launch(device)[0]:
            config = _ffi.new(_CONFIG_POINTER_TYPE, [*grid_dims, *block_dims, shared_mem, c_stream, _DEPENDENT, 1])
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
    torch.cuda.init()  # torch's runtime first, so that the context used below is the one it uses
    device = torch.cuda.current_device()
    target = device_arch(device) if arch is None else arch(device_arch(device))
    key = (source, tuple(sorted(defines.items())), tuple(options), name, device, target)
    if key not in _modules:
        cubin = compile_cubin(source, defines=defines, options=options, arch=target, name=name)
        _modules[key] = Module(cubin, device, compiler.last_log())
    compiler._last_log = _modules[key].log
    return _modules[key]
