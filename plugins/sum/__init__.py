"""sum(x, dim=None, keepdim=False): the sum over any dims (torch.sum semantics), accumulated in float32,
returned in x's dtype (float16 / bfloat16 inputs accumulate in float32 too). ``dim`` is None or () for
every dim, an int, or a tuple of ints (negative ones count from the end; a dim twice is an error).

Kernels see every reduction as (outer, reduced, inner) over a contiguous tensor: out[a, b] =
scale · Σ_r x[a, r, b] (scale 1 for sum, 1/reduced for mean). Dims of size 1 are dropped first, so
that the reduced dims form one block in most calls (the last dims: rows, inner = 1; the first dims:
columns, outer = 1); when they do not, the kept dims are moved first and the tensor copied
(:func:`as_3d`). That (outer, reduced, inner) is the op's shape: its sizes, bucket and shape text,
and what :meth:`Summation.example` takes ("8192x8192x1" reduces rows, "1x8192x8192" columns).

sum and mean have no backward op: the gradient is the output gradient broadcast back over the
reduced dims (an expand view, times 1/reduced for mean), which needs no kernel.
"""

from __future__ import annotations

# re-exported: what sum's plugins read
from kernelzoo_plugins._reduce.plan import as_3d as as_3d
from kernelzoo_plugins._reduce.sum import Summation


class Sum(Summation):
    """sum(x, dim=None, keepdim=False): Σ over ``dim``, accumulated in float32, in x's dtype."""

    name = "sum"
