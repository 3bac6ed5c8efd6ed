"""The base class of the ``cuda`` plugins."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from kernelzoo.backends.cuda.bindings import available
from kernelzoo.backends.cuda.compiler import compile_cubin, dtype_define
from kernelzoo.backends.cuda.launch import Kernel, load
from kernelzoo.registry import FLOATS, Availability, Implementation

# torch's current CUDA device, read at every launch, straight from its C binding (which initialises CUDA
# if need be): torch.cuda.current_device() adds a Python frame and a second initialisation test
_current_device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)


class CudaImplementation(Implementation):
    """Base of the ``cuda`` plugins: the ``.cu`` beside the module, compiled per dtype and config.

    Config entries in UPPER_CASE shape the code and become ``-D`` defines; lower-case
    entries are launch parameters the wrapper reads itself. ``T`` is the element type.
    """

    plugin: ClassVar[str] = "cuda"
    dtypes: ClassVar[Mapping[str, tuple[torch.dtype, ...]]] = {"cuda": FLOATS}
    sources: ClassVar[tuple[str, ...]] = ("cuda.cu",)

    def available(self) -> Availability:
        return Availability(*available())

    def defines(self, dtype: torch.dtype, config: Mapping[str, Any]) -> dict[str, int | float | str]:
        """The ``-D`` defines of ``config`` for ``dtype``."""
        return {"T": dtype_define(dtype), **{k: v for k, v in config.items() if k.isupper()}}

    def target(self, config: Mapping[str, Any], arch: str) -> str:
        """The target that ``config`` compiles for on a device of ``arch``: the arch itself, unless the config
        uses features of an arch-specific target (sm_90a's wgmma, for one)."""
        return arch

    def kernel(self, name: str, dtype: torch.dtype, config: Mapping[str, Any]) -> Kernel:
        """Kernel ``name`` of this plugin's source, built for ``dtype`` and ``config``, on the current device."""
        # config's items in their order: the same config in another order is another key to the same module
        key = (name, dtype, tuple(config.items()), _current_device())
        kernels = self.__dict__.setdefault("_kernels", {})  # a dict lookup per launch, once built
        if key not in kernels:
            source = self.read_source(self.sources[0])
            module = load(source, defines=self.defines(dtype, config), name=self.sources[0],
                          arch=functools.partial(self.target, config))
            kernels[key] = module.function(name)
        return kernels[key]

    def compile(self, dtype: torch.dtype, config: Mapping[str, Any], arch: str) -> bytes:
        """The cubin for a device of ``arch`` (no GPU needed): how CI checks every ``.cu`` compiles."""
        return compile_cubin(self.read_source(self.sources[0]), defines=self.defines(dtype, config),
                             arch=self.target(config, arch), name=self.sources[0])
