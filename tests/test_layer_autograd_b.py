"""Autograd through layer_norm, cross_entropy, embedding, sum and mean, and the optimizer updates.

* Each differentiable op, forced to each plugin that runs here, in a small graph: outputs and input
  gradients against torch.autograd through torch.nn.functional in float64 on the same values; one chain of
  several of them with torch ops between; finite-difference gradcheck on one small case per op.
* sum / mean backward is a view (the output gradient expanded), no kernel.
* sgd_update_ / adam_update_ against torch.optim's SGD, Adam and AdamW over several steps.
* In-place updates are tuned safely: a trial of the tuner (warm-up, check, many timed runs, each on inputs
  restored first) leaves the tensors exactly (bitwise) as one step of that config would, and after a real
  tuning run dispatch picks the tuned winner, whose one call on a user's tensors is exactly one untuned
  step (the plugin's default config) — not the many steps the tuner ran.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from tuning_helpers import temporary_db

import kernelzoo
from kernelzoo.backends import triton as triton_backend
from kernelzoo.db.store import open_store
from kernelzoo.registry import registry
from kernelzoo.tolerance import check_close, tolerance_for
from kernelzoo.tuner import worker
from kernelzoo.tuner.pool import WorkerPool
from kernelzoo.tuner.search import TuneOptions
from kernelzoo.tuner.tune import tune_op

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
# A forward and a backward kernel in float32, the backward reading the forward's float32 statistics, each
# within a few units of rounding of its outputs: 10x the table's tolerance for one op.
TOLERANCE = tolerance_for(torch.float32).scaled(10)


def runnable(op: str, device: str) -> list[str]:
    """The plugins of ``op`` (and of its backward op, if any) that can run on ``device`` in this process."""
    ops = [op, f"{op}_backward"] if f"{op}_backward" in registry.load().ops else [op]
    plugins = []
    for impl in registry.implementations(op):
        if impl.plugin == "triton" and device == "cpu" and not triton_backend.interpreting():
            continue
        impls = [registry.impl(name, impl.plugin) for name in ops if impl.plugin in registry.impls[name]]
        if len(impls) == len(ops) and all(registry.availability(i) and device in i.devices() for i in impls):
            plugins.append(impl.plugin)
    return plugins


# --- differentiable ops: graphs ------------------------------------------------------------------

@dataclass(frozen=True)
class Graph:
    """A small graph: ``make(device, g)`` gives (float inputs that require grad, other arguments); ``ours``
    runs it through kernelzoo.ops, ``theirs`` through torch (called on float64 copies of the inputs)."""

    name: str
    op: str
    make: Callable[[torch.device, torch.Generator], tuple[list[torch.Tensor], dict]]
    ours: Callable[..., torch.Tensor]
    theirs: Callable[..., torch.Tensor]


def _randn(*shape: int, g: torch.Generator, device: torch.device, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(shape, generator=g) * scale).to(device)


def _targets(rows: int, classes: int, g: torch.Generator, device: torch.device, shape: tuple[int, ...] = ()) -> dict:
    t = torch.randint(0, classes, shape or (rows,), generator=g)
    t.view(-1)[::4] = -100  # some rows ignored
    return {"target": t.to(device)}


def _ln_make(shape: tuple[int, ...], ns: tuple[int, ...], affine: bool) -> Callable:
    def make(device: torch.device, g: torch.Generator) -> tuple[list[torch.Tensor], dict]:
        x = _randn(*shape, g=g, device=device) * 2 + 0.5
        params = [_randn(*ns, g=g, device=device), _randn(*ns, g=g, device=device)] if affine else []
        return [x, *params], {"ns": ns}
    return make


def _ce_make(shape: tuple[int, ...]) -> Callable:
    def make(device: torch.device, g: torch.Generator) -> tuple[list[torch.Tensor], dict]:
        target_shape = (shape[0], *shape[2:])
        return [_randn(*shape, g=g, device=device, scale=2.0)], _targets(shape[0], shape[1], g, device, target_shape)
    return make


def _emb_make(device: torch.device, g: torch.Generator) -> tuple[list[torch.Tensor], dict]:
    indices = torch.randint(0, 12, (5, 6), generator=g)  # 30 lookups into 12 rows: repeats
    indices[0, :3] = 2  # the padding row, looked up too
    return [_randn(30, 8, g=g, device=device)], {"indices": indices.to(device)}


def _red_make(shape: tuple[int, ...]) -> Callable:
    def make(device: torch.device, g: torch.Generator) -> tuple[list[torch.Tensor], dict]:
        return [_randn(*shape, g=g, device=device)], {}
    return make


def _chain_make(device: torch.device, g: torch.Generator) -> tuple[list[torch.Tensor], dict]:
    tokens = torch.randint(0, 20, (4, 6), generator=g).to(device)
    params = [_randn(20, 16, g=g, device=device), _randn(16, g=g, device=device), _randn(16, g=g, device=device),
              _randn(16, 11, g=g, device=device, scale=0.3)]
    return params, {"tokens": tokens, **_targets(24, 11, g, device)}


def _chain(emb: Callable, ln: Callable, ce: Callable, mean: Callable) -> Callable:
    """tokens → embedding → layer_norm → a linear map (torch) → cross_entropy, plus a mean of the features."""
    def run(table: torch.Tensor, w: torch.Tensor, b: torch.Tensor, proj: torch.Tensor, tokens: torch.Tensor,
            target: torch.Tensor) -> torch.Tensor:
        h = ln(emb(tokens, table), (16,), w, b)  # (4, 6, 16)
        return ce((h @ proj).reshape(24, 11), target, label_smoothing=0.1) + mean(h, (0, 1)).square().sum()
    return run


ops = kernelzoo.ops
GRAPHS = [
    Graph("layer_norm", "layer_norm", _ln_make((6, 33), (33,), True),
          lambda x, w, b, ns: ops.layer_norm(x, ns, w, b), lambda x, w, b, ns: F.layer_norm(x, ns, w, b)),
    Graph("layer_norm-3d-no-affine", "layer_norm", _ln_make((4, 5, 17), (5, 17), False),
          lambda x, ns: ops.layer_norm(x, ns), lambda x, ns: F.layer_norm(x, ns)),
    Graph("layer_norm-long-row", "layer_norm", _ln_make((2, 5000), (5000,), True),
          lambda x, w, b, ns: ops.layer_norm(x, ns, w, b), lambda x, w, b, ns: F.layer_norm(x, ns, w, b)),
    Graph("cross_entropy-mean-smoothing", "cross_entropy", _ce_make((9, 40)),
          lambda x, target: ops.cross_entropy(x, target, label_smoothing=0.1),
          lambda x, target: F.cross_entropy(x, target, label_smoothing=0.1)),
    Graph("cross_entropy-none", "cross_entropy", _ce_make((9, 40)),
          lambda x, target: ops.cross_entropy(x, target, reduction="none"),
          lambda x, target: F.cross_entropy(x, target, reduction="none")),
    Graph("cross_entropy-sum-3d", "cross_entropy", _ce_make((3, 7, 4)),
          lambda x, target: ops.cross_entropy(x, target, reduction="sum"),
          lambda x, target: F.cross_entropy(x, target, reduction="sum")),
    Graph("cross_entropy-long-row", "cross_entropy", _ce_make((3, 5000)),
          lambda x, target: ops.cross_entropy(x, target), lambda x, target: F.cross_entropy(x, target)),
    Graph("embedding-padding", "embedding", _emb_make,
          lambda w, indices: ops.embedding(indices, w, padding_idx=2),
          lambda w, indices: F.embedding(indices, w, padding_idx=2)),
    Graph("embedding", "embedding", _emb_make, lambda w, indices: ops.embedding(indices, w),
          lambda w, indices: F.embedding(indices, w)),
    Graph("sum-dims-0-2", "sum", _red_make((5, 4, 3)), lambda x: ops.sum(x, (0, 2)), lambda x: x.sum((0, 2))),
    Graph("sum-all", "sum", _red_make((5, 4, 3)), lambda x: ops.sum(x), lambda x: x.sum()),
    Graph("mean-dim-1-keepdim", "mean", _red_make((5, 4, 3)), lambda x: ops.mean(x, 1, keepdim=True),
          lambda x: x.mean(1, keepdim=True)),
    Graph("chain", "layer_norm", _chain_make,
          _chain(ops.embedding, ops.layer_norm, ops.cross_entropy, ops.mean),
          _chain(F.embedding, F.layer_norm, F.cross_entropy, lambda x, dim: x.mean(dim))),
]
# One small case per op for finite differences: each numerical column costs two forward runs (the padding
# row's gradient is 0 by definition, not the derivative: no padding here).
GRADCHECK = [
    Graph("layer_norm", "layer_norm", _ln_make((3, 7), (7,), True),
          lambda x, w, b, ns: ops.layer_norm(x, ns, w, b), lambda x, w, b, ns: F.layer_norm(x, ns, w, b)),
    Graph("cross_entropy-mean-smoothing", "cross_entropy", _ce_make((5, 6)),
          lambda x, target: ops.cross_entropy(x, target, label_smoothing=0.1),
          lambda x, target: F.cross_entropy(x, target, label_smoothing=0.1)),
    Graph("cross_entropy-none", "cross_entropy", _ce_make((5, 6)),
          lambda x, target: ops.cross_entropy(x, target, reduction="none"),
          lambda x, target: F.cross_entropy(x, target, reduction="none")),
    Graph("embedding", "embedding", _emb_make, lambda w, indices: ops.embedding(indices, w),
          lambda w, indices: F.embedding(indices, w)),
    Graph("sum", "sum", _red_make((3, 4, 2)), lambda x: ops.sum(x, (0, 2)), lambda x: x.sum((0, 2))),
    Graph("mean", "mean", _red_make((3, 4)), lambda x: ops.mean(x, 1, keepdim=True), lambda x: x.mean(1, True)),
]


def _graph_params():
    for graph in GRAPHS:
        for device in DEVICES:
            ops_used = ["embedding", "layer_norm", "cross_entropy", "mean"] if graph.name == "chain" else [graph.op]
            plugins = set.intersection(*(set(runnable(op, device)) for op in ops_used))
            for plugin in sorted(plugins):
                yield pytest.param(graph, plugin, device, id=f"{graph.name}-{plugin}-{device}")


@pytest.mark.parametrize(("graph", "plugin", "device"), list(_graph_params()))
def test_gradients_match_torch_autograd_in_float64(graph, plugin, device):
    g = torch.Generator().manual_seed(0)
    inputs, extra = graph.make(torch.device(device), g)
    ours_in = [t.clone().requires_grad_() for t in inputs]
    theirs_in = [t.double().requires_grad_() for t in inputs]
    with kernelzoo.use(plugin):
        out = graph.ours(*ours_in, **extra)
    ref = graph.theirs(*theirs_in, **extra)
    assert out.dtype == torch.float32 and out.shape == ref.shape
    mismatch = check_close(out, ref, TOLERANCE)
    assert mismatch is None, f"output: {mismatch}"
    weights = _randn(*out.shape, g=g, device=torch.device(device))  # a loss of sum(out * weights)
    with kernelzoo.use(plugin):
        grads = torch.autograd.grad(out, ours_in, weights)
    ref_grads = torch.autograd.grad(ref, theirs_in, weights.double())
    for i, (got, want) in enumerate(zip(grads, ref_grads)):
        assert got.shape == want.shape and got.dtype == torch.float32
        mismatch = check_close(got, want, TOLERANCE)
        assert mismatch is None, f"gradient of input {i}: {mismatch}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("graph", GRADCHECK, ids=[graph.name for graph in GRADCHECK])
def test_gradcheck_by_finite_differences(graph, device):
    """The plugins dispatch chooses here (every plugin's gradients are compared with torch's above). Central
    differences in float32: eps 1e-2 keeps the rounding error (~u·|f|/eps = 6e-6) small, and the truncation
    error (~eps²·f''' ≲ 1e-4 for these smooth functions) within atol 2e-3 and rtol 1e-2."""
    g = torch.Generator().manual_seed(1)
    inputs, extra = graph.make(torch.device(device), g)
    leaves = [t.clone().requires_grad_() for t in inputs]

    def fn(*args: torch.Tensor) -> torch.Tensor:
        return graph.ours(*args, **extra)
    with pytest.warns(UserWarning, match="not a double precision"):
        assert torch.autograd.gradcheck(fn, leaves, eps=1e-2, atol=2e-3, rtol=1e-2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("op", "dim", "keepdim"), [("sum", (0, 2), False), ("mean", 1, True), ("sum", None, False)])
def test_sum_and_mean_backward_is_an_expand_view(op, dim, keepdim, device):
    x = torch.randn(5, 4, 3, device=device, requires_grad=True)
    out = getattr(kernelzoo.ops, op)(x, dim, keepdim=keepdim)
    (grad,) = torch.autograd.grad(out, x, torch.ones_like(out))
    reduced = range(3) if dim is None else [dim] if isinstance(dim, int) else dim
    assert all(grad.stride(d) == 0 for d in reduced), grad.stride()  # broadcast, not materialised
    expected = 1.0 if op == "sum" else 1.0 / math.prod(x.shape[d] for d in reduced)
    assert torch.equal(grad, torch.full_like(x, expected))


# --- optimizer updates against torch.optim ------------------------------------------------------------

SGD_VARIANTS = [{"momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01},
                {"momentum": 0.9, "nesterov": True, "weight_decay": 0.1}, {"weight_decay": 0.05}]
ADAM_VARIANTS = [({}, torch.optim.Adam), ({"weight_decay": 0.1}, torch.optim.Adam),
                 ({"weight_decay": 0.1, "amsgrad": True}, torch.optim.AdamW),
                 ({"betas": (0.3, 0.9)}, torch.optim.AdamW)]


def _update_params():
    for name in ("sgd_update_", "adam_update_"):
        for device in DEVICES:
            for plugin in runnable(name, device):
                yield pytest.param(name, plugin, device, id=f"{name}-{plugin}-{device}")


@pytest.mark.parametrize(("name", "plugin", "device"), list(_update_params()))
def test_updates_match_torch_optim_over_steps(name, plugin, device):
    g = torch.Generator().manual_seed(2)
    variants = SGD_VARIANTS if name == "sgd_update_" else ADAM_VARIANTS
    for variant in variants:
        start = _randn(257, 3, g=g, device=torch.device(device))
        grads = [_randn(257, 3, g=g, device=torch.device(device), scale=0.5) for _ in range(3)]
        ref = start.clone().requires_grad_()
        ours = start.clone()
        if name == "sgd_update_":
            optimizer = torch.optim.SGD([ref], lr=0.1, **variant)
            buffer = torch.zeros_like(ours)
            for step, grad in enumerate(grads):
                # torch's first step sets the buffer to the gradient: a zero buffer with dampening 0 does that
                kw = {**variant, "dampening": 0.0} if step == 0 else variant
                with kernelzoo.use(plugin):
                    kernelzoo.ops.sgd_update_(ours, grad, buffer if variant.get("momentum") else None, 0.1, **kw)
                ref.grad = grad.clone()
                optimizer.step()
        else:
            kw, cls = variant
            kw = {"weight_decay": 0.0, **kw}  # AdamW's default is 0.01, Adam's 0
            beta1, beta2 = kw.get("betas", (0.9, 0.999))
            optimizer = cls([ref], lr=0.01, **kw)
            state = [torch.zeros_like(ours) for _ in range(3)]  # exp_avg, exp_avg_sq, max_exp_avg_sq
            for step, grad in enumerate(grads, start=1):
                with kernelzoo.use(plugin):
                    kernelzoo.ops.adam_update_(ours, grad, state[0], state[1], step, 0.01, beta1, beta2, 1e-8,
                                               kw["weight_decay"], amsgrad=kw.get("amsgrad", False),
                                               decoupled=cls is torch.optim.AdamW, max_exp_avg_sq=state[2])
                ref.grad = grad.clone()
                optimizer.step()
        mismatch = check_close(ours, ref.detach().double(), TOLERANCE)
        assert mismatch is None, f"{variant}: {mismatch}"


# --- in-place updates are tuned safely ----------------------------------------------------------------

UPDATE_SHAPE = (4099,)


def _inplace_state(call) -> dict[str, torch.Tensor]:
    return {name: call.inputs[name] for name in call.op.inplace}


@pytest.mark.parametrize("name", ["sgd_update_", "adam_update_"])
def test_a_tuner_trial_leaves_the_tensors_as_one_step(name, monkeypatch):
    """worker.trial runs the config to check it, then warm-up and timed runs, restoring the in-place inputs
    before each: its tensors end exactly (bitwise) as one run on fresh inputs leaves them."""
    op, impl = registry.op(name), registry.impl(name, "openmp")
    made = []
    example = op.example

    def recording_example(*args, **kwargs):
        made.append(example(*args, **kwargs))
        return made[-1]
    monkeypatch.setattr(op, "example", recording_example)
    config = {"threads": impl.config_space["threads"][0]}
    reply = worker.trial({"op": name, "plugin": "openmp", "device": "cpu", "dtype": "float32",
                          "shape": list(UPDATE_SHAPE), "params": {}, "config": config, "seed": 7, "warmup": 2,
                          "budget_ms": 5})
    assert reply["ok"], reply
    assert len(reply["times_ms"]) >= 5  # many runs timed, each after a restore
    (trial_call,) = made
    monkeypatch.undo()
    once = op.example(UPDATE_SHAPE, torch.float32, "cpu", torch.Generator().manual_seed(7))
    impl.run(once, impl.config(config))
    for key, value in _inplace_state(once).items():
        assert torch.equal(trial_call.inputs[key], value), f"{key} is not one step's"


@pytest.fixture(scope="module")
def tuned_updates(tmp_path_factory):
    """sgd_update_ and adam_update_ tuned (openmp, on the CPU, at UPDATE_SHAPE) into a temporary database that
    stays the default for the tests that use this."""
    with pytest.MonkeyPatch.context() as mp, temporary_db(tmp_path_factory.mktemp("db"), mp) as url:
        store = open_store(url)
        options = TuneOptions(trials=4, timeout_s=120, budget_ms=5, warmup=1, calibrate=False)
        with WorkerPool(120) as pool:
            reports = {name: tune_op(store, pool, name, device="cpu", plugins=["openmp"], shapes=[UPDATE_SHAPE],
                                     dtypes=["float32"], options=options)
                       for name in ("sgd_update_", "adam_update_")}
        yield reports


@pytest.mark.parametrize("name", ["sgd_update_", "adam_update_"])
def test_a_tuned_update_is_one_untuned_step(tuned_updates, name):
    """After tuning, dispatch runs the tuned config; one call on the caller's tensors leaves them exactly as one
    step of the same plugin with its default (untuned) config, and a second call takes a second step."""
    (report,) = tuned_updates[name]
    assert report.winner == "openmp"
    op, impl = registry.op(name), registry.impl(name, "openmp")
    call = op.example(UPDATE_SHAPE, torch.float32, "cpu", torch.Generator().manual_seed(3))
    args = _public_args(call)
    choice = kernelzoo.explain(name, *args[0], **args[1])
    assert choice.plugin == "openmp" and choice.reason.startswith("tuned"), choice
    untuned = op.example(UPDATE_SHAPE, torch.float32, "cpu", torch.Generator().manual_seed(3))
    impl.run(untuned, impl.config())
    getattr(kernelzoo.ops, name)(*args[0], **args[1])
    for key, value in _inplace_state(untuned).items():
        assert torch.equal(call.inputs[key], value), f"{key}: the tuned call is not one untuned step"
    impl.run(untuned, impl.config())
    getattr(kernelzoo.ops, name)(*args[0], **args[1])
    assert torch.equal(call.inputs["param"], untuned.inputs["param"])


def _public_args(call) -> tuple[tuple, dict]:
    """The public op's arguments for a checked call of sgd_update_ or adam_update_ (its tensors, not copies)."""
    i, p = call.inputs, dict(call.params)
    if call.op.name == "sgd_update_":
        buffer = i["momentum_buffer"] if p["momentum"] else None
        return (i["param"], i["grad"], buffer, p.pop("lr")), p
    extra = {"max_exp_avg_sq": i["max_exp_avg_sq"]} if p["amsgrad"] else {}
    return (i["param"], i["grad"], i["exp_avg"], i["exp_avg_sq"]), {**p, **extra}
