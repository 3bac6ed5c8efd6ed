"""gelu_backward in OpenMP C: the shared binary functions (plugins/_elementwise/binary_openmp.h), built
with both formulas; the call's approximate picks the functions (its kernel_name)."""

from __future__ import annotations

from kernelzoo_plugins._elementwise.openmp import BinaryOpenMP, binary_cdef


class GeluBackwardOpenMP(BinaryOpenMP):
    op = "gelu_backward"
    cdef = binary_cdef("gelu_backward_none", "gelu_backward_tanh")
