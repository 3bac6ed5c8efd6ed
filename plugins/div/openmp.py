"""div in OpenMP C: the shared binary functions (plugins/_elementwise/binary_openmp.h) with a / b."""

from __future__ import annotations

from kernelzoo_plugins._elementwise.openmp import BinaryOpenMP, binary_cdef


class DivOpenMP(BinaryOpenMP):
    op = "div"
    cdef = binary_cdef("div")
