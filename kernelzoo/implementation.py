"""The implementation contract: how one plugin kind computes one op, and whether it can here."""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import torch

from kernelzoo.backends.sources import expand_includes
from kernelzoo.spec import FLOATS, Call, dtype_name


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
        triton.py"): the implementation's module, the modules of its plugin base classes, the family modules they
        take kernels and helpers from (:func:`_family_modules`), its kernel sources.

        Which base classes count comes from the class's MRO: every class but the core's own bases
        (:func:`core_bases`), so a shared wrapper or a family's kernel module counts wherever it lives. Its config
        space is not code: a record stays current while these files are unchanged and its config is in the space,
        so a module's hash leaves out the tuning declarations of its classes (:data:`TUNING_DECLARATIONS`).
        """
        files: dict[str, str] = {}
        modules = [sys.modules[cls.__module__] for cls in type(self).__mro__
                   if cls not in core_bases() and cls is not object and issubclass(cls, Implementation)]
        for module in [*modules, *_family_modules(modules)]:
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


def _family_modules(modules: list[ModuleType]) -> list[ModuleType]:
    """The family modules whose code ``modules`` use, and those these use in turn: modules of the same top-level
    package under a folder or file whose name starts with an underscore (``kernelzoo_plugins/_rows/triton.py``),
    from which a module holds a function, class, Triton kernel or the module itself. An op's own package (its
    spec, ``kernelzoo_plugins/softmax/__init__.py``) is no family module: editing its checks keeps records."""
    found: dict[str, ModuleType] = {}
    todo = list(modules)
    while todo:
        module = todo.pop()
        top = module.__name__.split(".")[0]
        for value in list(vars(module).values()):
            # a Triton kernel wraps its function (fn), whose module is the kernel's, interpreted or compiled
            name = value.__name__ if isinstance(value, ModuleType) else \
                getattr(getattr(value, "fn", None) or value, "__module__", None)
            if not isinstance(name, str) or name.split(".")[0] != top or name in found:
                continue
            if not any(part.startswith("_") and not part.startswith("__") for part in name.split(".")[1:]):
                continue
            other = sys.modules.get(name)
            if other is not None and other not in modules:
                found[name] = other
                todo.append(other)
    return [found[name] for name in sorted(found)]


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
