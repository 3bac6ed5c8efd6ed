"""The cuda plugins of attention and attention_backward on the GPU: correctness on odd shapes, then speed.

    python scripts/attention_cuda_check.py [--all-configs] [--skip-timing] [--sweep] [--budget-ms MS]
                                           [--forward JSON] [--backward JSON]

1. Every kernel's resources (registers per thread, static shared and local memory: local > 0 means spills)
   for the default config at head dims 64 and 128, causal and not (the backward's module holds the kernels of
   both dQ strategies, so all are listed, with the dynamic shared memory each would launch with).
2. Forward (o, lse) and backward (dq, dk, dv) against the float64 reference on odd shapes (N = 1, 17, 97,
   1025; Nq ≠ Nk both ways; causal and not; D 64 and 128 in float16 and bfloat16, 56 and 120 in float16; GQA
   8:1; one key-padding mask), with the default config and the first value of every config entry (so the
   backward's DQ "atomic" and "pass"; --all-configs: every config that fits). Each line gives every output's
   max abs error / the bound of the spec's rule (verify(): 2 × the error of the same math in the input
   precision + an absolute term). --forward JSON: the forward's only, with the configs listed (overrides of its
   default: '[{"WGMMA": 1, "WARPS": 8, "PRODUCER": 3}]', say); --backward JSON: the backward's only, likewise.
3. Times (median of CUDA events, L2 flushed: kernelzoo.timing) at B=4 H=32 N=4096, D 64 / 128, causal and
   not, float16, against torch's SDPA FLASH_ATTENTION backend (FlashAttention-2, through the torch plugins,
   which call its aten ops); TFLOP/s count forward 4·B·H·N²·D (halved when causal), backward 2.5× that.
4. --sweep: every forward and backward config that fits, at the same shapes, against FA2 and cuDNN (the
   eight fastest of each, registers and spills beside them; outputs compared with FA2's); --sweep-forward:
   the forward's only.
Exits 1 on any mismatch or error.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from functools import partial
from typing import Any

import torch
from kernelzoo_plugins.attention import attention_backward_math, attention_math, lse_atol, output_atol
from kernelzoo_plugins.attention.cuda import call_defines

from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import Call, poison_outputs, randn, registry
from kernelzoo.timing import time_fn

DEVICE = "cuda"
FWD, BWD = registry.op("attention"), registry.op("attention_backward")
FWD_CUDA, BWD_CUDA = registry.impl("attention", "cuda"), registry.impl("attention_backward", "cuda")
KERNELS = {FWD_CUDA: ("attention_forward",),
           BWD_CUDA: ("attention_backward_delta", "attention_backward_dkdv", "attention_backward_dq",
                      "attention_backward_dkdv_dq", "attention_backward_dq_convert")}
# (B, Hq, Hk, Nq, Nk, causal, mask): the head dim and dtype vary outside
SHAPES = [
    (1, 2, 2, 1, 1, False, False), (2, 2, 2, 17, 17, True, False), (1, 2, 2, 97, 97, False, False),
    (1, 2, 2, 97, 97, True, False), (1, 2, 2, 1025, 1025, False, False), (1, 2, 2, 1025, 1025, True, False),
    (1, 2, 2, 17, 1025, True, False), (1, 2, 2, 1025, 97, True, False), (1, 2, 2, 97, 1025, False, False),
    (2, 8, 1, 97, 97, True, False), (1, 8, 1, 1025, 1025, False, False), (2, 4, 2, 97, 1025, False, True),
]


def configs(impl: Any, all_configs: bool) -> list[dict]:
    if all_configs:
        space = impl.config_space
        return [dict(zip(space, values)) for values in itertools.product(*space.values())]
    first = impl.config({k: v[0] for k, v in impl.config_space.items()})
    if impl is FWD_CUDA:  # and 4 warps of 32 rows reading q from shared memory; the warpgroup MMAs (sm_90)
        return [impl.config(), first, impl.config({"BLOCK_N": 32, "WARPS": 4, "Q_REGS": 0}),
                impl.config({"WGMMA": 1, "WARPS": 8, "BLOCK_N": 128}),
                impl.config({"WGMMA": 1, "WARPS": 12, "BLOCK_M": 192, "BLOCK_N": 128}),
                impl.config({"WGMMA": 1, "WARPS": 4, "BLOCK_M": 64, "BLOCK_N": 64}),
                impl.config({"WGMMA": 1, "WARPS": 8, "BLOCK_N": 128, "STAGES": 3, "PRODUCER": 1}),
                impl.config({"WGMMA": 1, "WARPS": 4, "BLOCK_M": 64, "BLOCK_N": 64, "PRODUCER": 1}),
                impl.config({"WGMMA": 1, "WARPS": 8, "BLOCK_N": 128, "STAGES": 3, "PRODUCER": 2}),
                impl.config({"WGMMA": 1, "WARPS": 4, "BLOCK_M": 64, "BLOCK_N": 32, "PRODUCER": 2})]
    return [impl.config(), first, impl.config({"SPLIT": 1})]  # and the dK/dV pass over pairs of warps


def resources() -> None:
    print("kernel resources, default config (the forward's: the one a call given it runs; registers/thread, "
          "static shared, local bytes: > 0 = spills; "
          "dynamic shared):")
    for impl, names in KERNELS.items():
        for d, causal in itertools.product((64, 128), (False, True)):
            q = torch.zeros((1, 1, 128, d), device=DEVICE, dtype=torch.float16)
            call = FWD.check(q, q, q, causal=causal) if impl is FWD_CUDA else BWD.check(
                q, q, q, q, torch.zeros((1, 1, 128), device=DEVICE), q, causal=causal)
            config = FWD_CUDA.fitted(call, impl.config()) if impl is FWD_CUDA else impl.config()
            shared = impl.shared_memory(call, config)
            for name in names:
                a = impl.kernel(name, torch.float16, call_defines(call, config)).attributes()
                print(f"  {name:26s} D={d:3d} causal={causal!s:5s} regs {a['registers']:3d}  static "
                      f"{a['static_shared_bytes']:5d} B  local {a['local_bytes']:4d} B  dynamic "
                      f"{shared[name]:6d} B")


def errors(call: Call, outs: tuple, refs: tuple) -> str:
    """Each output's max abs error against the float64 reference, over the bound of the spec's rule (verify():
    2 × the error of the same math in the input precision + an absolute term), as 'name error/bound'."""
    i, p = call.inputs, call.params
    if call.op is FWD:
        names, atols = ("o", "lse"), (output_atol(call.dtype, refs[0]), lse_atol(call.dtype))
        base = attention_math(i["q"], i["k"], i["v"], i.get("attn_mask"), p["causal"], p["scale"], call.dtype)
    else:
        names, atols = ("dq", "dk", "dv"), tuple(output_atol(call.dtype, r) for r in refs)
        base = attention_backward_math(i["q"], i["k"], i["v"], i["do"], i.get("attn_mask"), p["causal"], p["scale"],
                                       call.dtype, o=i["o"])
    parts = []
    for name, out, ref, b, atol in zip(names, outs, refs, base, atols):
        finite = torch.isfinite(ref)

        def err(t: torch.Tensor, ref: torch.Tensor = ref, finite: torch.Tensor = finite) -> float:
            return float((t.double() - ref)[finite].abs().max()) if bool(finite.any()) else 0.0
        parts.append(f"{name} {err(out):.1e}/{2 * err(b) + atol:.1e}")
    return " ".join(parts)


def check_correctness(all_configs: bool, forward: list[dict] | None = None, backward: list[dict] | None = None) -> int:
    """The odd-shape checks; ``forward`` (``backward``): only the forward's (backward's), with these configs
    (overrides of its default)."""
    failures = 0
    g = torch.Generator().manual_seed(0)
    cases = [*itertools.product((64, 128), (torch.float16, torch.bfloat16), SHAPES),
             *itertools.product((56, 120), (torch.float16,), SHAPES)]  # narrower than the kernel's head dim
    for d, dtype, (b, hq, hk, nq, nk, causal, masked) in cases:
        q, k, v = (randn((b, h, n, d), DEVICE, dtype, g) for h, n in ((hq, nq), (hk, nk), (hk, nk)))
        kwargs: dict[str, Any] = {"causal": causal}
        if masked:  # key padding: batch 0 sees its first 7 keys, batch 1 all
            kwargs["attn_mask"] = (torch.arange(nk, device=DEVICE)[None, :]
                                   < torch.tensor([7, nk][:b], device=DEVICE)[:, None])[:, None, None, :]
        fwd_call = FWD.check(q, k, v, **kwargs)
        o_ref, lse_ref = FWD.reference(fwd_call)
        o_in = torch.empty_like(q).copy_(o_ref)
        do = randn(q.shape, DEVICE, dtype, g)
        bwd_call = BWD.check(q, k, v, o_in, lse_ref.float(), do, **kwargs)
        grads_ref = BWD.reference(bwd_call)
        label = f"{str(dtype)[6:]:8s} D={d:3d} {b}x{hq}:{hk}x{nq}:{nk}{' causal' if causal else ''}" \
                f"{' mask' if masked else ''}"
        for impl, call, ref in ((FWD_CUDA, fwd_call, (o_ref, lse_ref)), (BWD_CUDA, bwd_call, grads_ref)):
            only = forward if impl is FWD_CUDA else backward
            if (forward is not None or backward is not None) and only is None:
                continue
            chosen = configs(impl, all_configs) if only is None else [impl.config(c) for c in only]
            for config in chosen:
                try:
                    with poison_outputs():
                        out = impl.run(call, config)
                    torch.cuda.synchronize(DEVICE)
                except UnsupportedError:
                    continue
                except Exception as exc:  # a launch failure leaves the context unusable: report and stop
                    print(f"ERROR {impl.op:18s} {label} {config}: {type(exc).__name__}: {exc}")
                    return failures + 1
                mismatch = call.op.verify(call, out, ref)
                failures += mismatch is not None
                print(f"{'ok  ' if mismatch is None else 'FAIL'} {impl.op:18s} {label} "
                      f"{'/'.join(str(v) for v in config.values())}: {errors(call, out, ref)}"
                      f"{'' if mismatch is None else f'  <- {mismatch}'}", flush=True)
    return failures


def timing(budget_ms: float) -> int:
    failures = 0
    torch_fwd, torch_bwd = registry.impl("attention", "torch"), registry.impl("attention_backward", "torch")
    print("\nB=4 H=32 N=4096 float16, TFLOP/s (median ms): cuda plugin (default config) vs torch FLASH (FA2)")
    print("| D | causal | fwd cuda | fwd flash | cuda/flash | bwd cuda | bwd flash | cuda/flash | o err vs flash |")
    print("|---|---|---|---|---|---|---|---|---|")
    g = torch.Generator().manual_seed(1)
    for d, causal in itertools.product((64, 128), (False, True)):
        q, k, v, do = (randn((4, 32, 4096, d), DEVICE, torch.float16, g) for _ in range(4))
        fwd_call = FWD.check(q, k, v, causal=causal)
        o_flash, lse_flash = torch_fwd.run(fwd_call, {})
        o, lse = FWD_CUDA.run(fwd_call, FWD_CUDA.config())
        err = float((o.float() - o_flash.float()).abs().max())
        lse_err = float((lse - lse_flash).abs().max())
        if err > 1e-2 or lse_err > 1e-2:
            failures += 1
        bwd_call = BWD.check(q, k, v, o_flash, lse_flash, do, causal=causal)
        flops = FWD.flops(fwd_call)
        cells = []
        for impl, call, factor in ((FWD_CUDA, fwd_call, 1.0), (torch_fwd, fwd_call, 1.0),
                                   (BWD_CUDA, bwd_call, 2.5), (torch_bwd, bwd_call, 2.5)):
            config = impl.config()
            ms = time_fn(lambda impl=impl, call=call, config=config: impl.run(call, config), DEVICE,
                         budget_ms=budget_ms).median_ms
            cells.append((factor * flops / (ms * 1e-3) / 1e12, ms))
        row = [f"{tf:.0f} ({ms:.2f})" for tf, ms in cells]
        print(f"| {d} | {'yes' if causal else 'no'} | {row[0]} | {row[1]} | {cells[0][0] / cells[1][0]:.2f} | "
              f"{row[2]} | {row[3]} | {cells[2][0] / cells[3][0]:.2f} | {err:.1e} (lse {lse_err:.1e}) |",
              flush=True)
    return failures


def sweep(budget_ms: float, forward_only: bool = False) -> int:
    """Every forward and backward config that fits each shape, timed against SDPA's FA2 and cuDNN backends."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    failures = 0
    g = torch.Generator().manual_seed(2)
    print("\nevery config, B=4 H=32 N=4096 float16: TFLOP/s, against FA2 and cuDNN; registers (the largest of the"
          " config's kernels), spill bytes; the largest difference from FA2's outputs")
    for d, causal in itertools.product((64, 128), (False, True)):
        q, k, v, do = (randn((4, 32, 4096, d), DEVICE, torch.float16, g) for _ in range(4))
        fwd_call = FWD.check(q, k, v, causal=causal)
        flops = FWD.flops(fwd_call)
        base, refs = {}, {}
        for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            with sdpa_kernel(backend):
                qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
                o = torch.nn.functional.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
                grads = partial(torch.autograd.grad, o, (qg, kg, vg), do, retain_graph=True)
                sdpa = partial(torch.nn.functional.scaled_dot_product_attention, q, k, v, is_causal=causal)
                base[name, "fwd"] = flops / (time_fn(sdpa, DEVICE, budget_ms=budget_ms).median_ms * 1e-3) / 1e12
                base[name, "bwd"] = 2.5 * flops / (time_fn(grads, DEVICE, budget_ms=budget_ms).median_ms * 1e-3) / 1e12
                if name == "flash":
                    refs["fwd"], refs["bwd"] = (o.detach(),), grads()
        o, lse = FWD_CUDA.run(fwd_call, FWD_CUDA.config())
        bwd_call = BWD.check(q, k, v, o, lse, do, causal=causal)
        for kind, impl, call, factor in (("fwd", FWD_CUDA, fwd_call, 1.0), ("bwd", BWD_CUDA, bwd_call, 2.5)):
            if forward_only and kind == "bwd":
                continue
            flash, cudnn = base["flash", kind], base["cudnn", kind]
            print(f"{kind} D={d} causal={causal}: flash {flash:.0f}, cudnn {cudnn:.0f}", flush=True)
            rows, space = [], impl.config_space
            for values in itertools.product(*space.values()):
                config = dict(zip(space, values))
                try:
                    shared = impl.shared_memory(call, config)
                except UnsupportedError:
                    continue
                try:
                    out = impl.run(call, config)
                    out = out if kind == "bwd" else out[:1]
                    err = max(float((a.float() - r.float()).abs().max()) for a, r in zip(out, refs[kind]))
                    main = (("attention_forward",) if kind == "fwd" else ("attention_backward_dkdv_dq",)
                            if config["DQ"] == "atomic" else ("attention_backward_dkdv", "attention_backward_dq"))
                    attrs = [impl.kernel(name, torch.float16, call_defines(call, config)).attributes()
                             for name in main if name in shared]
                    ms = time_fn(partial(impl.run, call, config), DEVICE, budget_ms=budget_ms).median_ms
                except Exception as exc:
                    print(f"ERROR {kind} {config}: {type(exc).__name__}: {exc}")
                    return failures + 1
                failures += err > 5e-2
                tf = factor * flops / (ms * 1e-3) / 1e12
                rows.append((tf, f"  {'/'.join(str(x) for x in values):22s} {tf:4.0f}  {tf / flash:.2f}x flash "
                                 f"{tf / cudnn:.2f}x cudnn  regs {max(a['registers'] for a in attrs)} local "
                                 f"{max(a['local_bytes'] for a in attrs)}  err {err:.1e}"
                                 f"{'  <- MISMATCH' if err > 5e-2 else ''}"))
            for _, line in sorted(rows, reverse=True)[:8]:
                print(line, flush=True)
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all-configs", action="store_true", help="check every config of the spaces")
    parser.add_argument("--skip-timing", action="store_true")
    parser.add_argument("--sweep", action="store_true", help="time every config that fits")
    parser.add_argument("--sweep-forward", action="store_true", help="--sweep, the forward's configs only")
    parser.add_argument("--budget-ms", type=float, default=300.0)
    parser.add_argument("--forward", type=json.loads, metavar="JSON",
                        help="check only the forward, with these configs: a list of overrides of its default")
    parser.add_argument("--backward", type=json.loads, metavar="JSON",
                        help="check only the backward, with these configs: a list of overrides of its default")
    args = parser.parse_args()
    for impl in KERNELS:
        available = registry.availability(impl)
        if not available:
            print(f"{impl.key} not available: {available.reason}")
            return 1
    start = time.perf_counter()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}")
    resources()
    failures = check_correctness(args.all_configs, args.forward, args.backward)
    print(f"correctness: {failures} mismatch(es), {time.perf_counter() - start:.0f} s")
    if not args.skip_timing and not failures:
        failures += timing(args.budget_ms)
    if (args.sweep or args.sweep_forward) and not failures:
        failures += sweep(args.budget_ms / 3, forward_only=args.sweep_forward)
    print("OK" if not failures else f"FAILED: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
