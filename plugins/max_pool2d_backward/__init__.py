"""max_pool2d_backward(grad_out, indices, input_shape, kernel_size, stride=None, padding=0) -> grad_x:
the gradient of the op max_pool2d through its saved indices (see its spec).

    grad_x[n, c, i] = Σ grad_out[n, c, oh, ow] over the outputs of plane (n, c) whose index is i

indices are the forward's (int64 flat indices into each H×W plane); input_shape is x's shape (4-D or
3-D, as grad_out). Overlapping windows (stride < kernel) send several outputs to one input element:
every implementation adds them in float32 in output order (row by row), with no atomics, so the same
inputs give the same bits; the GPU kernels do it as a gather (each input element visits the at most
ceil(kh/sh)·ceil(kw/sw) windows that contain it), the CPU ones scatter plane by plane. An index
outside its plane adds nothing in the gathers; the openmp plugin rejects it. Shapes, shape strings
and flags are max_pool2d's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from kernelzoo_plugins._gemm.spec import reduction_tolerance, shape_text
from kernelzoo_plugins._reduce.pool import (
    PoolOp,
    check_pool_input,
    example_pool,
    pool_bad_cases,
    pool_params,
    pooled_shape,
)

from kernelzoo.errors import ArgumentError, DeviceError, DTypeError
from kernelzoo.registry import BadCase, Call, check_same_device, check_tensor, randn
from kernelzoo.tolerance import Tolerance


def windows_per_element(params: dict[str, Any]) -> int:
    """Most windows that contain one input element: ceil(kh/sh)·ceil(kw/sw)."""
    (kh, kw), (sh, sw) = params["kernel_size"], params["stride"]
    return -(-kh // sh) * -(-kw // sw)


class MaxPool2dBackward(PoolOp):
    """max_pool2d_backward(grad_out, indices, input_shape, kernel_size, stride=None, padding=0) -> grad_x."""

    name = "max_pool2d_backward"
    is_backward = True
    # Untuned on a GPU, torch first: well ahead of the Triton plugin at two of the three benchmark shapes, a tie at
    # the third (docs/perf/max_pool2d_backward.md); on the CPU openmp stays first, ahead of torch
    default_order = {"cuda": ("torch",)}

    def check(self, grad_out: torch.Tensor, indices: torch.Tensor, input_shape: Sequence[int], kernel_size: Any,
              stride: Any = None, padding: Any = 0) -> Call:
        check_tensor(self.name, "grad_out", grad_out)
        check_pool_input(self.name, "grad_out", grad_out)
        check_tensor(self.name, "indices", indices, (torch.int64,))
        check_same_device(self.name, grad_out=grad_out, indices=indices)
        if indices.shape != grad_out.shape:
            raise ArgumentError(f"{self.name}: indices of shape {shape_text(indices)} must have grad_out's shape "
                                f"{shape_text(grad_out)}")
        if (not isinstance(input_shape, (tuple, list, torch.Size)) or len(input_shape) != grad_out.dim()
                or not all(isinstance(n, int) and n >= 0 for n in input_shape)):
            raise ArgumentError(f"{self.name}: input_shape must be the {grad_out.dim()} sizes of x (grad_out is "
                                f"{grad_out.dim()}-D), got {input_shape!r}")
        input_shape = tuple(input_shape)
        params = pool_params(self.name, input_shape, kernel_size, stride, padding)
        if tuple(grad_out.shape) != pooled_shape(input_shape, params):
            raise ArgumentError(f"{self.name}: grad_out of shape {shape_text(grad_out)} is not the output of an input "
                                f"of shape {'x'.join(map(str, input_shape))}: expected "
                                f"{'x'.join(map(str, pooled_shape(input_shape, params)))}")
        return Call(self, {"grad_out": grad_out, "indices": indices}, {"input_shape": input_shape, **params})

    def reference(self, call: Call) -> torch.Tensor:
        g, indices = call.inputs["grad_out"].double(), call.inputs["indices"]
        shape = call.params["input_shape"]
        planes, outputs = math.prod(shape[:-2]), g.shape[-2] * g.shape[-1]
        grad = torch.zeros((planes, shape[-2] * shape[-1]), dtype=torch.float64, device=g.device)
        return grad.scatter_add_(1, indices.reshape(planes, outputs), g.reshape(planes, outputs)).view(shape)

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, kernel_size: Any = None, stride: Any = None,
                padding: Any = None, input_shape: Sequence[int] | None = None) -> Call:
        x_shape, kwargs = example_pool(shape, kernel_size, stride, padding)
        x = randn(input_shape or x_shape, "cpu", torch.float64, generator)
        out, indices = torch.nn.functional.max_pool2d(x, return_indices=True, **kwargs)
        return self.check(randn(out.shape, device, dtype, generator), indices.to(device), tuple(x.shape), **kwargs)

    def sizes(self, call: Call) -> dict[str, int]:
        shape = call.params["input_shape"]
        return dict(zip("nchw", (1, *shape) if len(shape) == 3 else shape))

    def flops(self, call: Call) -> float:
        return float(call.inputs["grad_out"].numel())  # one add per output

    def bytes(self, call: Call) -> float:
        g = call.inputs["grad_out"]  # grad_out and indices read, grad_x written
        return float(g.numel() * (g.element_size() + 8) + math.prod(call.params["input_shape"]) * g.element_size())

    def tolerance(self, call: Call) -> Tolerance:
        return reduction_tolerance(call.dtype, windows_per_element(call.params))

    def bad_cases(self) -> list[BadCase]:
        # as the forward's, with grad_out standing for x (the checks of the parameters come first)
        cases = pool_bad_cases(self.name, lambda x, **kw: ((x, torch.zeros(x.shape, dtype=torch.int64),
                                                            tuple(x.shape)), kw))
        g, idx = torch.ones(1, 3, 2, 2), torch.zeros(1, 3, 2, 2, dtype=torch.int64)
        return [*cases,
                BadCase("indices-int32", lambda: ((g, idx.int(), (1, 3, 4, 4)), {"kernel_size": 2}), DTypeError,
                        "indices must be int64, got torch.int32"),
                BadCase("indices-shape", lambda: ((g, idx[..., :1], (1, 3, 4, 4)), {"kernel_size": 2}), ArgumentError,
                        "indices of shape 1x3x2x1 must have grad_out's shape 1x3x2x2"),
                BadCase("input-shape-rank", lambda: ((g, idx, (3, 4, 4)), {"kernel_size": 2}), ArgumentError,
                        "input_shape must be the 4 sizes of x (grad_out is 4-D), got (3, 4, 4)"),
                BadCase("grad-out-not-the-output", lambda: ((g, idx, (1, 3, 6, 6)), {"kernel_size": 2}),
                        ArgumentError, "grad_out of shape 1x3x2x2 is not the output of an input of shape 1x3x6x6: "
                                       "expected 1x3x3x3"),
                BadCase("indices-device", lambda: ((g, idx.to("meta"), (1, 3, 4, 4)), {"kernel_size": 2}),
                        DeviceError, "grad_out is on cpu but indices is on meta")]
