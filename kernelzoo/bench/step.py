"""A transformer training step (forward, cross-entropy, backward, AdamW; float32) four ways, in one process:
torch eager, ``torch.compile`` (default mode) of the same torch model, mytorch eager and mytorch captured as one
CUDA graph (:func:`mytorch.cuda.make_graphed_step`). ``kernelzoo bench --mytorch-step`` prints it.

Every runner starts from the same weights and trains its own copy. Rounds interleave the runners, a step each,
so that a change of machine load reaches all alike; each step is timed between device synchronisations, on a
fresh batch drawn before its clock starts; the figure is the median over the timed steps. The first losses of
the four are compared before timing: a mismatch fails the run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F

import mytorch
from mytorch import nn

# (batch, seq, dim, heads, blocks)
CONFIGS: tuple[tuple[int, int, int, int, int], ...] = ((32, 256, 512, 8, 4), (8, 128, 256, 4, 2),
                                                        (8, 1024, 1024, 16, 4))
QUICK_CONFIGS: tuple[tuple[int, int, int, int, int], ...] = ((2, 8, 16, 2, 1),)
RUNNERS = ("torch", "torch.compile", "mytorch", "mytorch graphed")


class _Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: mytorch.Tensor) -> mytorch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class MytorchTransformer(nn.Module):
    """Token and position embeddings, pre-norm blocks (attention, a GELU MLP), a linear read-out per position."""

    def __init__(self, vocab: int, length: int, dim: int, heads: int, blocks: int) -> None:
        super().__init__()
        self.token = nn.Embedding(vocab, dim)
        self.position = nn.Embedding(length, dim)
        self.blocks = nn.ModuleList([_Block(dim, heads) for _ in range(blocks)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)
        self.register_buffer("positions", mytorch.arange(length))

    def forward(self, tokens: mytorch.Tensor) -> mytorch.Tensor:
        x = self.token(tokens) + self.position(self.positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


class _TorchBlock(torch.nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.attn = torch.nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class TorchTransformer(torch.nn.Module):
    """:class:`MytorchTransformer` in torch.nn, with the same parameter names."""

    def __init__(self, vocab: int, length: int, dim: int, heads: int, blocks: int) -> None:
        super().__init__()
        self.token = torch.nn.Embedding(vocab, dim)
        self.position = torch.nn.Embedding(length, dim)
        self.blocks = torch.nn.ModuleList([_TorchBlock(dim, heads) for _ in range(blocks)])
        self.norm = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab)
        self.register_buffer("positions", torch.arange(length))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.token(tokens) + self.position(self.positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


@dataclass
class StepRow:
    """One runner at one size: the median step time, and its ratio to the runner it is held against."""

    runner: str
    batch: int
    seq: int
    dim: int
    heads: int
    blocks: int
    device: str
    ms: float | None = None  # median ms per step
    min_ms: float | None = None
    versus: str = ""  # the runner of the ratio: torch eager for eager runners, torch.compile for the graph
    ratio: float | None = None  # ms over the versus runner's ms
    first_loss: float | None = None
    status: str = "ok"  # "ok", or "skipped" / "failed" with the reason
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def make_runners(config: tuple[int, ...], vocab: int, device: torch.device, lr: float, names: Sequence[str],
             tokens: torch.Tensor, target: torch.Tensor) -> dict[str, Callable[..., Any] | str]:
    """Each runner's step function (tokens, flat targets) -> loss, or why it cannot run here."""
    _, seq, dim, heads, blocks = config
    mytorch.manual_seed(0)
    reference = MytorchTransformer(vocab, seq, dim, heads, blocks).to(device)
    weights = {k: v.data for k, v in reference.state_dict().items()}
    found: dict[str, Callable[..., Any] | str] = {}
    for name in names:
        if name in ("torch", "torch.compile"):
            model = TorchTransformer(vocab, seq, dim, heads, blocks).to(device)
            model.load_state_dict(weights)
            opt = torch.optim.AdamW(model.parameters(), lr=lr, foreach=True)
            forward = torch.compile(model) if name == "torch.compile" else model

            def torch_step(x: torch.Tensor, y: torch.Tensor, forward: Any = forward, opt: Any = opt) -> Any:
                opt.zero_grad(set_to_none=True)
                loss = F.cross_entropy(forward(x).view(-1, vocab), y)
                loss.backward()
                opt.step()
                return loss

            found[name] = torch_step
            continue
        if name == "mytorch graphed" and device.type != "cuda":
            found[name] = "CUDA graphs need a CUDA GPU"
            continue
        mine = MytorchTransformer(vocab, seq, dim, heads, blocks).to(device)
        mine.load_state_dict({k: v.clone() for k, v in weights.items()})
        loss_fn = nn.CrossEntropyLoss()

        def mytorch_loss(logits: mytorch.Tensor, y: mytorch.Tensor, loss_fn: Any = loss_fn) -> mytorch.Tensor:
            return loss_fn(logits.view(-1, vocab), y)

        if name == "mytorch":
            opt_m = mytorch.optim.AdamW(mine.parameters(), lr=lr)

            def mytorch_step(x: torch.Tensor, y: torch.Tensor, model: Any = mine, opt: Any = opt_m) -> Any:
                opt.zero_grad()
                loss = mytorch_loss(model(mytorch.from_torch(x)), mytorch.from_torch(y))
                loss.backward()
                opt.step()
                return loss

            found[name] = mytorch_step
        else:
            opt_g = mytorch.optim.AdamW(mine.parameters(), lr=lr, capturable=True)
            graphed = mytorch.cuda.make_graphed_step(mine, opt_g, mytorch_loss, mytorch.from_torch(tokens),
                                                     mytorch.from_torch(target))
            found[name] = graphed
    return found


def _loss(value: Any) -> float:
    return float(value.item())


def measure(configs: Sequence[tuple[int, int, int, int, int]] = CONFIGS, device: torch.device | str = "cuda", *,
            steps: int = 20, warmup: int = 3, vocab: int = 1000, lr: float = 1e-4,
            runners: Sequence[str] = RUNNERS, progress: Callable[[str], None] | None = None) -> list[StepRow]:
    """The median step time of each runner at each config (see the module's docstring)."""
    device = torch.device(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    g = torch.Generator(device="cpu").manual_seed(0)
    rows: list[StepRow] = []
    for config in configs:
        batch, seq = config[:2]

        def draw(batch: int = batch, seq: int = seq) -> tuple[torch.Tensor, torch.Tensor]:
            return (torch.randint(0, vocab, (batch, seq), generator=g).to(device),
                    torch.randint(0, vocab, (batch * seq,), generator=g).to(device))

        if progress is not None:
            progress(f"{'x'.join(map(str, config))}: building and warming up")
        tokens, target = draw()
        found = make_runners(config, vocab, device, lr, runners, tokens, target)
        group: dict[str, StepRow] = {}
        steppers: dict[str, Callable[..., Any]] = {}
        for name, step in found.items():
            row = group[name] = StepRow(name, *config, device.type)
            if isinstance(step, str):
                row.status, row.reason = "skipped", step
                continue
            try:
                row.first_loss = _loss(step(tokens, target))
                for _ in range(warmup):
                    step(*draw())
            except Exception as exc:  # a runner that fails is reported, the others go on
                row.status, row.reason = "failed", f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
                continue
            steppers[name] = step
        losses = [r.first_loss for r in group.values() if r.first_loss is not None]
        if losses and max(losses) - min(losses) > 1e-3 * max(1.0, abs(losses[0])):
            for r in group.values():
                if r.first_loss is not None:
                    r.status, r.reason = "failed", f"first losses disagree: {[round(x, 5) for x in losses]}"
            steppers.clear()
        times: dict[str, list[float]] = {name: [] for name in steppers}
        for _ in range(steps):
            for name, step in steppers.items():
                inputs = draw()
                sync()
                start = time.perf_counter()
                step(*inputs)
                sync()
                times[name].append((time.perf_counter() - start) * 1e3)
        for name, row in group.items():
            if name in times:
                row.ms, row.min_ms = statistics.median(times[name]), min(times[name])
        for row in group.values():
            row.versus = "torch.compile" if row.runner == "mytorch graphed" else "torch"
            base = group.get(row.versus)
            if row.ms is not None and base is not None and base.ms:
                row.ratio = row.ms / base.ms
        rows += group.values()
    return rows


def format_rows(rows: Sequence[StepRow]) -> str:
    """A line per config, a column per runner: ms per step, with the ratio to torch eager (the graph's: to
    torch.compile)."""
    from kernelzoo.table import format_table

    runners = list(dict.fromkeys(r.runner for r in rows))
    lines, notes = [], []
    for config in dict.fromkeys((r.batch, r.seq, r.dim, r.heads, r.blocks) for r in rows):
        found = {r.runner: r for r in rows if (r.batch, r.seq, r.dim, r.heads, r.blocks) == config}
        cells: list[str] = ["x".join(map(str, config))]
        for name in runners:
            r = found.get(name)
            if r is None or r.ms is None:
                cells.append("-")
            else:
                cells.append(f"{r.ms:.3g}" + (f" ({r.ratio:.2f}x)" if r.ratio is not None and name != r.versus
                                               and name not in ("torch",) else ""))
        lines.append(cells)
        notes += [f"  {'x'.join(map(str, config))} {r.runner}: {r.status}: {r.reason}" for r in found.values()
                  if r.status != "ok"]
    device = rows[0].device if rows else "?"
    title = (f"training step, ms (median) on {device}; batch x seq x dim x heads x blocks; ratios: eager to torch "
             "eager, the graph to torch.compile")
    return "\n".join([format_table(("config", *runners), lines, title=title), *notes])
