"""The one tolerance table: how far an output may be from the float64 reference, per dtype.

Every check in kernelzoo (conformance tests, the tuner's verification of a trial, the demo)
compares with :func:`check_close`, so a looser or tighter rule is changed here only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from kernelzoo.spec import Call


@dataclass(frozen=True)
class Tolerance:
    """|out - ref| <= atol + rtol * |ref|, elementwise; NaN must match NaN, inf must match inf."""

    rtol: float
    atol: float

    def scaled(self, factor: float) -> Tolerance:
        """The same rule with both terms multiplied (ops whose error grows with a reduction length)."""
        return Tolerance(self.rtol * factor, self.atol * factor)


def tf32_products(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether float32 matrix products may run in TF32 on the tensor cores, as torch's matmul does: on CUDA while
    ``torch.backends.cuda.matmul.allow_tf32`` is set (``torch.set_float32_matmul_precision("high")`` sets it)."""
    return dtype == torch.float32 and device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32


def with_tf32(tolerance: Tolerance, k: int) -> Tolerance:
    """``tolerance`` widened for K products of unit-normal float32 inputs cut to TF32's 10 mantissa bits (by
    truncation on the tensor cores): each product is off by up to 2^-9 relative, and K of them with random signs
    leave σ = 2^-10·sqrt(2K/3) absolute; 8·2^-10·sqrt(K) is about ten σ."""
    return Tolerance(max(tolerance.rtol, 2.0**-9), tolerance.atol + 8 * 2.0**-10 * math.sqrt(max(k, 1)))


# rtol: a few units of the dtype's rounding (fp32 eps 1.2e-7, fp16 4.9e-4, bf16 3.9e-3 at
# the output's last rounding); atol covers results that cancel to near zero.
TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(rtol=1.3e-6, atol=1e-5),
    torch.float16: Tolerance(rtol=1e-3, atol=1e-5),
    torch.bfloat16: Tolerance(rtol=1.6e-2, atol=1e-4),
}


def tolerance_for(dtype: torch.dtype) -> Tolerance:
    """The table's entry for ``dtype``."""
    return TOLERANCES[dtype]


@dataclass(frozen=True)
class Mismatch:
    """Why an output was rejected; ``str()`` gives a one-line report."""

    what: str

    def __str__(self) -> str:
        return self.what


def check_close(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance,
                slack: torch.Tensor | None = None) -> Mismatch | None:
    """Compare ``out`` with the float64 ``ref``; None when it passes, else what is wrong. ``slack`` (ref's shape)
    adds a bound per element to the tolerance's, for errors that follow each output's own terms."""
    if out.shape != ref.shape:
        return Mismatch(f"shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
    if out.numel() == 0:
        return None
    # compared where the output is: a 16384x16384 check on the GPU takes milliseconds, on the CPU seconds
    got = out.detach().to(torch.float64)
    want = ref.detach().to(out.device, torch.float64)
    nan_got, nan_want = torch.isnan(got), torch.isnan(want)
    if not torch.equal(nan_got, nan_want):
        n = int((nan_got != nan_want).sum())
        return Mismatch(f"{n} element(s) NaN where the reference is not, or the other way round")
    inf_want = torch.isinf(want)
    if not torch.equal(torch.isinf(got), inf_want) or not torch.equal(got[inf_want], want[inf_want]):
        return Mismatch("infinities differ from the reference")
    finite = ~(nan_want | inf_want)
    err = (got - want).abs()[finite]
    bound = tol.atol + tol.rtol * want.abs()
    if slack is not None:
        bound = bound + slack.to(want.device, torch.float64)
    bound = bound[finite]
    bad = err > bound
    if bool(bad.any()):
        worst = int(torch.argmax(err - bound))
        return Mismatch(
            f"{int(bad.sum())} of {out.numel()} elements off: max abs error {float(err.max()):.3g}, "
            f"worst {float(err[worst]):.3g} > allowed {float(bound[worst]):.3g} "
            f"(rtol {tol.rtol:g}, atol {tol.atol:g}{'' if slack is None else ', with a per-element slack'})"
        )
    return None


def verify_each(call: Call, outputs: Any, reference: Any, names: Sequence[str],
                tolerances: Sequence[Tolerance]) -> Mismatch | None:
    """Op.verify for ops whose outputs reduce over different lengths: each output named in ``names`` checked on
    the call's device against its reference with its own tolerance."""
    outs = outputs if isinstance(outputs, tuple) else (outputs,)
    refs = reference if isinstance(reference, tuple) else (reference,)
    if len(outs) != len(refs):
        return Mismatch(f"{len(outs)} outputs, expected {len(refs)} ({', '.join(names)})")
    for name, out, ref, tol in zip(names, outs, refs, tolerances):
        if out.device != call.device:
            return Mismatch(f"{name} is on {out.device}, expected {call.device}")
        mismatch = check_close(out, ref, tol)
        if mismatch is not None:
            return Mismatch(f"{name}: {mismatch}")
    return None
