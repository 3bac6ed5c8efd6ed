"""kernelzoo: deep-learning kernels in every plugin kind, with an autotuning database.

    import kernelzoo
    y = kernelzoo.ops.softmax(x, dim=-1)          # runs the tuned (or default) plugin
    with kernelzoo.use("openmp"):                  # force one
        y = kernelzoo.ops.softmax(x)
    kernelzoo.explain("softmax", x).plugin         # what would run, and why
"""

from kernelzoo import errors, ops
from kernelzoo.db.lookup import winners as _winners
from kernelzoo.dispatch import Choice, explain, set_winner_source, use
from kernelzoo.registry import Call, Implementation, Op, registry

set_winner_source(_winners)  # tuned winners; the database is opened at the first op call, not here

__version__ = "0.1.0"
__all__ = ["Call", "Choice", "Implementation", "Op", "errors", "explain", "ops", "registry", "use"]
