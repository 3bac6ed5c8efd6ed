"""The GEMM family's Triton kernels: C = A·B (+ bias per column) over strided, optionally batched operands, as
matmul, linear, linear_backward and conv2d_backward's products run them, and the launch and checks of a config.

Two kernels compute the same products, and the config's ``TMA`` picks one:

- ``gemm_tma_kernel`` (``TMA=1``, Hopper and later, and Triton's interpreter): persistent (one program per SM
  walks the output tiles in grouped order), operands read by the tensor memory accelerator through descriptors.
  TMA wants 16-byte aligned rows, so an operand whose rows are not (an odd N at 2 bytes an element) is first
  copied into a padded buffer: one pass over it, against K passes of the product.
- ``gemm_kernel`` (``TMA=0``, any GPU): one program per output tile, operands read through pointers and strides.

Both accumulate in float32 (fp16/bf16 on the tensor cores) and go over K in the same order. float32 runs in IEEE
float32 on the FMA units, in TF32 where torch allows it, or with the config's ``TF32X3`` as three TF32 products on the
tensor cores (each operand split into its TF32 part and a TF32 remainder; the remainders' product left out), which
the op's float32 tolerance is checked against like any other candidate. Why the TMA kernel wins, and by how much:
docs/design/gemm.md.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import triton
import triton.language as tl
from kernelzoo_plugins._gemm.activation_triton import activate
from kernelzoo_plugins._gemm.limits import check_fits
from triton.runtime.errors import OutOfResources
from triton.tools.tensor_descriptor import TensorDescriptor

from kernelzoo.backends.triton import TritonImplementation, cdiv, interpreting, launcher
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import FP8
from kernelzoo.tolerance import tf32_products

MAX_GRID_Y = MAX_GRID_Z = 65535
TMA_ALIGN = 16  # bytes: TMA's alignment of a descriptor's base address and of every stride but the last


@triton.jit
def _grouped_tile(tile, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    # Grouped order: GROUP_M row-tiles sweep the columns together, so the B tiles they share (and their A rows)
    # are still in L2 when the neighbours need them.
    per_group = GROUP_M * tiles_n
    first_m = (tile // per_group) * GROUP_M
    group_m = min(tiles_m - first_m, GROUP_M)
    return first_m + (tile % per_group) % group_m, (tile % per_group) // group_m


@triton.jit
def _epilogue(acc, scale_a_ptr, scale_b_ptr, bias_ptr, rows, cols, M, N, SCALES: tl.constexpr,
              HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr):
    # Scales dequantize the products' sums, not each product: (a·sa) @ (b·sb) = sa·sb·(a @ b), with one scale a
    # tensor (SCALES 1) or one a row of A and a column of B (SCALES 2); the bias comes after them, then the
    # activation (activation_triton.py's codes), all in float32 before the one rounding.
    if SCALES == 1:
        acc = acc * (tl.load(scale_a_ptr) * tl.load(scale_b_ptr))
    elif SCALES == 2:
        scale_a = tl.load(scale_a_ptr + rows, mask=rows < M, other=0.0)
        scale_b = tl.load(scale_b_ptr + cols, mask=cols < N, other=0.0)
        acc = acc * scale_a[:, None] * scale_b[None, :]
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    return activate(acc, ACTIVATION)


@triton.jit
def gemm_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_ab, stride_am, stride_ak,
                stride_bb, stride_bk, stride_bn, stride_cb, stride_cm, stride_cn, HAS_BIAS: tl.constexpr,
                SCALES: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                GROUP_M: tl.constexpr, PRECISION: tl.constexpr, PROMOTE_K: tl.constexpr,
                ACTIVATION: tl.constexpr = 0):
    pid_m, pid_n = _grouped_tile(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    batch = tl.program_id(1).to(tl.int64)
    rows = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    # Rows and columns past M and N wrap to real ones (% M): their loads need no mask, and what they compute
    # lands in C's tail, which is never stored.
    a_ptrs = a_ptr + batch * stride_ab + (rows % M)[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + batch * stride_bb + ks[:, None] * stride_bk + (cols % N)[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_left = K - k0
        # zeros past K on both sides: 0·0 adds nothing (a real value times 0 could be inf·0 = NaN)
        a = tl.load(a_ptrs, mask=ks[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=ks[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION, max_num_imprecise_acc=PROMOTE_K)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    acc = _epilogue(acc, scale_a_ptr, scale_b_ptr, bias_ptr, rows, cols, M, N, SCALES, HAS_BIAS, ACTIVATION)
    c_ptrs = c_ptr + batch * stride_cb + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def k_major_copy_kernel(src, dst, R, C, stride_sb, stride_sr, stride_sc, stride_db, stride_dr, BLOCK: tl.constexpr):
    # dst[b, c, r] = src[b, r, c]: a BLOCK×BLOCK block read along src's rows (stride_sc is the small one) and written
    # transposed along dst's, the compiler's shared-memory layout change between the two
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    batch = tl.program_id(2).to(tl.int64)
    block = tl.load(src + batch * stride_sb + rows.to(tl.int64)[:, None] * stride_sr
                    + cols.to(tl.int64)[None, :] * stride_sc, mask=(rows[:, None] < R) & (cols[None, :] < C))
    tl.store(dst + batch * stride_db + cols.to(tl.int64)[:, None] * stride_dr + rows[None, :], tl.trans(block),
             mask=(cols[:, None] < C) & (rows[None, :] < R))


COPY_BLOCK = 64


def k_major(t3: torch.Tensor) -> torch.Tensor:
    """A (batch, K, C) operand with K its unit-stride dim: itself where it is, else a copy whose C lines of K elements
    are 16-byte padded (as TMA reads them), made by k_major_copy_kernel in blocks (an element-wise copy of the
    transpose would read across rows)."""
    if t3.stride(-2) == 1 or t3.numel() == 0:
        return t3
    batch, k, c = t3.shape
    if batch > MAX_GRID_Z:
        raise UnsupportedError(f"triton gemm: a K-major copy of {batch} matrices exceeds the grid's {MAX_GRID_Z} on "
                               "axis 2")
    per_line = TMA_ALIGN // t3.element_size()
    lines = t3.new_empty((batch, c, cdiv(max(k, 1), per_line) * per_line))
    grid = (cdiv(k, COPY_BLOCK), cdiv(c, COPY_BLOCK), batch)
    launcher(k_major_copy_kernel)[grid](t3, lines, k, c, t3.stride(0) if batch > 1 else 0, t3.stride(1),
                                        t3.stride(2), lines.stride(0), lines.stride(1), BLOCK=COPY_BLOCK)
    return lines[..., :k].transpose(-1, -2)


@triton.jit
def _load_tile(desc, batch, row, col, ROWS: tl.constexpr, COLS: tl.constexpr, TRANSPOSED: tl.constexpr,
               BATCHED: tl.constexpr):
    # The ROWS×COLS block at (row, col) of an operand, read through its descriptor: a transposed operand's
    # descriptor holds its memory order (COLS×ROWS), so the block is read that way and transposed in registers.
    # The tensor cores take either order from shared memory. Reads past the edges come back as zeros.
    # (one return: Triton compiles every return of a function it inlines, constexpr branches included)
    if TRANSPOSED:
        block = (desc.load([batch, col, row]).reshape(COLS, ROWS) if BATCHED else desc.load([col, row])).T
    else:
        block = desc.load([batch, row, col]).reshape(ROWS, COLS) if BATCHED else desc.load([row, col])
    return block


@triton.jit
def _store_tile(desc, batch, row, col, tile, BATCHED: tl.constexpr):
    if BATCHED:
        desc.store([batch, row, col], tile.reshape(1, tile.shape[0], tile.shape[1]))
    else:
        desc.store([row, col], tile)


@triton.jit
def gemm_tma_kernel(a_desc, b_desc, c_desc, c_ptr, bias_ptr, scale_a_ptr, scale_b_ptr, M, N, K, BATCH, stride_cb,
                    stride_cm, stride_cn, A_TRANSPOSED: tl.constexpr, A_BATCHED: tl.constexpr,
                    B_TRANSPOSED: tl.constexpr, B_BATCHED: tl.constexpr, C_TMA: tl.constexpr,
                    C_BATCHED: tl.constexpr, HAS_BIAS: tl.constexpr, SCALES: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, PROGRAMS: tl.constexpr,
                    SUBTILE: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, PRECISION: tl.constexpr,
                    PROMOTE_K: tl.constexpr, ACTIVATION: tl.constexpr = 0):
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_batch = tiles_m * tiles_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    # one flattened loop over (tile, k step): the compiler pipelines the next tile's loads under this one's
    # epilogue
    for tile in tl.range(tl.program_id(0), per_batch * BATCH, PROGRAMS, flatten=True,
                         warp_specialize=WARP_SPECIALIZE):
        batch = tile // per_batch
        pid_m, pid_n = _grouped_tile(tile % per_batch, tiles_m, tiles_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            off_k = ki * BLOCK_K
            a = _load_tile(a_desc, batch, off_m, off_k, BLOCK_M, BLOCK_K, A_TRANSPOSED, A_BATCHED)
            b = _load_tile(b_desc, batch, off_k, off_n, BLOCK_K, BLOCK_N, B_TRANSPOSED, B_BATCHED)
            acc = tl.dot(a, b, acc, input_precision=PRECISION, max_num_imprecise_acc=PROMOTE_K)
        rows = off_m + tl.arange(0, BLOCK_M)
        cols = off_n + tl.arange(0, BLOCK_N)
        if C_TMA and SUBTILE and ACTIVATION != 0:
            # the epilogue a half at a time: an activation's temporaries for a whole tile spill (docs/design/gemm.md)
            left, right = acc.reshape(BLOCK_M, 2, BLOCK_N // 2).permute(0, 2, 1).split()
            half = off_n + tl.arange(0, BLOCK_N // 2)
            left = _epilogue(left, scale_a_ptr, scale_b_ptr, bias_ptr, rows, half, M, N, SCALES, HAS_BIAS,
                             ACTIVATION)
            _store_tile(c_desc, batch, off_m, off_n, left.to(c_ptr.dtype.element_ty), C_BATCHED)
            right = _epilogue(right, scale_a_ptr, scale_b_ptr, bias_ptr, rows, half + BLOCK_N // 2, M, N, SCALES,
                              HAS_BIAS, ACTIVATION)
            _store_tile(c_desc, batch, off_m, off_n + BLOCK_N // 2, right.to(c_ptr.dtype.element_ty), C_BATCHED)
        elif C_TMA:
            acc = _epilogue(acc, scale_a_ptr, scale_b_ptr, bias_ptr, rows, cols, M, N, SCALES, HAS_BIAS, ACTIVATION)
            if SUBTILE:  # two halves, each through half the shared memory
                left, right = acc.reshape(BLOCK_M, 2, BLOCK_N // 2).permute(0, 2, 1).split()
                _store_tile(c_desc, batch, off_m, off_n, left.to(c_ptr.dtype.element_ty), C_BATCHED)
                _store_tile(c_desc, batch, off_m, off_n + BLOCK_N // 2, right.to(c_ptr.dtype.element_ty),
                            C_BATCHED)
            else:
                _store_tile(c_desc, batch, off_m, off_n, acc.to(c_ptr.dtype.element_ty), C_BATCHED)
        else:  # C's rows are not 16-byte aligned: plain stores
            acc = _epilogue(acc, scale_a_ptr, scale_b_ptr, bias_ptr, rows, cols, M, N, SCALES, HAS_BIAS, ACTIVATION)
            out = acc.to(c_ptr.dtype.element_ty)
            c_ptrs = (c_ptr + batch.to(tl.int64) * stride_cb + rows.to(tl.int64)[:, None] * stride_cm
                      + cols.to(tl.int64)[None, :] * stride_cn)
            tl.store(c_ptrs, out, mask=(rows[:, None] < M) & (cols[None, :] < N))


class Operand(NamedTuple):
    """An operand as the TMA kernel reads it: its descriptor, whether the descriptor holds the transpose, and
    whether it has a batch dimension (a broadcast operand has none)."""

    desc: TensorDescriptor
    transposed: bool
    batched: bool


def _tma_ready(t: torch.Tensor) -> bool:
    """Whether a 2-D matrix can be read by TMA as it lies: unit stride one way, 16-byte aligned rows the other."""
    size = t.element_size()
    if t.data_ptr() % TMA_ALIGN:
        return False
    rows, cols = t.stride()
    return (cols == 1 and rows * size % TMA_ALIGN == 0) or (rows == 1 and cols * size % TMA_ALIGN == 0)


def _padded(t: torch.Tensor) -> torch.Tensor:
    """A copy of a 2- or 3-D operand (…, R, C) whose rows are 16-byte aligned: C padded up, the padding unread."""
    per_row = TMA_ALIGN // t.element_size()
    cols = t.shape[-1]
    buffer = t.new_empty((*t.shape[:-1], cdiv(max(cols, 1), per_row) * per_row))[..., :cols]
    buffer.copy_(t)
    return buffer


def tma_operand(t3: torch.Tensor, block_rows: int, block_cols: int) -> Operand:
    """The descriptor of a (batch, R, C) operand read in block_rows×block_cols blocks, copying it aligned first
    if its layout does not allow TMA. A batch of 1, or a broadcast batch (stride 0), reads one matrix."""
    batched = t3.shape[0] > 1 and t3.stride(0) != 0
    matrices = t3 if batched else t3[:1]
    size = t3.element_size()
    if not (_tma_ready(matrices[0]) and (not batched or matrices.stride(0) * size % TMA_ALIGN == 0)):
        matrices = _padded(matrices)
    transposed = matrices.stride(-1) != 1
    view = matrices.transpose(-1, -2) if transposed else matrices
    block = [block_cols, block_rows] if transposed else [block_rows, block_cols]
    if not batched:
        view = view[0]
    else:
        block = [1, *block]
    return Operand(TensorDescriptor(view, list(view.shape), list(view.stride()), block), transposed, batched)


@functools.cache
def multiprocessors(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


@functools.cache
def has_tma(index: int) -> bool:
    return torch.cuda.get_device_capability(index)[0] >= 9


class Scales(NamedTuple):
    """Dequantizing scales of an 8-bit float product: one float32 element each, or (``rowwise``) a contiguous vector
    of one per row of A and one per column of B."""

    a: torch.Tensor
    b: torch.Tensor
    rowwise: bool


def gemm(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bias: torch.Tensor | None, config: dict,
         scales: Scales | None = None, activation: int = 0) -> None:
    """c = a · b (·scales) (+ bias per column), any strides: a (M×K) or (Ba, M, K), b (K×N) or (Bb, K, N), c (M×N)
    or (B, M, N), a batch of 1 (or stride 0) broadcast. c must not be empty; the config's TMA picks the kernel, and
    for 8-bit floats its PROMOTE_K how often the tensor cores' partial sums join the float32 accumulator.
    ``activation`` (activation.py's CODES; 0: none) is applied to each output before its rounding."""
    a3, b3, c3 = (t if t.dim() == 3 else t.unsqueeze(0) for t in (a, b, c))
    (batch, m, n), k = c3.shape, a3.shape[-1]
    if a.is_cuda:
        check_fits(a.element_size(), config)
    if bias is not None:
        bias = bias.contiguous()
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    precision = "tf32" if a.dtype != torch.float32 or tf32_products(a.dtype, a.device) else "ieee"
    if config.get("TF32X3", 0):
        if precision != "ieee":
            raise UnsupportedError(f"triton gemm: TF32X3 splits float32 calls that run without TF32, not {a.dtype} "
                                   f"ones{' in TF32' if a.dtype == torch.float32 else ''}")
        precision = "tf32x3"
    epilogue = dict(
        HAS_BIAS=bias is not None, SCALES=0 if scales is None else 2 if scales.rowwise else 1, PRECISION=precision,
        PROMOTE_K=min(config.get("PROMOTE_K", bk), bk) if a.dtype in FP8 else None, ACTIVATION=activation)
    pointers = (bias if bias is not None else c3, *((scales.a, scales.b) if scales is not None else (c3, c3)))
    try:
        if config.get("TMA", 0) and k > 0:
            _gemm_tma(a3, b3, c3, pointers, config, epilogue)
            return
        if batch > MAX_GRID_Y:
            raise UnsupportedError(f"triton gemm: batch {batch} exceeds the grid's {MAX_GRID_Y} on axis 1")
        grid = (cdiv(m, bm) * cdiv(n, bn), batch)
        launcher(gemm_kernel)[grid](
            a3, b3, c3, *pointers, m, n, k,
            a3.stride(0) if a3.shape[0] > 1 else 0, a3.stride(1), a3.stride(2),
            b3.stride(0) if b3.shape[0] > 1 else 0, b3.stride(1), b3.stride(2), *c3.stride(),
            **epilogue, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=config["GROUP_M"], num_warps=config["num_warps"],
            num_stages=config["num_stages"])
    except OutOfResources as exc:  # shared memory, or threads its register use leaves
        raise UnsupportedError(f"triton gemm: {config} does not fit this GPU for {a.dtype}: {exc}") from None


def _gemm_tma(a3: torch.Tensor, b3: torch.Tensor, c3: torch.Tensor, pointers: tuple, config: dict,
              epilogue: dict) -> None:
    if c3.is_cuda and not has_tma(c3.device.index or 0):
        raise UnsupportedError("triton gemm: TMA needs a GPU of compute capability 9.0 or newer")
    (batch, m, n), k = c3.shape, a3.shape[-1]
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    if a3.dtype in FP8 or (epilogue["PRECISION"] != "ieee" and a3.dtype == torch.float32):
        # Hopper's tensor cores read TF32 and 8-bit float operands K-major only from shared memory
        a3, b3 = k_major(a3.transpose(-1, -2)).transpose(-1, -2), k_major(b3)
    a_op, b_op = tma_operand(a3, bm, bk), tma_operand(b3, bk, bn)
    c_tma = (_tma_ready(c3[0]) and c3.stride(-1) == 1
             and (batch == 1 or c3.stride(0) * c3.element_size() % TMA_ALIGN == 0))
    subtile = bool(config.get("SUBTILE", 0))
    c_cols = bn // 2 if subtile else bn
    c_view, c_block = (c3, [1, bm, c_cols]) if batch > 1 else (c3[0], [bm, c_cols])
    c_desc = TensorDescriptor(c_view, list(c_view.shape), list(c_view.stride()), c_block) if c_tma else None
    tiles = batch * cdiv(m, bm) * cdiv(n, bn)
    programs = min(tiles, 4 if interpreting() else multiprocessors(c3.device.index or 0))
    launcher(gemm_tma_kernel)[(programs,)](
        a_op.desc, b_op.desc, c_desc, c3, *pointers, m, n, k, batch, *c3.stride(),
        A_TRANSPOSED=a_op.transposed, A_BATCHED=a_op.batched, B_TRANSPOSED=b_op.transposed,
        B_BATCHED=b_op.batched, C_TMA=c_tma, C_BATCHED=batch > 1, **epilogue, BLOCK_M=bm,
        BLOCK_N=bn, BLOCK_K=bk, GROUP_M=config["GROUP_M"], PROGRAMS=programs, SUBTILE=subtile,
        WARP_SPECIALIZE=bool(config.get("WS", 0)), num_warps=config["num_warps"],
        num_stages=config["num_stages"])


class GemmTritonImplementation(TritonImplementation):
    """A triton plugin built on ``gemm``: its config space."""

    # TMA: the persistent TMA kernel (1) or the tiled pointer one (0); SUBTILE: the TMA kernel stores C in two
    # halves (less shared memory for the epilogue, so a fourth stage fits); WS: the TMA kernel's loop is warp
    # specialized (loads and products in separate warps); TF32X3: float32 calls without TF32 run as three TF32
    # products (refused elsewhere)
    config_space = {"TMA": [1, 0], "BLOCK_M": [64, 128, 256], "BLOCK_N": [64, 128, 256], "BLOCK_K": [32, 64],
                    "GROUP_M": [8], "num_warps": [4, 8], "num_stages": [3, 4], "SUBTILE": [0, 1], "WS": [0, 1],
                    "TF32X3": [0, 1]}
    # fits float32 too: 147 KiB of stages and a 64 KiB half of C at 4 bytes an element; 128 accumulators a thread
    default_config = {"TMA": 1, "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 8,
                      "num_stages": 3, "SUBTILE": 1, "WS": 0, "TF32X3": 0}
    # float32's lead in three TF32 products and the configs that led at 2 bytes an element on the H200
    # (docs/design/gemm.md), tried before the search
    tuning_seeds = ({"BLOCK_N": 128, "SUBTILE": 0, "TF32X3": 1}, {"BLOCK_K": 64, "SUBTILE": 0},
                    {"BLOCK_K": 64, "num_stages": 4, "WS": 1}, {"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64,
                                                                "SUBTILE": 0}, {"BLOCK_K": 64, "num_stages": 4})


# Blocks of the sums: a 32-channel × 128-element tile per step; a split reads at least SPLIT_ELEMENTS
# elements of each channel, so a long reduction spreads over many programs (enough for 132 SMs).
SUM_BLOCK_C, SUM_BLOCK_I, SPLIT_ELEMENTS = 32, 128, 4096


@triton.jit
def channel_sums_kernel(x_ptr, out_ptr, OUTER, CH, INNER, stride_o, stride_c, stride_i, per_split,
                        BLOCK_C: tl.constexpr, BLOCK_I: tl.constexpr):
    # out[split, c] = Σ_o Σ_{i in the split's range} x[o, c, i], in a fixed order (float32 sums, stored
    # in out's dtype)
    cs = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    split = tl.program_id(1)
    i_begin = split * per_split
    i_end = tl.minimum(INNER, i_begin + per_split)
    acc = tl.zeros((BLOCK_C, BLOCK_I), dtype=tl.float32)
    plane_ptr = x_ptr  # advances by stride_o: pointer arithmetic stays 64-bit
    for _ in range(0, OUTER):
        for i0 in range(i_begin, i_end, BLOCK_I):
            i = i0 + tl.arange(0, BLOCK_I)
            ptrs = plane_ptr + cs[:, None].to(tl.int64) * stride_c + i[None, :].to(tl.int64) * stride_i
            acc += tl.load(ptrs, mask=(cs[:, None] < CH) & (i[None, :] < i_end), other=0.0).to(tl.float32)
        plane_ptr += stride_o
    tl.store(out_ptr + split * CH + cs, tl.sum(acc, axis=1).to(out_ptr.dtype.element_ty), mask=cs < CH)


def channel_sums(x: torch.Tensor, out: torch.Tensor) -> None:
    """out[c] = Σ_{o, i} x[o, c, i] for a 3-D view x (any strides): float32 partials over splits of i, then
    their sum in split order, cast to out's dtype. Deterministic."""
    outer, ch, inner = x.shape
    if ch == 0:
        return
    splits = max(1, min(1024, inner // SPLIT_ELEMENTS))
    per_split = cdiv(max(inner, 1), splits)
    partial = torch.empty((splits, ch), dtype=torch.float32, device=x.device)
    grid = (cdiv(ch, SUM_BLOCK_C), splits)
    launcher(channel_sums_kernel)[grid](x, partial, outer, ch, inner, *x.stride(), per_split,
                                        BLOCK_C=SUM_BLOCK_C, BLOCK_I=SUM_BLOCK_I)
    launcher(channel_sums_kernel)[(grid[0], 1)](partial, out, 1, ch, splits, 0, 1, ch, splits,
                                                BLOCK_C=SUM_BLOCK_C, BLOCK_I=SUM_BLOCK_I)
