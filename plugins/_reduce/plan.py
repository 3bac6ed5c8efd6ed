"""What the reductions (sum, mean, max) share: a call seen as a contiguous (outer, reduced, inner) tensor
(:class:`Plan`, :func:`as_3d`) and the parts of their specs that read it (:class:`ReductionOp`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from kernelzoo.errors import ArgumentError, DTypeError
from kernelzoo.registry import BadCase, Call, Op, randn

# Elements above this are too slow for Triton's interpreter in CI (its programs run in Python).
INTERPRETER_MAX_ELEMENTS = 200_000


@dataclass(frozen=True)
class Plan:
    """How a call reduces: x (permuted first, if ``permute``) as a contiguous (outer, reduced, inner)."""

    outer: int
    reduced: int
    inner: int
    permute: tuple[int, ...] | None  # kept dims first, then reduced ones, when those are not one block
    out_shape: tuple[int, ...]


def as_3d(x: torch.Tensor, p: Plan) -> torch.Tensor:
    """x as a contiguous (outer, reduced, inner) tensor (a view when x is contiguous and needs no permute)."""
    if p.permute is not None:
        x = x.permute(p.permute)
    return x.contiguous().view(p.outer, p.reduced, p.inner)


class ReductionOp(Op):
    """An op over a tensor x that a subclass's ``plan(call)`` sees as (outer, reduced, inner): its example shapes
    are those three sizes, reduced over the middle dim, and it takes one operation (an addition, a comparison)
    an element."""

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None) -> Call:
        """x of shape (outer, reduced, inner) reduced over its middle dim."""
        if len(shape) != 3:
            raise ArgumentError(f"{self.name}: example shapes are (outer, reduced, inner), got {tuple(shape)}")
        return self.check(randn(shape, device, dtype, generator), dim=1)

    def sizes(self, call: Call) -> dict[str, int]:
        p = self.plan(call)
        return {"outer": p.outer, "reduced": p.reduced, "inner": p.inner}

    def flops(self, call: Call) -> float:
        return float(call.inputs["x"].numel())

    def reduction_bad_cases(self, x: torch.Tensor) -> list[BadCase]:
        """The bad calls every reduction refuses alike: an int x, a list, and a dim out of range of the 2-d ``x``."""
        return [
            BadCase("int-dtype", lambda: ((torch.arange(4),), {}), DTypeError,
                    "x must be float32, float16, bfloat16, got torch.int64"),
            BadCase("not-a-tensor", lambda: (([1.0, 2.0],), {}), ArgumentError, "x must be a torch.Tensor, got list"),
            BadCase("dim-out-of-range", lambda: ((x,), {"dim": 2}), ArgumentError,
                    "dim must be in [-2, 1] for x of 2 dims, got 2"),
        ]
