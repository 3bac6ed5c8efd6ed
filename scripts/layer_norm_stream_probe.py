"""The cuda layer_norm's streaming kernel (ln_stream) at one shape: for each config, the clusters the driver
says run at once, the kernel's registers, and the time with the persistent grid at 1-4 times that many clusters
(any grid is correct: the clusters take rows c, c + clusters, ...), as % of the floor, next to ln_cluster; each
with the row statistics gathered by one warp (STATS_GATHER 1) and read by every thread (0).

    python scripts/layer_norm_stream_probe.py [--shape 1024x65536] [--dtype float32]

Every launch's output is checked against torch's layer_norm first.
"""

from __future__ import annotations

import argparse
import functools

import torch

from kernelzoo.backends.cuda import I64
from kernelzoo.registry import registry
from kernelzoo.timing import time_fn

CONFIGS = [(512, 32, 4), (256, 32, 8), (1024, 16, 4), (512, 16, 8)]  # THREADS, ITEMS, CLUSTER


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="1024x65536")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--budget-ms", type=float, default=20.0)
    args = parser.parse_args()
    rows, n = map(int, args.shape.split("x"))
    dtype = getattr(torch, args.dtype)
    impl, op = registry.impl("layer_norm", "cuda"), registry.op("layer_norm")
    call = op.example((rows, n), dtype, "cuda", torch.Generator().manual_seed(0))
    x, w, b = call.inputs["x"], call.inputs["weight"], call.inputs["bias"]
    want = torch.nn.functional.layer_norm(x, (n,), w, b)
    src = torch.randn(1 << 28, device="cuda")
    dst = torch.empty_like(src)
    bandwidth = 2 * src.numel() * 4 / time_fn(lambda: dst.copy_(src), "cuda", budget_ms=args.budget_ms,
                                              hide_host=True).median_ms
    floor = op.bytes(call) / bandwidth
    print(f"{torch.cuda.get_device_name()}, {args.shape} {args.dtype}: floor {floor:.4f} ms "
          f"(1 GiB copy {bandwidth / 1e6:.0f} GB/s)")
    print("| THREADS×ITEMS, CLUSTER | RING | STATS_GATHER | registers | resident clusters | ln_cluster | ×1 | ×2 | ×3 "
          "| ×4 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    y, mean, rstd = (torch.empty_like(x), torch.empty(rows, device="cuda"), torch.empty(rows, device="cuda"))

    def pct(fn) -> str:
        fn()
        if not torch.allclose(y.float(), want.float(), atol=1e-3, rtol=1e-3):
            return "WRONG"
        return f"{100 * floor / time_fn(fn, 'cuda', budget_ms=args.budget_ms, hide_host=True).median_ms:.1f}%"

    for threads, items, cluster in CONFIGS:
        base = impl.config({"THREADS": threads, "ITEMS": items, "CLUSTER": cluster, "RING": 0})
        looped = pct(functools.partial(impl._launch, x, w, b, y, mean, rstd, 1e-5, base))
        for ring, gather in ((2, 1), (2, 0), (3, 1)):
            config = {**base, "RING": ring, "STATS_GATHER": gather}
            kernel = impl.kernel("ln_stream_vec", dtype, config)
            shared = ring * threads * items * x.element_size()
            resident = impl.resident_clusters(kernel, cluster, threads, shared)
            times = []
            for times_resident in (1, 2, 3, 4):
                grid = min(rows, times_resident * resident) * cluster
                times.append(pct(functools.partial(kernel, x, w, b, y, mean, rstd, rows, n, I64(x.stride(0)), 1e-5,
                                                   grid=grid, block=threads, shared_mem=shared)))
            registers = kernel.attributes()["registers"]
            print(f"| {threads}×{items}, {cluster} | {ring} | {gather} | {registers} | {resident} | {looped} | "
                  f"{' | '.join(times)} |")


if __name__ == "__main__":
    main()
