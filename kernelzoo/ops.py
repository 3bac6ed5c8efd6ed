"""``kernelzoo.ops.<name>``: one function per registered op, dispatched to the chosen plugin.

The functions are made from the registry on first access, so ops of third-party plugins
appear here too; each carries its op's signature and docstring. Under torch.compile each becomes
the custom op ``torch.ops.kernelzoo.<name>`` (see :mod:`kernelzoo.library`), defined at the first
access of any of them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from kernelzoo import library
from kernelzoo.dispatch import call_op
from kernelzoo.registry import registry


@functools.cache
def _function(name: str) -> Callable[..., Any]:
    op = registry.op(name)
    library.register()  # torch.ops.kernelzoo.<op>, which torch.compile traces instead of this function's body
    # a partial, not a wrapper function: one Python frame less a call (docs/perf/call-path.md)
    run = functools.partial(call_op, name)
    run.__name__ = run.__qualname__ = name  # type: ignore[attr-defined]
    run.__doc__ = type(op).__doc__
    run.__signature__ = op.signature  # type: ignore[attr-defined]
    return run


def __getattr__(name: str) -> Callable[..., Any]:
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        function = _function(name)
    except KeyError as exc:
        raise AttributeError(str(exc)) from None
    # kept as a module attribute: later lookups skip this hook, which would run at every call. The function
    # finds its op in the registry at each call, so it stays right after a registry.reload().
    globals()[name] = function
    return function


def __dir__() -> list[str]:
    return sorted(registry.load().ops)
