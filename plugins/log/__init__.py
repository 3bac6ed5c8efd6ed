"""log(x), the natural logarithm, elementwise, with torch.log's semantics: log(0) = -inf,
log(x < 0) = NaN, log(inf) = inf, NaN stays NaN (log(-0) = -inf as well)."""

from __future__ import annotations

import torch
from kernelzoo_plugins._elementwise.spec import interpreter_sized

from kernelzoo import ops
from kernelzoo.elementwise import UnaryOp
from kernelzoo.registry import Call, Case, Derivative


class Log(UnaryOp):
    """log(x) elementwise, as torch.log."""

    name = "log"
    # the derivative: 1/x
    derivative = Derivative(
        inputs=("x",),
        save=lambda call, outputs: {"x": call.inputs["x"]},
        backward=lambda saved, grad: {"x": ops.div(grad, saved["x"])},
    )

    def cases(self) -> list[Case]:
        return interpreter_sized(super().cases())

    def reference(self, call: Call) -> torch.Tensor:
        return torch.log(call.inputs["x"].double())
