"""NVRTC compilation of PRELUDE + defines + source to a cubin, cached in memory and on disk. PRELUDE, the
header-free declarations every kernel shares, is prelude.cuh beside this module."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping, Sequence

import torch

from kernelzoo.backends.cuda.bindings import _check_nvrtc, _ffi, _nvrtc, nvrtc_version
from kernelzoo.errors import CompileError, CudaError
from kernelzoo.paths import cache_dir

with open(os.path.join(os.path.dirname(__file__), "prelude.cuh"), encoding="utf-8") as _f:
    PRELUDE = _f.read()

_DTYPE_DEFINES = {torch.float32: "float", torch.float16: "kz_half", torch.bfloat16: "kz_bf16"}
_cubins: dict[str, tuple[bytes, str]] = {}  # cache key -> (cubin, NVRTC log)
_last_log = ""


def device_arch(device_index: int | None = None) -> str:
    """The "sm_XY" to compile for a torch CUDA device: its own, or the highest older one NVRTC supports."""
    major, minor = torch.cuda.get_device_capability(device_index)
    arch, lib, count = 10 * major + minor, _nvrtc(), _ffi.new("int *")
    if not hasattr(lib, "nvrtcGetSupportedArchs"):  # NVRTC < 11.2 cannot tell: try the device's own
        return f"sm_{arch}"
    _check_nvrtc("nvrtcGetNumSupportedArchs", lib.nvrtcGetNumSupportedArchs(count))
    supported = _ffi.new("int[]", count[0])
    _check_nvrtc("nvrtcGetSupportedArchs", lib.nvrtcGetSupportedArchs(supported))
    best = max((a for a in supported if a <= arch), default=0)
    if best // 10 != major:  # a cubin runs on later minors of its major only: sm_86 runs on sm_89, not sm_90
        raise CudaError(f"NVRTC {nvrtc_version()} cannot compile for sm_{arch}; it knows {list(supported)}")
    return f"sm_{best}"


def dtype_define(dtype: torch.dtype) -> str:
    """The kernel element type for a torch dtype: the value of the ``T`` define."""
    if dtype not in _DTYPE_DEFINES:
        raise TypeError(f"no CUDA kernel element type for {dtype}; expected one of {list(_DTYPE_DEFINES)}")
    return _DTYPE_DEFINES[dtype]


def _source(source: str, defines: Mapping[str, int | float | str], name: str) -> str:
    # `#define`s, not -D options: NVRTC's built-in header, which -D would reach, has its own
    # `template <typename T>` that -DT=float breaks. `#line` keeps error lines those of `source`.
    lines = [PRELUDE]
    for key, value in sorted(defines.items()):
        if not key.isidentifier():
            raise ValueError(f"define name {key!r} is not a C identifier")
        lines.append(f"#define {key} {int(value) if isinstance(value, bool) else value}")
    return "\n".join([*lines, f'#line 1 "{name}"', source])


def _write_atomic(path: str, data: bytes) -> None:
    tmp = None
    try:  # a read-only or full cache only costs a compile next time: never an error
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)  # a reader sees no file or a whole one, never a partial one
    except OSError:
        with contextlib.suppress(OSError):
            if tmp is not None:
                os.unlink(tmp)


def _nvrtc_compile(text: str, name: str, opts: list[str], what: str) -> tuple[bytes, str]:
    lib, prog, size = _nvrtc(), _ffi.new("nvrtcProgram *"), _ffi.new("size_t *")
    _check_nvrtc("nvrtcCreateProgram", lib.nvrtcCreateProgram(prog, text.encode(), name.encode(), 0,
                                                              _ffi.NULL, _ffi.NULL))
    try:
        c_opts = [_ffi.new("char[]", o.encode()) for o in opts]
        rc = lib.nvrtcCompileProgram(prog[0], len(c_opts), _ffi.new("char *[]", c_opts))
        _check_nvrtc("nvrtcGetProgramLogSize", lib.nvrtcGetProgramLogSize(prog[0], size))
        log = _ffi.new("char[]", size[0] + 1)
        _check_nvrtc("nvrtcGetProgramLog", lib.nvrtcGetProgramLog(prog[0], log))
        if rc != 0:
            error = _ffi.string(lib.nvrtcGetErrorString(rc)).decode()
            raise CompileError(f"NVRTC could not compile {what}: {error}\n{_ffi.string(log).decode()}")
        _check_nvrtc("nvrtcGetCUBINSize", lib.nvrtcGetCUBINSize(prog[0], size))
        cubin = _ffi.new("char[]", size[0])
        _check_nvrtc("nvrtcGetCUBIN", lib.nvrtcGetCUBIN(prog[0], cubin))
        return bytes(_ffi.buffer(cubin)), _ffi.string(log).decode(errors="replace")
    finally:  # unchecked: its failure must not hide the compile error, and leaks a program at worst
        lib.nvrtcDestroyProgram(prog)


def compile_cubin(source: str, *, defines: Mapping[str, int | float | str] = {}, options: Sequence[str] = (),
                  arch: str, name: str = "kernel.cu") -> bytes:
    """NVRTC-compile PRELUDE + ``source`` to a cubin for ``arch`` ("sm_90"); cached in memory and on disk."""
    global _last_log
    if not arch.startswith("sm_"):  # compute_XY would make PTX, not a cubin
        raise ValueError(f"arch must be a real GPU architecture like 'sm_90', got {arch!r}")
    std = [] if any(o.startswith(("-std", "--std")) for o in options) else ["-std=c++17"]
    opts, text = [f"-arch={arch}", *std, *options], _source(source, defines, name)
    key = hashlib.sha256(json.dumps([text, name, opts, nvrtc_version()]).encode()).hexdigest()
    if key not in _cubins:
        path, cubin, log = os.path.join(cache_dir("cuda"), key), b"", ""
        try:
            with open(path + ".cubin", "rb") as f:
                cubin = f.read()
            if os.path.exists(path + ".log"):
                with open(path + ".log", encoding="utf-8") as f:
                    log = f.read()
        except OSError:
            pass
        if not cubin.startswith(b"\x7fELF"):
            what = f"{name} for {arch} (options {opts}, defines {dict(defines)})"
            cubin, log = _nvrtc_compile(text, name, opts, what)
            if log.strip():  # written first, so that a cached cubin always finds its log
                _write_atomic(path + ".log", log.encode())
            _write_atomic(path + ".cubin", cubin)
        _cubins[key] = cubin, log
    cubin, _last_log = _cubins[key]
    return cubin


def last_log() -> str:
    """NVRTC's log (warnings) for the latest compile_cubin or load, also when it came from a cache."""
    return _last_log
