"""The Triton attention kernels' TMA descriptor path on every small conformance case, forward and
backward. On a GPU with TMA (sm_90+) it runs float16, the way the plugins choose it themselves; in
Triton's interpreter (CI) the path is forced onto float32 CPU tensors, so the descriptor coordinates,
the zero fill past N and the head dim, and the clipped stores are checked there too."""

from __future__ import annotations

import zlib

import pytest
import torch
from kernelzoo_plugins._flash import triton as flash_triton
from kernelzoo_plugins.attention import triton as forward_triton
from kernelzoo_plugins.attention_backward import triton as backward_triton

from kernelzoo.registry import registry

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
DTYPE = torch.float16 if DEVICE.type == "cuda" else torch.float32
# the smallest blocks, so that short sequences still span several blocks and end in a partial one
SMALL_BLOCKS = {"attention": {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1},
                "attention_backward": {"BLOCK_OUTER": 64, "BLOCK_INNER": 32, "num_warps": 4, "num_stages": 1}}
# the backward's two ways to dQ: its own pass, or atomic adds from the dK/dV pass (on a GPU with TMA
# through the descriptor's bulk reduction, in the interpreter through pointers)
VARIANTS = {"attention": ({},), "attention_backward": ({"DQ": "pass"}, {"DQ": "atomic"})}
OPS = ("attention", "attention_backward")
# each op's own small cases (the FP8 ones are the forward's only)
CASES = [(op, case.id) for op in OPS for case in registry.op(op).cases() if case.small]


@pytest.fixture
def descriptors_made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the descriptors the kernels get; on the CPU the descriptor path is forced."""
    made: list[int] = []
    make = flash_triton.descriptor

    def counted(t: torch.Tensor, rows: int, block_d: int):
        made.append(rows)
        return make(t, rows, block_d)

    for module in (flash_triton, forward_triton, backward_triton):
        monkeypatch.setattr(module, "descriptor", counted)
        if DEVICE.type == "cpu":
            monkeypatch.setattr(module, "descriptors_apply", lambda *tensors: True)
    return made


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's numpy: log2(0), -inf - -inf
@pytest.mark.parametrize(("op_name", "case_id"), CASES)
def test_descriptor_path_matches_reference(op_name: str, case_id: str, descriptors_made: list[int]) -> None:
    spec, impl = registry.op(op_name), registry.impl(op_name, "triton")
    availability = registry.availability(impl)
    if not availability:
        pytest.skip(availability.reason)
    if DEVICE.type == "cuda" and not flash_triton.has_tma(DEVICE):
        pytest.skip("this GPU has no TMA (sm_90 and newer have)")
    case = next(c for c in spec.cases() if c.id == case_id)
    args, kwargs = case.make(DEVICE, DTYPE, torch.Generator().manual_seed(zlib.crc32(case_id.encode())))
    call = spec.check(*args, **kwargs)
    why = impl.supports(call)
    if why is not None:
        pytest.skip(f"the plugin declares it cannot run this: {why}")
    ref = spec.reference(call)
    configs = [impl.config({**SMALL_BLOCKS[op_name], **variant}) for variant in VARIANTS[op_name]]
    configs += [impl.config()] if DEVICE.type == "cuda" else []
    for config in configs:
        mismatch = spec.verify(call, impl.run(call, config), ref)
        assert mismatch is None, f"{call.describe()} with {config}: {mismatch}"
    empty = any(t.numel() == 0 for t in call.inputs.values() if isinstance(t, torch.Tensor))
    assert bool(descriptors_made) != empty, "the descriptor path ran" if empty else "the descriptor path did not run"
