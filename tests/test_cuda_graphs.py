"""CUDA graphs: every op captured and replayed under ``torch.cuda.graph`` gives its eager results, and a mytorch
training step captured by ``mytorch.cuda.make_graphed_step`` trains as eager steps do. The GPU tests skip on
the CPU; what makes a step capturable (a device step count, a warm-up that is undone, nothing read or chosen on
the host once warm) is tested on the CPU too."""

from __future__ import annotations

import gc
import math
import weakref
import zlib

import pytest
import torch

import mytorch
from kernelzoo import dispatch
from kernelzoo.backends import openmp
from kernelzoo.bench.step import MytorchTransformer
from kernelzoo.registry import registry
from mytorch import nn
from mytorch.cuda import _restore, _snapshot, graphed_step

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA GPU")


def _clone(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    return value


def _copy_into(dst, src) -> None:
    if isinstance(dst, torch.Tensor):
        dst.copy_(src)
    elif isinstance(dst, (list, tuple)):
        for d, s in zip(dst, src):
            _copy_into(d, s)


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _gpu_ops() -> list[str]:
    return sorted(op for op in registry.load().ops
                  if any("cuda" in impl.devices() and registry.availability(impl)
                         for impl in registry.implementations(op)))


@needs_gpu
@pytest.mark.parametrize("op", _gpu_ops() if torch.cuda.is_available() else [])
def test_every_op_replays_its_eager_results(op, monkeypatch):
    """The op's largest conformance case of at most 2^20 elements, float32: warmed up on the inputs the graph
    captures (so that choices, compiled kernels and index checks are cached), captured, the inputs reset,
    replayed; its outputs and the inputs it writes match an eager run on the same inputs. The first call waits for
    the tuning database, so that the eager run and the graph run the same choice: a call made before the database
    answers runs the default order, whose plugin may sum in another order than the tuned one."""
    monkeypatch.setenv("KERNELZOO_DB_WAIT_MS", "60000")
    spec, made = registry.op(op), []
    for case in spec.cases():
        args, kwargs = case.make(torch.device("cuda"), torch.float32, torch.Generator().manual_seed(zlib.crc32(
            case.id.encode())))
        size = sum(t.numel() for t in _tensors((args, kwargs)))
        if size <= 2**20:
            made.append((size, case.id, args, kwargs))
    _, _, args, kwargs = max(made, key=lambda m: m[0])
    pristine = _clone((args, kwargs))
    eager_args, eager_kwargs = _clone(pristine)
    want = dispatch.run_op(op, *eager_args, **eager_kwargs)
    graph_args, graph_kwargs = _clone(pristine)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            dispatch.run_op(op, *graph_args, **graph_kwargs)
    torch.cuda.current_stream().wait_stream(side)
    _copy_into((graph_args, graph_kwargs), pristine)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = dispatch.run_op(op, *graph_args, **graph_kwargs)
    _copy_into((graph_args, graph_kwargs), pristine)
    graph.replay()
    torch.cuda.synchronize()
    for g, w in zip(_tensors(got) + _tensors((graph_args, graph_kwargs)),
                    _tensors(want) + _tensors((eager_args, eager_kwargs)), strict=True):
        if g.is_floating_point() and g.element_size() == 1:  # 8-bit float inputs: unchanged, to the bit
            assert torch.equal(g.view(torch.uint8), w.view(torch.uint8))
        else:
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5, equal_nan=True)


def _model_and_batches(device: str, steps: int = 3):
    vocab, batch, seq = 50, 4, 16
    mytorch.manual_seed(0)
    model = MytorchTransformer(vocab, seq, 32, 4, 2).to(device)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, vocab, (batch, seq), generator=g).to(device),
                torch.randint(0, vocab, (batch * seq,), generator=g).to(device)) for _ in range(steps)]
    loss_fn = nn.CrossEntropyLoss()

    def loss(logits, target):
        return loss_fn(logits.view(-1, vocab), target)

    return model, batches, loss


def _eager_steps(model, opt, loss, batches) -> list[float]:
    losses = []
    for x, y in batches:
        opt.zero_grad()
        value = loss(model(mytorch.from_torch(x)), mytorch.from_torch(y))
        value.backward()
        opt.step()
        losses.append(value.item())
    return losses


def _adam_reach(beta1: float, beta2: float, step: int) -> float:
    """The most one bias-corrected Adam step at ``step`` can move a parameter, in units of lr, whatever the
    gradients: |m̂|/(√v̂ + eps) < |Σ wᵢgᵢ| / √(Σ uᵢgᵢ²) ≤ √(Σ wᵢ²/uᵢ) by Cauchy-Schwarz, wᵢ and uᵢ being the
    weights of gradient i in m̂ and v̂ (slightly above 1 from the second step on)."""
    w = [(1 - beta1) * beta1 ** (step - i) / (1 - beta1 ** step) for i in range(1, step + 1)]
    u = [(1 - beta2) * beta2 ** (step - i) / (1 - beta2 ** step) for i in range(1, step + 1)]
    return math.sqrt(sum(a * a / b for a, b in zip(w, u)))


def _assert_trained_alike(model, twin, lr: float, steps: int, betas: tuple[float, float] = (0.9, 0.999)) -> None:
    """Every parameter of ``model`` as ``twin``'s (trained from the same start on the same batches), but for the
    key third of each attention's in_proj_bias. Its true gradient is zero (a constant added to every key's score
    leaves the softmax as it was), so what reaches it is rounding noise, which Adam, whose steps do not scale
    with the gradient, turns into steps of up to about lr whose signs differ between runs. That is granted only
    while the twin's gradient there is noise beside the query and value biases', and only as far as Adam can
    move it from its zero start in ``steps`` steps (AdamW's decay only shrinks it)."""
    reach = lr * sum(_adam_reach(*betas, t) for t in range(1, steps + 1)) * (1 + 1e-5)
    for (name, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
        mine, theirs = p.data, q.data
        if name.endswith("attn.in_proj_bias"):
            d = mine.shape[0] // 3
            grad = q.grad.data.abs()
            assert grad[d:2 * d].max() <= 1e-3 * torch.cat([grad[:d], grad[2 * d:]]).max(), (name, grad)
            for key in (mine[d:2 * d], theirs[d:2 * d]):
                assert key.abs().max().item() <= reach, (name, key.abs().max().item(), reach)
            mine, theirs = torch.cat([mine[:d], mine[2 * d:]]), torch.cat([theirs[:d], theirs[2 * d:]])
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-5, msg=name)


@needs_gpu
def test_a_graphed_mytorch_step_trains_as_eager_steps():
    model, batches, loss = _model_and_batches("cuda")
    twin, _, _ = _model_and_batches("cuda")
    lr = 1e-3
    eager_losses = _eager_steps(twin, mytorch.optim.AdamW(twin.parameters(), lr=lr), loss, batches)
    opt = mytorch.optim.AdamW(model.parameters(), lr=lr, capturable=True)
    step = mytorch.cuda.make_graphed_step(model, opt, loss, *map(mytorch.from_torch, batches[0]))
    graph_losses = [step(*map(mytorch.from_torch, b)).item() for b in batches]
    assert graph_losses == pytest.approx(eager_losses, rel=1e-4)
    _assert_trained_alike(model, twin, lr, len(batches))


def test_a_capturable_adamw_trains_the_transformer_as_the_fused_one():
    """The graphed step's optimizer, run eagerly, against the fused one: what the graphed step's test allows
    (the key bias's noise, within Adam's reach) is all that differs."""
    model, batches, loss = _model_and_batches("cpu")
    twin, _, _ = _model_and_batches("cpu")
    lr = 1e-3
    want = _eager_steps(twin, mytorch.optim.AdamW(twin.parameters(), lr=lr), loss, batches)
    got = _eager_steps(model, mytorch.optim.AdamW(model.parameters(), lr=lr, capturable=True), loss, batches)
    assert got == pytest.approx(want, rel=1e-4)
    _assert_trained_alike(model, twin, lr, len(batches))


def test_adams_reach_is_its_largest_step():
    """The bound the key bias is held to: 1 at the first step, and no gradient sequence steps further (a
    constant one steps exactly lr; the worst case leans on the latest gradients)."""
    assert _adam_reach(0.9, 0.999, 1) == pytest.approx(1.0)
    for step in (2, 3, 10):
        reach = _adam_reach(0.9, 0.999, step)
        p = torch.nn.Parameter(torch.zeros(2))
        opt = torch.optim.Adam([p], lr=1.0, eps=0.0)
        w = [0.1 * 0.9 ** (step - i) for i in range(1, step + 1)]
        u = [0.001 * 0.999 ** (step - i) for i in range(1, step + 1)]
        worst = [a / b for a, b in zip(w, u)]  # gᵢ ∝ wᵢ/uᵢ attains Cauchy-Schwarz's bound
        for i in range(step):
            before = p.detach().clone()
            p.grad = torch.tensor([worst[i], 1.0])
            opt.step()
        moved = (before - p.detach()).abs()
        assert moved[0].item() == pytest.approx(reach, rel=1e-4) and reach > 1.0
        assert moved[1].item() == pytest.approx(1.0, rel=1e-4)


def _graphed_by_a_caller_that_keeps_only_the_step(lr: float):
    model, batches, loss = _model_and_batches("cuda")
    opt = mytorch.optim.AdamW(model.parameters(), lr=lr, capturable=True)
    step = mytorch.cuda.make_graphed_step(model, opt, loss, *map(mytorch.from_torch, batches[0]))
    return step, weakref.ref(model), weakref.ref(opt), batches


@needs_gpu
def test_a_graphed_step_keeps_what_its_replays_read_and_write():
    """The graph reads the model's position indices (a buffer no gradient reaches) and writes the optimizer's
    state: a caller that keeps only the step must not free them. Freed, their memory would go to the next small
    tensors (here indices that are in range but wrong) and the replays would train on those."""
    lr = 1e-3
    step, model, opt, batches = _graphed_by_a_caller_that_keeps_only_the_step(lr)
    gc.collect()
    assert model() is not None and opt() is not None
    churn = [torch.full((n,), 1, dtype=torch.int64, device="cuda") for n in (16, 32, 64, 128) for _ in range(64)]
    twin, _, loss = _model_and_batches("cuda")
    want = _eager_steps(twin, mytorch.optim.AdamW(twin.parameters(), lr=lr), loss, batches)
    got = [step(*map(mytorch.from_torch, b)).item() for b in batches]
    del churn
    assert got == pytest.approx(want, rel=1e-4)


def test_a_capturable_adam_steps_as_torch_does():
    for mine, theirs in ((mytorch.optim.AdamW, torch.optim.AdamW), (mytorch.optim.Adam, torch.optim.Adam)):
        g = torch.Generator().manual_seed(0)
        start = torch.randn(7, 5, generator=g)
        p, q = nn.Parameter(start.clone()), torch.nn.Parameter(start.clone())
        opt, ref = mine([p], lr=1e-2, weight_decay=0.1, capturable=True), theirs([q], lr=1e-2, weight_decay=0.1)
        for _ in range(3):
            grad = torch.randn(7, 5, generator=g)
            p.grad, q.grad = mytorch.Tensor(grad.clone()), grad.clone()
            opt.step()
            ref.step()
        torch.testing.assert_close(p.data, q.data, rtol=1e-5, atol=1e-6)
        assert float(opt.state[id(p)]["step"]) == 3.0  # a device number, not a host int


def test_a_graphed_step_needs_a_capturable_adam():
    model, batches, _ = _model_and_batches("cpu", 1)
    opt = mytorch.optim.AdamW(model.parameters())
    with pytest.raises(ValueError, match="capturable=True"):
        graphed_step(lambda x, y: None, *batches[0], optimizers=[opt])
    with pytest.raises(ValueError, match="amsgrad"):
        mytorch.optim.Adam(model.parameters(), amsgrad=True, capturable=True)


def test_the_warm_up_is_undone():
    """graphed_step's warm-up steps change the parameters and create the optimizer's state; put back in place,
    the next steps are those of a fresh model and optimizer."""
    model, batches, loss = _model_and_batches("cpu", 5)
    twin, _, _ = _model_and_batches("cpu")
    opt = mytorch.optim.AdamW(model.parameters(), lr=1e-2, capturable=True)
    kept = [p.data for p in model.parameters()]
    saved = _snapshot([opt])
    _eager_steps(model, opt, loss, batches[3:])  # the warm-up
    state = {id(p): dict(opt.state[id(p)]) for p in model.parameters()}
    _restore([opt], saved)
    assert all(p.data is k for p, k in zip(model.parameters(), kept))  # in place: the graph's addresses
    assert all(opt.state[id(p)]["exp_avg"] is state[id(p)]["exp_avg"] for p in model.parameters())
    got = _eager_steps(model, opt, loss, batches[:3])
    want = _eager_steps(twin, mytorch.optim.AdamW(twin.parameters(), lr=1e-2, capturable=True), loss, batches[:3])
    assert got == pytest.approx(want, rel=1e-5)
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p.data, q.data)


def test_a_warm_step_reads_nothing_on_the_host_and_chooses_nothing(monkeypatch):
    """What capture forbids, checked on the CPU: once a step has run on its inputs, the next step on the same
    tensors reads no index tensor's values (the checks are remembered), makes no choice (every call's is
    cached) and compiles nothing."""
    model, batches, loss = _model_and_batches("cpu", 1)
    opt = mytorch.optim.AdamW(model.parameters(), lr=1e-2, capturable=True)
    x, y = map(mytorch.from_torch, batches[0])

    def step():
        opt.zero_grad()
        value = loss(model(x), y)
        value.backward()
        opt.step()
        return value

    step()

    def forbidden(*args, **kwargs):
        raise AssertionError("host work in a warm step")

    # torch.aminmax: how the index checks read a tensor's values (a device sync, on a GPU)
    for target, name in ((torch, "aminmax"), (dispatch, "_choose"), (openmp, "_compile")):
        monkeypatch.setattr(target, name, forbidden)
    step()
    monkeypatch.undo()
    assert step().item() > 0
