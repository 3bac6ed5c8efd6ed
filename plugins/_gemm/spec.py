"""What the GEMM family's specs share (linear, linear_backward, conv2d, conv2d_backward, max_pool2d): shape
text for messages, the tolerance of a K-long float32 reduction, per-output verification, linear's checks and
case inputs, and :func:`rows` (x as a 2-d matrix of rows)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from kernelzoo.errors import ArgumentError
from kernelzoo.registry import check_same, check_tensor, randn
from kernelzoo.tolerance import Tolerance, tolerance_for

FP32_UNIT_ROUNDOFF = 2.0**-24


def shape_text(t: torch.Tensor) -> str:
    return "x".join(map(str, t.shape)) or "scalar"


def reduction_tolerance(dtype: torch.dtype, k: int) -> Tolerance:
    """The tolerance of an output that sums ``k`` products of unit-normal inputs in float32.

    plugins/matmul derives it: sequential float32 summation leaves an absolute error of up to ~3·u·k
    (u = 2^-24; measured 2.7·u·k), so the atol grows by 6·u·k; tensor cores (fp16/bf16) truncate
    instead of rounding, which adds ~u·k·sqrt(k)/8, covered by u·k·sqrt(k)/4 more. The rtol is the
    table's: the output's own rounding. Every plugin here reduces in float32 in some blocked order.
    """
    base = tolerance_for(dtype)
    growth = 6.0 if dtype == torch.float32 else 6.0 + math.sqrt(k) / 4
    return Tolerance(base.rtol, base.atol + growth * FP32_UNIT_ROUNDOFF * k)


def check_linear(op: str, x: Any, weight: Any) -> None:
    """The checks linear and linear_backward share: float tensors that chain."""
    check_tensor(op, "x", x)
    check_tensor(op, "weight", weight)
    if weight.dim() != 2:
        raise ArgumentError(f"{op}: weight must be 2-D (out_features × in_features), got {weight.dim()}-D "
                            f"of shape {shape_text(weight)}")
    if x.dim() < 1:
        raise ArgumentError(f"{op}: x must have at least 1 dim (..., in_features), got a 0-D tensor")
    check_same(op, x=x, weight=weight)
    if x.shape[-1] != weight.shape[1]:
        raise ArgumentError(f"{op}: x of shape {shape_text(x)} and weight of shape {shape_text(weight)} do not "
                            f"chain: x's last dim {x.shape[-1]} != weight's in_features {weight.shape[1]}")


def rows(x: torch.Tensor) -> torch.Tensor:
    """x as an (M, K) matrix: its leading dims flattened (a view where the strides allow)."""
    return x.reshape(math.prod(x.shape[:-1]), x.shape[-1])


Maker = Callable[[torch.device, torch.dtype, torch.Generator], tuple[tuple, dict]]


def linear_inputs(m: int, k: int, n: int, layout: str, device: torch.device, dtype: torch.dtype,
                  g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M×K, or per layout) and weight (N×K): "plain", "transposed-x", "transposed-w", "sliced",
    "expanded" (x repeats one row through a stride-0 dim), "3d" (x 2×(M/2)×K), "vector" (x a K-vector),
    "offset" (contiguous views one element into their storage: 2- or 4-byte aligned pointers)."""
    def r(*shape: int) -> torch.Tensor:
        return randn(shape, device, dtype, g)
    if layout == "transposed-x":
        return r(k, m).t(), r(n, k)
    if layout == "transposed-w":
        return r(m, k), r(k, n).t()
    if layout == "sliced":
        return r(2 * m, k + 3)[::2, 1:-2], r(n, 2 * k)[:, ::2]
    if layout == "expanded":
        return r(1, k).expand(m, k), r(n, k)
    if layout == "3d":
        return r(2, m // 2, k), r(n, k)
    if layout == "vector":
        return r(k), r(n, k)
    if layout == "offset":
        return r(m * k + 1)[1:].view(m, k), r(n * k + 1)[1:].view(n, k)
    return r(m, k), r(n, k)


def linear_cases(_case: Callable[..., Maker]) -> list[tuple[str, Maker, bool]]:
    """The conformance cases linear and linear_backward share, each made by the op's ``_case(m, k, n, layout,
    bias=...)``: ids read M x K x N (tokens, in, out), with sizes off the block multiples, empty dims, and x and
    the weight in their other layouts."""
    return [
        ("1x1x1", _case(1, 1, 1), True),
        ("17x33x65", _case(17, 33, 65), True),
        ("nobias-17x33x65", _case(17, 33, 65, bias=False), True),
        ("65x1x17", _case(65, 1, 17), True),
        ("vector-x-1x33x17", _case(1, 33, 17, "vector"), True),
        ("3d-x-2x9x33x17", _case(18, 33, 17, "3d"), True),
        ("k0-17x0x5", _case(17, 0, 5), True),
        ("m0-0x33x17", _case(0, 33, 17), True),
        ("n0-17x33x0", _case(17, 33, 0), True),
        ("transposed-x-33x47x65", _case(33, 47, 65, "transposed-x"), True),
        ("transposed-w-33x47x65", _case(33, 47, 65, "transposed-w"), True),
    ]
