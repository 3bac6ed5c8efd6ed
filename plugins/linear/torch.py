"""torch.nn.functional.linear (cuBLAS on the GPU, MKL/oneDNN on the CPU), then torch's activation: the baseline.

torch's fused path, torch._addmm_activation (cuBLASLt's RELU and GELU epilogues), is not taken: its GELU is the
tanh form computed by cuBLASLt, which is not known to match torch's gelu(approximate="tanh") to float32's
evaluation error, and its RELU is not known to keep NaN as torch.relu does (its CPU version is not the tanh form
at all).
"""

from __future__ import annotations

import torch

from kernelzoo.registry import FLOATS, Call, Implementation


def _activate_(z: torch.Tensor, activation: str) -> torch.Tensor:
    """torch's activation of ``z``, in place where torch has it."""
    if activation == "relu":
        return z.relu_()
    y = torch.nn.functional.gelu(z, approximate="tanh" if activation == "gelu_tanh" else "none")
    if z.device.type == "cpu" and activation == "gelu":
        # torch's vectorised CPU erf-gelu gives NaN for +inf in float32 (pytorch/pytorch#185770): put the inf back
        y = torch.where(z == float("inf"), z, y)
    return y


class LinearTorch(Implementation):
    op = "linear"
    plugin = "torch"
    # float32 only on the CPU: torch 2.11's bf16 CPU matmul gives NaN where the reference has ±inf (as matmul's)
    dtypes = {"cpu": (torch.float32,), "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        i = call.inputs
        x, w, bias = i["x"], i["weight"], i.get("bias")
        activation = call.params.get("activation")
        if activation is None:
            return torch.nn.functional.linear(x, w, bias)
        if call.params.get("pre"):
            z = torch.nn.functional.linear(x, w, bias)
            return torch.relu(z) if activation == "relu" else _activate_(z, activation), z
        return _activate_(torch.nn.functional.linear(x, w, bias), activation)
