"""sgd_update_ in OpenMP C: one parallel, vectorised pass over the contiguous tensors."""

from __future__ import annotations

import torch
from kernelzoo_plugins._optim.spec import dense_run

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.registry import Call


class SgdUpdateOpenMP(OpenMPImplementation):
    op = "sgd_update_"
    cdef = """
    void sgd_update(float *p, const float *grad, float *b, long long n, float lr, float momentum, float dampening,
                    float weight_decay, int nesterov, int threads);
    """
    config_space = {"threads": thread_counts()}
    default_config = {"threads": thread_counts()[-1]}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, ...]:
        c = call.params

        def update(t: dict[str, torch.Tensor]) -> None:
            self._lib.sgd_update(ptr(t["param"]), ptr(t["grad"]), ptr(t["momentum_buffer"]), t["param"].numel(),
                                 c["lr"], c["momentum"], c["dampening"], c["weight_decay"], c["nesterov"],
                                 config["threads"])
        return dense_run(call, ("param", "grad", "momentum_buffer"), update)
