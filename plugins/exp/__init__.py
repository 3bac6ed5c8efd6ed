"""exp(x) = eˣ, elementwise, with torch.exp's semantics: exp(-inf) = 0, exp(inf) = inf, NaN stays NaN.

Also what the unary ops built here (exp, log, tanh, pow, dropout) share in their specs:
:func:`overflow_to_inf` for the references of those whose results can leave their dtype's range, and
:func:`interpreter_sized` for their conformance cases. Their openmp and cuda plugins share the wrappers
in this folder's openmp.py and cuda.py, and their kernels in plugins/_elementwise/.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import torch

from kernelzoo import ops
from kernelzoo.elementwise import UnaryOp
from kernelzoo.registry import Call, Case, Derivative


def overflow_to_inf(ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The float64 ``ref`` with each finite value beyond ``dtype``'s range replaced by the ±inf it rounds
    to: what every output of that dtype holds there (exp(12) = 162755 is inf in float16)."""
    rounded = ref.to(dtype).double()
    return torch.where(torch.isinf(rounded), rounded, ref)


def interpreter_sized(cases: Iterable[Case]) -> list[Case]:
    """``cases`` with 257x4099 (10⁶ elements) kept out of Triton's interpreter, where these ops' kernels
    take 3 to 25 s on it (2 cores); 1023x17 (34 programs of 512 elements) runs the same code paths."""
    return [replace(case, small=False) if case.id.startswith("257x4099") else case for case in cases]


class Exp(UnaryOp):
    """exp(x): eˣ elementwise, as torch.exp."""

    name = "exp"
    # the derivative: exp(x) itself, the output, times the gradient
    derivative = Derivative(
        inputs=("x",),
        save=lambda call, outputs: {"y": outputs[0]},
        backward=lambda saved, grad: {"x": ops.mul(grad, saved["y"])},
    )
    # Untuned on the CPU, torch first: as fast per element where the data is large, behind more Python per call
    # (docs/perf/exp.md, docs/design/elementwise.md). On a GPU the global order stands.
    default_order = {"cpu": ("torch",)}

    def cases(self) -> list[Case]:
        return interpreter_sized(super().cases())

    def reference(self, call: Call) -> torch.Tensor:
        return overflow_to_inf(torch.exp(call.inputs["x"].double()), call.dtype)
