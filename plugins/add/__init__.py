"""add(a, b, alpha=1) = a + alpha·b, elementwise with broadcasting (torch.add semantics).

a and b must share one dtype and one device (torch would promote mixed dtypes; kernelzoo
asks for one). The output has the broadcast shape and is contiguous. Implementations read
the inputs in place through :func:`layout`: broadcast dimensions have stride 0 and
dimensions that are contiguous with each other are merged, so that no expanded copy is made
and the common cases (same shape; a row, a column or a scalar against a matrix) come down to
one or two dimensions.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import torch

from kernelzoo.autograd import reduced, scaled
from kernelzoo.elementwise import MAX_DIMS, Layout, broadcast_shape, dense_inputs, layout
from kernelzoo.errors import ArgumentError, DeviceError, DTypeError
from kernelzoo.registry import BadCase, Call, Case, Derivative, Op, check_same, check_tensor, randn

# The broadcast helpers live in kernelzoo.elementwise, shared with the other binary ops; add's plugin
# modules import them from here (their text is part of the tuning key of add's shipped winners).
__all__ = ["MAX_DIMS", "Add", "Layout", "broadcast_shape", "dense_inputs", "layout"]


def _pair(a_shape: Sequence[int], b_shape: Sequence[int], alpha: float = 1) -> Any:
    def make(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        return (randn(a_shape, device, dtype, g), randn(b_shape, device, dtype, g)), {"alpha": alpha}
    return make


def _views(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
    a = randn((64, 66), device, dtype, g)[:, 1:-1:2]  # (64, 32), strides (66, 2)
    b = randn((32, 64), device, dtype, g).t()  # (64, 32), strides (1, 64)
    return (a, b), {}


def _misaligned(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
    # contiguous, but one element past a 16-byte boundary: vector loads must not be used
    return (randn((1024,), device, dtype, g)[1:], randn((1023,), device, dtype, g)), {}


def _nan_inf(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
    a, b = randn((1023,), "cpu", torch.float32, g), randn((1023,), "cpu", torch.float32, g)
    a[::7], a[3::11], a[5::13] = float("nan"), float("inf"), float("-inf")
    b[::5], b[3::11], b[6::13] = float("inf"), float("-inf"), float("nan")  # inf + -inf = NaN at 3::11
    return (a.to(device, dtype), b.to(device, dtype)), {"alpha": 0.5}


class Add(Op):
    """add(a, b, alpha=1): a + alpha·b with broadcasting, as torch.add."""

    name = "add"
    # the derivative: grad and alpha·grad, each summed back over the dims broadcasting expanded
    derivative = Derivative(
        inputs=("a", "b"),
        save=lambda call, outputs: {"a_shape": call.inputs["a"].shape, "b_shape": call.inputs["b"].shape,
                                    "alpha": call.params["alpha"]},
        backward=lambda saved, grad: {"a": reduced(grad, saved["a_shape"]),
                                      "b": reduced(scaled(grad, saved["alpha"]), saved["b_shape"])},
    )
    # Untuned on the CPU, torch first: a memory-bound pass that torch runs as fast, behind less Python
    # (docs/perf/add.md, docs/design/elementwise.md). On a GPU the global order stands.
    default_order = {"cpu": ("torch",)}
    shapes = {"cuda": [(16384, 16384), (4096, 4096)], "cpu": [(2048, 2048), (512, 512)]}

    def check(self, a: torch.Tensor, b: torch.Tensor, alpha: float = 1) -> Call:
        check_tensor(self.name, "a", a)
        check_tensor(self.name, "b", b)
        check_same(self.name, a=a, b=b)
        broadcast_shape(a.shape, b.shape, self.name)
        if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
            raise ArgumentError(f"add: alpha must be a real number, got {type(alpha).__name__}")
        return Call(self, {"a": a, "b": b}, {"alpha": float(alpha)})

    def reference(self, call: Call) -> torch.Tensor:
        return torch.add(call.inputs["a"].double(), call.inputs["b"].double(), alpha=call.params["alpha"])

    def example(self, shape: Sequence[Any], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, b_shape: Sequence[int] | None = None,
                alpha: float = 1) -> Call:
        """a of ``shape`` and b of ``b_shape`` (the same by default); ``shape`` may also be the
        pair (a's shape, b's shape) that :meth:`parse_shape` gives for broadcasting calls."""
        if len(shape) == 2 and all(isinstance(s, (tuple, list)) for s in shape):
            shape, b_shape = shape
        b_shape = shape if b_shape is None else b_shape
        return self.check(randn(shape, device, dtype, generator), randn(b_shape, device, dtype, generator),
                          alpha=alpha)

    def parse_shape(self, text: str) -> tuple[Any, ...]:
        """'4096x4096' (a and b alike) or 'AxB+CxD' (a's and b's shapes; 'scalar' for 0-dim)."""
        shapes = [() if part == "scalar" else Op.parse_shape(self, part) for part in text.split("+")]
        if len(shapes) > 2:
            raise ArgumentError(f"add: shape {text!r} names more than two tensors; expected 'AxB' or 'AxB+CxD'")
        return shapes[0] if len(shapes) == 1 else (shapes[0], shapes[1])

    def shape_string(self, call: Call) -> str:
        a, b = (call.inputs[k].shape for k in "ab")
        if a == b:
            return "x".join(map(str, a)) or "scalar"
        return f"{'x'.join(map(str, a)) or 'scalar'}+{'x'.join(map(str, b)) or 'scalar'}"

    def _out_shape(self, call: Call) -> tuple[int, ...]:
        return broadcast_shape(call.inputs["a"].shape, call.inputs["b"].shape)

    def sizes(self, call: Call) -> dict[str, int]:
        return {"n": math.prod(self._out_shape(call))}

    def flags(self, call: Call) -> str:
        # broadcasting or strided inputs take another kernel than dense same-shape ones
        a, b = call.inputs["a"], call.inputs["b"]
        return "" if a.shape == b.shape and a.is_contiguous() and b.is_contiguous() else "strided"

    def flops(self, call: Call) -> float:
        return (1.0 if call.params["alpha"] == 1 else 2.0) * self.sizes(call)["n"]

    def bytes(self, call: Call) -> float:
        """The output written once, each input's distinct elements read once (a broadcast
        input is read at its own size, not the output's)."""
        def distinct(t: torch.Tensor) -> int:
            return math.prod(n for n, s in zip(t.shape, t.stride()) if s != 0)
        size = call.inputs["a"].element_size()
        return float(size * (self.sizes(call)["n"] + distinct(call.inputs["a"]) + distinct(call.inputs["b"])))

    def cases(self) -> list[Case]:
        return [
            Case("1", _pair((1,), (1,))),
            Case("17", _pair((17,), (17,))),
            Case("1023x17", _pair((1023, 17), (1023, 17))),
            Case("257x4099", _pair((257, 4099), (257, 4099))),
            Case("empty", _pair((0,), (0,))),
            Case("0x5+5", _pair((0, 5), (5,))),
            Case("scalar+scalar", _pair((), ())),
            Case("scalar+5x7", _pair((), (5, 7))),
            Case("5x7+scalar", _pair((5, 7), ())),
            Case("row-17x1023+1023", _pair((17, 1023), (1023,))),
            Case("column-1023x17+1023x1", _pair((1023, 17), (1023, 1))),
            Case("outer-17x1+1x1023", _pair((17, 1), (1, 1023))),
            Case("leading-1023+3x1x1023", _pair((1023,), (3, 1, 1023))),
            Case("7d-alternating", _pair((2, 1, 3, 1, 2, 1, 3), (1, 3, 1, 2, 1, 3, 1))),
            Case("transposed", lambda device, dtype, g: (
                (randn((17, 1023), device, dtype, g).t(), randn((1023, 17), device, dtype, g)), {})),
            Case("sliced-transposed", _views),
            Case("expanded", lambda device, dtype, g: (
                (randn((1, 17), device, dtype, g).expand(33, 17), randn((33, 17), device, dtype, g)), {})),
            Case("misaligned", _misaligned),
            Case("nan_inf-alpha=0.5", _nan_inf),
            Case("alpha=-2.5", _pair((1023, 17), (1023, 17), alpha=-2.5)),
            Case("alpha=3-broadcast", _pair((33, 1, 17), (5, 1), alpha=3)),
        ]

    def bad_cases(self) -> list[BadCase]:
        return [
            BadCase("int-dtype", lambda: ((torch.arange(4), torch.arange(4)), {}), DTypeError,
                    "add: a must be float32, float16, bfloat16, got torch.int64"),
            BadCase("mixed-dtypes", lambda: ((torch.ones(4), torch.ones(4, dtype=torch.float16)), {}),
                    DTypeError, "add: a is torch.float32 but b is torch.float16; expected one dtype"),
            BadCase("mixed-devices", lambda: ((torch.ones(4), torch.ones(4, device="meta")), {}),
                    DeviceError, "add: a is on cpu but b is on meta; expected one device"),
            BadCase("b-not-a-tensor", lambda: ((torch.ones(4), 2.0), {}), ArgumentError,
                    "add: b must be a torch.Tensor, got float"),
            BadCase("shapes-do-not-broadcast", lambda: ((torch.ones(3, 4), torch.ones(5)), {}), ArgumentError,
                    "add: a of shape (3, 4) and b of shape (5,) do not broadcast: dimension -1 is 4 in a "
                    "and 5 in b; expected equal sizes or one of them 1"),
            BadCase("alpha-not-a-number", lambda: ((torch.ones(4), torch.ones(4)), {"alpha": "2"}),
                    ArgumentError, "add: alpha must be a real number, got str"),
        ]
