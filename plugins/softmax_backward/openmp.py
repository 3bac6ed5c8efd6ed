"""softmax's gradient in OpenMP C: rows in parallel (a row each), or each row split across the threads
when whole rows would leave threads idle; vectorised loops within a row (see openmp.c)."""

from __future__ import annotations

import math

import torch

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.registry import Call

from . import rows_of, to_shape


class SoftmaxBackwardOpenMP(OpenMPImplementation):
    op = "softmax_backward"
    cdef = """
    void softmax_backward_rows(const float *g, const float *y, float *dx, long long rows, long long cols,
                               long long g_stride, long long y_stride, int threads);
    void softmax_backward_split(const float *g, const float *y, float *dx, long long rows, long long cols,
                                long long g_stride, long long y_stride, int threads, double *partial);
    """
    # split_cols: the shortest row worth splitting across threads (two barriers per row), as softmax's
    config_space = {"threads": thread_counts(), "split_cols": [8192, 32768, 131072]}
    default_config = {"threads": thread_counts()[-1], "split_cols": 32768}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        g2d, y2d = rows_of(call)  # (rows, cols), column stride 1
        rows, cols = y2d.shape
        dx2d = call.empty((rows, cols))
        if rows and cols:
            threads = config["threads"]
            strides = (g2d.stride(0), y2d.stride(0))
            # whole rows per thread leave this share of the threads idle (1 row, 2 threads: 1/2)
            idle = 1 - rows / (math.ceil(rows / threads) * threads)
            if idle >= 1 / 8 and cols >= config["split_cols"]:
                partial = torch.empty(threads, dtype=torch.float64)
                self._lib.softmax_backward_split(ptr(g2d), ptr(y2d), ptr(dx2d), rows, cols, *strides, threads,
                                                 ptr(partial, "double *"))
            else:
                self._lib.softmax_backward_rows(ptr(g2d), ptr(y2d), ptr(dx2d), rows, cols, *strides, threads)
        return to_shape(dx2d, call)
