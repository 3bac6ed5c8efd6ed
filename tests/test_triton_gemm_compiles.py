"""The GEMM family's Triton kernels compile for sm_90 through Triton's own compiler, no GPU needed.

Triton's interpreter, which runs them on the CPU, executes Python and never compiles: a kernel it runs can still
fail to compile (a helper whose constexpr branches return tensors of different shapes did). Each case builds one
specialization of a kernel (operand layouts, epilogue, dtype) to PTX in a fresh process, where the interpreter
is off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"

COMPILE = r'''
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernelzoo_plugins._gemm import triton as gemm

case = json.loads(sys.argv[1])
kernel = getattr(gemm, case.pop("kernel"))
ty, block = case.pop("type"), case.pop("blocks")
options = {"num_warps": case.pop("num_warps"), "num_stages": case.pop("num_stages")}
signature = {}
for name in kernel.arg_names:
    if name in case:
        signature[name] = "constexpr"
    elif name.endswith("_desc"):
        signature[name] = f"tensordesc<{block[name][0]}[{', '.join(map(str, block[name][1]))}]>"
    elif name.startswith("scale_"):
        signature[name] = "*fp32"
    elif name.endswith("_ptr"):
        signature[name] = "*" + (case.get("OUT") or ty) if name in ("c_ptr", "bias_ptr") else "*" + ty
    else:
        signature[name] = "i32"
case.pop("OUT", None)
src = ASTSource(fn=kernel, signature=signature, constexprs={(kernel.arg_names.index(k),): v for k, v in case.items()})
ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options).asm["ptx"]
assert ".entry" in ptx
print("compiled")
'''


def tma(ty: str, out: str, a_t: bool, b_t: bool, batched: bool, c_tma: bool, **extra) -> dict:
    bm, bn, bk = extra.pop("BLOCK_M", 128), extra.pop("BLOCK_N", 256), extra.pop("BLOCK_K", 64)
    lead = [1] if batched else []
    subtile = extra.pop("SUBTILE", False)
    blocks = {"a_desc": (ty, [*lead, *([bk, bm] if a_t else [bm, bk])]),
              "b_desc": (ty, [*lead, *([bn, bk] if b_t else [bk, bn])]),
              "c_desc": (out, [*lead, bm, bn // 2 if subtile else bn])}
    case = {"kernel": "gemm_tma_kernel", "type": ty, "OUT": out, "blocks": blocks, "num_warps": 8, "num_stages": 3,
            "A_TRANSPOSED": a_t, "A_BATCHED": batched, "B_TRANSPOSED": b_t, "B_BATCHED": batched, "C_TMA": c_tma,
            "C_BATCHED": batched, "HAS_BIAS": False, "SCALES": 0, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk,
            "GROUP_M": 8, "PROGRAMS": 132, "SUBTILE": subtile, "WARP_SPECIALIZE": False, "PRECISION": "tf32",
            "PROMOTE_K": None}
    case.update(extra)
    if not c_tma:
        case["c_desc"] = None
        del blocks["c_desc"]
    return case


CASES = {
    "bf16-row-major": tma("bf16", "bf16", False, False, False, True),
    "bf16-transposed-b-subtile": tma("bf16", "bf16", False, True, False, True, SUBTILE=True),
    "fp16-transposed-a-batched-warp-specialized": tma("fp16", "fp16", True, False, True, True, WARP_SPECIALIZE=True,
                                                      num_stages=4, SUBTILE=True),
    "fp32-tf32-k-major-b-unaligned-c": tma("fp32", "fp32", False, True, False, False, BLOCK_K=32),
    "fp32-ieee-bias": tma("fp32", "fp32", False, False, False, True, BLOCK_K=32, PRECISION="ieee", HAS_BIAS=True),
    "fp8-row-scales-bias": tma("fp8e4nv", "bf16", False, True, False, True, BLOCK_K=128, SCALES=2, HAS_BIAS=True,
                               PROMOTE_K=32),
    "tiled-fp16-bias": {"kernel": "gemm_kernel", "type": "fp16", "blocks": {}, "num_warps": 8, "num_stages": 3,
                        "HAS_BIAS": True, "SCALES": 0, "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8,
                        "PRECISION": "tf32", "PROMOTE_K": None},
}


@pytest.mark.skipif(not PTXAS.exists(), reason="Triton's bundled ptxas is missing: it compiles for sm_90")
@pytest.mark.parametrize("name", list(CASES))
def test_gemm_kernel_compiles_for_sm90(name):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", COMPILE, json.dumps(CASES[name])], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0 and "compiled" in done.stdout, done.stderr[-3000:]
