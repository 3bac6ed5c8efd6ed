"""max_backward(grad, indices, dim, input_shape, keepdim=False) -> grad_x: the gradient of the op max (see its
spec) with respect to x, through its indices:

    grad_x = zeros(input_shape);  grad_x[..., indices[a, b], ...] = grad[a, b]  along dim

grad and indices have max's output shape (keepdim as in the forward); dim=None means max over every
element: grad and indices are 0-dim and indices is the flat index into x. Each input position receives at
most one value (a max has one index per output), so there is nothing to add up: no atomics, and every
plugin writes the same bits. The triton plugin writes every element of grad_x once, as a gather
(grad_x[a, r, b] = grad[a, b] where indices[a, b] == r, else 0), so an index outside the dim writes
nothing; the openmp plugin zeroes grad_x, writes each grad at its index and rejects an index outside the
dim (ArgumentError), as torch's scatter in the python and torch plugins does (its own error). grad_x is in
grad's dtype. The op's shape is max's (outer, reduced, inner).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any

import torch
from kernelzoo_plugins._reduce.max import (
    CaseSpec,
    Plan,
    case_tensor,
    check_keepdim,
    check_reduction,
    max_cases,
    normalise_dim,
    plan,
)

from kernelzoo.errors import ArgumentError, DeviceError, DTypeError
from kernelzoo.registry import BadCase, Call, Case, Op, check_same_device, check_tensor, randn


class MaxBackward(Op):
    """max_backward(grad, indices, dim, input_shape, keepdim=False) -> grad_x."""

    name = "max_backward"
    shapes = {  # max's (outer, reduced, inner)
        "cuda": [(8192, 8192, 1), (1, 8192, 8192), (1, 8192 * 8192, 1), (4096, 50257, 1)],
        "cpu": [(2048, 2048, 1), (1, 2048, 2048), (1, 2048 * 2048, 1), (256, 50257, 1)],
    }

    def check(self, grad: torch.Tensor, indices: torch.Tensor, dim: int | None, input_shape: Sequence[int],
              keepdim: bool = False) -> Call:
        check_tensor(self.name, "grad", grad)
        check_tensor(self.name, "indices", indices, (torch.int64,))
        check_same_device(self.name, grad=grad, indices=indices)
        if not isinstance(input_shape, (tuple, list, torch.Size)) or not all(
                isinstance(n, numbers.Integral) and not isinstance(n, bool) and n >= 0 for n in input_shape):
            raise ArgumentError(f"{self.name}: input_shape must be a sequence of sizes >= 0, got {input_shape!r}")
        input_shape = tuple(int(n) for n in input_shape)
        dim = normalise_dim(self.name, dim, len(input_shape))
        keepdim = check_keepdim(self.name, dim, keepdim)
        check_reduction(self.name, input_shape, dim, "input_shape")
        expected = plan(input_shape, dim, keepdim).out_shape
        for name, t in (("grad", grad), ("indices", indices)):
            if tuple(t.shape) != expected:
                raise ArgumentError(f"{self.name}: {name} of shape {tuple(t.shape)} is not max's output for an input "
                                    f"of shape {input_shape} (dim={dim}, keepdim={keepdim}); expected {expected}")
        return Call(self, {"grad": grad, "indices": indices},
                    {"dim": dim, "input_shape": input_shape, "keepdim": keepdim})

    def plan(self, call: Call) -> Plan:
        return plan(call.params["input_shape"], call.params["dim"], call.params["keepdim"])

    def reference(self, call: Call) -> torch.Tensor:
        p = self.plan(call)
        g, indices = call.inputs["grad"].double(), call.inputs["indices"]
        grad_x = torch.zeros((p.outer, p.reduced, p.inner), dtype=torch.float64, device=g.device)
        grad_x.scatter_(1, indices.reshape(p.outer, 1, p.inner), g.reshape(p.outer, 1, p.inner))
        return grad_x.view(call.params["input_shape"])

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None) -> Call:
        """The gradient of max over the middle dim of x of shape (outer, reduced, inner)."""
        if len(shape) != 3:
            raise ArgumentError(f"{self.name}: example shapes are (outer, reduced, inner), got {tuple(shape)}")
        x = randn(shape, device, dtype, generator)
        indices = torch.max(x, 1).indices
        return self.check(randn(indices.shape, device, dtype, generator), indices, 1, tuple(shape))

    def sizes(self, call: Call) -> dict[str, int]:
        p = self.plan(call)
        return {"outer": p.outer, "reduced": p.reduced, "inner": p.inner}

    def bytes(self, call: Call) -> float:
        g, p = call.inputs["grad"], self.plan(call)  # grad and indices read, grad_x written
        return float(g.numel() * (g.element_size() + 8) + p.outer * p.reduced * p.inner * g.element_size())

    def cases(self) -> list[Case]:
        return max_cases(_backward_case)

    def bad_cases(self) -> list[BadCase]:
        g, idx = torch.ones(2), torch.zeros(2, dtype=torch.int64)

        def bad(*args: Any, **kwargs: Any) -> Callable[[], tuple[tuple, dict]]:
            return lambda: (args, kwargs)
        return [
            BadCase("int-dtype", bad(idx, idx, 1, (2, 3)), DTypeError,
                    "grad must be float32, float16, bfloat16, got torch.int64"),
            BadCase("not-a-tensor", bad([1.0, 2.0], idx, 1, (2, 3)), ArgumentError,
                    "grad must be a torch.Tensor, got list"),
            BadCase("indices-int32", bad(g, idx.int(), 1, (2, 3)), DTypeError,
                    "indices must be int64, got torch.int32"),
            BadCase("indices-device", bad(g, idx.to("meta"), 1, (2, 3)), DeviceError,
                    "grad is on cpu but indices is on meta"),
            BadCase("input-shape-not-sizes", bad(g, idx, 1, (2, -3)), ArgumentError,
                    "input_shape must be a sequence of sizes >= 0, got (2, -3)"),
            BadCase("dim-out-of-range", bad(g, idx, 2, (2, 3)), ArgumentError,
                    "dim must be in [-2, 1] for x of 2 dims, got 2"),
            BadCase("keepdim-without-dim", bad(g, idx, None, (2, 3), True), ArgumentError,
                    "keepdim=True needs an int dim"),
            BadCase("empty-dim", bad(torch.ones(3), torch.zeros(3, dtype=torch.int64), 0, (0, 3)), ArgumentError,
                    "input_shape of shape (0, 3) has size 0 at dim 0"),
            BadCase("grad-shape", bad(torch.ones(3), idx, 1, (2, 3)), ArgumentError,
                    "grad of shape (3,) is not max's output for an input of shape (2, 3) (dim=1, keepdim=False); "
                    "expected (2,)"),
            BadCase("indices-shape-keepdim", bad(g.view(2, 1), idx, 1, (2, 3), True), ArgumentError,
                    "indices of shape (2,) is not max's output for an input of shape (2, 3) (dim=1, keepdim=True); "
                    "expected (2, 1)"),
        ]


def _backward_case(spec: CaseSpec) -> Callable:
    """max's case: x's indices from the float64 reference, a random grad of max's output shape (for the
    transposed case, laid out transposed too: grad_x's layout never follows grad's)."""
    _, shape, layout, dim, keepdim = spec

    def build(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        x = case_tensor(shape, layout, device, dtype, g)
        x64 = x.double()
        indices = torch.max(x64.reshape(-1), 0).indices if dim is None else torch.max(x64, dim, keepdim).indices
        grad = randn(indices.shape, device, dtype, g)
        if layout == "transposed" and grad.dim() >= 2:
            grad = randn(tuple(reversed(grad.shape)), device, dtype, g).permute(*reversed(range(grad.dim())))
        if layout == "expanded" and dim is not None:  # a gradient broadcast from fewer elements (e.g. sum's)
            grad = randn((1,), device, dtype, g).expand(indices.shape)
        return (grad, indices, dim, tuple(x.shape), keepdim), {}
    return build
