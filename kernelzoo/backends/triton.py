"""Triton backend: availability, the interpreter, and the base class of ``triton`` plugins.

Kernels are ``@triton.jit`` functions launched with an explicit config (block sizes,
``num_warps``, ``num_stages``) chosen by kernelzoo's tuner, never ``triton.autotune``.
With ``TRITON_INTERPRET=1`` (set before Triton is imported) the same kernels run in Triton's
interpreter on CPU tensors; that is how CI runs them. The interpreter executes each program
in Python, so it is only for small sizes, and never chosen automatically.

:class:`Launcher` launches a kernel with less host work than ``kernel[grid](...)``: Triton's own launch
binds and specializes every argument at every call before it finds the compiled kernel, a cost that grows
with the argument count and is a large share of a short kernel's call (docs/design/flash-attention.md).
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from kernelzoo.registry import FLOATS, Availability, Implementation


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@functools.cache
def version() -> str:
    try:
        import triton
    except ImportError:
        return ""
    return triton.__version__


@functools.cache
def available() -> Availability:
    if not version():
        return Availability(False, "triton is not installed (pip install triton; Linux only)")
    if interpreting() or torch.cuda.is_available():
        return Availability(True)
    return Availability(False, "no CUDA GPU (set TRITON_INTERPRET=1 before import to run "
                               "Triton kernels in its interpreter on the CPU)")


class TritonImplementation(Implementation):
    """Base of the ``triton`` plugins."""

    plugin: ClassVar[str] = "triton"
    dtypes: ClassVar[Mapping[str, tuple[torch.dtype, ...]]] = {
        "cuda": FLOATS, "cpu": (torch.float32,)}

    def available(self) -> Availability:
        return available()

    def devices(self) -> tuple[str, ...]:
        return ("cpu",) if interpreting() else ("cuda",)


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for launch grids on the host. ``triton.cdiv`` computes the same but is a constexpr function,
    callable inside kernels too, whose host call costs microseconds of argument unwrapping."""
    return -(a // -b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (0 for 0), as ``triton.next_power_of_2`` gives it, at a host call's cost."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


# torch's current CUDA device, read at every launch, straight from its C binding (which initialises CUDA
# if need be): torch.cuda.current_device() adds a Python frame and a second initialisation test
_current_device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)


def _arg_key(arg: Any) -> Any:
    """What of one argument decides the kernel Triton compiles for it: an integer's value (Triton
    specializes 1 and multiples of 16), a float's type (floats are not specialized), a tensor's dtype
    and whether its address is 16-byte aligned (Triton's pointer specialization), a descriptor's
    dtype, alignment, shape, strides and block, anything else itself (None, bools, dtypes)."""
    kind = type(arg)
    if kind is int or kind is bool or arg is None:
        return arg
    if kind is float:
        return float
    if isinstance(arg, torch.Tensor):
        return arg.dtype, arg.data_ptr() % 16 == 0
    base = getattr(arg, "base", None)  # a TensorDescriptor
    if isinstance(base, torch.Tensor):
        return (base.dtype, base.data_ptr() % 16 == 0, tuple(arg.shape), tuple(arg.strides),
                tuple(arg.block_shape), getattr(arg, "padding", None))
    return arg


@functools.cache
def _runtime_knobs() -> Any:
    """Triton's runtime settings, imported once: an import statement on every launch is host time per launch
    (docs/perf/call-path.md)."""
    from triton import knobs

    return knobs.runtime


def _hooked() -> bool:
    """Whether a launch hook (a profiler such as Proton) is installed: then every launch goes through
    Triton, which hands the hook its metadata. Triton 3.6 keeps None or a function, newer versions
    a chain of hooks."""
    hook = _runtime_knobs().launch_enter_hook
    return hook is not None and bool(getattr(hook, "calls", True))


class Launcher:
    """Launches of one ``@triton.jit`` kernel with the host's per-call work cut to a dictionary lookup.

    ``kernel[grid](*args, **kwargs)`` binds every argument to the signature and specializes it (dtype,
    alignment, integer divisibility) on every call, then looks the compiled kernel up by the result.
    A Launcher keys its own cache by the same facts (:func:`_arg_key`) and the compile-time keyword
    arguments, and hands later calls with that key straight to the compiled kernel's launcher:
    ``launcher(kernel)[grid](*args, **kwargs)``. The first call of a key, calls under the interpreter
    and calls while a launch hook is installed go through Triton; so does every call of a kernel given a
    runtime parameter by keyword (positional arguments must be the runtime parameters, in order; keyword
    arguments the constexprs and launch options such as num_warps), and every call while
    ``KERNELZOO_TRITON_LAUNCH=triton`` was set when the Launcher was made (to compare or rule it out).
    """

    MAX_KEYS = 4096  # distinct argument keys kept (shapes come and go); the cache starts over past it

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self._compiled: dict[tuple, tuple] = {}
        # the interpreter is chosen before Triton is imported, so once per process
        self._through_triton = os.environ.get("KERNELZOO_TRITON_LAUNCH", "") == "triton" or interpreting()

    def __getitem__(self, grid: tuple[int, ...]) -> functools.partial:
        return functools.partial(self.__call__, grid)

    def __call__(self, grid: tuple[int, ...], *args: Any, **kwargs: Any) -> None:
        if self._through_triton or callable(grid):
            self.kernel[grid](*args, **kwargs)
            return
        key = (_current_device(), *map(_arg_key, args), *kwargs.items())
        try:
            entry = self._compiled.get(key)
        except TypeError:  # an unhashable keyword value
            self._through_triton = True
            entry = None
        if entry is None or _hooked():
            compiled = self.kernel[grid](*args, **kwargs)
            if entry is None and not self._through_triton:
                self._remember(key, compiled, args, kwargs)
            return
        run, function, metadata, tail, stream = entry
        run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1, stream(), function,
            metadata, None, None, None, *args, *tail)

    def _remember(self, key: tuple, compiled: Any, args: tuple, kwargs: dict) -> None:
        """Keep what a fast launch of key needs: the compiled kernel's launcher and handle, and the bound values
        of the parameters after the positional ones."""
        tail = self.tail(args, kwargs)
        if tail is None:
            self._through_triton = True
            return
        from triton.runtime import driver

        if len(self._compiled) >= self.MAX_KEYS:
            self._compiled.clear()
        stream = functools.partial(driver.active.get_current_stream, torch.cuda.current_device())
        self._compiled[key] = (compiled.run, compiled.function, compiled.packed_metadata, tail, stream)

    def tail(self, args: tuple, kwargs: dict) -> tuple | None:
        """The values of the kernel's parameters after the positional arguments, in signature order: constexprs
        given by keyword or left at their defaults, all fixed by a key (Triton's compiled launcher takes every
        parameter and skips the constexprs). None when one of them is a runtime parameter: it was given by
        keyword, and its value is not part of the key."""
        params = self.kernel.params
        if any(not p.is_constexpr for p in params[len(args):]):
            return None
        signature = inspect.signature(self.kernel.fn)
        bound = signature.bind(*args, **{k: v for k, v in kwargs.items() if k in signature.parameters})
        bound.apply_defaults()
        return tuple(bound.arguments[p.name] for p in params[len(args):])


_launchers: dict[int, Launcher] = {}


def launcher(kernel: Any) -> Launcher:
    """The one :class:`Launcher` of a ``@triton.jit`` kernel (kept by identity: a kernel's own hash
    is that of its source, which Triton computes on first use)."""
    found = _launchers.get(id(kernel))
    if found is None:
        found = _launchers[id(kernel)] = Launcher(kernel)
    return found
