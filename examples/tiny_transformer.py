"""A tiny transformer that learns to reverse strings of digits, in mytorch.

    python examples/tiny_transformer.py [--device cuda] [--steps 600] [--length 8]

Token and position embeddings, 2 pre-norm transformer blocks (MultiheadAttention on the attention
op, LayerNorm, a GELU MLP, dropout), a linear read-out per position; AdamW, cross-entropy. Each
output position must attend to its mirror position, so the task needs attention. Prints the token
accuracy on fresh strings and a trace of one training step.
"""

from __future__ import annotations

import argparse
import time

import torch

import mytorch
from mytorch import nn


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), nn.Dropout(dropout))

    def forward(self, x: mytorch.Tensor) -> mytorch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int = 10, length: int = 8, dim: int = 64, heads: int = 4, blocks: int = 2,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.token = nn.Embedding(vocab, dim)
        self.position = nn.Embedding(length, dim)
        self.blocks = nn.ModuleList([Block(dim, heads, dropout) for _ in range(blocks)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)
        self.register_buffer("positions", mytorch.arange(length))

    def forward(self, tokens: mytorch.Tensor) -> mytorch.Tensor:
        x = self.token(tokens) + self.position(self.positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def batch(size: int, length: int, device: str, generator: torch.Generator) -> tuple[mytorch.Tensor, mytorch.Tensor]:
    digits = torch.randint(0, 10, (size, length), generator=generator)
    return mytorch.tensor(digits, device=device), mytorch.tensor(digits.flip(1), device=device)


def token_accuracy(model: nn.Module, length: int, device: str, generator: torch.Generator) -> float:
    model.eval()
    x, y = batch(1000, length, device, generator)
    with mytorch.no_grad():
        predicted = model(x).argmax(-1)
    model.train()
    return float((predicted.numpy() == y.numpy()).mean())


def train(device: str = "cpu", steps: int = 600, length: int = 8, dim: int = 64, batch_size: int = 64,
          lr: float = 3e-3, seed: int = 0, trace: bool = True) -> float:
    mytorch.manual_seed(seed)
    data = torch.Generator().manual_seed(seed)
    model = TinyTransformer(length=length, dim=dim, dropout=0.1).to(device)
    opt = mytorch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    loss_fn = nn.CrossEntropyLoss()
    start = time.perf_counter()
    for step in range(steps):
        x, y = batch(batch_size, length, device, data)
        opt.zero_grad()
        loss = loss_fn(model(x).view(-1, 10), y.view(-1))
        loss.backward()
        opt.step()
        if step % max(1, steps // 6) == 0 or step == steps - 1:
            print(f"step {step:4d}  loss {loss.item():.4f}")
    acc = token_accuracy(model, length, device, data)
    print(f"token accuracy {acc:.4f} on 1000 fresh strings after {steps} steps in "
          f"{time.perf_counter() - start:.1f} s on {device}")
    if trace:
        with mytorch.trace():
            opt.zero_grad()
            loss_fn(model(x).view(-1, 10), y.view(-1)).backward()
            opt.step()
    return acc


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--length", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="length-5 strings, width 32, 120 steps (what CI runs)")
    args = parser.parse_args(argv)
    if args.quick:
        return train(args.device, steps=120, length=5, dim=32)
    return train(args.device, steps=args.steps, length=args.length)


if __name__ == "__main__":
    main()
