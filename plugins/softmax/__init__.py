"""softmax(x, dim=-1) = exp(x - max) / sum(exp(x - max)) along ``dim`` (torch.softmax semantics).

A row holding +inf or NaN, or only -inf, comes out all NaN, exactly as torch.softmax does (the
max subtraction gives inf - inf or -inf - -inf = NaN, and the NaN reaches the row's sum).

Kernels work on rows: ``dim`` is moved last and the tensor seen as (rows, cols) with unit column
stride (:func:`as_rows`); the result is moved back (:func:`from_rows`), so ``dim`` is normalised
away and is no part of the tuning key.

``kernelzoo.ops.softmax`` records a backward through the op softmax_backward (from y alone) when x
requires grad.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from kernelzoo_plugins._rows.softmax import SOFTMAX_SHAPES, check_dim, row_count

# re-exported: what softmax's plugins read
from kernelzoo_plugins._rows.softmax import as_rows as as_rows
from kernelzoo_plugins._rows.softmax import from_rows as from_rows

from kernelzoo import ops
from kernelzoo.errors import ArgumentError, DTypeError
from kernelzoo.registry import BadCase, Call, Case, Derivative, Op, check_tensor, randn

# Row lengths above this are too slow for Triton's interpreter in CI (its programs run in Python).
_INTERPRETER_MAX_ELEMENTS = 200_000


class Softmax(Op):
    """softmax(x, dim=-1): exp(x - max) / sum(exp(x - max)) along ``dim``, accumulated in float32.

    The table's tolerance needs no widening: an output's error is relative to it (the float32
    exp and sum, ~1e-6) and every output is at most 1, so it stays under the 1e-5 atol; a 16-bit
    output's error is its own rounding, which rtol covers.
    """

    name = "softmax"
    # the derivative: softmax_backward needs y alone
    derivative = Derivative(
        inputs=("x",),
        save=lambda call, outputs: {"y": outputs[0], "dim": call.params["dim"]},
        backward=lambda saved, grad: {"x": ops.softmax_backward(grad, saved["y"], saved["dim"])},
    )
    shapes = SOFTMAX_SHAPES

    def check(self, x: torch.Tensor, dim: int = -1) -> Call:
        check_tensor(self.name, "x", x)
        return Call(self, {"x": x}, {"dim": check_dim(self.name, "x", x, dim)})

    def reference(self, call: Call) -> torch.Tensor:
        return torch.softmax(call.inputs["x"].double(), call.params["dim"])

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, dim: int = -1) -> Call:
        return self.check(randn(shape, device, dtype, generator), dim)

    def sizes(self, call: Call) -> dict[str, int]:
        x, dim = call.inputs["x"], call.params["dim"]
        cols = x.shape[dim] if x.dim() else 1
        return {"rows": row_count(x, dim), "cols": cols}

    def flops(self, call: Call) -> float:
        # per element: a compare for the max, a subtraction, an exp, an add for the sum, and
        # a multiplication by 1/sum
        return 5.0 * call.inputs["x"].numel()

    def bytes(self, call: Call) -> float:
        x = call.inputs["x"]
        return 2.0 * x.numel() * x.element_size()  # x read once, the output written once

    def cases(self) -> list[Case]:
        # odd sizes, and multiples of 8 (16-byte accesses in the CUDA kernels)
        plain = [(1, 1), (1, 17), (17, 1), (17, 17), (1023, 17), (17, 1023), (1, 4099), (17, 4099),
                 (4099, 17), (1023, 1023), (3, 50_257), (1, 100_003), (2, 1_000_000),
                 (64, 256), (8, 4096), (2, 65_536)]
        cases = [Case(f"{r}x{c}", _make(lambda d, t, g, s=(r, c): randn(s, d, t, g)),
                      small=r * c <= _INTERPRETER_MAX_ELEMENTS) for r, c in plain]
        cases += [
            Case("1023", _make(lambda d, t, g: randn((1023,), d, t, g))),
            Case("scalar", _make(lambda d, t, g: randn((), d, t, g))),
            Case("0x17", _make(lambda d, t, g: randn((0, 17), d, t, g))),
            Case("17x0", _make(lambda d, t, g: randn((17, 0), d, t, g))),
            Case("5x0x3-dim=1", _make(lambda d, t, g: randn((5, 0, 3), d, t, g), dim=1)),
            Case("7x33x5-dim=0", _make(lambda d, t, g: randn((7, 33, 5), d, t, g), dim=0)),
            Case("7x33x5-dim=1", _make(lambda d, t, g: randn((7, 33, 5), d, t, g), dim=1)),
            Case("7x33x5-dim=-1", _make(lambda d, t, g: randn((7, 33, 5), d, t, g), dim=-1)),
            Case("transposed", _make(lambda d, t, g: randn((1023, 17), d, t, g).t())),
            Case("sliced", _make(lambda d, t, g: randn((64, 66), d, t, g)[:, 1:-1:2])),
            # unit column stride but rows 4103 apart and an odd start: no copy, no vector loads
            Case("row-sliced", _make(lambda d, t, g: randn((9, 4103), d, t, g)[1:, 3:])),
            Case("expanded", _make(lambda d, t, g: randn((1, 17), d, t, g).expand(33, 17))),
            Case("large-values", _make(lambda d, t, g: randn((17, 1023), d, t, g, scale=300.0))),
            Case("nan-inf-17", _make(_special_rows(17, rows=20))),  # 16 rows at a time on the CPU
            Case("nan-inf-4099", _make(_special_rows(4099))),
            Case("nan-inf-4096", _make(_special_rows(4096))),
        ]
        return cases

    def bad_cases(self) -> list[BadCase]:
        return [
            BadCase("int-dtype", lambda: ((torch.arange(4),), {}), DTypeError,
                    "x must be float32, float16, bfloat16, got torch.int64"),
            BadCase("not-a-tensor", lambda: (([1.0, 2.0],), {}), ArgumentError,
                    "x must be a torch.Tensor, got list"),
            BadCase("dim-out-of-range", lambda: ((torch.zeros(2, 3),), {"dim": 2}), ArgumentError,
                    "dim must be in [-2, 1] for x of shape (2, 3), got 2"),
            BadCase("dim-out-of-range-scalar", lambda: ((torch.zeros(()),), {"dim": -2}), ArgumentError,
                    "dim must be in [-1, 0] for x of shape (), got -2"),
            BadCase("dim-not-int", lambda: ((torch.zeros(2, 3),), {"dim": 1.0}), ArgumentError,
                    "dim must be an int, got float"),
        ]

    # --- autograd ----------------------------------------------------------------------------

Maker = Callable[[torch.device, torch.dtype, torch.Generator], torch.Tensor]


def _make(make: Maker, dim: int = -1) -> Callable:
    def build(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        return (make(device, dtype, g),), {"dim": dim}
    return build


def _special_rows(cols: int, rows: int = 10) -> Maker:
    """Rows that hold +inf, NaN, -inf, only -inf, or -inf beside finite values (at the start, the
    middle and the end, so every block of a looped kernel meets them), plus plain rows."""
    def make(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
        inf, nan = float("inf"), float("nan")
        x = randn((rows, cols), "cpu", torch.float32, g)
        mid, end = cols // 2, cols - 1
        x[0, mid] = inf
        x[1, end] = nan
        x[2] = -inf
        x[3, 0], x[3, mid], x[3, end] = -inf, -inf, -inf   # finite elsewhere: exp gives 0 there
        x[4, :mid] = -inf                                  # the first blocks hold only -inf
        x[5, 0], x[5, end] = inf, -inf
        x[6, 0], x[6, end] = -inf, inf
        x[7, 0] = nan
        return x.to(device, dtype)
    return make
