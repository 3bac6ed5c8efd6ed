"""The four runners of ``kernelzoo bench --mytorch-step`` (torch eager, torch.compile, mytorch eager, mytorch
graphed) in one process at one size, interleaved a step each on the same batch, with a device synchronisation
after every step. Prints the first runner whose step raises (an illegal memory access, say: after one, every
later CUDA call fails too, so the first is the one to read), else each runner's losses against torch eager's.
Under CUDA_LAUNCH_BLOCKING=1 a fault is reported by the launch that made it.

    [CUDA_LAUNCH_BLOCKING=1] python scripts/step_check.py [--config 32,256,512,8,4] [--steps 20] [--rtol 1e-3]
                                                          [--device cuda]

Exit status: 0 when every step ran and every loss is within --rtol of torch eager's, 1 otherwise.
"""

from __future__ import annotations

import argparse
import math
import sys
import traceback

import torch

from kernelzoo.bench.step import RUNNERS, make_runners


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="32,256,512,8,4", help="batch,seq,dim,heads,blocks")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--rtol", type=float, default=1e-3, help="losses against torch eager's")
    parser.add_argument("--device", default="cuda", help="cuda, or cpu (without the graphed runner: a dry run)")
    args = parser.parse_args()
    config = tuple(int(v) for v in args.config.split(","))
    batch, seq = config[:2]
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    g = torch.Generator().manual_seed(0)

    def draw() -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.randint(0, args.vocab, (batch, seq), generator=g).to(device),
                torch.randint(0, args.vocab, (batch * seq,), generator=g).to(device))

    tokens, target = draw()
    steps = {}
    for name, step in make_runners(config, args.vocab, device, 1e-4, RUNNERS, tokens, target).items():
        if isinstance(step, str):
            print(f"{name}: cannot run here: {step}")
        else:
            steps[name] = step
    losses: dict[str, list[float]] = {name: [] for name in steps}
    for i in range(args.steps):
        x, y = draw() if i else (tokens, target)
        for name, step in steps.items():
            try:
                value = step(x, y)
                sync()
                losses[name].append(float(value.item()))
            except Exception as exc:  # the first failure is the report; the context may be unusable after it
                print(f"FIRST FAILURE: runner {name!r} at step {i} of {args.config}: {type(exc).__name__}: {exc}")
                traceback.print_exc()
                return 1
    print(f"{args.config}: {args.steps} steps of each runner ran; loss at each step:")
    want = losses.get("torch")
    bad = False
    for name, got in losses.items():
        worst = max((abs(a - b) / abs(b) for a, b in zip(got, want)), default=0.0) if want else float("nan")
        wrong = not all(map(math.isfinite, got)) or worst > args.rtol
        bad |= wrong
        print(f"  {name:16} {' '.join(f'{v:.5f}' for v in got)}  (most off torch eager: {worst:.2e}"
              f"{', MISMATCH' if wrong else ''})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
