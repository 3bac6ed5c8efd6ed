"""A mytorch training step captured as one CUDA graph and replayed, in the manner of
``torch.cuda.make_graphed_callables``: the host's Python (dispatch, autograd, launches) runs once, at capture;
each replay is one graph launch.

    opt = mytorch.optim.AdamW(model.parameters(), lr=1e-4, capturable=True)
    step = mytorch.cuda.make_graphed_step(model, opt, mytorch.nn.CrossEntropyLoss(), x, y)
    for x, y in batches:
        loss = step(x, y)    # the inputs are copied into the graph's own; the loss tensor is the graph's

What a graph needs of the step, which these functions set up or check:

* Inputs and outputs at fixed addresses: a replay reads the sample inputs' copies (each call copies the new
  inputs there) and writes the same output tensors, which the next replay overwrites.
* Warm-up before capture: a few eager steps on a side stream compile every kernel, read every tuned winner and
  fill dispatch's caches, so that capture meets no compile, database read or host synchronisation. Those steps
  change the parameters and the optimizer's state; both are put back as they were before the warm-up once the
  graph is captured, so the first replay is the first step.
* Everything the captured kernels touch kept alive as long as the graph: the returned step holds the step
  function (and with it the model, whose buffers no gradient reaches, such as position indices) and the
  optimizers (whose state each replay updates). Were they freed, each replay would read and write memory that
  the allocator had given to other tensors: an index buffer overwritten so sends an embedding kernel out of
  bounds.
* Nothing that changes from step to step on the host: an optimizer whose update takes the step count as a host
  number would replay its first step forever. Adam and AdamW need ``capturable=True`` (the count lives on the
  device); SGD has no step count. A learning rate, dropout masks drawn on the host, and value checks (the
  indices' range of cross_entropy and embedding) are fixed at capture too: the graph does not check a
  replay's targets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from mytorch import functions
from mytorch.nn.module import Module
from mytorch.optim import Adam, Optimizer
from mytorch.tensor import Tensor


def _data(value: Any) -> Any:
    return value.data if isinstance(value, Tensor) else value


def _snapshot(optimizers: Sequence[Optimizer]) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], dict]:
    """Copies of what a step changes: each parameter's data, and each optimizer's state as it is now."""
    params = [(p.data, p.data.clone()) for opt in optimizers for p in opt.params]
    states = {id(opt): {key: {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in state.items()
                              if not isinstance(v, dict)} for key, state in opt.state.items()}
              for opt in optimizers}
    return params, states


def _restore(optimizers: Sequence[Optimizer], snapshot: tuple[list, dict]) -> None:
    """Back to the snapshot, in place (the graph holds these tensors' addresses): a state the warm-up created
    is zeroed, which for a capturable Adam (step 0, zero moments) and SGD's momentum buffer is the fresh state
    (SGD with dampening damps the captured first step, which an eager first step does not)."""
    params, states = snapshot
    for data, saved in params:
        data.copy_(saved)
    for opt in optimizers:
        before = states[id(opt)]
        for key, state in opt.state.items():
            old = before.get(key, {})
            for name, value in state.items():
                if isinstance(value, torch.Tensor):
                    if name in old:
                        value.copy_(old[name])
                    else:
                        value.zero_()
                elif name in old:
                    state[name] = old[name]


def _check_capturable(optimizers: Sequence[Optimizer]) -> None:
    for opt in optimizers:
        if isinstance(opt, Adam) and not opt.capturable:
            raise ValueError(f"{type(opt).__name__}: a graphed step needs capturable=True (its fused update takes "
                             "the step count as a host number, which a graph would replay unchanged)")


class GraphedStep:
    """A captured step: calling it copies the inputs into the graph's and replays it; returns its outputs.

    It holds on to what the captured kernels read and write besides its inputs and outputs: the step function
    (whose closure holds the model, with buffers such as position indices that no gradient reaches), the
    optimizers (whose state the update writes) and mytorch's shared scalar tensors. A replay after those were
    freed would read and write memory that the allocator has handed to other tensors."""

    def __init__(self, graph: torch.cuda.CUDAGraph, inputs: list[Any], outputs: Any,
                 keep: Sequence[Any] = ()) -> None:
        self.graph, self.inputs, self.outputs = graph, inputs, outputs
        self.keep = tuple(keep)

    def __call__(self, *inputs: Any) -> Any:
        if len(inputs) != len(self.inputs):
            raise TypeError(f"graphed step: expected {len(self.inputs)} inputs, as captured, got {len(inputs)}")
        for i, (static, value) in enumerate(zip(self.inputs, inputs)):
            if isinstance(static, torch.Tensor):
                value = _data(value)
                if not isinstance(value, torch.Tensor) or value.shape != static.shape or value.dtype != static.dtype:
                    got = (f"{tuple(value.shape)} {value.dtype}" if isinstance(value, torch.Tensor)
                           else type(value).__name__)
                    raise ValueError(f"graphed step: input {i} must be a {tuple(static.shape)} {static.dtype} tensor, "
                                     f"as captured; got {got}")
                static.copy_(value, non_blocking=True)
        self.graph.replay()
        return self.outputs


def graphed_step(step_fn: Callable[..., Any], *sample_inputs: Any, optimizers: Sequence[Optimizer] = (),
                 warmup: int = 3, pool: Any = None) -> GraphedStep:
    """Capture ``step_fn(*sample_inputs)`` (forward, backward and optimizer step, say) as one CUDA graph.

    ``sample_inputs``: CUDA tensors (torch or mytorch) of the shapes and dtypes of every later call, or other
    values, fixed at capture. ``optimizers``: those whose parameters and state the step changes; the warm-up's
    changes to them are undone. ``warmup``: eager steps before capture (at least 1). ``pool``: a graph memory
    pool to share (``torch.cuda.graph_pool_handle()``)."""
    if warmup < 1:
        raise ValueError(f"graphed_step: warmup must be >= 1 (capture must meet no first call), got {warmup}")
    _check_capturable(optimizers)
    if not torch.cuda.is_available():
        raise RuntimeError("graphed_step: CUDA graphs need a CUDA GPU; torch.cuda.is_available() is False")
    statics: list[Any] = []
    for i, value in enumerate(sample_inputs):
        data = _data(value)
        if isinstance(data, torch.Tensor):
            if not data.is_cuda:
                raise ValueError(f"graphed_step: input {i} is on {data.device}; expected a CUDA tensor")
            data = data.clone()
            statics.append(Tensor(data) if isinstance(value, Tensor) else data)
        else:
            statics.append(value)
    static_data = [_data(v) for v in statics]
    snapshot = _snapshot(optimizers)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            step_fn(*statics)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        outputs = step_fn(*statics)
    _restore(optimizers, snapshot)
    torch.cuda.synchronize()
    return GraphedStep(graph, static_data, outputs, keep=(step_fn, *optimizers, *functions.scalars.values()))


def make_graphed_step(model: Module, optimizer: Optimizer, loss_fn: Callable[[Tensor, Tensor], Tensor],
                      x: Any, y: Any, warmup: int = 3) -> GraphedStep:
    """A training step of ``model`` (zero the gradients, forward, ``loss_fn(model(x), y)``, backward,
    ``optimizer.step()``) captured by :func:`graphed_step` on samples ``x``, ``y``; calling it with a batch
    returns the loss tensor, overwritten by the next call."""

    def step(inputs: Tensor, target: Tensor) -> Tensor:
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), target)
        loss.backward()
        optimizer.step()
        return loss

    return graphed_step(step, x, y, optimizers=[optimizer], warmup=warmup)
