"""Host time per op call, by plugin: what a host-bound program (a small model's training step) pays
for each kernelzoo call, split into dispatch (check and choice) and the plugin's own run (its
argument handling and launch). Tiny tensors, no synchronisation inside the timed loop.

    python scripts/host_overhead.py [--device cuda] [--calls 300]
"""

from __future__ import annotations

import argparse
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
    }
    print(f"{'op':14} {'plugin':8} {'ops.<op>':>9} {'run only':>9} {'dispatch':>9}   (us per call, {dev.type})")
    for name, (a, kw, native) in cases.items():
        spec = registry.op(name)
        call = spec.check(*a, **kw)
        print(f"{name:14} {'native':8} {per_call_us(native, args.calls, sync):9.1f}   (the torch function itself)")
        for impl in registry.implementations(name):
            if impl.plugin == "python" or dev.type not in impl.devices() or not registry.availability(impl) \
                    or impl.supports(call):
                continue
            config = impl.config()
            with kernelzoo.use(impl.plugin):
                full = per_call_us(lambda: getattr(ops, name)(*a, **kw), args.calls, sync)
                run = per_call_us(lambda: impl.run(call, config), args.calls, sync)
                choose = per_call_us(lambda: dispatch.choose(spec, spec.check(*a, **kw)), args.calls, sync)
            print(f"{name:14} {impl.plugin:8} {full:9.1f} {run:9.1f} {choose:9.1f}")


if __name__ == "__main__":
    main()
