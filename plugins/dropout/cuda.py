"""dropout in raw CUDA, compiled by NVRTC: the unary ops' vectorised loop with the index hash."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from kernelzoo_plugins._elementwise.cuda import UnaryCuda

from kernelzoo.registry import Call

from . import scale, seed_halves, threshold


class DropoutCuda(UnaryCuda):
    op = "dropout"
    kernel_name: ClassVar[str] = "dropout"

    def arguments(self, call: Call) -> tuple:
        p = call.params["p"]
        seed_lo, seed_hi = seed_halves(call.params["seed"])
        return np.uint32(seed_lo), np.uint32(seed_hi), np.uint32(threshold(p)), scale(p)
