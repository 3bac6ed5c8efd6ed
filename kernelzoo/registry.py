"""Op specs, implementations, and the registry that finds them through entry points: the names plugins and
third-party code import, re-exported from where they live.

- :mod:`kernelzoo.spec`: the op's spec (:class:`Op`, :class:`Call`, :class:`Case`, :class:`Derivative`) and
  the helpers its checks share;
- :mod:`kernelzoo.implementation`: the implementation contract (:class:`Implementation`,
  :class:`Availability`, :class:`Broken`);
- :mod:`kernelzoo.discovery`: the :class:`Registry` and the entry points it reads.
"""

from kernelzoo.discovery import ENTRY_POINT_GROUP, EXTRA_PLUGINS_ENV, Registry, registry
from kernelzoo.implementation import TUNING_DECLARATIONS, Availability, Broken, Implementation, core_bases
from kernelzoo.spec import (
    DTYPE_NAMES,
    FLOATS,
    FP8,
    BadCase,
    Call,
    Case,
    Derivative,
    Input,
    Op,
    _ranges,
    check_same,
    check_same_device,
    check_tensor,
    clone_input,
    copy_input_,
    dtype_name,
    input_tensors,
    is_fake,
    parse_dtype,
    poison_outputs,
    randn,
    value_range,
)

__all__ = [
    "DTYPE_NAMES",
    "ENTRY_POINT_GROUP",
    "EXTRA_PLUGINS_ENV",
    "FLOATS",
    "FP8",
    "TUNING_DECLARATIONS",
    "Availability",
    "BadCase",
    "Broken",
    "Call",
    "Case",
    "Derivative",
    "Implementation",
    "Input",
    "Op",
    "Registry",
    "_ranges",
    "check_same",
    "check_same_device",
    "check_tensor",
    "clone_input",
    "copy_input_",
    "core_bases",
    "dtype_name",
    "input_tensors",
    "is_fake",
    "parse_dtype",
    "poison_outputs",
    "randn",
    "registry",
    "value_range",
]
