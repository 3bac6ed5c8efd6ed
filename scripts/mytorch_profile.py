"""Where a mytorch training step spends its time on the GPU: torch.profiler over a few steps of the
tiny transformer at the benchmark's size, the busiest CUDA kernels and CPU functions, and the GPU's
busy share of the wall time (low: the step is bound by Python and launches; high: by kernels).

    python scripts/mytorch_profile.py [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

from tiny_transformer import TinyTransformer

import mytorch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    vocab, batch, length, dim, heads = 1000, 32, 256, 512, 8
    model = TinyTransformer(vocab, length, dim, heads, 2, dropout=0.0).to("cuda")
    opt = mytorch.optim.AdamW(model.parameters(), lr=1e-4)
    x = mytorch.randint(0, vocab, (batch, length), device="cuda")
    y = mytorch.randint(0, vocab, (batch, length), device="cuda")
    loss_fn = mytorch.nn.CrossEntropyLoss()

    def step() -> None:
        opt.zero_grad()
        loss_fn(model(x).view(-1, vocab), y.view(-1)).backward()
        opt.step()

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
    events = prof.key_averages()
    gpu_us = sum(e.self_device_time_total for e in events)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = [events.table(sort_by="self_device_time_total", row_limit=25),
            events.table(sort_by="self_cpu_time_total", row_limit=25),
            f"per step: wall {wall / args.steps * 1e3:.2f} ms (profiled), GPU kernels "
            f"{gpu_us / args.steps / 1e3:.2f} ms, GPU busy {gpu_us / 1e6 / wall:.0%}"]
    (out / "mytorch_profile.txt").write_text("\n\n".join(text))
    print(text[-1])


if __name__ == "__main__":
    main()
