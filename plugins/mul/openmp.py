"""mul in OpenMP C: the family's binary loops (plugins/_elementwise/binary_openmp.h) with a·b."""

from __future__ import annotations

from kernelzoo_plugins._elementwise.openmp import BinaryOpenMP, binary_cdef


class MulOpenMP(BinaryOpenMP):
    op = "mul"
    cdef = binary_cdef("mul")
