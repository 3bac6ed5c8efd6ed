"""Importing kernelzoo makes torch's first call of each MKL VML function on one element, on the importing thread,
so that no later call of it on several threads is the first (kernelzoo/backends/vml.py says why)."""

from __future__ import annotations

import json
import threading

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from tuning_helpers import python

from kernelzoo.backends.vml import VML_OPS, settle_vml_dispatch

pytestmark = pytest.mark.skipif(not torch.backends.mkl.is_available(), reason="this torch has no MKL, hence no VML")


class _Calls(TorchDispatchMode):
    """The unary float ops called under it: (op, dtype, elements, thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, torch.dtype, int, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in VML_OPS:
            self.seen.append((name, args[0].dtype, args[0].numel(), threading.get_ident()))
        return func(*args, **(kwargs or {}))


def test_every_vml_op_is_called_on_one_element_in_both_precisions_on_this_thread():
    with _Calls() as calls:
        assert settle_vml_dispatch()
    expected = {(name, dtype, 1, threading.get_ident()) for name in VML_OPS for dtype in (torch.float32, torch.float64)}
    assert set(calls.seen) == expected and len(calls.seen) == len(expected)


def test_importing_kernelzoo_settles_vml_before_any_op_runs():
    code = """
import json, torch
from torch.utils._python_dispatch import TorchDispatchMode
seen = []
class Calls(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if args and isinstance(args[0], torch.Tensor):
            seen.append([func.overloadpacket.__name__, str(args[0].dtype), args[0].numel()])
        return func(*args, **(kwargs or {}))
with Calls():
    import kernelzoo
print(json.dumps(seen))
"""
    done = python(code)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = {tuple(call) for call in json.loads(done.stdout.splitlines()[-1])}
    for name in ("exp", "log", "sqrt", "tanh", "erf"):
        for dtype in ("torch.float32", "torch.float64"):
            assert (name, dtype, 1) in seen, (name, dtype, sorted(seen))
