"""conv2d_backward(grad_out, x, weight, stride=1, padding=0, dilation=1, bias=False, groups=1)
-> (grad_x, grad_weight[, grad_bias]): the gradients of the op conv2d (see its spec) for grad_out.

    grad_x[n, c, ih, iw] = Σ grad_out[n, k, oh, ow] · weight[k, c, r, s] over the (k, r, s, oh, ow) with
                           oh·sh − ph + r·dh = ih and ow·sw − pw + s·dw = iw   (a transposed convolution)
    grad_weight[k, c, r, s] = Σ_{n, oh, ow} grad_out[n, k, oh, ow] · x[n, c, oh·sh − ph + r·dh, ow·sw − pw + s·dw]
    grad_bias[k] = Σ_{n, oh, ow} grad_out[n, k, oh, ow]          (only when bias is True)

grad_out has the forward output's shape; the gradients have x's, weight's and (K,). Every sum
accumulates in float32 in a fixed order (no atomics): the same inputs give the same bits. Shapes,
shape strings and example keywords are conv2d's; the flags add "-bias" when bias is True.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from kernelzoo_plugins._gemm.conv import (
    CONV_SHAPES,
    batched,
    check_conv,
    conv_bad_cases,
    conv_cases,
    conv_shape,
    conv_sizes,
    example_geometry,
    output_shape,
    params_flags,
    reduction_lengths,
)
from kernelzoo_plugins._gemm.spec import reduction_tolerance, shape_text

from kernelzoo.errors import ArgumentError, DTypeError
from kernelzoo.registry import BadCase, Call, Case, Op, check_same, check_tensor, randn
from kernelzoo.tolerance import Mismatch, Tolerance, verify_each

GRADIENT_NAMES = ("grad_x", "grad_weight", "grad_bias")


def gradient_shapes(call: Call) -> list[tuple[int, ...]]:
    """Shapes of the outputs: grad_x, grad_weight and, with bias, grad_bias."""
    x, w = call.inputs["x"], call.inputs["weight"]
    shapes = [tuple(x.shape), tuple(w.shape)]
    return [*shapes, (w.shape[0],)] if call.params["bias"] else shapes


def conv_params(call: Call) -> dict[str, Any]:
    """The stride, padding and dilation of the call, as conv2d takes them."""
    return {k: call.params[k] for k in ("stride", "padding", "dilation")}


class Conv2dBackward(Op):
    """conv2d_backward(grad_out, x, weight, stride=1, padding=0, dilation=1, bias=False)
    -> (grad_x, grad_weight[, grad_bias])."""

    name = "conv2d_backward"
    outputs = 3  # grad_x, grad_weight and, with bias, grad_bias
    # stride, padding and dilation: an int or a (height, width) pair
    schema_types = {"stride": "int[2]", "padding": "int[2]", "dilation": "int[2]"}
    # Untuned on the CPU, torch first: ahead of openmp at every benchmark shape. On a GPU torch (cuDNN), then cuda:
    # tuned, torch ran ahead of both at every shape, cuda ahead of Triton (docs/perf/conv2d_backward.md,
    # docs/design/conv.md)
    default_order = {"cpu": ("torch",), "cuda": ("torch", "cuda")}
    shapes = CONV_SHAPES

    def check(self, grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, stride: Any = 1, padding: Any = 0,
              dilation: Any = 1, bias: bool = False, groups: int = 1) -> Call:
        params = check_conv(self.name, x, weight, stride, padding, dilation, groups)
        check_tensor(self.name, "grad_out", grad_out)
        check_same(self.name, grad_out=grad_out, x=x)
        if not isinstance(bias, bool):
            raise ArgumentError(f"{self.name}: bias must be a bool (whether the forward had one), "
                                f"got {type(bias).__name__}")
        call = Call(self, {"grad_out": grad_out, "x": x, "weight": weight}, {**params, "bias": bias})
        expected = output_shape(call)
        if tuple(grad_out.shape) != expected:
            raise ArgumentError(f"{self.name}: grad_out of shape {shape_text(grad_out)} must have the output's shape "
                                f"{'x'.join(map(str, expected))}")
        return call

    def reference(self, call: Call) -> tuple[torch.Tensor, ...]:
        g, x, w = (call.inputs[k].double() for k in ("grad_out", "x", "weight"))
        bias = call.params["bias"]
        gx, gw, gb = torch.ops.aten.convolution_backward(
            batched(g), batched(x), w, [w.shape[0]] if bias else None, list(call.params["stride"]),
            list(call.params["padding"]), list(call.params["dilation"]), False, [0, 0], 1, [True, True, bias])
        return (gx.view(x.shape), gw, gb) if bias else (gx.view(x.shape), gw)

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, stride: Any = None, padding: Any = None,
                dilation: Any = None, bias: bool = False) -> Call:
        (n, c, h, w, k, r, s), kwargs = example_geometry(shape, stride, padding, dilation)
        x, weight = randn((n, c, h, w), device, dtype, generator), randn((k, c, r, s), device, dtype, generator)
        out = output_shape(Call(self, {"x": x, "weight": weight}, check_conv(self.name, x, weight, **kwargs)))
        return self.check(randn(out, device, dtype, generator), x, weight, bias=bias, **kwargs)

    def sizes(self, call: Call) -> dict[str, int]:
        return conv_sizes(call)

    def flags(self, call: Call) -> str:
        return params_flags(call.params) + ("-bias" if call.params["bias"] else "")

    def flops(self, call: Call) -> float:
        cs = conv_shape(call)  # two products of the forward's size, and the bias sums
        return 4.0 * cs.n * cs.k * cs.oh * cs.ow * cs.reduction + (cs.n * cs.k * cs.oh * cs.ow if call.params["bias"]
                                                                    else 0)

    def bytes(self, call: Call) -> float:
        i = call.inputs  # grad_out, x, weight read; grad_x, grad_weight (and grad_bias) written
        n = i["grad_out"].numel() + 2 * i["x"].numel() + 2 * i["weight"].numel()
        return float((n + (i["weight"].shape[0] if call.params["bias"] else 0)) * i["x"].element_size())

    def tolerance(self, call: Call) -> Tolerance:
        return reduction_tolerance(call.dtype, max(reduction_lengths(conv_shape(call)).values()))

    def verify(self, call: Call, outputs: Any, reference: Any) -> Mismatch | None:
        lengths = reduction_lengths(conv_shape(call))
        tolerances = [reduction_tolerance(call.dtype, lengths[name]) for name in GRADIENT_NAMES]
        return verify_each(call, outputs, reference, GRADIENT_NAMES, tolerances)

    def cases(self) -> list[Case]:
        return [Case(case_id, make, small) for case_id, make, small in conv_cases(backward=True)]

    def bad_cases(self) -> list[BadCase]:
        # x and weight are checked before grad_out: a placeholder grad_out reaches their errors
        cases = conv_bad_cases(self.name, lambda x, w, **kw: ((torch.ones(1), x, w), kw))
        x, w = torch.ones(1, 3, 5, 5), torch.ones(4, 3, 3, 3)
        return [*cases,
                BadCase("grad-out-shape", lambda: ((torch.ones(1, 4, 5, 5), x, w), {}), ArgumentError,
                        "grad_out of shape 1x4x5x5 must have the output's shape 1x4x3x3"),
                BadCase("grad-out-dtype", lambda: ((torch.ones(1, 4, 3, 3, dtype=torch.float16), x, w), {}),
                        DTypeError, "grad_out is torch.float16 but x is torch.float32"),
                BadCase("bias-not-bool", lambda: ((torch.ones(1, 4, 3, 3), x, w), {"bias": 1}), ArgumentError,
                        "bias must be a bool (whether the forward had one), got int")]
