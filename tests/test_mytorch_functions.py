"""Every mytorch Function, forward and backward, against torch autograd in float64 on the same
random inputs: values and gradients (mytorch computes in float32 on kernelzoo ops); broadcasting
and non-contiguous cases; a finite-difference check for a handful of ops."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch

import mytorch
import mytorch.nn.functional as MF

Maker = Callable[[torch.Generator], list[torch.Tensor]]
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def r(*shape: int, positive: bool = False) -> Callable[[torch.Generator], torch.Tensor]:
    def make(g: torch.Generator) -> torch.Tensor:
        x = torch.randn(shape, generator=g)
        return x.abs() + 0.5 if positive else x
    return make


def transposed(*shape: int) -> Callable[[torch.Generator], torch.Tensor]:
    return lambda g: torch.randn(tuple(reversed(shape)), generator=g).t()


def sum_of(parts: Sequence) -> object:
    """parts[0] + 2·parts[1] + 3·parts[2] + ...: each slice gets a different gradient."""
    total = parts[0]
    for i, part in enumerate(parts[1:], 2):
        total = total + part * float(i)
    return total


def _conv_case(stride: int, padding: int, dilation: int) -> tuple:
    return (f"conv2d-s{stride}-p{padding}-d{dilation}", [r(2, 3, 9, 11), r(4, 3, 3, 3), r(4)],
            lambda x, w, b: MF.conv2d(x, w, b, stride, padding, dilation),
            lambda x, w, b: torch.nn.functional.conv2d(x, w, b, stride, padding, dilation))


# (id, input makers, mytorch function, torch function); every input requires grad
CASES: list[tuple] = [
    ("add", [r(5, 7), r(5, 7)], lambda a, b: a + b, lambda a, b: a + b),
    ("add-broadcast-row", [r(5, 7), r(7)], lambda a, b: a + b, lambda a, b: a + b),
    ("sub-broadcast-column", [r(5, 1), r(5, 7)], lambda a, b: a - b, lambda a, b: a - b),
    ("rsub-scalar", [r(5, 7)], lambda a: 2.0 - a, lambda a: 2.0 - a),
    ("mul-outer", [r(5, 1), r(1, 7)], lambda a, b: a * b, lambda a, b: a * b),
    ("mul-scalar-tensor", [r(), r(3, 4)], lambda a, b: a * b, lambda a, b: a * b),
    ("div", [r(5, 7), r(5, 7, positive=True)], lambda a, b: a / b, lambda a, b: a / b),
    ("rdiv-scalar", [r(4, 3, positive=True)], lambda a: 1.0 / a, lambda a: 1.0 / a),
    ("neg", [r(6)], lambda a: -a, lambda a: -a),
    ("pow-2", [r(5, 7)], lambda a: a ** 2, lambda a: a ** 2),
    ("pow-3", [r(5, 7)], lambda a: a ** 3, lambda a: a ** 3),
    ("pow-half", [r(5, 7, positive=True)], lambda a: a ** 0.5, lambda a: a ** 0.5),
    ("sqrt", [r(5, 7, positive=True)], lambda a: a.sqrt(), lambda a: a.sqrt()),
    ("exp", [r(5, 7)], lambda a: a.exp(), lambda a: a.exp()),
    ("log", [r(5, 7, positive=True)], lambda a: a.log(), lambda a: a.log()),
    ("tanh", [r(5, 7)], lambda a: a.tanh(), lambda a: a.tanh()),
    ("relu", [r(33, 17)], lambda a: a.relu(), lambda a: a.relu()),
    ("gelu", [r(33, 17)], lambda a: a.gelu(), lambda a: torch.nn.functional.gelu(a)),
    ("gelu-tanh", [r(33, 17)], lambda a: a.gelu("tanh"), lambda a: torch.nn.functional.gelu(a, approximate="tanh")),
    ("softmax-last", [r(9, 13)], lambda a: a.softmax(-1), lambda a: a.softmax(-1)),
    ("softmax-dim0", [r(9, 13)], lambda a: a.softmax(0), lambda a: a.softmax(0)),
    ("sum-all", [r(5, 7)], lambda a: a.sum(), lambda a: a.sum()),
    ("sum-dim", [r(5, 7, 3)], lambda a: a.sum(1), lambda a: a.sum(1)),
    ("sum-dims-keepdim", [r(5, 7, 3)], lambda a: a.sum((0, 2), keepdim=True), lambda a: a.sum((0, 2), keepdim=True)),
    ("mean-dim", [r(5, 7, 3)], lambda a: a.mean(-1), lambda a: a.mean(-1)),
    ("mean-all", [r(5, 7)], lambda a: a.mean(), lambda a: a.mean()),
    ("max-all", [r(5, 7)], lambda a: a.max(), lambda a: a.max()),
    ("max-dim", [r(5, 7)], lambda a: a.max(1).values, lambda a: a.max(1).values),
    ("max-dim-keepdim", [r(5, 7)], lambda a: a.max(0, keepdim=True)[0], lambda a: a.max(0, keepdim=True)[0]),
    ("matmul-2d", [r(5, 7), r(7, 3)], lambda a, b: a @ b, lambda a, b: a @ b),
    ("matmul-transposed", [transposed(5, 7), transposed(7, 3)], lambda a, b: a @ b, lambda a, b: a @ b),
    ("matmul-batched", [r(2, 5, 7), r(2, 7, 3)], lambda a, b: a @ b, lambda a, b: a @ b),
    ("matmul-4d", [r(2, 3, 5, 7), r(2, 3, 7, 4)], lambda a, b: a @ b, lambda a, b: a @ b),
    ("matmul-batched-2d", [r(2, 5, 7), r(7, 3)], lambda a, b: a @ b, lambda a, b: a @ b),
    ("matmul-broadcast-batch", [r(1, 5, 7), r(3, 7, 2)], lambda a, b: a @ b, lambda a, b: a @ b),
    ("matmul-vector", [r(5, 7), r(7)], lambda a, b: a @ b, lambda a, b: a @ b),
    ("view", [r(6, 4)], lambda a: a.view(3, 8) * 2.0, lambda a: a.view(3, 8) * 2.0),
    ("reshape-noncontiguous", [transposed(6, 4)], lambda a: a.reshape(24), lambda a: a.reshape(24)),
    ("transpose-permute", [r(2, 3, 4)], lambda a: a.permute(2, 0, 1).transpose(0, 1).contiguous(),
     lambda a: a.permute(2, 0, 1).transpose(0, 1).contiguous()),
    ("index-slices", [r(6, 8)], lambda a: a[1:5:2, ::3] * 3.0, lambda a: a[1:5:2, ::3] * 3.0),
    ("index-int-none", [r(6, 8)], lambda a: a[2, None, 1:], lambda a: a[2, None, 1:]),
    ("unbind-used-twice", [r(4, 3, 5)], lambda a: a.unbind(1)[0] * a.unbind(1)[2],
     lambda a: a.unbind(1)[0] * a.unbind(1)[2]),
    ("unbind-all", [r(4, 3, 5)], lambda a: sum_of(a.unbind(-2)), lambda a: sum_of(a.unbind(-2))),
    ("expand", [r(1, 5)], lambda a: a.expand(4, 5) * 1.0, lambda a: a.expand(4, 5) * 1.0),
    ("unsqueeze-squeeze-flatten", [r(3, 1, 4)], lambda a: a.squeeze(1).unsqueeze(0).flatten(),
     lambda a: a.squeeze(1).unsqueeze(0).flatten()),
    ("linear", [r(4, 6, 7), r(5, 7), r(5)], MF.linear, torch.nn.functional.linear),
    ("linear-no-bias", [r(9, 7), r(5, 7)], MF.linear, torch.nn.functional.linear),
    _conv_case(1, 0, 1),
    _conv_case(2, 1, 1),
    _conv_case(1, 2, 2),
    ("max_pool2d", [r(2, 3, 9, 10)], lambda x: MF.max_pool2d(x, 2), lambda x: torch.nn.functional.max_pool2d(x, 2)),
    ("max_pool2d-s1-p1", [r(2, 3, 7, 7)], lambda x: MF.max_pool2d(x, 3, 1, 1),
     lambda x: torch.nn.functional.max_pool2d(x, 3, 1, 1)),
    ("layer_norm", [r(4, 5, 17), r(17), r(17)], lambda x, w, b: MF.layer_norm(x, 17, w, b),
     lambda x, w, b: torch.nn.functional.layer_norm(x, (17,), w, b)),
    ("mse_loss", [r(8, 3), r(8, 3)], MF.mse_loss, torch.nn.functional.mse_loss),
    ("attention", [r(2, 3, 17, 16), r(2, 3, 11, 16), r(2, 3, 11, 16)], MF.scaled_dot_product_attention,
     torch.nn.functional.scaled_dot_product_attention),
    ("attention-causal", [r(1, 2, 13, 8), r(1, 2, 13, 8), r(1, 2, 13, 8)],
     lambda q, k, v: MF.scaled_dot_product_attention(q, k, v, is_causal=True),
     lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)),
    ("chain-mlp", [r(8, 5), r(6, 5), r(6), r(3, 6)],
     lambda x, w1, b1, w2: MF.linear(MF.gelu(MF.linear(x, w1, b1)), w2).tanh().sum(-1),
     lambda x, w1, b1, w2: torch.tanh(torch.nn.functional.linear(
         torch.nn.functional.gelu(torch.nn.functional.linear(x, w1, b1)), w2)).sum(-1)),
]


def _tolerance(name: str) -> dict:
    # float32 against float64: reductions over up to a few hundred terms of unit-size values
    return {"rtol": 2e-4, "atol": 2e-4}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("name", "makers", "mine", "theirs"), CASES, ids=[c[0] for c in CASES])
def test_function_matches_torch_autograd(name: str, makers: list, mine: Callable, theirs: Callable,
                                         device: str) -> None:
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    inputs = [make(g) for make in makers]
    ours = [mytorch.from_torch(x.to(device), requires_grad=True) for x in inputs]
    ref = [x.double().requires_grad_(True) for x in inputs]
    out, expected = mine(*ours), theirs(*ref)
    torch.testing.assert_close(out.data.cpu().double(), expected.detach(), **_tolerance(name))
    upstream = torch.randn(expected.shape, generator=g, dtype=torch.float64)
    out.backward(mytorch.from_torch(upstream.to(device, torch.float32)))
    expected.backward(upstream)
    for i, (x, y) in enumerate(zip(ours, ref)):
        assert x.grad is not None, f"input {i} got no gradient"
        assert x.grad.shape == x.shape and x.grad.device == x.device
        torch.testing.assert_close(x.grad.data.cpu().double(), y.grad, **_tolerance(name),
                                   msg=lambda m, i=i: f"gradient of input {i}: {m}")


@pytest.mark.parametrize("device", DEVICES)
def test_cross_entropy_and_embedding_gradients(device: str) -> None:
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(12, 9, generator=g)
    target = torch.randint(0, 9, (12,), generator=g)
    target[3] = -100
    weight = torch.randn(20, 6, generator=g)
    idx = torch.randint(0, 20, (4, 5), generator=g)
    ours_logits = mytorch.from_torch(logits.to(device), requires_grad=True)
    ours_weight = mytorch.from_torch(weight.to(device), requires_grad=True)
    loss = MF.cross_entropy(ours_logits, mytorch.from_torch(target.to(device)), label_smoothing=0.1)
    emb = MF.embedding(mytorch.from_torch(idx.to(device)), ours_weight)
    (loss + (emb * emb).sum()).backward()
    ref_logits, ref_weight = logits.double().requires_grad_(), weight.double().requires_grad_()
    ref_loss = torch.nn.functional.cross_entropy(ref_logits, target, label_smoothing=0.1)
    ref_emb = torch.nn.functional.embedding(idx, ref_weight)
    (ref_loss + (ref_emb * ref_emb).sum()).backward()
    torch.testing.assert_close(loss.data.cpu().double(), ref_loss.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours_logits.grad.data.cpu().double(), ref_logits.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(ours_weight.grad.data.cpu().double(), ref_weight.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_dropout_scales_kept_elements_and_routes_gradient_through_the_same_mask(device: str) -> None:
    mytorch.manual_seed(5)
    x = mytorch.from_torch(torch.randn(64, 33).to(device) + 3.0, requires_grad=True)  # no zeros in x
    y = MF.dropout(x, p=0.25)
    kept = y.data != 0
    assert 0.6 < kept.double().mean().item() < 0.9
    torch.testing.assert_close(y.data[kept], (x.data / 0.75)[kept])
    y.backward(mytorch.ones(64, 33, device=device))
    torch.testing.assert_close(x.grad.data, kept.to(torch.float32) / 0.75)
    assert MF.dropout(x, 0.25, training=False) is x


@pytest.mark.parametrize(("name", "fn", "shapes"), [
    ("tanh-mul", lambda a, b: (a.tanh() * b).sum(), [(4, 5), (4, 5)]),
    ("softmax-log", lambda a: (a.softmax(-1) + 0.5).log().sum(), [(3, 7)]),
    ("layer_norm", lambda x, w: (MF.layer_norm(x, 6, w) ** 2).mean(), [(5, 6), (6,)]),
    ("div-exp", lambda a, b: (a.exp() / (b * b + 1.0)).sum(), [(3, 4), (4,)]),
    ("gelu-matmul", lambda a, b: (a @ b).gelu().sum(), [(3, 4), (4, 2)]),
])
def test_gradients_by_finite_differences(name: str, fn: Callable, shapes: list) -> None:
    """Central differences on float32 (step 1e-2, so rounding stays below the tolerance)."""
    g = torch.Generator().manual_seed(7)
    inputs = [mytorch.from_torch(torch.randn(s, generator=g), requires_grad=True) for s in shapes]
    fn(*inputs).backward()
    step = 1e-2
    for x in inputs:
        numeric = torch.empty_like(x.data)
        flat, num = x.data.view(-1), numeric.view(-1)
        for i in range(flat.numel()):
            saved = flat[i].item()
            flat[i] = saved + step
            with mytorch.no_grad():
                up = fn(*inputs).item()
            flat[i] = saved - step
            with mytorch.no_grad():
                down = fn(*inputs).item()
            flat[i] = saved
            num[i] = (up - down) / (2 * step)
        torch.testing.assert_close(x.grad.data, numeric, rtol=2e-2, atol=2e-3)
