"""The baseline: the mask's hash in torch int64 tensor ops (the spec's keep_mask), then torch's multiplies.

torch's own F.dropout draws its mask from its Philox generator, which cannot give this op's mask (and the
conformance suite compares masks exactly); this is what a torch user writes for a mask that is a function
of (seed, index). F.dropout's fused kernel is the speed to compare with besides.
"""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import TorchImplementation
from kernelzoo.registry import Call

from . import keep_mask, scale


class DropoutTorch(TorchImplementation):
    op = "dropout"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x, p = call.inputs["x"], call.params["p"]
        keep = keep_mask(x.shape, p, call.params["seed"], x.device)
        return (x * keep).mul_(scale(p))  # x · 0 or x · 1 exactly, then one rounding of · 1/(1 − p)
