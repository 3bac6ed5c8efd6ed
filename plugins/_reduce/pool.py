"""What max_pool2d and max_pool2d_backward share: the kernel, stride and padding params, the input check, the
pooled shape, the conformance and bad cases, and :class:`PoolOp`, the base of both specs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
from kernelzoo_plugins._gemm.conv import Pair, as_pair
from kernelzoo_plugins._gemm.spec import shape_text

from kernelzoo.errors import ArgumentError, DTypeError
from kernelzoo.registry import BadCase, Call, Case, Op, randn

POOL_SHAPES = {
    "cuda": [(32, 64, 112, 112, 3, 2, 1), (64, 128, 56, 56, 2, 2, 0), (32, 256, 64, 64, 3, 1, 1)],
    "cpu": [(8, 64, 112, 112, 3, 2, 1), (16, 64, 56, 56, 2, 2, 0)],
}


def pool_params(op: str, x_shape: Sequence[int], kernel_size: Any, stride: Any, padding: Any) -> dict[str, Pair]:
    """Checked kernel_size, stride and padding pairs for an input of shape x_shape (3-D or 4-D)."""
    kernel = as_pair(op, "kernel_size", kernel_size, 1, "positive")
    stride = kernel if stride is None else as_pair(op, "stride", stride, 1, "positive")
    padding = as_pair(op, "padding", padding, 0, "non-negative")
    if padding[0] > kernel[0] // 2 or padding[1] > kernel[1] // 2:
        raise ArgumentError(f"{op}: padding {padding} must be at most half the kernel size {kernel}")
    h, w = x_shape[-2:]
    out = ((h + 2 * padding[0] - kernel[0]) // stride[0] + 1, (w + 2 * padding[1] - kernel[1]) // stride[1] + 1)
    if min(out) < 1:
        raise ArgumentError(f"{op}: an input of {h}×{w} with kernel {kernel}, stride {stride} and padding {padding} "
                            f"gives an output of {out[0]}×{out[1]}; expected at least 1×1")
    return {"kernel_size": kernel, "stride": stride, "padding": padding}


def check_pool_input(op: str, name: str, x: Any) -> None:
    if x.dim() not in (3, 4):
        raise ArgumentError(f"{op}: {name} must be 4-D (N, C, H, W) or 3-D unbatched (C, H, W), got {x.dim()}-D of "
                            f"shape {shape_text(x)}")


def pooled_shape(x_shape: Sequence[int], params: dict[str, Pair]) -> tuple[int, ...]:
    """The output shape for an input of shape x_shape."""
    (kh, kw), (sh, sw), (ph, pw) = params["kernel_size"], params["stride"], params["padding"]
    h, w = x_shape[-2:]
    return (*x_shape[:-2], (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1)


def pool_flags(params: dict[str, Any]) -> str:
    return "-".join(f"{name.removesuffix('_size')}={v[0]}x{v[1]}" for name, v in params.items()
                    if name in ("kernel_size", "stride", "padding"))


def example_pool(shape: Sequence[int], kernel_size: Any, stride: Any, padding: Any) -> tuple[tuple, dict]:
    """(N, C, H, W) and the kernel_size / stride / padding keywords of an example shape tuple."""
    if not 4 <= len(shape) <= 7:
        raise ArgumentError(f"max_pool2d: shape {tuple(shape)} must be (N, C, H, W[, kernel[, stride[, padding]]])")
    k = shape[4] if len(shape) > 4 else 2
    given = {"kernel_size": k, "stride": shape[5] if len(shape) > 5 else k,
             "padding": shape[6] if len(shape) > 6 else 0}
    for name, value in (("kernel_size", kernel_size), ("stride", stride), ("padding", padding)):
        if value is not None:
            given[name] = value
    return tuple(shape[:4]), given


Maker = Callable[[torch.device, torch.dtype, torch.Generator], tuple[tuple, dict]]


def pool_input(shape: Sequence[int], layout: str, device: torch.device, dtype: torch.dtype,
               g: torch.Generator) -> torch.Tensor:
    """x of an NCHW shape in a layout: "plain", "channels-last", "sliced" (every other row and column of
    a larger tensor), "unbatched" (3-D, N ignored), "ties" (integers in -2..2: windows full of ties),
    "nan-inf" (NaN, ±inf scattered: windows with two NaNs and windows all −inf)."""
    n, c, h, w = shape
    if layout == "unbatched":
        return randn((c, h, w), device, dtype, g)
    if layout == "sliced":
        return randn((n, c + 1, 2 * h, w + 3), device, dtype, g)[:, 1:, ::2, 2:-1]
    if layout == "ties":
        return torch.randint(-2, 3, (n, c, h, w), generator=g).to(device, dtype)
    x = randn((n, c, h, w), "cpu", torch.float32, g)
    if layout == "nan-inf":
        x[0, 0, 0, :3] = float("nan")  # two NaNs in one window, and NaN among numbers
        x[0, 0, 3, 4] = float("inf")
        x[0, 1, :3, :3] = float("-inf")  # a window of −inf touching the padding
        x[-1, -1, -2:, -2:] = float("nan")
    x = x.to(device, dtype)
    return x.to(memory_format=torch.channels_last) if layout == "channels-last" else x


def pool_case(shape: Sequence[int], kernel: Any, stride: Any = None, padding: Any = 0, layout: str = "plain",
              backward: bool = False) -> Maker:
    """A max_pool2d case, or with backward a max_pool2d_backward one: grad_out and the forward's indices
    (from the float64 reference), the input's shape and the pooling parameters."""
    def make(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        x = pool_input(shape, layout, device, dtype, g)
        kwargs = {"kernel_size": kernel, "stride": stride, "padding": padding}
        if not backward:
            return (x,), kwargs
        out, indices = torch.nn.functional.max_pool2d(x.double(), kernel, stride, padding, return_indices=True)
        return (randn(out.shape, device, dtype, g), indices, tuple(x.shape)), kwargs
    return make


def pool_cases(backward: bool) -> list[tuple[str, Maker, bool]]:
    """(id, make, small): ids read N x C x H x W - kernel, then stride and padding where given."""
    def c(case_id: str, *args: Any, small: bool = True, **kwargs: Any) -> tuple[str, Maker, bool]:
        return case_id, pool_case(*args, backward=backward, **kwargs), small
    return [
        c("1x1x1x1-k1", (1, 1, 1, 1), 1),
        c("2x3x7x9-k2", (2, 3, 7, 9), 2),
        c("2x3x9x8-k3-s2-p1", (2, 3, 9, 8), 3, 2, 1),
        c("2x3x6x6-k3-s1-p1", (2, 3, 6, 6), 3, 1, 1),
        c("1x2x10x7-k3x2-s1x2-p1x0", (1, 2, 10, 7), (3, 2), (1, 2), (1, 0)),
        c("1x2x11x9-k5x4-s3-p2", (1, 2, 11, 9), (5, 4), 3, 2),
        c("kernel-over-input-1x2x2x2-k3-p1", (1, 2, 2, 2), 3, padding=1),
        c("kernel-over-input-1x1x1x1-k4-s1-p2", (1, 1, 1, 1), 4, 1, 2),
        c("batch0-0x3x5x5-k2", (0, 3, 5, 5), 2),
        c("unbatched-3x7x7-k3-s2", (1, 3, 7, 7), 3, 2, layout="unbatched"),
        c("channels-last-2x8x6x5-k2", (2, 8, 6, 5), 2, layout="channels-last"),
        c("sliced-2x3x7x6-k3-s2-p1", (2, 3, 7, 6), 3, 2, 1, layout="sliced"),
        c("ties-2x3x8x8-k3-s1-p1", (2, 3, 8, 8), 3, 1, 1, layout="ties"),
        c("ties-2x3x8x8-k2", (2, 3, 8, 8), 2, layout="ties"),
        c("nan-inf-2x3x7x8-k3-s2-p1", (2, 3, 7, 8), 3, 2, 1, layout="nan-inf"),
        c("nan-inf-2x3x7x8-k3-s1", (2, 3, 7, 8), 3, 1, layout="nan-inf"),
        c("resnet-2x16x56x56-k3-s2-p1", (2, 16, 56, 56), 3, 2, 1, small=False),
        c("odd-3x5x33x47-k3-s1-p1", (3, 5, 33, 47), 3, 1, 1, small=False),
    ]


def pool_bad_cases(op: str, args: Callable[..., tuple[tuple, dict]]) -> list[BadCase]:
    """Bad calls of max_pool2d or max_pool2d_backward: ``args(x, **kwargs)`` makes the op's arguments from an
    input x (for the backward: grad_out, indices and the input shape as the forward would give them)."""
    def bad(x_shape: Sequence[int], dtype: torch.dtype = torch.float32, **kwargs: Any) -> Callable:
        return lambda: args(torch.ones(x_shape, dtype=dtype), **kwargs)
    return [
        BadCase("x-2d", bad((5, 5), kernel_size=2), ArgumentError,
                "must be 4-D (N, C, H, W) or 3-D unbatched (C, H, W), got 2-D of shape 5x5"),
        BadCase("x-5d", bad((1, 1, 3, 5, 5), kernel_size=2), ArgumentError, "got 5-D of shape 1x1x3x5x5"),
        BadCase("kernel-0", bad((1, 3, 5, 5), kernel_size=0), ArgumentError, "kernel_size must be positive, got 0"),
        BadCase("stride-0", bad((1, 3, 5, 5), kernel_size=2, stride=0), ArgumentError,
                "stride must be positive, got 0"),
        BadCase("negative-padding", bad((1, 3, 5, 5), kernel_size=2, padding=-1), ArgumentError,
                "padding must be non-negative, got -1"),
        BadCase("padding-over-half-kernel", bad((1, 3, 5, 5), kernel_size=3, stride=1, padding=2), ArgumentError,
                "padding (2, 2) must be at most half the kernel size (3, 3)"),
        BadCase("output-too-small", bad((1, 1, 1, 1), kernel_size=3, stride=1), ArgumentError,
                "an input of 1×1 with kernel (3, 3), stride (1, 1) and padding (0, 0) gives an output of -1×-1; "
                "expected at least 1×1"),
        BadCase("kernel-triple", bad((1, 3, 5, 5), kernel_size=(2, 2, 2)), ArgumentError,
                "kernel_size must be an int or a pair of ints"),
        BadCase("int-dtype", bad((1, 3, 5, 5), torch.int64, kernel_size=2), DTypeError,
                "must be float32, float16, bfloat16, got torch.int64"),
    ]


class PoolOp(Op):
    """The base of the max_pool2d and max_pool2d_backward specs: the pooling parameters' schema, the shapes for
    tuning and benchmarks, the flags, and the conformance cases (the backward's where ``is_backward``)."""

    is_backward: ClassVar[bool] = False
    # kernel_size, stride and padding: an int or a (height, width) pair
    schema_types = {"kernel_size": "int[2]", "stride": "int[2]?", "padding": "int[2]"}
    shapes = POOL_SHAPES

    def flags(self, call: Call) -> str:
        return pool_flags(call.params)

    def cases(self) -> list[Case]:
        return [Case(case_id, make, small) for case_id, make, small in pool_cases(backward=self.is_backward)]
