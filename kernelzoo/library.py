"""Every registered op as a torch custom op, ``torch.ops.kernelzoo.<op>``, made from the registry.

Each op gets, through ``torch.library``'s low-level ``Library`` API (it costs a third of ``custom_op``'s host
time a call, which wraps every call in Python):

- a schema read off its ``check()`` signature (``Tensor``, ``Tensor?``, ``Tensor[]``, ``int``, ``float``,
  ``bool``, ``str``, ``ScalarType`` (a ``torch.dtype``) and lists of ints; :attr:`Op.schema_types` names the
  others). In-place ops (``Op.inplace``) declare the inputs they write (``Tensor(a!)``) and return nothing; an op
  whose implementations return several tensors (:attr:`Op.outputs`) returns ``Tensor[]``, all of them (extras for
  the backward included, as ``dispatch.run_op`` gives);
- an implementation that checks the arguments and runs what dispatch chooses, exactly as
  ``kernelzoo.ops.<op>`` does, so a compiled program runs the same tuned winner with the same key. Its outputs
  are contiguous and never alias an input, as a custom op's must;
- a fake implementation: the op's checks (its typed errors, raised at trace time) and :meth:`Op.fake` on fake
  tensors. Checks that read values (``value_range``) skip fake tensors; the real call makes them;
- the autograd formula of the op's :class:`~kernelzoo.registry.Derivative` (``kernelzoo.autograd.register``);
  an op without one is not differentiable (its outputs require no grad, as ``kernelzoo.ops.<op>``'s).

:func:`register` defines the ops not defined yet (third-party ones too); the first use of a
``kernelzoo.ops`` function calls it.
"""

from __future__ import annotations

import inspect
import threading
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from kernelzoo import autograd
from kernelzoo.errors import ArgumentError
from kernelzoo.registry import Call, Op, registry

NAMESPACE = "kernelzoo"

# check() annotations (spaces removed) and the schema types they become
_TYPES: Mapping[str, str] = {
    "torch.Tensor": "Tensor", "Tensor": "Tensor",
    "torch.Tensor|None": "Tensor?", "Tensor|None": "Tensor?", "Optional[torch.Tensor]": "Tensor?",
    "Sequence[torch.Tensor]": "Tensor[]", "list[torch.Tensor]": "Tensor[]", "tuple[torch.Tensor,...]": "Tensor[]",
    "Sequence[torch.Tensor]|None": "Tensor[]?", "list[torch.Tensor]|None": "Tensor[]?",
    "int": "int", "int|None": "int?", "float": "float", "float|None": "float?", "bool": "bool",
    "str": "str", "str|None": "str?",
    "Sequence[int]": "int[]", "tuple[int,...]": "int[]", "list[int]": "int[]",
    "torch.dtype": "ScalarType", "torch.dtype|None": "ScalarType?",
    # an int or a list of them: int[1] takes both
    "int|Sequence[int]": "int[1]", "int|Sequence[int]|None": "int[1]?",
}

_lock = threading.RLock()
_library: torch.library.Library | None = None
# op name -> its argument names in schema order
arguments: dict[str, tuple[str, ...]] = {}


def schema_type(op: Op, parameter: inspect.Parameter) -> str:
    """The schema type of one ``check()`` parameter."""
    if parameter.name in op.schema_types:
        return op.schema_types[parameter.name]
    annotation = parameter.annotation
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    found = _TYPES.get(text.replace(" ", "").replace("'", ""))
    if found is None:
        raise ArgumentError(f"{op.name}: argument {parameter.name!r} is annotated {text!r}, which has no "
                            f"torch.library schema type; expected one of {', '.join(sorted(_TYPES))}, or an "
                            f"entry in {type(op).__name__}.schema_types")
    return found


def _default(kind: str, value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, torch.dtype):  # torch.bfloat16 -> bfloat16, the name the schema parser reads
        return str(value).removeprefix("torch.")
    if isinstance(value, str):
        return f'"{value}"'
    if kind.startswith("float"):
        return repr(float(value))
    if isinstance(value, (tuple, list)):
        return f"[{', '.join(str(v) for v in value)}]"
    return str(value)


def schema(op: Op) -> tuple[str, tuple[str, ...]]:
    """(the op's schema without its name, its argument names in order)."""
    # keyword-only parameters become positional ones too: torch.library.register_autograd takes no keyword-only
    # tensors; the implementations pass every argument to check() by name
    parts, names, aliases = [], [], iter("abcdefghijklmnopqrstuvwxyz")
    for parameter in op.signature.parameters.values():
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        kind = schema_type(op, parameter)
        if parameter.name in op.inplace:  # Tensor(a!), Tensor(a!)?, Tensor(a!)[]
            kind = kind.replace("Tensor", f"Tensor({next(aliases)}!)", 1)
        text = f"{kind} {parameter.name}"
        if parameter.default is not inspect.Parameter.empty:
            text += f"={_default(kind, parameter.default)}"
        parts.append(text)
        names.append(parameter.name)
    return f"({', '.join(parts)}) -> {_returns(op)}", tuple(names)


def _returns(op: Op) -> str:
    """'()' for an in-place op, 'Tensor[]' for one whose implementations return several tensors
    (:attr:`Op.outputs`), else 'Tensor'."""
    if op.inplace:
        return "()"
    return "Tensor[]" if op.outputs > 1 else "Tensor"


def _conform(outputs: Any, arguments: Sequence[Any]) -> Any:
    """An implementation's outputs as a custom op returns them: contiguous, and copied where one shares memory
    with a tensor argument (a custom op's outputs may not alias its inputs)."""
    storages = {t.untyped_storage().data_ptr() for t in _tensors(arguments)}

    def own(t: torch.Tensor) -> torch.Tensor:
        if t.numel() and t.untyped_storage().data_ptr() in storages:
            return t.clone(memory_format=torch.contiguous_format)
        return t if t.is_contiguous() else t.contiguous()
    if isinstance(outputs, (tuple, list)):
        return [own(t) for t in outputs]
    return own(outputs)


def _fake_outputs(outputs: Any) -> Any:
    def empty(t: torch.Tensor) -> torch.Tensor:
        return t.new_empty(t.shape)
    if isinstance(outputs, (tuple, list)):
        return [empty(t) for t in outputs]
    return empty(outputs)


def _tensors(values: Any) -> list[torch.Tensor]:
    found = []
    for v in values:
        if isinstance(v, torch.Tensor):
            found.append(v)
        elif isinstance(v, (tuple, list)):
            found += [t for t in v if isinstance(t, torch.Tensor)]
    return found


def _define(op: Op) -> None:
    global _library
    if _library is None:
        _library = torch.library.Library(NAMESPACE, "DEF")
    name = op.name
    text, names = schema(op)
    inplace = bool(op.inplace)
    _library.define(name + text)

    # check()'s parameters that may be passed by position; the schema lists them all, in check()'s order
    positional = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in op.signature.parameters.values())

    def real(*args: Any, **kwargs: Any) -> Any:
        from kernelzoo import dispatch

        if len(args) > positional:
            kwargs = {**dict(zip(names[positional:], args[positional:])), **kwargs}
            args = args[:positional]
        outputs = dispatch.run_op(name, *args, **kwargs)  # dispatch's own path, its signature cache included
        return None if inplace else _conform(outputs, (*args, *kwargs.values()))

    def fake(*args: Any, **kwargs: Any) -> Any:
        spec = registry.op(name)
        call = spec.check(**dict(zip(names, args)), **kwargs)
        return None if inplace else _fake_outputs(spec.fake(call))

    _library.impl(name, real, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=_library)
    if op.derivative is not None:
        autograd.register(op, f"{NAMESPACE}::{name}", names)
    else:  # not differentiable: outputs that require no grad, as kernelzoo.ops.<op> gives
        _library.impl(name, torch.library.fallthrough_kernel, "Autograd")
    arguments[name] = names


def register() -> None:
    """Define ``torch.ops.kernelzoo.<op>`` for every registered op not defined yet."""
    ops = registry.load().ops
    if all(name in arguments for name in ops):
        return
    with _lock:
        for name, op in sorted(ops.items()):
            if name in arguments:
                continue
            try:
                _define(op)
            except ArgumentError as exc:  # one op whose signature has no schema must not cost the others theirs
                arguments[name] = ()
                warnings.warn(f"kernelzoo: no torch.ops.kernelzoo.{name}: {exc}", RuntimeWarning, stacklevel=2)


def result(op: Op, args: Sequence[Any], kwargs: Mapping[str, Any], outputs: Any) -> Any:
    """What ``kernelzoo.ops.<op>(*args, **kwargs)`` returns of the custom op's ``outputs``: ``Op.result`` of
    them (an in-place op's are the inputs it writes)."""
    names = arguments[op.name]
    bound = dict(zip(names, args))
    bound.update(kwargs)
    inputs = {k: v for k, v in bound.items() if isinstance(v, (torch.Tensor, tuple, list))}
    call = Call(op, inputs, {k: v for k, v in bound.items() if k not in inputs})
    if op.inplace:
        written = tuple(bound.get(k) for k in op.inplace)
        outputs = written[0] if len(written) == 1 else written
    elif isinstance(outputs, list):
        outputs = tuple(outputs)
    return op.result(call, outputs)


def call(name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """``kernelzoo.ops.<name>(*args, **kwargs)`` through ``torch.ops.kernelzoo.<name>`` (torch.compile)."""
    op = registry.op(name)
    outputs = getattr(torch.ops.kernelzoo, name)(*args, **kwargs)
    return result(op, args, kwargs, outputs)
