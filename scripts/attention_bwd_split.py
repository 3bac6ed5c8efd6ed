"""The cuda attention backward's two dK/dV layouts on the GPU (SPLIT 0: 16 keys a warp; SPLIT 1: pairs of warps,
a head-dim half each) against FlashAttention-2's backward, at B=4 H=32 N=4096, D 64 and 128, causal and not,
float16: GPU time (CUDA events, L2 flushed, host hidden) of the whole backward, interleaved rounds, TFLOP/s
(2.5 × the forward's 4·B·H·N²·D, halved when causal). Every config's gradients are first compared with FA2's.

    python scripts/attention_bwd_split.py [--rounds 3] [--budget-ms 150]

With ``--ncu``, runs each dK/dV kernel once (for ``ncu -k regex:'dkdv|flash_bwd' ... python
scripts/attention_bwd_split.py --ncu``) and times nothing.
"""

from __future__ import annotations

import argparse
import itertools
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from kernelzoo.registry import registry
from kernelzoo.timing import time_fn

FWD, BWD = registry.impl("attention", "cuda"), registry.impl("attention_backward", "cuda")
FWD_OP, BWD_OP = registry.op("attention"), registry.op("attention_backward")


def inputs(d: int, causal: bool, n: int = 4096) -> tuple:
    g = torch.Generator(device="cuda").manual_seed(d + causal)
    q, k, v, do = (torch.randn(4, 32, n, d, device="cuda", dtype=torch.float16, generator=g) for _ in range(4))
    o, lse = FWD.run(FWD_OP.check(q, k, v, causal=causal), FWD.config())
    return q, k, v, o, lse, do


def flash_backward(q, k, v, do, causal):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
    return lambda: torch.autograd.grad(out, leaves, do, retain_graph=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget-ms", type=float, default=150.0)
    parser.add_argument("--ncu", action="store_true")
    args = parser.parse_args()
    configs = {"split0": BWD.config(), "split1": BWD.config({"SPLIT": 1})}
    failures, rows = 0, []
    for d, causal in itertools.product((64, 128), (False, True)):
        q, k, v, o, lse, do = inputs(d, causal)
        call = BWD_OP.check(q, k, v, o, lse, do, causal=causal)
        flash = flash_backward(q, k, v, do, causal)
        want = flash()
        runs = {"flash": flash}
        for name, config in configs.items():
            got = BWD.run(call, config)
            worst = max(float((a.float() - b.float()).abs().max()) for a, b in zip(got, want))
            scale = max(float(b.float().abs().max()) for b in want)
            ok = worst <= 2e-2 * max(1.0, scale)
            failures += not ok
            print(f"D={d} causal={causal} {name}: max |grad - FA2's| {worst:.2e} (largest |grad| {scale:.2e})"
                  f"{'' if ok else '  <- MISMATCH'}", flush=True)
            runs[name] = lambda call=call, config=config: BWD.run(call, config)
        if args.ncu:
            for fn in runs.values():
                fn()
            torch.cuda.synchronize()
            continue
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, fn in runs.items():
                times[name].append(time_fn(fn, "cuda", budget_ms=args.budget_ms, hide_host=True).median_ms)
        flops = 2.5 * 4 * 4 * 32 * 4096 ** 2 * d / (2 if causal else 1)
        med = {name: statistics.median(t) for name, t in times.items()}
        rows.append((d, causal, *(flops / med[n] / 1e9 for n in ("flash", "split0", "split1"))))
    if rows:
        print("\nTFLOP/s, B=4 H=32 N=4096 float16 (medians of the rounds):")
        print("| D | causal | FA2 | SPLIT 0 | SPLIT 1 | SPLIT 1 / 0 | SPLIT 1 / FA2 |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for d, causal, fa, s0, s1 in rows:
            print(f"| {d} | {'yes' if causal else 'no'} | {fa:.0f} | {s0:.0f} | {s1:.0f} | {s1 / s0:.2f} "
                  f"| {s1 / fa:.2f} |")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
