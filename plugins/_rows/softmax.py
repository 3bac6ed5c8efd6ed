"""What softmax and softmax_backward share: the dim check, the (rows, cols) view with unit column stride that
their kernels read (:func:`as_rows`) and the way back to the input's shape (:func:`from_rows`), the run of their
kernel plugins (:class:`RowKernels`), when their openmp kernels split rows (:func:`split_rows`), and their
benchmark shapes."""

from __future__ import annotations

import math
import operator
from typing import Any, ClassVar

import torch

from kernelzoo.errors import ArgumentError
from kernelzoo.registry import Call

SOFTMAX_SHAPES = {
    # (rows, cols): a square activation, a GPT-2 vocabulary (50257), attention-like rows,
    # and one very long row (only the split-row paths fill the machine there)
    "cuda": [(8192, 8192), (4096, 50257), (32768, 1024), (65536, 128), (1, 1_000_000)],
    "cpu": [(2048, 2048), (256, 50257), (16384, 128), (1, 1_000_000)],
}


def check_dim(op: str, name: str, x: torch.Tensor, dim: object) -> int:
    """``dim`` of tensor ``name`` normalised to [0, x.dim()) (0 for a 0-dim tensor, which takes 0 or -1,
    as in torch); shared with softmax_backward."""
    if isinstance(dim, bool) or not hasattr(type(dim), "__index__"):  # numpy integers welcome
        raise ArgumentError(f"{op}: dim must be an int, got {type(dim).__name__}")
    dim = operator.index(dim)
    ndim = max(x.dim(), 1)
    if not -ndim <= dim < ndim:
        raise ArgumentError(f"{op}: dim must be in [{-ndim}, {ndim - 1}] for {name} of shape {tuple(x.shape)}, "
                            f"got {dim}")
    return dim % ndim


def as_rows(x: torch.Tensor, dim: int) -> torch.Tensor:
    """``x`` with ``dim`` moved last, as a (rows, cols) view with column stride 1 (copied only if
    it must be); its row stride may differ from cols (row slices, expanded rows: stride 0)."""
    if not x.dim():
        return x.reshape(1, 1)
    moved = x if dim == x.dim() - 1 else x.movedim(dim, -1)
    x2d = moved.reshape(row_count(x, dim), moved.shape[-1])
    if x2d.shape[1] > 1 and x2d.stride(1) != 1:
        x2d = x2d.contiguous()
    return x2d


def from_rows(y2d: torch.Tensor, x: torch.Tensor, dim: int) -> torch.Tensor:
    """The (rows, cols) result back in ``x``'s shape: a view with ``dim`` moved back in place
    (no copy, so it is not contiguous when ``dim`` is not last)."""
    if dim >= x.dim() - 1:  # dim is last, or x is 0-dim
        return y2d.view(x.shape)
    return y2d.view(x.movedim(dim, -1).shape).movedim(-1, dim)


def row_count(x: torch.Tensor, dim: int) -> int:
    return math.prod(s for i, s in enumerate(x.shape) if i != dim)


def split_rows(rows: int, cols: int, threads: int, split_cols: int) -> bool:
    """Whether the openmp kernels split each row across the threads: when rows of at least ``split_cols``
    elements, whole rows per thread, would leave an eighth of the threads idle or more (1 row, 2 threads: 1/2)."""
    idle = 1 - rows / (math.ceil(rows / threads) * threads)
    return idle >= 1 / 8 and cols >= split_cols


class RowKernels:
    """The run of softmax's and softmax_backward's kernel plugins: the inputs named in ``row_inputs`` as
    (rows, cols) views with column stride 1 (:func:`as_rows`), the output allocated as one, the plugin's
    ``_launch(*inputs, out, config)`` unless it is empty, and the output in the last input's shape."""

    row_inputs: ClassVar[tuple[str, ...]] = ("x",)

    def check_rows(self, rows: int, cols: int) -> None:
        """Raise UnsupportedError for a (rows, cols) the plugin cannot run (it runs every one by default)."""

    def run(self, call: Call, config: dict[str, Any]) -> torch.Tensor:
        dim = call.params["dim"]
        inputs = [as_rows(call.inputs[name], dim) for name in self.row_inputs]  # (rows, cols), column stride 1
        rows, cols = inputs[-1].shape
        self.check_rows(rows, cols)
        out = call.empty((rows, cols))
        if rows and cols:
            self._launch(*inputs, out, config)
        return from_rows(out, call.inputs[self.row_inputs[-1]], dim)
