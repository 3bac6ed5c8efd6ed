"""torch.compile over kernelzoo: code calling kernelzoo.ops.*, kernelzoo.nn.MultiheadAttention or a plain torch
model built on them compiles with fullgraph=True (no graph break), runs the choice eager runs for each call,
and gives eager's results and gradients. Dispatch runs when the compiled program runs, never while tracing.

Each compile costs seconds on a small CPU: the tests share a few compiled functions, Inductor's CPU backend for
the programs that run, the eager backend where only tracing is tested."""

from __future__ import annotations

import pytest
import torch

import kernelzoo
from kernelzoo import dispatch, library, ops
from kernelzoo.errors import ArgumentError
from kernelzoo.nn import MultiheadAttention
from kernelzoo.registry import Op, is_fake

GPU = torch.cuda.is_available()


@pytest.fixture(autouse=True)
def _fresh_compiles():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def lookups(monkeypatch):
    """Every question dispatch asks the winner source (the tuning database), with whether it came while tracing:
    (op, fake inputs?, compiling?). No winners: the default order chooses."""
    asked: list[tuple[str, bool, bool]] = []

    def source(op: Op, call, plugin):
        asked.append((op.name, any(is_fake(t) for t in call.inputs.values() if isinstance(t, torch.Tensor)),
                      torch.compiler.is_compiling()))
        return None

    monkeypatch.setattr(dispatch, "_winner_source", source)
    dispatch.clear_cache()
    yield asked
    dispatch.clear_cache()


def _choices(fn, *args) -> list[tuple[str, str, tuple, str]]:
    """(op, plugin, bucket, flags) of every op run while ``fn(*args)`` runs."""
    seen = []
    with dispatch.observe(lambda op, call, choice, s: seen.append((op.name, choice.plugin, op.bucket(call),
                                                                    op.flags(call)))):
        fn(*args)
    return seen


def block(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """A small model step in kernelzoo ops and torch ops: linear, layer_norm, softmax, sum, cross_entropy."""
    h = ops.linear(x, w, b)
    h = ops.layer_norm(h, h.shape[-1]) * 0.5 + torch.tanh(h)
    p = ops.softmax(h, -1)
    loss = ops.cross_entropy(h, target) + ops.sum(p * p) / p.shape[0]
    return loss + ops.max(h, dim=-1).values.mean()


def _inputs(device: str = "cpu") -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 16, generator=g)
    w, b = torch.randn(12, 16, generator=g) / 4, torch.randn(12, generator=g)
    target = torch.randint(0, 12, (6,), generator=g)
    return tuple(t.to(device) for t in (x, w, b, target))


def test_a_function_of_kernelzoo_ops_compiles_whole_and_matches_eager(lookups) -> None:
    x, w, b, target = _inputs()
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    compiled = torch.compile(block, fullgraph=True)  # Inductor, CPU
    loss = compiled(*leaves, target)
    assert torch._dynamo.utils.counters["graph_break"] == {}
    grads = torch.autograd.grad(loss, leaves)

    eager_leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    eager_loss = block(*eager_leaves, target)
    eager_grads = torch.autograd.grad(eager_loss, eager_leaves)
    torch.testing.assert_close(loss, eager_loss)
    for got, want in zip(grads, eager_grads):
        torch.testing.assert_close(got, want)

    # the compiled program runs what eager runs, call by call, with the same keys (in an order of its own)
    assert sorted(_choices(compiled, x, w, b, target)) == sorted(_choices(block, x, w, b, target))
    # and asked the winner source only with real tensors, when running
    assert lookups and not any(fake or compiling for _, fake, compiling in lookups)


def test_the_compiled_program_runs_the_tuned_winner(monkeypatch) -> None:
    """A winner the source names runs in the compiled program too, with its config, for the call's key."""
    from kernelzoo.registry import registry

    x = torch.randn(8, 32)
    wanted = registry.impl("softmax", "python")

    def source(op: Op, call, plugin):
        if op.name == "softmax" and plugin is None:
            return dispatch.Choice("python", wanted.config(), "tuned (test)", wanted)
        return None

    monkeypatch.setattr(dispatch, "_winner_source", source)
    dispatch.clear_cache()
    try:
        fn = torch.compile(lambda x: ops.softmax(x * 2, -1), fullgraph=True, backend="eager")
        seen = []
        with dispatch.observe(lambda op, call, choice, s: seen.append((op.name, choice.plugin, choice.reason))):
            torch.testing.assert_close(fn(x), torch.softmax(x * 2, -1))
        assert seen == [("softmax", "python", "tuned (test)")]
    finally:
        dispatch.clear_cache()


def test_multihead_attention_compiles_whole_and_matches_eager() -> None:
    torch.manual_seed(0)
    mha = MultiheadAttention(32, 4, batch_first=True)
    x = torch.randn(2, 7, 32)

    def step(x: torch.Tensor) -> torch.Tensor:
        out, _ = mha(x, x, x, need_weights=False)
        return out

    compiled = torch.compile(step, fullgraph=True)
    out = compiled(x)
    out.square().sum().backward()
    grads = [p.grad.clone() for p in mha.parameters()]
    mha.zero_grad()
    eager = step(x)
    eager.square().sum().backward()
    torch.testing.assert_close(out, eager)
    for got, p in zip(grads, mha.parameters()):
        torch.testing.assert_close(got, p.grad)


class _Model(torch.nn.Module):
    """A plain torch model whose layers call kernelzoo ops."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(20, 16)
        self.proj = torch.nn.Linear(16, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.head = torch.nn.Linear(16, 20)

    def forward(self, tokens: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        h = ops.embedding(tokens, self.embed.weight)
        h = ops.layer_norm(ops.linear(h, self.proj.weight, self.proj.bias), 16, self.norm.weight, self.norm.bias)
        q = h.unsqueeze(1)  # (B, 1, N, D)
        h = h + ops.attention(q, q, q, causal=True).squeeze(1)
        logits = ops.linear(h, self.head.weight, self.head.bias)
        return ops.cross_entropy(logits.flatten(0, 1), target.flatten())


def test_a_torch_model_on_kernelzoo_ops_compiles_whole_and_trains_as_eager() -> None:
    torch.manual_seed(0)
    model = _Model()
    tokens, target = torch.randint(0, 20, (2, 9)), torch.randint(0, 20, (2, 9))
    compiled = torch.compile(model, fullgraph=True)
    loss = compiled(tokens, target)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    eager = model(tokens, target)
    eager.backward()
    torch.testing.assert_close(loss, eager)
    for name, p in model.named_parameters():
        torch.testing.assert_close(grads[name], p.grad, msg=name)


def test_bad_arguments_raise_the_typed_error_under_compile() -> None:
    """The fake implementation runs the op's checks at trace time; torch.compile reports the typed error there,
    its message in the text and the error itself in the chain of exceptions (dynamo wraps what a fake raises)."""
    x = torch.randn(4, 5)

    def bad(x: torch.Tensor) -> torch.Tensor:
        return ops.softmax(x, 2)

    message = "softmax: dim must be in [-2, 1] for x of shape (4, 5), got 2"
    for fullgraph in (True, False):
        torch._dynamo.reset()
        with pytest.raises(torch._dynamo.exc.TorchDynamoException) as info:
            torch.compile(bad, fullgraph=fullgraph, backend="eager")(x)
        assert message in str(info.value)
        causes, cause = [], info.value
        while cause is not None:
            causes.append(cause)
            cause = cause.__cause__ or cause.__context__
        assert any(isinstance(c, ArgumentError) and str(c) == message for c in causes)


def test_eager_calls_take_the_direct_path(monkeypatch) -> None:
    """Outside torch.compile, kernelzoo.ops does not go through torch.ops (its host cost stays as it was)."""
    def refuse(*args, **kwargs):
        raise AssertionError("eager call went through the custom op")

    monkeypatch.setattr(library, "call", refuse)
    x = torch.randn(3, 4, requires_grad=True)
    ops.softmax(ops.layer_norm(x, 4), -1).sum().backward()
    assert x.grad is not None


def test_a_forced_plugin_reaches_the_compiled_program() -> None:
    x = torch.randn(4, 6)
    fn = torch.compile(lambda x: ops.softmax(x, -1), fullgraph=True, backend="eager")
    fn(x)
    seen = []
    with kernelzoo.use("python"), dispatch.observe(lambda op, call, choice, s: seen.append(choice.plugin)):
        fn(x)
    assert seen == ["python"]


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="no CUDA device")
def test_compiled_on_the_gpu_matches_eager() -> None:
    x, w, b, target = _inputs("cuda")
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    compiled = torch.compile(block, fullgraph=True)
    loss = compiled(*leaves, target)
    grads = torch.autograd.grad(loss, leaves)
    eager_leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    eager_loss = block(*eager_leaves, target)
    torch.testing.assert_close(loss, eager_loss)
    for got, want in zip(grads, torch.autograd.grad(eager_loss, eager_leaves)):
        torch.testing.assert_close(got, want)
    assert sorted(_choices(compiled, x, w, b, target)) == sorted(_choices(block, x, w, b, target))


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="no CUDA device")
def test_multihead_attention_compiled_on_the_gpu_matches_eager() -> None:
    torch.manual_seed(0)
    mha = MultiheadAttention(64, 4, batch_first=True, device="cuda", dtype=torch.float16)
    x = torch.randn(2, 33, 64, device="cuda", dtype=torch.float16)
    compiled = torch.compile(lambda x: mha(x, x, x, need_weights=False, is_causal=False)[0], fullgraph=True)
    torch.testing.assert_close(compiled(x), mha(x, x, x, need_weights=False)[0])
