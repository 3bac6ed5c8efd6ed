"""The activations a GEMM's epilogue applies (linear's ``activation=``) and their derivatives, as tensor formulas:
the float64 reference, the python plugin's float32 spec, and the error bounds the specs verify against.

    relu        max(z, 0), NaN kept (torch.relu)
    gelu        0.5·z·(1 + erf(z/√2))                          (torch.nn.functional.gelu, approximate="none")
    gelu_tanh   0.5·z·(1 + tanh(√(2/π)·(z + 0.044715·z³)))     (approximate="tanh")

Infinities follow these formulas, as the gelu op's do: gelu(+inf) = inf, gelu(-inf) = -inf·0 = NaN. The
derivatives are torch's (threshold_backward for relu: 0 where z ≤ 0, else the gradient; gelu_backward).
Each kernel writes the same formulas in its language: activation.cuh, activation_triton.py, gemm_openmp.h.
"""

from __future__ import annotations

import math

import torch
from kernelzoo_plugins._elementwise.spec import KAPPA, SQRT_2_OVER_PI, SQRT_HALF

from kernelzoo.errors import ArgumentError

ACTIVATIONS = ("relu", "gelu", "gelu_tanh")
# the activations whose derivative needs the pre-activation z; relu's needs only its sign, which its output
# keeps (relu(z) > 0 exactly where z > 0)
NEEDS_PRE = frozenset({"gelu", "gelu_tanh"})
# what the kernels are compiled for: gemm.cuh's KZ_ACTIVATION, gemm_openmp.h's activation argument
CODES = {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3}
# bounds over all z of |act''(z)| (gelu's: 2φ(0) = 0.798; gelu_tanh's is within 1 % of it)
CURVATURE = {"relu": 0.0, "gelu": 0.81, "gelu_tanh": 0.81}
# float32 evaluation of an activation or its derivative (erf, exp, a few products): relative to |z| + 1
FLOAT32_ERROR = 2.0**-20
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def check_activation(op: str, activation: object) -> None:
    if activation is not None and activation not in ACTIVATIONS:
        valid = ", ".join(repr(a) for a in ACTIVATIONS)
        raise ArgumentError(f"{op}: activation must be None, {valid}, got {activation!r}")


def activate(z: torch.Tensor, activation: str | None) -> torch.Tensor:
    """act(z) in z's dtype (float64 for the reference, float32 for the python plugin)."""
    if activation == "relu":
        return torch.relu(z)
    if activation == "gelu":
        return 0.5 * z * (1.0 + torch.erf(z * SQRT_HALF))
    if activation == "gelu_tanh":
        return 0.5 * z * (1.0 + torch.tanh(SQRT_2_OVER_PI * (z + KAPPA * z * z * z)))
    return z


def activation_grad(grad: torch.Tensor, pre: torch.Tensor, activation: str | None) -> torch.Tensor:
    """grad·act'(pre), in the dtype of the operands (both of one dtype). For relu ``pre`` may be z or relu(z)."""
    if activation == "relu":
        return torch.where(pre <= 0, torch.zeros_like(grad), grad)
    if activation == "gelu":
        cdf = 0.5 * (1.0 + torch.erf(pre * SQRT_HALF))
        return grad * (cdf + pre * torch.exp(-0.5 * pre * pre) * INV_SQRT_2PI)
    if activation == "gelu_tanh":
        inner = torch.tanh(SQRT_2_OVER_PI * (pre + KAPPA * pre * pre * pre))
        slope = 0.5 * pre * (1.0 - inner * inner) * SQRT_2_OVER_PI * (1.0 + 3.0 * KAPPA * pre * pre)
        return grad * (0.5 * (1.0 + inner) + slope)
    return grad


def activation_slack(z: torch.Tensor, bound: torch.Tensor, activation: str) -> torch.Tensor:
    """How far act(z') may be from act(z) for |z' - z| ≤ ``bound`` (float64, per element), plus act's own float32
    evaluation error: an output's error passed through the activation."""
    slope = activation_grad(torch.ones_like(z), z, activation).abs() if activation != "relu" else 1.0
    return (slope + CURVATURE[activation] * bound) * bound + FLOAT32_ERROR * (z.abs() + 1.0)
