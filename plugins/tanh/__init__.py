"""tanh(x), elementwise, with torch.tanh's semantics: tanh(±inf) = ±1, NaN stays NaN."""

from __future__ import annotations

import torch
from kernelzoo_plugins.exp import interpreter_sized

from kernelzoo.elementwise import UnaryOp
from kernelzoo.registry import Call, Case


class Tanh(UnaryOp):
    """tanh(x) elementwise, as torch.tanh."""

    name = "tanh"
    # Untuned on the CPU, torch first: kz_tanhf16 computes both of its formulas and an exp per element, torch's
    # vectorised tanh less (docs/perf/tanh.md, docs/design/elementwise.md). On a GPU the global order stands.
    default_order = {"cpu": ("torch",)}

    def cases(self) -> list[Case]:
        return interpreter_sized(super().cases())

    def reference(self, call: Call) -> torch.Tensor:
        return torch.tanh(call.inputs["x"].double())
