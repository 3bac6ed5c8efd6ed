"""The keys programs called without an exact tuned winner (``kernelzoo tune --pending``), and the example keywords
that rebuild a called key at its shape.

A call's parameters are recorded as the op's ``check`` normalised them (``layer_norm``'s ``normalized_shape``,
``embedding_backward``'s ``num_weights``, a reduction's ``dim``). Some of them the op's ``example`` derives from the
shape itself and does not take, or passes on by itself: :func:`example_params` keeps the others.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from kernelzoo.registry import Op, parse_dtype


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, default=repr) == json.dumps(b, sort_keys=True, default=repr)


def _build(spec: Op, shape: Sequence[Any], dtype: torch.dtype, params: Mapping[str, Any]) -> Any:
    """The example call, on the meta device where the op's checks allow it (no memory, no time), else the CPU."""
    try:
        with torch.device("meta"):
            return spec.example(shape, dtype, "meta", torch.Generator().manual_seed(0), **params)
    except TypeError:
        raise
    except Exception:  # checks that read values (indices in range, a scalar's item) need real tensors
        return spec.example(shape, dtype, "cpu", torch.Generator().manual_seed(0), **params)


def example_params(spec: Op, shape: Sequence[Any], dtype: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Those of a called key's ``params`` that ``spec.example(shape, ...)`` takes and does not derive itself."""
    signature = inspect.signature(spec.example)
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values()):
        return {k: v for k, v in params.items() if k in signature.parameters}
    kept = dict(params)
    try:
        _build(spec, shape, parse_dtype(dtype), kept)
        return kept
    except TypeError:  # a keyword the example passes itself (embedding_backward's num_weights)
        pass
    own = _build(spec, shape, parse_dtype(dtype), {}).params
    return {k: v for k, v in kept.items() if not (k in own and _same(own[k], v))}
