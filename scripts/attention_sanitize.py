"""The cuda attention kernels on odd shapes, for compute-sanitizer:

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck python scripts/attention_sanitize.py

N = 1, 97, 1025 (and Nq != Nk), causal and not, D 24, 64 and 128, float16, forward and backward with the default
config (the forward also with 32-key tiles and q read from shared memory and, on an sm_90 device, with every
Hopper config: the warpgroup MMAs with no producer, a cp.async producer warp (PRODUCER 1), TMA loads by a
producer warp or warpgroup (2, 3) and FlashAttention-3's order (OVERLAP 1), each where it fits the call; the
backward with both of its dQ strategies, each in both dK/dV layouts, SPLIT 0 and 1, where the head dim allows,
and on an sm_90 device the warpgroup-MMA dK/dV pass with one and two warpgroups, whose dQ leaves by the TMA
unit's bulk reductions). At D = 24 (compiled for 32) every row's last chunk lies past d: the loads zero-fill it
and must read nothing there. Without torch's caching allocator every tensor is its own allocation, so a read or
write past any of them is reported.
``--backward-only`` runs the backward alone, on Nq × Nk = 97 × 97 and 1025 × 97 at D 64 and 128, for
``compute-sanitizer --tool racecheck``, whose shared-memory hazard tracking makes every launch far slower.
"""

from __future__ import annotations

import argparse
import itertools

import torch

from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import randn, registry

FWD, BWD = registry.impl("attention", "cuda"), registry.impl("attention_backward", "cuda")
# The warpgroup forward's pipelines at both tile widths (the producer and order of each Hopper default and more).
HOPPER = [{"WGMMA": 1, "WARPS": w, "BLOCK_M": 16 * w, "BLOCK_N": bn, "STAGES": 3, "PRODUCER": p, "OVERLAP": o}
          for w, bn, p, o in itertools.product((4, 8), (64, 128), (0, 1, 2, 3), (0, 1))]
BWD_HOPPER = [{"WGMMA": 1, "WARPS": w, "BLOCK_OUTER": 16 * w, "STAGES": st} for w, st in ((4, 3), (8, 2), (8, 3))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backward-only", action="store_true")
    args = parser.parse_args()
    g = torch.Generator().manual_seed(0)  # randn draws its seed on the CPU, its values on the GPU
    hopper, bwd_hopper = (HOPPER, BWD_HOPPER) if torch.cuda.get_device_capability() >= (9, 0) else ([], [])
    runs = backward_runs = hopper_runs = 0
    sizes = [(97, 97), (1025, 97)] if args.backward_only else [(1, 1), (97, 97), (1025, 1025), (97, 1025), (1025, 97)]
    dims = (64, 128) if args.backward_only else (24, 64, 128)
    for (nq, nk), d, causal in itertools.product(sizes, dims, (False, True)):
        q = randn((1, 2, nq, d), "cuda", torch.float16, g)
        k, v = (randn((1, 2, nk, d), "cuda", torch.float16, g) for _ in range(2))
        call = registry.op("attention").check(q, k, v, causal=causal)
        o, lse = FWD.run(call, FWD.config())
        if not args.backward_only:
            FWD.run(call, FWD.config({"BLOCK_N": 32, "WARPS": 4, "Q_REGS": 0}))
            for overrides in hopper:
                try:
                    FWD.run(call, FWD.config(overrides))
                except UnsupportedError:
                    continue
                hopper_runs += 1
        do = randn(o.shape, "cuda", torch.float16, g)
        bwd_call = registry.op("attention_backward").check(q, k, v, o, lse, do, causal=causal)
        layouts = [{"DQ": dq, "SPLIT": split}  # dQ by its own pass and by atomics, in either dK/dV layout
                   for dq, split in itertools.product(BWD.config_space["DQ"], BWD.config_space["SPLIT"])]
        for overrides in layouts + bwd_hopper:
            try:
                BWD.run(bwd_call, BWD.config(overrides))
            except UnsupportedError:
                continue
            backward_runs += 1
        torch.cuda.synchronize()
        runs += 1
    forward = "default config" if args.backward_only else f"two configs and {hopper_runs} Hopper runs"
    print(f"{runs} shapes, forward ({forward}) and "
          f"{backward_runs} backward runs (both dQ strategies, both layouts, the Hopper pass, where supported): done")


if __name__ == "__main__":
    main()
