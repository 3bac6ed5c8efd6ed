"""scaled_matmul(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16): the FP8 GEMM with scales of
``torch._scaled_mm``: out = (a·scale_a) @ (b·scale_b) (+ bias), cast to out_dtype.

a (M×K) and b (K×N) are 8-bit floats: float8_e4m3fn, or float8_e5m2 for one of them (as torch._scaled_mm on a
GPU, no e5m2 × e5m2 product). The scales are float32 and dequantize the operands: per-tensor (one element each)
or row-wise (scale_a of shape (M, 1), one per row of a; scale_b of shape (1, N), one per column of b). bias is a
vector of N in out_dtype; out_dtype is bfloat16, float16 or float32. Products are accumulated in float32.
torch._scaled_mm wants a row-major and b column-major (b the transpose of a row-major N×K matrix): the torch
plugin takes only that, the others any strides. Forward only: the op declares no derivative, so its output
requires no grad whatever its inputs do (as every kernelzoo op without one). Shapes and shape strings read M×N×K;
a call's dtype is a's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch
from kernelzoo_plugins._gemm.spec import reduction_tolerance, shape_text

from kernelzoo.errors import ArgumentError, DeviceError, DTypeError
from kernelzoo.registry import FLOATS, FP8, BadCase, Call, Case, Op, check_tensor, dtype_name, parse_dtype, randn
from kernelzoo.tolerance import Mismatch, Tolerance, check_close

# Hopper's FP8 tensor cores add an instruction's products in an accumulator narrower than float32, and a kernel
# carries those sums into float32 only every so often along K (Triton's max_num_imprecise_acc). An output's error
# then follows the magnitudes it sums, not its value: where the products cancel it is many times the output's own
# rounding (torch._scaled_mm's own results miss the float32-accumulation tolerance: docs/design/gemm.md). On a GPU
# each output may also be off by this share of the sum of its products' magnitudes, Σ_k |a·sa|·|b·sb|: about 10
# times what cuBLAS's and the Triton kernel's sums promoted every 128 products were off on the H200, a tenth of
# what sums never promoted were (docs/design/gemm.md).
FP8_ACCUMULATION = 2.0**-9

# a's 8-bit float where a suite hands a case or an example another dtype (the custom-op checks, CUDA graphs and
# `kernelzoo demo` draw every op's inputs in float32)
DEFAULT_FP8 = torch.float8_e4m3fn


def out_dtype(call: Call) -> torch.dtype:
    """The output's dtype (the call's own dtype is a's, an 8-bit float)."""
    return parse_dtype(call.params["out_dtype"])


def rowwise(call: Call) -> bool:
    """Whether the scales are row-wise (scale_a (M, 1), scale_b (1, N)) rather than one per tensor."""
    return call.params["scales"] == "row"


def dequantized(call: Call, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """a·scale_a and b·scale_b in ``dtype`` (float32 for the python plugin, float64 for the reference)."""
    a, b = call.inputs["a"].to(dtype), call.inputs["b"].to(dtype)
    scale_a, scale_b = call.inputs["scale_a"].to(dtype), call.inputs["scale_b"].to(dtype)
    if not rowwise(call):  # one element, whatever its shape: a scalar
        scale_a, scale_b = scale_a.reshape(()), scale_b.reshape(())
    return a * scale_a, b * scale_b


@functools.cache
def capability(index: int) -> tuple[int, int]:
    """A CUDA device's compute capability, asked once (8.9 and newer have 8-bit float tensor cores)."""
    return torch.cuda.get_device_capability(index)


@functools.cache
def cpu_takes_row_scales() -> bool:
    """Whether this torch's CPU torch._scaled_mm takes row-wise scales (2.13's does; 2.11's takes one element)."""
    one = torch.ones(16, 16).to(torch.float8_e4m3fn)
    try:
        torch._scaled_mm(one, one.t(), torch.ones(16, 1), torch.ones(1, 16), out_dtype=torch.bfloat16)
    except RuntimeError:
        return False
    return True


def accumulation_slack(call: Call) -> torch.Tensor | None:
    """Per output, FP8_ACCUMULATION · Σ_k |a·sa|·|b·sb| (float64) for a call on a GPU, whose tensor cores accumulate
    8-bit float products in less than float32; None on the CPU, where every plugin sums in float32."""
    if call.device.type != "cuda":
        return None
    a, b = dequantized(call, torch.float64)
    return FP8_ACCUMULATION * (a.abs() @ b.abs())


def quantize(x: torch.Tensor, dtype: torch.dtype = DEFAULT_FP8, dim: int | None = None,
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scale): ``x`` in the 8-bit float ``dtype`` and the float32 scale that dequantizes it (x ≈ q·scale).

    The scale maps x's largest magnitude (amax) onto the dtype's largest finite value, for the whole tensor, or
    along ``dim`` (kept, of size 1) for row-wise scales: dim=1 for a (M×K) gives (M, 1), dim=0 for b (K×N) (1, N).
    """
    largest = torch.finfo(dtype).max
    magnitude = x.detach().float().abs()
    if dim is None:
        amax = magnitude.amax() if x.numel() else magnitude.new_ones(())
    elif x.shape[dim] == 0:
        amax = magnitude.new_ones([1 if d == dim % x.dim() else n for d, n in enumerate(x.shape)])
    else:
        amax = magnitude.amax(dim, keepdim=True)
    scale = (amax / largest).clamp(min=torch.finfo(torch.float32).tiny)
    return (x.float() / scale).clamp(-largest, largest).to(dtype), scale


class ScaledMatmul(Op):
    """scaled_matmul(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16): (a·scale_a) @ (b·scale_b)
    (+ bias) in out_dtype, for FP8 a (M×K) and b (K×N) with float32 per-tensor or row-wise scales (torch._scaled_mm
    semantics); float32 accumulation, forward only."""

    name = "scaled_matmul"
    # (M, N, K): the GPU's square shapes move more than the 50 MB L2 holds; 4095×4097 is off every tile and
    # alignment (torch._scaled_mm takes no N or K that is not a multiple of 16)
    shapes = {"cuda": [(4096, 4096, 4096), (8192, 8192, 8192), (4095, 4097, 4096)],
              "cpu": [(512, 512, 512), (255, 257, 512)]}
    # Untuned, torch._scaled_mm (cuBLAS) first on the GPU wherever it can run the call: the vendor's FP8 GEMM is
    # the one the Triton kernel has to beat, and only tuning on the GPU can tell which is faster at a shape
    default_order = {"cuda": ("torch",)}
    # e4m3 is the 8-bit float of forward passes; `kernelzoo tune --dtype float8_e5m2` tunes the other
    tune_dtypes = {"cuda": (torch.float8_e4m3fn,)}
    # benchmarks and tuning cover both kinds of scales
    variants = ({"scales": "tensor"}, {"scales": "row"})

    def check(self, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
              bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16) -> Call:
        check_tensor(self.name, "a", a, FP8)
        check_tensor(self.name, "b", b, FP8)
        if a.dtype == b.dtype == torch.float8_e5m2:
            raise DTypeError(f"{self.name}: a and b are both float8_e5m2; expected float8_e4m3fn for at least one "
                             "of them (torch._scaled_mm takes no e5m2 × e5m2 product)")
        for name, t in (("a", a), ("b", b)):
            if t.dim() != 2:
                raise ArgumentError(f"{self.name}: {name} must be 2-D ({'M×K' if name == 'a' else 'K×N'}), got "
                                    f"{t.dim()}-D of shape {shape_text(t)}")
        if a.shape[1] != b.shape[0]:
            raise ArgumentError(f"{self.name}: a of shape {shape_text(a)} and b of shape {shape_text(b)} do not "
                                f"chain: a's K {a.shape[1]} != b's K {b.shape[0]}")
        if not isinstance(out_dtype, torch.dtype):
            raise ArgumentError(f"{self.name}: out_dtype must be a torch.dtype (torch.bfloat16, torch.float16 or "
                                f"torch.float32), got {type(out_dtype).__name__}")
        if out_dtype not in FLOATS:
            raise DTypeError(f"{self.name}: out_dtype must be bfloat16, float16 or float32, got {out_dtype}")
        check_tensor(self.name, "scale_a", scale_a, (torch.float32,))
        check_tensor(self.name, "scale_b", scale_b, (torch.float32,))
        scales = self._scale_kind(a, b, scale_a, scale_b)
        inputs = {"a": a, "b": b, "scale_a": scale_a, "scale_b": scale_b}
        if bias is not None:
            check_tensor(self.name, "bias", bias)
            if bias.dim() != 1 or bias.shape[0] != b.shape[1]:
                raise ArgumentError(f"{self.name}: bias must be a vector of N = {b.shape[1]} elements, got shape "
                                    f"{shape_text(bias)}")
            if bias.dtype != out_dtype:
                raise DTypeError(f"{self.name}: bias is {bias.dtype} but out_dtype is {out_dtype}; expected bias "
                                 "in out_dtype")
            inputs["bias"] = bias
        for name, t in inputs.items():
            if t.device != a.device:
                raise DeviceError(f"{self.name}: a is on {a.device} but {name} is on {t.device}; expected one device")
        return Call(self, inputs, {"out_dtype": dtype_name(out_dtype), "scales": scales, "with_bias": bias is not None,
                                   "b_dtype": dtype_name(b.dtype)})

    def _scale_kind(self, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) -> str:
        """'tensor' or 'row', as torch._scaled_mm tells them: both scales of one element, else both row-wise."""
        m, n = a.shape[0], b.shape[1]
        if scale_a.numel() == 1 and scale_b.numel() == 1:
            return "tensor"
        if tuple(scale_a.shape) == (m, 1) and tuple(scale_b.shape) == (1, n):
            return "row"
        raise ArgumentError(f"{self.name}: scales must be per-tensor (one element each) or row-wise (scale_a of "
                            f"shape (M, 1) = ({m}, 1) and scale_b of shape (1, N) = (1, {n})), got scale_a of shape "
                            f"({', '.join(map(str, scale_a.shape))}) and scale_b of shape "
                            f"({', '.join(map(str, scale_b.shape))})")

    def reference(self, call: Call) -> torch.Tensor:
        a, b = dequantized(call, torch.float64)
        out = a @ b
        if "bias" in call.inputs:
            out = out + call.inputs["bias"].double()
        return out

    def fake(self, call: Call) -> torch.Tensor:
        return call.empty((call.inputs["a"].shape[0], call.inputs["b"].shape[1]), out_dtype(call))

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, *, out_dtype: str = "bfloat16", scales: str = "tensor",
                with_bias: bool = False, b_dtype: str | None = None) -> Call:
        """Unit-normal a (M×K) and weights (N×K) quantized with amax scales; b is the weights' transpose (K×N,
        column-major, as torch._scaled_mm wants it). ``dtype`` is a's 8-bit float (e4m3 for another dtype), b is
        e4m3 unless ``b_dtype`` says otherwise."""
        m, n, k = shape
        a_dtype = dtype if dtype in FP8 else DEFAULT_FP8
        args, kwargs = _inputs(m, n, k, device, a_dtype, generator, scales=scales, out=parse_dtype(out_dtype),
                               bias=with_bias, b_dtype=parse_dtype(b_dtype) if b_dtype else DEFAULT_FP8)
        return self.check(*args, **kwargs)

    def sizes(self, call: Call) -> dict[str, int]:
        a, b = call.inputs["a"], call.inputs["b"]
        return {"m": a.shape[0], "n": b.shape[1], "k": a.shape[1]}

    def flags(self, call: Call) -> str:
        """The output dtype, then "row" (row-wise scales), "bias", "b-<dtype>" (b's 8-bit float where it is not
        a's) and "unaligned" where the output's rows are not 16-byte aligned: a TMA store needs them to be, so
        the fastest config differs there (a call's own operand layouts do not split keys: kernels copy what they
        cannot read as it lies)."""
        p = call.params
        b_dtype = "" if p["b_dtype"] == dtype_name(call.dtype) else f"b-{p['b_dtype']}"
        row_bytes = call.inputs["b"].shape[1] * out_dtype(call).itemsize
        return "-".join(filter(None, [p["out_dtype"], "row" if rowwise(call) else "", "bias" if p["with_bias"] else "",
                                      b_dtype, "unaligned" if row_bytes % 16 else ""]))

    def flops(self, call: Call) -> float:
        s = self.sizes(call)
        return 2.0 * s["m"] * s["n"] * s["k"]

    def bytes(self, call: Call) -> float:
        s = self.sizes(call)
        inputs = sum(t.numel() * t.element_size() for t in call.inputs.values())
        return float(inputs + s["m"] * s["n"] * out_dtype(call).itemsize)

    def tolerance(self, call: Call) -> Tolerance:
        # matmul's: the output dtype's rounding, and the absolute error of K products summed in float32 (which
        # grows with K), for unit-normal operands. Dequantized operands of other magnitudes scale the sums and
        # their error alike: the atol is scaled by the product of the operands' root mean squares.
        a, b = dequantized(call, torch.float32)
        tol = reduction_tolerance(out_dtype(call), call.inputs["a"].shape[1])
        magnitude = _rms(a) * _rms(b)
        return Tolerance(tol.rtol, tol.atol * magnitude) if magnitude > 0 else tol

    def verify(self, call: Call, outputs: Any, reference: Any) -> Mismatch | None:
        if not isinstance(outputs, torch.Tensor):
            return Mismatch(f"{type(outputs).__name__} returned, expected one tensor")
        if outputs.dtype != out_dtype(call):
            return Mismatch(f"output is {outputs.dtype}, expected out_dtype {out_dtype(call)}")
        if outputs.device != call.device:
            return Mismatch(f"output is on {outputs.device}, expected {call.device}")
        return check_close(outputs, reference, self.tolerance(call), accumulation_slack(call))

    def cases(self) -> list[Case]:
        return [Case(case_id, make, small) for case_id, make, small in _cases()]

    def bad_cases(self) -> list[BadCase]:
        e4m3, e5m2 = torch.float8_e4m3fn, torch.float8_e5m2

        def args(m: int = 3, k: int = 4, n: int = 5, *, a_dtype: torch.dtype = e4m3, b_dtype: torch.dtype = e4m3,
                 sa: Sequence[int] = (), sb: Sequence[int] = (), k_b: int | None = None, **kwargs: Any,
                 ) -> Callable[[], tuple[tuple, dict]]:
            return lambda: ((torch.ones(m, k).to(a_dtype), torch.ones(k if k_b is None else k_b, n).to(b_dtype),
                             torch.ones(sa), torch.ones(sb)), kwargs)

        return [
            BadCase("float32-a", lambda: ((torch.ones(3, 4), torch.ones(4, 5).to(e4m3), torch.ones(()),
                                           torch.ones(())), {}), DTypeError,
                    "a must be float8_e4m3fn, float8_e5m2, got torch.float32"),
            BadCase("bfloat16-b", lambda: ((torch.ones(3, 4).to(e4m3), torch.ones(4, 5, dtype=torch.bfloat16),
                                            torch.ones(()), torch.ones(())), {}), DTypeError,
                    "b must be float8_e4m3fn, float8_e5m2, got torch.bfloat16"),
            BadCase("e5m2-e5m2", args(a_dtype=e5m2, b_dtype=e5m2), DTypeError, "a and b are both float8_e5m2"),
            BadCase("k-mismatch", args(k_b=6), ArgumentError,
                    "a of shape 3x4 and b of shape 6x5 do not chain: a's K 4 != b's K 6"),
            BadCase("rank-3", lambda: ((torch.ones(2, 3, 4).to(e4m3), torch.ones(4, 5).to(e4m3), torch.ones(()),
                                        torch.ones(())), {}), ArgumentError, "a must be 2-D (M×K), got 3-D"),
            BadCase("scale-float16", lambda: ((torch.ones(3, 4).to(e4m3), torch.ones(4, 5).to(e4m3),
                                               torch.ones((), dtype=torch.float16), torch.ones(())), {}),
                    DTypeError, "scale_a must be float32, got torch.float16"),
            BadCase("scale-a-column-of-n", args(sa=(5, 1), sb=(1, 5)), ArgumentError,
                    "got scale_a of shape (5, 1) and scale_b of shape (1, 5)"),
            BadCase("scale-b-as-column", args(sa=(3, 1), sb=(5, 1)), ArgumentError,
                    "row-wise (scale_a of shape (M, 1) = (3, 1) and scale_b of shape (1, N) = (1, 5))"),
            BadCase("scales-mixed", args(sa=(3, 1), sb=()), ArgumentError,
                    "got scale_a of shape (3, 1) and scale_b of shape ()"),
            BadCase("bias-length", args(bias=torch.ones(4, dtype=torch.bfloat16)), ArgumentError,
                    "bias must be a vector of N = 5 elements, got shape 4"),
            BadCase("bias-dtype", args(bias=torch.ones(5)), DTypeError,
                    "bias is torch.float32 but out_dtype is torch.bfloat16; expected bias in out_dtype"),
            BadCase("out-dtype-fp8", args(out_dtype=e4m3), DTypeError,
                    "out_dtype must be bfloat16, float16 or float32, got torch.float8_e4m3fn"),
            BadCase("out-dtype-int", args(out_dtype=torch.int32), DTypeError,
                    "out_dtype must be bfloat16, float16 or float32, got torch.int32"),
            BadCase("device-mismatch", lambda: ((torch.ones(3, 4).to(e4m3), torch.ones(4, 5).to(e4m3),
                                                 torch.ones((), device="meta"), torch.ones(())), {}),
                    DeviceError, "a is on cpu but scale_a is on meta; expected one device"),
            BadCase("not-a-tensor", lambda: (([[1.0]], torch.ones(1, 1).to(e4m3), torch.ones(()), torch.ones(())),
                                             {}), ArgumentError, "a must be a torch.Tensor, got list"),
        ]


def _rms(x: torch.Tensor) -> float:
    return float(x.square().mean().sqrt()) if x.numel() else 0.0


Maker = Callable[[torch.device, torch.dtype, torch.Generator], tuple[tuple, dict]]


def _inputs(m: int, n: int, k: int, device: torch.device | str, a_dtype: torch.dtype,
            g: torch.Generator | None, *, scales: str = "tensor", out: torch.dtype = torch.bfloat16,
            bias: bool = False, b_dtype: torch.dtype | None = None, layout: str = "plain",
            magnitude: float = 1.0) -> tuple[tuple, dict]:
    """The arguments of a call: normal data of std ``magnitude`` quantized with amax scales (per tensor, or per row
    of a and column of b). ``layout``: "plain" (a row-major, b column-major: torch._scaled_mm's), "b-row-major",
    "a-column-major", "sliced" (strided both ways; the scales are those of the views)."""
    b_dtype = b_dtype or DEFAULT_FP8
    row = scales == "row"
    if layout == "sliced":  # every other row of a, every third column of b, inside wider tensors
        x = randn((2 * m, k + 3), device, torch.float32, g, magnitude)
        w = randn((k, 3 * n), device, torch.float32, g, magnitude)
        qa, sa = quantize(x, a_dtype, 1 if row else None)
        qb, sb = quantize(w, b_dtype, 0 if row else None)
        a, b = qa[::2, 1:-2], qb[:, ::3]
        sa, sb = (sa[::2].contiguous(), sb[:, ::3].contiguous()) if row else (sa, sb)
    else:
        x = randn((k, m), device, torch.float32, g, magnitude).t() if layout == "a-column-major" else \
            randn((m, k), device, torch.float32, g, magnitude)
        w = randn((k, n), device, torch.float32, g, magnitude) if layout == "b-row-major" else \
            randn((n, k), device, torch.float32, g, magnitude).t()
        a, sa = quantize(x, a_dtype, 1 if row else None)
        b, sb = quantize(w, b_dtype, 0 if row else None)
        # quantize keeps x's strides for a, w's for b: torch's layouts where asked
        a = a.t().contiguous().t() if layout == "a-column-major" else a.contiguous()
        b = b if layout == "b-row-major" else b.t().contiguous().t()
    kwargs: dict[str, Any] = {"out_dtype": out}
    if bias:
        kwargs["bias"] = randn((n,), device, out, g)
    return (a, b, sa, sb), kwargs


def _case(m: int, n: int, k: int, **kw: Any) -> Maker:
    other = kw.pop("other_b", False)

    def make(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        a_dtype = dtype if dtype in FP8 else DEFAULT_FP8
        # e5m2 a takes e4m3 b (no e5m2 × e5m2 product); e4m3 a takes either
        b_dtype = torch.float8_e5m2 if other and a_dtype == torch.float8_e4m3fn else torch.float8_e4m3fn
        return _inputs(m, n, k, device, a_dtype, g, b_dtype=b_dtype, **kw)
    return make


def _cases() -> list[tuple[str, Maker, bool]]:
    """Ids read M x N x K. Sizes off the block multiples (and a K tail past one 128-deep step), both kinds of
    scales, every out_dtype with and without bias, data far from unit scale, the other layouts, the other 8-bit
    float for b, empty dims."""
    f16, f32 = torch.float16, torch.float32
    return [
        ("1x1x1", _case(1, 1, 1), True),
        ("17x33x65", _case(17, 33, 65), True),
        ("row-17x33x65", _case(17, 33, 65, scales="row"), True),
        ("row-1x33x65", _case(1, 33, 65, scales="row"), True),
        ("bias-17x33x65", _case(17, 33, 65, bias=True), True),
        ("float16-33x17x200", _case(33, 17, 200, out=f16), True),
        ("float16-row-bias-33x17x200", _case(33, 17, 200, out=f16, scales="row", bias=True), True),
        ("float32-65x33x17", _case(65, 33, 17, out=f32), True),
        ("float32-row-bias-65x33x17", _case(65, 33, 17, out=f32, scales="row", bias=True), True),
        ("small-values-33x17x65", _case(33, 17, 65, magnitude=1e-3), True),
        ("large-values-row-33x17x65", _case(33, 17, 65, magnitude=40.0, scales="row", out=f32), True),
        ("b-row-major-33x47x65", _case(33, 47, 65, layout="b-row-major"), True),
        ("a-column-major-33x47x65", _case(33, 47, 65, layout="a-column-major", scales="row"), True),
        ("sliced-31x29x37", _case(31, 29, 37, layout="sliced"), True),
        ("sliced-row-31x29x37", _case(31, 29, 37, layout="sliced", scales="row"), True),
        ("other-fp8-b-17x33x65", _case(17, 33, 65, other_b=True), True),
        ("other-fp8-b-row-17x33x65", _case(17, 33, 65, other_b=True, scales="row", out=f32), True),
        ("k0-bias-17x33x0", _case(17, 33, 0, bias=True), True),
        ("m0-0x33x17", _case(0, 33, 17), True),
        ("n0-row-17x0x33", _case(17, 0, 33, scales="row"), True),
        ("aligned-128x144x256", _case(128, 144, 256), True),
        ("aligned-row-bias-64x96x512", _case(64, 96, 512, scales="row", bias=True), True),
        ("aligned-float32-512x512x1024", _case(512, 512, 1024, out=f32), False),
        ("odd-257x1025x129", _case(257, 1025, 129, scales="row"), False),
        ("long-k-64x80x4096", _case(64, 80, 4096, out=f32), False),
    ]
