"""conv2d's Triton kernels on the GPU over a grid of configs, against cuDNN, per ResNet shape.

    python scripts/conv_sweep.py [--dtype float16] [--quick] [--out DIR]

For each of conv2d's GPU shapes: cuDNN on NCHW input (what torch users run) and on channels-last
input; `kernelzoo.ops.conv2d` (the tuned dispatch); the Triton plugin end to end at its default config; and
every config of the grid below timed twice, end to end (the layout change of x and the weight included)
and the kernel alone on inputs already laid out. Each config's output is checked against cuDNN first
(a wrong one is reported, not timed). Times are medians of CUDA events with L2 flushed and the
host's enqueue kept out (kernelzoo.timing's hide_host): GPU time. Prints a table per shape and the
best config; writes conv_sweep.json under --out.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import torch
from kernelzoo_plugins.conv2d import triton as conv_triton

from kernelzoo import ops
from kernelzoo.registry import registry
from kernelzoo.timing import time_fn


def grid(quick: bool, channels: int) -> list[dict]:
    """Tile configs; BLOCK_N no wider than the output channels need, 256 only beside BLOCK_M 128."""
    blocks_m, blocks_n, blocks_k = ([128], [64, 128], [64]) if quick else ([64, 128, 256], [64, 128, 256], [32, 64])
    configs = []
    for bm, bn, bk, warps, stages in itertools.product(blocks_m, blocks_n, blocks_k, (4, 8), (3, 4)):
        if (bm * bn // (32 * warps) > 256 or stages * (bm + bn) * bk * 2 > 200 * 1024 or bn > max(64, channels)
                or (bm == 256 and bn == 256) or (bm == 64 and bn == 256)):
            continue
        configs.append({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_warps": warps,
                        "num_stages": stages})
    return configs


def ms(fn, budget_ms: float) -> float:
    return time_fn(fn, "cuda", budget_ms=budget_ms, hide_host=True).median_ms


def pick(config: dict) -> dict:
    return {k: config[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")}


def sweep_shape(spec, plugin, shape: tuple, dtype: torch.dtype, quick: bool, budget_ms: float) -> dict:
    call = spec.example(shape, dtype, "cuda", torch.Generator().manual_seed(0))
    x, w, bias = call.inputs["x"], call.inputs["weight"], call.inputs.get("bias")
    p = call.params
    ref = torch.nn.functional.conv2d(x, w, bias, **p)
    scale = float(ref.float().abs().max())
    x_cl = x.contiguous(memory_format=torch.channels_last)
    w_cl = w.contiguous(memory_format=torch.channels_last)
    cs = conv_triton.conv_shape(call)
    row = {"shape": spec.shape_string(call), "flops": spec.flops(call),
           "cudnn": ms(lambda: torch.nn.functional.conv2d(x, w, bias, **p), budget_ms),
           "cudnn_cl": ms(lambda: torch.nn.functional.conv2d(x_cl, w_cl, bias, **p), budget_ms),
           "plugin_default": ms(lambda: plugin.run(call, plugin.default_config), budget_ms),
           "dispatch": ms(lambda: ops.conv2d(x, w, bias, **p), budget_ms),
           "configs": []}
    w_rsck = conv_triton.weight_rsck(w, False)
    out = torch.empty_like(ref)
    geometry = (cs.r, cs.s, cs.stride, cs.padding, cs.dilation)
    for config in grid(quick, cs.k):
        config = {**config, "channels_last": True}
        try:
            out.zero_()
            conv_triton.conv(x_cl, w_rsck, bias, out, geometry, False, config)
            err = float((out.float() - ref.float()).abs().max()) / scale
            if err > 2e-2:
                row["configs"].append({**config, "error": err})
            else:
                end_to_end = ms(lambda config=config: plugin.run(call, config), budget_ms)
                kernel = ms(lambda config=config: conv_triton.conv(x_cl, w_rsck, bias, out, geometry, False, config),
                            budget_ms)
                row["configs"].append({**config, "ms": end_to_end, "kernel_ms": kernel})
        except Exception as exc:  # a config that does not compile or fit is reported, not fatal
            row["configs"].append({**config, "failed": f"{type(exc).__name__}: {str(exc)[:120]}"})
    timed = [c for c in row["configs"] if "ms" in c]
    row["configs_best"] = min(timed, key=lambda c: c["ms"]) if timed else None
    row["configs_best_kernel"] = min(timed, key=lambda c: c["kernel_ms"]) if timed else None
    bad = [c for c in row["configs"] if "failed" in c or "error" in c]
    if bad:
        print(f"    configs: {len(bad)} failed or wrong, first: {bad[0]}")
    return row


def report(shape: tuple, row: dict) -> None:
    flops = row["flops"]
    print(f"{shape}: cudnn {row['cudnn']:.4f} ms ({flops / row['cudnn'] / 1e9:.0f} TFLOP/s), channels-last cudnn "
          f"{row['cudnn_cl']:.4f}, triton plugin default {row['plugin_default']:.4f}", flush=True)
    best, best_kernel = row["configs_best"], row["configs_best_kernel"]
    if best:
        print(f"    configs: end to end {best['ms']:.4f} ms ({flops / best['ms'] / 1e9:.0f} TFLOP/s, "
              f"{row['cudnn'] / best['ms']:.2f}x cudnn) {pick(best)}; kernel alone {best_kernel['kernel_ms']:.4f} "
              f"ms ({flops / best_kernel['kernel_ms'] / 1e9:.0f} TFLOP/s) {pick(best_kernel)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--budget-ms", type=float, default=20.0)
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    spec = registry.op("conv2d")
    plugin = registry.impl("conv2d", "triton")
    results = []
    for shape in spec.shapes["cuda"]:
        row = sweep_shape(spec, plugin, shape, getattr(torch, args.dtype), args.quick, args.budget_ms)
        report(shape, row)
        results.append(row)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "conv_sweep.json").write_text(json.dumps(results, indent=1))
    print("| shape | cudnn ms | cudnn channels-last ms | dispatch ms | dispatch/cudnn | triton default ms "
          "| triton best ms | best/cudnn | kernel alone ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in results:
        best, kernel = row["configs_best"], row["configs_best_kernel"]
        cells = (f"{best['ms']:.4f} | {row['cudnn'] / best['ms']:.2f}x | {kernel['kernel_ms']:.4f}" if best
                 else "- | - | -")
        print(f"| {row['shape']} | {row['cudnn']:.4f} | {row['cudnn_cl']:.4f} | {row['dispatch']:.4f} "
              f"| {row['cudnn'] / row['dispatch']:.2f}x | {row['plugin_default']:.4f} | {cells} |")


if __name__ == "__main__":
    main()
