"""relu_backward in OpenMP C: the shared binary functions (plugins/_elementwise/binary_openmp.h) with
y <= 0 ? 0 : grad."""

from __future__ import annotations

from kernelzoo_plugins._elementwise.openmp import BinaryOpenMP, binary_cdef


class ReluBackwardOpenMP(BinaryOpenMP):
    op = "relu_backward"
    cdef = binary_cdef("relu_backward")
