"""torch's own max_pool2d backward (aten.max_pool2d_with_indices_backward): the baseline."""

from __future__ import annotations

import torch

from kernelzoo.registry import FLOATS, Call, Implementation


class MaxPool2dBackwardTorch(Implementation):
    op = "max_pool2d_backward"
    plugin = "torch"
    # float32 only on the CPU: its float16 / bfloat16 kernel adds overlapping windows in the half type
    # (off by up to 40 of the output's roundings at 3×5×33×47 with a 3×3 window at stride 1)
    dtypes = {"cpu": (torch.float32,), "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        g, p = call.inputs["grad_out"], call.params
        x = torch.empty(p["input_shape"], dtype=g.dtype, device=g.device)  # read for its shape only
        return torch.ops.aten.max_pool2d_with_indices_backward(
            g, x, list(p["kernel_size"]), list(p["stride"]), list(p["padding"]), [1, 1], False, call.inputs["indices"])
