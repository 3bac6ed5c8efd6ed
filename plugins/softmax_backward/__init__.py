"""softmax_backward(grad, y, dim=-1) -> grad_x: the gradient of the op softmax (see its spec) from its output
y = softmax(x, dim) and the output gradient grad, along ``dim``:

    grad_x = y · (grad − Σ_dim grad · y)

computed in float32 (the sum accumulated in float32, over partials in a fixed order: deterministic), in
grad's dtype. NaN and inf follow that formula, as torch's kernel does: a NaN row of y (softmax gives
those for rows holding +inf or NaN, or only -inf) or an inf in grad makes the sum NaN or inf, and so the
row. As softmax, kernels see (rows, cols) views with unit column stride (:func:`as_rows`, one each for
grad and y, which may differ in layout) and the result is moved back in y's shape (:func:`from_rows`);
the op's shape is softmax's (rows, cols).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from kernelzoo_plugins._rows.softmax import SOFTMAX_SHAPES, check_dim

from kernelzoo.errors import ArgumentError, DeviceError, DTypeError
from kernelzoo.registry import BadCase, Call, Case, Op, check_same, check_tensor, randn

# Elements above this are too slow for Triton's interpreter in CI (its programs run in Python).
_INTERPRETER_MAX_ELEMENTS = 200_000


class SoftmaxBackward(Op):
    """softmax_backward(grad, y, dim=-1) -> grad_x = y · (grad − Σ_dim grad · y).

    The table's tolerance needs no widening: the sum s = Σ grad·y is a y-weighted mean of grad (Σ y = 1),
    whose float32 error is a few units of |grad|'s rounding (~1e-7 for unit-normal grads, also for
    1M-element rows summed in partials); an output's error is y_i times that (y_i ≤ 1) plus its own
    rounding, under the 1e-5 atol and the 16-bit rtol.
    """

    name = "softmax_backward"
    shapes = SOFTMAX_SHAPES

    def check(self, grad: torch.Tensor, y: torch.Tensor, dim: int = -1) -> Call:
        check_tensor(self.name, "grad", grad)
        check_tensor(self.name, "y", y)
        check_same(self.name, grad=grad, y=y)
        if grad.shape != y.shape:
            raise ArgumentError(f"{self.name}: grad of shape {tuple(grad.shape)} must have y's shape {tuple(y.shape)}")
        return Call(self, {"grad": grad, "y": y}, {"dim": check_dim(self.name, "y", y, dim)})

    def reference(self, call: Call) -> torch.Tensor:
        g, y, dim = call.inputs["grad"].double(), call.inputs["y"].double(), call.params["dim"]
        return y * (g - (g * y).sum(dim, keepdim=True))

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, dim: int = -1) -> Call:
        y = torch.softmax(randn(shape, device, torch.float32, generator), dim).to(dtype)
        return self.check(randn(shape, device, dtype, generator), y, dim)

    def sizes(self, call: Call) -> dict[str, int]:
        y, dim = call.inputs["y"], call.params["dim"]
        return {"rows": math.prod(s for i, s in enumerate(y.shape) if i != dim), "cols": y.shape[dim] if y.dim() else 1}

    def flops(self, call: Call) -> float:
        return 4.0 * call.inputs["y"].numel()  # grad·y, its sum, the subtraction, the product with y

    def bytes(self, call: Call) -> float:
        y = call.inputs["y"]
        return 3.0 * y.numel() * y.element_size()  # grad and y read once, grad_x written once

    def cases(self) -> list[Case]:
        # softmax's sizes: odd, and multiples of 8 (16-byte accesses in the CUDA kernels)
        plain = [(1, 1), (1, 17), (17, 1), (17, 17), (1023, 17), (17, 1023), (1, 4099), (17, 4099),
                 (4099, 17), (1023, 1023), (3, 50_257), (1, 100_003), (2, 1_000_000),
                 (64, 256), (8, 4096), (2, 65_536)]
        cases = [Case(f"{r}x{c}", _make((r, c)), small=r * c <= _INTERPRETER_MAX_ELEMENTS) for r, c in plain]
        return [
            *cases,
            Case("1023", _make((1023,))),
            Case("scalar", _make(())),
            Case("0x17", _make((0, 17))),
            Case("17x0", _make((17, 0))),
            Case("5x0x3-dim=1", _make((5, 0, 3), dim=1)),
            Case("7x33x5-dim=0", _make((7, 33, 5), dim=0)),
            Case("7x33x5-dim=1", _make((7, 33, 5), dim=1)),
            Case("7x33x5-dim=-1", _make((7, 33, 5), dim=-1)),
            # y as softmax(x, dim=1) returns it: a view with dim moved back, not contiguous
            Case("softmax-layout-7x33x5-dim=1", _make((7, 33, 5), dim=1, y_layout="dim-last")),
            Case("transposed-y", _make((17, 1023), y_layout="transposed")),
            Case("transposed-grad", _make((17, 1023), grad_layout="transposed")),
            Case("sliced", _make((64, 32), grad_layout="sliced", y_layout="sliced")),
            # unit column stride but rows 4103 apart and an odd start: no copy, no vector loads
            Case("row-sliced", _make((8, 4100), grad_layout="row-sliced", y_layout="row-sliced")),
            Case("row-sliced-y", _make((8, 4096), y_layout="row-sliced")),
            Case("expanded-grad", _make((33, 17), grad_layout="expanded")),  # sum()'s gradient, e.g.
            Case("expanded", _make((33, 17), grad_layout="expanded", y_layout="expanded")),
            Case("peaked", _make((17, 1023), scale=30.0)),  # y near one-hot: tiny y and cancellation
            Case("nan-inf-17", _make((20, 17), special=True)),
            Case("nan-inf-4099", _make((12, 4099), special=True)),
            Case("nan-inf-4096", _make((12, 4096), special=True)),
        ]

    def bad_cases(self) -> list[BadCase]:
        y = torch.full((2, 3), 1 / 3)

        def bad(*args: object, **kwargs: object) -> Callable[[], tuple[tuple, dict]]:
            return lambda: (args, kwargs)
        return [
            BadCase("int-dtype", bad(torch.arange(4), torch.ones(4)), DTypeError,
                    "grad must be float32, float16, bfloat16, got torch.int64"),
            BadCase("not-a-tensor", bad(torch.ones(3), [1.0, 2.0, 3.0]), ArgumentError,
                    "y must be a torch.Tensor, got list"),
            BadCase("dtype-mismatch", bad(torch.ones(2, 3, dtype=torch.float16), y), DTypeError,
                    "grad is torch.float16 but y is torch.float32; expected one dtype"),
            BadCase("device-mismatch", bad(torch.ones(2, 3, device="meta"), y), DeviceError,
                    "grad is on meta but y is on cpu; expected one device"),
            BadCase("shape-mismatch", bad(torch.ones(3, 2), y), ArgumentError,
                    "grad of shape (3, 2) must have y's shape (2, 3)"),
            BadCase("dim-out-of-range", bad(torch.ones(2, 3), y, 2), ArgumentError,
                    "dim must be in [-2, 1] for y of shape (2, 3), got 2"),
            BadCase("dim-not-int", bad(torch.ones(2, 3), y, 1.0), ArgumentError, "dim must be an int, got float"),
        ]


Maker = Callable[[torch.device, torch.dtype, torch.Generator], tuple[tuple, dict]]


def laid_out(t: torch.Tensor, layout: str, dim: int) -> torch.Tensor:
    """``t``'s values in a layout: "contiguous"; "dim-last" (stored with ``dim`` last, as softmax returns
    y for another dim); "transposed" (2-D, column-major); "sliced" (every other column of a wider
    tensor); "row-sliced" (rows 3 elements longer, from an odd start); "expanded" (row 0 repeated)."""
    if layout == "dim-last":
        return t.movedim(dim, -1).contiguous().movedim(-1, dim)
    if layout == "transposed":
        return t.t().contiguous().t()
    if layout == "sliced":
        wide = torch.empty((t.shape[0], 2 * t.shape[1] + 2), dtype=t.dtype, device=t.device)
        wide[:, 1:-1:2] = t
        return wide[:, 1:-1:2]
    if layout == "row-sliced":
        wide = torch.empty((t.shape[0] + 1, t.shape[1] + 3), dtype=t.dtype, device=t.device)
        wide[1:, 3:] = t
        return wide[1:, 3:]
    if layout == "expanded":
        return t[:1].expand(t.shape)
    return t.contiguous()


def _special_rows(rows: int, cols: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, grad): x rows that make NaN rows of y (+inf, NaN, only -inf) or zeros in y (-inf beside finite
    values), grad rows with an inf or NaN (where y > 0, and where y = 0: 0 · inf = NaN)."""
    inf, nan = float("inf"), float("nan")
    x, grad = randn((rows, cols), "cpu", torch.float32, g), randn((rows, cols), "cpu", torch.float32, g)
    mid, end = cols // 2, cols - 1
    x[0, mid], x[1, end], x[2] = inf, nan, -inf
    x[3, 0], x[3, mid], x[3, end] = -inf, -inf, -inf
    x[4, :mid] = -inf
    grad[5, mid], grad[6, end], grad[7, 0] = inf, -inf, nan
    grad[8, 0], grad[8, end] = inf, -inf  # y = 0 under both: the sum is NaN
    x[8, 0], x[8, end] = -inf, -inf
    grad[9, mid] = 1e30  # grad · y is finite where y is small
    return x, grad


def _make(shape: tuple[int, ...], dim: int = -1, grad_layout: str = "contiguous", y_layout: str = "contiguous",
          scale: float = 1.0, special: bool = False) -> Maker:
    """(grad, y, dim): y = softmax(x) of random x (of ``scale``), computed in float64 and rounded to the
    dtype, as the forward would give it; grad random; each in its layout."""
    def build(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        if special:
            x, grad = _special_rows(*shape, g)
        else:
            x, grad = randn(shape, "cpu", torch.float32, g, scale), randn(shape, "cpu", torch.float32, g)
        y = torch.softmax(x.double(), dim).to(device, dtype)
        grad = grad.to(device, dtype)
        return (laid_out(grad, grad_layout, dim), laid_out(y, y_layout, dim), dim), {}
    return build
