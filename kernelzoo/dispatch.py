"""Choosing which implementation runs a call: forced plugin, tuned winner, or the default order.

The automatic choice, in order: a plugin forced by ``kernelzoo.use()`` or ``KERNELZOO_PLUGIN``;
the tuned winner for the call's key (a source of winners is installed by the tuning
database); else the first available plugin of :data:`DEFAULT_ORDER` that can run the call.
Candidates are cached per key, so a steady-state call costs a dict lookup and one
``supports()`` check.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelzoo.discovery import on_change as registry_on_change
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import Call, Implementation, Op, registry
from kernelzoo.spec import _autograd_apply

# Without tuning data, a fixed order (it also breaks ties within noise in the tuning database).
# GPU: triton first, as it wins most tuned keys of the elementwise and row ops
# (docs/design/elementwise.md; torch wins every matmul key, which the shipped winners cover). CPU:
# openmp, then torch. python is last everywhere. Triton on the CPU (its interpreter) is never
# chosen automatically; third-party kinds follow in name order. An op whose benchmarks put
# another plugin first names it in its own Op.default_order, which comes ahead of this.
DEFAULT_ORDER: dict[str, tuple[str, ...]] = {
    "cuda": ("triton", "cuda", "torch", "python"),
    "cpu": ("openmp", "torch", "python"),
}
_BUILTIN_KINDS = ("python", "openmp", "cuda", "triton", "torch")

# A GPU call that moves fewer bytes than this (Op.bytes) runs in about a launch's latency on the device whichever
# kernel runs it (a MiB takes a fraction of a microsecond at HBM rates), while the plugins' host costs per call
# differ by several microseconds (docs/perf/call-path.md): such a call is bound by the host. Without a tuned record
# of its own bucket (a nearest bucket's winner was timed where the device bound it) it runs the plugins of
# HOST_BOUND_ORDER first, those whose host path is cheapest: torch's own op. The CPU needs no such rule: its
# timings are wall time, host cost included.
HOST_BOUND_BYTES: dict[str, int] = {"cuda": 1 << 20}
HOST_BOUND_ORDER: dict[str, tuple[str, ...]] = {"cuda": ("torch",)}

_forced: contextvars.ContextVar[str | None] = contextvars.ContextVar("kernelzoo_forced", default=None)


@dataclass(frozen=True)
class Choice:
    """What a call runs: the plugin, its config, and why it was chosen."""

    plugin: str
    config: Mapping[str, Any]
    reason: str
    impl: Implementation = field(repr=False)
    forced: bool = False  # kernelzoo.use / KERNELZOO_PLUGIN named the plugin: no fallback to another
    nearest: bool = False  # a tuned config of the nearest tuned bucket, not of the call's own


# A source of tuned winners: (op, call, plugin) -> Choice or None; plugin None: the fastest plugin's, else that
# plugin's (a forced plugin runs its tuned config). Installed by kernelzoo.db.
WinnerSource = Callable[[Op, Call, "str | None"], "Choice | None"]
_winner_source: WinnerSource | None = None
_cache: dict[tuple, list[Choice]] = {}
_chosen: dict[tuple, Choice] = {}  # choose()'s answers by call signature (see _signature)
_warned: set[tuple] = set()
CHOSEN_LIMIT = 4096


def set_winner_source(source: WinnerSource | None) -> None:
    """Install the function that looks tuned winners up; clears the choice cache."""
    global _winner_source
    _winner_source = source
    clear_cache()


def clear_cache() -> None:
    """Forget cached choices (after tuning, or when the database changed), the winner source's too."""
    forget_choices()
    forget = getattr(_winner_source, "clear", None)
    if forget is not None:
        forget()


def forget_choices() -> None:
    """Forget cached choices only, so that the next calls ask the winner source again (it calls this from its
    reading thread when winners it could not give in time have arrived)."""
    _cache.clear()
    _chosen.clear()
    _bound.clear()


class use:
    """Force a plugin inside a ``with`` block: ``with kernelzoo.use("openmp"): ...``."""

    def __init__(self, plugin: str) -> None:
        self.plugin = plugin

    def __enter__(self) -> use:
        self._token = _forced.set(self.plugin)
        return self

    def __exit__(self, *exc: object) -> None:
        _forced.reset(self._token)


# os.environ.get encodes the name and decodes the value at every call; its encoded table answers "not set"
# (the usual case) for a tenth of that, and follows every change made through os.environ
_ENV_NAME = "KERNELZOO_PLUGIN"
_ENV_KEY = getattr(os.environ, "encodekey", lambda name: name)(_ENV_NAME)


def forced_plugin() -> str | None:
    """The plugin forced by ``kernelzoo.use`` or, outside it, by ``$KERNELZOO_PLUGIN``; None if neither."""
    forced = _forced.get()
    if forced:
        return forced
    data = getattr(os.environ, "_data", None)
    if data is not None and _ENV_KEY not in data:
        return None
    return os.environ.get(_ENV_NAME) or None


def plugin_order(device_type: str, plugins: Iterable[str], op: str | None = None) -> list[str]:
    """Those of ``plugins`` chosen automatically on ``device_type``: the op's own ``default_order`` there, then
    DEFAULT_ORDER, then other kinds by name.

    The tuning database ranks plugins whose times are within noise of each other in this order.
    """
    present = set(plugins)
    spec = registry.load().ops.get(op) if op is not None else None
    first = spec.default_order.get(device_type, ()) if spec is not None else ()
    order = list(dict.fromkeys(p for p in (*first, *DEFAULT_ORDER.get(device_type, ())) if p in present))
    return order + sorted(p for p in present if p not in _BUILTIN_KINDS)


def _default_choices(op: Op, device: torch.device, host_bound: bool = False) -> list[Choice]:
    impls = {i.plugin: i for i in registry.implementations(op.name)}
    order = plugin_order(device.type, impls, op.name)
    reason = "default order"
    if host_bound:
        preferred = op.host_bound_order.get(device.type) or HOST_BOUND_ORDER.get(device.type, ())
        first = [p for p in preferred if p in impls]
        order = first + [p for p in order if p not in first]
        reason = "default order, host-bound size"
    choices = []
    for plugin in order:
        impl = impls[plugin]
        if device.type not in impl.devices() or not registry.availability(impl):
            continue
        choices.append(Choice(plugin, impl.config(), reason, impl))
    return choices


def host_bound(op: Op, call: Call) -> bool:
    """Whether ``call`` moves too few bytes for its kernel's time to matter next to its host cost (see
    :data:`HOST_BOUND_BYTES`)."""
    limit = HOST_BOUND_BYTES.get(call.device.type)
    return limit is not None and op.bytes(call) < limit


def tuned(op: Op, call: Call, plugin: str | None = None) -> Choice | None:
    """The tuned winner for ``call`` (exact bucket, else the nearest tuned one), or None; with ``plugin``, that
    plugin's tuned config rather than the fastest plugin's."""
    return _winner_source(op, call, plugin) if _winner_source is not None else None


def _candidates(op: Op, call: Call) -> list[Choice]:
    small = host_bound(op, call)
    key = (op.name, call.device, call.dtype, op.bucket(call), op.flags(call), small)
    found = _cache.get(key)
    if found is None:
        winner = tuned(op, call)
        if winner is not None and small and winner.nearest:
            winner = None
        found = ([winner] if winner is not None else []) + _default_choices(op, call.device, small)
        _cache[key] = found
    return found


# torch's TF32 switch for matrix products, as its C binding reads it (30 ns; torch.backends.cuda.matmul.allow_tf32
# goes through a module __getattr__ first): the GEMM ops key TF32 calls apart (their flag "tf32"), so what a call's
# signature fixes holds under one setting of it
_tf32_allowed = getattr(torch._C, "_get_cublas_allow_tf32", lambda: torch.backends.cuda.matmul.allow_tf32)


def _signature(op: Op, call: Call, forced: str | None) -> tuple | None:
    """What choose() depends on: the op, the forced plugin, each input's shape, strides, dtype and device,
    the other arguments and torch's TF32 switch. None where an input is a tensor list: such calls are chosen afresh
    each time (as are those whose arguments cannot be hashed, which choose() finds when it looks the key up)."""
    inputs = []
    for t in call.inputs.values():
        if not isinstance(t, torch.Tensor):
            return None
        inputs.append((t.shape, t.stride(), t.dtype, t.device))
    return (op.name, forced, tuple(inputs), tuple(call.params.items()), _tf32_allowed())


def choose(op: Op, call: Call) -> Choice:
    """The implementation and config that will run ``call``.

    Calls of one signature (see ``_signature``) get one answer, remembered until ``clear_cache``: a
    training loop's repeated calls skip the candidates' checks.
    """
    forced = forced_plugin()
    key = _signature(op, call, forced)
    if key is not None:
        try:  # the lookup hashes the key; testing it beforehand would hash it twice (docs/perf/call-path.md)
            chosen = _chosen.get(key)
        except TypeError:  # an unhashable argument
            key = chosen = None
        if chosen is not None:
            return chosen
    chosen = _choose(op, call, forced)
    if key is not None:
        if len(_chosen) >= CHOSEN_LIMIT:
            _chosen.clear()
        _chosen[key] = chosen
    return chosen


def _choose(op: Op, call: Call, forced: str | None) -> Choice:
    if forced:
        impl = registry.impl(op.name, forced)
        availability = registry.availability(impl)
        if not availability:
            raise UnsupportedError(f"{op.name}: plugin {forced!r} was forced but is not available: "
                                   f"{availability.reason}")
        why = impl.supports(call)
        if why:
            raise UnsupportedError(f"{op.name}: plugin {forced!r} was forced but cannot run "
                                   f"{call.describe()}: {why}")
        # the plugin's tuned config where it has one for this call's bucket (or the nearest), else its default
        winner = tuned(op, call, forced)
        if winner is not None:
            return Choice(forced, winner.config, f"forced, {winner.reason}", impl, True, winner.nearest)
        return Choice(forced, impl.config(), "forced", impl, True)
    reasons = []
    for choice in _candidates(op, call):
        why = choice.impl.supports(call)
        if why is None:
            return choice
        reasons.append(f"{choice.plugin}: {why}")
        if choice.reason != "default order" and (op.name, choice.plugin) not in _warned:
            _warned.add((op.name, choice.plugin))
            warnings.warn(f"kernelzoo: {op.name}: tuned plugin {choice.plugin!r} cannot run "
                          f"{call.describe()} ({why}); falling back", RuntimeWarning, stacklevel=3)
    detail = "; ".join(reasons) or f"no plugin is available on {call.device.type}"
    raise UnsupportedError(f"{op.name}: nothing can run {call.describe()}: {detail}")


def explain(op: str, *args: Any, **kwargs: Any) -> Choice:
    """What ``kernelzoo.ops.<op>(*args, **kwargs)`` would run, and why, without running it."""
    spec = registry.op(op)
    return choose(spec, spec.check(*args, **kwargs))


# Called after every run with (op, call, the choice that ran, seconds): see :func:`observe`.
Observer = Callable[[Op, Call, Choice, float], None]
_observers: contextvars.ContextVar[tuple[Observer, ...]] = contextvars.ContextVar("kernelzoo_observers",
                                                                                   default=())


@contextlib.contextmanager
def observe(observer: Observer) -> Iterator[None]:
    """Call ``observer(op, call, choice, seconds)`` after each op run inside the block.

    While anyone observes, each run is timed between device synchronisations (wall clock on
    the CPU), which serialises the GPU's queue: a profile, not a production mode.
    """
    token = _observers.set((*_observers.get(), observer))
    try:
        yield
    finally:
        _observers.reset(token)


def run_call(spec: Op, call: Call) -> Any:
    """Run a checked call on the chosen implementation; all of its outputs.

    An automatic choice whose ``run`` finds it cannot take the call after all (a tile that
    does not fit this GPU's shared memory, say) raises UnsupportedError; the next candidate
    runs instead, with one warning. A forced plugin's error reaches the caller.
    """
    observers = _observers.get()
    if not observers:  # the steady state, without _run's (outputs, choice) pair
        return _run_chosen(spec, call, choose(spec, call))
    synchronize = torch.cuda.synchronize if call.device.type == "cuda" else lambda: None
    synchronize()
    start = time.perf_counter()
    outputs, choice = _run(spec, call)
    synchronize()
    seconds = time.perf_counter() - start
    for observer in observers:
        observer(spec, call, choice, seconds)
    return outputs


def run_chosen(spec: Op, call: Call, choice: Choice) -> Any:
    """Run ``call`` on ``choice`` (made by :func:`choose` for a call of the same signature); the next candidate
    where the choice finds it cannot take the call after all, as in :func:`run_call`."""
    if _observers.get():
        return run_call(spec, call)
    return _run_chosen(spec, call, choice)


def _run_chosen(spec: Op, call: Call, choice: Choice) -> Any:
    try:
        return choice.impl.run(call, choice.config)
    except UnsupportedError as exc:
        if choice.forced:
            raise
        return _fall_back(spec, call, choice, exc)[0]


def _run(spec: Op, call: Call) -> tuple[Any, Choice]:
    choice = choose(spec, call)
    try:
        return choice.impl.run(call, choice.config), choice
    except UnsupportedError as exc:
        if choice.forced:
            raise
        first = exc
    return _fall_back(spec, call, choice, first)


def _fall_back(spec: Op, call: Call, choice: Choice, first: UnsupportedError) -> tuple[Any, Choice]:
    """The next candidate that runs ``call`` after ``choice`` raised ``first``, with one warning per op."""
    for other in _candidates(spec, call):
        if other.plugin == choice.plugin or other.impl.supports(call) is not None:
            continue
        if (spec.name, choice.plugin, "run") not in _warned:
            _warned.add((spec.name, choice.plugin, "run"))
            warnings.warn(f"kernelzoo: {spec.name}: {choice.plugin} cannot run {call.describe()} ({first}); "
                          f"running {other.plugin}", RuntimeWarning, stacklevel=4)
        try:
            return other.impl.run(call, other.config), other
        except UnsupportedError:
            continue
    raise first


def run_op(op: str, *args: Any, **kwargs: Any) -> Any:
    """Check the arguments and run the chosen implementation: all of its outputs (the extras
    a backward needs included, e.g. layer_norm's mean and rstd), never through torch autograd.
    Frameworks with their own autograd (mytorch) call ops this way."""
    bound = _remembered(op, False, args, kwargs)
    if bound is not None:
        return bound.run(args, kwargs)
    spec = registry.op(op)
    return run_call(spec, spec.check(*args, **kwargs))


# --- the fast path: what one argument signature fixes, found by a dictionary lookup ----------------------------
#
# A call's signature is each tensor argument's shape, strides, dtype, device and requires_grad, and every other
# argument's type and value, with the forced plugin, whether gradients are on and torch's TF32 switch for matrix
# products (the GEMM ops key TF32 calls apart: their flag "tf32"). It fixes the outcome of the
# op's checks (but for checks an op declares to read more: Op.checks_every_call), the checked call's parameters,
# the choice and whether autograd records the call. A steady-state call therefore computes its signature, builds
# its Call from the arguments and runs the choice: no checks, no choice, no Op lookup.

_PLAIN = frozenset({int, float, bool, str, type(None), torch.dtype})
_TENSORS = frozenset({torch.Tensor, torch.nn.Parameter})
_grad_enabled = torch.is_grad_enabled
BOUND_LIMIT = 4096


def _key(op: str, through_autograd: bool, args: tuple, kwargs: dict) -> tuple | None:
    """The call's signature (see above), flat: a tensor gives its shape first, any other argument its type first.
    None where an argument is of another kind (a tensor subclass, a list of tensors, an object): such calls take
    the checked path every time."""
    key: list[Any] = [op, through_autograd and _grad_enabled(), forced_plugin(), _tf32_allowed()]
    extend = key.extend
    for a in (*args, *kwargs.values()) if kwargs else args:
        kind = type(a)
        if kind in _TENSORS:
            extend((a.shape, a.stride(), a.dtype, a.device, a.requires_grad))
        elif kind in _PLAIN:
            extend((kind, a))
        elif (kind is tuple or kind is list) and all(type(v) is int for v in a):
            extend((kind, tuple(a)))
        else:
            return None
    if kwargs:
        key.append(tuple(kwargs))
    return tuple(key)


@dataclass(frozen=True, slots=True)
class _Bound:
    """What a signature fixes: the op, the choice, whether autograd records the call, and how to build the
    checked Call from the arguments: the inputs' names and their positions among the arguments (None: the op's
    checks run at every call, because it declares that they read more than the signature, or they put another
    tensor in an argument's place)."""

    spec: Op
    choice: Choice
    names: tuple[str, ...] | None
    positions: tuple[int, ...]
    params: dict[str, Any]
    autograd: bool

    def checked(self, args: tuple, kwargs: dict) -> Call:
        names = self.names
        if names is None:
            return self.spec.check(*args, **kwargs)
        flat = (*args, *kwargs.values()) if kwargs else args
        if len(names) == 1:
            return Call(self.spec, {names[0]: flat[self.positions[0]]}, self.params)
        return Call(self.spec, dict(zip(names, map(flat.__getitem__, self.positions))), self.params)

    def run(self, args: tuple, kwargs: dict) -> Any:
        """All of the implementation's outputs (``run_op``)."""
        return run_chosen(self.spec, self.checked(args, kwargs), self.choice)

    def call(self, args: tuple, kwargs: dict) -> Any:
        """What ``kernelzoo.ops.<op>`` returns, through autograd where the signature says so."""
        call = self.checked(args, kwargs)
        if self.autograd:
            return self.spec.result(call, _autograd_apply()(call, self.choice))
        return self.spec.result(call, _run_chosen(self.spec, call, self.choice))


_bound: dict[tuple, _Bound] = {}


def _bind(key: tuple, op: str, args: tuple, kwargs: dict, through_autograd: bool) -> _Bound:
    """Check a call (its errors reach the caller and nothing is kept), choose, and keep what its signature
    fixes."""
    spec = registry.op(op)
    call = spec.check(*args, **kwargs)
    choice = choose(spec, call)
    names: tuple[str, ...] | None = None
    positions: list[int] = []
    # parameters are shared by every call of the signature: only plain values may be (a tensor there would be
    # the first call's)
    plain = all(type(v) in _PLAIN or (type(v) is tuple and all(type(i) in _PLAIN for i in v))
                for v in call.params.values())
    if plain and not spec.checks_every_call:
        flat = (*args, *kwargs.values())
        for value in call.inputs.values():
            position = next((i for i, a in enumerate(flat) if a is value), None)
            if position is None:
                break
            positions.append(position)
        else:
            names = tuple(call.inputs)
    bound = _Bound(spec, choice, names, tuple(positions), call.params,
                   through_autograd and spec.needs_autograd(call))
    if len(_bound) >= BOUND_LIMIT:
        _bound.clear()
    _bound[key] = bound
    return bound


def _remembered(op: str, through_autograd: bool, args: tuple, kwargs: dict) -> _Bound | None:
    """What the call's signature fixes (checked and bound at its first call), or None: the call is observed (timed,
    through the checked path) or its signature cannot be told (see _key)."""
    if _observers.get():
        return None
    key = _key(op, through_autograd, args, kwargs)
    if key is None:
        return None
    return _bound.get(key) or _bind(key, op, args, kwargs, through_autograd)


registry_on_change(forget_choices)


# Set while a custom op's backward runs its kernelzoo ops: torch.compile traces that backward, and the ops must be
# traced as custom ops there too
_through_library: contextvars.ContextVar[bool] = contextvars.ContextVar("kernelzoo_through_library", default=False)
_is_compiling = torch.compiler.is_compiling


@contextlib.contextmanager
def through_library() -> Iterator[None]:
    """Inside the block, ``kernelzoo.ops.<op>`` calls ``torch.ops.kernelzoo.<op>``, as under torch.compile."""
    token = _through_library.set(True)
    try:
        yield
    finally:
        _through_library.reset(token)


def call_op(op: str, *args: Any, **kwargs: Any) -> Any:
    """Check the arguments, choose an implementation, run it (through autograd if needed).

    Under torch.compile the call is the custom op ``torch.ops.kernelzoo.<op>`` instead: the choice is made
    when the compiled program runs (the custom op's implementation is this same path), never while tracing.
    """
    if _is_compiling() or _through_library.get():
        from kernelzoo import library

        return library.call(op, args, kwargs)
    bound = _remembered(op, True, args, kwargs)
    if bound is not None:
        return bound.call(args, kwargs)
    spec = registry.op(op)
    call = spec.check(*args, **kwargs)
    if spec.needs_autograd(call):
        return spec.autograd(call)
    return spec.result(call, run_call(spec, call))
