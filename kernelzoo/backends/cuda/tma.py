"""Tensor maps: how a kernel reads a tensor through the TMA unit, encoded by the driver."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch

from kernelzoo.backends.cuda.bindings import _check, _driver, _ffi


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


_TMA_DTYPES = {torch.float16: 6, torch.float32: 7, torch.bfloat16: 9,  # CU_TENSOR_MAP_DATA_TYPE_*
               torch.uint8: 0, torch.float8_e4m3fn: 0, torch.float8_e5m2: 0}  # bytes: UINT8
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
