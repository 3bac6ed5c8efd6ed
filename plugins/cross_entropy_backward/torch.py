"""What torch's autograd runs for F.cross_entropy's backward: the log-probabilities' gradient (the NLL's
one-hot and the smoothing term, scaled), then aten._log_softmax_backward_data on log_softmax = x − lse
(which torch's forward would have kept; rebuilt here from lse). The baseline: several passes.

In float32 whatever the logits' dtype: log_softmax kept in float16 (as torch's autograd keeps it) is off
by up to 0.004 at −10, which exp carries into the gradient as a 0.4% error, past the table's 1e-3."""

from __future__ import annotations

import torch
from kernelzoo_plugins._rows.cross_entropy import from_rows

from kernelzoo.backends.tensor_ops import TorchImplementation
from kernelzoo.registry import Call

from . import row_scales, rows_of


class CrossEntropyBackwardTorch(TorchImplementation):
    op = "cross_entropy_backward"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x2d, target, lse = rows_of(call)
        p = call.params
        rows, classes = x2d.shape
        if rows == 0:
            return from_rows(torch.empty_like(x2d, memory_format=torch.contiguous_format), call.inputs["logits"])
        scale = row_scales(call.inputs["grad_loss"], target, p["reduction"], p["ignore_index"], torch.float32)
        scale = scale[:, None]
        eps = p["label_smoothing"]
        grad_logp = torch.zeros((rows, classes), dtype=torch.float32, device=x2d.device)
        if eps:
            grad_logp.copy_((-eps / classes) * scale.expand(rows, classes))
        picked = torch.where(target == p["ignore_index"], 0, target)[:, None]
        grad_logp.scatter_add_(1, picked, -(1 - eps) * scale)
        logp = x2d.float() - lse[:, None]
        grad = torch.ops.aten._log_softmax_backward_data(grad_logp, logp, 1, torch.float32)
        grad = torch.where(scale == 0, 0.0, grad)  # ignored rows: exact zeros, as the op defines them
        return from_rows(grad.to(x2d.dtype), call.inputs["logits"])
