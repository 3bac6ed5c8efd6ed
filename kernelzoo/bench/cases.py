"""What a benchmark measures: its cases (plugin × dtype × representative shape × variant), their inputs,
the config each plugin runs with, and the throughput and floor of a measured time."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from kernelzoo import dispatch
from kernelzoo.backends.triton import TritonImplementation, interpreting
from kernelzoo.ceilings import Ceilings
from kernelzoo.registry import (
    DTYPE_NAMES,
    Call,
    Implementation,
    Op,
    clone_input,
    copy_input_,
    dtype_name,
    parse_dtype,
    registry,
)

BASELINE = "torch"
# Without ceilings, a call is compute-bound from this many FLOPs per byte on: about the ridge point of
# an H100 in fp32 (52 TFLOP/s over 3 TB/s = 17) and of a 2-core CPU (~100 GFLOP/s over ~10 GB/s = 10).
RIDGE_FLOPS_PER_BYTE = 16.0


@dataclass(frozen=True)
class Case:
    """One benchmark: one plugin of an op on one dtype, representative shape and keyword variant."""

    op: str
    plugin: str
    dtype: str  # "float32", ...
    shape: tuple[int, ...]  # what Op.example takes, as --shape spells it
    params: tuple[tuple[str, Any], ...] = ()  # the op's keyword variant, e.g. (("approximate", "tanh"),)

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.params)

    @property
    def shape_text(self) -> str:
        return "x".join(map(str, self.shape))

    @property
    def variant(self) -> str:
        return "-".join(f"{k}={v}" for k, v in self.params)

    @property
    def group(self) -> str:
        """What the plugins are compared on: 'softmax float16 8192x8192' (pytest-benchmark's group)."""
        return " ".join(filter(None, (self.op, self.dtype, self.shape_text, self.variant)))

    def __str__(self) -> str:
        """The test id: 'softmax-triton-float16-8192x8192'."""
        return "-".join(filter(None, (self.op, self.plugin, self.dtype, self.shape_text, self.variant)))


def default_plugins(op: str, device_type: str) -> list[str]:
    """The plugins of ``op`` that declare ``device_type``: dispatch's order first, then the others by name."""
    names = [i.plugin for i in registry.implementations(op) if device_type in i.dtypes]
    first = dispatch.plugin_order(device_type, names)
    return first + sorted(set(names) - set(first))


def default_dtypes(op: str, device_type: str) -> list[str]:
    """The dtypes the baseline (torch) takes on ``device_type``, so every group has a torch row; the
    dtypes any plugin takes for an op without one."""
    impls = {i.plugin: i for i in registry.implementations(op)}
    chosen = [impls[BASELINE]] if BASELINE in impls else impls.values()
    offered = {d for impl in chosen for d in impl.dtypes.get(device_type, ())}
    return [dtype_name(d) for d in DTYPE_NAMES if d in offered]


def cases(op: str, device_type: str, *, plugins: Sequence[str] | None = None, dtypes: Sequence[str] | None = None,
          shapes: Sequence[tuple[int, ...]] | None = None) -> list[Case]:
    """Every case of ``op`` on ``device_type``, group by group (shape, variant, dtype), each group's plugins
    in :func:`default_plugins` order. Plugins named in ``plugins`` are kept even where they cannot run
    (their rows say why); the default ones only on the dtypes they declare."""
    spec = registry.op(op)
    for name in plugins or ():
        registry.impl(op, name)  # UnknownError listing the op's plugins
    names = list(plugins) if plugins else default_plugins(op, device_type)
    dtype_names = [dtype_name(parse_dtype(d)) for d in dtypes] if dtypes else default_dtypes(op, device_type)
    variants = getattr(spec, "variants", None) or ({},)
    out = []
    for shape in shapes if shapes is not None else spec.shapes.get(device_type, ()):
        for variant in variants:
            for dtype in dtype_names:
                for name in names:
                    declared = parse_dtype(dtype) in registry.impl(op, name).dtypes.get(device_type, ())
                    if declared or plugins:
                        out.append(Case(op, name, dtype, tuple(shape), tuple(variant.items())))
    return out


def why_not(case: Case, device: torch.device | str) -> str | None:
    """Why ``case`` cannot run on ``device`` (before any input is made), or None."""
    impl = registry.impl(case.op, case.plugin)
    availability = registry.availability(impl)
    if not availability:
        return f"not available: {availability.reason}"
    kind = torch.device(device).type
    if kind not in impl.devices():
        return f"runs on {' or '.join(impl.devices()) or 'no device'} here, not {kind}"
    if isinstance(impl, TritonImplementation) and interpreting():
        # a program at a time in Python: minutes for one 2048x2048 call
        return "Triton's interpreter (TRITON_INTERPRET=1) is not benchmarked"
    if parse_dtype(case.dtype) not in impl.dtypes.get(kind, ()):
        allowed = ", ".join(dtype_name(d) for d in impl.dtypes.get(kind, ())) or "nothing"
        return f"takes {allowed} on {kind}, not {case.dtype}"
    return None


def make_call(case: Case, device: torch.device | str, seed: int = 0) -> Call:
    """The case's inputs: fresh standard-normal data (never zeros) from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    return registry.op(case.op).example(case.shape, parse_dtype(case.dtype), device, generator, **case.kwargs)


def restorer(spec: Op, call: Call) -> Callable[[], None]:
    """Puts back the inputs an in-place op overwrites (from copies taken now), so every run sees the same."""
    saved = {name: clone_input(call.inputs[name]) for name in spec.inplace}

    def restore() -> None:
        for name, value in saved.items():
            copy_input_(call.inputs[name], value)

    return restore


def plugin_config(spec: Op, impl: Implementation, call: Call) -> tuple[dict[str, Any], str]:
    """The config ``impl`` runs ``call`` with, and where it comes from: the plugin's tuned config for the
    call's bucket ("tuned"), else for its nearest tuned bucket ("tuned nearby"), else its "default" (as a
    forced plugin runs it)."""
    choice = dispatch.tuned(spec, call, impl.plugin)
    if choice is None:
        return impl.config(), "default"
    return dict(choice.config), "tuned nearby" if choice.nearest else "tuned"


@dataclass(frozen=True)
class Throughput:
    """What a measured time means: rates, the floor, and which of FLOPs or bytes bound the call."""

    flops: float
    bytes: float
    tflops: float | None  # None for ops that count no FLOPs
    gbs: float
    floor_ms: float | None  # None without ceilings
    pct_of_floor: float | None  # 100 · floor / time: 100 is the best the device can do
    bound: str  # "compute" or "memory"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def bound(flops: float, nbytes: float, dtype: str, ceilings: Ceilings | None) -> str:
    """'compute' if the call's FLOPs take longer at peak than its bytes at full bandwidth, else 'memory'."""
    if flops <= 0:
        return "memory"
    peak = (ceilings.tflops.get(dtype) or ceilings.tflops.get("float32")) if ceilings is not None else None
    if ceilings is None or not peak:
        return "compute" if flops >= RIDGE_FLOPS_PER_BYTE * nbytes else "memory"
    return "compute" if flops / (peak * 1e12) > nbytes / (ceilings.bandwidth_gbs * 1e9) else "memory"


def throughput(spec: Op, call: Call, ms: float, ceilings: Ceilings | None) -> Throughput:
    """Rates and the floor of ``call`` run in ``ms`` milliseconds."""
    flops, nbytes, dtype = spec.flops(call), spec.bytes(call), dtype_name(call.dtype)
    floor = ceilings.floor_ms(flops, nbytes, dtype) if ceilings is not None else None
    seconds = ms * 1e-3
    return Throughput(
        flops=flops, bytes=nbytes,
        tflops=flops / seconds / 1e12 if flops > 0 and ms > 0 else None,
        gbs=nbytes / seconds / 1e9 if ms > 0 else 0.0,
        floor_ms=floor, pct_of_floor=100.0 * floor / ms if floor and ms > 0 else None,
        bound=bound(flops, nbytes, dtype, ceilings))
