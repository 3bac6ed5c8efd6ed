"""torch.ops.aten.native_layer_norm_backward (what F.layer_norm's autograd runs): the baseline."""

from __future__ import annotations

import torch

from kernelzoo.registry import FLOATS, Call, Implementation


class LayerNormBackwardTorch(Implementation):
    op = "layer_norm_backward"
    plugin = "torch"
    # torch's CPU kernel wants mean and rstd in x's dtype for 16-bit x (its CPU forward keeps them so); the
    # op's are float32
    dtypes = {"cpu": (torch.float32,), "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        i, shape = call.inputs, list(call.params["normalized_shape"])
        x = i["x"]
        stats = (*x.shape[:x.dim() - len(shape)], *[1] * len(shape))  # the (*, 1, ...) torch keeps them in
        weight = i.get("weight")
        # with a weight of ones (no weight given), aten computes grad_weight as for any weight; it wants a bias
        # tensor to give grad_bias (only its shape and dtype are used)
        w = weight if weight is not None else torch.ones(shape, dtype=x.dtype, device=x.device)
        dx, dw, db = torch.ops.aten.native_layer_norm_backward(
            i["grad_y"], x, shape, i["mean"].reshape(stats), i["rstd"].reshape(stats), w, w, [True, True, True])
        if x.numel() == 0:  # aten leaves nothing to sum over: the sums of no rows are 0
            dw, db = torch.zeros(shape, dtype=x.dtype, device=x.device), torch.zeros(shape, dtype=x.dtype,
                                                                                    device=x.device)
        return dx, dw, db
