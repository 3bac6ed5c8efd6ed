"""An MLP trained with SGD on two interleaved half-moons: the seed framework's (micrograd's) demo,
in mytorch.

    python examples/mlp.py [--device cuda] [--steps 300]

2 → 32 → 32 → 2 with ReLU, cross-entropy, SGD with momentum; prints the accuracy on the training
points (the demo's measure) and on held-out points, and a trace of one step.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from sklearn.datasets import make_moons

import mytorch
from mytorch import nn


def mlp(hidden: int = 32) -> nn.Module:
    return nn.Sequential(nn.Linear(2, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 2))


def accuracy(model: nn.Module, x: mytorch.Tensor, y: np.ndarray) -> float:
    with mytorch.no_grad():
        return float((model(x).argmax(1).numpy() == y).mean())


def train(device: str = "cpu", steps: int = 300, seed: int = 0, trace: bool = True) -> float:
    mytorch.manual_seed(seed)
    x_np, y_np = make_moons(n_samples=200, noise=0.1, random_state=seed)
    x_held, y_held = make_moons(n_samples=200, noise=0.1, random_state=seed + 1)
    x = mytorch.tensor(x_np.astype(np.float32), device=device)
    y = mytorch.tensor(y_np, device=device)
    model = mlp().to(device)
    opt = mytorch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if step % max(1, steps // 5) == 0 or step == steps - 1:
            print(f"step {step:4d}  loss {loss.item():.4f}  accuracy {accuracy(model, x, y_np):.3f}")
    held = accuracy(model, mytorch.tensor(x_held.astype(np.float32), device=device), y_held)
    print(f"training accuracy {accuracy(model, x, y_np):.3f}, held-out accuracy {held:.3f}")
    if trace:
        with mytorch.trace():
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
    return held


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="150 steps (what CI runs)")
    args = parser.parse_args(argv)
    return train(args.device, steps=150 if args.quick else args.steps)


if __name__ == "__main__":
    main()
