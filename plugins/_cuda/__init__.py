"""CUDA device code shared by the op families (``*.cuh``: tensor-core fragments, warpgroup MMAs, TMA and mbarriers,
the flash-attention building blocks), and what the host says of it.

``F8_TYPES``: the tag types ``wgmma.cuh`` gives 8-bit float elements, by torch dtype (the defines that pick an 8-bit
float wgmma).
"""

from __future__ import annotations

import torch

F8_TYPES = {torch.float8_e4m3fn: "kz_e4m3", torch.float8_e5m2: "kz_e5m2"}
