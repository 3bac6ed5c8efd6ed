"""What the flash-attention OpenMP plugins (attention, attention_backward) share: one C source for both passes
(openmp.c beside this module), its declarations, config space and call arguments."""

from __future__ import annotations

import cffi
import torch
from kernelzoo_plugins._flash.spec import additive_mask

from kernelzoo.backends.openmp import thread_counts
from kernelzoo.registry import Call

SOURCE = "../_flash/openmp.c"  # relative to an op's folder, where an implementation's sources are read
CDEF = """
void attention_forward(const float *q, const float *k, const float *v, const float *mask, float *o,
                       float *lse, const long long *dims, float scale, int threads);
void attention_backward(const float *q, const float *k, const float *v, const float *mask, const float *o,
                        const float *lse, const float *d_o, float *dq, float *dk, float *dv,
                        const long long *dims, float scale, int threads, int fused);
"""
NULL = cffi.FFI().NULL  # the mask pointer of calls without a mask
# BLOCK_M a multiple of the micro-kernel's 8 rows, BLOCK_N of its 32 columns (openmp.c)
CONFIG_SPACE = {"BLOCK_M": [16, 32, 64, 128], "BLOCK_N": [32, 64, 128], "threads": thread_counts()}


def rows_contiguous(t: torch.Tensor) -> torch.Tensor:
    """t with a contiguous head dim (the kernels take any batch, head and row strides)."""
    return t if t.stride(-1) == 1 else t.contiguous()


def mask_view(call: Call) -> torch.Tensor | None:
    """The mask as float32 added to the scores, broadcast to (B, Hq, Nq, Nk) by strides (no copy of
    a float32 mask; a bool or half one is converted at its own, unbroadcast size)."""
    mask = call.inputs.get("attn_mask")
    if mask is None:
        return None
    (b, h, n_q, _), n_k = call.inputs["q"].shape, call.inputs["k"].shape[2]
    return additive_mask(mask, torch.float32).expand(b, h, n_q, n_k)


def dims(call: Call, **tensors: torch.Tensor | None) -> torch.Tensor:
    """openmp.c's attn_dims: sizes, flags, then the strides of q, k, v, o, d_o, dq, dk, dv, mask."""
    (b, h, n_q, d), (_, hk, n_k, _) = call.inputs["q"].shape, call.inputs["k"].shape
    mask = tensors.get("mask")
    values = [b, h, hk, n_q, n_k, d, int(call.params["causal"]), int(mask is not None)]
    for name in ("q", "k", "v", "o", "d_o", "dq", "dk", "dv"):
        t = tensors.get(name)
        values += list(t.stride()[:3]) if t is not None else [0, 0, 0]
    values += list(mask.stride()) if mask is not None else [0, 0, 0, 0]
    return torch.tensor(values, dtype=torch.int64)
