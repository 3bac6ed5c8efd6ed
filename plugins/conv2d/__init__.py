"""conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1): 2-D convolution over NCHW
tensors with torch.nn.functional.conv2d's semantics (cross-correlation, zero padding), groups=1 only.

    x (N, C, H, W) or unbatched (C, H, W); weight (K, C, R, S); bias (K,) or None
    out[n, k, oh, ow] = bias[k] + Σ_{c, r, s} weight[k, c, r, s] · x[n, c, oh·sh − ph + r·dh, ow·sw − pw + s·dw]
    out (N, K, OH, OW) (or (K, OH, OW)), OH = (H + 2·ph − dh·(R − 1) − 1) // sh + 1, OW likewise

stride, padding and dilation are an int or a (height, width) pair; torch's padding strings are not taken.
Products accumulate in float32; the bias is added before the one rounding to the output dtype.
``kernelzoo.ops.conv2d`` records a backward through the op conv2d_backward when an input requires grad.

Shapes for tuning and benchmarks are tuples (N, C, H, W, K, R, S[, stride, padding[, dilation]]) with
square stride / padding / dilation (default 1, 0, 1): (32, 64, 56, 56, 64, 3, 3, 1, 1) is a ResNet 3×3
conv, shape string "32x64x56x56x64x3x3" with the flag "stride=1x1-padding=1x1-dilation=1x1". The shape
string holds the 7 sizes and the call's params the rest: ``example`` takes stride=, padding=,
dilation= keywords (ints or pairs, overriding the tuple's) and bias=False.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from kernelzoo_plugins._gemm.conv import (
    CONV_SHAPES,
    check_conv,
    conv_bad_cases,
    conv_bias_bad_cases,
    conv_cases,
    conv_sizes,
    example_geometry,
    params_flags,
)

# re-exported: the geometry conv2d's plugins read
from kernelzoo_plugins._gemm.conv import batched as batched
from kernelzoo_plugins._gemm.conv import conv_shape as conv_shape
from kernelzoo_plugins._gemm.conv import output_shape as output_shape
from kernelzoo_plugins._gemm.spec import reduction_tolerance, shape_text

from kernelzoo import ops
from kernelzoo.errors import ArgumentError
from kernelzoo.registry import BadCase, Call, Case, Derivative, Op, check_same, check_tensor, randn
from kernelzoo.tolerance import Tolerance


class Conv2d(Op):
    """conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1): NCHW 2-D convolution."""

    name = "conv2d"
    # the derivative: conv2d_backward gives grad_x, grad_weight and, with a bias, grad_bias
    derivative = Derivative(
        inputs=("x", "weight", "bias"),
        save=lambda call, outputs: {"x": call.inputs["x"], "weight": call.inputs["weight"],
                                    "bias": "bias" in call.inputs, "params": dict(call.params)},
        backward=lambda saved, grad: dict(zip(("x", "weight", "bias"), ops.conv2d_backward(
            grad, saved["x"], saved["weight"], bias=saved["bias"], **saved["params"]))),
    )
    # stride, padding and dilation: an int or a (height, width) pair
    schema_types = {"stride": "int[2]", "padding": "int[2]", "dilation": "int[2]"}
    # Untuned on the CPU, torch (oneDNN) first: ahead of openmp at the 3x3 shapes, behind it at the 1x1
    # (docs/perf/conv2d.md). On a GPU Triton stays first: at or above cuDNN at ResNet's shapes (docs/design/conv.md)
    default_order = {"cpu": ("torch",)}
    shapes = CONV_SHAPES

    def check(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, stride: Any = 1,
              padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Call:
        params = check_conv(self.name, x, weight, stride, padding, dilation, groups)
        inputs = {"x": x, "weight": weight}
        if bias is not None:
            check_tensor(self.name, "bias", bias)
            check_same(self.name, x=x, bias=bias)
            if tuple(bias.shape) != (weight.shape[0],):
                raise ArgumentError(f"{self.name}: bias must have shape ({weight.shape[0]},) (out_channels), "
                                    f"got {shape_text(bias)}")
            inputs["bias"] = bias
        return Call(self, inputs, params)

    def reference(self, call: Call) -> torch.Tensor:
        i, p = call.inputs, call.params
        bias = i.get("bias")
        return torch.nn.functional.conv2d(i["x"].double(), i["weight"].double(),
                                          None if bias is None else bias.double(), **p)

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, stride: Any = None, padding: Any = None,
                dilation: Any = None, bias: bool = True) -> Call:
        (n, c, h, w, k, r, s), kwargs = example_geometry(shape, stride, padding, dilation)
        return self.check(randn((n, c, h, w), device, dtype, generator), randn((k, c, r, s), device, dtype, generator),
                          randn((k,), device, dtype, generator) if bias else None, **kwargs)

    def sizes(self, call: Call) -> dict[str, int]:
        return conv_sizes(call)

    def flags(self, call: Call) -> str:
        return params_flags(call.params)

    def flops(self, call: Call) -> float:
        cs = conv_shape(call)
        return 2.0 * cs.n * cs.k * cs.oh * cs.ow * cs.reduction

    def bytes(self, call: Call) -> float:
        cs = conv_shape(call)
        n = sum(t.numel() for t in call.inputs.values()) + cs.n * cs.k * cs.oh * cs.ow
        return float(n * call.inputs["x"].element_size())

    def tolerance(self, call: Call) -> Tolerance:
        return reduction_tolerance(call.dtype, conv_shape(call).reduction + 1)  # C·R·S products and the bias

    def cases(self) -> list[Case]:
        return [Case(case_id, make, small) for case_id, make, small in conv_cases(backward=False)]

    def bad_cases(self) -> list[BadCase]:
        return conv_bad_cases(self.name, lambda x, w, **kw: ((x, w), kw)) + conv_bias_bad_cases(self.name)

    # --- autograd ----------------------------------------------------------------------------

# --- conformance cases (shared with conv2d_backward) ---------------------------------------------

