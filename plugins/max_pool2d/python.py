"""The spec in tensor ops: every window by unfold (padding −inf, and a mask of in-image positions), its max,
and the position torch's scan takes: the last NaN if any, else the first element equal to the max."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from kernelzoo_plugins._gemm.conv import batched

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call

from . import index_output, pooled_shape


class MaxPool2dPython(PythonImplementation):
    op = "max_pool2d"

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor]:
        x = call.inputs["x"]
        shape = pooled_shape(x.shape, call.params)
        out, indices = call.empty(shape), index_output(call, shape)
        if out.numel() == 0:
            return out, indices
        (kh, kw), (sh, sw), (ph, pw) = call.params["kernel_size"], call.params["stride"], call.params["padding"]
        x4 = batched(x).float()  # float32 holds every float16 / bfloat16 value exactly
        n, c, h, w = x4.shape
        oh, ow = out.shape[-2:]
        padded = F.pad(x4, (pw, pw, ph, ph), value=float("-inf"))
        windows = F.unfold(padded, (kh, kw), stride=(sh, sw)).view(n, c, kh * kw, oh * ow)
        inside = F.unfold(F.pad(torch.ones(1, 1, h, w, device=x.device), (pw, pw, ph, ph)), (kh, kw),
                          stride=(sh, sw)).view(1, 1, kh * kw, oh * ow) > 0
        best = windows.amax(2, keepdim=True)  # NaN if the window holds one
        nan = windows.isnan()
        order = torch.arange(1, kh * kw + 1, device=x.device).view(1, 1, -1, 1)
        last_nan = (nan * order).argmax(2)  # the largest position holding a NaN
        first_best = (inside & (windows == best)).int().argmax(2)  # argmax gives the first of equal maxima
        at = torch.where(nan.any(2), last_nan, first_best)  # (N, C, OH·OW): position within the window
        rows = torch.arange(oh, device=x.device).repeat_interleave(ow) * sh - ph + at // kw
        cols = torch.arange(ow, device=x.device).repeat(oh) * sw - pw + at % kw
        out.copy_(best.view(out.shape))
        indices.copy_((rows * w + cols).view(indices.shape))
        return out, indices
