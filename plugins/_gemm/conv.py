"""What conv2d, conv2d_backward and max_pool2d share in Python: the geometry (:class:`ConvShape`, stride,
padding and dilation pairs), the argument checks, the conformance cases and bad cases of the convolutions, and
the torch plugins' IEEE float32 context (:func:`ieee_float32`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from kernelzoo_plugins._gemm.spec import shape_text

from kernelzoo.errors import ArgumentError, DeviceError, DTypeError
from kernelzoo.registry import BadCase, Call, check_same, check_tensor, randn

Pair = tuple[int, int]

# (N, C, H, W, K, R, S, stride, padding): ResNet-50's convolutions at batch 32 on the GPU
CONV_SHAPES = {
    "cuda": [(32, 64, 56, 56, 64, 3, 3, 1, 1), (32, 128, 28, 28, 128, 3, 3, 1, 1),
             (32, 256, 14, 14, 256, 3, 3, 1, 1), (32, 64, 56, 56, 256, 1, 1, 1, 0),
             (32, 128, 56, 56, 128, 3, 3, 2, 1), (32, 3, 224, 224, 64, 7, 7, 2, 3)],
    "cpu": [(4, 64, 56, 56, 64, 3, 3, 1, 1), (8, 128, 28, 28, 128, 3, 3, 1, 1),
            (8, 256, 14, 14, 256, 3, 3, 1, 1), (4, 64, 56, 56, 256, 1, 1, 1, 0)],
}


def as_pair(op: str, name: str, value: Any, minimum: int, what: str) -> Pair:
    """``value`` (an int or a pair of ints, each >= minimum) as a pair; else an ArgumentError."""
    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)
    if is_int(value):
        pair = (value, value)
    elif isinstance(value, (tuple, list)) and len(value) == 2 and all(is_int(v) for v in value):
        pair = (value[0], value[1])
    else:
        extra = " (padding='same' / 'valid' strings are not supported)" if isinstance(value, str) else ""
        raise ArgumentError(f"{op}: {name} must be an int or a pair of ints (height, width), got {value!r}{extra}")
    if min(pair) < minimum:
        raise ArgumentError(f"{op}: {name} must be {what}, got {value!r}")
    return pair


@dataclass(frozen=True)
class ConvShape:
    """The sizes of one convolution: input N×C×H×W, weight K×C×R×S, output N×K×OH×OW, and its parameters."""

    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    oh: int
    ow: int
    stride: Pair
    padding: Pair
    dilation: Pair

    @property
    def reduction(self) -> int:
        """Products summed into one output: C·R·S."""
        return self.c * self.r * self.s


def output_size(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def check_conv(op: str, x: Any, weight: Any, stride: Any, padding: Any, dilation: Any,
               groups: Any = 1) -> dict[str, Pair]:
    """The checks conv2d and conv2d_backward share; returns the params (stride, padding, dilation pairs)."""
    check_tensor(op, "x", x)
    check_tensor(op, "weight", weight)
    if x.dim() not in (3, 4):
        raise ArgumentError(f"{op}: x must be 4-D (N, C, H, W) or 3-D unbatched (C, H, W), got {x.dim()}-D "
                            f"of shape {shape_text(x)}")
    if weight.dim() != 4:
        raise ArgumentError(f"{op}: weight must be 4-D (out_channels, in_channels, kH, kW), got {weight.dim()}-D "
                            f"of shape {shape_text(weight)}")
    check_same(op, x=x, weight=weight)
    if groups != 1:
        raise ArgumentError(f"{op}: groups={groups!r} is not supported; only groups=1")
    params = {"stride": as_pair(op, "stride", stride, 1, "positive"),
              "padding": as_pair(op, "padding", padding, 0, "non-negative"),
              "dilation": as_pair(op, "dilation", dilation, 1, "positive")}
    c, (k, wc, r, s) = x.shape[-3], weight.shape
    if c != wc:
        raise ArgumentError(f"{op}: x of shape {shape_text(x)} has {c} channels but weight of shape "
                            f"{shape_text(weight)} expects {wc} (its in_channels; groups=1)")
    if c == 0:
        raise ArgumentError(f"{op}: x of shape {shape_text(x)} has no channels; expected at least one")
    if k == 0:
        raise ArgumentError(f"{op}: weight of shape {shape_text(weight)} has no output channels; expected at least one")
    if r == 0 or s == 0:
        raise ArgumentError(f"{op}: weight of shape {shape_text(weight)} has an empty kernel; expected kH, kW >= 1")
    (ph, pw), (dh, dw) = params["padding"], params["dilation"]
    padded, kernel = (x.shape[-2] + 2 * ph, x.shape[-1] + 2 * pw), (dh * (r - 1) + 1, dw * (s - 1) + 1)
    if padded[0] < kernel[0] or padded[1] < kernel[1]:
        raise ArgumentError(f"{op}: the padded input ({padded[0]}×{padded[1]}) is smaller than the dilated kernel "
                            f"({kernel[0]}×{kernel[1]}): the output would be empty (x of shape {shape_text(x)}, "
                            f"padding {params['padding']}, dilation {params['dilation']})")
    return params


def conv_shape(call: Call) -> ConvShape:
    x, weight = call.inputs["x"], call.inputs["weight"]
    (sh, sw), (ph, pw), (dh, dw) = call.params["stride"], call.params["padding"], call.params["dilation"]
    n = x.shape[0] if x.dim() == 4 else 1
    c, h, w = x.shape[-3:]
    k, _, r, s = weight.shape
    return ConvShape(n, c, h, w, k, r, s, output_size(h, r, sh, ph, dh), output_size(w, s, sw, pw, dw),
                     (sh, sw), (ph, pw), (dh, dw))


def batched(t: torch.Tensor) -> torch.Tensor:
    """A 4-D view of an NCHW tensor (an unbatched 3-D one gets a batch of 1)."""
    return t if t.dim() == 4 else t.unsqueeze(0)


def output_shape(call: Call) -> tuple[int, ...]:
    cs = conv_shape(call)
    shape = (cs.n, cs.k, cs.oh, cs.ow)
    return shape if call.inputs["x"].dim() == 4 else shape[1:]


def params_flags(params: dict[str, Any]) -> str:
    return "-".join(f"{name}={v[0]}x{v[1]}" for name, v in params.items() if name in ("stride", "padding", "dilation"))


def conv_sizes(call: Call) -> dict[str, int]:
    cs = conv_shape(call)
    return {"n": cs.n, "c": cs.c, "h": cs.h, "w": cs.w, "k": cs.k, "r": cs.r, "s": cs.s}


def example_geometry(shape: Sequence[int], stride: Any, padding: Any, dilation: Any) -> tuple[tuple, dict]:
    """(N, C, H, W, K, R, S) and the stride / padding / dilation keywords of an example shape tuple; the
    keywords, where given, override the tuple's."""
    if not 7 <= len(shape) <= 10:
        raise ArgumentError(f"conv2d: shape {tuple(shape)} must be (N, C, H, W, K, R, S[, stride, padding"
                            "[, dilation]])")
    given = [*shape[7:], *(1, 0, 1)[len(shape) - 7:]]
    kwargs = {"stride": given[0] if stride is None else stride, "padding": given[1] if padding is None else padding,
              "dilation": given[2] if dilation is None else dilation}
    return tuple(shape[:7]), kwargs


Maker = Callable[[torch.device, torch.dtype, torch.Generator], tuple[tuple, dict]]


def conv_inputs(n: int, c: int, h: int, w: int, k: int, r: int, s: int, layout: str, device: torch.device,
                dtype: torch.dtype, g: torch.Generator, nan_inf: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """x (N, C, H, W) and weight (K, C, R, S) in a memory layout: "plain", "channels-last" (both NHWC in
    memory), "sliced" (x every other row and column of a larger tensor), "transposed-weight" (weight a
    (C, K, R, S) tensor's transpose), "offset" (contiguous views one element into their storage),
    "unbatched" (x 3-D, N ignored)."""
    if layout == "unbatched":
        x = randn((c, h, w), device, dtype, g)
    elif layout == "sliced":
        x = randn((n, c + 1, 2 * h, w + 3), device, dtype, g)[:, 1:, ::2, 2:-1]
    elif layout == "offset":
        x = randn((n * c * h * w + 1,), device, dtype, g)[1:].view(n, c, h, w)
    else:
        x = randn((n, c, h, w), device, dtype, g)
    if layout == "transposed-weight":
        weight = randn((c, k, r, s), device, dtype, g).transpose(0, 1)
    elif layout == "offset":
        weight = randn((k * c * r * s + 1,), device, dtype, g)[1:].view(k, c, r, s)
    else:
        weight = randn((k, c, r, s), device, dtype, g)
    if layout == "channels-last":
        x, weight = x.to(memory_format=torch.channels_last), weight.to(memory_format=torch.channels_last)
    if nan_inf:  # some outputs turn NaN or ±inf, the rest stay finite (weights stay finite: inf·0 pads)
        x = x.clone()
        flat = x.view(-1)
        flat[5], flat[37], flat[-9] = float("nan"), float("inf"), float("-inf")
    return x, weight


def conv_case(n: int, c: int, h: int, w: int, k: int, r: int, s: int, stride: Any = 1, padding: Any = 0,
              dilation: Any = 1, bias: bool = True, layout: str = "plain", nan_inf: bool = False,
              backward: bool = False) -> Maker:
    """A conv2d case, or with backward a conv2d_backward one (grad_out of the output's shape first)."""
    def make(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        x, weight = conv_inputs(n, c, h, w, k, r, s, layout, device, dtype, g, nan_inf)
        kwargs = {"stride": stride, "padding": padding, "dilation": dilation}
        if backward:  # the output's shape, by torch's shape inference on meta tensors
            out = torch.nn.functional.conv2d(x.to("meta"), weight.to("meta"), **kwargs).shape
            return (randn(out, device, dtype, g), x, weight), {**kwargs, "bias": bias}
        return (x, weight, randn((k,), device, dtype, g) if bias else None), kwargs
    return make


def conv_cases(backward: bool) -> list[tuple[str, Maker, bool]]:
    """(id, make, small): ids read N x C x H x W - K out channels - kernel R x S, then the parameters.
    Channel counts stay tiny where the case is small (Triton's interpreter runs those); the "aligned"
    ones have channels in multiples of 8 (the 16-byte paths of the compiled kernels)."""
    def c(case_id: str, *args: Any, small: bool = True, **kwargs: Any) -> tuple[str, Maker, bool]:
        return case_id, conv_case(*args, backward=backward, **kwargs), small
    return [
        c("1x1x1x1-k1-1x1", 1, 1, 1, 1, 1, 1, 1),
        c("2x3x7x9-k5-3x3-pad1", 2, 3, 7, 9, 5, 3, 3, padding=1),
        c("nobias-2x3x7x9-k5-3x3", 2, 3, 7, 9, 5, 3, 3, bias=False),
        c("2x4x9x8-k6-3x3-stride2-pad1", 2, 4, 9, 8, 6, 3, 3, stride=2, padding=1),
        c("1x3x9x9-k4-3x3-dilation2-pad2", 1, 3, 9, 9, 4, 3, 3, padding=2, dilation=2),
        c("1x3x8x11-k5-2x3-stride2x1-pad0x1-dilation1x2", 1, 3, 8, 11, 5, 2, 3, stride=(2, 1), padding=(0, 1),
          dilation=(1, 2)),
        c("1x2x10x7-k3-3x2-stride3x2-pad1x0", 1, 2, 10, 7, 3, 3, 2, stride=(3, 2), padding=(1, 0)),
        c("1x1-2x5x6x7-k3", 2, 5, 6, 7, 3, 1, 1),
        c("1x1-stride2-2x5x7x7-k3", 2, 5, 7, 7, 3, 1, 1, stride=2),
        c("kernel-over-input-1x3x2x2-k4-3x3-pad1", 1, 3, 2, 2, 4, 3, 3, padding=1),
        c("kernel-over-input-1x2x3x3-k3-5x5-pad2", 1, 2, 3, 3, 3, 5, 5, padding=2),
        c("batch0-0x3x5x5-k4-3x3", 0, 3, 5, 5, 4, 3, 3),
        c("unbatched-3x7x7-k4-3x3-pad1", 1, 3, 7, 7, 4, 3, 3, padding=1, layout="unbatched"),
        c("channels-last-2x8x6x5-k8-3x3-pad1", 2, 8, 6, 5, 8, 3, 3, padding=1, layout="channels-last"),
        c("sliced-2x3x7x6-k4-3x3-pad1", 2, 3, 7, 6, 4, 3, 3, padding=1, layout="sliced"),
        c("transposed-weight-2x3x6x6-k5-3x3", 2, 3, 6, 6, 5, 3, 3, layout="transposed-weight"),
        c("offset-2x8x6x6-k8-3x3-pad1", 2, 8, 6, 6, 8, 3, 3, padding=1, layout="offset"),
        c("nan-inf-1x3x8x8-k4-3x3-pad1", 1, 3, 8, 8, 4, 3, 3, padding=1, nan_inf=True),
        c("aligned-1x1-2x16x8x8-k16", 2, 16, 8, 8, 16, 1, 1),
        c("aligned-2x8x7x7-k16-3x3-pad1", 2, 8, 7, 7, 16, 3, 3, padding=1),
        c("resnet-2x32x14x14-k32-3x3-pad1", 2, 32, 14, 14, 32, 3, 3, padding=1, small=False),
        c("odd-3x19x23x21-k33-5x5-stride2-pad2", 3, 19, 23, 21, 33, 5, 5, stride=2, padding=2, small=False),
        c("1x1-2x64x28x28-k40", 2, 64, 28, 28, 40, 1, 1, small=False),
        c("long-reduction-1x300x9x9-k17-3x3-pad1", 1, 300, 9, 9, 17, 3, 3, padding=1, small=False),
        c("channels-last-aligned-2x64x10x10-k64-3x3-pad1", 2, 64, 10, 10, 64, 3, 3, padding=1,
          layout="channels-last", small=False),
    ]


def conv_bad_cases(op: str, args: Callable[..., tuple[tuple, dict]]) -> list[BadCase]:
    """Bad calls of conv2d or conv2d_backward: ``args(x, weight, **kwargs)`` makes the op's arguments."""
    def bad(x_shape: Sequence[int], w_shape: Sequence[int], x_kw: dict | None = None, **kwargs: Any) -> Callable:
        return lambda: args(torch.ones(x_shape, **(x_kw or {})), torch.ones(w_shape), **kwargs)
    return [
        BadCase("channel-mismatch", bad((1, 3, 5, 5), (4, 2, 3, 3)), ArgumentError,
                "x of shape 1x3x5x5 has 3 channels but weight of shape 4x2x3x3 expects 2 (its in_channels; groups=1)"),
        BadCase("kernel-over-padded-input", bad((1, 3, 2, 2), (4, 3, 3, 3)), ArgumentError,
                "the padded input (2×2) is smaller than the dilated kernel (3×3): the output would be empty"),
        BadCase("dilated-kernel-over-input", bad((1, 3, 5, 5), (4, 3, 3, 3), dilation=3), ArgumentError,
                "smaller than the dilated kernel (7×7)"),
        BadCase("x-5d", bad((1, 1, 3, 5, 5), (4, 3, 3, 3)), ArgumentError,
                "x must be 4-D (N, C, H, W) or 3-D unbatched (C, H, W), got 5-D of shape 1x1x3x5x5"),
        BadCase("x-2d", bad((5, 5), (4, 3, 3, 3)), ArgumentError, "got 2-D of shape 5x5"),
        BadCase("weight-3d", bad((1, 3, 5, 5), (4, 3, 3)), ArgumentError,
                "weight must be 4-D (out_channels, in_channels, kH, kW), got 3-D"),
        BadCase("groups", bad((1, 4, 5, 5), (4, 2, 3, 3), groups=2), ArgumentError,
                "groups=2 is not supported; only groups=1"),
        BadCase("stride-0", bad((1, 3, 5, 5), (4, 3, 3, 3), stride=0), ArgumentError, "stride must be positive, got 0"),
        BadCase("negative-padding", bad((1, 3, 5, 5), (4, 3, 3, 3), padding=(1, -1)), ArgumentError,
                "padding must be non-negative, got (1, -1)"),
        BadCase("dilation-0", bad((1, 3, 5, 5), (4, 3, 3, 3), dilation=0), ArgumentError,
                "dilation must be positive, got 0"),
        BadCase("padding-same", bad((1, 3, 5, 5), (4, 3, 3, 3), padding="same"), ArgumentError,
                "padding must be an int or a pair of ints (height, width), got 'same' (padding='same' / 'valid' "
                "strings are not supported)"),
        BadCase("stride-triple", bad((1, 3, 5, 5), (4, 3, 3, 3), stride=(1, 1, 1)), ArgumentError,
                "stride must be an int or a pair of ints"),
        BadCase("no-channels", bad((1, 0, 5, 5), (4, 0, 3, 3)), ArgumentError,
                "has no channels; expected at least one"),
        BadCase("no-out-channels", bad((1, 3, 5, 5), (0, 3, 3, 3)), ArgumentError,
                "weight of shape 0x3x3x3 has no output channels; expected at least one"),
        BadCase("empty-kernel", bad((1, 3, 5, 5), (4, 3, 0, 3)), ArgumentError, "has an empty kernel"),
        BadCase("dtype-mismatch", bad((1, 3, 5, 5), (4, 3, 3, 3), {"dtype": torch.float16}), DTypeError,
                "x is torch.float16 but weight is torch.float32"),
        BadCase("int-dtype", bad((1, 3, 5, 5), (4, 3, 3, 3), {"dtype": torch.int64}), DTypeError,
                "x must be float32, float16, bfloat16, got torch.int64"),
        BadCase("device-mismatch", bad((1, 3, 5, 5), (4, 3, 3, 3), {"device": "meta"}), DeviceError,
                "x is on meta but weight is on cpu"),
        BadCase("not-a-tensor", lambda: args([[1.0]], torch.ones(1, 1, 1, 1)), ArgumentError,
                "x must be a torch.Tensor, got list"),
    ]


def conv_bias_bad_cases(op: str) -> list[BadCase]:
    x, w = (1, 3, 5, 5), (4, 3, 3, 3)
    return [BadCase("bias-shape", lambda: ((torch.ones(x), torch.ones(w), torch.ones(3)), {}), ArgumentError,
                    "bias must have shape (4,) (out_channels), got 3"),
            BadCase("bias-dtype", lambda: ((torch.ones(x), torch.ones(w), torch.ones(4, dtype=torch.float16)), {}),
                    DTypeError, "x is torch.float32 but bias is torch.float16")]


def reduction_lengths(cs: ConvShape) -> dict[str, int]:
    """Products summed into one element of each gradient: grad_x at most K·R·S, grad_weight and grad_bias
    N·OH·OW (conv2d_backward's tolerances)."""
    return {"grad_x": cs.k * cs.r * cs.s, "grad_weight": cs.n * cs.oh * cs.ow, "grad_bias": cs.n * cs.oh * cs.ow}


@contextlib.contextmanager
def ieee_float32(call: Call) -> Iterator[None]:
    """cuDNN without TF32 inside the block, for a float32 call on the GPU."""
    if call.device.type != "cuda" or call.dtype != torch.float32:
        yield
        return
    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = before
