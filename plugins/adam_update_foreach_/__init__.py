"""adam_update_foreach_(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay,
amsgrad=False, decoupled=True, max_exp_avg_sqs=None): adam_update_ on many tensors at once, as torch's
multi-tensor (foreach) and fused Adam / AdamW steps do.

Each argument that adam_update_ takes as a tensor is here a sequence of tensors, entry i of each one
parameter's state. Every tensor shares one dtype and one device, and entry i of every sequence has
params[i]'s shape. The update of each entry is exactly adam_update_'s, with the same step and
hyperparameters for all. A training step's optimizer then costs one call, not one per parameter: on
the GPU the triton and cuda plugins walk all tensors in one launch, through a table of their
addresses.

Implementations return (params, exp_avgs, exp_avg_sqs, max_exp_avg_sqs) as tuples, the last empty
without amsgrad. ``kernelzoo.ops.adam_update_foreach_`` returns params. The update runs outside
autograd, as torch.optim's does under no_grad.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from kernelzoo_plugins._optim.spec import STATE, VARIANTS, adam_case, check_number

from kernelzoo.errors import ArgumentError, DeviceError, DTypeError
from kernelzoo.registry import FLOATS, BadCase, Call, Case, Op, dtype_name, randn, registry
from kernelzoo.tolerance import Mismatch, check_close

# names of the sequences, in adam_update_'s STATE order
LISTS = ("params", "grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs")


def single_calls(call: Call) -> list[Call]:
    """adam_update_'s calls for the entries one by one (views of the same tensors)."""
    single = registry.op("adam_update_")
    amsgrad = call.params["amsgrad"]
    calls = []
    for i, param in enumerate(call.inputs["params"]):
        inputs = {name: call.inputs[lists][i] for name, lists in zip(STATE[:4], LISTS[:4])}
        inputs["max_exp_avg_sq"] = call.inputs["max_exp_avg_sqs"][i] if amsgrad else param.new_empty(0)
        calls.append(Call(single, inputs, dict(call.params)))
    return calls


def outputs_of(call: Call) -> tuple[tuple[torch.Tensor, ...], ...]:
    """What implementations return: the in-place sequences (the caller's tensors, updated)."""
    return tuple(call.inputs[name] for name in call.op.inplace)


def run_each(call: Call, plugin: str) -> tuple:
    """adam_update_'s ``plugin`` on every entry in turn (the python plugin: the spec, one call per entry)."""
    impl = registry.impl("adam_update_", plugin)
    for single in single_calls(call):
        impl.run(single, impl.config())
    return outputs_of(call)


class AdamUpdateForeach(Op):
    """adam_update_foreach_(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay,
    amsgrad=False, decoupled=True, max_exp_avg_sqs=None): adam_update_ on every params[i] with its state,
    in place, in as few launches as the plugin can; returns params."""

    name = "adam_update_foreach_"
    checks_every_call = True  # how the lists' tensors share memory
    inplace = ("params", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs")
    # (tensors, elements each): a transformer's parameter set in 1M-element tensors, and many small ones
    shapes = {"cuda": [(64, 1 << 20), (256, 4096)], "cpu": [(16, 1 << 18), (64, 4096)]}

    def check(self, params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], exp_avgs: Sequence[torch.Tensor],
              exp_avg_sqs: Sequence[torch.Tensor], step: int, lr: float, beta1: float, beta2: float, eps: float,
              weight_decay: float, amsgrad: bool = False, decoupled: bool = True,
              max_exp_avg_sqs: Sequence[torch.Tensor] | None = None) -> Call:
        op = self.name
        for name, flag in (("amsgrad", amsgrad), ("decoupled", decoupled)):
            if not isinstance(flag, bool):
                raise ArgumentError(f"{op}: {name} must be a bool, got {flag!r}")
        if amsgrad and max_exp_avg_sqs is None:
            raise ArgumentError(f"{op}: amsgrad needs max_exp_avg_sqs (zeros at the first step), got None")
        given = {"params": params, "grads": grads, "exp_avgs": exp_avgs, "exp_avg_sqs": exp_avg_sqs,
                 "max_exp_avg_sqs": max_exp_avg_sqs if amsgrad else ()}
        for name, value in given.items():
            if not isinstance(value, (list, tuple)):
                raise ArgumentError(f"{op}: {name} must be a list or tuple of tensors, got {type(value).__name__}")
        if not params:
            raise ArgumentError(f"{op}: params is empty; expected at least one tensor")
        count = len(params)
        first = params[0]
        if not isinstance(first, torch.Tensor):
            raise ArgumentError(f"{op}: params[0] must be a torch.Tensor, got {type(first).__name__}")
        dtype, device = first.dtype, first.device
        if dtype not in FLOATS:
            raise DTypeError(f"{op}: params[0] must be {', '.join(dtype_name(d) for d in FLOATS)}, got {dtype}")
        inputs: dict[str, tuple[torch.Tensor, ...]] = {}
        for name, value in given.items():
            if name == "max_exp_avg_sqs" and not amsgrad:
                inputs[name] = ()
                continue
            if len(value) != count:
                raise ArgumentError(f"{op}: {name} has {len(value)} tensors, params has {count}")
            for i, (t, p) in enumerate(zip(value, params)):
                # the common case costs four attribute reads; the messages are built only for a bad entry
                if not isinstance(t, torch.Tensor):
                    raise ArgumentError(f"{op}: {name}[{i}] must be a torch.Tensor, got {type(t).__name__}")
                if t.dtype != dtype:
                    raise DTypeError(f"{op}: params[0] is {dtype} but {name}[{i}] is {t.dtype}; expected one dtype")
                if t.device != device:
                    raise DeviceError(f"{op}: params[0] is on {device} but {name}[{i}] is on {t.device}; "
                                      "expected one device")
                if t.shape != p.shape:
                    raise ArgumentError(f"{op}: {name}[{i}] of shape {tuple(t.shape)} must have params[{i}]'s "
                                        f"shape {tuple(p.shape)}")
            inputs[name] = tuple(t.detach() if t.requires_grad else t for t in value)
        if isinstance(step, bool) or not isinstance(step, int) or step < 1:
            raise ArgumentError(f"{op}: step must be an int >= 1 (the step's number, counting from 1), got {step!r}")
        hyper = {"step": step, "lr": check_number(op, "lr", lr),
                 "beta1": check_number(op, "beta1", beta1, 0.0, 1.0, high_open=True),
                 "beta2": check_number(op, "beta2", beta2, 0.0, 1.0, high_open=True),
                 "eps": check_number(op, "eps", eps), "weight_decay": check_number(op, "weight_decay", weight_decay),
                 "amsgrad": amsgrad, "decoupled": decoupled}
        return Call(self, inputs, hyper)

    def reference(self, call: Call) -> tuple[tuple[torch.Tensor, ...], ...]:
        single = registry.op("adam_update_")
        each = [single.reference(c) for c in single_calls(call)]  # (p, m, v, v_max) per entry, in float64
        p, m, v, v_max = (tuple(entry[k] for entry in each) for k in range(4))
        return p, m, v, v_max if call.params["amsgrad"] else ()

    def verify(self, call: Call, outputs: Any, reference: Any) -> Mismatch | None:
        if not isinstance(outputs, tuple) or len(outputs) != 4:
            return Mismatch(f"expected (params, exp_avgs, exp_avg_sqs, max_exp_avg_sqs), got {type(outputs).__name__}")
        tolerance = self.tolerance(call)
        for name, outs, refs in zip(self.inplace, outputs, reference):
            if len(outs) != len(refs):
                return Mismatch(f"{name}: {len(outs)} tensors, expected {len(refs)}")
            for i, (out, ref) in enumerate(zip(outs, refs)):
                if out.dtype != call.dtype or out.device != call.device:
                    return Mismatch(f"{name}[{i}] is {out.dtype} on {out.device}, "
                                    f"expected {call.dtype} on {call.device}")
                mismatch = check_close(out, ref, tolerance)
                if mismatch is not None:
                    return Mismatch(f"{name}[{i}]: {mismatch}")
        return None

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, **params: Any) -> Call:
        """``shape`` = (tensors, elements each): random state at step 10, AdamW with lr 1e-3, betas (0.9, 0.999),
        weight decay 0.01."""
        count, n = shape
        kwargs = {"step": 10, "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01, **params}
        lists: dict[str, list[torch.Tensor]] = {name: [] for name in LISTS}
        for _ in range(count):
            exp_avg = randn((n,), device, dtype, generator, 0.01)
            lists["params"].append(randn((n,), device, dtype, generator))
            lists["grads"].append(randn((n,), device, dtype, generator, 0.01))
            lists["exp_avgs"].append(exp_avg)
            lists["exp_avg_sqs"].append(randn((n,), device, dtype, generator, 0.01).square().add_(exp_avg.square()))
        if kwargs.get("amsgrad"):
            kwargs["max_exp_avg_sqs"] = [v * 1.5 for v in lists["exp_avg_sqs"]]
        return self.check(lists["params"], lists["grads"], lists["exp_avgs"], lists["exp_avg_sqs"], **kwargs)

    def parse_shape(self, text: str) -> tuple[int, ...]:
        shape = super().parse_shape(text)
        if len(shape) != 2:
            raise ArgumentError(f"{self.name}: shape {text!r} must be TENSORSxELEMENTS, e.g. '64x1048576'")
        return shape

    def sizes(self, call: Call) -> dict[str, int]:
        params = call.inputs["params"]
        total = sum(p.numel() for p in params)
        return {"tensors": len(params), "n": total // max(1, len(params))}

    def flags(self, call: Call) -> str:
        return registry.op("adam_update_").flags(call)

    def flops(self, call: Call) -> float:
        return 16.0 * sum(p.numel() for p in call.inputs["params"])

    def bytes(self, call: Call) -> float:
        arrays = 7 + (2 if call.params["amsgrad"] else 0)  # p, m, v read and written, grad read; max both
        return float(arrays * sum(p.numel() * p.element_size() for p in call.inputs["params"]))

    def result(self, call: Call, outputs: Any) -> Any:
        return list(outputs[0])

    def cases(self) -> list[Case]:
        # entries of odd sizes, an empty one, a matrix, strided ones, NaN/inf gradients: adam_update_'s layouts
        mixes = {"odd": [((1,), ""), ((17,), ""), ((0,), ""), ((1023, 17), ""), ((4099,), "")],
                 "strided": [((17, 1023), "transposed"), ((64, 33), "sliced"), ((33,), "")],
                 "nan-inf": [((1023,), "nan"), ((5,), "")],
                 "one": [((1000,), "")]}
        cases = [Case(f"{mix}-{name}", _make_lists(entries, kwargs), small=True)
                 for name, kwargs in VARIANTS for mix, entries in mixes.items()]
        many = [((n,), "") for n in (100_003, 7, 65_536, 1, 30_000)]
        return cases + [Case(f"large-{name}", _make_lists(many, kwargs), small=False) for name, kwargs in VARIANTS[:2]]

    def bad_cases(self) -> list[BadCase]:
        p = torch.zeros(4, 3)
        hyper = {"step": 1, "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0}

        def call(params: Any, grads: Any, m: Any, v: Any, **kw: Any) -> Callable[[], tuple[tuple, dict]]:
            return lambda: ((params, grads, m, v), {**hyper, **kw})
        one = [p]
        return [
            BadCase("empty", call([], [], [], []), ArgumentError, "params is empty"),
            BadCase("not-a-list", call(p, one, one, one), ArgumentError, "params must be a list or tuple of tensors"),
            BadCase("lengths", call([p, p], one, [p, p], [p, p]), ArgumentError, "grads has 1 tensors, params has 2"),
            BadCase("shape", call(one, [torch.zeros(12)], one, one), ArgumentError,
                    "grads[0] of shape (12,) must have params[0]'s shape (4, 3)"),
            BadCase("dtype", call([p, p], [p, p.double()], [p, p], [p, p]), DTypeError,
                    "params[0] is torch.float32 but grads[1] is torch.float64"),
            BadCase("int-dtype", call([torch.arange(4)], [torch.arange(4)], [torch.arange(4)], [torch.arange(4)]),
                    DTypeError, "params[0] must be float32, float16, bfloat16, got torch.int64"),
            BadCase("step-0", call(one, one, one, one, step=0), ArgumentError, "step must be an int >= 1"),
            BadCase("amsgrad-without-max", call(one, one, one, one, amsgrad=True), ArgumentError,
                    "amsgrad needs max_exp_avg_sqs"),
        ]


def _make_lists(entries: Sequence[tuple[tuple[int, ...], str]], kwargs: dict) -> Callable:
    """A case: one adam_update_ state per (shape, layout) entry (adam_update_'s own maker), as sequences."""
    def build(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        states = [adam_case(shape, layout, kwargs)(device, dtype, g) for shape, layout in entries]
        lists = tuple([state[0][k] for state in states] for k in range(4))
        kw = dict(kwargs)
        if kw.get("amsgrad"):
            kw["max_exp_avg_sqs"] = [state[1]["max_exp_avg_sq"] for state in states]
        return lists, kw
    return build


def table_rows(call: Call) -> list[tuple[int, ...]]:
    """(p, grad, m, v, v_max, n) addresses and sizes of the non-empty entries, for the one-launch kernels
    (v_max 0 without amsgrad). The tensors must be contiguous (see ``dense_lists``)."""
    amsgrad = call.params["amsgrad"]
    lists = [call.inputs[name] for name in LISTS[:4]]
    maxes = call.inputs["max_exp_avg_sqs"]
    rows = []
    for i, p in enumerate(lists[0]):
        n = p.numel()
        if n:
            rows.append((p.data_ptr(), lists[1][i].data_ptr(), lists[2][i].data_ptr(), lists[3][i].data_ptr(),
                         maxes[i].data_ptr() if amsgrad else 0, n))
    return rows


class TableCache:
    """Device copies of address tables, by content: a training loop passes the same tensors every step, so
    the table is copied to the device once (a table with the same addresses and sizes is the same table)."""

    def __init__(self, size: int = 16) -> None:
        self._tables: dict[tuple, torch.Tensor] = {}
        self._size = size

    def get(self, rows: list[tuple[int, ...]], device: torch.device) -> torch.Tensor:
        key = (device, tuple(rows))
        table = self._tables.get(key)
        if table is None:
            if len(self._tables) >= self._size:
                self._tables.pop(next(iter(self._tables)))
            host = torch.tensor(rows, dtype=torch.int64).reshape(-1)
            table = host.to(device, non_blocking=device.type == "cuda") if device.type != "cpu" else host
            self._tables[key] = table
        return table


def dense_lists(call: Call) -> tuple[Call, Callable[[], None]]:
    """The call with contiguous copies of its non-contiguous tensors, and a function that writes the
    in-place ones back into the caller's tensors."""
    copies: dict[str, tuple[torch.Tensor, ...]] = {}
    for name in LISTS:
        value = call.inputs[name]
        if any(not t.is_contiguous() for t in value):
            copies[name] = tuple(t.contiguous() for t in value)
    if not copies:
        return call, lambda: None
    dense = call.replace(**copies)

    def write_back() -> None:
        for name in call.op.inplace:
            for mine, theirs in zip(dense.inputs[name], call.inputs[name]):
                if mine.data_ptr() != theirs.data_ptr():
                    theirs.copy_(mine)
    return dense, write_back


class OneLaunch:
    """Base of the plugins that update every entry in one launch: contiguous copies where needed, the
    address table, the subclass's ``launch``, the write-back."""

    def __init__(self) -> None:
        self.tables = TableCache()

    def run(self, call: Call, config: dict) -> tuple:
        dense, write_back = dense_lists(call)
        rows = table_rows(dense)
        if rows:
            self.launch(call, self.tables.get(rows, call.device), rows, config)
        write_back()
        return outputs_of(call)

    def launch(self, call: Call, table: torch.Tensor, rows: list[tuple[int, ...]], config: dict) -> None:
        raise NotImplementedError


def programs(device: torch.device, blocks: int, waves: int) -> int:
    """Grid size of a one-launch kernel: ``waves`` programs per SM, never more than there are blocks."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4
    return max(1, min(blocks, waves * sms))
