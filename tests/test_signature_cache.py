"""Dispatch remembers what a call signature fixes (the checks' outcome, the checked call's parameters, the
choice, whether autograd records it) and skips that work at later calls of the signature. These tests hold the
remembered path to the checked one: a bad call is refused even after a good call of the same signature, the
outputs and choices agree, and everything the signature leaves out is still looked at."""

from __future__ import annotations

import contextlib
import re
import warnings

import pytest
import torch

import kernelzoo
from kernelzoo import dispatch, ops
from kernelzoo.errors import ArgumentError, KernelzooError
from kernelzoo.registry import BadCase, registry


def _bad_cases() -> list[tuple[str, BadCase]]:
    return [(op.name, bad) for op in sorted(registry.load().ops.values(), key=lambda o: o.name)
            for bad in op.bad_cases()]


def _twin(value: object) -> object:
    """A fresh tensor of ``value``'s signature (shape, strides, dtype, device, requires_grad), in storage of its
    own, holding harmless values (standard-normal floats, zero integers, False), so that it shares no memory
    and no index values with ``value``; anything else as it is."""
    if type(value) not in (torch.Tensor, torch.nn.Parameter):
        return value
    t: torch.Tensor = value
    if t.device.type == "meta":
        return t
    span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if n > 0) if t.numel() else 0
    base = torch.zeros(span, dtype=t.dtype, device=t.device)
    if t.is_floating_point():  # drawn in float32: 8-bit floats have no random kernels
        base.copy_(torch.randn(span, generator=torch.Generator(t.device).manual_seed(0), device=t.device))
    twin = base.as_strided(t.shape, t.stride())
    return torch.nn.Parameter(twin, requires_grad=t.requires_grad) if type(t) is torch.nn.Parameter \
        else twin.requires_grad_(t.requires_grad)


@pytest.mark.parametrize(("op", "bad"), _bad_cases(), ids=lambda v: getattr(v, "id", v))
def test_a_bad_call_is_refused_after_a_good_call_of_its_signature(op, bad) -> None:
    """Checks that read index values or how tensors share memory see what the signature does not: an op whose
    checks read them must declare it (Op.checks_every_call), or a bad call would pass on its good twin's
    remembered checks."""
    args, kwargs = bad.make()
    twin_args, twin_kwargs = tuple(map(_twin, args)), {k: _twin(v) for k, v in kwargs.items()}
    dispatch.clear_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.suppress(KernelzooError, RuntimeError, TypeError, ValueError):
            getattr(ops, op)(*twin_args, **twin_kwargs)  # the good twin, if it is good
        for run in (lambda: getattr(ops, op)(*args, **kwargs), lambda: dispatch.run_op(op, *args, **kwargs)):
            with pytest.raises(bad.error, match=re.escape(bad.match)):
                run()


def test_value_reading_checks_run_at_every_call() -> None:
    logits = torch.randn(4, 5)
    good, bad = torch.tensor([0, 1, 2, 3]), torch.tensor([0, 1, 2, 5])
    ops.cross_entropy(logits, good)
    with pytest.raises(ArgumentError, match="target"):
        ops.cross_entropy(logits, bad)
    weight = torch.randn(3, 4)
    ops.embedding(torch.tensor([0, 2]), weight)
    with pytest.raises(ArgumentError):
        ops.embedding(torch.tensor([0, 3]), weight)


def test_the_remembered_path_gives_the_checked_paths_outputs_and_choice() -> None:
    g = torch.Generator().manual_seed(1)
    x, w, b = torch.randn(6, 33, generator=g), torch.randn(33, generator=g), torch.randn(33, generator=g)
    spec = registry.op("layer_norm")
    for _ in range(3):  # the first call checks and binds, the later ones take the remembered path
        out = ops.layer_norm(x, 33, w, b, eps=1e-3)
        checked = spec.result(spec.check(x, 33, w, b, eps=1e-3),
                              dispatch.run_call(spec, spec.check(x, 33, w, b, eps=1e-3)))
        torch.testing.assert_close(out, checked, rtol=0, atol=0)
    key = dispatch._key("layer_norm", True, (x, 33, w, b), {"eps": 1e-3})
    bound = dispatch._bound[key]
    assert bound.names == ("x", "weight", "bias") and bound.positions == (0, 2, 3)
    assert bound.params == {"normalized_shape": (33,), "eps": 1e-3}
    assert bound.choice == dispatch.choose(spec, spec.check(x, 33, w, b, eps=1e-3))
    # new tensors of the same signature take the remembered path with their own values
    y = torch.randn(6, 33, generator=g)
    torch.testing.assert_close(ops.layer_norm(y, 33, w, b, eps=1e-3),
                               torch.nn.functional.layer_norm(y, (33,), w, b, eps=1e-3), rtol=1e-5, atol=1e-5)


def test_the_signature_holds_what_a_choice_and_the_checks_depend_on() -> None:
    x = torch.randn(4, 8)
    keys = {
        dispatch._key("softmax", True, (x, -1), {}),
        dispatch._key("softmax", True, (x, 1), {}),  # another value
        dispatch._key("softmax", True, (x, True), {}),  # a bool is not an int (the checks refuse it)
        dispatch._key("softmax", True, (x,), {"dim": -1}),  # by keyword
        dispatch._key("softmax", True, (x.t(),), {}),  # other strides
        dispatch._key("softmax", True, (x.double(),), {}),
        dispatch._key("softmax", True, (x.requires_grad_(),), {}),
        dispatch._key("softmax", False, (x,), {}),  # run_op: never through autograd
    }
    assert len(keys) == 8
    with torch.no_grad():  # no autograd without gradients: the same key as run_op's
        assert dispatch._key("softmax", True, (x,), {}) == dispatch._key("softmax", False, (x,), {})
    with kernelzoo.use("python"):
        forced = dispatch._key("softmax", True, (x.detach(),), {})
    assert forced != dispatch._key("softmax", True, (x.detach(),), {})
    # torch's TF32 switch: a float32 matmul keys TF32 calls apart on a GPU, so its choice holds under one setting
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        spec = registry.op("matmul")
        call = spec.check(x, x.t())
        torch.backends.cuda.matmul.allow_tf32 = False
        ieee = dispatch._key("matmul", True, (x, x.t()), {}), dispatch._signature(spec, call, None)
        torch.backends.cuda.matmul.allow_tf32 = True
        tf32 = dispatch._key("matmul", True, (x, x.t()), {}), dispatch._signature(spec, call, None)
        assert tf32[0] != ieee[0] and tf32[1] != ieee[1]  # the fast path's and choose()'s memo
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    # what it cannot describe takes the checked path every time
    assert dispatch._key("add", True, (x, object()), {}) is None
    assert dispatch._key("adam_update_foreach_", True, ([x], [x]), {}) is None


def test_grad_mode_and_requires_grad_decide_autograd() -> None:
    x = torch.randn(3, 5, requires_grad=True)
    assert ops.softmax(x).grad_fn is not None
    with torch.no_grad():
        assert ops.softmax(x).grad_fn is None
    assert ops.softmax(x.detach()).grad_fn is None
    assert ops.softmax(x).grad_fn is not None


def test_a_forced_plugin_is_honoured_on_the_remembered_path() -> None:
    x = torch.randn(4, 8)
    seen: list[str] = []
    ops.softmax(x)
    with dispatch.observe(lambda op, call, choice, s: seen.append(choice.plugin)):  # observed: the checked path
        ops.softmax(x)
        with kernelzoo.use("python"):
            ops.softmax(x)
            ops.softmax(x)
    assert seen[1:] == ["python", "python"]
    with kernelzoo.use("python"):
        key = dispatch._key("softmax", True, (x,), {})
        ops.softmax(x)
    assert dispatch._bound[key].choice.plugin == "python"


def test_clearing_the_caches_and_changing_the_registry_forget_the_signatures() -> None:
    x = torch.randn(4, 8)
    ops.relu(x)
    assert dispatch._bound
    dispatch.clear_cache()
    assert not dispatch._bound
    ops.relu(x)
    registry.add_op(registry.op("relu"))  # any change of the registry
    assert not dispatch._bound


def test_an_op_whose_checks_read_values_keeps_no_remembered_inputs() -> None:
    target = torch.tensor([0, 1])
    ops.cross_entropy(torch.randn(2, 3), target)
    key = dispatch._key("cross_entropy", True, (torch.randn(2, 3), target), {})
    assert dispatch._bound[key].names is None


def test_a_host_bound_call_runs_the_cheapest_host_path_unless_its_own_bucket_is_tuned(monkeypatch) -> None:
    """Below HOST_BOUND_BYTES a call runs HOST_BOUND_ORDER's plugins first, and a nearest bucket's winner (timed
    where the device bound it) does not apply; a winner of the call's own bucket still does. The rule is the GPU's;
    here it is set for the CPU, with the python plugin standing for the cheap host path."""
    monkeypatch.setitem(dispatch.HOST_BOUND_BYTES, "cpu", 4096)
    monkeypatch.setitem(dispatch.HOST_BOUND_ORDER, "cpu", ("python",))
    small, large = torch.randn(4, 8), torch.randn(64, 64)  # 256 and 32768 bytes moved
    openmp = registry.impl("softmax", "openmp")
    winners = {"nearest": dispatch.Choice("openmp", openmp.config(), "tuned (nearest bucket)", openmp, nearest=True),
               "exact": dispatch.Choice("openmp", openmp.config(), "tuned (exact bucket)", openmp)}
    kind = {"now": None}
    monkeypatch.setattr(dispatch, "_winner_source", lambda op, call, plugin: winners.get(kind["now"]))
    for now, expected_small in ((None, "python"), ("nearest", "python"), ("exact", "openmp")):
        kind["now"] = now
        dispatch.forget_choices()
        chosen = kernelzoo.explain("softmax", small)
        assert chosen.plugin == expected_small, now
        assert (chosen.reason == "default order, host-bound size") == (expected_small == "python")
        assert kernelzoo.explain("softmax", large).plugin == "openmp", now  # the default order, or tuned
    dispatch.forget_choices()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_small_gpu_call_runs_torch_unless_tuned_there() -> None:
    x = torch.randn(64, 1024, device="cuda")
    chosen = kernelzoo.explain("relu", x)
    assert chosen.plugin == "torch" or chosen.reason.startswith("tuned (exact"), chosen
    assert not dispatch.host_bound(registry.op("relu"), registry.op("relu").check(torch.randn(1024, 1024,
                                                                                             device="cuda")))


def test_an_op_names_the_plugins_its_host_bound_calls_run_first(monkeypatch) -> None:
    monkeypatch.setitem(dispatch.HOST_BOUND_BYTES, "cpu", 1 << 20)
    monkeypatch.setitem(dispatch.HOST_BOUND_ORDER, "cpu", ("python",))
    spec = registry.op("cross_entropy")
    monkeypatch.setattr(type(spec), "host_bound_order", {"cpu": ("torch",)})
    dispatch.forget_choices()
    logits, target = torch.randn(4, 5), torch.tensor([0, 1, 2, 3])
    assert kernelzoo.explain("cross_entropy", logits, target).plugin == "torch"
    assert kernelzoo.explain("softmax", logits).plugin == "python"  # no order of its own: the global one
    dispatch.forget_choices()
