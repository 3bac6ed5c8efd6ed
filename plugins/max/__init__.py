"""max(x, dim=None, keepdim=False): torch.max's reduction forms.

* dim=None: the 0-dim max of every element (torch.max(x)); x must not be empty.
* dim=int: (values, indices) along ``dim`` (torch.max(x, dim, keepdim)); indices are int64, the FIRST
  index of the maximum, as torch's CPU kernel gives; the dim must not have size 0.

NaN propagates: a NaN is the max, and its index is the first NaN's. A run of only -inf gives -inf at
index 0. Every implementation returns (values, indices); for dim=None indices is the 0-dim flat index
into x (in x's logical, row-major order). ``kernelzoo.ops.max`` returns values for dim=None and the pair
(values, indices), as a ``torch.return_types.max``, for an int dim, and records a backward through the
op max_backward when x requires grad: the gradient goes to the one element each index names (for
dim=None too, where torch.max(x)'s own backward spreads it evenly over every element equal to the max).

Kernels see the reduction as (outer, reduced, inner) over a contiguous copy of x (a view when x is
contiguous): values[a, b] = max_r x[a, r, b]; dim=None is (1, numel, 1). That (outer, reduced, inner)
is the op's shape, as for sum: "8192x8192x1" reduces rows, "1x8192x8192" columns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from kernelzoo_plugins._reduce.max import (
    CaseSpec,
    Plan,
    case_tensor,
    check_keepdim,
    check_reduction,
    compare_with_indices,
    max_cases,
    normalise_dim,
    plan,
)

# re-exported: what max's plugins read
from kernelzoo_plugins._reduce.max import index_output as index_output
from kernelzoo_plugins._reduce.plan import ReductionOp
from kernelzoo_plugins._reduce.plan import as_3d as as_3d

from kernelzoo import ops
from kernelzoo.autograd import contiguous
from kernelzoo.errors import ArgumentError
from kernelzoo.registry import BadCase, Call, Case, Derivative, check_tensor
from kernelzoo.tolerance import Mismatch


class Max(ReductionOp):
    """max(x, dim=None, keepdim=False) -> values (dim=None) or (values, indices) (implementations:
    always (values, indices))."""

    name = "max"
    outputs = 2  # values and indices
    # the derivative: max_backward scatters the gradient through the saved indices; the indices get none
    derivative = Derivative(
        inputs=("x",),
        save=lambda call, outputs: {"indices": outputs[1], "dim": call.params["dim"], "keepdim": call.params["keepdim"],
                                    "input_shape": tuple(call.inputs["x"].shape)},
        backward=lambda saved, grad: {"x": ops.max_backward(contiguous(grad), saved["indices"], saved["dim"],
                                                       saved["input_shape"], saved["keepdim"])},
        returns=2,
    )
    # (outer, reduced, inner), as sum's: rows and columns of a square activation, everything of it, and
    # logits over a GPT-2 vocabulary (argmax decoding); every GPU one larger than the 50 MB L2
    shapes = {
        "cuda": [(8192, 8192, 1), (1, 8192, 8192), (1, 8192 * 8192, 1), (4096, 50257, 1)],
        "cpu": [(2048, 2048, 1), (1, 2048, 2048), (1, 2048 * 2048, 1), (256, 50257, 1)],
    }

    def check(self, x: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> Call:
        check_tensor(self.name, "x", x)
        dim = normalise_dim(self.name, dim, x.dim())
        keepdim = check_keepdim(self.name, dim, keepdim)
        check_reduction(self.name, x.shape, dim)
        return Call(self, {"x": x}, {"dim": dim, "keepdim": keepdim})

    def plan(self, call: Call) -> Plan:
        return plan(call.inputs["x"].shape, call.params["dim"], call.params["keepdim"])

    def reference(self, call: Call) -> tuple[torch.Tensor, torch.Tensor]:
        x64, dim = call.inputs["x"].double(), call.params["dim"]
        if dim is None:  # float64 holds every input exactly: ties stay ties
            return tuple(torch.max(x64.reshape(-1), 0))
        return tuple(torch.max(x64, dim, call.params["keepdim"]))

    def verify(self, call: Call, outputs: Any, reference: Any) -> Mismatch | None:
        return compare_with_indices(call, outputs, reference, self.tolerance(call))

    def bytes(self, call: Call) -> float:
        x, p = call.inputs["x"], self.plan(call)
        return float(x.numel() * x.element_size() + p.outer * p.inner * (x.element_size() + 8))

    def cases(self) -> list[Case]:
        return max_cases(_forward_case)

    def bad_cases(self) -> list[BadCase]:
        x = torch.zeros(2, 3)
        return [
            *self.reduction_bad_cases(x),
            BadCase("dim-out-of-range-scalar", lambda: ((torch.zeros(()),), {"dim": 1}), ArgumentError,
                    "dim must be in [-1, 0] for x of 0 dims, got 1"),
            BadCase("dim-tuple", lambda: ((x,), {"dim": (0, 1)}), ArgumentError,
                    "dim must be None or an int, got (0, 1)"),
            BadCase("dim-float", lambda: ((x,), {"dim": 1.0}), ArgumentError, "dim must be None or an int, got 1.0"),
            BadCase("keepdim-int", lambda: ((x,), {"dim": 1, "keepdim": 1}), ArgumentError,
                    "keepdim must be a bool, got 1"),
            BadCase("keepdim-without-dim", lambda: ((x,), {"keepdim": True}), ArgumentError,
                    "keepdim=True needs an int dim"),
            BadCase("empty-all", lambda: ((torch.zeros(0, 3),), {}), ArgumentError,
                    "x of shape (0, 3) is empty; a max over all elements needs at least one"),
            BadCase("empty-dim", lambda: ((torch.zeros(0, 3),), {"dim": 0}), ArgumentError,
                    "x of shape (0, 3) has size 0 at dim 0; expected a non-empty reduction dim"),
        ]

    # --- autograd ----------------------------------------------------------------------------
    def result(self, call: Call, outputs: Any) -> Any:
        values, indices = outputs
        if call.params["dim"] is None:
            return values
        return torch.return_types.max((values, indices))


# --- conformance cases (shared with max_backward) ---------------------------------------------

def _forward_case(spec: CaseSpec) -> Callable:
    _, shape, layout, dim, keepdim = spec

    def build(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        return (case_tensor(shape, layout, device, dtype, g),), {"dim": dim, "keepdim": keepdim}
    return build
