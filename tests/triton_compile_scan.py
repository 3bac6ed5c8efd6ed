"""Compile, for sm_90 and without a GPU, every Triton kernel that the triton plugins launch with their default
config on the first small conformance cases of each of their GPU dtypes; print a JSON object
{"op/dtype": ["ok kernel" | "FAIL kernel: why" | "host: why", ...]}.

Run in a process without TRITON_INTERPRET (Triton's interpreter never compiles): the plugins run on CPU tensors,
their launches are caught instead of made, and each distinct launch is compiled by Triton's compiler from its
arguments' types (tests/test_triton_sources.py)."""

from __future__ import annotations

import json
import os
import sys

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


def main() -> int:
    launches: list[tuple] = []
    backend.Launcher.__call__ = lambda self, grid, *args, **kwargs: launches.append((self.kernel, args, kwargs))
    import kernelzoo_plugins._gemm.triton as gemm

    gemm.multiprocessors = lambda index: 132  # the persistent kernel's program count, asked of a GPU
    results: dict[str, list[str]] = {}
    seen: set = set()
    target = GPUTarget("cuda", 90, 32)
    for impl in registry.load():
        if not isinstance(impl, backend.TritonImplementation):
            continue
        spec = registry.op(impl.op)
        for dtype in impl.dtypes.get("cuda", ()):
            found = results.setdefault(f"{impl.op}/{dtype_name(dtype)}", [])
            for case in [c for c in spec.cases() if c.small][:CASES_PER_DTYPE]:
                launches.clear()
                try:
                    args, kwargs = case.make(torch.device("cpu"), dtype, torch.Generator().manual_seed(0))
                    impl.run(spec.check(*args, **kwargs), impl.config())
                except Exception as exc:
                    found.append(f"host: {case.id}: {type(exc).__name__}: {str(exc)[:200]}")
                for kernel, args, kwargs in launches:
                    try:
                        types, constexprs = signature(kernel, args, kwargs)
                        key = (id(kernel), json.dumps(types, sort_keys=True), repr(sorted(constexprs.items())),
                               repr(sorted((k, kwargs[k]) for k in OPTIONS if k in kwargs)))
                        if key in seen:  # the same kernel and types, compiled for an earlier launch
                            found.append(f"ok {kernel.fn.__name__}")
                            continue
                        seen.add(key)
                        triton.compile(ASTSource(fn=kernel, signature=types, constexprs=constexprs), target=target,
                                       options={k: kwargs[k] for k in OPTIONS if k in kwargs})
                        found.append(f"ok {kernel.fn.__name__}")
                    except Exception as exc:
                        found.append(f"FAIL {kernel.fn.__name__}: {type(exc).__name__}: {str(exc)[-600:]}")
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
