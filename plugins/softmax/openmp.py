"""softmax in OpenMP C: rows in parallel (a row each), or each row split across the threads when
whole rows would leave threads idle; vectorised loops within a row (see openmp.c for the passes)."""

from __future__ import annotations

import torch
from kernelzoo_plugins._rows.softmax import RowKernels, split_rows

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts


class SoftmaxOpenMP(RowKernels, OpenMPImplementation):
    op = "softmax"
    cdef = """
    void softmax_rows(const float *x, float *y, long long rows, long long cols, long long x_stride,
                      long long short_cols, int threads);
    void softmax_split(const float *x, float *y, long long rows, long long cols, long long x_stride,
                       int threads, float *partial);
    """
    # split_cols: the shortest row worth splitting across threads (it costs two barriers per row, more than
    # it saves on short rows);
    # short_cols: rows shorter than this go 16 at a time, one per vector lane (at most 128)
    config_space = {"threads": thread_counts(), "split_cols": [8192, 32768, 131072],
                    "short_cols": [0, 32, 64, 128]}
    default_config = {"threads": thread_counts()[-1], "split_cols": 32768, "short_cols": 64}

    def _launch(self, x2d: torch.Tensor, y2d: torch.Tensor, config: dict) -> None:
        rows, cols = x2d.shape
        threads = config["threads"]
        if split_rows(rows, cols, threads, config["split_cols"]):
            partial = torch.empty(2 * threads, dtype=torch.float32)
            self._lib.softmax_split(ptr(x2d), ptr(y2d), rows, cols, x2d.stride(0), threads, ptr(partial))
        else:
            self._lib.softmax_rows(ptr(x2d), ptr(y2d), rows, cols, x2d.stride(0), config["short_cols"], threads)
