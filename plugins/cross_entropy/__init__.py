"""cross_entropy(logits, target, reduction="mean", ignore_index=-100, label_smoothing=0.0):
torch.nn.functional.cross_entropy with class-index targets, the forward pass, fused: log-softmax and the
negative log-likelihood in one pass over each row of C logits, never materialising the probabilities.

    lse_i = m_i + log Σ_c exp(x_ic − m_i),  m_i = max_c x_ic   (NaN for rows with +inf, NaN or only -inf)
    loss_i = (1 − ε)·(lse_i − x_i,t_i) + ε·(lse_i − Σ_c x_ic / C)     (ε = label_smoothing)
    loss_i = 0 where t_i = ignore_index
    reduction: "none" → loss (target's shape), "sum" → Σ loss_i, "mean" → Σ loss_i / #(t_i ≠ ignore_index)

(the mean of no targets — all ignored, or an empty batch — is 0/0 = NaN, as in torch). logits are (N, C)
or (N, C, d1, ...) with target (N, d1, ...), or (C,) with a 0-dim target; target is int64 (class
probabilities, a float target, are not supported). A target outside [0, C) that is not ignore_index is
an ArgumentError, checked on the host before any kernel (torch's GPU kernels assert on the device).

Every implementation returns (loss, lse): loss in the logits' dtype, lse float32 of the target's shape
(every row's, ignored ones too), which the backward op (cross_entropy_backward) needs. ``kernelzoo.ops
.cross_entropy`` returns loss, and records a backward through cross_entropy_backward when logits
requires grad. Kernels see the logits as (rows, C) with unit class stride (:func:`as_rows`: the class dim
moved last, copied if it must be). The op's shape is (rows, C): "8192x50257".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

# re-exported: what cross_entropy's plugins read
from kernelzoo_plugins._rows.cross_entropy import REDUCTIONS as REDUCTIONS
from kernelzoo_plugins._rows.cross_entropy import (
    CaseSpec,
    CrossEntropyOp,
    case_inputs,
    check_options,
    check_target,
    cross_entropy_bad_cases,
    cross_entropy_cases,
    targets_with,
    widened,
)
from kernelzoo_plugins._rows.cross_entropy import as_rows as as_rows
from kernelzoo_plugins._rows.cross_entropy import reduce_losses as reduce_losses
from kernelzoo_plugins._rows.cross_entropy import row_losses as row_losses

from kernelzoo import ops
from kernelzoo.registry import BadCase, Call, Case, Derivative, randn
from kernelzoo.tolerance import Tolerance


class CrossEntropy(CrossEntropyOp):
    """cross_entropy(logits, target, reduction="mean", ignore_index=-100, label_smoothing=0.0) -> loss (fused
    log-softmax and NLL; lse kept for the backward)."""

    name = "cross_entropy"
    # its torch plugin does more than torch's own op (a second pass for the log-sum-exp the backward needs): a
    # host-bound call runs the Triton kernel first
    host_bound_order = {"cuda": ("triton", "cuda")}
    checks_every_call = True  # the target's values must be class indices (value_range)
    outputs = 2  # the loss and the rows' log-sum-exp
    # the derivative: cross_entropy_backward from the logits and their rows' log-sum-exp
    derivative = Derivative(
        inputs=("logits",),
        save=lambda call, outputs: {"logits": call.inputs["logits"], "target": call.inputs["target"], "lse": outputs[1],
                                    "params": dict(call.params)},
        backward=lambda saved, grad: {"logits": ops.cross_entropy_backward(grad, saved["logits"], saved["target"],
                                                                      saved["lse"], **saved["params"])},
    )
    # Untuned on a GPU, the cuda plugin first: tuned, it ran ahead of the Triton plugin at every benchmark shape
    # (docs/perf/cross_entropy.md)
    default_order = {"cuda": ("cuda",)}
    # (rows, C): language-model heads (GPT-2's 50257, Llama 3's 128256, Llama 2's 32000 classes)
    shapes = {"cuda": [(8192, 50257), (4096, 128256), (16384, 32000)],
              "cpu": [(512, 50257), (256, 128256), (2048, 32000)]}

    def check(self, logits: torch.Tensor, target: torch.Tensor, reduction: str = "mean", ignore_index: int = -100,
              label_smoothing: float = 0.0) -> Call:
        check_target(self.name, logits, target, ignore_index)
        return Call(self, {"logits": logits, "target": target},
                    {**check_options(self.name, reduction, label_smoothing), "ignore_index": int(ignore_index)})

    def reference(self, call: Call) -> tuple[torch.Tensor, torch.Tensor]:
        logits, target, p = call.inputs["logits"], call.inputs["target"], call.params
        loss, lse, valid = row_losses(as_rows(logits), target.reshape(-1), p["ignore_index"], p["label_smoothing"],
                                      torch.float64)
        out = reduce_losses(loss, valid, p["reduction"])
        return (out.reshape(target.shape) if p["reduction"] == "none" else out), lse.reshape(target.shape)

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, ignored: float = 0.05, **params: Any) -> Call:
        """Logits (rows, C) and targets, a share ``ignored`` of them ignore_index; other keywords go to the op."""
        rows, classes = shape
        target = targets_with((rows,), classes, ignored, params.get("ignore_index", -100), device, generator)
        return self.check(randn((rows, classes), device, dtype, generator), target, **params)

    def flops(self, call: Call) -> float:
        return 4.0 * call.inputs["logits"].numel()  # max, exp, sum, and the smoothing sum

    def bytes(self, call: Call) -> float:
        x, t = call.inputs["logits"], call.inputs["target"]
        return float(x.numel() * x.element_size() + t.numel() * (8 + 4 + x.element_size()))

    def tolerance(self, call: Call) -> Tolerance:
        return widened(call, max(self.sizes(call).values()))

    def cases(self) -> list[Case]:
        return cross_entropy_cases(_forward_case)

    def bad_cases(self) -> list[BadCase]:
        return cross_entropy_bad_cases(self.name, lambda logits, target: (logits, target))

    # --- autograd ----------------------------------------------------------------------------
    def result(self, call: Call, outputs: Any) -> torch.Tensor:
        return outputs[0]


# --- conformance cases (shared with cross_entropy_backward) -----------------------------------------

def _forward_case(spec: CaseSpec) -> Callable:
    def build(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        logits, target, kwargs = case_inputs(spec, device, dtype, g)
        return (logits, target), kwargs
    return build


