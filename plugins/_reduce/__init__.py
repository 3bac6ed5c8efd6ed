"""The reduction family: what sum and mean share (the spec and the plugins mean runs on sum's kernels), what max
and max_backward share (``max.py``), and max_pool2d's with its backward (``pool.py``)."""
