"""Host time per op call: ``kernelzoo.ops.<op>`` (automatic choice, and each plugin forced) against torch's own
op on the same small inputs, forward and forward+backward under autograd. ``kernelzoo bench --host`` prints it.

The inputs are small enough that the kernels take next to no time: what a loop of calls measures is the host's
cost of a call (argument checks, the choice, the autograd node, the launch). Each runner makes ``calls`` calls in
a row, timed together and ended by one device synchronisation; rounds interleave the runners, so that a change
of machine load reaches all of them alike; the figure is the median over rounds, in µs per call.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import kernelzoo
from kernelzoo import dispatch
from kernelzoo.errors import KernelzooError, UnsupportedError
from kernelzoo.registry import registry

OPS = ("relu", "gelu", "add", "softmax", "layer_norm", "cross_entropy", "linear", "matmul", "attention")
MODES = ("forward", "forward+backward")


@dataclass
class Inputs:
    """One op's call: the tensors, keywords, torch's own function of the same arguments, and the size's label."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    torch_fn: Callable[..., Any]
    label: str


def _inputs(op: str, device: torch.device) -> Inputs:
    """Small inputs of ``op`` on ``device``: on the GPU those where a call is bound by the host; on the CPU
    smaller still, so that the kernel's own time stays well below the host's."""
    gpu = device.type == "cuda"
    g = torch.Generator(device="cpu").manual_seed(0)

    def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)

    rows, cols = (64, 1024) if gpu else (16, 64)
    if op in ("relu", "gelu", "softmax"):
        fn = {"relu": torch.relu, "gelu": F.gelu, "softmax": lambda x: torch.softmax(x, -1)}[op]
        return Inputs((randn(rows, cols),), {}, fn, f"{rows}x{cols}")
    if op == "add":
        return Inputs((randn(rows, cols), randn(rows, cols)), {}, torch.add, f"{rows}x{cols}")
    if op == "layer_norm":
        x, w, b = randn(rows, cols), randn(cols), randn(cols)
        return Inputs((x, cols, w, b), {}, lambda x, n, w, b: F.layer_norm(x, (n,), w, b), f"{rows}x{cols}")
    if op == "cross_entropy":
        target = torch.randint(0, cols, (rows,), generator=g).to(device)
        return Inputs((randn(rows, cols), target), {}, F.cross_entropy, f"{rows}x{cols}")
    if op == "linear":
        dim = 256 if gpu else 32
        return Inputs((randn(rows, dim), randn(dim, dim), randn(dim)), {}, F.linear, f"{rows}x{dim}, {dim}x{dim}")
    if op == "matmul":
        n, dtype = (256, torch.bfloat16) if gpu else (32, torch.float32)
        return Inputs((randn(n, n, dtype=dtype), randn(n, n, dtype=dtype)), {}, torch.matmul,
                      f"{n}x{n} {str(dtype).removeprefix('torch.')}")
    if op == "attention":
        shape, dtype = ((1, 8, 128, 64), torch.float16) if gpu else ((1, 2, 16, 16), torch.float32)
        qkv = tuple(randn(*shape, dtype=dtype) for _ in range(3))
        return Inputs(qkv, {}, F.scaled_dot_product_attention,
                      f"{'x'.join(map(str, shape))} {str(dtype).removeprefix('torch.')}")
    raise ValueError(f"no host-cost inputs for op {op!r}; expected one of {', '.join(OPS)}")


def _differentiable(args: Sequence[Any]) -> list[torch.Tensor]:
    return [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]


def _runner(fn: Callable[..., Any], inputs: Inputs, mode: str) -> Callable[[], Any]:
    """One call of ``fn`` on the inputs, forward only, or forward and the gradients of the floating inputs
    (``torch.autograd.grad``, so no gradient accumulates across calls)."""
    args, kwargs = inputs.args, inputs.kwargs
    if mode == "forward":
        return lambda: fn(*args, **kwargs)
    args = tuple(a.detach().requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                 for a in args)
    wrt = _differentiable(args)
    out = fn(*args, **kwargs)
    if not out.requires_grad:
        raise UnsupportedError("this call records no backward under autograd")
    grad = torch.ones_like(out)

    def step() -> Any:
        return torch.autograd.grad(fn(*args, **kwargs), wrt, grad)

    return step


@contextlib.contextmanager
def _forcing(plugin: str | None) -> Iterator[None]:
    if plugin is None:
        yield
    else:
        with kernelzoo.use(plugin):
            yield


@dataclass
class HostRow:
    """One runner (torch, kernelzoo's automatic choice, or one plugin forced) on one op and mode."""

    op: str
    mode: str  # "forward" or "forward+backward"
    device: str
    runner: str  # "torch" (torch's own op), "auto" (kernelzoo.ops), or "use(<plugin>)" (that plugin forced)
    label: str  # the inputs' size
    us: float | None = None  # median host µs per call over the rounds
    min_us: float | None = None  # the fastest round's: the least disturbed by other work on the machine
    ratio: float | None = None  # us over torch's us
    chosen: str = ""  # auto: the plugin the automatic choice runs
    status: str = "ok"  # "ok", or "skipped" / "failed" with the reason
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _plugins(op: str, device: torch.device) -> list[str]:
    found = []
    for impl in registry.implementations(op):
        if device.type not in impl.devices() or not registry.availability(impl):
            continue
        if impl.plugin == "triton" and device.type == "cpu":  # the interpreter: not a launch path
            continue
        found.append(impl.plugin)
    return sorted(found)


def measure(ops: Sequence[str] = OPS, device: torch.device | str = "cpu", *, calls: int = 200, rounds: int = 7,
            modes: Sequence[str] = MODES, plugins: Sequence[str] | None = None,
            progress: Callable[[str], None] | None = None) -> list[HostRow]:
    """Host µs per call of each runner of each op and mode (see the module's docstring)."""
    device = torch.device(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    rows: list[HostRow] = []
    for op in ops:
        inputs = _inputs(op, device)
        names = [p for p in _plugins(op, device) if plugins is None or p in plugins]
        for mode in modes:
            if progress is not None:
                progress(f"{op} {mode}")
            group: dict[str, tuple[HostRow, Callable[[], Any], str | None]] = {}
            for runner, fn, force in [("torch", inputs.torch_fn, None), ("auto", getattr(kernelzoo.ops, op), None),
                                      *((f"use({p})", getattr(kernelzoo.ops, op), p) for p in names)]:
                row = HostRow(op, mode, device.type, runner, inputs.label)
                try:
                    with _forcing(force):
                        call = _runner(fn, inputs, mode)
                        for _ in range(3):  # compile, tune lookups, caches: outside the timing
                            call()
                    if runner == "auto":
                        row.chosen = dispatch.choose(registry.op(op), registry.op(op).check(*inputs.args,
                                                                                            **inputs.kwargs)).plugin
                except (KernelzooError, RuntimeError, TypeError, ValueError) as exc:
                    row.status, row.reason = ("skipped" if isinstance(exc, UnsupportedError)
                                              else "failed"), str(exc).splitlines()[0]
                    rows.append(row)
                    continue
                group[runner] = row, call, force
            times: dict[str, list[float]] = {name: [] for name in group}
            for _ in range(rounds):
                for name, (_, call, force) in group.items():
                    with _forcing(force):
                        sync()
                        start = time.perf_counter()
                        for _ in range(calls):
                            call()
                        sync()
                        times[name].append((time.perf_counter() - start) / calls * 1e6)
            base = statistics.median(times["torch"]) if "torch" in times else None
            for name, (row, _, _) in group.items():
                row.us, row.min_us = statistics.median(times[name]), min(times[name])
                row.ratio = row.us / base if base else None
                rows.append(row)
    return rows


def format_rows(rows: Sequence[HostRow]) -> str:
    """A table per device: a line per op and mode, a column per runner: µs per call and the ratio to torch."""
    from kernelzoo.table import format_table

    out = []
    for device in dict.fromkeys(r.device for r in rows):
        mine = [r for r in rows if r.device == device]
        runners = list(dict.fromkeys(r.runner for r in mine if r.status == "ok"))
        lines, notes = [], []
        for op, mode in dict.fromkeys((r.op, r.mode) for r in mine):
            found = {r.runner: r for r in mine if r.op == op and r.mode == mode}
            cells = [op, mode, next(iter(found.values())).label]
            for name in runners:
                r = found.get(name)
                if r is None or r.us is None:
                    cells.append("-")
                elif name == "torch":
                    cells.append(f"{r.us:.1f}")
                else:
                    cells.append(f"{r.us:.1f} ({r.ratio:.2f}x)" if r.ratio else f"{r.us:.1f}")
            auto = found.get("auto")
            cells.append(auto.chosen if auto is not None else "-")
            lines.append(cells)
            notes += [f"  {op} {mode} {r.runner}: {r.status}: {r.reason}" for r in found.values() if r.status != "ok"]
        title = f"host µs per call on {device} (ratio to torch)"
        out.append("\n".join([format_table(("op", "mode", "size", *runners, "auto runs"), lines, title=title),
                              *notes]))
    return "\n\n".join(out)




@dataclass
class SplitRow:
    """Where one forward call's host time goes, for one plugin forced: µs per call of each layer alone. A call
    after the first of its signature takes these layers (the checks and the choice ran at that first call and are
    remembered: ``first_us``)."""

    op: str
    device: str
    plugin: str
    label: str
    torch_us: float  # torch's own op
    full_us: float  # kernelzoo.ops.<op>, the plugin forced
    key_us: float  # the call's signature (dispatch._key) and its lookup
    call_us: float  # building the Call from the arguments (the checks at every call where the op declares so)
    run_us: float  # the plugin's run on a checked call: its own argument handling, allocation and launch
    first_us: float  # the op's checks and the choice, which the first call of a signature makes once

    @property
    def rest_us(self) -> float:
        """What the layers alone leave: the ops function, call_op's tests, the frames between them."""
        return self.full_us - self.key_us - self.call_us - self.run_us

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rest_us": self.rest_us}


def _layers(inputs: Inputs, function: Callable[..., Any], call: Any, impl: Any, config: Any, op: str
            ) -> dict[str, Callable[[], Any]]:
    args, kwargs, spec = inputs.args, inputs.kwargs, call.op
    key = dispatch._key(op, True, args, kwargs)
    bound = dispatch._bound.get(key) if key is not None else None
    checked = (lambda: bound.checked(args, kwargs)) if bound is not None else (lambda: spec.check(*args, **kwargs))
    return {"torch": lambda: inputs.torch_fn(*args, **kwargs), "full": lambda: function(*args, **kwargs),
            "key": lambda: dispatch._bound.get(dispatch._key(op, True, args, kwargs)), "call": checked,
            "run": lambda: impl.run(call, config),
            "first": lambda: dispatch._choose(spec, spec.check(*args, **kwargs), dispatch.forced_plugin())}


def split(ops: Sequence[str] = OPS, device: torch.device | str = "cpu", *, calls: int = 200, rounds: int = 7,
          plugins: Sequence[str] | None = None) -> list[SplitRow]:
    """The forward call of each op with each plugin forced, layer by layer (see :class:`SplitRow`); the layers
    of one op and plugin are timed in interleaved rounds, each figure the median over rounds."""
    device = torch.device(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    rows = []
    for op in ops:
        inputs, spec = _inputs(op, device), registry.op(op)
        call = spec.check(*inputs.args, **inputs.kwargs)
        function = getattr(kernelzoo.ops, op)
        for plugin in _plugins(op, device):
            if plugins is not None and plugin not in plugins:
                continue
            impl = registry.impl(op, plugin)
            with kernelzoo.use(plugin):
                try:
                    config = dispatch.choose(spec, call).config
                    impl.run(call, config)
                except KernelzooError:
                    continue
                function(*inputs.args, **inputs.kwargs)  # its signature bound, as at every later call
                layers = _layers(inputs, function, call, impl, config, op)
                times: dict[str, list[float]] = {name: [] for name in layers}
                for fn in layers.values():
                    for _ in range(3):
                        fn()
                for _ in range(rounds):
                    for name, fn in layers.items():
                        sync()
                        start = time.perf_counter()
                        for _ in range(calls):
                            fn()
                        sync()
                        times[name].append((time.perf_counter() - start) / calls * 1e6)
            us = {name: statistics.median(t) for name, t in times.items()}
            rows.append(SplitRow(op, device.type, plugin, inputs.label, us["torch"], us["full"], us["key"], us["call"],
                                 us["run"], us["first"]))
    return rows


def format_split(rows: Sequence[SplitRow]) -> str:
    from kernelzoo.table import format_table

    lines = [[r.op, r.plugin, f"{r.torch_us:.1f}", f"{r.full_us:.1f}", f"{r.key_us:.1f}", f"{r.call_us:.1f}",
              f"{r.run_us:.1f}", f"{r.rest_us:.1f}", f"{r.first_us:.1f}"] for r in rows]
    device = rows[0].device if rows else "?"
    return format_table(("op", "plugin", "torch", "full", "key", "call", "run", "rest", "first call"), lines,
                        title=f"forward call, host µs by layer, the plugin forced, on {device}")


def meta(rows: Sequence[HostRow], command: Sequence[str] = ()) -> dict[str, Any]:
    """Where and how the rows were measured: each device as the fingerprint describes it, versions, date."""
    from kernelzoo.bench.run import versions
    from kernelzoo.fingerprint import fingerprint

    devices = list(dict.fromkeys(r.device for r in rows))
    return {"devices": {d: fingerprint(torch.device(d)).describe() for d in devices},
            "versions": versions(torch.device(devices[-1] if devices else "cpu")),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": shlex.join(["kernelzoo", *command]),
            "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "load": [os.getloadavg()[0]] if hasattr(os, "getloadavg") else []}


def json_data(rows: Sequence[HostRow], command: Sequence[str] = (), splits: Sequence[SplitRow] = ()) -> dict:
    """``{"meta": {...}, "rows": [...], "split": [...]}``: every row (HostRow's fields), the layer-by-layer rows
    (SplitRow's, with rest_us), and where they were measured."""
    return {"meta": meta(rows, command), "rows": [r.to_dict() for r in rows], "split": [r.to_dict() for r in splits]}


def write_json(path: str | Path, rows: Sequence[HostRow], command: Sequence[str] = (),
               splits: Sequence[SplitRow] = ()) -> None:
    """:func:`json_data` written to ``path``."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(json_data(rows, command, splits), indent=1) + "\n")
