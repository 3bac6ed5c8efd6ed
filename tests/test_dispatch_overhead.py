"""The shortcuts that keep a call's host time down behave as the full paths do: attention's quick argument
test lets through only what its checks pass, the forced plugin follows the environment, and the choice
cache keys on everything a choice depends on."""

from __future__ import annotations

import math
import os
import re

import pytest
import torch
from kernelzoo_plugins._flash.spec import _check_qkv, _qkv_agree, case_specs, make_qkv

import kernelzoo
from kernelzoo import dispatch
from kernelzoo.errors import ArgumentError, DeviceError, DTypeError
from kernelzoo.registry import Call, registry


def _argument_sets() -> list[tuple[tuple, dict]]:
    """q, k, v and keywords of every conformance case, every bad case of both ops, and a few more odd ones."""
    g = torch.Generator().manual_seed(0)
    found = [make_qkv(spec, torch.device("cpu"), torch.float32, g) for _, spec, _ in case_specs()]
    for op in ("attention", "attention_backward"):
        found += [bad.make() for bad in registry.op(op).bad_cases()]
    q = torch.ones(1, 2, 5, 8)
    found += [
        ((torch.nn.Parameter(q), q, q), {}),  # a subclass takes the full checks, and passes them
        ((q, torch.ones(1, 0, 5, 8), torch.ones(1, 0, 5, 8)), {}),  # no key heads
        ((q, q.double(), q.double()), {}),
        ((q, q, q.half()), {}),
        ((q, q, q), {"causal": 0}),
        ((q, q, q), {"causal": None}),
        ((q.half(), q.half(), q.half()), {"causal": True}),
    ]
    return found


def test_attentions_quick_test_passes_only_what_its_checks_pass() -> None:
    quick = 0
    for args, kwargs in _argument_sets():
        q, k, v = args[:3]
        causal = kwargs.get("causal", False)
        if _qkv_agree(q, k, v, causal):
            quick += 1
            _check_qkv("attention", q, k, v, causal)  # must not raise
    assert quick >= len(case_specs())  # every valid case takes the quick test


def _backward_args() -> tuple[torch.Tensor, ...]:
    q, k, v = (torch.randn(1, 4, 5, 8) for _ in range(3))
    return q, k, v, torch.randn(1, 4, 5, 8), torch.randn(1, 4, 5), torch.randn(1, 4, 5, 8)


def test_attention_backwards_check_keeps_the_inputs_order_and_params() -> None:
    op = registry.op("attention_backward")
    q, k, v, o, lse, do = _backward_args()
    mask = torch.ones(5, 5, dtype=torch.bool)
    call = op.check(q, k, v, o, lse, do, causal=True, scale=1, attn_mask=mask)
    assert list(call.inputs) == ["q", "k", "v", "o", "lse", "do", "attn_mask"]
    assert call.inputs["attn_mask"].shape == (1, 1, 5, 5)
    assert call.params == {"causal": True, "scale": 1.0} and type(call.params["scale"]) is float
    plain = op.check(q, k, v, o, lse, do)
    assert list(plain.inputs) == ["q", "k", "v", "o", "lse", "do"] and plain.params["scale"] == 1 / math.sqrt(8)
    as_parameters = op.check(*(torch.nn.Parameter(t) for t in (q, k, v, o, lse, do)))  # the full checks
    assert list(as_parameters.inputs) == list(plain.inputs) and as_parameters.params == plain.params


@pytest.mark.parametrize(("which", "make", "error", "match"), [
    ("lse", lambda t: t.to("meta"), DeviceError, "q is on cpu but lse is on meta"),
    ("lse", lambda t: t[..., :4], ArgumentError, "lse of shape 1x4x4 must be (batch, heads, n_q) = 1x4x5"),
    ("lse", lambda t: t.tolist(), ArgumentError, "lse must be a torch.Tensor, got list"),
    ("do", lambda t: t.to("meta"), DeviceError, "q is on cpu but do is on meta"),
    ("do", lambda t: t.double(), DTypeError, "do must be float32, float16, bfloat16, got torch.float64"),
    ("o", lambda t: t.to("meta"), DeviceError, "q is on cpu but o is on meta"),
    ("o", lambda t: t.half(), DTypeError, "q is torch.float32 but o is torch.float16"),
    ("o", lambda t: t[:, :2], ArgumentError, "o of shape 1x2x5x8 must have q's shape 1x4x5x8"),
])
def test_attention_backward_names_the_bad_output(which, make, error, match) -> None:
    args = dict(zip(("q", "k", "v", "o", "lse", "do"), _backward_args()))
    args[which] = make(args[which])
    with pytest.raises(error, match="^" + re.escape(f"attention_backward: {match}")):
        kernelzoo.ops.attention_backward(*args.values())


def test_the_forced_plugin_follows_the_environment(monkeypatch) -> None:
    monkeypatch.delenv("KERNELZOO_PLUGIN", raising=False)
    assert dispatch.forced_plugin() is None
    monkeypatch.setenv("KERNELZOO_PLUGIN", "python")
    assert dispatch.forced_plugin() == "python"
    with kernelzoo.use("torch"):
        assert dispatch.forced_plugin() == "torch"
    monkeypatch.setenv("KERNELZOO_PLUGIN", "")
    assert dispatch.forced_plugin() is None
    os.environ["KERNELZOO_PLUGIN"] = "openmp"  # set behind monkeypatch's back (it restores it all the same)
    assert dispatch.forced_plugin() == "openmp"
    del os.environ["KERNELZOO_PLUGIN"]
    assert dispatch.forced_plugin() is None
    monkeypatch.setattr(os, "environ", {"KERNELZOO_PLUGIN": "torch"})  # os.environ replaced by a plain mapping
    assert dispatch.forced_plugin() == "torch"


def test_the_choice_cache_keys_on_layout_and_forced_plugin() -> None:
    op = registry.op("relu")
    dispatch.clear_cache()
    first = dispatch.choose(op, op.check(torch.randn(8, 8)))
    assert dispatch.choose(op, op.check(torch.randn(8, 8))) is first  # new tensors, same signature
    assert len(dispatch._chosen) == 1
    dispatch.choose(op, op.check(torch.randn(8, 8).t()))  # other strides: another key
    dispatch.choose(op, op.check(torch.randn(8, 8).half()))
    with kernelzoo.use("python"):
        assert dispatch.choose(op, op.check(torch.randn(8, 8))).reason == "forced"
    assert len(dispatch._chosen) == 4
    dispatch.clear_cache()
    assert dispatch.choose(op, op.check(torch.randn(8, 8))) is not first


def test_a_call_with_an_unhashable_argument_is_chosen_afresh() -> None:
    op = registry.op("relu")
    dispatch.clear_cache()
    call = Call(op, op.check(torch.randn(4)).inputs, {"sizes": [1, 2]})
    assert dispatch.choose(op, call).plugin == dispatch.choose(op, op.check(torch.randn(4))).plugin
    assert len(dispatch._chosen) == 1  # only the hashable call's
