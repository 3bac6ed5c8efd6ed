"""The spec in tensor ops: for each offset (i, j) of the window, the outputs whose index is the element
at that offset add their gradient there — one strided slice of a padded gradient per offset, whose
elements are distinct, so no two adds collide (and no atomics are needed on the GPU)."""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.conv import batched

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call


class MaxPool2dBackwardPython(PythonImplementation):
    op = "max_pool2d_backward"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        g, indices = batched(call.inputs["grad_out"]).float(), batched(call.inputs["indices"])
        p = call.params
        (kh, kw), (sh, sw), (ph, pw) = p["kernel_size"], p["stride"], p["padding"]
        n, c, oh, ow = g.shape
        h, w = p["input_shape"][-2:]
        grad = torch.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=torch.float32, device=g.device)  # padded
        rows = torch.arange(oh, device=g.device)[:, None] * sh - ph  # (OH, 1): each window's first row
        cols = torch.arange(ow, device=g.device)[None, :] * sw - pw  # (1, OW)
        for i in range(kh):
            for j in range(kw):
                hit = indices == (rows + i) * w + (cols + j)  # (N, C, OH, OW): took the element at (i, j)
                grad[:, :, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw] += torch.where(hit, g, 0.0)
        out = call.empty(p["input_shape"])
        out.copy_(grad[:, :, ph:ph + h, pw:pw + w].reshape(out.shape))
        return out
