"""One single-threaded call of each of torch's MKL VML math functions, made when kernelzoo is imported.

On the CPU, torch computes float32 and float64 exp, log, sqrt, erf, tanh and the like of contiguous tensors with
MKL's vector math library (VML), each intra-op thread on its own chunk of the tensor. oneMKL 2024.2, the release
torch's wheels link, picks a VML function's kernel on that function's first call; when that first call runs on
several threads at once, on Intel CPUs one thread can take the low-accuracy kernel for its whole chunk, whatever
accuracy torch asks for. The next call is right again. Such a result is silently wrong, not a different rounding:
the python attention plugin's first float32 call then returns one batch off by many times float32's rounding
bound, and verify rightly rejects it (docs/design/flash-attention.md). A call on one element runs on the calling
thread alone and settles the choice before anything calls in parallel, as the fix proposed for torch does
inside it; oneMKL 2025 and later do not race.
"""

from __future__ import annotations

import torch

# the unary ops ATen hands to VML for float32 and float64, in this torch or an earlier one (an op a release
# computes in ATen's own vectorised code instead makes no such choice: calling it here costs a microsecond)
VML_OPS = ("acos", "asin", "atan", "cos", "erf", "erfc", "erfinv", "exp", "expm1", "log", "log10", "log1p", "log2",
           "sin", "sqrt", "tan", "tanh", "trunc")


def settle_vml_dispatch() -> bool:
    """Call every op of VML_OPS once, on one element in float32 and float64, on this thread; False where torch
    has no MKL (then nothing is called)."""
    if not torch.backends.mkl.is_available():
        return False
    for dtype in (torch.float32, torch.float64):
        one = torch.full((1,), 0.5, dtype=dtype)  # inside every op's domain (acos, erfinv, log)
        for name in VML_OPS:
            getattr(torch, name)(one)
    return True
