"""torch.nn.functional.cross_entropy: the baseline; lse by torch.logsumexp (the backward op needs it, and
F.cross_entropy does not return it: one more read of the logits, the price of getting it from torch)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernelzoo.registry import FLOATS, Call, Implementation

from . import as_rows


class CrossEntropyTorch(Implementation):
    op = "cross_entropy"
    plugin = "torch"
    dtypes = {"cpu": (torch.float32,), "cuda": FLOATS}  # float32 lse: see the python plugin

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor]:
        logits, target, p = call.inputs["logits"], call.inputs["target"], call.params
        # label smoothing sums log-probabilities over the row: torch does it in the half type on the GPU, off the
        # tolerance by far at 50257 classes, so half inputs are smoothed in float32
        wide = logits.float() if p["label_smoothing"] and logits.dtype != torch.float32 else logits
        loss = F.cross_entropy(wide, target, reduction=p["reduction"], ignore_index=p["ignore_index"],
                               label_smoothing=p["label_smoothing"]).to(logits.dtype)
        x2d = as_rows(logits)
        lse = torch.logsumexp(x2d.float(), 1) if x2d.shape[0] else x2d.new_zeros(0, dtype=torch.float32)
        # ±inf only where the row's max is ±inf (else lse is within log C of a finite max): NaN there, as the
        # op's lse (and torch's own log_softmax) has it
        lse = torch.where(lse.isinf(), torch.nan, lse)
        return loss, lse.reshape(target.shape)
