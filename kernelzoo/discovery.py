"""Discovery: the registry of ops and implementations, found through entry points.

Plugins (built-in ones too) are found through the entry-point group ``kernelzoo.plugins``:
each entry point names a module or package; every ``Op`` subclass and every implementation
class with ``op`` and ``plugin`` set that is defined in it (or in its submodules) is registered.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any

from kernelzoo.errors import UnknownError
from kernelzoo.implementation import Availability, Broken, Implementation
from kernelzoo.spec import Op

ENTRY_POINT_GROUP = "kernelzoo.plugins"
# Modules registered besides the entry points (comma-separated), so a plugin can be tested and
# tuned before it is packaged: KERNELZOO_EXTRA_PLUGINS=mypkg.kernels kernelzoo tune --op relu
EXTRA_PLUGINS_ENV = "KERNELZOO_EXTRA_PLUGINS"

# called after every change of the registry (an op or implementation added, a reload): caches of what was chosen
# for a call (kernelzoo.dispatch) must not outlive the implementation they chose
_listeners: list[Callable[[], None]] = []


def on_change(listener: Callable[[], None]) -> None:
    """Call ``listener()`` after every change of the registry."""
    _listeners.append(listener)


def _changed() -> None:
    for listener in _listeners:
        listener()


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
            _changed()
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
        _changed()

    def add_impl(self, impl: Implementation) -> None:
        self.impls.setdefault(impl.op, {})[impl.plugin] = impl
        self._availability.pop(impl.key, None)
        _changed()

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
