"""linear(x, weight, bias=None, activation=None): y = act(x·weightᵀ + bias) over the last dim of x
(torch.nn.functional.linear, then torch's relu, gelu or gelu(approximate="tanh") for activation "relu", "gelu",
"gelu_tanh"; None: no activation).

x (..., K) with any leading dims (a K-vector too: y is then an N-vector), weight (N, K) (2-D: torch's
1-D weight is not taken), bias (N,) or None; y (..., N). Products accumulate in float32; the bias is added to
the float32 sum and the activation applied to it before the one rounding to the output dtype (all fused into
the epilogue). The activation is part of the tuning key (flags).
``kernelzoo.ops.linear`` records a backward through the op linear_backward when an input requires grad. The
derivatives of gelu and gelu_tanh need the pre-activation z = x·weightᵀ + bias: a forward that records a
backward asks the kernels for it (the call's parameter ``pre``; they then return (y, z), y = act(z) of the
rounded z), and the backward passes it to linear_backward. relu's derivative reads its sign off y.

Shapes for tuning and benchmarks: (M, K, N) = tokens × in_features × out_features with a bias:
(8192, 4096, 4096) is "8192x4096x4096" (x 8192×4096, weight 4096×4096); ``example`` takes bias=False.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from kernelzoo_plugins._gemm.activation import NEEDS_PRE, activate, activation_slack, check_activation
from kernelzoo_plugins._gemm.spec import (
    Maker,
    check_linear,
    linear_cases,
    linear_inputs,
    reduction_tolerance,
    shape_text,
)
from kernelzoo_plugins._gemm.spec import rows as rows  # re-exported: the plugins' 2-d view of x

from kernelzoo import ops
from kernelzoo.errors import ArgumentError, DeviceError, DTypeError
from kernelzoo.registry import BadCase, Call, Case, Derivative, Op, check_same, check_tensor, randn
from kernelzoo.tolerance import Mismatch, Tolerance, check_close, tf32_products, with_tf32


def _save(call: Call, outputs: tuple[torch.Tensor, ...]) -> dict[str, Any]:
    """What the backward needs: x, weight, whether there was a bias, the activation and what its derivative reads
    (relu: y; gelu: z, from the forward where it made it, else the bias to compute it again)."""
    i = call.inputs
    activation = call.params.get("activation")
    saved = {"x": i["x"], "weight": i["weight"], "bias": "bias" in i, "activation": activation}
    if activation == "relu":
        saved["pre"] = outputs[0]
    elif activation in NEEDS_PRE:
        if len(outputs) > 1:
            saved["pre"] = outputs[1]
        else:
            saved["bias_tensor"] = i.get("bias")
    return saved


def _backward(saved: dict[str, Any], grad: torch.Tensor) -> dict[str, torch.Tensor]:
    x, w, activation = saved["x"], saved["weight"], saved["activation"]
    if activation is None:
        grads = ops.linear_backward(grad, x, w, bias=saved["bias"])
    else:
        pre = saved.get("pre")
        if pre is None:  # the custom op's forward (torch.compile) cannot know a backward follows: one GEMM more
            pre = ops.linear(x, w, saved["bias_tensor"])
        grads = ops.linear_backward(grad, x, w, bias=saved["bias"], activation=activation, pre=pre)
    return dict(zip(("x", "weight", "bias"), grads))


def _recording(call: Call) -> Call:
    """A forward that records a backward of gelu or gelu_tanh asks its kernels for z too."""
    if call.params.get("activation") in NEEDS_PRE:
        return Call(call.op, call.inputs, {**call.params, "pre": True})
    return call


class Linear(Op):
    """linear(x, weight, bias=None, activation=None): act(x·weightᵀ + bias) over x's last dim, activation None,
    "relu", "gelu" or "gelu_tanh" (gelu with approximate="tanh") fused into the epilogue; float32 accumulation;
    float32 inputs in TF32 on a GPU's tensor cores where ``torch.backends.cuda.matmul.allow_tf32`` allows it, as
    torch does."""

    name = "linear"
    # the derivative: linear_backward gives grad_x, grad_weight and, with a bias, grad_bias (through the
    # activation's derivative at the saved pre-activation)
    derivative = Derivative(inputs=("x", "weight", "bias"), save=_save, backward=_backward, recording=_recording)
    # Untuned, torch (cuBLAS, oneDNN/MKL) first: it ran ahead of the Triton plugin and of openmp at every benchmark
    # shape (docs/perf/linear.md, docs/design/gemm.md)
    default_order = {"cuda": ("torch",), "cpu": ("torch",)}
    # tuned and benchmarked without an activation and with gelu (the others differ only in the epilogue's formula)
    variants = ({}, {"activation": "gelu"})
    # (M, K, N): tokens × in_features × out_features; every GPU one moves more than the 50 MB L2
    shapes = {
        "cuda": [(8192, 4096, 4096), (8192, 4096, 14336), (8192, 14336, 4096), (16384, 1024, 4096),
                 (4096, 4096, 1024), (32768, 768, 3072)],
        "cpu": [(1024, 1024, 1024), (4096, 512, 512), (256, 2048, 2048)],
    }

    def check(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
              activation: str | None = None) -> Call:
        check_linear(self.name, x, weight)
        check_activation(self.name, activation)
        inputs = {"x": x, "weight": weight}
        if bias is not None:
            check_tensor(self.name, "bias", bias)
            check_same(self.name, x=x, bias=bias)
            if tuple(bias.shape) != (weight.shape[0],):
                raise ArgumentError(f"{self.name}: bias must have shape ({weight.shape[0]},) (out_features), "
                                    f"got {shape_text(bias)}")
            inputs["bias"] = bias
        # no parameters without an activation: those calls keep their signatures and keys
        return Call(self, inputs, {"activation": activation} if activation is not None else {})

    def reference(self, call: Call) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        z = self._pre_reference(call)
        y = activate(z, call.params.get("activation"))
        return (y, z) if call.params.get("pre") else y

    @staticmethod
    def _pre_reference(call: Call) -> torch.Tensor:
        i = call.inputs
        bias = i.get("bias")
        return torch.nn.functional.linear(i["x"].double(), i["weight"].double(),
                                          None if bias is None else bias.double())

    def result(self, call: Call, outputs: Any) -> torch.Tensor:
        return outputs[0] if isinstance(outputs, tuple) else outputs

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, bias: bool = True, activation: str | None = None,
                pre: bool = False) -> Call:
        m, k, n = shape
        call = self.check(randn((m, k), device, dtype, generator), randn((n, k), device, dtype, generator),
                          randn((n,), device, dtype, generator) if bias else None, activation)
        return _recording(call) if pre else call  # a training forward's call, as a missed key recorded it

    def sizes(self, call: Call) -> dict[str, int]:
        x, w = call.inputs["x"], call.inputs["weight"]
        return {"m": math.prod(x.shape[:-1]), "k": w.shape[1], "n": w.shape[0]}

    def flops(self, call: Call) -> float:
        s = self.sizes(call)
        return 2.0 * s["m"] * s["n"] * s["k"] + (s["m"] * s["n"] if "bias" in call.inputs else 0)

    def bytes(self, call: Call) -> float:
        s = self.sizes(call)
        n = s["m"] * s["k"] + s["n"] * s["k"] + s["m"] * s["n"] + (s["n"] if "bias" in call.inputs else 0)
        n += s["m"] * s["n"] if call.params.get("pre") else 0
        return float(n * call.inputs["x"].element_size())

    def flags(self, call: Call) -> str:
        p = call.params
        parts = (p.get("activation"), "pre" if p.get("pre") else None,
                 "tf32" if tf32_products(call.dtype, call.device) else None)
        return ",".join(part for part in parts if part)

    def tolerance(self, call: Call) -> Tolerance:
        k = call.inputs["weight"].shape[1] + 1  # K products and the bias
        tolerance = reduction_tolerance(call.dtype, k)
        return with_tf32(tolerance, k) if tf32_products(call.dtype, call.device) else tolerance

    def verify(self, call: Call, outputs: Any, reference: Any) -> Mismatch | None:
        """z against linear's tolerance; y = act(z) against it widened by z's error passed through the
        activation (its slope and curvature at each element, and its own float32 error)."""
        activation = call.params.get("activation")
        if activation is None:
            return super().verify(call, outputs, reference)
        outs = outputs if isinstance(outputs, tuple) else (outputs,)
        refs = reference if isinstance(reference, tuple) else (reference,)
        if len(outs) != len(refs):
            return Mismatch(f"{len(outs)} outputs, expected {len(refs)}")
        tolerance = self.tolerance(call)
        z = refs[1] if len(refs) > 1 else self._pre_reference(call)
        for i, (name, out, ref) in enumerate(zip(("y", "z"), outs, refs)):
            if out.dtype != call.dtype or out.device != call.device:
                return Mismatch(f"{name} is {out.dtype} on {out.device}, expected {call.dtype} on {call.device}")
            slack = None
            if i == 0:
                z_ref = z.to(out.device)
                slack = activation_slack(z_ref, tolerance.atol + tolerance.rtol * z_ref.abs(), activation)
            mismatch = check_close(out, ref, tolerance, slack)
            if mismatch is not None:
                return Mismatch(f"{name}: {mismatch}")
        return None

    def cases(self) -> list[Case]:
        return [Case(case_id, make, small) for case_id, make, small in _cases()]

    def bad_cases(self) -> list[BadCase]:
        def args(x: Sequence[int], w: Sequence[int], b: Sequence[int] | None = None, **kw: Any) -> Callable:
            return lambda: ((torch.ones(x, **kw), torch.ones(w), None if b is None else torch.ones(b)), {})
        return [
            BadCase("in-features-mismatch", args((3, 4), (5, 6)), ArgumentError,
                    "x of shape 3x4 and weight of shape 5x6 do not chain: x's last dim 4 != weight's in_features 6"),
            BadCase("weight-1d", args((3, 4), (4,)), ArgumentError, "weight must be 2-D (out_features × in_features)"),
            BadCase("weight-3d", args((3, 4), (2, 5, 4)), ArgumentError, "got 3-D of shape 2x5x4"),
            BadCase("x-0d", args((), (5, 1)), ArgumentError, "x must have at least 1 dim"),
            BadCase("bias-shape", args((3, 4), (5, 4), (4,)), ArgumentError,
                    "bias must have shape (5,) (out_features), got 4"),
            BadCase("bias-2d", args((3, 4), (5, 4), (1, 5)), ArgumentError, "bias must have shape (5,)"),
            BadCase("dtype-mismatch", args((3, 4), (5, 4), dtype=torch.float16), DTypeError,
                    "x is torch.float16 but weight is torch.float32"),
            BadCase("bias-dtype", lambda: ((torch.ones(3, 4), torch.ones(5, 4), torch.ones(5, dtype=torch.float64)),
                                           {}), DTypeError,
                    "bias must be float32, float16, bfloat16, got torch.float64"),
            BadCase("int-dtype", lambda: ((torch.ones(3, 4, dtype=torch.int64), torch.ones(5, 4)), {}), DTypeError,
                    "x must be float32, float16, bfloat16, got torch.int64"),
            BadCase("not-a-tensor", lambda: (([[1.0]], torch.ones(1, 1)), {}), ArgumentError,
                    "x must be a torch.Tensor, got list"),
            BadCase("device-mismatch", lambda: ((torch.ones(3, 4, device="meta"), torch.ones(5, 4)), {}),
                    DeviceError, "x is on meta but weight is on cpu"),
            BadCase("activation-name", lambda: ((torch.ones(3, 4), torch.ones(5, 4)), {"activation": "swish"}),
                    ArgumentError, "activation must be None, 'relu', 'gelu', 'gelu_tanh', got 'swish'"),
            BadCase("activation-type", lambda: ((torch.ones(3, 4), torch.ones(5, 4)), {"activation": 1}),
                    ArgumentError, "activation must be None, 'relu', 'gelu', 'gelu_tanh', got 1"),
        ]

    # --- autograd ----------------------------------------------------------------------------

# --- conformance cases -------------------------------------------------------------------------

def _case(m: int, k: int, n: int, layout: str = "plain", bias: bool = True, nan_inf: bool = False,
          activation: str | None = None) -> Maker:
    def make(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        x, w = linear_inputs(m, k, n, layout, device, dtype, g)
        if nan_inf:  # rows of x meet them: those outputs turn NaN or ±inf, the rest stay finite
            x = x.clone()
            x[3, 5], x[7, 2], x[11, 30] = float("nan"), float("inf"), float("-inf")
        b = randn((n,), device, dtype, g) if bias else None
        return (x, w, b), {"activation": activation} if activation else {}
    return make


def _cases() -> list[tuple[str, Maker, bool]]:
    # ids read M x K x N (tokens, in, out); sizes avoid block multiples except the "aligned" ones
    # (K, N multiples of 8: the 16-byte paths of the compiled kernels)
    return [
        *linear_cases(_case),
        ("sliced-31x37x29", _case(31, 37, 29, "sliced"), True),
        ("expanded-x-33x17x19", _case(33, 17, 19, "expanded"), True),
        ("offset-aligned-24x40x72", _case(24, 40, 72, "offset"), True),
        ("nan-inf-40x33x65", _case(40, 33, 65, nan_inf=True), True),
        ("aligned-72x64x136", _case(72, 64, 136), True),
        ("aligned-nobias-40x128x72", _case(40, 128, 72, bias=False), True),
        ("aligned-264x1024x200", _case(264, 1024, 200), False),
        ("odd-257x129x1025", _case(257, 129, 1025), False),
        # each activation, with and without a bias, at odd sizes, on the infinities and NaN
        *((f"{a}-17x33x65", _case(17, 33, 65, activation=a), True) for a in ("relu", "gelu", "gelu_tanh")),
        *((f"{a}-nobias-33x47x19", _case(33, 47, 19, bias=False, activation=a), True)
          for a in ("relu", "gelu", "gelu_tanh")),
        *((f"{a}-nan-inf-40x33x65", _case(40, 33, 65, nan_inf=True, activation=a), True)
          for a in ("relu", "gelu", "gelu_tanh")),
        ("gelu-aligned-72x64x136", _case(72, 64, 136, activation="gelu"), True),
        ("gelu-3d-x-2x9x33x17", _case(18, 33, 17, "3d", activation="gelu"), True),
        ("gelu_tanh-odd-257x129x1025", _case(257, 129, 1025, activation="gelu_tanh"), False),
    ]
