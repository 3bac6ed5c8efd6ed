"""embedding_backward(grad_output, indices, num_weights, padding_idx=None, deterministic=False) -> grad_weight:
the gradient of the op embedding (see its spec) for the output gradient grad_output (indices.shape + (dim,)):
a scatter-add of its rows into a (num_weights, dim) table,

    grad_weight[v, :] = Σ_{i : indices[i] = v} grad_output[i, :]        (0 for v = padding_idx, and rows never hit)

in grad_output's dtype, accumulated in float32. deterministic=True asks for sums that do not depend on
scheduling. How each plugin adds: python: index_add_ (atomics on the GPU) unless deterministic, else
a stable sort and a segment sum in order; torch: aten.embedding_dense_backward (sorted on the GPU);
openmp, triton, cuda: always deterministic, by a per-row owner loop — the indices are sorted (a
counting sort on the CPU, torch.sort on the GPU) so that each table row is written once, by one
thread or program, adding its index positions in increasing order. That writes every row of the table
once (the zeros too) and needs no zero-fill pass and no atomics, so it is no slower than atomics.
The op's shape is (num_weights, dim, indices), as the forward's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from kernelzoo_plugins._embedding.spec import (
    CaseSpec,
    case_indices,
    check_indices,
    check_padding_idx,
    embedding_bad_cases,
    embedding_cases,
    random_indices,
)

from kernelzoo.errors import ArgumentError, DeviceError
from kernelzoo.registry import BadCase, Call, Case, Op, check_tensor, randn
from kernelzoo.tolerance import Tolerance, tolerance_for


def sorted_rows(indices: torch.Tensor, num_weights: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(order, starts): the index positions sorted by index (stable: increasing positions within an index),
    and starts (num_weights + 1,) with row v's positions at order[starts[v]:starts[v + 1]] (int64)."""
    flat = indices.reshape(-1).long()
    values, order = torch.sort(flat, stable=True)
    # starts[v] = how many indices are below v; a binary search per row, no host sync (bincount
    # syncs on the GPU to size its output)
    rows = torch.arange(num_weights + 1, dtype=torch.int64, device=flat.device)
    return order, torch.searchsorted(values, rows)


def grad_rows(call: Call) -> tuple[torch.Tensor, int, int]:
    """(g, dim, num_weights): grad_output as (n, dim) rows with column stride 1 (copied only if it must be), the
    embedding's width and its number of rows."""
    grad = call.inputs["grad_output"]
    dim = grad.shape[-1]
    g = grad.reshape(-1, dim)
    if dim > 1 and g.stride(1) != 1:
        g = g.contiguous()
    return g, dim, call.params["num_weights"]


class EmbeddingBackward(Op):
    """embedding_backward(grad_output, indices, num_weights, padding_idx=None, deterministic=False) -> grad_weight."""

    name = "embedding_backward"
    checks_every_call = True  # the indices' values must be rows of the weight (value_range)
    shapes = {"cuda": [(50257, 4096, 16384), (32000, 4096, 65536)], "cpu": [(50257, 1024, 4096), (32000, 512, 16384)]}

    def check(self, grad_output: torch.Tensor, indices: torch.Tensor, num_weights: int, padding_idx: int | None = None,
              deterministic: bool = False) -> Call:
        check_tensor(self.name, "grad_output", grad_output)
        if isinstance(num_weights, bool) or not isinstance(num_weights, int) or num_weights < 1:
            raise ArgumentError(f"{self.name}: num_weights must be an int >= 1, got {num_weights!r}")
        if not isinstance(indices, torch.Tensor):
            raise ArgumentError(f"{self.name}: indices must be a torch.Tensor, got {type(indices).__name__}")
        if indices.device != grad_output.device:
            raise DeviceError(f"{self.name}: grad_output is on {grad_output.device} but indices are on "
                              f"{indices.device}; expected one device")
        check_indices(self.name, indices, num_weights, grad_output.device)
        if grad_output.dim() != indices.dim() + 1 or grad_output.shape[:-1] != indices.shape:
            raise ArgumentError(f"{self.name}: grad_output of shape {tuple(grad_output.shape)} must be indices.shape "
                                f"+ (dim,) = {(*indices.shape, 'dim')}")
        if not isinstance(deterministic, bool):
            raise ArgumentError(f"{self.name}: deterministic must be a bool, got {deterministic!r}")
        return Call(self, {"grad_output": grad_output, "indices": indices},
                    {"num_weights": num_weights, "padding_idx": check_padding_idx(self.name, padding_idx, num_weights),
                     "deterministic": deterministic})

    def reference(self, call: Call) -> torch.Tensor:
        g, idx, p = call.inputs["grad_output"], call.inputs["indices"], call.params
        dim = g.shape[-1]
        out = torch.zeros((p["num_weights"], dim), dtype=torch.float64, device=g.device)
        out.index_add_(0, idx.reshape(-1).long(), g.reshape(-1, dim).double())
        if p["padding_idx"] is not None:
            out[p["padding_idx"]] = 0.0
        return out

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, **params: Any) -> Call:
        """``indices`` random indices into a (num_weights, dim) table and their output gradient."""
        num_weights, dim, n = shape
        indices = random_indices((n,), num_weights, device, generator)
        return self.check(randn((n, dim), device, dtype, generator), indices, num_weights, **params)

    def sizes(self, call: Call) -> dict[str, int]:
        return {"num_weights": call.params["num_weights"], "dim": call.inputs["grad_output"].shape[-1],
                "indices": call.inputs["indices"].numel()}

    def flags(self, call: Call) -> str:
        return "deterministic" if call.params["deterministic"] else ""

    def flops(self, call: Call) -> float:
        return float(call.inputs["grad_output"].numel())

    def bytes(self, call: Call) -> float:
        s, g, i = self.sizes(call), call.inputs["grad_output"], call.inputs["indices"]
        return float((g.numel() + s["num_weights"] * s["dim"]) * g.element_size() + i.numel() * i.element_size())

    def tolerance(self, call: Call) -> Tolerance:
        # A row sums as many float32 terms as its index repeats (k); a sequential sum of k unit-normal terms is
        # off by std ~0.35·u·k (u = 2^-24), the worst of many outputs ~u·k: 3·u·k on top of the table's atol.
        idx = call.inputs["indices"].reshape(-1)
        k = int(torch.bincount(idx.long().cpu()).max()) if idx.numel() else 0
        base = tolerance_for(call.dtype)
        return Tolerance(base.rtol, base.atol + 3 * 2**-24 * k)

    def cases(self) -> list[Case]:
        return embedding_cases(_backward_case)

    def bad_cases(self) -> list[BadCase]:
        def args(indices: Any, weight: torch.Tensor, **kw: Any) -> tuple[tuple, dict]:
            shape = (*indices.shape, weight.shape[1]) if isinstance(indices, torch.Tensor) else (2, weight.shape[1])
            return (torch.zeros(shape), indices, weight.shape[0]), kw
        i = torch.tensor([0, 3])
        return [
            *embedding_bad_cases(self.name, args),
            BadCase("grad-shape", lambda: ((torch.zeros(3, 4), i, 10), {}), ArgumentError,
                    "grad_output of shape (3, 4) must be indices.shape + (dim,) = (2, 'dim')"),
            BadCase("num-weights", lambda: ((torch.zeros(2, 4), i, 0), {}), ArgumentError,
                    "num_weights must be an int >= 1, got 0"),
            BadCase("deterministic-int", lambda: ((torch.zeros(2, 4), i, 10), {"deterministic": 1}), ArgumentError,
                    "deterministic must be a bool, got 1"),
        ]


def _backward_case(spec: CaseSpec) -> Callable:
    def build(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        _, num_weights, dim, _, layout, kwargs = spec
        indices = case_indices(spec, device, g)
        if layout == "transposed":  # grad_output in another layout
            grad = randn((dim, indices.numel()), device, dtype, g).t().reshape(*indices.shape, dim)
        elif layout == "sliced":
            grad = randn((*indices.shape, 2 * dim), device, dtype, g)[..., ::2]
        else:
            grad = randn((*indices.shape, dim), device, dtype, g)
        return (grad, indices, num_weights), {**kwargs, "deterministic": math.prod(indices.shape) % 2 == 1}
    return build
