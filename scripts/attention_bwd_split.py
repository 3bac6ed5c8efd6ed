"""The cuda attention backward's two dK/dV layouts on the GPU (SPLIT 0: 16 keys a warp; SPLIT 1: pairs of warps,
a head-dim half each) against FlashAttention-2's backward, at B=4 H=32 N=4096, D 64 and 128, causal and not,
float16: GPU time (CUDA events, L2 flushed, host hidden) of the whole backward, interleaved rounds, TFLOP/s
(2.5 × the forward's 4·B·H·N²·D, halved when causal). Every config's gradients are first compared with FA2's.

    python scripts/attention_bwd_split.py [--rounds 3] [--budget-ms 150]
    python scripts/attention_bwd_split.py --dims 64 --inner 32,64,128 \
        --config 'w4i32={"WARPS": 4, "BLOCK_INNER": 32}' --config 'i128={"BLOCK_INNER": 128}'

``--config NAME=JSON`` (repeated) times those configs instead of the two layouts; ``--inner`` widens the
BLOCK_INNER values the plugin accepts, in this process only, to try a step outside its config space.
``--old-source FILE`` (an earlier attention_backward/cuda.cu; its includes are read from the plugin's directory)
times every config a second time, built from that source (named NAME@old), in the same interleaved rounds: an
A/B of a kernel change.

With ``--ncu``, runs each dK/dV kernel once (for ``ncu -k regex:'dkdv|flash_bwd' ... python
scripts/attention_bwd_split.py --ncu``) and times nothing.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from kernelzoo.backends.sources import expand_includes
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import registry
from kernelzoo.timing import time_rounds

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
    parser.add_argument("--dims", default="64,128")
    parser.add_argument("--inner", help="BLOCK_INNER values to accept, comma-separated")
    parser.add_argument("--config", action="append", default=[], metavar="NAME=JSON")
    parser.add_argument("--old-source", type=Path)
    args = parser.parse_args()
    if args.inner:
        BWD.config_space["BLOCK_INNER"] = [int(v) for v in args.inner.split(",")]
    configs = {"split0": BWD.config(), "split1": BWD.config({"SPLIT": 1})}
    if args.config:
        configs = {name: BWD.config(json.loads(text)) for name, text in (c.split("=", 1) for c in args.config)}
    runners = {name: (BWD, config) for name, config in configs.items()}
    if args.old_source:
        old = type(BWD)()  # its own kernel cache, its source read from the file
        text = expand_includes(args.old_source.read_text(), "cuda.cu", BWD.source_dir())
        old.read_source = lambda name: text
        runners.update({f"{name}@old": (old, config) for name, config in configs.items()})
    failures, rows = 0, []
    for d, causal in itertools.product((int(v) for v in args.dims.split(",")), (False, True)):
        q, k, v, o, lse, do = inputs(d, causal)
        call = BWD_OP.check(q, k, v, o, lse, do, causal=causal)
        flash = flash_backward(q, k, v, do, causal)
        want = flash()
        runs = {"flash": flash}
        for name, (impl, config) in runners.items():
            try:
                got = impl.run(call, config)
            except UnsupportedError as exc:
                print(f"D={d} causal={causal} {name}: unsupported: {exc}")
                continue
            worst = max(float((a.float() - b.float()).abs().max()) for a, b in zip(got, want))
            scale = max(float(b.float().abs().max()) for b in want)
            ok = worst <= 2e-2 * max(1.0, scale)
            failures += not ok
            print(f"D={d} causal={causal} {name}: max |grad - FA2's| {worst:.2e} (largest |grad| {scale:.2e})"
                  f"{'' if ok else '  <- MISMATCH'}", flush=True)
            runs[name] = lambda call=call, impl=impl, config=config: impl.run(call, config)
        if args.ncu:
            for fn in runs.values():
                fn()
            torch.cuda.synchronize()
            continue
        times = time_rounds(runs, "cuda", rounds=args.rounds, budget_ms=args.budget_ms, hide_host=True)
        flops = 2.5 * 4 * 4 * 32 * 4096 ** 2 * d / (2 if causal else 1)
        med = {name: statistics.median(t) for name, t in times.items()}
        rows.append((d, causal, {name: flops / t / 1e9 for name, t in med.items()}))
    if rows:
        names = list(runners)
        print("\nTFLOP/s, B=4 H=32 N=4096 float16 (medians of the rounds; in brackets, over FA2's):")
        print("| D | causal | FA2 | " + " | ".join(names) + " |")
        print("|---|---|---:|" + "---:|" * len(names))
        for d, causal, tf in rows:
            cells = [f"{tf[n]:.0f} ({tf[n] / tf['flash']:.2f})" if n in tf else "–" for n in names]
            print(f"| {d} | {'yes' if causal else 'no'} | {tf['flash']:.0f} | " + " | ".join(cells) + " |")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
