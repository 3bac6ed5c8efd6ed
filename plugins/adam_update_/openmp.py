"""adam_update_ in OpenMP C: one parallel, vectorised pass over the contiguous tensors."""

from __future__ import annotations

import torch
from kernelzoo_plugins._optim.spec import STATE, dense_run, scalars

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.registry import Call


class AdamUpdateOpenMP(OpenMPImplementation):
    op = "adam_update_"
    cdef = """
    void adam_update(float *p, const float *grad, float *m, float *v, float *v_max, long long n, float step_size,
                     float bc2_sqrt, float w1, float beta2, float eps, float weight_decay, float decay,
                     int decoupled, int amsgrad, int threads);
    """
    config_space = {"threads": thread_counts()}
    default_config = {"threads": thread_counts()[-1]}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, ...]:
        c, s = call.params, scalars(call)

        def update(t: dict[str, torch.Tensor]) -> None:
            self._lib.adam_update(*(ptr(t[name]) for name in STATE), t["param"].numel(), s["step_size"],
                                  s["bc2_sqrt"], 1 - c["beta1"], c["beta2"], c["eps"], c["weight_decay"], s["decay"],
                                  c["decoupled"], c["amsgrad"], config["threads"])
        return dense_run(call, STATE, update)
