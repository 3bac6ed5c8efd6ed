"""max_pool2d(x, kernel_size, stride=None, padding=0): 2-D max pooling over NCHW (or unbatched CHW)
tensors with torch.nn.functional.max_pool2d's semantics (dilation 1, ceil_mode False).

    out[n, c, oh, ow] = max of x[n, c, ih, iw] over the window ih ∈ [oh·sh − ph, oh·sh − ph + kh),
                        iw likewise, clipped to the image (padding is never chosen: it acts as −inf)

kernel_size, stride and padding are an int or a (height, width) pair; stride defaults to kernel_size;
padding may be at most half the kernel; OH = (H + 2·ph − kh) // sh + 1 must be at least 1.
Every implementation returns (out, indices): indices are int64 flat indices into each H×W plane of x
(torch's return_indices) of the element each output took. The rule, torch's: scan the window row by
row; an element is taken when it is greater than the best so far or is NaN, so ties keep the first,
a NaN wins (the window's last NaN), and a window of −inf gives its first in-image element.
``kernelzoo.ops.max_pool2d`` returns out only, and records a backward through the op
max_pool2d_backward (which needs the indices) when x requires grad.

Shapes for tuning and benchmarks are tuples (N, C, H, W, kernel[, stride[, padding]]) (stride defaults
to the kernel, padding to 0): (32, 64, 112, 112, 3, 2, 1) is ResNet's pool, shape string
"32x64x112x112" with the flag "kernel=3x3-stride=2x2-padding=1x1"; ``example`` takes kernel_size=,
stride=, padding= keywords overriding the tuple's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from kernelzoo_plugins._gemm.conv import batched
from kernelzoo_plugins._gemm.spec import shape_text

# re-exported: what max_pool2d's plugins read
from kernelzoo_plugins._reduce.max import compare_with_indices
from kernelzoo_plugins._reduce.max import index_output as index_output
from kernelzoo_plugins._reduce.pool import (
    PoolOp,
    check_pool_input,
    example_pool,
    pool_bad_cases,
    pool_params,
)
from kernelzoo_plugins._reduce.pool import pooled_shape as pooled_shape

from kernelzoo import ops
from kernelzoo.errors import ArgumentError
from kernelzoo.registry import BadCase, Call, Derivative, check_tensor, randn
from kernelzoo.tolerance import Mismatch


class MaxPool2d(PoolOp):
    """max_pool2d(x, kernel_size, stride=None, padding=0) -> out (implementations: (out, indices))."""

    name = "max_pool2d"
    outputs = 2  # the output and the argmax indices
    # the derivative: max_pool2d_backward through the saved argmax indices
    derivative = Derivative(
        inputs=("x",),
        save=lambda call, outputs: {"indices": outputs[1], "input_shape": tuple(call.inputs["x"].shape),
                                    "params": dict(call.params)},
        backward=lambda saved, grad: {"x": ops.max_pool2d_backward(grad, saved["indices"], saved["input_shape"],
                                                              **saved["params"])},
    )
    # Untuned on a GPU, torch first: ahead of the Triton plugin at every benchmark shape (docs/perf/max_pool2d.md);
    # on the CPU openmp stays first, ahead of torch
    default_order = {"cuda": ("torch",)}

    def check(self, x: torch.Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0) -> Call:
        check_tensor(self.name, "x", x)
        check_pool_input(self.name, "x", x)
        if 0 in x.shape[-3:]:
            raise ArgumentError(f"{self.name}: x of shape {shape_text(x)} has an empty channel or plane dimension; "
                                "only the batch may be empty")
        return Call(self, {"x": x}, pool_params(self.name, x.shape, kernel_size, stride, padding))

    def reference(self, call: Call) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.nn.functional.max_pool2d(call.inputs["x"].double(), return_indices=True, **call.params)

    def verify(self, call: Call, outputs: Any, reference: Any) -> Mismatch | None:
        return compare_with_indices(call, outputs, reference, self.tolerance(call), "out")

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, kernel_size: Any = None, stride: Any = None,
                padding: Any = None) -> Call:
        x_shape, kwargs = example_pool(shape, kernel_size, stride, padding)
        return self.check(randn(x_shape, device, dtype, generator), **kwargs)

    def sizes(self, call: Call) -> dict[str, int]:
        x = batched(call.inputs["x"])
        return dict(zip("nchw", x.shape))

    def flops(self, call: Call) -> float:
        kh, kw = call.params["kernel_size"]
        out = pooled_shape(batched(call.inputs["x"]).shape, call.params)
        return float(out[0] * out[1] * out[2] * out[3] * kh * kw)  # one comparison per window element

    def bytes(self, call: Call) -> float:
        x = call.inputs["x"]
        outputs = pooled_shape(batched(x).shape, call.params)
        n = outputs[0] * outputs[1] * outputs[2] * outputs[3]
        return float(x.numel() * x.element_size() + n * (x.element_size() + 8))  # x read; out, indices written

    def bad_cases(self) -> list[BadCase]:
        return pool_bad_cases(self.name, lambda x, **kw: ((x,), kw))

    # --- autograd ----------------------------------------------------------------------------
    def result(self, call: Call, outputs: Any) -> torch.Tensor:
        return outputs[0]


# --- conformance cases (shared with max_pool2d_backward) ----------------------------------------

