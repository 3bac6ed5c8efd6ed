"""kernelzoo.nn.MultiheadAttention against torch.nn.MultiheadAttention with the same weights:
outputs, attention weights and gradients (inputs and parameters) for batch_first both ways,
kdim/vdim, masks, need_weights both ways, bias options, unbatched inputs; state_dict both ways;
and a TransformerEncoderLayer whose self_attn is swapped for ours."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

import kernelzoo
import kernelzoo.nn
from kernelzoo.errors import ArgumentError
from kernelzoo.nn import MultiheadAttention

E, H, B, L, S = 32, 4, 2, 7, 9


def _pair(**kwargs) -> tuple[torch.nn.MultiheadAttention, MultiheadAttention]:
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(E, H, **kwargs)
    if theirs.in_proj_bias is not None:  # torch zeroes the biases: make them matter
        with torch.no_grad():
            theirs.in_proj_bias.normal_()
            theirs.out_proj.bias.normal_()
    ours = MultiheadAttention(E, H, **kwargs)
    ours.load_state_dict(theirs.state_dict())
    return theirs, ours


def _inputs(batch_first: bool, kdim: int = E, vdim: int = E, self_attention: bool = False,
            batched: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)

    def rand(n: int, dim: int) -> torch.Tensor:
        shape = ((B, n, dim) if batch_first else (n, B, dim)) if batched else (n, dim)
        return torch.randn(shape, generator=g).requires_grad_()
    query = rand(L, E)
    if self_attention:
        return query, query, query
    return query, rand(S, kdim), rand(S, vdim)


def _run(module: torch.nn.Module, inputs: tuple, **kwargs) -> tuple[torch.Tensor, torch.Tensor | None, list]:
    """Output, weights, and the gradients of every input and parameter of one backward."""
    for t in inputs:
        t.grad = None
    module.zero_grad()
    out, weights = module(*inputs, **kwargs)
    g = torch.Generator().manual_seed(2)
    loss = (out * torch.randn(out.shape, generator=g)).sum()
    if weights is not None:
        loss = loss + (weights * torch.randn(weights.shape, generator=g)).sum()
    loss.backward()
    unique_inputs = list({id(t): t for t in inputs}.values())
    grads = [t.grad for t in unique_inputs] + [p.grad for _, p in sorted(module.named_parameters())]
    return out, weights, grads


def _assert_same(theirs: torch.nn.Module, ours: torch.nn.Module, inputs: tuple, **kwargs) -> None:
    out_t, w_t, grads_t = _run(theirs, inputs, **kwargs)
    out_o, w_o, grads_o = _run(ours, inputs, **kwargs)
    torch.testing.assert_close(out_o, out_t, atol=2e-5, rtol=1e-4)
    assert (w_o is None) == (w_t is None)
    if w_t is not None:
        torch.testing.assert_close(w_o, w_t, atol=2e-5, rtol=1e-4)
    assert len(grads_o) == len(grads_t)
    for got, want in zip(grads_o, grads_t):
        torch.testing.assert_close(got, want, atol=5e-5, rtol=1e-4)


def _masks(kind: str, batched: bool = True) -> dict:
    g = torch.Generator().manual_seed(3)
    padding = torch.zeros(B, S, dtype=torch.bool)
    padding[1, 5:] = True  # True = ignore, torch's convention for both masks
    if kind == "none":
        return {}
    if kind == "key-padding-bool":
        return {"key_padding_mask": padding if batched else padding[1]}
    if kind == "key-padding-float":
        return {"key_padding_mask": torch.zeros(B, S).masked_fill(padding, float("-inf")) if batched else
                torch.zeros(S).masked_fill(padding[1], float("-inf"))}
    if kind == "attn-2d-bool":
        return {"attn_mask": torch.rand(L, S, generator=g) < 0.3}
    if kind == "attn-3d-float":
        return {"attn_mask": torch.randn((B * H if batched else H), L, S, generator=g)}
    if kind == "both-bool":
        return {"attn_mask": torch.rand(L, S, generator=g) < 0.3, "key_padding_mask": padding}
    raise AssertionError(kind)


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("masks", ["none", "key-padding-bool", "key-padding-float", "attn-2d-bool", "attn-3d-float",
                                   "both-bool"])
def test_matches_torch(masks, batch_first, need_weights):
    theirs, ours = _pair(batch_first=batch_first)
    _assert_same(theirs, ours, _inputs(batch_first), need_weights=need_weights, **_masks(masks))


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("options", [{"kdim": 24, "vdim": 40}, {"bias": False}, {"add_bias_kv": True},
                                     {"add_zero_attn": True}, {"add_bias_kv": True, "add_zero_attn": True}])
def test_module_options_match_torch(options, need_weights):
    theirs, ours = _pair(batch_first=True, **options)
    inputs = _inputs(True, options.get("kdim", E), options.get("vdim", E))
    _assert_same(theirs, ours, inputs, need_weights=need_weights, **_masks("key-padding-bool"))


@pytest.mark.parametrize("batch_first", [False, True])
def test_self_attention_with_causal_hint(batch_first):
    theirs, ours = _pair(batch_first=batch_first)
    causal = torch.nn.Transformer.generate_square_subsequent_mask(L)
    inputs = _inputs(batch_first, self_attention=True)
    for need_weights in (False, True):
        _assert_same(theirs, ours, inputs, need_weights=need_weights, attn_mask=causal, is_causal=True)
    padding = torch.zeros(B, L).masked_fill(_masks("key-padding-bool")["key_padding_mask"][:, :L], float("-inf"))
    _assert_same(theirs, ours, inputs, need_weights=False, attn_mask=causal, is_causal=True, key_padding_mask=padding)


@pytest.mark.parametrize("masks", ["none", "key-padding-bool", "attn-3d-float"])
def test_unbatched_inputs(masks):
    theirs, ours = _pair()
    for need_weights, average in ((False, True), (True, True), (True, False)):
        _assert_same(theirs, ours, _inputs(False, batched=False), need_weights=need_weights,
                     average_attn_weights=average, **_masks(masks, batched=False))


def test_weights_per_head():
    theirs, ours = _pair(batch_first=True)
    _assert_same(theirs, ours, _inputs(True), need_weights=True, average_attn_weights=False,
                 **_masks("both-bool"))


def test_dropout_in_training_matches_torch_for_the_same_seed():
    theirs, ours = _pair(batch_first=True, dropout=0.25)
    inputs = _inputs(True)
    torch.manual_seed(7)
    out_t, w_t, _ = _run(theirs.train(), inputs, need_weights=True)
    torch.manual_seed(7)
    out_o, w_o, _ = _run(ours.train(), inputs, need_weights=True)
    torch.testing.assert_close(out_o, out_t, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(w_o, w_t, atol=2e-5, rtol=1e-4)
    out, weights = ours.train()(*inputs, need_weights=False)  # dropout: the explicit path, no weights returned
    assert weights is None and out.shape == (B, L, E)


def test_attention_runs_on_the_kernelzoo_op(monkeypatch):
    calls = []

    def attention(*args, **kwargs):
        calls.append(kwargs)
        return kernelzoo.ops.attention(*args, **kwargs)
    monkeypatch.setattr(kernelzoo.nn, "ops", SimpleNamespace(attention=attention))
    theirs, ours = _pair(batch_first=True)
    _assert_same(theirs, ours, _inputs(True), need_weights=False, **_masks("key-padding-bool"))
    assert len(calls) == 1 and calls[0]["attn_mask"].shape == (B, 1, 1, S)
    _run(ours, _inputs(True), need_weights=True)
    assert len(calls) == 1  # the weights are computed explicitly


@pytest.mark.parametrize("plugin", ["python", "torch"])
def test_other_plugins(plugin):
    theirs, ours = _pair(batch_first=True)
    with kernelzoo.use(plugin):
        _assert_same(theirs, ours, _inputs(True), need_weights=False, **_masks("both-bool"))


def test_state_dict_both_ways():
    for options in ({}, {"kdim": 24, "vdim": 40, "add_bias_kv": True}, {"bias": False}):
        theirs, ours = _pair(**options)
        assert ours.state_dict().keys() == theirs.state_dict().keys()
        fresh = torch.nn.MultiheadAttention(E, H, **options)
        fresh.load_state_dict(ours.state_dict())
        for (name, a), (_, b) in zip(sorted(fresh.state_dict().items()), sorted(theirs.state_dict().items())):
            assert torch.equal(a, b), name


def test_errors_name_the_argument():
    _, ours = _pair()
    query = torch.randn(L, B, E)
    with pytest.raises(ArgumentError, match="is_causal is a hint"):
        ours(query, query, query, is_causal=True)
    with pytest.raises(ArgumentError, match="key_padding_mask has shape"):
        ours(query, query, query, key_padding_mask=torch.zeros(B, L + 1, dtype=torch.bool))
    with pytest.raises(ArgumentError, match="embed_dim 30 is not divisible by num_heads 4"):
        MultiheadAttention(30, 4)


@pytest.mark.parametrize("batch_first", [False, True])
def test_transformer_encoder_layer_with_ours(batch_first):
    torch.manual_seed(0)
    theirs = torch.nn.TransformerEncoderLayer(E, H, dim_feedforward=48, dropout=0.0, batch_first=batch_first)
    with torch.no_grad():
        theirs.self_attn.in_proj_bias.normal_()
    ours = copy.deepcopy(theirs)
    ours.self_attn = MultiheadAttention(E, H, batch_first=batch_first)
    ours.self_attn.load_state_dict(theirs.self_attn.state_dict())
    src = torch.randn((B, L, E) if batch_first else (L, B, E), generator=torch.Generator().manual_seed(5))
    padding = torch.zeros(B, L, dtype=torch.bool)
    padding[0, 4:] = True
    causal = torch.nn.Transformer.generate_square_subsequent_mask(L)
    for kwargs in ({}, {"src_key_padding_mask": padding}, {"src_mask": causal, "is_causal": True}):
        outs, grads = [], []
        for layer in (theirs, ours):
            x = src.clone().requires_grad_()
            layer.zero_grad()
            out = layer(x, **kwargs)
            out.pow(2).sum().backward()
            outs.append(out)
            grads.append([x.grad] + [p.grad for _, p in sorted(layer.named_parameters())])
        torch.testing.assert_close(outs[1], outs[0], atol=2e-5, rtol=1e-4)
        for got, want in zip(grads[1], grads[0]):
            torch.testing.assert_close(got, want, atol=5e-5, rtol=1e-4)
