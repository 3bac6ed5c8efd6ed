"""One training step of the tiny transformer (examples/tiny_transformer.py) at a realistic size, in
mytorch and in PyTorch eager with the same weights, on the GPU.

    python scripts/mytorch_bench.py [--out DIR] [--batch 32] [--length 256] [--dim 512] [--heads 8]

A step is forward, cross-entropy, backward and an AdamW update. Both models start from the same
weights; their first losses are compared before timing. Each timed step draws a new batch of tokens
(as a data loader would: index checks cannot reuse an earlier batch's). Times are medians over
--steps steps after --warmup steps, each step ended by a device synchronisation. Prints the ratio and mytorch's per-op
trace of one step; writes mytorch_bench.json under --out.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

from tiny_transformer import TinyTransformer

import mytorch


class TorchBlock(torch.nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.attn = torch.nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim),
                                       torch.nn.Dropout(0.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class TorchTransformer(torch.nn.Module):
    """examples/tiny_transformer.py's model in torch.nn, with the same parameter names."""

    def __init__(self, vocab: int, length: int, dim: int, heads: int, blocks: int) -> None:
        super().__init__()
        self.token = torch.nn.Embedding(vocab, dim)
        self.position = torch.nn.Embedding(length, dim)
        self.blocks = torch.nn.ModuleList([TorchBlock(dim, heads) for _ in range(blocks)])
        self.norm = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab)
        self.register_buffer("positions", torch.arange(length))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.token(tokens) + self.position(self.positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def timed(step, batch, warmup: int, steps: int, device: str) -> list[float]:
    """Step times in ms; ``batch()`` makes each step's inputs before its clock starts."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(warmup):
        step(*batch())
    times = []
    for _ in range(steps):
        inputs = batch()
        sync()
        start = time.perf_counter()
        step(*inputs)
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--gc-freeze", action="store_true",
                        help="move every object alive after warm-up out of the garbage collector's reach (gc.freeze)")
    args = parser.parse_args()
    device = args.device
    mine = TinyTransformer(args.vocab, args.length, args.dim, args.heads, args.blocks, dropout=0.0).to(device)
    ref = TorchTransformer(args.vocab, args.length, args.dim, args.heads, args.blocks).to(device)
    ref.load_state_dict({k: v.data for k, v in mine.state_dict().items()})
    tokens = torch.randint(0, args.vocab, (args.batch, args.length), device=device)
    target = torch.randint(0, args.vocab, (args.batch, args.length), device=device)
    opt = mytorch.optim.AdamW(mine.parameters(), lr=1e-4)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-4, foreach=True)
    loss_fn = mytorch.nn.CrossEntropyLoss()

    def mytorch_step(tokens: torch.Tensor, target: torch.Tensor) -> mytorch.Tensor:
        x, y = mytorch.from_torch(tokens), mytorch.from_torch(target)
        opt.zero_grad()
        loss = loss_fn(mine(x).view(-1, args.vocab), y.view(-1))
        loss.backward()
        opt.step()
        return loss

    def torch_step(tokens: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        ref_opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(ref(tokens).view(-1, args.vocab), target.view(-1))
        loss.backward()
        ref_opt.step()
        return loss

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.randint(0, args.vocab, (args.batch, args.length), device=device),
                torch.randint(0, args.vocab, (args.batch, args.length), device=device))

    first, ref_first = mytorch_step(tokens, target).item(), torch_step(tokens, target).item()
    print(f"first loss: mytorch {first:.5f}, torch {ref_first:.5f}")
    if abs(first - ref_first) > 1e-3 * max(1.0, abs(ref_first)):
        print("MISMATCH: the two models disagree on the first loss", file=sys.stderr)
        return 1
    if args.gc_freeze:
        for _ in range(2):
            mytorch_step(*batch())
        gc.collect()
        gc.freeze()
    mine_ms = timed(mytorch_step, batch, args.warmup, args.steps, device)
    ref_ms = timed(torch_step, batch, args.warmup, args.steps, device)
    with mytorch.trace(print_table=False) as trace:
        mytorch_step(*batch())
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    result = {"config": vars(args), "device": name, "torch": torch.__version__,
              "date": time.strftime("%Y-%m-%d"), "mytorch_ms": statistics.median(mine_ms),
              "torch_ms": statistics.median(ref_ms), "trace": trace.table()}
    result["ratio"] = result["mytorch_ms"] / result["torch_ms"]
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "mytorch_bench.json").write_text(json.dumps(result, indent=1))
    print(trace.table())
    spread = f"min {min(mine_ms):.2f}, max {max(mine_ms):.2f}; torch min {min(ref_ms):.2f}, max {max(ref_ms):.2f}"
    print(f"mytorch step times (ms): {' '.join(f'{t:.1f}' for t in mine_ms)}")
    print(f"spread: mytorch {spread}")
    print(f"step: mytorch {result['mytorch_ms']:.2f} ms, torch eager {result['torch_ms']:.2f} ms, "
          f"ratio {result['ratio']:.2f}x ({result['device']}, torch {torch.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
