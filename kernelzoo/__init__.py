"""kernelzoo: deep-learning kernels in every plugin kind, with an autotuning database.

    import kernelzoo
    y = kernelzoo.ops.softmax(x, dim=-1)          # runs the tuned (or default) plugin
    with kernelzoo.use("openmp"):                  # force one
        y = kernelzoo.ops.softmax(x)
    kernelzoo.explain("softmax", x).plugin         # what would run, and why
    with kernelzoo.record() as rec:                # the keys a block of code calls
        model(x)
    print(kernelzoo.tune(calls=rec))               # tune exactly those, store the winners
"""

from __future__ import annotations

import importlib
from typing import Any

from kernelzoo import errors, ops
from kernelzoo.backends.vml import settle_vml_dispatch
from kernelzoo.db.lookup import winners as _winners
from kernelzoo.dispatch import Choice, explain, set_winner_source, use
from kernelzoo.registry import Call, Implementation, Op, registry

set_winner_source(_winners)  # tuned winners; the database is opened at the first op call, not here
settle_vml_dispatch()  # before any op runs on several threads (kernelzoo/backends/vml.py says why)

__version__ = "0.1.0"
__all__ = ["Call", "Choice", "Implementation", "Op", "TuneReport", "errors", "explain", "nn", "ops", "record",
           "registry", "tune", "use"]

# loaded on first use: the tuner pulls in SQLAlchemy and Optuna, the layers torch.nn
_LAZY = {"tune": ("kernelzoo.autotune", "tune"), "record": ("kernelzoo.autotune", "record"),
         "TuneReport": ("kernelzoo.autotune", "TuneReport"), "nn": ("kernelzoo.nn", None)}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'kernelzoo' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = importlib.import_module(module)
    value = getattr(value, attr) if attr else value
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
