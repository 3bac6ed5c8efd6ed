"""The GEMM family's Triton kernels compile for sm_90 through Triton's compiler, no GPU needed, in each
specialization its calls make (tests/triton_compile_scan.py's GEMM_CASES: operand layouts, batch, TMA or plain
stores of C, warp specialization, TF32, IEEE float32 in three TF32 products with B copied K-major, FP8 with row
scales, the tiled kernel, linear's activations in the epilogue), and the elementwise passes of linear's activations
beside it.

Triton's interpreter, which runs them on the CPU, executes Python and never compiles: a kernel it runs can still
fail to compile (a helper whose constexpr branches returned tensors of different shapes did)."""

from __future__ import annotations

from compile_scan import failures, needs_ptxas, scan

pytestmark = needs_ptxas


def test_gemm_kernels_compile_for_sm90():
    compiled = scan("gemm", timeout=900)
    assert len(compiled) == 16, sorted(compiled)  # every case of GEMM_CASES, and linear's 5 activation passes
    assert not failures(compiled), failures(compiled)


def test_scaled_matmul_s_default_fits_every_case():
    """Its default config compiles within a block's shared memory on every small case (float32 outputs and
    row-wise scales included), so the default runs any call the op takes."""
    compiled = scan("scaled_matmul_default", timeout=900)
    assert len(compiled) > 20, sorted(compiled)
    assert not failures(compiled), failures(compiled)
