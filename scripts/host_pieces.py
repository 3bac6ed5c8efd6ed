"""Host µs of the pieces of one small GPU op call (relu on 64x1024 float32), each timed alone in a loop: torch's
whole call, output allocation, Triton's grid helper against kernelzoo's, Triton's compiled launcher alone,
kernelzoo's Launcher over it, Triton's own ``kernel[grid]``, dispatch's signature lookup and Call, and the plugins'
runs and whole calls. Where a call's host time goes below ``kernelzoo bench --host --split``'s layers.

    python scripts/host_pieces.py [--calls 2000] [--rounds 7]

Each figure is the median over rounds of ``calls`` calls in a row, ended by one device synchronisation.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("host_pieces: needs a CUDA GPU")
    import triton
    from kernelzoo_plugins.relu.triton import _relu_kernel

    import kernelzoo
    from kernelzoo import dispatch, ops
    from kernelzoo.backends import triton as backend
    from kernelzoo.registry import Call, registry

    x = torch.randn(64, 1024, device="cuda")
    y, n = torch.empty_like(x), x.numel()

    def us(fn: Callable[[], object]) -> float:
        for _ in range(200):
            fn()
        torch.cuda.synchronize()
        rounds = []
        for _ in range(args.rounds):
            start = time.perf_counter()
            for _ in range(args.calls):
                fn()
            torch.cuda.synchronize()
            rounds.append((time.perf_counter() - start) / args.calls * 1e6)
        return statistics.median(rounds)

    launch = backend.launcher(_relu_kernel)
    launch[(32,)](x, y, n, BLOCK=2048, num_warps=8)  # compiled, and remembered by the Launcher
    run, function, metadata, tail, stream = next(iter(launch._compiled.values()))
    spec = registry.op("relu")
    call = spec.check(x)
    pieces: dict[str, Callable[[], object]] = {
        "torch.relu(x)": lambda: torch.relu(x),
        "x.new_empty(shape)": lambda: x.new_empty((64, 1024)),
        "torch.empty(shape, dtype, device)": lambda: torch.empty((64, 1024), dtype=x.dtype, device=x.device),
        "triton.cdiv": lambda: triton.cdiv(n, 2048),
        "kernelzoo.backends.triton.cdiv": lambda: backend.cdiv(n, 2048),
        "Triton's compiled launcher alone": lambda: run(32, 1, 1, stream(), function, metadata, None, None, None,
                                                        x, y, n, *tail),
        "Launcher[grid](...)": lambda: launch[(32,)](x, y, n, BLOCK=2048, num_warps=8),
        "kernel[grid](...), through Triton": lambda: _relu_kernel[(32,)](x, y, n, BLOCK=2048, num_warps=8),
        "dispatch signature key": lambda: dispatch._key("relu", True, (x,), {}),
        "Call(...)": lambda: Call(spec, {"x": x}, {}),
        "ops.relu(x), automatic choice": lambda: ops.relu(x),
    }
    for plugin in ("triton", "cuda"):
        with kernelzoo.use(plugin):
            ops.relu(x)
            choice = dispatch.choose(spec, call)
        pieces[f"{type(choice.impl).__name__}.run(call)"] = lambda c=choice: c.impl.run(call, c.config)
    print(f"host µs per call, {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    for name, fn in pieces.items():
        print(f"{us(fn):8.2f}  {name}")
    for plugin in ("triton", "cuda"):
        with kernelzoo.use(plugin):
            print(f"{us(lambda: ops.relu(x)):8.2f}  ops.relu(x), {plugin} forced")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
