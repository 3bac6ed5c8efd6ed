"""The Triton attention backward's kernels one by one on the GPU: the GPU time of delta, dK/dV and dQ (torch.profiler,
calls back to back, L2 not flushed) and of the whole call (CUDA events, L2 flushed, host hidden), per config, shape
and causal flag, float16, in interleaved rounds. TFLOP/s as attention_bench.py counts them (the backward 2.5× the
forward's 4·B·H·N²·D, halved when causal; the dK/dV pass 4/7 of it, the dQ pass 3/7).

    python scripts/attention_triton_kernels.py [--shape 4x32x4096x128] [--config '{"BLOCK_OUTER": 64}'] [--rounds 2]
    python scripts/attention_triton_kernels.py --old-source /tmp/triton_before.py   # an A/B of a kernel change

``--old-source FILE`` (an earlier plugins/attention_backward/triton.py, e.g. ``git show HEAD~1:...``) times every
config a second time from that source (named @old) in the same rounds, and prints the largest difference of its
gradients from the current source's.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from kernelzoo.registry import registry
from kernelzoo.timing import time_fn

CONFIGS = ['{"BLOCK_OUTER": 64, "BLOCK_INNER": 64, "num_warps": 4, "num_stages": 2, "DQ": "pass"}',
           '{"BLOCK_OUTER": 128, "BLOCK_INNER": 64, "num_warps": 8, "num_stages": 3, "DQ": "pass"}']


def load_old(path: Path):
    """The plugin class of an earlier copy of the module, its relative imports made absolute."""
    text = path.read_text().replace("from ..attention.triton import", "from kernelzoo_plugins.attention.triton import")
    text = text.replace("from . import", "from kernelzoo_plugins.attention_backward import")
    module_file = Path(tempfile.mkdtemp()) / "attention_backward_triton_old.py"  # Triton reads the kernels' source
    module_file.write_text(text)
    spec = importlib.util.spec_from_file_location(module_file.stem, module_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.AttentionBackwardTriton()


def kernel_ms(fn) -> dict[str, float]:
    """Median GPU time of each kernel over 10 calls, after 3."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
    times: dict[str, list[float]] = {}
    for event in prof.events():
        if event.device_type.name == "CUDA":
            name = event.name.removeprefix("_attention_").removeprefix("_")
            times.setdefault(name, []).append(getattr(event, "device_time", None) or event.cuda_time)
    return {name: statistics.median(t) / 1000 for name, t in times.items()}


def compare(impls: dict, call, config: dict, flops: float, key: str, rounds: int) -> None:
    """Time config on each implementation of impls in interleaved rounds and print a line for each."""
    runs: dict[str, list[tuple[dict, float]]] = {}
    for _ in range(rounds):
        for tag, impl in impls.items():
            def fn(impl=impl):
                return impl.run(call, config)
            whole = time_fn(fn, "cuda", budget_ms=30, hide_host=True).median_ms
            runs.setdefault(tag, []).append((kernel_ms(fn), whole))
    label = "/".join(str(config[k]) for k in ("BLOCK_OUTER", "BLOCK_INNER", "num_warps", "num_stages", "DQ"))
    share = {"dkdv": 4 / 7, "dq": 3 / 7}  # of the backward's products
    for tag, rs in runs.items():
        kernels = {name: min(r[0][name] for r in rs) for name in rs[0][0]}
        whole = min(r[1] for r in rs)
        parts = ", ".join(f"{name} {ms:.3f} ms" + (f" ({flops * share[name] / ms / 1e9:.0f})" if name in share else "")
                          for name, ms in kernels.items())
        print(f"{key} {label}{tag}: whole {whole:.3f} ms ({flops / whole / 1e9:.0f} TFLOP/s); {parts}", flush=True)
    if len(impls) > 1:
        new, old = (impl.run(call, config) for impl in impls.values())
        diff = max(float((a.float() - c.float()).abs().max() / c.float().abs().max()) for a, c in zip(new, old))
        print(f"  largest gradient difference from @old, relative to its largest value: {diff:.1e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", action="append", help="BxHxNxD (repeatable; default 4x32x4096x128, 1x32x16384x128)")
    parser.add_argument("--config", action="append", help="a config as JSON (repeatable)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--old-source", type=Path)
    args = parser.parse_args()
    forward = registry.impl("attention", "cuda")  # o and lse for the backward's inputs
    impls = {"": registry.impl("attention_backward", "triton")}
    if args.old_source:
        impls["@old"] = load_old(args.old_source)
    fwd_spec, bwd_spec = registry.op("attention"), registry.op("attention_backward")
    for shape in args.shape or ["4x32x4096x128", "1x32x16384x128"]:
        b, h, n, d = map(int, shape.split("x"))
        for causal in (False, True):
            g = torch.Generator(device="cuda").manual_seed(n + causal)
            q, k, v, do = (torch.randn((b, h, n, d), device="cuda", dtype=torch.float16, generator=g)
                           for _ in range(4))
            fwd_call = fwd_spec.check(q, k, v, causal=causal)
            o, lse = forward.run(fwd_call, forward.config())
            call = bwd_spec.check(q, k, v, o, lse, do, causal=causal)
            flops = 2.5 * fwd_spec.flops(fwd_call)
            for text in args.config or CONFIGS:
                compare(impls, call, impls[""].config(json.loads(text)), flops, f"{shape} "
                        f"{'causal' if causal else 'full  '}", args.rounds)


if __name__ == "__main__":
    main()
