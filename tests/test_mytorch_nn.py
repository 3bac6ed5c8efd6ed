"""mytorch.nn modules and mytorch.optim against torch.nn / torch.optim with the same weights;
state dicts, save/load."""

from __future__ import annotations

import pytest
import torch

import mytorch
from mytorch import nn


def _from(module: nn.Module, torch_module: torch.nn.Module) -> None:
    module.load_state_dict(torch_module.state_dict())


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.norm = nn.LayerNorm(64)
        self.head = nn.Linear(64, 10)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        x = self.features(x).flatten(1)
        return self.head(self.drop(self.norm(x).gelu()))


def test_parameters_children_modes_and_state_dict_names() -> None:
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["features.0.weight", "features.0.bias", "norm.weight", "norm.bias", "head.weight", "head.bias"]
    assert len(list(net.children())) == 4 and all(p.requires_grad for p in net.parameters())
    net.eval()
    assert not net.drop.training and not net.features[1].training
    assert list(net.state_dict()) == names


def test_state_dict_round_trip_through_a_file(tmp_path) -> None:
    net, other = Net(), Net()
    path = tmp_path / "net.mt"
    mytorch.save(net.state_dict(), path)
    other.load_state_dict(mytorch.load(path))
    for (name, a), (_, b) in zip(net.named_parameters(), other.named_parameters()):
        assert torch.equal(a.data, b.data), name
    (tmp_path / "bad.mt").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{\"x\": 1}")
    with pytest.raises(ValueError, match="not a mytorch state file"):
        mytorch.load(tmp_path / "bad.mt")


def test_load_state_dict_names_missing_and_unexpected_keys() -> None:
    with pytest.raises(KeyError, match="missing keys"):
        nn.Linear(3, 2).load_state_dict({"weight": torch.zeros(2, 3)})


def test_layers_match_torch_with_the_same_weights() -> None:
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                              torch.nn.Flatten(), torch.nn.LayerNorm(64), torch.nn.GELU(), torch.nn.Linear(64, 10))
    mine = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.LayerNorm(64),
                         nn.GELU(), nn.Linear(64, 10))
    _from(mine, ref)
    x = torch.randn(5, 1, 8, 8)
    target = torch.randint(0, 10, (5,))
    loss = nn.CrossEntropyLoss()(mine(mytorch.from_torch(x)), mytorch.from_torch(target))
    ref_loss = torch.nn.CrossEntropyLoss()(ref(x), target)
    loss.backward()
    ref_loss.backward()
    torch.testing.assert_close(loss.data, ref_loss.detach(), rtol=1e-5, atol=1e-5)
    for (name, p), q in zip(mine.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.data, q.grad, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


def test_embedding_padding_row_gets_no_gradient() -> None:
    emb = nn.Embedding(10, 4, padding_idx=0)
    assert emb.weight.data[0].abs().sum().item() == 0
    emb(mytorch.tensor([[0, 3, 3]])).sum().backward()
    assert emb.weight.grad.data[0].abs().sum().item() == 0
    assert emb.weight.grad.data[3].tolist() == [2.0] * 4


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_attention_loads_torchs_weights_and_matches(batch_first: bool, need_weights: bool) -> None:
    torch.manual_seed(1)
    ref = torch.nn.MultiheadAttention(16, 4, batch_first=batch_first)
    mine = nn.MultiheadAttention(16, 4, batch_first=batch_first)
    _from(mine, ref)
    assert sorted(mine.state_dict()) == sorted(ref.state_dict())
    x = torch.randn(2, 7, 16) if batch_first else torch.randn(7, 2, 16)
    padding = torch.zeros(2, 7, dtype=torch.bool)
    padding[1, 5:] = True
    xm = mytorch.from_torch(x, requires_grad=True)
    out, weights = mine(xm, xm, xm, key_padding_mask=padding, need_weights=need_weights)
    xr = x.clone().requires_grad_()
    ref_out, ref_weights = ref(xr, xr, xr, key_padding_mask=padding, need_weights=need_weights)
    torch.testing.assert_close(out.data, ref_out.detach(), rtol=1e-4, atol=1e-5)
    if need_weights:
        torch.testing.assert_close(weights.data, ref_weights.detach(), rtol=1e-4, atol=1e-5)
    else:
        assert weights is None
    grad = torch.randn(out.shape)
    out.backward(mytorch.from_torch(grad))
    ref_out.backward(grad)
    torch.testing.assert_close(xm.grad.data, xr.grad, rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(mine.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.data, q.grad, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("kdim", [None, 12])
def test_multihead_attention_with_other_keys_and_values_matches_torch(kdim: int | None) -> None:
    """Cross-attention: separate projections of the query and of the keys and values (slices of the packed
    weight, or weights of their own for another key size), each head's views made one by one."""
    torch.manual_seed(3)
    ref = torch.nn.MultiheadAttention(16, 4, batch_first=True, kdim=kdim, vdim=kdim)
    mine = nn.MultiheadAttention(16, 4, batch_first=True, kdim=kdim, vdim=kdim)
    _from(mine, ref)
    q, kv = torch.randn(2, 5, 16), torch.randn(2, 7, kdim or 16)
    qm, kvm = mytorch.from_torch(q, requires_grad=True), mytorch.from_torch(kv, requires_grad=True)
    qr, kvr = q.clone().requires_grad_(), kv.clone().requires_grad_()
    out = mine(qm, kvm, kvm, need_weights=False)[0]
    ref_out = ref(qr, kvr, kvr, need_weights=False)[0]
    torch.testing.assert_close(out.data, ref_out.detach(), rtol=1e-4, atol=1e-5)
    grad = torch.randn(out.shape)
    out.backward(mytorch.from_torch(grad))
    ref_out.backward(grad)
    torch.testing.assert_close(qm.grad.data, qr.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(kvm.grad.data, kvr.grad, rtol=1e-4, atol=1e-5)
    for (name, p), r in zip(mine.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad.data, r.grad, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


def test_self_attention_records_one_node_per_op_not_per_view() -> None:
    """The host cost of a step grows with its graph's nodes: self-attention records the in-projection, one
    node that splits it into q, k and v, the attention op, one that merges the heads, the out-projection."""
    attention = nn.MultiheadAttention(16, 4, batch_first=True)
    x = mytorch.randn(2, 5, 16, requires_grad=True)
    out = attention(x, x, x, need_weights=False)[0]
    names = [node.name for node in mytorch.autograd.graph_nodes(out)]
    assert names == ["Linear", "SplitHeads", "Attention", "MergeHeads", "Linear"]


@pytest.mark.parametrize(("make_mine", "make_ref"), [
    (lambda p: mytorch.optim.SGD(p, lr=0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
    (lambda p: mytorch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
     lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01)),
    (lambda p: mytorch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
     lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True)),
    (lambda p: mytorch.optim.SGD(p, lr=0.1, momentum=0.5, dampening=0.3),
     lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.5, dampening=0.3)),
    (lambda p: mytorch.optim.Adam(p, lr=0.01, weight_decay=0.1),
     lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.1)),
    (lambda p: mytorch.optim.Adam(p, lr=0.01, amsgrad=True), lambda p: torch.optim.Adam(p, lr=0.01, amsgrad=True)),
    (lambda p: mytorch.optim.AdamW(p, lr=0.01), lambda p: torch.optim.AdamW(p, lr=0.01)),
    (lambda p: mytorch.optim.AdamW(p, lr=0.01, foreach=False), lambda p: torch.optim.AdamW(p, lr=0.01)),
    (lambda p: mytorch.optim.Adam(p, lr=0.01, amsgrad=True, weight_decay=0.1, foreach=False),
     lambda p: torch.optim.Adam(p, lr=0.01, amsgrad=True, weight_decay=0.1)),
], ids=["sgd", "sgd-momentum-wd", "sgd-nesterov", "sgd-dampening", "adam-l2", "adam-amsgrad", "adamw",
        "adamw-per-parameter", "adam-amsgrad-per-parameter"])
def test_optimizers_follow_torch_optim_over_several_steps(make_mine, make_ref) -> None:
    torch.manual_seed(2)
    ref_model = torch.nn.Linear(6, 3)
    model = nn.Linear(6, 3)
    _from(model, ref_model)
    opt, ref_opt = make_mine(model.parameters()), make_ref(ref_model.parameters())
    for step in range(4):
        x, y = torch.randn(8, 6), torch.randn(8, 3)
        opt.zero_grad()
        ref_opt.zero_grad()
        nn.MSELoss()(model(mytorch.from_torch(x)), mytorch.from_torch(y)).backward()
        torch.nn.MSELoss()(ref_model(x), y).backward()
        opt.step()
        ref_opt.step()
        for p, q in zip(model.parameters(), ref_model.parameters()):
            torch.testing.assert_close(p.data, q.detach(), rtol=1e-5, atol=1e-6, msg=lambda m, s=step: f"step {s}: {m}")


def test_multihead_attention_merges_a_causal_mask_with_key_padding_as_torch() -> None:
    torch.manual_seed(3)
    ref = torch.nn.MultiheadAttention(16, 4, batch_first=True)
    mine = nn.MultiheadAttention(16, 4, batch_first=True)
    _from(mine, ref)
    x = torch.randn(2, 7, 16)
    padding = torch.zeros(2, 7, dtype=torch.bool)
    padding[1, 5:] = True
    causal = torch.triu(torch.ones(7, 7, dtype=torch.bool), 1)
    xm = mytorch.from_torch(x)
    out, _ = mine(xm, xm, xm, key_padding_mask=padding, attn_mask=causal, need_weights=False)
    ref_out, _ = ref(x, x, x, key_padding_mask=padding, attn_mask=causal, need_weights=False)
    torch.testing.assert_close(out.data, ref_out.detach(), rtol=1e-4, atol=1e-5)



@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("plugin", ["openmp", "triton", "cuda"])
def test_self_attention_backward_hands_the_packed_gradient_on_without_copies(plugin: str, device: str) -> None:
    """q, k and v are views of one in-projection; attention_backward writes dq, dk, dv as slices of
    one buffer, which unbind's backward passes on as the projection's gradient: no copy_, no add."""
    import kernelzoo
    from kernelzoo import dispatch
    from kernelzoo.registry import registry

    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    for op in ("attention_backward", "linear_backward"):
        impl = registry.impl(op, plugin)
        availability = registry.availability(impl)
        if not availability:
            pytest.skip(f"{op}/{plugin}: {availability.reason}")
        if torch.float32 not in impl.dtypes.get(device, ()) or device not in impl.devices():
            pytest.skip(f"{op}/{plugin} takes no float32 on {device} (its conformance covers the packed layout)")
    torch.manual_seed(2)
    ref = torch.nn.MultiheadAttention(32, 4, batch_first=True, device=device)
    mine = nn.MultiheadAttention(32, 4, batch_first=True, device=device)
    _from(mine, ref)
    x = torch.randn(2, 9, 32, device=device)
    xm, xr = mytorch.from_torch(x, requires_grad=True), x.clone().requires_grad_()
    out = mine(xm, xm, xm, need_weights=False)[0]
    grad = torch.randn(out.shape, device=device)
    ran: list[str] = []
    with kernelzoo.use(plugin), dispatch.observe(lambda op, call, choice, seconds: ran.append(op.name)):
        out.backward(mytorch.from_torch(grad))
    ref(xr, xr, xr, need_weights=False)[0].backward(grad)
    assert "attention_backward" in ran
    assert "copy_" not in ran and "add" not in ran, ran
    torch.testing.assert_close(xm.grad.data, xr.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(mine.in_proj_weight.grad.data, ref.in_proj_weight.grad, rtol=1e-4, atol=1e-5)


def test_adam_updates_parameters_of_one_step_count_in_one_call() -> None:
    """A parameter without a gradient skips a step (its count stays behind), as in torch.optim: the
    others still go in one adam_update_foreach_ call, and every parameter follows torch."""
    from kernelzoo import dispatch

    torch.manual_seed(4)
    shapes = [(5, 3), (7,), (2, 2, 2), (1,)]
    start = [torch.randn(s) for s in shapes]
    mine = [nn.Parameter(mytorch.from_torch(t.clone())) for t in start]
    ref = [torch.nn.Parameter(t.clone()) for t in start]
    opt, ref_opt = mytorch.optim.AdamW(mine, lr=0.05), torch.optim.AdamW(ref, lr=0.05)
    for step in range(3):
        grads = [torch.randn(s) for s in shapes]
        skip = 1 if step == 1 else None  # parameter 1 gets no gradient at the second step
        for i, (p, q, g) in enumerate(zip(mine, ref, grads)):
            p.grad = None if i == skip else mytorch.from_torch(g)
            q.grad = None if i == skip else g.clone()
        calls: list[str] = []
        with dispatch.observe(lambda op, call, choice, seconds, ran=calls: ran.append(op.name)):
            opt.step()
        ref_opt.step()
        assert calls == ["adam_update_foreach_"] * (1 if step != 2 else 2), calls  # step counts 3 and 2 at the end
        for i, (p, q) in enumerate(zip(mine, ref)):
            torch.testing.assert_close(p.data, q.detach(), rtol=1e-5, atol=1e-6,
                                       msg=lambda m, s=step, k=i: f"step {s}, parameter {k}: {m}")
