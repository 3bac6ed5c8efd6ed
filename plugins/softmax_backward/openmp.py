"""softmax's gradient in OpenMP C: rows in parallel (a row each), or each row split across the threads
when whole rows would leave threads idle; vectorised loops within a row (see openmp.c)."""

from __future__ import annotations

import torch
from kernelzoo_plugins._rows.softmax import RowKernels, split_rows

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts


class SoftmaxBackwardOpenMP(RowKernels, OpenMPImplementation):
    op = "softmax_backward"
    row_inputs = ("grad", "y")
    cdef = """
    void softmax_backward_rows(const float *g, const float *y, float *dx, long long rows, long long cols,
                               long long g_stride, long long y_stride, int threads);
    void softmax_backward_split(const float *g, const float *y, float *dx, long long rows, long long cols,
                                long long g_stride, long long y_stride, int threads, double *partial);
    """
    # split_cols: the shortest row worth splitting across threads (two barriers per row), as softmax's
    config_space = {"threads": thread_counts(), "split_cols": [8192, 32768, 131072]}
    default_config = {"threads": thread_counts()[-1], "split_cols": 32768}

    def _launch(self, g2d: torch.Tensor, y2d: torch.Tensor, dx2d: torch.Tensor, config: dict) -> None:
        rows, cols = y2d.shape
        threads = config["threads"]
        strides = (g2d.stride(0), y2d.stride(0))
        if split_rows(rows, cols, threads, config["split_cols"]):
            partial = torch.empty(threads, dtype=torch.float64)
            self._lib.softmax_backward_split(ptr(g2d), ptr(y2d), ptr(dx2d), rows, cols, *strides, threads,
                                             ptr(partial, "double *"))
        else:
            self._lib.softmax_backward_rows(ptr(g2d), ptr(y2d), ptr(dx2d), rows, cols, *strides, threads)
