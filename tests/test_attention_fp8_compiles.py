"""FP8 attention's Triton kernel compiles for sm_90 through Triton's compiler, no GPU needed, in the specializations
its calls make (tests/triton_compile_scan.py's ATTENTION_FP8_CASES): float8_e4m3fn and float8_e5m2, P·V in FP8 and
with P in float16, q, k, Vᵀ and o through TMA descriptors and through pointers, GQA, causal, float16 out, head dims
16 to 256. Triton's interpreter runs the kernel on the CPU but never compiles it (nor checks that Hopper's 8-bit
products get their operands K-major)."""

from __future__ import annotations

from compile_scan import failures, needs_ptxas, scan

pytestmark = needs_ptxas


def test_fp8_attention_compiles_for_sm90():
    compiled = scan("attention_fp8", timeout=900)
    assert len(compiled) == 9, sorted(compiled)  # every case of ATTENTION_FP8_CASES
    assert not failures(compiled), failures(compiled)
