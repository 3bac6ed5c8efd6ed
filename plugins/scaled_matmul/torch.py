"""torch._scaled_mm (cuBLASLt or CUTLASS on the GPU, its CPU kernel on the CPU): the baseline.

On the GPU it takes a row-major a and a column-major b, N and K multiples of 16, no bias with a float32 output,
and needs compute capability 8.9 or newer; a call outside that is refused with the reason, and one that
torch._scaled_mm itself rejects raises UnsupportedError with torch's message, so dispatch runs another plugin.
"""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import TorchImplementation
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import FP8, Call

from . import capability, cpu_takes_row_scales, out_dtype, rowwise


class ScaledMatmulTorch(TorchImplementation):
    op = "scaled_matmul"
    dtypes = {"cpu": FP8, "cuda": FP8}  # a's dtype; the output's is out_dtype

    def supports(self, call: Call) -> str | None:
        why = super().supports(call)
        if why is None and call.device.type == "cpu" and rowwise(call) and not cpu_takes_row_scales():
            return "this torch's CPU torch._scaled_mm takes per-tensor scales only"
        if why is not None or call.device.type != "cuda":
            return why
        a, b = call.inputs["a"], call.inputs["b"]
        k, n = b.shape
        if capability(call.device.index) < (8, 9):
            return "torch._scaled_mm needs a GPU of compute capability 8.9 or newer"
        if k % 16 or n % 16:
            return f"torch._scaled_mm takes N and K that are multiples of 16, not N={n}, K={k}"
        if a.stride(1) != 1 or a.stride(0) < max(1, k) or b.stride(0) != 1 or b.stride(1) < max(1, k):
            return (f"torch._scaled_mm takes a row-major a and a column-major b, not strides {a.stride()} and "
                    f"{b.stride()}")
        if "bias" in call.inputs and out_dtype(call) == torch.float32:
            return "torch._scaled_mm takes no bias with a float32 output"
        if k == 0 and "bias" in call.inputs:
            return "torch._scaled_mm returns zeros, without the bias, when K is 0"
        return None

    @torch.no_grad()  # forward only: the output requires no grad, as the compiled plugins' do
    def run(self, call: Call, config: dict) -> torch.Tensor:
        scale_a, scale_b = call.inputs["scale_a"], call.inputs["scale_b"]
        if rowwise(call):  # it reads row-wise scales as dense vectors
            scale_a, scale_b = scale_a.contiguous(), scale_b.contiguous()
        try:
            return torch._scaled_mm(call.inputs["a"], call.inputs["b"], scale_a, scale_b,
                                    bias=call.inputs.get("bias"), out_dtype=out_dtype(call))
        except (RuntimeError, ValueError, NotImplementedError) as exc:  # a case its checks refuse
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UnsupportedError(f"scaled_matmul/torch: torch._scaled_mm cannot run {call.describe()}: "
                                   f"{first}") from exc
