"""``mytorch.save`` / ``mytorch.load``: a state dict in a safe file format (no pickled code).

Layout: 8 bytes little-endian header length, a UTF-8 JSON header ``{name: {"dtype", "shape",
"offset", "nbytes"}}``, then the tensors' bytes, each contiguous, in header order. Loading reads
the header, checks every entry, and makes each tensor from its bytes: nothing is executed.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Mapping
from typing import Any

import torch

from mytorch.tensor import Tensor

MAGIC = "mytorch-state-v1"
_DTYPES = {str(d).removeprefix("torch."): d for d in (torch.float32, torch.float16, torch.bfloat16, torch.float64,
                                                        torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool)}


def save(state: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Write ``state`` (names to mytorch or torch tensors) to ``path``."""
    header: dict[str, Any] = {"__format__": MAGIC}
    blobs, offset = [], 0
    for name, value in state.items():
        data = value.data if isinstance(value, Tensor) else value
        if not isinstance(data, torch.Tensor):
            raise TypeError(f"mytorch.save: {name!r} is a {type(value).__name__}; expected a tensor")
        dtype = str(data.dtype).removeprefix("torch.")
        if dtype not in _DTYPES:
            raise TypeError(f"mytorch.save: {name!r} has dtype {data.dtype}, which the format does not store")
        blob = data.detach().to("cpu").contiguous().view(torch.uint8).numpy().tobytes() if data.numel() else b""
        header[name] = {"dtype": dtype, "shape": list(data.shape), "offset": offset, "nbytes": len(blob)}
        blobs.append(blob)
        offset += len(blob)
    encoded = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for blob in blobs:
            f.write(blob)


def load(path: str | os.PathLike, map_location: Any = None) -> dict[str, Tensor]:
    """Read a state dict written by :func:`save` (onto ``map_location``, the CPU by default)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"mytorch.load: {path} is not a mytorch state file (too short)")
    (length,) = struct.unpack("<Q", raw[:8])
    try:
        header = json.loads(raw[8:8 + length])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"mytorch.load: {path} is not a mytorch state file ({exc})") from None
    if not isinstance(header, dict) or header.pop("__format__", None) != MAGIC:
        raise ValueError(f"mytorch.load: {path} is not a mytorch state file (no {MAGIC} header)")
    body = memoryview(raw)[8 + length:]
    device = torch.device(map_location or "cpu")
    state = {}
    for name, entry in header.items():
        dtype, shape = _DTYPES.get(entry.get("dtype")), entry.get("shape")
        start, nbytes = entry.get("offset"), entry.get("nbytes")
        if dtype is None or not isinstance(shape, list) or not isinstance(start, int) or not isinstance(nbytes, int):
            raise ValueError(f"mytorch.load: {path}: entry {name!r} is malformed: {entry}")
        count = math.prod(shape)
        itemsize = torch.empty((), dtype=dtype).element_size()
        if nbytes != count * itemsize or start < 0 or start + nbytes > len(body):
            raise ValueError(f"mytorch.load: {path}: entry {name!r} does not fit the file")
        data = torch.frombuffer(bytearray(body[start:start + nbytes]), dtype=torch.uint8) if nbytes else \
            torch.empty(0, dtype=torch.uint8)
        state[name] = Tensor(data.view(dtype).reshape(shape).to(device))
    return state
