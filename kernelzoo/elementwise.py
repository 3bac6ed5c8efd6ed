"""Shared spec pieces of elementwise ops: base classes for unary and binary ops, the
conformance cases every elementwise op is held to (odd sizes, empty, non-contiguous views,
broadcasting, NaN/Inf), and the broadcast layout the strided kernels of binary ops and copy_
read their operands through.

Binary ops read their inputs in place through :func:`layout`: broadcast dimensions have stride 0
and dimensions that are contiguous with each other are merged, so that no expanded copy is made
and the common cases (same shape; a row, a column or a scalar against a matrix) come down to one
or two dimensions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from kernelzoo.errors import ArgumentError, DeviceError, DTypeError
from kernelzoo.registry import BadCase, Call, Case, Derivative, Op, check_same, check_tensor, randn

Maker = Callable[[torch.device, torch.dtype, torch.Generator], torch.Tensor]


def _nan_inf(shape: Sequence[int]) -> Maker:
    def make(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
        x = randn(shape, "cpu", torch.float32, g)
        flat = x.view(-1)
        flat[::7], flat[3::11], flat[5::13] = float("nan"), float("inf"), float("-inf")
        return x.to(device, dtype)
    return make


def tensor_makers() -> dict[str, Maker]:
    """Named ways to make one input tensor: odd sizes, empty, views, NaN/Inf."""
    def plain(*shape: int) -> Maker:
        return lambda device, dtype, g: randn(shape, device, dtype, g)
    return {
        "1": plain(1),
        "17": plain(17),
        "1023x17": plain(1023, 17),
        "257x4099": plain(257, 4099),
        "empty": plain(0),
        "0x5": plain(0, 5),
        "transposed": lambda device, dtype, g: randn((17, 1023), device, dtype, g).t(),
        "sliced": lambda device, dtype, g: randn((64, 66), device, dtype, g)[:, 1:-1:2],
        "expanded": lambda device, dtype, g: randn((1, 17), device, dtype, g).expand(33, 17),
        "nan_inf": _nan_inf((1023,)),
    }


def variant_id(kwargs: Mapping[str, Any]) -> str:
    return "-".join(f"{k}={v}" for k, v in kwargs.items())


def derivative_from_output(backward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Derivative:
    """The derivative of a unary op whose gradient follows from its output ``y`` (relu, exp, tanh): the forward
    keeps ``y`` alone, and ``backward(grad, y)`` gives the gradient of ``x``, in kernelzoo ops."""
    return Derivative(
        inputs=("x",),
        save=lambda call, outputs: {"y": outputs[0]},
        backward=lambda saved, grad: {"x": backward(grad, saved["y"])},
    )


class UnaryOp(Op):
    """An elementwise op of one float tensor ``x`` (plus keyword parameters)."""

    flops_per_element: ClassVar[float] = 1.0
    # keyword-argument variants that conformance and tuning cover
    variants: ClassVar[Sequence[Mapping[str, Any]]] = ({},)
    shapes = {"cuda": [(16384, 16384), (4096, 4096), (1024, 1024)], "cpu": [(2048, 2048), (512, 512)]}

    def params(self, **kwargs: Any) -> dict[str, Any]:
        """Check and normalise the keyword parameters (none by default)."""
        if kwargs:
            raise ArgumentError(f"{self.name}: unexpected argument(s) {', '.join(kwargs)}")
        return {}

    def check(self, x: torch.Tensor, **kwargs: Any) -> Call:
        check_tensor(self.name, "x", x)
        return Call(self, {"x": x}, self.params(**kwargs))

    def sizes(self, call: Call) -> dict[str, int]:
        return {"n": call.inputs["x"].numel()}

    def shape_string(self, call: Call) -> str:
        return "x".join(map(str, call.inputs["x"].shape))

    def flags(self, call: Call) -> str:
        return variant_id(call.params)

    def flops(self, call: Call) -> float:
        return self.flops_per_element * call.inputs["x"].numel()

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, **kwargs: Any) -> Call:
        return self.check(randn(shape, device, dtype, generator), **kwargs)

    def cases(self) -> list[Case]:
        cases = []
        for variant in self.variants:
            for name, make in tensor_makers().items():
                case_id = "-".join(filter(None, [name, variant_id(variant)]))
                cases.append(Case(case_id, _unary_case(make, variant)))
        return cases

    def bad_cases(self) -> list[BadCase]:
        return [
            BadCase("int-dtype", lambda: ((torch.arange(4),), {}), DTypeError,
                    "x must be float32, float16, bfloat16, got torch.int64"),
            BadCase("not-a-tensor", lambda: (([1.0, 2.0],), {}), ArgumentError,
                    "x must be a torch.Tensor, got list"),
        ]


def _unary_case(make: Maker, variant: Mapping[str, Any]) -> Callable:
    def build(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        return (make(device, dtype, g),), dict(variant)
    return build


# --- broadcasting --------------------------------------------------------------------------

# Dimensions the strided kernels index after merging; more (rare: no two neighbours merge)
# are handled by expanding the inputs to contiguous copies (binary ops) or by splitting the
# destination along its first dimension (copy_).
MAX_DIMS = 6


def broadcast_shape(a: Sequence[int], b: Sequence[int], op: str = "broadcast_shape",
                    names: tuple[str, str] = ("a", "b")) -> tuple[int, ...]:
    """The shape a and b broadcast to; ArgumentError naming ``op`` and both shapes if they do not."""
    if a == b:  # the common case, without the loop (a binary op's call asks twice)
        return tuple(a)
    ndim = max(len(a), len(b))
    a_full, b_full = (1,) * (ndim - len(a)) + tuple(a), (1,) * (ndim - len(b)) + tuple(b)
    out = []
    for d, (m, n) in enumerate(zip(a_full, b_full)):
        if m != n and m != 1 and n != 1:
            raise ArgumentError(
                f"{op}: {names[0]} of shape {tuple(a)} and {names[1]} of shape {tuple(b)} do not broadcast: "
                f"dimension {d - ndim} is {m} in {names[0]} and {n} in {names[1]}; expected equal sizes or one "
                "of them 1")
        out.append(n if m == 1 else m)
    return tuple(out)


@dataclass(frozen=True)
class Layout:
    """The broadcast shape as few dimensions as possible, outermost first, and the strides (in
    elements) of two operands over them: 0 along a dimension the operand is broadcast over.
    For binary ops a and b are the inputs (the output is dense); for copy_, a is dst and b is src."""

    sizes: tuple[int, ...]
    a_strides: tuple[int, ...]
    b_strides: tuple[int, ...]

    @property
    def contiguous(self) -> bool:
        """Both operands are read (or written) like a dense output: one run of elements."""
        return len(self.sizes) == 1 and self.a_strides == self.b_strides == (1,)


def layout(a: torch.Tensor, b: torch.Tensor, sort_by_a: bool = False) -> Layout:
    """The merged layout of a and b over their broadcast shape (0 or 1 elements give one dimension).

    ``sort_by_a`` orders the dimensions by a's strides, largest first, before merging: for a
    written operand (copy_'s dst, which may be a transposed or permuted view) its stores then
    run along its memory and a permuted dense view merges into one dimension. Binary ops keep
    the broadcast shape's order: their dense output is written in it.
    """
    if a.shape == b.shape and a.is_contiguous() and b.is_contiguous():  # the common case: one dense run, no walk
        return Layout((a.numel(),), (1,), (1,))
    shape = broadcast_shape(a.shape, b.shape)

    def aligned(t: torch.Tensor) -> list[int]:  # t's strides over the output's dimensions
        lead = len(shape) - t.dim()
        return [0] * lead + [s if n != 1 else 0 for n, s in zip(t.shape, t.stride())]

    dims = [(n, sa, sb) for n, sa, sb in zip(shape, aligned(a), aligned(b)) if n != 1]
    if sort_by_a:
        dims.sort(key=lambda dim: -dim[1])  # stable: dimensions of equal stride keep their order
    merged: list[tuple[int, int, int]] = []
    for n, sa, sb in dims:
        if merged:
            m, ma, mb = merged[-1]
            if ma == sa * n and mb == sb * n:  # the outer dimension steps over the inner one exactly
                merged[-1] = (m * n, sa, sb)
                continue
        merged.append((n, sa, sb))
    if not merged or math.prod(shape) == 0:
        return Layout((math.prod(shape),), (1,), (1,))
    sizes, a_strides, b_strides = zip(*merged)
    return Layout(sizes, a_strides, b_strides)


def dense_inputs(call: Call) -> tuple[torch.Tensor, torch.Tensor]:
    """The call's two inputs expanded to the output's shape as contiguous copies (for layouts over MAX_DIMS)."""
    a, b = list(call.inputs.values())[:2]
    shape = broadcast_shape(a.shape, b.shape)
    return a.expand(shape).contiguous(), b.expand(shape).contiguous()


def binary_plan(call: Call) -> tuple[torch.Tensor, torch.Tensor, Layout, torch.Tensor]:
    """A binary call's two inputs, their merged layout and a new output of the broadcast shape.
    Inputs whose layout has more than MAX_DIMS dimensions (what the kernels take) come back as
    dense copies, with their layout."""
    a, b = list(call.inputs.values())[:2]
    plan = layout(a, b)
    if len(plan.sizes) > MAX_DIMS:
        a, b = dense_inputs(call)
        plan = layout(a, b)
    return a, b, plan, call.empty(broadcast_shape(a.shape, b.shape))


def distinct_elements(t: torch.Tensor) -> int:
    """Elements of ``t`` at distinct addresses (an expanded tensor is read at its own size)."""
    return math.prod(n for n, s in zip(t.shape, t.stride()) if s != 0)


def overflow_to_inf(ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The float64 ``ref`` with the values that round to ±inf in ``dtype`` set to ±inf: a quotient
    of 1e5 is inf in float16, in torch as in any kernel that rounds its float32 result once."""
    rounded = ref.to(dtype)
    return torch.where(rounded.isinf() & ref.isfinite(), rounded.to(ref.dtype), ref)


# --- binary ops ----------------------------------------------------------------------------

# The cases a binary op's second and later variants run: dense (vectorised), unaligned, strided
# (broadcast and transposed), odd sizes, empty, NaN/Inf.
VARIANT_CASES = ("17", "1023x17", "empty", "row-17x1023+1023", "transposed", "misaligned", "nan_inf")

class BinaryOp(Op):
    """An elementwise op of two float tensors that broadcast against each other (torch's rules),
    plus keyword parameters. Both share one dtype and device (torch would promote mixed dtypes;
    kernelzoo asks for one); the output has the broadcast shape, is contiguous, and is computed
    in float32 from the inputs' values. Subclasses set ``name`` and ``formula``."""

    operands: ClassVar[tuple[str, str]] = ("a", "b")  # the inputs' names, in order
    flops_per_element: ClassVar[float] = 1.0
    # keyword-argument variants that conformance, tuning and benchmarks cover
    variants: ClassVar[Sequence[Mapping[str, Any]]] = ({},)
    shapes = {"cuda": [(16384, 16384), (4096, 4096)], "cpu": [(2048, 2048), (512, 512)]}

    def formula(self, a: torch.Tensor, b: torch.Tensor, **params: Any) -> torch.Tensor:
        """The op on float64 tensors, broadcasting: the reference's math."""
        raise NotImplementedError

    def params(self, **kwargs: Any) -> dict[str, Any]:
        """Check and normalise the keyword parameters (none by default)."""
        if kwargs:
            raise ArgumentError(f"{self.name}: unexpected argument(s) {', '.join(kwargs)}")
        return {}

    def kernel_name(self, call: Call) -> str:
        """The expression the kernels compute for ``call``: the prefix of the compiled plugins' entry
        points and the Triton kernels' OP. The op's name; an op whose parameters change the formula
        adds them ("gelu_backward_tanh")."""
        return self.name

    def check(self, a: torch.Tensor, b: torch.Tensor) -> Call:
        return self.binary_call(a, b)

    def binary_call(self, a: Any, b: Any, **params: Any) -> Call:
        """The checks every binary op makes, named after ``operands``; a subclass's ``check`` with
        other names or parameters calls this."""
        first, second = self.operands
        check_tensor(self.name, first, a)
        check_tensor(self.name, second, b)
        check_same(self.name, **{first: a, second: b})
        broadcast_shape(a.shape, b.shape, self.name, self.operands)
        return Call(self, {first: a, second: b}, self.params(**params))

    def reference(self, call: Call) -> torch.Tensor:
        a, b = call.inputs.values()
        return overflow_to_inf(self.formula(a.double(), b.double(), **call.params), call.dtype)

    def make_input(self, name: str, shape: Sequence[int], device: torch.device | str, dtype: torch.dtype,
                   generator: torch.Generator | None) -> torch.Tensor:
        """Random test data for the input ``name`` (standard normal; an op may draw realistic values)."""
        return randn(shape, device, dtype, generator)

    def example(self, shape: Sequence[Any], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, **params: Any) -> Call:
        """Both inputs of ``shape``, or of the pair of shapes that :meth:`parse_shape` gives for
        broadcasting calls."""
        if len(shape) == 2 and all(isinstance(s, (tuple, list)) for s in shape):
            a_shape, b_shape = shape
        else:
            a_shape = b_shape = shape
        first, second = self.operands
        return self.check(self.make_input(first, a_shape, device, dtype, generator),
                          self.make_input(second, b_shape, device, dtype, generator), **params)

    def parse_shape(self, text: str) -> tuple[Any, ...]:
        """'4096x4096' (both inputs alike) or 'AxB+CxD' (each input's shape; 'scalar' for 0-dim)."""
        shapes = [() if part == "scalar" else Op.parse_shape(self, part) for part in text.split("+")]
        if len(shapes) > 2:
            raise ArgumentError(f"{self.name}: shape {text!r} names more than two tensors; expected 'AxB' or "
                                "'AxB+CxD'")
        return shapes[0] if len(shapes) == 1 else (shapes[0], shapes[1])

    def shape_string(self, call: Call) -> str:
        a, b = (t.shape for t in call.inputs.values())
        if a == b:
            return "x".join(map(str, a)) or "scalar"
        return f"{'x'.join(map(str, a)) or 'scalar'}+{'x'.join(map(str, b)) or 'scalar'}"

    def out_shape(self, call: Call) -> tuple[int, ...]:
        a, b = call.inputs.values()
        return broadcast_shape(a.shape, b.shape)

    def sizes(self, call: Call) -> dict[str, int]:
        return {"n": math.prod(self.out_shape(call))}

    def flags(self, call: Call) -> str:
        # broadcasting or strided inputs take another kernel than dense same-shape ones
        a, b = call.inputs.values()
        strided = "" if a.shape == b.shape and a.is_contiguous() and b.is_contiguous() else "strided"
        return "-".join(filter(None, (variant_id(call.params), strided)))

    def flops(self, call: Call) -> float:
        return self.flops_per_element * self.sizes(call)["n"]

    def bytes(self, call: Call) -> float:
        """The output written once, each input's distinct elements read once (a broadcast input is
        read at its own size, not the output's)."""
        a, b = call.inputs.values()
        return float(a.element_size() * (self.sizes(call)["n"] + distinct_elements(a) + distinct_elements(b)))

    def cases(self) -> list[Case]:
        """Every case with the first variant; with the others, VARIANT_CASES: the formula on odd
        sizes and NaN/Inf through each kind of kernel (layouts are the same whatever the formula)."""
        cases = []
        for i, variant in enumerate(self.variants):
            for case_id, make, small in self.binary_makers():
                if i == 0 or case_id in VARIANT_CASES:
                    cases.append(Case("-".join(filter(None, [case_id, variant_id(variant)])),
                                      _binary_case(make, variant), small))
        return cases

    def binary_makers(self) -> list[tuple[str, Callable, bool]]:
        """(id, make(device, dtype, generator) -> (first, second), small) of every conformance case."""
        first, second = self.operands

        def pair(a_shape: Sequence[int], b_shape: Sequence[int]) -> Callable:
            return lambda device, dtype, g: (self.make_input(first, a_shape, device, dtype, g),
                                             self.make_input(second, b_shape, device, dtype, g))

        def transposed(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple:
            return self.make_input(first, (17, 1023), device, dtype, g).t(), \
                self.make_input(second, (1023, 17), device, dtype, g)

        def sliced_transposed(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple:
            a = self.make_input(first, (64, 66), device, dtype, g)[:, 1:-1:2]  # (64, 32), strides (66, 2)
            b = self.make_input(second, (32, 64), device, dtype, g).t()  # (64, 32), strides (1, 64)
            return a, b

        def expanded(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple:
            return self.make_input(first, (1, 17), device, dtype, g).expand(33, 17), \
                self.make_input(second, (33, 17), device, dtype, g)

        def misaligned(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple:
            # contiguous, but one element past a 16-byte boundary: vector loads must not be used
            return self.make_input(first, (1024,), device, dtype, g)[1:], \
                self.make_input(second, (1023,), device, dtype, g)

        return [
            ("1", pair((1,), (1,)), True),
            ("17", pair((17,), (17,)), True),
            ("1023x17", pair((1023, 17), (1023, 17)), True),
            # 105k elements: past the OpenMP plugins' threshold for threads (32k), dense and strided; 200
            # programs take seconds in Triton's interpreter
            ("257x411", pair((257, 411), (257, 411)), False),
            ("row-257x411+411", pair((257, 411), (411,)), False),
            ("empty", pair((0,), (0,)), True),
            ("0x5+5", pair((0, 5), (5,)), True),
            ("scalar+scalar", pair((), ()), True),
            ("scalar+5x7", pair((), (5, 7)), True),
            ("5x7+scalar", pair((5, 7), ()), True),
            ("row-17x1023+1023", pair((17, 1023), (1023,)), True),
            ("column-1023x17+1023x1", pair((1023, 17), (1023, 1)), True),
            ("outer-17x1+1x1023", pair((17, 1), (1, 1023)), True),
            ("leading-1023+3x1x1023", pair((1023,), (3, 1, 1023)), True),
            ("7d-alternating", pair((2, 1, 3, 1, 2, 1, 3), (1, 3, 1, 2, 1, 3, 1)), True),
            ("transposed", transposed, True),
            ("sliced-transposed", sliced_transposed, True),
            ("expanded", expanded, True),
            ("misaligned", misaligned, True),
            ("nan_inf", _binary_nan_inf, True),
        ]

    def bad_cases(self) -> list[BadCase]:
        first, second = self.operands
        return [
            BadCase("int-dtype", lambda: ((torch.arange(4), torch.arange(4)), {}), DTypeError,
                    f"{self.name}: {first} must be float32, float16, bfloat16, got torch.int64"),
            BadCase("mixed-dtypes", lambda: ((torch.ones(4), torch.ones(4, dtype=torch.float16)), {}), DTypeError,
                    f"{self.name}: {first} is torch.float32 but {second} is torch.float16; expected one dtype"),
            BadCase("mixed-devices", lambda: ((torch.ones(4), torch.ones(4, device="meta")), {}), DeviceError,
                    f"{self.name}: {first} is on cpu but {second} is on meta; expected one device"),
            BadCase(f"{second}-not-a-tensor", lambda: ((torch.ones(4), 2.0), {}), ArgumentError,
                    f"{self.name}: {second} must be a torch.Tensor, got float"),
            BadCase("shapes-do-not-broadcast", lambda: ((torch.ones(3, 4), torch.ones(5)), {}), ArgumentError,
                    f"{self.name}: {first} of shape (3, 4) and {second} of shape (5,) do not broadcast: dimension -1 "
                    f"is 4 in {first} and 5 in {second}; expected equal sizes or one of them 1"),
        ]


def _binary_nan_inf(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple:
    """NaN, ±inf, 0 and -0 in both inputs, meeting each other and finite values: inf - inf,
    inf · 0, 0 / 0, x / ±0 all occur."""
    a, b = randn((1023,), "cpu", torch.float32, g), randn((1023,), "cpu", torch.float32, g)
    a[::7], a[3::11], a[5::13], a[2::17] = float("nan"), float("inf"), float("-inf"), 0.0
    b[::5], b[3::11], b[6::13], b[4::9], b[8::19] = float("inf"), float("-inf"), float("nan"), 0.0, -0.0
    return a.to(device, dtype), b.to(device, dtype)


def _binary_case(make: Callable, variant: Mapping[str, Any]) -> Callable:
    def build(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        return make(device, dtype, g), dict(variant)
    return build
