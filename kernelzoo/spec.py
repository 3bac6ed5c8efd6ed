"""The spec of an op: what holds whatever computes it, and the helpers its checks share.

An :class:`Op` owns every fact of an op that holds whatever computes it: argument checks,
the float64 reference, tolerance, FLOP and byte counts, shape buckets, representative shapes,
conformance cases and its derivative. A :class:`Call` is one checked call of it.
"""

from __future__ import annotations

import functools
import inspect
import math
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch._subclasses.fake_tensor import FakeTensor as _FakeTensor
from torch._subclasses.functional_tensor import FunctionalTensor as _FunctionalTensor

from kernelzoo.errors import ArgumentError, DeviceError, DTypeError, UnsupportedError
from kernelzoo.tolerance import Mismatch, Tolerance, check_close, tolerance_for

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
# 8-bit floats: the operands of the scaled (FP8) GEMMs, which compute in wider types
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
# every dtype kernelzoo names (a tuning key's, a bench row's), in the order tuning and benchmarks take them
DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
               torch.float8_e4m3fn: "float8_e4m3fn", torch.float8_e5m2: "float8_e5m2"}


class _PoisonFlag(threading.local):
    """Poisoning outputs (conformance tests) shows elements a kernel never wrote; per thread. The class
    attribute is every thread's default, so reading the flag raises nothing and is a plain attribute read, which
    every output allocation makes (docs/perf/call-path.md)."""

    on = False


_poison = _PoisonFlag()


def dtype_name(dtype: torch.dtype) -> str:
    """'float32' for torch.float32, and so on."""
    return DTYPE_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def parse_dtype(name: str) -> torch.dtype:
    """torch dtype from 'float32' / 'fp16' / 'bf16' / 'e4m3' style names."""
    aliases = {"fp32": "float32", "f32": "float32", "fp16": "float16", "half": "float16",
               "f16": "float16", "bf16": "bfloat16", "e4m3": "float8_e4m3fn", "fp8": "float8_e4m3fn",
               "e5m2": "float8_e5m2"}
    name = aliases.get(name, name)
    for dtype, known in DTYPE_NAMES.items():
        if known == name:
            return dtype
    raise ArgumentError(f"unknown dtype {name!r}; expected one of {', '.join(DTYPE_NAMES.values())}")


class poison_outputs:
    """Context manager: outputs allocated through :meth:`Call.empty` are filled with NaN."""

    def __enter__(self) -> None:
        _poison.on = True

    def __exit__(self, *exc: object) -> None:
        _poison.on = False


# An op's input: a tensor, or a tuple of tensors (the multi-tensor ops: one launch for many tensors).
Input = torch.Tensor | tuple[torch.Tensor, ...]


def clone_input(value: Input) -> Input:
    return tuple(t.clone() for t in value) if isinstance(value, tuple) else value.clone()


def copy_input_(dst: Input, src: Input) -> None:
    """Copy ``src`` into ``dst`` (tensor by tensor for a tuple)."""
    for d, s in zip(dst, src) if isinstance(dst, tuple) else ((dst, src),):
        d.copy_(s)


def input_tensors(value: Input) -> tuple[torch.Tensor, ...]:
    return value if isinstance(value, tuple) else (value,)


@dataclass
class Call:
    """One checked call of an op: its inputs by name (tensors, or tuples of tensors) and its other
    arguments. Device and dtype are those of the first input's first tensor."""

    op: Op
    inputs: dict[str, Input]
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def first(self) -> torch.Tensor:
        """The first input's first tensor."""
        for value in self.inputs.values():
            return value[0] if type(value) is tuple else value
        raise ValueError(f"{self.op.name}: a call without inputs")

    @property
    def device(self) -> torch.device:
        return self.first.device

    @property
    def dtype(self) -> torch.dtype:
        return self.first.dtype

    def empty(self, shape: Sequence[int], dtype: torch.dtype | None = None) -> torch.Tensor:
        """A new output tensor on the call's device (NaN-filled while outputs are poisoned)."""
        first = self.first  # new_empty takes its device (and dtype), which torch.empty would parse again
        out = first.new_empty(shape) if dtype is None or dtype == first.dtype else first.new_empty(shape, dtype=dtype)
        if _poison.on:
            out.fill_(float("nan"))
        return out

    def replace(self, **inputs: torch.Tensor) -> Call:
        """The same call with some inputs replaced (e.g. by contiguous copies)."""
        return Call(self.op, {**self.inputs, **inputs}, dict(self.params))

    def describe(self) -> str:
        """Shapes and dtype, for messages: 'softmax(x: 17x1023 float32, dim=-1)'."""
        def text(v: Input) -> str:
            if isinstance(v, tuple):
                dtype = f" {dtype_name(v[0].dtype)}" if v else ""
                return f"{len(v)} tensors of {sum(t.numel() for t in v)} elements{dtype}"
            return f"{'x'.join(map(str, v.shape)) or 'scalar'} {dtype_name(v.dtype)}"
        parts = [f"{k}: {text(v)}" for k, v in self.inputs.items()]
        parts += [f"{k}={v!r}" for k, v in self.params.items()]
        return f"{self.op.name}({', '.join(parts)})"


@dataclass(frozen=True)
class Case:
    """One conformance case: ``make(device, dtype, generator) -> (args, kwargs)``."""

    id: str
    make: Callable[[torch.device, torch.dtype, torch.Generator], tuple[tuple, dict]]
    small: bool = True  # small enough for Triton's interpreter on the CPU


@dataclass(frozen=True)
class BadCase:
    """Arguments the op must reject before any kernel runs, and what it must raise."""

    id: str
    make: Callable[[], tuple[tuple, dict]]
    error: type[Exception]
    match: str


def randn(shape: Sequence[int], device: torch.device | str, dtype: torch.dtype,
          generator: torch.Generator | None = None, scale: float = 1.0) -> torch.Tensor:
    """Standard-normal test data, reproducible from the (CPU) ``generator``.

    On a GPU the numbers are drawn there, from a seed taken off ``generator``: drawing the
    1 GiB of a 16384x16384 float32 input on the CPU and copying it takes seconds per trial.
    """
    device = torch.device(device)
    if device.type == "cuda":
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        gpu_generator = torch.Generator(device).manual_seed(seed)
        x = torch.randn(tuple(shape), generator=gpu_generator, dtype=torch.float32, device=device)
    else:
        x = torch.randn(tuple(shape), generator=generator, dtype=torch.float32)
    return (x * scale if scale != 1.0 else x).to(dtype=dtype)


@dataclass(frozen=True)
class Derivative:
    """An op's derivative, declared once in its spec; the torch autograd registration (``kernelzoo.autograd``),
    the ``torch.ops.kernelzoo`` custom op and mytorch's Function all read it.

    - ``inputs``: the inputs (names in :attr:`Call.inputs`) that receive gradients.
    - ``save(call, outputs)``: what the forward keeps for the backward, by name: tensors (inputs, outputs)
      and plain values. ``call`` is the checked call, ``outputs`` all of the implementation's outputs
      (extras such as layer_norm's mean and rstd included).
    - ``backward(saved, grad)``: the gradients of ``inputs`` by name (None or absent: no gradient), from
      what ``save`` kept and the gradient of output 0, expressed in kernelzoo ops. It runs with the plugin
      forced for the forward, if any, and never records a graph itself.
    - ``returns``: how many leading outputs a differentiable function returns (mytorch: max returns its
      indices too); the rest only feed the backward. Only output 0 is differentiable.
    - ``recording(call)``: the call a forward that records a backward runs instead of ``call``, for an op whose
      kernels compute an extra output only when asked (linear's pre-activation); None: ``call`` itself. The
      custom op's autograd (torch.compile) cannot know at the forward, so ``save`` gets no extra there.
    """

    inputs: tuple[str, ...]
    save: Callable[[Call, tuple[torch.Tensor, ...]], dict[str, Any]]
    backward: Callable[[dict[str, Any], torch.Tensor], Mapping[str, torch.Tensor | None]]
    returns: int = 1
    recording: Callable[[Call], Call] | None = None


@functools.cache
def _autograd_apply() -> Callable[[Call], Any]:
    """kernelzoo.autograd.apply (which imports this module), looked up once."""
    from kernelzoo.autograd import apply

    return apply


class Op:
    """The spec of one op. Subclasses set ``name`` and implement ``check`` and ``reference``.

    An op with a backward declares it in :attr:`derivative` (a :class:`Derivative`); ``kernelzoo.ops.<op>``
    then records it under torch autograd, ``torch.ops.kernelzoo.<op>`` registers it as its autograd formula,
    and mytorch's Function for the op reads it. ``check()``'s signature is also the custom op's schema
    (:attr:`schema_types` for arguments its annotations do not describe, :attr:`outputs` for ops returning several
    tensors), and :meth:`fake` gives the outputs' shapes on fake tensors, for torch.compile.
    """

    name: ClassVar[str]
    # representative problem shapes per device type, for tuning and benchmarks
    shapes: ClassVar[Mapping[str, Sequence[tuple[int, ...]]]] = {}
    # inputs a kernel overwrites; the tuner restores them from a copy before every timed run
    inplace: ClassVar[tuple[str, ...]] = ()
    # the dtypes `kernelzoo tune` covers per device type when none is asked for (absent: all the plugins take)
    tune_dtypes: ClassVar[Mapping[str, Sequence[torch.dtype]]] = {}
    # plugins dispatch tries ahead of dispatch.DEFAULT_ORDER on a device type when nothing is tuned (and prefers
    # between winners within noise of each other): for ops whose benchmarks put another plugin first there
    default_order: ClassVar[Mapping[str, Sequence[str]]] = {}
    # how many tensors an implementation returns (at most): an op with more returns them all from
    # torch.ops.kernelzoo.<op> as a Tensor[]
    outputs: ClassVar[int] = 1
    # the derivative (see Derivative), None for an op without a backward
    derivative: ClassVar[Derivative | None] = None
    # schema types of arguments whose annotation says too little for torch.library ('int[2]' for a size
    # given as an int or a pair); the others are read off check()'s annotations (see kernelzoo.library)
    schema_types: ClassVar[Mapping[str, str]] = {}
    # plugins a host-bound call (see dispatch.HOST_BOUND_BYTES) runs first on a device type, where they differ from
    # dispatch.HOST_BOUND_ORDER's: for ops whose torch plugin does more than torch's own op
    host_bound_order: ClassVar[Mapping[str, Sequence[str]]] = {}
    # whether check() reads more of its arguments than their signature (shape, strides, dtype, device of each
    # tensor, the other arguments' values): index values (value_range), or how tensors share storage. Dispatch
    # remembers a signature's checks and skips them at later calls of it unless this is set.
    checks_every_call: ClassVar[bool] = False

    def check(self, *args: Any, **kwargs: Any) -> Call:
        """Validate and normalise arguments; raise a kernelzoo error naming the bad one."""
        raise NotImplementedError

    def reference(self, call: Call) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """The op's meaning, computed in float64 (outputs of float64 dtype)."""
        raise NotImplementedError

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None) -> Call:
        """A call on fresh random inputs of a representative ``shape``."""
        raise NotImplementedError

    def parse_shape(self, text: str) -> tuple[int, ...]:
        """The ``shape`` :meth:`example` takes, from text like '4096x4096' (the inverse of shape_string)."""
        try:
            shape = tuple(int(part) for part in text.lower().split("x"))
        except ValueError:
            shape = ()
        if not shape or any(n < 0 for n in shape):
            raise ArgumentError(f"{self.name}: shape {text!r} is not sizes joined by 'x'; expected e.g. '4096x4096'")
        return shape

    def sizes(self, call: Call) -> dict[str, int]:
        """The problem's sizes by name; shape buckets and shape strings come from these."""
        x = next(iter(call.inputs.values()))
        return {f"d{i}": n for i, n in enumerate(x.shape)}

    def flops(self, call: Call) -> float:
        """Floating-point operations of one call."""
        return 0.0

    def bytes(self, call: Call) -> float:
        """Fewest bytes one call must move: every input read once, every output written once."""
        out = sum(t.numel() * t.element_size() for t in call.inputs.values())
        x = next(iter(call.inputs.values()))
        return float(out + x.numel() * x.element_size())

    def flags(self, call: Call) -> str:
        """Non-shape parameters that change the kernel (part of the tuning key), '' if none."""
        return ""

    def bucket(self, call: Call) -> tuple[int, ...]:
        """Shape bucket: each size rounded to the nearest power of two (log2)."""
        return tuple(0 if n <= 1 else round(math.log2(n)) for n in self.sizes(call).values())

    def describe_bucket(self, call: Call, bucket: Sequence[int]) -> str:
        """A bucket in words, for messages: 'n=2^20' (each of ``sizes`` as ``bucket`` rounds it). An op whose
        ``bucket`` is made otherwise describes it too."""
        names = list(self.sizes(call))
        return ", ".join(f"{names[i] if i < len(names) else f'd{i}'}=2^{b}" for i, b in enumerate(bucket))

    def shape_string(self, call: Call) -> str:
        return "x".join(str(n) for n in self.sizes(call).values())

    def tolerance(self, call: Call) -> Tolerance:
        """The table's tolerance for the call's dtype; ops with long reductions widen it."""
        return tolerance_for(call.dtype)

    def verify(self, call: Call, outputs: Any, reference: Any) -> Mismatch | None:
        """None if every output matches the float64 reference at the op's tolerance.

        Ops whose error must be judged otherwise (attention: against the same math done in
        the input precision) override this; the conformance suite and the tuner call it.
        """
        outs = outputs if isinstance(outputs, tuple) else (outputs,)
        refs = reference if isinstance(reference, tuple) else (reference,)
        if len(outs) != len(refs):
            return Mismatch(f"{len(outs)} outputs, expected {len(refs)}")
        if outs[0].is_floating_point() and outs[0].dtype != call.dtype:  # extra outputs (statistics) may be float32
            return Mismatch(f"output 0 is {outs[0].dtype}, expected {call.dtype}")
        for i, (out, ref) in enumerate(zip(outs, refs)):
            if out.device != call.device:
                return Mismatch(f"output {i} is on {out.device}, expected {call.device}")
            mismatch = check_close(out, ref, self.tolerance(call))
            if mismatch is not None:
                return Mismatch(f"output {i}: {mismatch}")
        return None

    def cases(self) -> Sequence[Case]:
        """Conformance cases: odd sizes, empty, non-contiguous, NaN/Inf."""
        return ()

    def bad_cases(self) -> Sequence[BadCase]:
        """Inputs that must be rejected before a kernel runs."""
        return ()

    def result(self, call: Call, outputs: Any) -> Any:
        """What ``kernelzoo.ops.<op>`` returns of an implementation's outputs (all, by default;
        an op may compute extra outputs for its backward, like attention's log-sum-exp)."""
        return outputs

    def needs_autograd(self, call: Call) -> bool:
        """Whether this call must record a backward: the op declares a derivative, gradients are on and one of
        the inputs it differentiates requires grad."""
        derivative = self.derivative
        if derivative is None or not torch.is_grad_enabled():
            return False
        inputs = call.inputs
        for name in derivative.inputs:
            t = inputs.get(name)
            if t is not None and t.requires_grad:
                return True
        return False

    def autograd(self, call: Call) -> Any:
        """Run ``call`` through torch autograd, by the op's :attr:`derivative`; what ``result`` makes of the
        outputs."""
        if self.derivative is None:
            raise UnsupportedError(f"{self.name}: declares no derivative, so it cannot record a backward")
        return self.result(call, _autograd_apply()(call))

    def fake(self, call: Call) -> Any:
        """The outputs' shapes and dtypes for a call on fake tensors (``torch.library``'s fake implementation,
        which lets shapes flow through torch.compile): by default the torch, else the python, implementation
        run on the fake inputs. An op none of whose implementations can run on fake tensors overrides this."""
        from kernelzoo.discovery import registry  # discovery imports this module
        from kernelzoo.implementation import Broken

        impls = registry.impls.get(self.name, {})
        for plugin in ("torch", "python", *sorted(impls)):
            impl = impls.get(plugin)
            if impl is not None and not isinstance(impl, Broken) and impl.supports(call) is None:
                return impl.run(call, impl.config())
        raise UnsupportedError(f"{self.name}: no implementation computes {call.describe()} on fake tensors; "
                               "expected a torch or python plugin, or an Op.fake override")

    @functools.cached_property
    def signature(self) -> inspect.Signature:
        return inspect.signature(self.check)


# --- helpers for op checks -------------------------------------------------------------

def check_tensor(op: str, name: str, x: object, dtypes: Sequence[torch.dtype] = FLOATS) -> torch.Tensor:
    """Raise unless ``x`` is a tensor of one of ``dtypes``."""
    if not isinstance(x, torch.Tensor):
        raise ArgumentError(f"{op}: {name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in dtypes:
        allowed = ", ".join(dtype_name(d) for d in dtypes)
        raise DTypeError(f"{op}: {name} must be {allowed}, got {x.dtype}")
    return x


def check_same_device(op: str, **tensors: torch.Tensor) -> None:
    """Raise unless all ``tensors`` share one device (their dtypes may differ: values and int64 indices)."""
    (first, t0), *rest = tensors.items()
    for name, t in rest:
        if t.device != t0.device:
            raise DeviceError(f"{op}: {first} is on {t0.device} but {name} is on {t.device}; expected one device")


def check_same(op: str, **tensors: torch.Tensor) -> None:
    """Raise unless all ``tensors`` share one device and one dtype."""
    (first, t0), *rest = tensors.items()
    for name, t in rest:
        if t.device != t0.device:
            raise DeviceError(f"{op}: {first} is on {t0.device} but {name} is on {t.device}; "
                              "expected one device")
        if t.dtype != t0.dtype:
            raise DTypeError(f"{op}: {first} is {t0.dtype} but {name} is {t.dtype}; expected one dtype")


# (weak reference, stamp, (low, high)) by id of an integer tensor whose values were read
_ranges: dict[int, tuple[weakref.ref, tuple, tuple[int, int]]] = {}


def is_fake(t: torch.Tensor) -> bool:
    """Whether ``t`` holds no data (a fake or meta tensor: torch.compile's tracing, a fake implementation)."""
    return isinstance(t, (_FakeTensor, _FunctionalTensor)) or t.device.type == "meta"


def value_range(t: torch.Tensor, ignore: int | None = None) -> tuple[int, int] | None:
    """(min, max) of a non-empty integer tensor, entries equal to ``ignore`` counted as 0; None for a tensor
    without data (:func:`is_fake`), or on a CUDA stream that is capturing a graph (a read would sync), whose
    values a check cannot read: those calls' indices reach the kernels unchecked, as in torch.

    Reading them costs one host sync (a GPU's queue drains). The answer is remembered for this
    tensor object until it is written to (torch's version counter, shared by its views, moves) or
    freed, so a backward that re-checks its forward's indices, or a buffer checked every step,
    syncs once.
    """
    try:
        stamp = (t._version, t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, ignore)
    except RuntimeError:  # inference tensors keep no version counter: nothing can be remembered
        stamp = None
    key = id(t)
    seen = _ranges.get(key)
    if stamp is not None and seen is not None and seen[0]() is t and seen[1] == stamp:
        return seen[2]
    if is_fake(t) or (t.is_cuda and torch.cuda.is_current_stream_capturing()):
        return None  # no values to read: fake tensors hold none, and a CUDA graph being captured cannot sync
    values = t if ignore is None else torch.where(t == ignore, torch.zeros((), dtype=t.dtype, device=t.device), t)
    low, high = torch.stack(torch.aminmax(values)).tolist()
    if stamp is not None:
        def forget(ref: weakref.ref, key: int = key) -> None:
            if key in _ranges and _ranges[key][0] is ref:
                del _ranges[key]
        _ranges[key] = (weakref.ref(t, forget), stamp, (low, high))
    return low, high
