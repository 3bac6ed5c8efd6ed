"""The row-reduction family's Python side: what the cuda and Triton plugins of softmax, layer_norm,
cross_entropy and their backwards share (row-size limits, the device queries their launch shapes need, the
cluster and vector-access checks, the Triton tile sizes). Their device code is ``plugins/_cuda/row_packs.cuh``
and ``row_sums.cuh``; the OpenMP row loops are ``plugins/_openmp/softmax_rows.h``. What each forward shares with
its backward in the spec (checks, row views, cases) is ``softmax.py``, ``cross_entropy.py`` and ``layer_norm.py``;
softmax's plugins and its backward's also share their run there, and their cuda plugins ``softmax_cuda.py``.
"""
