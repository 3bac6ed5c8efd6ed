"""OpenMP C backend: gcc builds a shared library once, cffi (ABI mode) loads it.

Libraries are cached in ``<cache>/openmp/<key>.so``, the key a hash of the source, the
defines, the flags, the compiler's version and the CPU, so a change of any of them builds
anew and nothing stale is loaded. Tensors reach C as pointers to their own memory.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Mapping
from typing import Any, ClassVar

import cffi
import torch

from kernelzoo.errors import CompileError
from kernelzoo.paths import cache_dir
from kernelzoo.registry import Availability, Implementation

# -fno-math-errno: sqrtf and friends vectorise (kernels never read errno)
BASE_FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fopenmp", "-fPIC", "-shared", "-std=gnu11")
_ffi = cffi.FFI()
_libraries: dict[str, Any] = {}
_lock = threading.Lock()


def compiler() -> str:
    return os.environ.get("CC", "gcc")


@functools.cache
def compiler_version() -> str:
    """First line of ``$CC --version`` ('' if there is no compiler)."""
    try:
        out = subprocess.run([compiler(), "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return ""
    return out.stdout.splitlines()[0] if out.stdout else ""


@functools.cache
def cpu_model() -> tuple[str, str]:
    """(model name, ISA flags) of this CPU from /proc/cpuinfo, ('', '') elsewhere."""
    model = flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "model name" and not model:
                    model = value
                elif key in ("flags", "Features") and not flags:
                    flags = value
    except OSError:
        pass
    return model, flags


@functools.cache
def avx512() -> bool:
    """Whether this is an x86-64 CPU with AVX-512: -march=native then builds the kernels' AVX-512 paths."""
    return platform.machine() in ("x86_64", "AMD64") and "avx512f" in cpu_model()[1].split()


@functools.cache
def flags() -> tuple[str, ...]:
    """The compiler's flags on this machine: BASE_FLAGS, and with AVX-512 -mprefer-vector-width=512.
    gcc's -march=native tunes Intel's AVX-512 cores for 256-bit vectors when it vectorises loops by
    itself, which left plain loops over a register tile at a third of their speed (docs/design/elementwise.md)."""
    return (*BASE_FLAGS, "-mprefer-vector-width=512") if avx512() else BASE_FLAGS


@functools.cache
def available() -> Availability:
    """A C compiler with OpenMP, checked by building a one-line library once."""
    if shutil.which(compiler()) is None:
        return Availability(False, f"no C compiler: {compiler()!r} not found (set CC)")
    try:
        build("int kz_probe(void) { int n = 0;\n#pragma omp parallel reduction(+:n)\n n += 1;\n"
              " return n; }", "int kz_probe(void);")
    except CompileError as exc:
        return Availability(False, f"{compiler()} cannot build OpenMP C: {exc}")
    return Availability(True)


def build(source: str, cdef: str, defines: Mapping[str, Any] | None = None) -> Any:
    """Compile ``source`` (once per key) and return the cffi library declared by ``cdef``."""
    define_flags = tuple(f"-D{k}={v}" for k, v in sorted((defines or {}).items()))
    all_flags = flags() + define_flags
    key = hashlib.sha256(
        "\0".join((source, *all_flags, compiler_version(), *cpu_model())).encode()).hexdigest()[:24]
    with _lock:
        lib = _libraries.get(key)
        if lib is None:
            path = cache_dir("openmp") / f"{key}.so"
            if not path.exists():
                _compile(source, all_flags, path)
            ffi = cffi.FFI()
            ffi.cdef(cdef)
            lib = _libraries[key] = ffi.dlopen(str(path))
    return lib


def _compile(source: str, flags: tuple[str, ...], path: os.PathLike) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "kernel.c")
        with open(src, "w") as f:
            f.write(source)
        out = os.path.join(tmp, "kernel.so")
        proc = subprocess.run([compiler(), *flags, src, "-o", out, "-lm"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise CompileError(f"{compiler()} {' '.join(flags)} failed:\n{proc.stderr.strip()}")
        os.replace(out, path)  # atomic: a concurrent build of the same key is harmless


@functools.cache
def _ctype(name: str) -> Any:
    return _ffi.typeof(name)  # parsed once: a cast by name parses it at every call


def ptr(t: torch.Tensor, ctype: str = "float *") -> Any:
    """A C pointer to ``t``'s memory (no copy); ``t`` must be a CPU tensor. The C type is parsed once per name:
    parsing it and making the device object at every call nearly doubled the cost of a call."""
    assert t.is_cpu, "openmp kernels take CPU tensors"
    return _ffi.cast(_ctype(ctype), t.data_ptr())


def thread_counts() -> list[int]:
    """Powers of two up to the cores this process may use, and that count itself."""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    counts = [1 << i for i in range(n.bit_length()) if 1 << i < n]
    return [*counts, n]


class OpenMPImplementation(Implementation):
    """Base of the ``openmp`` plugins: float32 on the CPU, C source beside the module."""

    plugin: ClassVar[str] = "openmp"
    dtypes: ClassVar[Mapping[str, tuple[torch.dtype, ...]]] = {"cpu": (torch.float32,)}
    sources: ClassVar[tuple[str, ...]] = ("openmp.c",)
    cdef: ClassVar[str]  # C declarations of the source's entry points

    def available(self) -> Availability:
        return available()

    @functools.cached_property
    def _lib(self) -> Any:
        """The source compiled without defines, kept on the instance: one attribute lookup a call instead of
        library()'s key and dict lookups."""
        return self.library()

    def library(self, **defines: Any) -> Any:
        """The compiled source, with config values that shape code passed as ``-D`` defines."""
        if not defines:  # the plain build, kept as an attribute once made: no key to build per call
            found = self.__dict__.get("_plain")
            if found is None:
                found = self.__dict__["_plain"] = self._library(())
            return found
        return self._library(tuple(sorted(defines.items())))

    def _library(self, key: tuple) -> Any:
        libraries = self.__dict__.setdefault("_libraries", {})  # a dict lookup per call, once built
        if key not in libraries:
            libraries[key] = build(self.read_source(self.sources[0]), self.cdef, dict(key))
        return libraries[key]
