"""Every implementation of every op against the op's float64 reference.

One test parametrised over the registry: op × plugin × device × dtype × case, with ids like
``softmax-openmp-cpu-float32-1023x17``. Outputs are poisoned with NaN before each run, so an
element a kernel never writes fails. Inputs must come back unchanged (those an in-place op
names in ``Op.inplace`` are restored before every run instead). Each case runs with the
implementation's default config and with the first value of every config entry (the
smallest blocks, typically), which exercises tails and multi-block paths.
"""

from __future__ import annotations

import os
import re
import sys
import zlib

import pytest
import torch

from kernelzoo.backends import cuda as cuda_backend
from kernelzoo.backends import triton as triton_backend
from kernelzoo.registry import clone_input, copy_input_, dtype_name, input_tensors, poison_outputs, registry

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _conformance_params():
    for impl in registry.load():
        op = registry.ops.get(impl.op)
        if op is None:
            continue
        for device in DEVICES:
            for dtype in impl.dtypes.get(device, ()):
                for case in op.cases():
                    case_id = f"{op.name}-{impl.plugin}-{device}-{dtype_name(dtype)}-{case.id}"
                    yield pytest.param(impl, device, dtype, case, id=case_id)


def _configs(impl):
    first = {k: v[0] for k, v in impl.config_space.items()}
    return [impl.config(), impl.config(first)] if first else [impl.config()]


@pytest.mark.parametrize(("impl", "device", "dtype", "case"), list(_conformance_params()))
def test_conformance(impl, device, dtype, case):
    availability = registry.availability(impl)
    if not availability:
        pytest.skip(f"{impl.key} not available: {availability.reason}")
    if device not in impl.devices():
        pytest.skip(f"{impl.key} runs on {', '.join(impl.devices())} in this process")
    if impl.plugin == "triton" and device == "cpu" and not case.small:
        pytest.skip("too large for Triton's interpreter")
    op = registry.op(impl.op)
    generator = torch.Generator().manual_seed(zlib.crc32(case.id.encode()))
    args, kwargs = case.make(torch.device(device), dtype, generator)
    call = op.check(*args, **kwargs)
    why = impl.supports(call)
    if why is not None:
        pytest.skip(f"{impl.key} declares it cannot run this: {why}")
    before = {k: clone_input(v) for k, v in call.inputs.items()}
    ref = op.reference(call)
    for config in _configs(impl):
        for name in op.inplace:  # in-place ops start every run from the same inputs
            copy_input_(call.inputs[name], before[name])
        with poison_outputs():
            out = impl.run(call, config)
        mismatch = op.verify(call, out, ref)
        assert mismatch is None, f"{call.describe()} with {config}: {mismatch}"
    for name, value in call.inputs.items():
        if name not in op.inplace:
            for now, then in zip(input_tensors(value), input_tensors(before[name])):
                if now.is_floating_point() and now.element_size() == 1:  # 8-bit floats: no isnan, no nan_to_num
                    now, then = now.float(), then.float()
                assert torch.equal(now.isnan(), then.isnan()), f"input {name} was modified"
                assert torch.equal(now.nan_to_num(), then.nan_to_num()), f"input {name} was modified"


def _bad_params():
    for op in sorted(registry.load().ops.values(), key=lambda o: o.name):
        for bad in op.bad_cases():
            yield pytest.param(op, bad, id=f"{op.name}-{bad.id}")


@pytest.mark.parametrize(("op", "bad"), list(_bad_params()))
def test_bad_input_rejected(op, bad):
    import kernelzoo

    args, kwargs = bad.make()
    with pytest.raises(bad.error, match=re.escape(bad.match)):
        getattr(kernelzoo.ops, op.name)(*args, **kwargs)


def test_expected_plugins_available():
    """Guards the skips above: what must run on every machine does run."""
    for impl in registry.load():
        if impl.plugin in ("python", "torch") or (impl.plugin == "openmp" and sys.platform == "linux"):
            availability = registry.availability(impl)
            assert availability, f"{impl.key}: {availability.reason}"
        if impl.plugin == "triton" and (torch.cuda.is_available() or triton_backend.interpreting()):
            assert registry.availability(impl), registry.availability(impl).reason


@pytest.mark.skipif(not os.environ.get("CI"), reason="CI installs the dev extra's NVRTC wheel; elsewhere optional")
def test_ci_compiles_cuda_sources():
    """Guards the NVRTC skips of test_cuda_sources.py and test_cuda_backend.py: in CI they must run."""
    ok, why = cuda_backend.compile_available()
    assert ok, why
