"""What the elementwise ops' specs share beyond :mod:`kernelzoo.elementwise` (whose ``overflow_to_inf`` serves
the references of the ops whose results can leave their dtype's range): :func:`interpreter_sized` for the
conformance cases of the ops whose Triton kernels are slow in Triton's interpreter (exp, log, tanh, pow, dropout),
and gelu's constants, which its forward and backward formulas both use.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

from kernelzoo.registry import Case

APPROXIMATIONS = ("none", "tanh")  # gelu's approximate= values
SQRT_HALF = math.sqrt(0.5)  # erf's argument is x/√2
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
KAPPA = 0.044715  # the cubic term of gelu's tanh approximation


def interpreter_sized(cases: Iterable[Case]) -> list[Case]:
    """``cases`` with 257x4099 (10⁶ elements) kept out of Triton's interpreter, where these ops' kernels
    take 3 to 25 s on it (2 cores); 1023x17 (34 programs of 512 elements) runs the same code paths."""
    return [replace(case, small=False) if case.id.startswith("257x4099") else case for case in cases]
