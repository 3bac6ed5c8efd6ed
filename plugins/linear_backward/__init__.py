"""linear_backward(grad_out, x, weight, bias=False, activation=None, pre=None) -> (grad_x, grad_weight[,
grad_bias]): the gradients of the op linear for the output gradient grad_out (see linear's spec for the semantics).

    dz = grad_out·act'(pre)           (grad_out itself without an activation)
    grad_x = dz·weight                (x's shape)
    grad_weight = dzᵀ·x               (N×K: products summed over every leading dim of x)
    grad_bias = Σ dz                  (N: summed over the leading dims; only when bias is True)

grad_out has x's leading dims and out_features last. With an activation ("relu", "gelu", "gelu_tanh"), pre is
the forward's pre-activation z = x·weightᵀ + bias, of grad_out's shape (for relu its output relu(z) serves too:
the derivative reads only the sign). dz is one elementwise pass, rounded to the dtype as the products read it
(the tensor cores take it so), before the products; the activation is part of the tuning key (flags).

Every reduction accumulates in float32, in a fixed order (no atomics): the same inputs give the same bits.
Shapes (M, K, N) as linear's; the flag "bias" marks calls that also return grad_bias (``example`` takes bias=False).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from kernelzoo_plugins._gemm.activation import FLOAT32_ERROR, activation_grad, check_activation
from kernelzoo_plugins._gemm.spec import (
    check_linear,
    linear_cases,
    linear_inputs,
    reduction_tolerance,
    rows,
    shape_text,
)

from kernelzoo.errors import ArgumentError, DeviceError, DTypeError
from kernelzoo.registry import BadCase, Call, Case, Op, check_same, check_tensor, randn
from kernelzoo.tolerance import Mismatch, Tolerance, check_close, tf32_products, verify_each, with_tf32

GRADIENT_NAMES = ("grad_x", "grad_weight", "grad_bias")


def gradient_shapes(call: Call) -> list[tuple[int, ...]]:
    """Shapes of the outputs: grad_x, grad_weight and, with bias, grad_bias."""
    x, w = call.inputs["x"], call.inputs["weight"]
    shapes = [tuple(x.shape), tuple(w.shape)]
    return [*shapes, (w.shape[0],)] if call.params["bias"] else shapes


class LinearBackward(Op):
    """linear_backward(grad_out, x, weight, bias=False, activation=None, pre=None) -> (grad_x, grad_weight[,
    grad_bias])."""

    name = "linear_backward"
    outputs = 3  # grad_x, grad_weight and, with bias, grad_bias
    # Untuned, torch first: ahead of the Triton plugin and of openmp at every benchmark shape
    # (docs/perf/linear_backward.md, docs/design/gemm.md)
    default_order = {"cuda": ("torch",), "cpu": ("torch",)}
    # tuned and benchmarked without an activation and with gelu's derivative (the others differ only in dz's formula)
    variants = ({}, {"activation": "gelu"})
    shapes = {
        "cuda": [(8192, 4096, 4096), (8192, 4096, 14336), (8192, 14336, 4096), (16384, 1024, 4096),
                 (4096, 4096, 1024), (32768, 768, 3072)],
        "cpu": [(1024, 1024, 1024), (4096, 512, 512), (256, 2048, 2048)],
    }

    def check(self, grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: bool = False,
              activation: str | None = None, pre: torch.Tensor | None = None) -> Call:
        check_linear(self.name, x, weight)
        check_tensor(self.name, "grad_out", grad_out)
        check_same(self.name, grad_out=grad_out, x=x)
        expected = (*x.shape[:-1], weight.shape[0])
        if tuple(grad_out.shape) != expected:
            raise ArgumentError(f"{self.name}: grad_out of shape {shape_text(grad_out)} must be x's leading dims "
                                f"and out_features: {'x'.join(map(str, expected))}")
        if not isinstance(bias, bool):
            raise ArgumentError(f"{self.name}: bias must be a bool (whether the forward had one), "
                                f"got {type(bias).__name__}")
        check_activation(self.name, activation)
        inputs = {"grad_out": grad_out, "x": x, "weight": weight}
        if activation is None:
            if pre is not None:
                raise ArgumentError(f"{self.name}: pre (the pre-activation) is only taken with an activation, "
                                    "got activation=None")
            return Call(self, inputs, {"bias": bias})
        if pre is None:
            raise ArgumentError(f"{self.name}: activation {activation!r} needs pre, the forward's pre-activation "
                                f"x·weightᵀ + bias of shape {shape_text(grad_out)}, got None")
        check_tensor(self.name, "pre", pre)
        check_same(self.name, grad_out=grad_out, pre=pre)
        if pre.shape != grad_out.shape:
            raise ArgumentError(f"{self.name}: pre of shape {shape_text(pre)} must have grad_out's shape "
                                f"{shape_text(grad_out)}")
        return Call(self, {**inputs, "pre": pre}, {"bias": bias, "activation": activation})

    def reference(self, call: Call) -> tuple[torch.Tensor, ...]:
        g, x, w = (call.inputs[k].double() for k in ("grad_out", "x", "weight"))
        g2 = rows(self._dz(call, g))
        grads = ((g2 @ w).view(x.shape), g2.t() @ rows(x))
        return (*grads, g2.sum(0)) if call.params["bias"] else grads

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, bias: bool = False, activation: str | None = None) -> Call:
        m, k, n = shape
        pre = randn((m, n), device, dtype, generator) if activation is not None else None
        return self.check(randn((m, n), device, dtype, generator), randn((m, k), device, dtype, generator),
                          randn((n, k), device, dtype, generator), bias=bias, activation=activation, pre=pre)

    @staticmethod
    def _dz(call: Call, g: torch.Tensor) -> torch.Tensor:
        """g·act'(pre) in g's dtype (g itself without an activation)."""
        activation = call.params.get("activation")
        if activation is None:
            return g
        return activation_grad(g, call.inputs["pre"].to(g.dtype), activation)

    def sizes(self, call: Call) -> dict[str, int]:
        x, w = call.inputs["x"], call.inputs["weight"]
        return {"m": math.prod(x.shape[:-1]), "k": w.shape[1], "n": w.shape[0]}

    def flags(self, call: Call) -> str:
        parts = ["bias"] if call.params["bias"] else []
        parts += [call.params["activation"]] if call.params.get("activation") else []
        return ",".join([*parts, "tf32"] if tf32_products(call.dtype, call.device) else parts)

    def flops(self, call: Call) -> float:
        s = self.sizes(call)
        return 4.0 * s["m"] * s["n"] * s["k"] + (s["m"] * s["n"] if call.params["bias"] else 0)

    def bytes(self, call: Call) -> float:
        s = self.sizes(call)  # grad_out, x, weight read; grad_x, grad_weight (and grad_bias) written
        n = s["m"] * s["n"] + 2 * s["m"] * s["k"] + 2 * s["n"] * s["k"] + (s["n"] if call.params["bias"] else 0)
        n += s["m"] * s["n"] if "pre" in call.inputs else 0
        return float(n * call.inputs["x"].element_size())

    def tolerance(self, call: Call) -> Tolerance:
        return self._tolerance(call, max(self.sizes(call).values()))  # the loosest; verify is per output

    @staticmethod
    def _tolerance(call: Call, k: int) -> Tolerance:
        tolerance = reduction_tolerance(call.dtype, k)
        return with_tf32(tolerance, k) if tf32_products(call.dtype, call.device) else tolerance

    def verify(self, call: Call, outputs: Any, reference: Any) -> Mismatch | None:
        s = self.sizes(call)  # grad_x sums over N; grad_weight and grad_bias over the M tokens
        tolerances = [self._tolerance(call, n) for n in (s["n"], s["m"], s["m"])]
        if call.params.get("activation") is None:
            return verify_each(call, outputs, reference, GRADIENT_NAMES, tolerances)
        outs = outputs if isinstance(outputs, tuple) else (outputs,)
        refs = reference if isinstance(reference, tuple) else (reference,)
        if len(outs) != len(refs):
            return Mismatch(f"{len(outs)} outputs, expected {len(refs)} ({', '.join(GRADIENT_NAMES)})")
        for name, out, ref, tol, slack in zip(GRADIENT_NAMES, outs, refs, tolerances, self._dz_slack(call)):
            if out.device != call.device:
                return Mismatch(f"{name} is on {out.device}, expected {call.device}")
            mismatch = check_close(out, ref, tol, slack.to(out.device))
            if mismatch is not None:
                return Mismatch(f"{name}: {mismatch}")
        return None

    def _dz_slack(self, call: Call) -> tuple[torch.Tensor, ...]:
        """Per gradient, what dz's rounding to the dtype (relative, the dtype's unit roundoff) and its float32
        evaluation (relative to grad_out) add to each output: the sums of those bounds over its terms."""
        g, x, w = (call.inputs[k].double() for k in ("grad_out", "x", "weight"))
        unit = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}[call.dtype]
        bound = rows(unit * self._dz(call, g).abs() + FLOAT32_ERROR * g.abs())  # (M, N)
        return (bound @ w.abs()).view(x.shape), bound.t() @ rows(x).abs(), bound.sum(0)

    def cases(self) -> list[Case]:
        return [Case(case_id, make, small) for case_id, make, small in _cases()]

    def bad_cases(self) -> list[BadCase]:
        def args(g: Sequence[int], x: Sequence[int], w: Sequence[int], **kw: Any) -> Callable:
            return lambda: ((torch.ones(g), torch.ones(x), torch.ones(w)), kw)
        return [
            BadCase("grad-out-shape", args((3, 4), (3, 6), (5, 6)), ArgumentError,
                    "grad_out of shape 3x4 must be x's leading dims and out_features: 3x5"),
            BadCase("grad-out-rank", args((5,), (3, 6), (5, 6)), ArgumentError, "grad_out of shape 5 must be"),
            BadCase("in-features-mismatch", args((3, 5), (3, 4), (5, 6)), ArgumentError, "do not chain"),
            BadCase("weight-1d", args((3, 5), (3, 4), (4,)), ArgumentError, "weight must be 2-D"),
            BadCase("bias-not-bool", args((3, 5), (3, 4), (5, 4), bias=None), ArgumentError,
                    "bias must be a bool (whether the forward had one), got NoneType"),
            BadCase("dtype-mismatch", lambda: ((torch.ones(3, 5, dtype=torch.float16), torch.ones(3, 4),
                                                torch.ones(5, 4)), {}), DTypeError,
                    "grad_out is torch.float16 but x is torch.float32"),
            BadCase("device-mismatch", lambda: ((torch.ones(3, 5, device="meta"), torch.ones(3, 4),
                                                 torch.ones(5, 4)), {}), DeviceError,
                    "grad_out is on meta but x is on cpu"),
            BadCase("not-a-tensor", lambda: (([[1.0]], torch.ones(1, 1), torch.ones(1, 1)), {}), ArgumentError,
                    "grad_out must be a torch.Tensor, got list"),
            BadCase("activation-name", args((3, 5), (3, 4), (5, 4), activation="tanh", pre=torch.ones(3, 5)),
                    ArgumentError, "activation must be None, 'relu', 'gelu', 'gelu_tanh', got 'tanh'"),
            BadCase("activation-without-pre", args((3, 5), (3, 4), (5, 4), activation="gelu"), ArgumentError,
                    "activation 'gelu' needs pre, the forward's pre-activation x·weightᵀ + bias of shape 3x5, "
                    "got None"),
            BadCase("pre-without-activation", args((3, 5), (3, 4), (5, 4), pre=torch.ones(3, 5)), ArgumentError,
                    "pre (the pre-activation) is only taken with an activation"),
            BadCase("pre-shape", args((3, 5), (3, 4), (5, 4), activation="relu", pre=torch.ones(5, 3)),
                    ArgumentError, "pre of shape 5x3 must have grad_out's shape 3x5"),
            BadCase("pre-dtype", args((3, 5), (3, 4), (5, 4), activation="relu",
                                      pre=torch.ones(3, 5, dtype=torch.float16)),
                    DTypeError, "grad_out is torch.float32 but pre is torch.float16"),
        ]


Maker = Callable[[torch.device, torch.dtype, torch.Generator], tuple[tuple, dict]]


def _case(m: int, k: int, n: int, layout: str = "plain", bias: bool = True, grad: str = "plain",
          activation: str | None = None, pre: str = "plain") -> Maker:
    """x and weight as linear's cases make them; grad_out plain, "transposed" or "expanded" (stride 0,
    as autograd hands down the gradient of a sum). With an activation, pre (grad_out's shape) is "plain",
    "output" (relu(z): zeros where z < 0, what relu's forward saves), "nan-inf" (a NaN, +inf and -inf) or
    "transposed"."""
    def make(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        x, w = linear_inputs(m, k, n, layout, device, dtype, g)
        shape = (*x.shape[:-1], n)
        if grad == "transposed":
            dy = randn(shape[::-1], device, dtype, g).permute(*reversed(range(len(shape))))
        elif grad == "expanded":
            dy = randn((n,), device, dtype, g).expand(shape)
        else:
            dy = randn(shape, device, dtype, g)
        if activation is None:
            return (dy, x, w), {"bias": bias}
        z = randn(shape[::-1], device, dtype, g).permute(*reversed(range(len(shape)))) if pre == "transposed" \
            else randn(shape, device, dtype, g)
        if pre == "output":
            z = torch.relu(z)
        elif pre == "nan-inf":
            z[3, 5], z[7, 2], z[11, 30] = float("nan"), float("inf"), float("-inf")
        return (dy, x, w), {"bias": bias, "activation": activation, "pre": z}
    return make


def _cases() -> list[tuple[str, Maker, bool]]:
    # ids read M x K x N as linear's
    return [
        *linear_cases(_case),
        ("transposed-grad-33x47x65", _case(33, 47, 65, grad="transposed"), True),
        ("expanded-grad-33x17x19", _case(33, 17, 19, grad="expanded"), True),
        ("sliced-31x37x29", _case(31, 37, 29, "sliced"), True),
        ("offset-aligned-24x40x72", _case(24, 40, 72, "offset"), True),
        ("aligned-72x64x136", _case(72, 64, 136), True),
        ("aligned-nobias-40x128x72", _case(40, 128, 72, bias=False), True),
        ("aligned-264x1024x200", _case(264, 1024, 200), False),
        ("odd-257x129x1025", _case(257, 129, 1025), False),
        ("long-m-4100x40x24", _case(4100, 40, 24), False),
        # each activation, with and without a bias, at odd sizes, on the infinities and NaN
        *((f"{a}-17x33x65", _case(17, 33, 65, activation=a), True) for a in ("relu", "gelu", "gelu_tanh")),
        *((f"{a}-nobias-33x47x19", _case(33, 47, 19, bias=False, activation=a), True)
          for a in ("relu", "gelu", "gelu_tanh")),
        *((f"{a}-nan-inf-40x33x65", _case(40, 33, 65, activation=a, pre="nan-inf"), True)
          for a in ("relu", "gelu", "gelu_tanh")),
        ("relu-output-pre-33x17x19", _case(33, 17, 19, activation="relu", pre="output"), True),
        ("gelu-transposed-33x47x65", _case(33, 47, 65, grad="transposed", activation="gelu", pre="transposed"),
         True),
        ("gelu-3d-x-2x9x33x17", _case(18, 33, 17, "3d", activation="gelu"), True),
        ("gelu-aligned-72x64x136", _case(72, 64, 136, activation="gelu"), True),
        ("gelu_tanh-odd-257x129x1025", _case(257, 129, 1025, activation="gelu_tanh"), False),
    ]
