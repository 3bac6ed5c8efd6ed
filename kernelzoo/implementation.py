"""The implementation contract: how one plugin kind computes one op, and whether it can here."""

from __future__ import annotations

import functools
import hashlib
import inspect
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
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
    def source_hash(self) -> str:
        """Hash of the implementation's module and kernel sources, and its config space.

        Modules of base classes that plugins share (in ``kernelzoo_plugins`` or a
        ``kernelzoo.backends.triton_*`` kernel module) count too: editing a shared wrapper
        expires the winners of every op built on it. The core's own bases do not.
        """
        h = hashlib.sha256()
        modules = [type(self).__module__]
        for cls in type(self).__mro__[1:]:
            if cls.__module__.startswith(("kernelzoo_plugins.", "kernelzoo.backends.triton_")) and \
                    cls.__module__ not in modules:
                modules.append(cls.__module__)
        for module in modules:
            h.update(inspect.getsource(sys.modules[module]).encode())
        for name in self.sources:
            h.update(self.read_source(name).encode())
        h.update(repr(sorted((k, list(v)) for k, v in self.config_space.items())).encode())
        return h.hexdigest()[:16]

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
