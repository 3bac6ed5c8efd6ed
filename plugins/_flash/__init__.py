"""The flash-attention family: what the ops attention and attention_backward share.

- ``spec.py``: argument checks, the tensor-op math (reference, python plugins, verification baseline), the
  comparison against float64, the shared Op base and the conformance cases;
- ``cuda.py``: the CUDA plugins' fitting of configs to calls, their defines and launch arguments;
- ``triton.py``: the Triton helpers (masking, tile loads and stores through pointers or TMA descriptors) and the
  launch arguments both passes compute alike;
- ``openmp.c`` / ``openmp.py``: the OpenMP source of both passes and its call arguments.

The CUDA device code lives in ``plugins/_cuda/flash.cuh``, ``tensor_core.cuh`` and ``wgmma.cuh``.
"""
