"""The reduction family: the (outer, reduced, inner) plan and spec parts that sum, mean and max share
(``plan.py``); what sum and mean share (``sum.py``: the spec, and ``sum_python.py``, ``sum_openmp.py`` with
``sum_openmp.c``, ``sum_triton.py``: the plugins mean runs on sum's kernels); what max and max_backward share
(``max.py``); and max_pool2d's with its backward (``pool.py``, and ``pool_triton.py`` for their Triton kernels)."""
