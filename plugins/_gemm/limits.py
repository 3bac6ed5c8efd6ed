"""What a GEMM tile config must fit on the GPU: shared memory for its stages, registers for its accumulator. The
Triton GEMM and convolution plugins reject a config beyond these before compiling it."""

from __future__ import annotations

from kernelzoo.errors import UnsupportedError

# Hopper: 227 KiB of shared memory per block (opt-in), 255 registers per thread, of which the accumulator may take
# half; a config beyond these does not compile, or spills.
MAX_SHARED_BYTES = 227 * 1024
MAX_ACCUMULATORS_PER_THREAD = 128


def check_fits(element_size: int, config: dict) -> None:
    """Raise UnsupportedError unless ``config``'s stages fit shared memory and its accumulator the registers."""
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    shared = config["num_stages"] * (bm * bk + bk * bn) * element_size
    if shared > MAX_SHARED_BYTES:
        raise UnsupportedError(f"triton gemm: {config} needs {shared // 1024} KiB of shared memory at "
                               f"{element_size} bytes an element, more than the {MAX_SHARED_BYTES // 1024} KiB "
                               "a block has")
    per_thread = bm * bn // (32 * config["num_warps"])
    if per_thread > MAX_ACCUMULATORS_PER_THREAD:
        raise UnsupportedError(f"triton gemm: {config} gives each thread {per_thread} accumulators, more than "
                               f"{MAX_ACCUMULATORS_PER_THREAD} fit in registers")
