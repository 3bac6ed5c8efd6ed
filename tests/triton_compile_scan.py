"""Compile Triton kernels for sm_90 without a GPU, as the launches of real calls make them.

    python tests/triton_compile_scan.py plugins   # every triton plugin: its default config on the first small
                                                  # conformance cases of each of its GPU dtypes
    python tests/triton_compile_scan.py gemm      # the GEMM family's specializations (GEMM_CASES)
    python tests/triton_compile_scan.py attention_fp8  # FP8 attention's specializations (ATTENTION_FP8_CASES)
    python tests/triton_compile_scan.py scaled_matmul_default  # scaled_matmul's default config on every small
                                                               # conformance case, within a block's shared memory

Prints a JSON object {name: ["ok kernel" | "FAIL kernel: why" | "host: why", ...]}. Run in a process without
TRITON_INTERPRET (Triton's interpreter never compiles): the calls run on CPU tensors, their launches are caught
instead of made, and each distinct launch is compiled by Triton's compiler from its arguments' types
(tests/test_triton_sources.py)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

if os.environ.get("TRITON_INTERPRET") == "1":
    sys.exit("run without TRITON_INTERPRET: the interpreter never compiles")

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.tools.tensor_descriptor import TensorDescriptor

import kernelzoo.backends.triton as backend
from kernelzoo.registry import dtype_name, registry

TYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64",
         torch.float8_e4m3fn: "fp8e4nv", torch.float8_e5m2: "fp8e5", torch.int64: "i64", torch.int32: "i32",
         torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8", torch.bool: "i1"}
OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
CASES_PER_DTYPE = 3
TARGET = GPUTarget("cuda", 90, 32)
SHARED_LIMIT = 227 * 1024  # bytes of shared memory a block has on sm_90 (opt-in); the launch fails past it

_launches: list[tuple] = []
_compiled: set = set()


def _catch_launches() -> None:
    """Launches are recorded, not made; what the host asks of a GPU gets an H100/H200's answers."""
    backend.Launcher.__call__ = lambda self, grid, *args, **kwargs: _launches.append((self.kernel, args, kwargs))
    import kernelzoo_plugins._gemm.triton as gemm

    gemm.multiprocessors = lambda index: 132  # the persistent kernel's program count
    # float32 products of CPU tensors take TF32's path as they would on a GPU that allows it
    gemm.tf32_products = lambda dtype, device: dtype == torch.float32


def signature(kernel, args: tuple, kwargs: dict) -> tuple[dict, dict]:
    """Triton's signature and constexprs for one launch, from its arguments' types and values."""
    types, constexprs = {}, {}
    for i, (name, param) in enumerate(zip(kernel.arg_names, kernel.params)):
        value = args[i] if i < len(args) else kwargs.get(name, param.default)
        if param.is_constexpr or value is None:
            types[name], constexprs[(i,)] = "constexpr", value
        elif isinstance(value, torch.Tensor):
            types[name] = "*" + TYPES[value.dtype]
        elif isinstance(value, TensorDescriptor):
            types[name] = f"tensordesc<{TYPES[value.base.dtype]}[{', '.join(map(str, value.block_shape))}]>"
        elif isinstance(value, bool):
            types[name] = "i1"
        elif isinstance(value, int):
            types[name] = "i64" if abs(value) >= 2**31 else "i32"
        elif isinstance(value, float):
            types[name] = "fp32"
        else:
            raise TypeError(f"{name}: a {type(value).__name__} argument")
    return types, constexprs


def compile_launches(run: Callable[[], object], label: str, shared: bool = False) -> list[str]:
    """Run ``run`` with launches caught, then compile each launch not compiled before; a line per launch.
    ``shared``: a kernel that needs more shared memory than SHARED_LIMIT fails (its launch would)."""
    _launches.clear()
    found = []
    try:
        run()
    except Exception as exc:
        found.append(f"host: {label}: {type(exc).__name__}: {str(exc)[:200]}")
    for kernel, args, kwargs in _launches:
        try:
            types, constexprs = signature(kernel, args, kwargs)
            options = {k: kwargs[k] for k in OPTIONS if k in kwargs}
            key = (id(kernel), json.dumps(types, sort_keys=True), repr(sorted(constexprs.items())),
                   repr(sorted(options.items())))
            if key not in _compiled:  # else the same kernel and types, compiled for an earlier launch
                compiled = triton.compile(ASTSource(fn=kernel, signature=types, constexprs=constexprs),
                                          target=TARGET, options=options)
                if shared and compiled.metadata.shared > SHARED_LIMIT:
                    raise ValueError(f"{label}: {compiled.metadata.shared} bytes of shared memory, more than a "
                                     f"block's {SHARED_LIMIT}")
                _compiled.add(key)
            found.append(f"ok {kernel.fn.__name__}")
        except Exception as exc:
            found.append(f"FAIL {kernel.fn.__name__}: {type(exc).__name__}: {str(exc)[-600:]}")
    return found


def plugins() -> dict[str, list[str]]:
    results: dict[str, list[str]] = {}
    for impl in registry.load():
        if not isinstance(impl, backend.TritonImplementation):
            continue
        spec = registry.op(impl.op)
        for dtype in impl.dtypes.get("cuda", ()):
            found = results.setdefault(f"{impl.op}/{dtype_name(dtype)}", [])
            for case in [c for c in spec.cases() if c.small][:CASES_PER_DTYPE]:
                def run(case=case, dtype=dtype, impl=impl, spec=spec) -> object:
                    args, kwargs = case.make(torch.device("cpu"), dtype, torch.Generator().manual_seed(0))
                    return impl.run(spec.check(*args, **kwargs), impl.config())
                found += compile_launches(run, case.id)
    return results


def _m(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.randn(shape).to(dtype)


# name -> (a, b, bias, scales, config overrides): rows 16-byte aligned unless a case says so, so that operands
# are read as they lie (transposed ones through their transposes' descriptors)
GEMM_CASES: dict[str, Callable[[], tuple]] = {
    "bf16-row-major": lambda: (_m(256, 128), _m(128, 256), None, None, {}),
    "bf16-transposed-b-subtile": lambda: (_m(256, 128), _m(256, 128).t(), None, None, {"SUBTILE": 1}),
    "fp16-transposed-a-batched-warp-specialized": lambda: (
        _m(2, 128, 256, dtype=torch.float16).transpose(1, 2), _m(2, 128, 256, dtype=torch.float16), None, None,
        {"WS": 1, "num_stages": 4, "SUBTILE": 1}),
    "fp32-tf32-k-major-b-unaligned-c": lambda: (_m(256, 64, dtype=torch.float32), _m(64, 250, dtype=torch.float32),
                                                None, None, {"BLOCK_K": 32}),
    # IEEE float32 as three TF32 products ("ieee": TF32 not allowed), B copied K-major by k_major_copy_kernel
    "fp32-ieee-tf32x3-row-major-b": lambda: (_m(256, 64, dtype=torch.float32), _m(64, 256, dtype=torch.float32), None,
                                             None, {"BLOCK_K": 32, "BLOCK_N": 128, "TF32X3": 1, "ieee": True}),
    "fp32-broadcast-bias": lambda: (_m(256, 64, dtype=torch.float32), _m(3, 64, 256, dtype=torch.float32),
                                    _m(256, dtype=torch.float32), None, {"BLOCK_K": 32}),
    "fp8-row-scales-bias": lambda: (
        _m(256, 128, dtype=torch.float8_e4m3fn), _m(256, 128, dtype=torch.float8_e4m3fn).t(), _m(256),
        (torch.rand(256), torch.rand(256), True), {"BLOCK_K": 128, "PROMOTE_K": 32}),
    "tiled-fp16-bias": lambda: (_m(256, 128, dtype=torch.float16), _m(128, 256, dtype=torch.float16),
                                _m(256, dtype=torch.float16), None, {"TMA": 0}),
    # linear's activations in the epilogue ("activation": activation.py's CODES, passed to gemm, not the config)
    "bf16-transposed-b-bias-gelu": lambda: (_m(256, 128), _m(256, 128).t(), _m(256), None, {"activation": 2}),
    "fp16-relu-subtile": lambda: (_m(256, 128, dtype=torch.float16), _m(128, 256, dtype=torch.float16), None, None,
                                  {"activation": 1, "SUBTILE": 1}),
    "tiled-bf16-bias-gelu-tanh": lambda: (_m(256, 128), _m(128, 256), _m(256), None, {"TMA": 0, "activation": 3}),
}


def gemm_cases() -> dict[str, list[str]]:
    import kernelzoo_plugins._gemm.triton as module
    from kernelzoo_plugins._gemm.triton import GemmTritonImplementation, Scales, gemm

    results = {}
    tf32 = module.tf32_products
    for name, make in GEMM_CASES.items():
        a, b, bias, scales, overrides = make()
        activation = overrides.pop("activation", 0)
        module.tf32_products = (lambda dtype, device: False) if overrides.pop("ieee", False) else tf32
        config = {**GemmTritonImplementation.default_config, "BLOCK_K": 64, "SUBTILE": 0, **overrides}
        batch = max(t.shape[0] if t.dim() == 3 else 1 for t in (a, b))
        shape = (batch, a.shape[-2], b.shape[-1]) if max(a.dim(), b.dim()) == 3 else (a.shape[0], b.shape[1])
        out_dtype = bias.dtype if bias is not None else a.dtype if a.element_size() > 1 else torch.bfloat16
        c = torch.empty(shape, dtype=out_dtype)
        results[name] = compile_launches(
            lambda a=a, b=b, c=c, bias=bias, config=config, scales=scales, activation=activation: gemm(
                a, b, c, bias, config, Scales(*scales) if scales else None, activation), name)
    module.tf32_products = tf32
    results.update(linear_activation_passes())
    return results


def linear_activation_passes() -> dict[str, list[str]]:
    """The elementwise passes beside linear's GEMM: y = act(z) where the forward keeps z, and linear_backward's
    dz = g·act'(pre), for each activation."""
    results = {}
    linear, backward = registry.op("linear"), registry.op("linear_backward")
    for name in ("relu", "gelu", "gelu_tanh"):
        x, w, b, g = _m(64, 32), _m(48, 32), _m(48), _m(64, 48)
        impl = registry.impl("linear", "triton")
        call = linear.check(x, w, b, name)
        if name != "relu":
            results[f"linear-pre-{name}"] = compile_launches(
                lambda impl=impl, call=call: impl.run(linear.derivative.recording(call), impl.config()), name)
        impl = registry.impl("linear_backward", "triton")
        call = backward.check(g, x, w, bias=True, activation=name, pre=_m(64, 48))
        results[f"linear_backward-{name}"] = compile_launches(
            lambda impl=impl, call=call: impl.run(call, impl.config()), name)
    return results


# name -> (8-bit float, (B, Hq, Hk, N, D), causal, descale, out_dtype, config overrides, TMA descriptors): both
# P·V precisions, both kinds, descriptors (as on an sm_90 GPU) and pointers, GQA, odd head dims
ATTENTION_FP8_CASES: dict[str, tuple] = {
    "e4m3-d128-tma-pv16-head": (torch.float8_e4m3fn, (1, 2, 2, 256, 128), False, "head", torch.bfloat16, {}, True),
    "e4m3-d128-tma-pv8-causal": (torch.float8_e4m3fn, (1, 2, 2, 256, 128), True, "tensor", torch.bfloat16,
                                 {"PV_FP8": 1}, True),
    "e5m2-d128-tma-pv8-n128": (torch.float8_e5m2, (1, 2, 2, 256, 128), False, "tensor", torch.bfloat16,
                               {"PV_FP8": 1, "BLOCK_N": 128, "num_stages": 3}, True),
    "e5m2-d64-tma-pv16-gqa-float16": (torch.float8_e5m2, (2, 4, 2, 256, 64), True, "head", torch.float16,
                                      {"BLOCK_N": 128, "num_stages": 3}, True),
    "e4m3-d64-tma-pv8-8warps": (torch.float8_e4m3fn, (1, 2, 2, 256, 64), False, "tensor", torch.bfloat16,
                                {"PV_FP8": 1, "num_warps": 8}, True),
    "e4m3-d80-pointers-pv8-causal": (torch.float8_e4m3fn, (1, 2, 2, 97, 80), True, "tensor", torch.bfloat16,
                                     {"PV_FP8": 1, "BLOCK_M": 64}, False),
    "e5m2-d128-pointers-pv16": (torch.float8_e5m2, (1, 2, 2, 97, 128), False, "head", torch.bfloat16,
                                {"BLOCK_M": 64, "num_warps": 8}, False),
    "e4m3-d16-tma-pv8": (torch.float8_e4m3fn, (1, 2, 2, 64, 16), False, "tensor", torch.bfloat16,
                         {"PV_FP8": 1, "BLOCK_N": 32}, True),
    "e5m2-d256-tma-pv16-causal": (torch.float8_e5m2, (1, 2, 2, 256, 256), True, "tensor", torch.float16, {}, True),
}


def attention_fp8_cases() -> dict[str, list[str]]:
    from kernelzoo_plugins.attention import triton as forward

    spec, impl = registry.op("attention"), registry.impl("attention", "triton")
    results = {}
    for name, (kind, (b, hq, hk, n, d), causal, descale, out, overrides, tma) in ATTENTION_FP8_CASES.items():
        forward.descriptors_apply = lambda *tensors, tma=tma: tma
        call = spec.example((b, hq, n, d, int(causal)), kind, "cpu", torch.Generator().manual_seed(0),
                            kv_heads=hk, descale=descale, out_dtype=out)
        config = impl.config(overrides)
        results[name] = compile_launches(lambda call=call, config=config: impl.run(call, config), name)
    return results


def scaled_matmul_default() -> dict[str, list[str]]:
    """The Triton scaled_matmul plugin's default config on every small case of the op, both 8-bit formats: a
    default runs any call, and its epilogue's shared memory grows with the output type and the scales."""
    impl, spec = registry.impl("scaled_matmul", "triton"), registry.op("scaled_matmul")
    results = {}
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        for case in [c for c in spec.cases() if c.small]:
            def run(case=case, dtype=dtype) -> object:
                args, kwargs = case.make(torch.device("cpu"), dtype, torch.Generator().manual_seed(0))
                return impl.run(spec.check(*args, **kwargs), impl.config())
            found = compile_launches(run, case.id, shared=True)
            if found:  # an empty output launches nothing
                results[f"{dtype_name(dtype)}/{case.id}"] = found
    return results


def main(argv: list[str]) -> int:
    _catch_launches()
    what = {"plugins": plugins, "gemm": gemm_cases, "attention_fp8": attention_fp8_cases,
            "scaled_matmul_default": scaled_matmul_default}
    if len(argv) != 1 or argv[0] not in what:
        sys.exit(f"usage: triton_compile_scan.py {{{'|'.join(what)}}}")
    print(json.dumps(what[argv[0]]()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
