"""copy_(dst, src): dst[...] = src in place, returning dst (torch's Tensor.copy_, without its dtype
and device conversions).

src broadcasts to dst's shape (not the other way round) and shares its dtype and device. dst may be
any strided view whose elements do not overlap: a slice of a bigger tensor, a transposed or permuted
view (that is how mytorch writes a gradient into a slice of a zero tensor and makes tensors
contiguous). Refused, with ArgumentError: a dst whose elements overlap (an expanded view: stride 0 on
a dimension of size > 1), whose writes would race; and a src that shares memory with dst without
being dst itself, whose result would depend on the order of the writes (torch refuses the dense
cases of that too). A copy onto itself writes nothing.

Values are moved, not converted: a copy is bit-exact, so the tolerance is 0. The reference is all of
dst's storage as it must be after the copy, so verification also sees the elements of a bigger tensor
around a dst view, which must be left alone.

Implementations walk dst and src through kernelzoo.elementwise.layout with dst as operand a, its
dimensions ordered by its strides (stores run along its memory; a permuted dense dst merges into one
dimension), and src as operand b (stride 0 where broadcast); dst and src dense in one order take a
plain (vectorised) copy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from kernelzoo.elementwise import MAX_DIMS, BinaryOp, Layout, distinct_elements, layout
from kernelzoo.errors import ArgumentError, DeviceError, DTypeError
from kernelzoo.registry import BadCase, Call, Case, check_same, check_tensor, is_fake, randn
from kernelzoo.tolerance import Mismatch, Tolerance

# A case's operand: the shape of a random tensor, and the view of it that is passed
View = tuple[tuple[int, ...], Callable[[torch.Tensor], torch.Tensor]]


def whole_storage(t: torch.Tensor) -> torch.Tensor:
    """Every element of ``t``'s storage as one 1-D tensor (of the tensor ``t`` is a view of)."""
    return t.new_empty(0).set_(t.untyped_storage())


def same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    """b, broadcast to a's shape, addresses exactly a's elements in a's order."""
    return a.data_ptr() == b.data_ptr() and b.expand(a.shape).stride() == a.stride()


def copy_parts(dst: torch.Tensor, src: torch.Tensor) -> Iterator[tuple[torch.Tensor, torch.Tensor, Layout]]:
    """(dst, src, layout) pieces with layouts of at most MAX_DIMS dimensions, one launch each: the
    whole copy, unless dst and src have more dimensions than that which do not merge (rare), which are
    split along their first dimension. Nothing for a copy onto itself."""
    if same_view(dst, src):
        return
    plan = layout(dst, src, sort_by_a=True)
    if len(plan.sizes) <= MAX_DIMS:
        yield dst, src, plan
        return
    src = src.expand(dst.shape)
    for i in range(dst.shape[0]):
        yield from copy_parts(dst[i], src[i])


def _check_distinct(dst: torch.Tensor) -> None:
    """ArgumentError unless dst's elements are at distinct addresses: with its dimensions ordered by
    stride, each stride must step past every element the smaller ones reach. (This refuses a few exotic
    interleaved views that do not overlap, never one that does.)"""
    reach = 1  # elements spanned by the dimensions seen so far
    for stride, size in sorted((s, n) for n, s in zip(dst.shape, dst.stride()) if n > 1):
        if stride < reach:
            raise ArgumentError(
                f"copy_: dst of shape {tuple(dst.shape)} and strides {dst.stride()} has elements that overlap "
                "(an expanded view?); expected a view whose elements are distinct, as each is written")
        reach += (size - 1) * stride


def _check_separate(dst: torch.Tensor, src: torch.Tensor) -> None:
    """ArgumentError if src and dst share memory without src being dst (broadcast) itself."""
    def span(t: torch.Tensor) -> tuple[int, int]:  # [first byte, past the last byte]
        last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
        return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()

    if is_fake(dst) or is_fake(src):  # no memory to compare while torch.compile traces: the real call checks
        return
    if dst.numel() == 0 or src.numel() == 0 or same_view(dst, src):
        return
    if dst.untyped_storage().data_ptr() == src.untyped_storage().data_ptr():
        (dst_start, dst_end), (src_start, src_end) = span(dst), span(src)
        if dst_start < src_end and src_start < dst_end:
            raise ArgumentError("copy_: src and dst share memory (views of one tensor) and src is not dst itself; "
                                "expected separate memory, as the result would depend on the order of the writes "
                                "(copy from src.clone())")


class Copy(BinaryOp):
    """copy_(dst, src): dst[...] = src, src broadcast to dst's shape, in place; returns dst.

    A BinaryOp for its shape strings, example, sizes and flags (src in place of b); its checks,
    reference, verification and cases are its own."""

    name = "copy_"
    checks_every_call = True  # dst and src must not overlap in memory
    # Untuned on the CPU, torch first: a memory-bound pass that torch runs as fast, behind less Python
    # (docs/perf/copy_.md, docs/design/elementwise.md). On a GPU the global order stands.
    default_order = {"cpu": ("torch",)}
    operands = ("dst", "src")
    inplace = ("dst",)
    flops_per_element = 0.0

    def check(self, dst: torch.Tensor, src: torch.Tensor) -> Call:
        check_tensor(self.name, "dst", dst)
        check_tensor(self.name, "src", src)
        check_same(self.name, dst=dst, src=src)
        if src.dim() > dst.dim() or any(m not in (1, n) for m, n in zip(reversed(src.shape), reversed(dst.shape))):
            raise ArgumentError(f"copy_: src of shape {tuple(src.shape)} does not broadcast to dst's shape "
                                f"{tuple(dst.shape)}; expected each of src's sizes, from the last, to be dst's or 1")
        _check_distinct(dst)
        _check_separate(dst, src)
        # the copy runs outside autograd: detached aliases of the tensors passed, as in sgd_update_
        return Call(self, {"dst": dst.detach(), "src": src.detach()})

    def reference(self, call: Call) -> torch.Tensor:
        dst, src = call.inputs["dst"], call.inputs["src"]
        after = whole_storage(dst).double()  # a float64 copy of the storage as it is now
        after.as_strided(dst.shape, dst.stride(), dst.storage_offset()).copy_(src.double().expand(dst.shape))
        return after

    def verify(self, call: Call, outputs: Any, reference: Any) -> Mismatch | None:
        dst = call.inputs["dst"]
        if not (isinstance(outputs, torch.Tensor) and outputs.data_ptr() == dst.data_ptr()
                and outputs.shape == dst.shape and outputs.stride() == dst.stride()):
            return Mismatch("copy_ must return dst itself, written in place")
        return super().verify(call, whole_storage(outputs), reference)

    def tolerance(self, call: Call) -> Tolerance:
        return Tolerance(rtol=0.0, atol=0.0)  # values are moved, never computed

    def bytes(self, call: Call) -> float:
        """dst written once, src's distinct elements read once."""
        dst, src = call.inputs["dst"], call.inputs["src"]
        return float(dst.element_size() * (dst.numel() + distinct_elements(src)))

    def cases(self) -> list[Case]:
        def pair(dst_shape: Sequence[int], src_shape: Sequence[int]) -> Callable:
            return lambda device, dtype, g: (randn(dst_shape, device, dtype, g), randn(src_shape, device, dtype, g))

        def views(dst: View, src: View) -> Callable:
            return lambda device, dtype, g: (dst[1](randn(dst[0], device, dtype, g)),
                                             src[1](randn(src[0], device, dtype, g)))

        makers = [
            ("1", pair((1,), (1,)), True),
            ("17", pair((17,), (17,)), True),
            ("1023x17", pair((1023, 17), (1023, 17)), True),
            # 105k elements: past the OpenMP plugin's threshold for threads (64k), dense, strided and tiled;
            # 200 programs take seconds in Triton's interpreter
            ("257x411", pair((257, 411), (257, 411)), False),
            ("row-257x411+411", pair((257, 411), (411,)), False),
            ("src-transposed-257x411", views(_whole((257, 411)), _transposed((411, 257))), False),
            ("empty", pair((0,), (0,)), True),
            ("0x5+5", pair((0, 5), (5,)), True),
            ("scalar+scalar", pair((), ()), True),
            ("5x7+scalar", pair((5, 7), ()), True),
            ("row-17x1023+1023", pair((17, 1023), (1023,)), True),
            ("column-1023x17+1023x1", pair((1023, 17), (1023, 1)), True),
            ("leading-3x1x1023+1023", pair((3, 1, 1023), (1023,)), True),
            # making a transposed tensor contiguous; writing into a transposed or permuted view
            ("src-transposed", views(_whole((1023, 17)), _transposed((17, 1023))), True),
            ("dst-transposed", views(_transposed((17, 1023)), _whole((1023, 17))), True),
            ("both-transposed", views(_transposed((17, 1023)), _transposed((17, 1023))), True),
            ("dst-permuted", views(_permuted((9, 5, 7), (1, 2, 0)), _whole((5, 7, 9))), True),
            ("batched-src-transposed", views(_whole((3, 65, 70)), _permuted((3, 70, 65), (0, 2, 1))), True),
            # a gradient into a slice of a bigger tensor: rows (dense, 51 elements in: unaligned), a block
            ("dst-rows", views(_sliced((40, 17), (slice(3, 20),)), _whole((17, 17))), True),
            ("dst-block", views(_sliced((33, 40), (slice(5, 20), slice(3, 30))), _whole((15, 27))), True),
            ("dst-strided+src-transposed", views(_sliced((64, 66), (slice(None), slice(1, -1, 2))),
                                                 _transposed((32, 64))), True),
            ("src-expanded", views(_whole((33, 17)), _expanded((1, 17), (33, 17))), True),
            ("misaligned", views(_sliced((1024,), (slice(1, None),)), _sliced((1024,), (slice(1, None),))), True),
            # 7 dimensions that do not merge: split into pieces of MAX_DIMS
            ("7d-strided", views(_sliced((3,) * 7, (slice(None, None, 2),) * 7), _whole((2,) * 7)), True),
            ("onto-itself", _onto_itself, True),
            ("nan_inf", _nan_inf, True),
        ]
        return [Case(case_id, _copy_case(make), small) for case_id, make, small in makers]

    def bad_cases(self) -> list[BadCase]:
        base = torch.zeros(8, 8)
        return [
            BadCase("int-dtype", lambda: ((torch.arange(4), torch.arange(4)), {}), DTypeError,
                    "copy_: dst must be float32, float16, bfloat16, got torch.int64"),
            BadCase("mixed-dtypes", lambda: ((torch.ones(4), torch.ones(4, dtype=torch.float16)), {}), DTypeError,
                    "copy_: dst is torch.float32 but src is torch.float16; expected one dtype"),
            BadCase("mixed-devices", lambda: ((torch.ones(4), torch.ones(4, device="meta")), {}), DeviceError,
                    "copy_: dst is on cpu but src is on meta; expected one device"),
            BadCase("src-not-a-tensor", lambda: ((torch.ones(4), 2.0), {}), ArgumentError,
                    "copy_: src must be a torch.Tensor, got float"),
            BadCase("src-does-not-broadcast", lambda: ((torch.ones(3, 4), torch.ones(5)), {}), ArgumentError,
                    "copy_: src of shape (5,) does not broadcast to dst's shape (3, 4); expected each of src's "
                    "sizes, from the last, to be dst's or 1"),
            BadCase("dst-would-broadcast", lambda: ((torch.ones(4), torch.ones(3, 4)), {}), ArgumentError,
                    "copy_: src of shape (3, 4) does not broadcast to dst's shape (4,)"),
            BadCase("dst-expanded", lambda: ((torch.ones(1, 4).expand(3, 4), torch.ones(3, 4)), {}), ArgumentError,
                    "copy_: dst of shape (3, 4) and strides (0, 1) has elements that overlap"),
            BadCase("src-overlaps-dst", lambda: ((base[1:], base[:-1]), {}), ArgumentError,
                    "copy_: src and dst share memory (views of one tensor) and src is not dst itself"),
        ]


def _copy_case(make: Callable) -> Callable:
    def build(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        return make(device, dtype, g), {}
    return build


def _whole(sizes: Sequence[int]) -> View:
    return tuple(sizes), lambda t: t


def _transposed(sizes: Sequence[int]) -> View:
    return tuple(sizes), lambda t: t.t()


def _permuted(sizes: Sequence[int], dims: Sequence[int]) -> View:
    return tuple(sizes), lambda t: t.permute(*dims)


def _sliced(sizes: Sequence[int], index: tuple) -> View:
    return tuple(sizes), lambda t: t[index]


def _expanded(sizes: Sequence[int], shape: Sequence[int]) -> View:
    return tuple(sizes), lambda t: t.expand(*shape)


def _onto_itself(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple:
    x = randn((17, 33), device, dtype, g)
    return x, x


def _nan_inf(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple:
    src = randn((1023,), "cpu", torch.float32, g)
    src[::7], src[3::11], src[5::13], src[2::17] = float("nan"), float("inf"), float("-inf"), -0.0
    return randn((1023,), device, dtype, g), src.to(device, dtype)
