"""FP8 attention forward on the GPU: the triton plugin's two P·V precisions (PV_FP8 1: P·V in FP8; 0: P in
float16, V upcast) for float8_e4m3fn and float8_e5m2, against torch's SDPA in float16 (cuDNN and
FlashAttention-2), per shape, in one run.

    python scripts/attention_fp8_bench.py [--shape 1x32x16384x128] [--causal 0 1] [--config '{"BLOCK_N": 128}']

TFLOP/s count the forward's 4·B·H·N²·D FLOPs (halved when causal); times are triton.testing.do_bench medians.
The triton rows time the plugin's run() with V given K-major (a transposed view of (B, H, D, N) memory: no copy);
the "+copy" row gives it V as (B, H, N, D), so the call copies V's transpose first, as a plain call does. Each
triton row also prints whether the output meets the op's tolerance (its verify(), against the float64 reference;
skipped past 4·32·4096² scores, where the reference takes minutes).
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable

import torch
import torch.nn.functional as F
from kernelzoo_plugins._flash.fp8 import quantized_inputs
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

from kernelzoo.registry import registry

VERIFY_LIMIT = 4 * 32 * 4096 * 4096


def tflops(flops: float, fn: Callable[[], object]) -> float:
    return flops / do_bench(fn) / 1e9  # ms -> TFLOP/s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", action="append", help="BxHxNxD (repeatable; default 1x32x16384x128, 4x32x4096x128)")
    parser.add_argument("--causal", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--config", default="{}", help="overrides of the triton plugin's default config (JSON)")
    args = parser.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in (args.shape or ["1x32x16384x128", "4x32x4096x128"])]
    op, impl = registry.op("attention"), registry.impl("attention", "triton")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    for b, h, n, d in shapes:
        for causal in map(bool, args.causal):
            rate = functools.partial(tflops, 4.0 * b * h * n * n * d / (2 if causal else 1))
            g = torch.Generator(device="cuda").manual_seed(0)
            x = [torch.randn((b, h, n, d), device="cuda", generator=g) for _ in range(3)]
            half = [t.half() for t in x]
            print(f"\n{b}x{h}x{n}x{d} {'causal' if causal else 'full'}")
            for name, backend in (("torch sdpa float16 cudnn", SDPBackend.CUDNN_ATTENTION),
                                  ("torch sdpa float16 flash", SDPBackend.FLASH_ATTENTION)):
                sdpa = functools.partial(F.scaled_dot_product_attention, *half, is_causal=causal)
                with sdpa_kernel(backend):
                    print(f"  {name:34s} {rate(sdpa):7.1f}")
            for kind in (torch.float8_e4m3fn, torch.float8_e5m2):
                (q, k, v), descales = quantized_inputs(*x, kind, "head")
                v_kmajor = v.transpose(2, 3).contiguous().transpose(2, 3)
                for pv in (0, 1):
                    config = impl.config({**json.loads(args.config), "PV_FP8": pv})
                    call = op.check(q, k, v_kmajor, causal=causal, **descales)
                    verdict = ""
                    if b * h * n * n <= VERIFY_LIMIT:
                        why = op.verify(call, impl.run(call, config), op.reference(call))
                        verdict = "meets the tolerance" if why is None else f"MISSES: {why.what[:100]}"
                    label = f"triton {str(kind).removeprefix('torch.float8_')} PV_FP8={pv}"
                    print(f"  {label:34s} {rate(functools.partial(impl.run, call, config)):7.1f}  {verdict}")
                plain = op.check(q, k, v, causal=causal, **descales)
                config = impl.config({**json.loads(args.config), "PV_FP8": 0})
                print(f"  {'  +copy of Vᵀ (PV_FP8=0)':34s} {rate(functools.partial(impl.run, plain, config)):7.1f}")


if __name__ == "__main__":
    main()
