"""dropout in OpenMP C: one parallel, vectorised loop that hashes each element's index."""

from __future__ import annotations

from typing import ClassVar

from kernelzoo_plugins._elementwise.openmp import UnaryOpenMP

from kernelzoo.registry import Call

from . import scale, seed_halves, threshold


class DropoutOpenMP(UnaryOpenMP):
    op = "dropout"
    cdef: ClassVar[str] = """void dropout(const float *x, float *y, long long n, uint32_t seed_lo, uint32_t seed_hi,
                                          uint32_t threshold, float scale, int threads);"""
    function: ClassVar[str] = "dropout"

    def arguments(self, call: Call) -> tuple:
        p = call.params["p"]
        return (*seed_halves(call.params["seed"]), threshold(p), scale(p))
