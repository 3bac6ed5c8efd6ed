"""matmul(a, b): matrix product of 2-D (M×K @ K×N) or batched 3-D (B×M×K @ B×K×N) tensors.

torch.matmul semantics for ranks 2 and 3: a batch of 1, or a 2-D operand, broadcasts against
the other's batch (the output is 3-D as soon as one operand is). Products are accumulated in
float32 whatever the dtype. Shapes and shape strings read M×N×K, batched ones B×M×N×K.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from kernelzoo_plugins._gemm.spec import reduction_tolerance, shape_text

from kernelzoo import ops
from kernelzoo.autograd import reduced
from kernelzoo.errors import ArgumentError, DeviceError, DTypeError
from kernelzoo.registry import BadCase, Call, Case, Derivative, Op, check_same, check_tensor, randn
from kernelzoo.tolerance import Tolerance, tf32_products, with_tf32


def batched(call: Call) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Views of a as (Ba, M, K) and b as (Bb, K, N), each Ba / Bb the batch or 1, and the batch."""
    a, b = call.inputs["a"], call.inputs["b"]
    a3 = a if a.dim() == 3 else a.unsqueeze(0)
    b3 = b if b.dim() == 3 else b.unsqueeze(0)
    return a3, b3, a3.shape[0] if b3.shape[0] == 1 else b3.shape[0]


def unaligned(t: torch.Tensor) -> bool:
    """Whether a stride of t other than the unit one (of a dim longer than 1) is not a multiple of 16 bytes."""
    per_16_bytes = max(1, 16 // t.element_size())
    return any(stride != 1 and size > 1 and stride % per_16_bytes for stride, size in zip(t.stride(), t.shape))


def output_shape(call: Call) -> tuple[int, ...]:
    a, b = call.inputs["a"], call.inputs["b"]
    mn = (a.shape[-2], b.shape[-1])
    return (batched(call)[2], *mn) if max(a.dim(), b.dim()) == 3 else mn


class Matmul(Op):
    """matmul(a, b): a @ b for 2-D or batched 3-D tensors (torch.matmul semantics), float32 accumulation; float32
    inputs in TF32 on a GPU's tensor cores where ``torch.backends.cuda.matmul.allow_tf32`` allows it, as torch does."""

    name = "matmul"
    # the derivative: grad·bᵀ and aᵀ·grad by the matmul op, each summed back over a batch dim that broadcasting
    # expanded (a 2-D operand of a batched product, or a batch of 1)
    derivative = Derivative(
        inputs=("a", "b"),
        save=lambda call, outputs: {"a": call.inputs["a"], "b": call.inputs["b"]},
        backward=lambda saved, grad: {"a": reduced(ops.matmul(grad, saved["b"].transpose(-1, -2)), saved["a"].shape),
                                      "b": reduced(ops.matmul(saved["a"].transpose(-1, -2), grad), saved["b"].shape)},
    )
    # Untuned, torch first: it won every tuned GPU key of the shipped winners and ran ahead of openmp at every CPU
    # benchmark shape (docs/perf/matmul.md, docs/design/gemm.md)
    default_order = {"cuda": ("torch",), "cpu": ("torch",)}
    # (M, N, K) or (B, M, N, K); every GPU one moves more than the 50 MB L2 holds
    shapes = {
        "cuda": [(4096, 4096, 4096), (8192, 8192, 8192), (16, 1024, 1024, 1024), (4096, 4096, 1024),
                 (8192, 8192, 1024), (4096, 14336, 4096), (16384, 4096, 4096), (32, 512, 512, 4096),
                 (16384, 1024, 4096), (4095, 4097, 4096)],
        "cpu": [(1024, 1024, 1024), (512, 512, 512), (8, 256, 256, 256)],
    }

    def check(self, a: torch.Tensor, b: torch.Tensor) -> Call:
        check_tensor(self.name, "a", a)
        check_tensor(self.name, "b", b)
        for name, t in (("a", a), ("b", b)):
            if t.dim() not in (2, 3):
                raise ArgumentError(f"{self.name}: {name} must be 2-D (M×K / K×N) or 3-D (batched), "
                                    f"got {t.dim()}-D of shape {shape_text(t)}")
        check_same(self.name, a=a, b=b)
        if a.shape[-1] != b.shape[-2]:
            raise ArgumentError(f"{self.name}: a of shape {shape_text(a)} and b of shape {shape_text(b)} "
                                f"do not chain: a's last dim {a.shape[-1]} != b's second-to-last "
                                f"{b.shape[-2]}")
        if a.dim() == b.dim() == 3 and 1 not in (a.shape[0], b.shape[0]) and a.shape[0] != b.shape[0]:
            raise ArgumentError(f"{self.name}: a of shape {shape_text(a)} and b of shape {shape_text(b)} "
                                f"have batches {a.shape[0]} and {b.shape[0]}; expected equal ones or 1")
        return Call(self, {"a": a, "b": b})

    def reference(self, call: Call) -> torch.Tensor:
        return torch.matmul(call.inputs["a"].double(), call.inputs["b"].double())

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None) -> Call:
        *batch, m, n, k = shape
        return self.check(randn((*batch, m, k), device, dtype, generator),
                          randn((*batch, k, n), device, dtype, generator))

    def sizes(self, call: Call) -> dict[str, int]:
        a, b = call.inputs["a"], call.inputs["b"]
        return {"batch": batched(call)[2], "m": a.shape[-2], "n": b.shape[-1], "k": a.shape[-1]}

    def shape_string(self, call: Call) -> str:
        sizes = self.sizes(call)
        batched_call = max(t.dim() for t in call.inputs.values()) == 3
        names = ("batch", "m", "n", "k") if batched_call else ("m", "n", "k")
        return "x".join(str(sizes[name]) for name in names)

    def flags(self, call: Call) -> str:
        """"tf32" when float32 products may run in TF32 (kernelzoo.tolerance.tf32_products), "unaligned" when an
        operand's rows are not 16-byte aligned: cuBLAS's fast kernels and TMA need that alignment, so the fastest
        plugin differs there."""
        a, b = call.inputs["a"], call.inputs["b"]
        parts = ["tf32"] if tf32_products(call.dtype, call.device) else []
        if unaligned(a) or unaligned(b):
            parts.append("unaligned")
        return ",".join(parts)

    def flops(self, call: Call) -> float:
        s = self.sizes(call)
        return 2.0 * s["batch"] * s["m"] * s["n"] * s["k"]

    def bytes(self, call: Call) -> float:
        # a broadcast operand is read once, not once per batch
        a, b = call.inputs["a"], call.inputs["b"]
        s = self.sizes(call)
        return float((a.numel() + b.numel() + s["batch"] * s["m"] * s["n"]) * a.element_size())

    def tolerance(self, call: Call) -> Tolerance:
        # Each output sums K products in float32. The partial sums of unit-normal inputs are
        # ~sqrt(k), and K roundings of them at the unit roundoff u = 2^-24 leave an absolute error
        # of std ~0.6·u·K in sequential order (the worst any plugin uses); measured over 65k outputs
        # the largest is 2.4 to 3.3·u·K for K from 16 to 16384 (~1.3x that expected over 67M outputs).
        # It is absolute, not relative (outputs near 0 carry it too), hence the atol grows with K:
        # 6·u·K. Tensor cores (fp16/bf16) accumulate by truncation, not rounding to nearest: the
        # bias adds up to an error ~u·K·sqrt(K)/8 (simulated: 11·u·K at K = 8192), so half types
        # get u·K·sqrt(K)/4 more. fp16/bf16 outputs also carry their own rounding (4.9e-4 / 3.9e-3
        # relative), which the table's rtol covers. Inputs are unit-normal, as example() draws them.
        # TF32 products (allowed by torch's switch) add their input rounding: kernelzoo.tolerance.with_tf32.
        k = call.inputs["a"].shape[-1]
        tolerance = reduction_tolerance(call.dtype, k)
        return with_tf32(tolerance, k) if tf32_products(call.dtype, call.device) else tolerance

    def cases(self) -> list[Case]:
        return [Case(case_id, make, small) for case_id, make, small in _cases()]

    def bad_cases(self) -> list[BadCase]:
        def pair(a_shape: Sequence[int], b_shape: Sequence[int], **kw: Any) -> Callable[[], tuple]:
            return lambda: ((torch.ones(a_shape, **kw), torch.ones(b_shape)), {})
        return [
            BadCase("inner-mismatch", pair((3, 4), (5, 6)), ArgumentError,
                    "a of shape 3x4 and b of shape 5x6 do not chain"),
            BadCase("batch-mismatch", pair((2, 3, 4), (3, 4, 5)), ArgumentError,
                    "have batches 2 and 3; expected equal ones or 1"),
            BadCase("rank-1", pair((4,), (4, 5)), ArgumentError, "a must be 2-D (M×K / K×N) or 3-D"),
            BadCase("rank-4", pair((3, 4), (1, 2, 4, 5)), ArgumentError, "got 4-D of shape 1x2x4x5"),
            BadCase("dtype-mismatch", pair((3, 4), (4, 5), dtype=torch.float16), DTypeError,
                    "a is torch.float16 but b is torch.float32"),
            BadCase("int-dtype", lambda: ((torch.ones(3, 4, dtype=torch.int64), torch.ones(4, 5)), {}),
                    DTypeError, "a must be float32, float16, bfloat16, got torch.int64"),
            BadCase("not-a-tensor", lambda: (([[1.0]], torch.ones(1, 1)), {}), ArgumentError,
                    "a must be a torch.Tensor, got list"),
            BadCase("device-mismatch", lambda: ((torch.ones(3, 4, device="meta"), torch.ones(4, 5)), {}),
                    DeviceError, "a is on meta but b is on cpu"),
        ]


Maker = Callable[[torch.device, torch.dtype, torch.Generator], tuple[tuple, dict]]


def _pair(a_shape: Sequence[int], b_shape: Sequence[int], *, offset: bool = False) -> Maker:
    def make(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        if offset:  # contiguous views one element into their storage: 2- or 4-byte aligned pointers
            a = randn((math.prod(a_shape) + 1,), device, dtype, g)[1:].view(a_shape)
            b = randn((math.prod(b_shape) + 1,), device, dtype, g)[1:].view(b_shape)
            return (a, b), {}
        return (randn(a_shape, device, dtype, g), randn(b_shape, device, dtype, g)), {}
    return make


def _views(m: int, n: int, k: int, which: str) -> Maker:
    """Non-contiguous operands: "ta" / "tb" transposed (the other memory order), "sliced" (strided
    both ways), "batched" (a batch of transposed matrices)."""
    def make(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        def r(*shape: int) -> torch.Tensor:
            return randn(shape, device, dtype, g)
        if which == "sliced":
            return (r(2 * m, k + 3)[::2, 1:-2], r(k, 3 * n)[:, ::3]), {}
        if which == "batched":
            return (r(2, k, m).transpose(1, 2), r(2, n, k).transpose(1, 2)), {}
        a = r(k, m).t() if "ta" in which else r(m, k)
        b = r(n, k).t() if "tb" in which else r(k, n)
        return (a, b), {}
    return make


def _nan_inf(m: int, n: int, k: int) -> Maker:
    def make(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        a, b = randn((m, k), "cpu", torch.float32, g), randn((k, n), "cpu", torch.float32, g)
        # a few specials: rows of a and columns of b that meet them turn NaN or ±inf, the rest stay finite
        a[3, 5], a[7, 2], a[11, 30] = float("nan"), float("inf"), float("-inf")
        b[4, 9], b[6, 1] = float("inf"), float("nan")
        return (a.to(device, dtype), b.to(device, dtype)), {}
    return make


def _cases() -> list[tuple[str, Maker, bool]]:
    # ids read M x N x K (B x M x N x K when batched); sizes avoid multiples of any block size
    # except the "aligned" ones, whose N and K are multiples of 8 (16-byte rows at 2 bytes) and so
    # take the vectorised paths of the compiled kernels, with tails in M, N and K all the same.
    return [
        ("1x1x1", _pair((1, 1), (1, 1)), True),
        ("17x1023x33", _pair((17, 33), (33, 1023)), True),
        ("1023x17x1", _pair((1023, 1), (1, 17)), True),
        ("33x17x1023", _pair((33, 1023), (1023, 17)), True),
        ("k0-17x33x0", _pair((17, 0), (0, 33)), True),
        ("m0-0x33x17", _pair((0, 17), (17, 33)), True),
        ("n0-17x0x33", _pair((17, 33), (33, 0)), True),
        ("batch0-0x17x33x5", _pair((0, 17, 5), (0, 5, 33)), True),
        ("batched-3x17x33x65", _pair((3, 17, 65), (3, 65, 33)), True),
        ("broadcast-a-3x17x33x65", _pair((1, 17, 65), (3, 65, 33)), True),
        ("broadcast-b-2d-3x17x19x33", _pair((3, 17, 33), (33, 19)), True),
        ("broadcast-a-2d-2x19x17x33", _pair((19, 33), (2, 33, 17)), True),
        ("transposed-a-65x33x47", _views(65, 33, 47, "ta"), True),
        ("transposed-b-65x33x47", _views(65, 33, 47, "tb"), True),
        ("transposed-ab-65x33x47", _views(65, 33, 47, "ta-tb"), True),
        ("sliced-31x29x37", _views(31, 29, 37, "sliced"), True),
        ("transposed-batched-2x33x17x40", _views(33, 17, 40, "batched"), True),
        ("offset-aligned-72x40x24", _pair((72, 24), (24, 40), offset=True), True),
        ("nan-inf-40x33x65", _nan_inf(40, 33, 65), True),
        ("aligned-200x136x264", _pair((200, 264), (264, 136)), True),
        ("aligned-batched-2x136x72x128", _pair((2, 136, 128), (2, 128, 72)), True),
        ("aligned-long-k-64x72x4096", _pair((64, 4096), (4096, 72)), False),
        ("aligned-650x520x304", _pair((650, 304), (304, 520)), False),
        ("odd-257x1025x129", _pair((257, 129), (129, 1025)), False),
    ]
