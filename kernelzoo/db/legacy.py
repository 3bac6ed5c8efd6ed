"""Records of kernelzoo 0.1.0, whose hash covered the kernel's code and its config space together.

Such a record is current for the installed code when that old hash, computed from the installed
implementation, still matches it: it is then re-keyed to the code hash. The schema migration does
this for a database of that release, ``db import`` for its exports, and the shipped files were
converted the same way.
"""

from __future__ import annotations

import hashlib
import inspect
import sys

from kernelzoo.registry import Implementation, registry


def legacy_hash(impl: Implementation) -> str:
    """The hash kernelzoo 0.1.0 gave ``impl``: its module, the plugin modules of its base classes (those in
    ``kernelzoo_plugins`` and the ``kernelzoo.backends.triton_*`` kernel modules), its sources, its config space."""
    h = hashlib.sha256()
    modules = [type(impl).__module__]
    for cls in type(impl).__mro__[1:]:
        if cls.__module__.startswith(("kernelzoo_plugins.", "kernelzoo.backends.triton_")) and \
                cls.__module__ not in modules:
            modules.append(cls.__module__)
    for module in modules:
        h.update(inspect.getsource(sys.modules[module]).encode())
    for name in impl.sources:
        h.update(impl.read_source(name).encode())
    h.update(repr(sorted((k, list(v)) for k, v in impl.config_space.items())).encode())
    return h.hexdigest()[:16]


def rekey(op: str, plugin: str, old_hash: str) -> tuple[str, dict[str, str]] | None:
    """(code hash, code files) of the installed ``op``/``plugin`` if ``old_hash`` is its 0.1.0 hash, else None."""
    impl = registry.load().impls.get(op, {}).get(plugin)
    if impl is None:
        return None
    try:
        current = legacy_hash(impl)
    except (OSError, TypeError, KeyError):  # a module without source (a zip import, say)
        return None
    return (impl.source_hash, dict(impl.code_files)) if current == old_hash else None
