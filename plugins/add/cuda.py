"""add in raw CUDA, compiled by NVRTC: 16-byte accesses for dense same-shape inputs, else a
strided kernel over the merged layout (broadcast dimensions at stride 0, no expanded copies)."""

from __future__ import annotations

from kernelzoo_plugins._elementwise.cuda import BinaryCuda

from kernelzoo.registry import Call


class AddCuda(BinaryCuda):
    op = "add"

    def kernel_base(self, call: Call) -> str:
        return "add"

    def scalars(self, call: Call) -> tuple:
        return (call.params["alpha"],)
