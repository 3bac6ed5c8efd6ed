"""The Triton attention plugins per config against SDPA's cuDNN and FlashAttention-2 backends, float16,
on the attention issue's shapes: which tiles win where, forward and backward, in one run.

    python scripts/attention_triton_configs.py [--pass fwd|bwd|both]

Each config's output is compared with cuDNN's (largest absolute difference printed beside its time);
times are triton.testing.do_bench medians (L2 cleared between runs). TFLOP/s count the forward as
4·B·H·N²·D, halved when causal, and the backward as 2.5× that. The backward is timed at N ≥ 4096 only.
"""

from __future__ import annotations

import argparse
from functools import partial

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

from kernelzoo.registry import registry

FORWARD = [(128, 64, 4, 2), (128, 128, 4, 3), (128, 64, 4, 3), (128, 64, 8, 2), (64, 64, 4, 2)]
# (BLOCK_OUTER, BLOCK_INNER, num_warps, num_stages, DQ)
BACKWARD = [(128, 64, 8, 3, "pass"), (128, 64, 8, 2, "pass"), (128, 64, 4, 2, "pass"), (64, 64, 4, 2, "pass"),
            (64, 32, 4, 3, "pass"), (128, 64, 8, 3, "atomic"), (128, 64, 8, 2, "atomic"), (128, 32, 8, 2, "atomic"),
            (128, 64, 4, 2, "atomic"), (64, 64, 4, 2, "atomic"), (128, 32, 4, 2, "atomic"), (64, 32, 4, 3, "atomic")]
SHAPES = [(4, 32, 1024, 64), (4, 32, 1024, 128), (4, 32, 4096, 64), (1, 32, 16384, 64), (4, 32, 4096, 128),
          (1, 32, 16384, 128)]


def tflops(ms: float, shape: tuple[int, int, int, int], causal: bool, factor: float = 1.0) -> float:
    b, h, n, d = shape
    return factor * 4 * b * h * n * n * d / (2 if causal else 1) / ms / 1e9


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=30, rep=200)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pass", dest="which", choices=("fwd", "bwd", "both"), default="both")
    which = parser.parse_args().which
    fwd_op, bwd_op = registry.op("attention"), registry.op("attention_backward")
    fwd, bwd = registry.impl("attention", "triton"), registry.impl("attention_backward", "triton")
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__, flush=True)
    for causal in (False, True):
        for shape in SHAPES:
            torch.manual_seed(0)
            q, k, v = (torch.randn(shape, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3))
            do = torch.randn_like(q)
            timed_bwd = shape[2] >= 4096 and which != "fwd"
            base = {}
            for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
                with sdpa_kernel(backend):
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    sdpa = partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal)
                    base[name, "fwd"] = tflops(bench(sdpa), shape, causal)
                    if timed_bwd:
                        grads = partial(torch.autograd.grad, o, (q, k, v), do, retain_graph=True)
                        base[name, "bwd"] = tflops(bench(grads), shape, causal, 2.5)
            print("x".join(map(str, shape)), "causal" if causal else "", " ".join(
                f"{name} {p} {t:.0f}" for (name, p), t in base.items()), flush=True)
            qd, kd, vd = q.detach(), k.detach(), v.detach()
            call = fwd_op.check(qd, kd, vd, causal=causal)
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                o_ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                grads_ref = torch.autograd.grad(o_ref, (q, k, v), do)
            runs = []
            if which != "bwd":
                runs += [("fwd", fwd, call, dict(zip(("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"), c)), (o_ref,))
                         for c in FORWARD]
            if timed_bwd:
                o, lse = fwd.run(call, fwd.config())
                bcall = bwd_op.check(qd, kd, vd, o, lse, do, causal=causal)
                names = ("BLOCK_OUTER", "BLOCK_INNER", "num_warps", "num_stages", "DQ")
                runs += [("bwd", bwd, bcall, dict(zip(names, c)), grads_ref) for c in BACKWARD]
            for p, impl, c, config, ref in runs:
                factor = 2.5 if p == "bwd" else 1.0
                try:
                    out = impl.run(c, config)
                    out = out if p == "bwd" else out[:1]
                    err = max((a.float() - r.float()).abs().max().item() for a, r in zip(out, ref))
                    t = tflops(bench(partial(impl.run, c, config)), shape, causal, factor)
                    print(f"   {p} {tuple(config.values())}: {t:.0f} ({t / base['cudnn', p]:.2f}x cudnn, "
                          f"{t / base['fa2', p]:.2f}x fa2) err {err:.1e}", flush=True)
                except Exception as exc:  # a config that does not fit is reported, the sweep goes on
                    print(f"   {p} {tuple(config.values())}: FAIL {type(exc).__name__} {str(exc)[:150]}", flush=True)


if __name__ == "__main__":
    main()
