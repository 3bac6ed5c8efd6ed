"""The tuning worker: a subprocess that runs trials, so a crash or a hang kills only it.

Started as ``python -m kernelzoo.tuner.worker``. Protocol: JSON lines, one request on stdin,
one reply on stdout; every reply has ``ok``. The worker moves its own stdout to stderr at
start, so a kernel's ``printf`` cannot corrupt the protocol. Requests (``cmd``):

- ``hello`` {device}: ``{pid, fingerprint}`` of the device (the GPU context lives here, never
  in the tuner's parent).
- ``describe`` {op, plugin, device, dtype, shape, params}: whether the plugin can run that
  call, and the key parts: ``available, reason, supports, source_hash, bucket, flags, flops,
  bytes, shape_text, config_space``.
- ``trial`` {... as describe, config, seed, warmup, budget_ms, check}: fresh inputs from ``seed``, run,
  compare with the reference at the op's tolerance (unless ``check`` is false: a re-time of a config
  that passed it), then time; ``{times_ms, load, busy}`` (the
  machine's load over the timed runs, and why it makes the times unusable, or null) or
  ``{ok: false, kind, message, fatal}``. ``fatal`` means the device is unusable (a sticky CUDA
  error): the worker exits after replying and the parent starts a fresh one.
- ``warm`` {... as describe, config}: run the config once on inputs of the call, untimed and unchecked, so
  that its kernel is compiled (into the backends' caches on disk, which the other workers read).
- ``calibrate`` {device}: measured copy bandwidth and float32 (and on GPUs fp16/bf16) matmul rates.
- ``exit``.
"""

from __future__ import annotations

import ctypes
import dataclasses
import faulthandler
import json
import os
import signal
import sys
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import torch

from kernelzoo.calibrate import measure
from kernelzoo.db.models import Outcome
from kernelzoo.errors import CompileError, UnsupportedError
from kernelzoo.fingerprint import fingerprint
from kernelzoo.registry import Call, Implementation, Op, clone_input, copy_input_, parse_dtype, registry
from kernelzoo.timing import flush_l2, time_fn

# Errors after which a CUDA context is unusable: every later launch in it fails too.
_STICKY = ("illegal memory access", "illegal_address", "unspecified launch failure", "launch_failed",
           "misaligned address", "device-side assert", "illegal instruction", "cuda_error_assert",
           "hardware stack error", "uncorrectable ecc")
# "out of resource: shared memory" (Triton), CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES ("too many resources
# requested for launch"), CUDA_ERROR_OUT_OF_MEMORY and torch's OutOfMemoryError.
_OUT_OF_RESOURCES = ("out of resource", "out_of_resources", "outofresources", "out of memory", "out_of_memory",
                     "too many resources requested")


def _make_call(msg: dict[str, Any], op: Op, seed: int) -> Call:
    generator = torch.Generator().manual_seed(seed)
    params = msg.get("params") or {}
    device = torch.device(msg["device"])
    return op.example(tuple(msg["shape"]), parse_dtype(msg["dtype"]), device, generator, **params)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _in_space(impl: Implementation, config: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``config`` that the tuner searches."""
    return {k: v for k, v in config.items() if k in impl.config_space}


def describe(msg: dict[str, Any]) -> dict[str, Any]:
    op = registry.op(msg["op"])
    impl = registry.impl(op.name, msg["plugin"])
    availability = registry.availability(impl)
    reply: dict[str, Any] = {"ok": True, "available": availability.ok, "reason": availability.reason,
                             "source_hash": impl.source_hash, "code_files": dict(impl.code_files),
                             "config_space": {k: list(v) for k, v in impl.config_space.items()},
                             "default_config": _in_space(impl, impl.default_config),
                             "seed_configs": [_in_space(impl, impl.config(seed)) for seed in impl.tuning_seeds]}
    call = _make_call(msg, op, seed=0)
    reply.update(bucket=list(op.bucket(call)), flags=op.flags(call), flops=op.flops(call), bytes=op.bytes(call),
                 shape_text=op.shape_string(call), bucket_text=op.describe_bucket(call, op.bucket(call)))
    device = torch.device(msg["device"])
    if not availability:
        reply["supports"] = availability.reason
    elif device.type not in impl.devices():
        reply["supports"] = f"runs on {' or '.join(impl.devices()) or 'no device'} here, not {device.type}"
    else:
        reply["supports"] = impl.supports(call)
    return reply


def _check(op: Op, impl: Implementation, call: Call, config: dict[str, Any]) -> str | None:
    """Run once and compare with the reference (``Op.verify``): None if right, else what is wrong."""
    reference = op.reference(call)  # before the run: an in-place kernel overwrites its inputs
    outputs = impl.run(call, config)
    _sync(call.device)
    mismatch = op.verify(call, outputs, reference)
    return None if mismatch is None else str(mismatch)


def trial(msg: dict[str, Any]) -> dict[str, Any]:
    op = registry.op(msg["op"])
    impl = registry.impl(op.name, msg["plugin"])
    call = _make_call(msg, op, seed=int(msg["seed"]))
    config = impl.config(msg.get("config") or {})
    why = impl.supports(call)
    if why is not None:
        return _failed(Outcome.UNSUPPORTED, why)
    saved = {name: clone_input(call.inputs[name]) for name in op.inplace}

    def restore() -> None:
        for name, value in saved.items():
            copy_input_(call.inputs[name], value)

    wrong = _check(op, impl, call, config) if msg.get("check", True) else None
    if wrong is not None:
        return _failed(Outcome.WRONG_RESULT, wrong)
    # GPU time with the host's enqueue kept out, as kernelzoo bench measures: a config is chosen for what it
    # makes the GPU do (the host's per-call time hardly depends on the config; it does on the plugin)
    timing = time_fn(lambda: impl.run(call, config), call.device, warmup=int(msg.get("warmup", 3)),
                     budget_ms=float(msg.get("budget_ms", 200)), setup=restore if saved else None, hide_host=True)
    load = timing.load
    return {"ok": True, "times_ms": list(timing.times_ms), "load": dataclasses.asdict(load) if load else None,
            "busy": load.busy(call.device.type) if load else None}


def warm(msg: dict[str, Any]) -> dict[str, Any]:
    op = registry.op(msg["op"])
    impl = registry.impl(op.name, msg["plugin"])
    call = _make_call(msg, op, seed=0)
    config = impl.config(msg.get("config") or {})
    why = impl.supports(call)
    if why is not None:
        return _failed(Outcome.UNSUPPORTED, why)
    impl.run(call, config)
    _sync(call.device)
    return {"ok": True}


def hello(msg: dict[str, Any]) -> dict[str, Any]:
    device = torch.device(msg.get("device", "cpu"))
    if device.type == "cuda":
        # the timing's 256 MB L2 flush buffer, allocated before any trial, takes a segment of its own: allocated
        # in a trial, it may be carved from a larger cached block the trial has freed (torch's allocator splits
        # them), and release_cached_memory gives back only unoccupied segments
        flush_l2(device)
    return {"ok": True, "pid": os.getpid(), "fingerprint": fingerprint(msg.get("device", "cpu")).to_dict()}


def calibrate(msg: dict[str, Any]) -> dict[str, Any]:
    """Copy bandwidth (bytes read + written) and matmul rates, measured here."""
    return {"ok": True, **measure(msg["device"], float(msg.get("budget_ms", 100)))}


def _failed(kind: Outcome, message: str, fatal: bool = False) -> dict[str, Any]:
    return {"ok": False, "kind": kind.value, "message": message, "fatal": fatal}


def classify(exc: BaseException) -> dict[str, Any]:
    """A failed-trial reply for an exception raised by a config."""
    text = f"{type(exc).__name__}: {exc}"
    lower = text.lower()
    if any(s in lower for s in _STICKY):
        return _failed(Outcome.CRASH, text, fatal=True)
    if isinstance(exc, UnsupportedError):
        return _failed(Outcome.UNSUPPORTED, str(exc))
    if isinstance(exc, CompileError):
        return _failed(Outcome.COMPILE_ERROR, str(exc))
    if isinstance(exc, torch.cuda.OutOfMemoryError) or any(s in lower for s in _OUT_OF_RESOURCES):
        return _failed(Outcome.OUT_OF_RESOURCES, text)
    if type(exc).__name__ in ("CompilationError", "CompileTimeAssertionFailure"):  # triton's
        return _failed(Outcome.COMPILE_ERROR, text)
    tail = "".join(traceback.format_exception(exc)[-3:])
    return _failed(Outcome.ERROR, f"{text}\n{tail}".strip())


HANDLERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "hello": hello,
    "describe": describe,
    "trial": trial,
    "warm": warm,
    "calibrate": calibrate,
}


def handle(msg: dict[str, Any]) -> dict[str, Any]:
    """The reply to one request; exceptions become failed replies, never a dead worker."""
    handler = HANDLERS.get(msg.get("cmd", ""))
    if handler is None:
        return _failed(Outcome.ERROR, f"unknown request {msg.get('cmd')!r}; expected one of {', '.join(HANDLERS)}")
    try:
        return handler(msg)
    except Exception as exc:  # a failed config is data, reported to the tuner
        return classify(exc)


def release_cached_memory() -> None:
    """Give the GPU memory torch's allocator keeps cached back to the driver. The tuner's workers (one a plugin)
    live side by side, so a trial's cache held on to while another plugin's worker runs is memory that worker
    lacks: at attention 4x32x16384x128 fp16 the cuda worker's 34 GB left the torch worker out of memory."""
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()


PARENT_ENV = "KERNELZOO_TUNER_PID"  # the tuner's pid, set by kernelzoo.tuner.pool
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Have the kernel SIGKILL this worker when the tuner that started it dies, however it dies (a SIGKILLed tuner
    runs no cleanup): a hanging config must not outlive it. Linux only; elsewhere the tuner's close() ends it."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            return
    parent = os.environ.get(PARENT_ENV, "")
    if parent.isdigit() and os.getppid() != int(parent):  # reparented: did the tuner die before the line above?
        try:
            os.kill(int(parent), 0)
        except ProcessLookupError:
            os._exit(1)
        except PermissionError:
            pass


def main() -> None:
    die_with_parent()
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # kernel printf and print() land on stderr, never in the protocol
    sys.stdout = sys.stderr
    faulthandler.enable()  # a segfault leaves a Python traceback in the log the parent reads
    try:
        registry.load()
    except Exception as exc:  # reported to the parent, which raises it
        protocol.write(json.dumps(_failed(Outcome.ERROR, str(exc))) + "\n")
        return
    for line in sys.stdin:
        msg = json.loads(line)
        if msg.get("cmd") == "exit":
            break
        reply = handle(msg)
        release_cached_memory()  # after handle: a failed trial's traceback, holding its tensors, is gone
        protocol.write(json.dumps(reply) + "\n")
        if reply.get("fatal"):
            os._exit(3)  # the device context is broken; the parent starts a fresh worker
    sys.stderr.flush()
    os._exit(0)  # nothing left to save: skipping interpreter teardown saves ~2 s with torch and triton loaded


if __name__ == "__main__":
    main()
