"""Where a training step of the tiny transformer spends its time on the GPU, in mytorch and in
PyTorch eager: torch.profiler over a few steps at the benchmark's size, the busiest CUDA kernels and
CPU functions, and per step the wall time, the GPU's kernel time, the host's enqueue time (the step
run without a final synchronisation; when it is close to the wall time the step is bound by Python
and launches, not by kernels) and the number of host synchronisations (torch's sync debug mode).

    python scripts/mytorch_profile.py [--out DIR] [--steps 5]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from mytorch_bench import TorchTransformer
from tiny_transformer import TinyTransformer

import mytorch


def steps(vocab: int, batch: int, length: int, dim: int, heads: int) -> dict:
    """One training step of each framework on the same weights and tokens."""
    mine = TinyTransformer(vocab, length, dim, heads, 2, dropout=0.0).to("cuda")
    ref = TorchTransformer(vocab, length, dim, heads, 2).to("cuda")
    ref.load_state_dict({k: v.data for k, v in mine.state_dict().items()})
    opt = mytorch.optim.AdamW(mine.parameters(), lr=1e-4)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-4, foreach=True)
    loss_fn = mytorch.nn.CrossEntropyLoss()

    def new_batch() -> tuple[torch.Tensor, torch.Tensor]:  # each step a new batch, as from a data loader
        return (torch.randint(0, vocab, (batch, length), device="cuda"),
                torch.randint(0, vocab, (batch, length), device="cuda"))

    def mytorch_step() -> None:
        tokens, target = new_batch()
        x, y = mytorch.from_torch(tokens), mytorch.from_torch(target)
        opt.zero_grad()
        loss_fn(mine(x).view(-1, vocab), y.view(-1)).backward()
        opt.step()

    def torch_step() -> None:
        tokens, target = new_batch()
        ref_opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(ref(tokens).view(-1, vocab), target.view(-1)).backward()
        ref_opt.step()

    return {"mytorch": mytorch_step, "torch": torch_step}


def host_syncs(step) -> Counter:
    """The synchronising CUDA calls of one step, counted by where the project's code made them."""
    places: Counter = Counter()
    root = str(Path(__file__).resolve().parent.parent)

    def record(message, category, filename, lineno, file=None, line=None) -> None:
        if "synchroniz" in str(message):
            frames = [f for f in traceback.extract_stack()[:-1] if f.filename.startswith(root)
                      and not f.filename.endswith("mytorch_profile.py")]
            places[" <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in reversed(frames[-3:]))] += 1

    torch.cuda.set_sync_debug_mode("warn")
    shown = warnings.showwarning
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = record
            step()
    finally:
        warnings.showwarning = shown
        torch.cuda.set_sync_debug_mode("default")
    return places


def host_profile(step, count: int) -> str:
    """cProfile of ``count`` steps: where the host's time goes, by function."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(count):
        step()
    torch.cuda.synchronize()
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(40)
    stats.sort_stats("cumtime").print_stats(60)
    return text.getvalue()


def profile_step(name: str, step, count: int, out: Path) -> str:
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    enqueue = []
    for _ in range(count):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        enqueue.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    syncs = host_syncs(step)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        for _ in range(count):
            step()
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
    events = prof.key_averages()
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]  # the GPU's own events
    gpu_us = sum(e.self_device_time_total for e in kernels)
    launches = sum(e.count for e in kernels) / count
    line = (f"{name:8} wall {wall / count * 1e3:6.2f} ms (profiled), GPU kernels {gpu_us / count / 1e3:6.2f} ms "
            f"({launches:.0f} launches), GPU busy {gpu_us / 1e6 / wall:4.0%}, host enqueue "
            f"{min(enqueue) * 1e3:6.2f} ms, host syncs {sum(syncs.values())}")
    where = "\n".join(f"{n:3} {place}" for place, n in syncs.most_common())
    tables = [line, f"host syncs by place:\n{where}", events.table(sort_by="self_device_time_total", row_limit=30),
              events.table(sort_by="self_cpu_time_total", row_limit=30), host_profile(step, count)]
    (out / f"{name}_profile.txt").write_text("\n\n".join(tables))
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--size", nargs=5, type=int, default=(1000, 32, 256, 512, 8),
                        metavar=("VOCAB", "BATCH", "LENGTH", "DIM", "HEADS"))
    parser.add_argument("--tag", default="", help="suffix of the output files")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [profile_step(name + args.tag, step, args.steps, out) for name, step in steps(*args.size).items()]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
