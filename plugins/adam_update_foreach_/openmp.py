"""adam_update_foreach_ in OpenMP C: adam_update_'s vectorised loop over a table of every entry's addresses
and size, in one parallel region (openmp.c includes adam_update_'s source)."""

from __future__ import annotations

import torch
from kernelzoo_plugins._optim.spec import scalars

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.registry import Call

from . import OneLaunch


class AdamUpdateForeachOpenMP(OneLaunch, OpenMPImplementation):
    op = "adam_update_foreach_"
    cdef = """
    void adam_update_foreach(const long long *table, int count, float step_size, float bc2_sqrt, float w1,
                             float beta2, float eps, float weight_decay, float decay, int decoupled, int amsgrad,
                             int threads);
    """
    config_space = {"threads": thread_counts()}
    default_config = {"threads": thread_counts()[-1]}

    def launch(self, call: Call, table: torch.Tensor, rows: list[tuple[int, ...]], config: dict) -> None:
        c, s = call.params, scalars(call)
        self._lib.adam_update_foreach(ptr(table, "long long *"), len(rows), s["step_size"], s["bc2_sqrt"],
                                      1 - c["beta1"], c["beta2"], c["eps"], c["weight_decay"], s["decay"],
                                      c["decoupled"], c["amsgrad"], config["threads"])
