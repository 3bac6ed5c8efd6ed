"""The cuda forward's warpgroup-MMA configs timed in the same rounds, with and without a code-shaping define.

    python scripts/attention_wgmma_ab.py [--define NAME[=A,B]] [--configs 64/128/4/2,...] [--rounds 3]
                                         [--budget-ms 60]

For B=4 H=32 N=4096 float16, D 64 and 128, causal and not: every listed WGMMA config (BLOCK_M/BLOCK_N/WARPS/
STAGES, then any +NAME=VALUE of other entries or defines: 128/128/8/3+PRODUCER=3+OVERLAP=1, say; in or outside
the config space; those that do not fit a shape are skipped), with --define NAME at 0 and at
1, or at A and B (an upper-case config entry becomes a -D define: PRODUCER=1,2, say), each checked against FA2's
output first, then timed (GPU time, L2 flushed, host hidden) in interleaved rounds, each round in its own shuffled
order; the table gives the median TFLOP/s of the rounds (and the ratio of B over A), with FA2 and cuDNN timed in
the same rounds.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
from functools import partial

import torch
from attention_bench import sdpa  # this folder's
from torch.nn.attention import SDPBackend

from kernelzoo.registry import randn, registry
from kernelzoo.timing import time_rounds

FWD, IMPL = registry.op("attention"), registry.impl("attention", "cuda")
CONFIGS = "64/64/4/2,64/128/4/2,64/128/4/3,128/64/8/2,128/64/8/3,128/128/8/2,128/128/8/3"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--define", help="a define of plugins/attention/cuda.cu to try at 0 and 1 (NAME), or at "
                                         "two values (NAME=A,B)")
    parser.add_argument("--configs", default=CONFIGS,
                        help="BLOCK_M/BLOCK_N/WARPS/STAGES[+NAME=VALUE...], comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget-ms", type=float, default=60.0)
    args = parser.parse_args()
    g = torch.Generator().manual_seed(0)
    failures = 0
    define, _, pair = (args.define or "").partition("=")
    values = tuple(int(v) for v in pair.split(",")) if pair else (0, 1) if define else (None,)
    if define and len(values) != 2:
        parser.error(f"--define {args.define}: two values, A,B")
    configs, (first, second) = args.configs.split(","), values * (2 // len(values))
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; TFLOP/s, B=4 H=32 N=4096 float16; "
          f"config BLOCK_M/BLOCK_N/WARPS/STAGES" + (f"; {define}={first} and ={second}" if define else ""))
    if define:
        print(f"| D | causal | FA2 | cuDNN | config | {define}={first} | {define}={second} | {second} / {first} |")
        print("|---|---|---:|---:|---|---:|---:|---:|")
    else:
        print("| D | causal | FA2 | cuDNN | config | TFLOP/s | / FA2 | / cuDNN |")
        print("|---|---|---:|---:|---|---:|---:|---:|")
    for d, causal in itertools.product((64, 128), (False, True)):
        q, k, v = (randn((4, 32, 4096, d), "cuda", torch.float16, g) for _ in range(3))
        call = FWD.check(q, k, v, causal=causal)
        flops = FWD.flops(call)
        ref = sdpa(SDPBackend.FLASH_ATTENTION, q, k, v, causal)
        runs = {"flash": partial(sdpa, SDPBackend.FLASH_ATTENTION, q, k, v, causal),
                "cudnn": partial(sdpa, SDPBackend.CUDNN_ATTENTION, q, k, v, causal)}
        for name, value in itertools.product(configs, values):
            shape, *extras = name.split("+")
            bm, bn, w, st = map(int, shape.split("/"))
            config = IMPL.config({"WGMMA": 1, "BLOCK_M": bm, "BLOCK_N": bn, "WARPS": w, "STAGES": st,
                                  **{k: int(v) for k, _, v in (e.partition("=") for e in extras)}})
            if define:
                config[define] = value
            try:
                IMPL.shared_memory(call, config)
            except Exception as exc:  # does not fit: not a candidate
                print(f"  skip {name} {define}={value}: {exc}", file=sys.stderr)
                continue
            err = float((IMPL.run(call, config)[0].float() - ref.float()).abs().max())
            if err > 2e-2:
                print(f"MISMATCH D={d} causal={causal} {name} {define}={value}: max |o - FA2's| {err:.1e}")
                failures += 1
                continue
            runs[name, value] = partial(IMPL.run, call, config)
        times = time_rounds(runs, "cuda", rounds=args.rounds, budget_ms=args.budget_ms, hide_host=True)
        tf = {key: flops / (statistics.median(ms) * 1e-3) / 1e12 for key, ms in times.items()}
        head = f"| {d} | {'yes' if causal else 'no'} | {tf['flash']:.0f} | {tf['cudnn']:.0f}"
        for name in configs:
            if define and (name, first) in tf and (name, second) in tf:
                a, b = tf[name, first], tf[name, second]
                print(f"{head} | {name} | {a:.0f} | {b:.0f} | {b / a:.2f} |", flush=True)
            elif not define and (name, None) in tf:
                t = tf[name, None]
                print(f"{head} | {name} | {t:.0f} | {t / tf['flash']:.2f} | {t / tf['cudnn']:.2f} |", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
