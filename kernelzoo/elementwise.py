"""Shared spec pieces of elementwise ops: a base class for unary ops and the conformance
cases every elementwise op is held to (odd sizes, empty, non-contiguous views, NaN/Inf)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import torch

from kernelzoo.errors import ArgumentError, DTypeError
from kernelzoo.registry import BadCase, Call, Case, Op, check_tensor, randn

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
