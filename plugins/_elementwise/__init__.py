"""The elementwise family: what unary and binary ops' implementations share.

- ``cuda.py``: the wrappers of the unary and binary CUDA kernels (:class:`UnaryCuda`, :class:`BinaryCuda`) and
  the strided kernels' per-dimension arguments (:func:`dim_args`);
- ``openmp.py``: the wrappers of the OpenMP loops (:class:`UnaryOpenMP`, :class:`BinaryOpenMP`);
- ``strided.cuh``, ``unary.cuh``, ``binary.cuh``: the CUDA kernels each op's cuda.cu instantiates with its
  expression; ``unary_openmp.h``, ``binary_openmp.h``: the OpenMP loops; ``vector_math.h``: exp, erfc, tanh in
  portable C and AVX-512.

The spec side (base op classes, conformance cases, the broadcast layout) is ``kernelzoo.elementwise``.
"""
