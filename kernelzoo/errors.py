"""Errors a user can trigger. Each subclasses the builtin a Python user would expect to catch."""

from __future__ import annotations


class KernelzooError(Exception):
    """Base of every kernelzoo error."""


class ArgumentError(KernelzooError, ValueError):
    """An argument has a wrong value or shape; the message names it, what came and what was expected."""


class DTypeError(KernelzooError, TypeError):
    """A tensor has a dtype the op (or the chosen plugin) does not take."""


class DeviceError(KernelzooError, ValueError):
    """Tensors of one call live on different devices, or on a device the plugin cannot use."""


class UnknownError(KernelzooError, KeyError):
    """An op or plugin name that is not registered; the message lists the known ones."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class UnsupportedError(KernelzooError, RuntimeError):
    """A plugin cannot run this call (not available here, or not for these inputs), with the reason."""


class CompileError(KernelzooError, RuntimeError):
    """A kernel source did not compile; the message holds the compiler's own output."""


class CudaError(KernelzooError, RuntimeError):
    """A CUDA driver or NVRTC call failed; the message names the call and the error."""


class DatabaseError(KernelzooError, RuntimeError):
    """The tuning database cannot be opened, read or written; the message names it and why."""
