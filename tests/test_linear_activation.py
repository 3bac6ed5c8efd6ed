"""linear's fused activation (relu, gelu, gelu_tanh) and its backward: the pre-activation every plugin returns when
a backward is recorded, the gradients through torch autograd, the custom op and mytorch against torch's own, the
tuning key's flag, the typed errors, and the CUDA epilogue's specializations compiling. The conformance suite runs
every plugin on the activation cases of both ops (tests/test_conformance.py)."""

from __future__ import annotations

import zlib

import pytest
import torch

import kernelzoo
import mytorch
from kernelzoo import dispatch, ops
from kernelzoo.backends import cuda
from kernelzoo.errors import ArgumentError
from kernelzoo.registry import poison_outputs, randn, registry
from mytorch import nn as mnn
from mytorch.nn import functional as MF

ACTIVATIONS = ("relu", "gelu", "gelu_tanh")
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def torch_activation(z: torch.Tensor, activation: str | None) -> torch.Tensor:
    if activation == "relu":
        return torch.relu(z)
    if activation is None:
        return z
    return torch.nn.functional.gelu(z, approximate="tanh" if activation == "gelu_tanh" else "none")


def _impls(op: str, device: str):
    for impl in registry.load():
        if impl.op == op and registry.availability(impl) and device in impl.devices():
            yield impl


def _pre_params():
    for device in DEVICES:
        for impl in registry.load():
            if impl.op == "linear":
                for dtype in impl.dtypes.get(device, ()):
                    for activation in ("gelu", "gelu_tanh"):
                        yield pytest.param(impl, device, dtype, activation,
                                           id=f"{impl.plugin}-{device}-{dtype}-{activation}".replace("torch.", ""))


@pytest.mark.parametrize(("impl", "device", "dtype", "activation"), list(_pre_params()))
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_every_plugin_returns_the_pre_activation_when_asked(impl, device, dtype, activation, bias):
    """A forward that records a backward (Derivative.recording) gets (y, z) from each plugin in one GEMM: z is
    x·wᵀ + b, y = act(z), both checked against the float64 reference, at odd sizes and empty ones."""
    availability = registry.availability(impl)
    if not availability:
        pytest.skip(f"{impl.key} not available: {availability.reason}")
    if device not in impl.devices():
        pytest.skip(f"{impl.key} runs on {', '.join(impl.devices())} in this process")
    op = registry.op("linear")
    for m, k, n in ((17, 33, 65), (0, 5, 3), (3, 0, 5)):
        g = torch.Generator().manual_seed(zlib.crc32(f"{m}x{k}x{n}".encode()))
        x, w = randn((m, k), device, dtype, g), randn((n, k), device, dtype, g)
        b = randn((n,), device, dtype, g) if bias else None
        call = op.derivative.recording(op.check(x, w, b, activation))
        assert call.params == {"activation": activation, "pre": True}
        with poison_outputs():
            outputs = impl.run(call, impl.config())
        assert isinstance(outputs, tuple) and len(outputs) == 2, f"{impl.key}: expected (y, z)"
        mismatch = op.verify(call, outputs, op.reference(call))
        assert mismatch is None, f"{impl.key} {call.describe()}: {mismatch}"


def test_relu_asks_for_no_pre_activation():
    """relu's derivative reads its output's sign: its forward runs as asked, and the backward gets y as pre."""
    op = registry.op("linear")
    call = op.check(torch.ones(2, 3), torch.ones(4, 3), None, "relu")
    assert op.derivative.recording(call) is call
    assert op.derivative.recording(op.check(torch.ones(2, 3), torch.ones(4, 3))).params == {}


def _runs(block) -> list[tuple[str, dict]]:
    """(op, params) of each op run inside ``block()``."""
    seen: list[tuple[str, dict]] = []
    with dispatch.observe(lambda op, call, choice, seconds: seen.append((op.name, dict(call.params)))):
        block()
    return seen


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_torch_autograd_matches_torch(activation, bias):
    x = torch.randn(2, 5, 7, requires_grad=True)
    w = torch.randn(6, 7, requires_grad=True)
    b = torch.randn(6, requires_grad=True) if bias else None
    g = torch.randn(2, 5, 6)
    inputs = (x, w, b) if bias else (x, w)
    found = {}

    def step() -> None:
        found["y"] = ops.linear(x, w, b, activation=activation)
        found["grads"] = torch.autograd.grad(found["y"], inputs, g)

    runs = _runs(step)
    expected = torch_activation(torch.nn.functional.linear(x, w, b), activation)
    torch.testing.assert_close(found["y"], expected, rtol=1e-5, atol=1e-5)
    for got, want in zip(found["grads"], torch.autograd.grad(expected, inputs, g)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # one GEMM forward (asked for z where the derivative needs it), one linear_backward with the activation
    assert [name for name, _ in runs] == ["linear", "linear_backward"], runs
    assert runs[0][1].get("pre", False) == (activation != "relu")
    assert runs[1][1]["activation"] == activation


@pytest.mark.parametrize("through", ["kernelzoo.ops", "mytorch"])
def test_a_training_forward_runs_what_its_own_key_tuned(monkeypatch, through):
    """The forward that returns z is chosen by its own key (flags 'gelu,pre'), not by the inference call's."""
    def source(op, call, plugin):
        flags = op.flags(call)
        if op.name == "linear" and flags in ("gelu", "gelu,pre") and plugin is None:
            name = "python" if flags == "gelu,pre" else "openmp"
            impl = registry.impl("linear", name)
            return dispatch.Choice(name, impl.config(), f"tuned for {flags}", impl)
        return None

    seen: list[tuple[str, str]] = []
    for name in ("python", "openmp"):  # what ran, without observing (an observed call takes the checked path)
        impl = registry.impl("linear", name)
        monkeypatch.setattr(impl, "run", lambda call, config, run=impl.run, name=name: (
            seen.append((call.op.flags(call), name)), run(call, config))[1])
    monkeypatch.setattr(dispatch, "_winner_source", source)
    dispatch.clear_cache()
    try:
        x, w = torch.randn(6, 5), torch.randn(4, 5)
        for _ in range(2):  # the second time through the signature cache
            if through == "mytorch":
                MF.linear(mytorch.tensor(x, requires_grad=True), mytorch.tensor(w), None, "gelu")
                with mytorch.no_grad():
                    MF.linear(mytorch.tensor(x), mytorch.tensor(w), None, "gelu")
            else:
                ops.linear(x.clone().requires_grad_(), w, activation="gelu")
                ops.linear(x, w, activation="gelu")
        assert seen == [("gelu,pre", "python"), ("gelu", "openmp")] * 2
    finally:
        dispatch.clear_cache()


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_custom_op_autograd_recomputes_the_pre_activation(activation):
    """torch.ops.kernelzoo.linear's forward cannot know a backward follows: gelu's backward computes z again."""
    kernelzoo.library.register()
    x, w, b = torch.randn(5, 7, requires_grad=True), torch.randn(6, 7, requires_grad=True), torch.randn(6)
    b.requires_grad_()
    g = torch.randn(5, 6)
    y = torch.ops.kernelzoo.linear(x, w, b, activation)
    expected = torch_activation(torch.nn.functional.linear(x, w, b), activation)
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)
    found = {}
    runs = _runs(lambda: found.update(grads=torch.autograd.grad(y, (x, w, b), g)))
    for got, want in zip(found["grads"], torch.autograd.grad(expected, (x, w, b), g)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    names = [name for name, _ in runs]
    assert names == (["linear", "linear_backward"] if activation != "relu" else ["linear_backward"]), runs


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_custom_ops_pass_opcheck_with_an_activation(activation):
    """Schema, fake tensors, autograd registration and AOT dispatch of torch.ops.kernelzoo.linear and
    linear_backward with an activation."""
    kernelzoo.library.register()
    tests = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    x, w, b = (torch.randn(*shape, requires_grad=True) for shape in ((5, 7), (6, 7), (6,)))
    torch.library.opcheck(torch.ops.kernelzoo.linear.default, (x, w, b, activation), test_utils=tests)
    g, pre = torch.randn(5, 6), torch.randn(5, 6)
    torch.library.opcheck(torch.ops.kernelzoo.linear_backward.default, (g, x.detach(), w.detach(), True, activation,
                                                                        pre), test_utils=tests)


def test_linear_with_gelu_compiles_whole_and_matches_torch():
    """Under torch.compile the op is the custom op; its gelu backward computes z again (one GEMM) and the
    gradients are torch's."""
    x, w, b = (torch.randn(*shape, requires_grad=True) for shape in ((5, 7), (6, 7), (6,)))
    compiled = torch.compile(lambda x, w, b: ops.linear(x, w, b, activation="gelu").tanh().sum(), fullgraph=True,
                             backend="aot_eager")
    got = torch.autograd.grad(compiled(x, w, b), (x, w, b))
    want = torch.autograd.grad(torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b)).tanh().sum(), (x, w, b))
    for g, t in zip(got, want):
        torch.testing.assert_close(g, t, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("activation", [*ACTIVATIONS, None])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_mytorch_gradients_match_torch_autograd(activation, bias):
    """mytorch's Linear(activation=...) forward and backward through the dispatcher, against torch autograd:
    one linear (with z where gelu needs it) and one linear_backward."""
    torch.manual_seed(0)
    layer = mnn.Linear(7, 6, bias=bias, activation=activation)
    data = torch.randn(3, 4, 7)
    x = mytorch.tensor(data, requires_grad=True)
    found = {}

    def step() -> None:
        y = layer(x)
        found["y"] = y.data.clone()
        (y * mytorch.tensor(torch.linspace(-1, 1, 6))).sum().backward()

    runs = _runs(step)
    tx, tw = data.clone().requires_grad_(), layer.weight.data.clone().requires_grad_()
    tb = layer.bias.data.clone().requires_grad_() if bias else None
    ty = torch_activation(torch.nn.functional.linear(tx, tw, tb), activation)
    torch.testing.assert_close(found["y"], ty.detach(), rtol=1e-5, atol=1e-5)
    (ty * torch.linspace(-1, 1, 6)).sum().backward()
    torch.testing.assert_close(x.grad.data, tx.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(layer.weight.grad.data, tw.grad, rtol=1e-5, atol=1e-5)
    if bias:
        torch.testing.assert_close(layer.bias.grad.data, tb.grad, rtol=1e-5, atol=1e-5)
    linear_runs = [params for name, params in runs if name.startswith("linear")]
    assert [name for name, _ in runs if name.startswith("linear")] == ["linear", "linear_backward"], runs
    assert linear_runs[0].get("pre", False) == (activation in ("gelu", "gelu_tanh"))
    assert linear_runs[1].get("activation") == activation


def test_mytorch_forward_without_grad_asks_for_no_pre_activation():
    layer = mnn.Linear(7, 6, activation="gelu")
    x = mytorch.tensor(torch.randn(3, 7))
    with mytorch.no_grad():
        runs = _runs(lambda: layer(x))
    assert runs == [("linear", {"activation": "gelu"})]
    assert "activation='gelu'" in repr(layer)


def test_the_activation_is_a_flag_of_the_key_and_plain_calls_keep_theirs():
    linear, backward = registry.op("linear"), registry.op("linear_backward")
    x, w, b, g = torch.ones(3, 4), torch.ones(5, 4), torch.ones(5), torch.ones(3, 5)
    plain = linear.check(x, w, b)
    assert plain.params == {} and linear.flags(plain) == ""
    assert linear.flags(linear.check(x, w, b, "gelu")) == "gelu"
    assert linear.flags(linear.derivative.recording(linear.check(x, w, b, "gelu_tanh"))) == "gelu_tanh,pre"
    assert backward.flags(backward.check(g, x, w, bias=True)) == "bias"
    assert backward.flags(backward.check(g, x, w, bias=True, activation="relu", pre=g)) == "bias,relu"
    assert backward.flags(backward.check(g, x, w, activation="gelu", pre=g)) == "gelu"


def test_examples_rebuild_the_activation_keys():
    """What tuning and benchmarks build from a shape and a variant, or from a missed key's parameters."""
    linear, backward = registry.op("linear"), registry.op("linear_backward")
    assert {"activation": "gelu"} in linear.variants and {"activation": "gelu"} in backward.variants
    call = linear.example((9, 5, 7), torch.float32, "cpu", activation="gelu_tanh", pre=True)
    assert linear.flags(call) == "gelu_tanh,pre"
    call = backward.example((9, 5, 7), torch.float32, "cpu", bias=True, activation="gelu")
    assert backward.flags(call) == "bias,gelu" and call.inputs["pre"].shape == (9, 7)


def test_bad_activation_names_the_valid_ones():
    x, w = torch.ones(3, 4), torch.ones(5, 4)
    message = "linear: activation must be None, 'relu', 'gelu', 'gelu_tanh', got 'silu'"
    with pytest.raises(ArgumentError, match=message):
        ops.linear(x, w, activation="silu")
    with pytest.raises(ArgumentError, match=message):
        mnn.Linear(4, 5, activation="silu")(mytorch.tensor(x))
    with pytest.raises(ArgumentError, match="linear_backward: activation must be None, 'relu'"):
        ops.linear_backward(torch.ones(3, 5), x, w, activation="GELU", pre=torch.ones(3, 5))
    assert issubclass(ArgumentError, ValueError)


def test_mytorch_functional_linear_takes_the_activation():
    x, w = torch.randn(3, 4), torch.randn(5, 4)
    y = MF.linear(mytorch.tensor(x), mytorch.tensor(w), None, "relu")
    torch.testing.assert_close(y.data, torch.relu(x @ w.t()))


ok, why = cuda.compile_available()


@pytest.mark.skipif(not ok, reason=f"NVRTC not found: {why}")
@pytest.mark.parametrize("op", ["linear", "linear_backward"])
@pytest.mark.parametrize("activation", [1, 2, 3], ids=ACTIVATIONS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_cuda_epilogue_compiles_for_each_activation(op, activation, dtype):
    """gemm.cuh's activate() and the dz / act passes, as KZ_ACTIVATION selects them, through NVRTC for sm_90."""
    impl = registry.impl(op, "cuda")
    cubin = impl.compile(dtype, {**impl.config(), "KZ_ACTIVATION": activation}, "sm_90")
    assert cubin[:4] == b"\x7fELF"
