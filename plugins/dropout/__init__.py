"""dropout(x, p, seed): y = x · keep / (1 − p), elementwise, with a mask that is a hash of (seed, index).

keep_i = (u_i ≥ p), u_i = (h_i >> 8) · 2⁻²⁴ ∈ [0, 1), h_i = hash32(seed, i), where i is the element's
index in x's row-major order (that of x.contiguous()) and seed a Python int in [0, 2**63). Every
plugin computes the same 32-bit hash (uint32 arithmetic, wrapping), so all of them and the float64
reference drop exactly the same elements:

    mix(v)   = "lowbias32" (C. Wellons' hash prospector; murmur3's fmix32 with better constants):
               v ^= v >> 16; v *= 0x7feb352d; v ^= v >> 15; v *= 0x846ca68b; v ^= v >> 16
    k1       = mix(seed_hi ^ mix(seed_lo + G)),  k2 = mix(k1 + G),  G = 0x9e3779b9
    hash32   = mix(mix(i_lo ^ k1) ^ k2 ^ (i_hi · G))

with seed_lo / seed_hi and i_lo / i_hi the low and high 32 bits. Two keyed rounds, because with
one, mix(i_lo ^ k), every mask would be one fixed sequence read in an order permuted by an xor with
k: the masks of keys k and k ^ 1 would be each other with neighbours swapped. keep_i compares
integers, h >> 8 ≥ ceil(p · 2²⁴), which is u ≥ p exactly, whatever float precision a kernel uses.

p is in [0, 1): p = 0 returns a copy of x; p = 1 (everything dropped, no kernel needed) is refused,
mytorch handles it itself. As in torch, a dropped element is x · 0, so a dropped NaN or inf gives NaN.
The backward of dropout is dropout(grad, p, seed) with the same seed: grad has x's shape, hence the
same mask.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch
from kernelzoo_plugins._elementwise.spec import interpreter_sized

from kernelzoo import ops
from kernelzoo.autograd import contiguous
from kernelzoo.elementwise import UnaryOp, overflow_to_inf, tensor_makers, variant_id
from kernelzoo.errors import ArgumentError, DTypeError
from kernelzoo.registry import BadCase, Call, Case, Derivative

GOLDEN = 0x9E3779B9  # 2³² / golden ratio: odd, its bits look random
MASK32 = 0xFFFFFFFF
U = TypeVar("U", int, torch.Tensor)  # a Python int or an int64 tensor holding uint32 values

# conformance: p = 0 (a copy), 0.1 and 0.5; a seed of 0, a small one, and one past 2³²
CONFORMANCE_VARIANTS = ({"p": 0.0, "seed": 0}, {"p": 0.1, "seed": 2**40 + 12345}, {"p": 0.5, "seed": 7})


def _mul32(v: U, c: int) -> U:
    """(v · c) mod 2³² for v, c < 2³² without overflowing int64: c's top bit adds (v & 1) · 2³¹ mod 2³²,
    the rest a product below 2⁶³. A tensor ``v`` is updated in place (and returned)."""
    top = (v & 1) << 31 if c >> 31 else 0
    v *= c & 0x7FFFFFFF
    v += top
    v &= MASK32
    return v


def _mix(v: U) -> U:
    """lowbias32, a bijection of uint32 whose every output bit depends on every input bit. A tensor ``v``
    is updated in place (and returned): 10⁶ indices hash in a third of the time that fresh tensors take."""
    v ^= v >> 16
    v = _mul32(v, 0x7FEB352D)
    v ^= v >> 15
    v = _mul32(v, 0x846CA68B)
    v ^= v >> 16
    return v


def keys(seed: int) -> tuple[int, int]:
    """(k1, k2): the two 32-bit round keys of ``seed``."""
    k1 = _mix((seed >> 32) ^ _mix(((seed & MASK32) + GOLDEN) & MASK32))
    return k1, _mix((k1 + GOLDEN) & MASK32)


def hash32(index: torch.Tensor, seed: int) -> torch.Tensor:
    """The 32-bit hash of each int64 ``index`` under ``seed`` (an int64 tensor of values below 2³²)."""
    k1, k2 = keys(seed)
    h = _mix((index & MASK32) ^ k1)
    h ^= k2
    h ^= _mul32(index >> 32, GOLDEN)
    return _mix(h)


def threshold(p: float) -> int:
    """keep ⇔ (hash >> 8) ≥ threshold(p) ⇔ u ≥ p, with u = (hash >> 8) · 2⁻²⁴ (p · 2²⁴ is exact in a double)."""
    return math.ceil(p * 2**24)


def keep_mask(shape: Sequence[int], p: float, seed: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The boolean mask of the kept elements of a tensor of ``shape``."""
    index = torch.arange(math.prod(shape), dtype=torch.int64, device=device).view(tuple(shape))
    return (hash32(index, seed) >> 8) >= threshold(p)


def seed_halves(seed: int) -> tuple[int, int]:
    """(low, high) 32 bits of ``seed``: what the kernels take."""
    return seed & MASK32, seed >> 32


def scale(p: float) -> float:
    """1 / (1 − p): what a kept element is multiplied by."""
    return 1.0 / (1.0 - p)


class Dropout(UnaryOp):
    """dropout(x, p, seed): x · keep / (1 − p), keep a hash of (seed, element index); see the module."""

    name = "dropout"
    # the derivative: the same mask and scale applied to the gradient; the mask is a hash of (seed, position),
    # so the backward recomputes it rather than keeping it
    derivative = Derivative(
        inputs=("x",),
        save=lambda call, outputs: {"p": call.params["p"], "seed": call.params["seed"]},
        backward=lambda saved, grad: {"x": ops.dropout(contiguous(grad), saved["p"], saved["seed"])},
    )
    # tuning and benchmarks: the kernels' speed depends on neither p nor seed
    variants = ({"p": 0.5, "seed": 0},)

    def check(self, x: torch.Tensor, p: float, seed: int) -> Call:
        return super().check(x, p=p, seed=seed)

    def params(self, p: Any = None, seed: Any = None, **kwargs: Any) -> dict[str, Any]:
        if kwargs:
            raise ArgumentError(f"dropout: unexpected argument(s) {', '.join(kwargs)}")
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0 <= p < 1:
            why = "; p = 1 drops every element, which needs no kernel" if p == 1 else ""
            raise ArgumentError(f"dropout: p must be a real number in [0, 1), got {p!r}{why}")
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < 2**63:
            raise ArgumentError(f"dropout: seed must be an int in [0, 2**63), got {seed!r}")
        return {"p": float(p), "seed": int(seed)}

    def flags(self, call: Call) -> str:
        # not the seed: each call draws a new one, and each would be a new tuning key
        return ""

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, **kwargs: Any) -> Call:
        """Random x of ``shape``; p and seed of the tuning variant unless given."""
        return super().example(shape, dtype, device, generator, **{**self.variants[0], **kwargs})

    def reference(self, call: Call) -> torch.Tensor:
        x, p = call.inputs["x"].double(), call.params["p"]
        keep = keep_mask(x.shape, p, call.params["seed"], x.device)
        return overflow_to_inf(x * keep / (1.0 - p), call.dtype)

    def cases(self) -> list[Case]:
        return interpreter_sized(Case("-".join([name, variant_id(variant)]), _case(make, variant))
                                 for variant in CONFORMANCE_VARIANTS for name, make in tensor_makers().items())

    def bad_cases(self) -> list[BadCase]:
        def call(x: Any = None, p: Any = 0.5, seed: Any = 1) -> Callable[[], tuple[tuple, dict]]:
            return lambda: ((torch.ones(3) if x is None else x, p, seed), {})
        return [
            BadCase("int-dtype", call(x=torch.arange(4)), DTypeError,
                    "dropout: x must be float32, float16, bfloat16, got torch.int64"),
            BadCase("not-a-tensor", call(x=[1.0, 2.0]), ArgumentError, "dropout: x must be a torch.Tensor, got list"),
            BadCase("p-one", call(p=1), ArgumentError,
                    "dropout: p must be a real number in [0, 1), got 1; p = 1 drops every element"),
            BadCase("p-negative", call(p=-0.1), ArgumentError, "dropout: p must be a real number in [0, 1), got -0.1"),
            BadCase("p-nan", call(p=math.nan), ArgumentError, "dropout: p must be a real number in [0, 1), got nan"),
            BadCase("p-str", call(p="0.5"), ArgumentError, "dropout: p must be a real number in [0, 1), got '0.5'"),
            BadCase("seed-float", call(seed=1.0), ArgumentError, "dropout: seed must be an int in [0, 2**63), got 1.0"),
            BadCase("seed-negative", call(seed=-1), ArgumentError,
                    "dropout: seed must be an int in [0, 2**63), got -1"),
            BadCase("seed-too-big", call(seed=2**63), ArgumentError,
                    f"dropout: seed must be an int in [0, 2**63), got {2**63}"),
        ]


def _case(make: Callable, variant: dict[str, Any]) -> Callable:
    def build(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        return (make(device, dtype, g),), dict(variant)
    return build
