"""torch.ops.kernelzoo.<op>: every registered op is a torch custom op whose schema, fake implementation and
autograd registration pass torch.library.opcheck, that computes what kernelzoo.ops computes, and that
rejects bad arguments with the same typed errors."""

from __future__ import annotations

import functools
import re

import pytest
import torch

from kernelzoo import dispatch, library, ops
from kernelzoo.registry import registry

library.register()
OPS = sorted(registry.load().ops)
CPU = torch.device("cpu")
# opcheck runs an op a dozen times (fake, AOT static and dynamic, autograd): the first small cases keep it fast
CASES_PER_OP = 2


@functools.cache
def _cases(name: str, device: str = "cpu") -> tuple:
    """The op's first small conformance cases whose outputs hold no NaN on ``device`` (opcheck compares outputs
    with NaN as unequal to itself; a case draws other numbers on a GPU, so a log case positive on the CPU may be
    negative there)."""
    found = []
    for case in registry.op(name).cases():
        if len(found) == CASES_PER_OP:
            break
        if not case.small:
            continue
        args, kwargs = case.make(torch.device(device), torch.float32, torch.Generator().manual_seed(0))
        outputs = torch.utils._pytree.tree_leaves(dispatch.run_op(name, *args, **kwargs))
        if not any(t.is_floating_point() and bool(t.isnan().any()) for t in outputs if isinstance(t, torch.Tensor)):
            found.append(case)
    return tuple(found)


def _params() -> list:
    found = []
    for name in OPS:
        cases = _cases(name)
        found += [pytest.param(name, i, id=f"{name}-{case.id}") for i, case in enumerate(cases)]
        if not cases:  # fails in the test, naming the op
            found.append(pytest.param(name, 0, id=f"{name}-no-case"))
    return found


def _args(name: str, case, grad: bool, device: torch.device = CPU) -> tuple[tuple, dict]:
    """The case's arguments in float32; with ``grad``, the inputs the op differentiates require grad."""
    args, kwargs = case.make(device, torch.float32, torch.Generator().manual_seed(0))
    derivative = registry.op(name).derivative
    if grad and derivative is not None:
        names = library.arguments[name]
        bound = {**dict(zip(names, args)), **kwargs}
        for key in derivative.inputs:
            t = bound.get(key)
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                bound[key] = t.detach().clone().requires_grad_()
        args, kwargs = (), bound
    return args, kwargs


def _opcheck(name: str, args: tuple, kwargs: dict) -> None:
    tests = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    if any(isinstance(t, torch.Tensor) and t.is_floating_point() and t.element_size() == 1
           for t in torch.utils._pytree.tree_leaves((args, kwargs))):
        # the schema test compares each input before and after with allclose, which has no 8-bit float kernel
        tests = tests[1:]
    torch.library.opcheck(getattr(torch.ops.kernelzoo, name).default, args, kwargs, test_utils=tests)


def test_every_registered_op_is_a_custom_op() -> None:
    for name in OPS:
        packet = getattr(torch.ops.kernelzoo, name)
        schema = packet.default._schema
        assert [a.name for a in schema.arguments] == list(library.arguments[name])
        assert schema.is_mutable == bool(registry.op(name).inplace), name


@pytest.mark.parametrize(("name", "index"), _params())
def test_opcheck(name: str, index: int) -> None:
    cases = _cases(name)
    assert cases, f"{name} has no small conformance case without NaN outputs"
    args, kwargs = _args(name, cases[index], grad=True)
    _opcheck(name, args, kwargs)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("name", OPS)
def test_opcheck_on_the_gpu(name: str) -> None:
    cases = _cases(name, "cuda")
    assert cases, f"{name} has no small conformance case without NaN outputs"
    args, kwargs = _args(name, cases[0], grad=True, device=torch.device("cuda"))
    _opcheck(name, args, kwargs)


@pytest.mark.parametrize("name", OPS)
def test_the_custom_op_computes_what_kernelzoo_ops_computes(name: str) -> None:
    case = _cases(name)[0]
    args, kwargs = _args(name, case, grad=False)
    copies = torch.utils._pytree.tree_map_only(torch.Tensor, torch.clone, (args, kwargs))
    expected = dispatch.run_op(name, *args, **kwargs)
    got = getattr(torch.ops.kernelzoo, name)(*copies[0], **copies[1])
    op = registry.op(name)
    if op.inplace:  # the written inputs hold the results
        assert got is None
        bound = {**dict(zip(library.arguments[name], copies[0])), **copies[1]}
        got = tuple(bound[k] for k in op.inplace if bound.get(k) is not None)
        bound = {**dict(zip(library.arguments[name], args)), **kwargs}
        expected = tuple(bound[k] for k in op.inplace if bound.get(k) is not None)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    got = got if isinstance(got, (tuple, list)) else (got,)
    assert len(got) == len(expected) <= max(op.outputs, len(op.inplace))
    for g, e in zip(got, expected):
        g, e = torch.utils._pytree.tree_leaves(g), torch.utils._pytree.tree_leaves(e)
        for gt, et in zip(g, e):
            assert gt.shape == et.shape and gt.dtype == et.dtype
            torch.testing.assert_close(gt, et, equal_nan=True)


def _bad_cases() -> list:
    found = []
    for name in OPS:
        for bad in registry.op(name).bad_cases():
            found.append(pytest.param(name, bad, id=f"{name}-{bad.id}"))
    return found


def _fits_schema(name: str, args: tuple, kwargs: dict) -> bool:
    """Whether the arguments are of the types the schema takes (else torch rejects them before the op's checks)."""
    schema = getattr(torch.ops.kernelzoo, name).default._schema
    try:
        torch._C._check_schema_allow_fake_script_object(schema, *args, **kwargs)
    except (RuntimeError, TypeError):
        return False
    return True


def _as_the_schema_takes(name: str, args: tuple, kwargs: dict) -> dict:
    """The arguments by name as torch's argument parsing hands them to the op: 1 as True for a bool, 1 as 1.0 for
    a float, an int or a tuple as a list for int[N], None as the default where None is not a value the type has."""
    schema = getattr(torch.ops.kernelzoo, name).default._schema
    bound = {**dict(zip(library.arguments[name], args)), **kwargs}
    for argument in schema.arguments:
        value = bound.get(argument.name)
        optional = str(argument.type).startswith("Optional[")
        if value is None and argument.name in bound and not optional and argument.has_default_value():
            bound[argument.name] = argument.default_value
        if value is None or isinstance(value, torch.Tensor):
            continue
        kind = str(argument.type).removeprefix("Optional[").removesuffix("]")
        if kind == "bool":
            bound[argument.name] = bool(value)
        elif kind == "float":
            bound[argument.name] = float(value)
        elif kind.startswith("List[int"):
            bound[argument.name] = [value] * (argument.N or 1) if isinstance(value, int) else list(value)
    return bound


@pytest.mark.parametrize(("name", "bad"), _bad_cases())
def test_bad_arguments_raise_the_typed_error(name: str, bad) -> None:
    args, kwargs = bad.make()
    with pytest.raises(bad.error, match=re.escape(bad.match)):
        getattr(ops, name)(*args, **kwargs)
    if not _fits_schema(name, args, kwargs):
        # a list where the schema says Tensor, a float where it says int: torch's own argument parsing rejects
        # those, naming the argument
        with pytest.raises((RuntimeError, TypeError)):
            getattr(torch.ops.kernelzoo, name)(*args, **kwargs)
        return
    # otherwise the op's checks see the arguments as the schema converted them, and answer as kernelzoo.ops does
    # for those: the same typed error and message, or none (causal=1 is causal=True there, as for aten ops)
    converted = _as_the_schema_takes(name, args, kwargs)
    try:
        getattr(ops, name)(**converted)
    except Exception as exc:  # any error: the custom op must raise the same
        with pytest.raises(type(exc), match=re.escape(str(exc))):
            getattr(torch.ops.kernelzoo, name)(*args, **kwargs)
    else:
        getattr(torch.ops.kernelzoo, name)(*args, **kwargs)


def test_the_custom_ops_backward_matches_eager_autograd() -> None:
    x = torch.randn(5, 9, dtype=torch.float64).float()
    w, b = torch.randn(9), torch.randn(9)
    grads = []
    for run in (lambda x, w, b: ops.layer_norm(x, 9, w, b),
                lambda x, w, b: torch.ops.kernelzoo.layer_norm(x, [9], w, b)[0]):
        leaves = [t.clone().requires_grad_() for t in (x, w, b)]
        (run(*leaves) * torch.arange(45.0).view(5, 9)).sum().backward()
        grads.append([t.grad for t in leaves])
    for eager, custom in zip(*grads):
        torch.testing.assert_close(custom, eager)


def test_the_custom_ops_backward_runs_the_forced_plugin() -> None:
    seen = []
    x = torch.randn(4, 6, requires_grad=True)
    with dispatch.use("python"), dispatch.observe(lambda op, call, choice, s: seen.append((op.name, choice.plugin))):
        torch.ops.kernelzoo.softmax(x, 0).sum().backward()
    assert ("softmax", "python") in seen and ("softmax_backward", "python") in seen


def test_a_third_party_op_becomes_a_custom_op_with_its_derivative(monkeypatch) -> None:
    """An op found later (a third-party plugin) gets torch.ops.kernelzoo.<op>, its schema from its check() and
    its autograd from the derivative it declares, and compiles as the built-in ones do."""
    from kernelzoo.registry import Call, Derivative, Implementation, Op, check_tensor

    class KzScaled(Op):
        name = "kz_scaled"
        derivative = Derivative(
            inputs=("x",),
            save=lambda call, outputs: {"factor": call.params["factor"]},
            backward=lambda saved, grad: {"x": ops.mul(grad, torch.full((), saved["factor"], dtype=grad.dtype))},
        )

        def check(self, x: torch.Tensor, factor: float = 2.0) -> Call:
            check_tensor(self.name, "x", x)
            return Call(self, {"x": x}, {"factor": float(factor)})

        def reference(self, call: Call) -> torch.Tensor:
            return call.inputs["x"].double() * call.params["factor"]

    class KzScaledPython(Implementation):
        op = "kz_scaled"
        plugin = "python"
        dtypes = {"cpu": (torch.float32,)}

        def run(self, call: Call, config: dict) -> torch.Tensor:
            return call.inputs["x"] * call.params["factor"]

    monkeypatch.setitem(registry.ops, "kz_scaled", KzScaled())
    monkeypatch.setitem(registry.impls, "kz_scaled", {"python": KzScaledPython()})
    library.register()
    assert str(torch.ops.kernelzoo.kz_scaled.default._schema) == \
        "kernelzoo::kz_scaled(Tensor x, float factor=2.) -> Tensor"

    x = torch.randn(3, 5, requires_grad=True)
    y = torch.ops.kernelzoo.kz_scaled(x, 3.0)
    torch.testing.assert_close(y, x.detach() * 3)
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((3, 5), 3.0))
    torch.library.opcheck(torch.ops.kernelzoo.kz_scaled.default, (x.detach().clone().requires_grad_(), 0.5))

    compiled = torch.compile(lambda x: ops.kz_scaled(x, 0.5) + 1, fullgraph=True, backend="eager")
    try:
        torch.testing.assert_close(compiled(x.detach()), x.detach() * 0.5 + 1)
    finally:
        vars(ops).pop("kz_scaled", None)  # the op leaves the registry with this test
