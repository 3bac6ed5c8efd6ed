"""Op specs, implementations, and the registry that finds them through entry points.

An :class:`Op` owns every fact of an op that holds whatever computes it: argument checks,
the float64 reference, tolerance, FLOP and byte counts, shape buckets, representative shapes
and conformance cases. An :class:`Implementation` owns only how one plugin kind computes it.
Plugins (built-in ones too) are found through the entry-point group ``kernelzoo.plugins``:
each entry point names a module or package; every ``Op`` subclass and every implementation
class with ``op`` and ``plugin`` set that is defined in it (or in its submodules) is registered.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import inspect
import math
import os
import pkgutil
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import torch

from kernelzoo.backends.sources import expand_includes
from kernelzoo.errors import ArgumentError, DeviceError, DTypeError, UnknownError
from kernelzoo.tolerance import Mismatch, Tolerance, check_close, tolerance_for

ENTRY_POINT_GROUP = "kernelzoo.plugins"
# Modules registered besides the entry points (comma-separated), so a plugin can be tested and
# tuned before it is packaged: KERNELZOO_EXTRA_PLUGINS=mypkg.kernels kernelzoo tune --op relu
EXTRA_PLUGINS_ENV = "KERNELZOO_EXTRA_PLUGINS"
FLOATS = (torch.float32, torch.float16, torch.bfloat16)
DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


class _PoisonFlag(threading.local):
    """Poisoning outputs (conformance tests) shows elements a kernel never wrote; per thread. The class
    attribute is every thread's default, so reading the flag raises nothing (0.34 -> 0.05 µs a read)."""

    on = False


_poison = _PoisonFlag()


def dtype_name(dtype: torch.dtype) -> str:
    """'float32' for torch.float32, and so on."""
    return DTYPE_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def parse_dtype(name: str) -> torch.dtype:
    """torch dtype from 'float32' / 'fp16' / 'bf16' style names."""
    aliases = {"fp32": "float32", "f32": "float32", "fp16": "float16", "half": "float16",
               "f16": "float16", "bf16": "bfloat16"}
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
        value = next(iter(self.inputs.values()))
        return value[0] if isinstance(value, tuple) else value

    @property
    def device(self) -> torch.device:
        return self.first.device

    @property
    def dtype(self) -> torch.dtype:
        return self.first.dtype

    def empty(self, shape: Sequence[int], dtype: torch.dtype | None = None) -> torch.Tensor:
        """A new output tensor on the call's device (NaN-filled while outputs are poisoned)."""
        out = torch.empty(tuple(shape), dtype=dtype or self.dtype, device=self.device)
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


class Op:
    """The spec of one op. Subclasses set ``name`` and implement ``check`` and ``reference``."""

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
        """Whether this call must record a backward (ops with a backward override it)."""
        return False

    def autograd(self, call: Call) -> Any:
        """Run ``call`` through the op's ``torch.autograd.Function`` (ops with a backward)."""
        raise NotImplementedError(f"{self.name} has no backward")

    @functools.cached_property
    def signature(self) -> inspect.Signature:
        return inspect.signature(self.check)


@dataclass(frozen=True)
class Availability:
    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


class Implementation:
    """How one plugin kind computes one op. Subclasses set ``op``, ``plugin`` and ``run``."""

    op: ClassVar[str]
    plugin: ClassVar[str]
    # dtypes by device type; float32 is the CPU dtype of every compiled plugin
    dtypes: ClassVar[Mapping[str, Sequence[torch.dtype]]] = {
        "cpu": (torch.float32,), "cuda": FLOATS}
    config_space: ClassVar[Mapping[str, Sequence[Any]]] = {}
    default_config: ClassVar[Mapping[str, Any]] = {}
    # configs (overrides of the default) that measured fastest on some device and shape: a TPE search tries
    # them right after the default, so that a short search reaches them
    tuning_seeds: ClassVar[Sequence[Mapping[str, Any]]] = ()
    # kernel sources beside the module; their text is part of the tuning key
    sources: ClassVar[Sequence[str]] = ()

    def available(self) -> Availability:
        """Whether this plugin can run at all here (compiler, GPU, library), with the reason."""
        return Availability(True)

    def devices(self) -> tuple[str, ...]:
        """Device types this implementation can run on in this process."""
        return tuple(self.dtypes)

    def supports(self, call: Call) -> str | None:
        """None if this implementation can run ``call``, else the reason it cannot."""
        device = call.device.type
        if device not in self.devices():
            return f"runs on {' or '.join(self.devices())}, not {device}"
        if call.dtype not in self.dtypes[device]:
            allowed = ", ".join(dtype_name(d) for d in self.dtypes[device])
            return f"takes {allowed} on {device}, not {dtype_name(call.dtype)}"
        return None

    def run(self, call: Call, config: Mapping[str, Any]) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """Compute the op for ``call`` with launch parameters ``config``."""
        raise NotImplementedError

    def config(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The default config with ``overrides`` applied."""
        return {**self.default_config, **(overrides or {})}

    def source_dir(self) -> Path:
        return Path(inspect.getfile(type(self))).parent

    def read_source(self, name: str) -> str:
        """The kernel source ``name`` beside the module, its ``#include "path"`` lines pasted in."""
        return expand_includes((self.source_dir() / name).read_text(), name, self.source_dir())

    @functools.cached_property
    def code_files(self) -> dict[str, str]:
        """Hash of each file of the kernel's code, by its path inside its package ("kernelzoo_plugins/softmax/
        triton.py"): the implementation's module, the modules of its plugin base classes, its kernel sources.

        Which base classes count comes from the class's MRO: every class but the core's own bases
        (:func:`core_bases`), so a shared wrapper or a family's kernel module counts wherever it lives. Its config
        space is not code: a record stays current while these files are unchanged and its config is in the space,
        so a module's hash leaves out the tuning declarations of its classes (:data:`TUNING_DECLARATIONS`).
        """
        files: dict[str, str] = {}
        for cls in type(self).__mro__:
            if cls in core_bases() or cls is object or not issubclass(cls, Implementation):
                continue
            module = sys.modules[cls.__module__]
            name = _package_path(module)
            if name not in files:
                files[name] = _digest(_without_tuning_declarations(inspect.getsource(module)))
        base = _package_path(sys.modules[type(self).__module__]).rpartition("/")[0]
        for source in self.sources:
            files[f"{base}/{source}" if base else source] = _digest(self.read_source(source))
        return files

    @functools.cached_property
    def source_hash(self) -> str:
        """Hash of the kernel's code (:attr:`code_files`), not of its config space: a record's code hash."""
        h = hashlib.sha256()
        for name, digest in self.code_files.items():
            h.update(f"{name}\0{digest}\0".encode())
        return h.hexdigest()[:16]

    def in_space(self, config: Mapping[str, Any]) -> bool:
        """Whether ``config`` is a point of the config space: every key of the space with a value in its list, and
        no key the plugin does not know."""
        if not isinstance(config, Mapping) or not set(self.config_space) <= set(config) <= (
                set(self.config_space) | set(self.default_config)):
            return False
        try:
            return all(config[k] in list(v) for k, v in self.config_space.items())
        except TypeError:  # a value that cannot be compared
            return False

    @property
    def key(self) -> str:
        return f"{self.op}/{self.plugin}"


@dataclass
class Broken(Implementation):
    """A plugin module that failed to import: listed as unavailable with the error."""

    op_name: str = ""
    plugin_name: str = ""
    error: str = ""

    def __post_init__(self) -> None:
        self.op, self.plugin = self.op_name, self.plugin_name  # type: ignore[misc]

    def available(self) -> Availability:
        return Availability(False, f"failed to import: {self.error}")


def core_bases() -> frozenset[type]:
    """The core's own implementation base classes: :class:`Implementation` and the kind bases the core ships
    (the direct subclasses of it defined in the ``kernelzoo`` package, such as the Triton launcher). Their code is
    the launcher's, not a kernel's: editing them leaves records current."""
    found = {Implementation}
    for cls in Implementation.__subclasses__():
        if cls.__module__.split(".")[0] == "kernelzoo":
            found.add(cls)
    return frozenset(found)


def _package_path(module: ModuleType) -> str:
    """'kernelzoo_plugins/softmax/triton.py': a module's file under its top-level package's name."""
    top = module.__name__.split(".")[0]
    path = Path(inspect.getfile(module))
    if top == module.__name__ and not hasattr(module, "__path__"):  # a top-level single-file module
        return path.name
    root = Path(inspect.getfile(sys.modules[top])).parent if top in sys.modules else path.parent
    try:
        return f"{top}/{path.relative_to(root).as_posix()}"
    except ValueError:  # a module outside its package's folder (a single-file package)
        return path.name


# Class attributes that say how to tune a kernel, not what it computes: editing them keeps records current.
TUNING_DECLARATIONS = frozenset({"config_space", "default_config", "tuning_seeds"})


def _without_tuning_declarations(source: str) -> str:
    """``source`` without the lines of class-level assignments to :data:`TUNING_DECLARATIONS` (comments and
    everything else kept: a comment edit is a code edit)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    drop: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for statement in node.body:
            targets = statement.targets if isinstance(statement, ast.Assign) else \
                [statement.target] if isinstance(statement, ast.AnnAssign) else []
            if any(isinstance(t, ast.Name) and t.id in TUNING_DECLARATIONS for t in targets):
                drop.update(range(statement.lineno, (statement.end_lineno or statement.lineno) + 1))
    return "".join(line for i, line in enumerate(source.splitlines(keepends=True), 1) if i not in drop)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Registry:
    """Every op and implementation found through the ``kernelzoo.plugins`` entry points."""

    def __init__(self) -> None:
        self.ops: dict[str, Op] = {}
        self.impls: dict[str, dict[str, Implementation]] = {}
        self._availability: dict[str, Availability] = {}
        self._loaded = False
        self._lock = threading.RLock()

    # --- loading -----------------------------------------------------------------------
    def load(self) -> Registry:
        if self._loaded:  # every op call asks: no lock once loaded
            return self
        with self._lock:
            if not self._loaded:
                self._loaded = True
                for ep in entry_points(group=ENTRY_POINT_GROUP):
                    self._load_entry_point(ep.name, ep.value)
                for name in filter(None, (n.strip() for n in os.environ.get(EXTRA_PLUGINS_ENV, "").split(","))):
                    self._load_entry_point(EXTRA_PLUGINS_ENV, name)
        return self

    def reload(self) -> Registry:
        """Forget everything and discover the entry points again (new plugins installed)."""
        with self._lock:
            self.__init__()  # type: ignore[misc]
            return self.load()

    def _load_entry_point(self, name: str, target: str) -> None:
        try:
            module = importlib.import_module(target)
        except Exception as exc:  # a broken plugin must not break the others
            print(f"kernelzoo: plugin {name}={target} failed to import: {exc}",
                  file=sys.stderr)
            return
        self.register_module(module)

    def register_module(self, module: ModuleType) -> None:
        """Register the ops and implementations defined in ``module`` and its submodules."""
        for mod, error in _walk(module):
            if error is not None:
                op_name, plugin = mod.rsplit(".", 2)[-2:]
                self.add_impl(Broken(op_name=op_name, plugin_name=plugin, error=error))
                continue
            for obj in vars(mod).values():
                if not isinstance(obj, type) or obj.__module__ != mod.__name__:
                    continue
                if obj.__name__.startswith("_"):
                    continue
                if issubclass(obj, Op) and "name" in vars(obj):
                    self.add_op(obj())
                elif issubclass(obj, Implementation) and hasattr(obj, "op") and hasattr(obj, "plugin"):
                    self.add_impl(obj())

    def add_op(self, op: Op) -> None:
        self.ops[op.name] = op
        self.impls.setdefault(op.name, {})

    def add_impl(self, impl: Implementation) -> None:
        self.impls.setdefault(impl.op, {})[impl.plugin] = impl
        self._availability.pop(impl.key, None)

    # --- lookup ------------------------------------------------------------------------
    def op(self, name: str) -> Op:
        self.load()
        try:
            return self.ops[name]
        except KeyError:
            raise UnknownError(f"unknown op {name!r}; known ops: {', '.join(sorted(self.ops))}") from None

    def implementations(self, op: str) -> list[Implementation]:
        self.op(op)
        return list(self.impls[op].values())

    def is_current(self, op: str, plugin: str, source_hash: str, config: Mapping[str, Any] | None = None) -> bool:
        """Whether a record of ``op``/``plugin`` tuned under code hash ``source_hash`` still applies: the plugin is
        registered, its kernel code is the code it was measured on, and ``config`` (where given) is still a point
        of its config space."""
        impl = self.load().impls.get(op, {}).get(plugin)
        return (impl is not None and impl.source_hash == source_hash
                and (config is None or impl.in_space(config)))

    def impl(self, op: str, plugin: str) -> Implementation:
        impls = {i.plugin: i for i in self.implementations(op)}
        if plugin not in impls:
            raise UnknownError(f"{op} has no plugin {plugin!r}; its plugins: {', '.join(sorted(impls))}")
        return impls[plugin]

    def availability(self, impl: Implementation) -> Availability:
        """``impl.available()``, asked once per process."""
        if impl.key not in self._availability:
            try:
                self._availability[impl.key] = impl.available()
            except Exception as exc:  # availability probes must not raise
                self._availability[impl.key] = Availability(False, f"availability check failed: {exc}")
        return self._availability[impl.key]

    def __iter__(self) -> Iterator[Implementation]:
        self.load()
        for op in sorted(self.impls):
            yield from self.impls[op].values()


def _walk(module: ModuleType) -> Iterator[tuple[Any, str | None]]:
    """The module and, if a package, all its submodules; a failed import yields (name, error)."""
    yield module, None
    if not hasattr(module, "__path__"):
        return
    for info in pkgutil.walk_packages(module.__path__, module.__name__ + ".", onerror=lambda _: None):
        try:
            yield _import_keeping_parent(info.name), None
        except Exception as exc:  # recorded as a broken plugin
            yield info.name, f"{type(exc).__name__}: {exc}"


def _import_keeping_parent(name: str) -> ModuleType:
    """Import ``name`` without rebinding it in its parent package.

    Plugin modules are named after their kind (``torch.py``, ``triton.py``); Python binds an
    imported submodule as an attribute of its package, which would replace the op package's
    own ``import torch`` with the plugin module. The package keeps its global.
    """
    parent_name, _, child = name.rpartition(".")
    parent = sys.modules.get(parent_name)
    missing = object()
    previous = vars(parent).get(child, missing) if parent is not None else missing
    module = importlib.import_module(name)
    if previous is not missing and previous is not module:
        setattr(parent, child, previous)
    return module


registry = Registry()


# --- helpers for op checks -------------------------------------------------------------

def check_tensor(op: str, name: str, x: object, dtypes: Sequence[torch.dtype] = FLOATS) -> torch.Tensor:
    """Raise unless ``x`` is a tensor of one of ``dtypes``."""
    if not isinstance(x, torch.Tensor):
        raise ArgumentError(f"{op}: {name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in dtypes:
        allowed = ", ".join(dtype_name(d) for d in dtypes)
        raise DTypeError(f"{op}: {name} must be {allowed}, got {x.dtype}")
    return x


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


def value_range(t: torch.Tensor, ignore: int | None = None) -> tuple[int, int]:
    """(min, max) of a non-empty integer tensor, entries equal to ``ignore`` counted as 0.

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
    values = t if ignore is None else torch.where(t == ignore, torch.zeros((), dtype=t.dtype, device=t.device), t)
    low, high = torch.stack(torch.aminmax(values)).tolist()
    if stamp is not None:
        def forget(ref: weakref.ref, key: int = key) -> None:
            if key in _ranges and _ranges[key][0] is ref:
                del _ranges[key]
        _ranges[key] = (weakref.ref(t, forget), stamp, (low, high))
    return low, high
