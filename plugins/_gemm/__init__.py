"""The GEMM family: the products linear, linear_backward, matmul, conv2d and conv2d_backward share.

- ``gemm.cuh`` and ``cuda.py``: the CUDA GEMM core (tensor-core and float32 tiles through a cp.async ring) and
  the base of the cuda plugins built on it; ``column_sums.cuh``: the bias gradient's column sums;
  ``conv.cuh``: the implicit-GEMM convolutions of conv2d and conv2d_backward on that core;
- ``gemm_openmp.h`` and ``openmp.py``: the packed, cache-blocked OpenMP GEMM and its plugins' base;
- ``triton.py``: the tiled tl.dot GEMM with a fused bias, and the channel sums of the bias gradients.
"""
