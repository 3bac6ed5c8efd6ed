"""Host time per op call, by plugin: what a host-bound program (a small model's training step) pays
for each kernelzoo call, split into dispatch (check and choice) and the plugin's own run (its
argument handling and launch). Tiny tensors, no synchronisation inside the timed loop.

    python scripts/host_overhead.py [--device cuda] [--calls 300]
"""

from __future__ import annotations

import argparse
import functools
import time

import torch

import kernelzoo
from kernelzoo import dispatch, ops
from kernelzoo.registry import registry


def per_call_us(fn, calls: int, sync) -> float:
    for _ in range(20):
        fn()
    sync()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, time.perf_counter() - start)
        sync()
    return best / calls * 1e6


def checked_choice(spec, args: tuple, kwargs: dict):
    """What dispatch does before a plugin runs: check the arguments, choose the implementation."""
    return dispatch.choose(spec, spec.check(*args, **kwargs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    x, y = torch.randn(64, 64, device=dev), torch.randn(64, 64, device=dev)
    p, g, m, v = (torch.randn(4096, device=dev) for _ in range(4))
    v.abs_()
    w, b = torch.ones(64, device=dev), torch.zeros(64, device=dev)
    cases = {
        "add": ((x, y), {}, lambda: torch.add(x, y)),
        "copy_": ((torch.empty_like(x), x), {}, lambda: torch.empty_like(x).copy_(x)),
        "layer_norm": ((x, 64, w, b), {}, lambda: torch.nn.functional.layer_norm(x, (64,), w, b)),
        "adam_update_": ((p, g, m, v), dict(step=3, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01),
                         lambda: torch._fused_adamw_([p], [g], [m], [v], [], [torch.tensor(3.0, device=dev)], lr=1e-3,
                                                     beta1=0.9, beta2=0.999, weight_decay=0.01, eps=1e-8,
                                                     amsgrad=False, maximize=False)),
        # a 30-parameter model's optimizer step in one call (the per-parameter loop costs 30 adam_update_ calls)
        "adam_update_foreach_": (
            tuple([torch.randn(4096, device=dev) for _ in range(30)] for _ in range(4)),
            dict(step=3, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01), None),
    }
    p30, g30, m30, v30 = cases["adam_update_foreach_"][0]
    for v_i in v30:
        v_i.abs_()
    steps30 = [torch.tensor(3.0, device=dev) for _ in p30]
    cases["adam_update_foreach_"] = (cases["adam_update_foreach_"][0], cases["adam_update_foreach_"][1],
                                     lambda: torch._fused_adamw_(p30, g30, m30, v30, [], steps30, lr=1e-3, beta1=0.9,
                                                                 beta2=0.999, weight_decay=0.01, eps=1e-8,
                                                                 amsgrad=False, maximize=False))
    print(f"{'op':20} {'plugin':8} {'ops.<op>':>9} {'run only':>9} {'dispatch':>9}   (us per call, {dev.type})")
    for name, (a, kw, native) in cases.items():
        spec = registry.op(name)
        call = spec.check(*a, **kw)
        print(f"{name:20} {'native':8} {per_call_us(native, args.calls, sync):9.1f}   (the torch function itself)")
        for impl in registry.implementations(name):
            if impl.plugin == "python" or dev.type not in impl.devices() or not registry.availability(impl) \
                    or impl.supports(call):
                continue
            config = impl.config()
            function = functools.partial(getattr(ops, name), *a, **kw)
            with kernelzoo.use(impl.plugin):
                full = per_call_us(function, args.calls, sync)
                run = per_call_us(functools.partial(impl.run, call, config), args.calls, sync)
                choose = per_call_us(functools.partial(checked_choice, spec, a, kw), args.calls, sync)
            print(f"{name:20} {impl.plugin:8} {full:9.1f} {run:9.1f} {choose:9.1f}")


if __name__ == "__main__":
    main()
