"""The cuda attention forward's configs against calls, without a GPU: which config a call given the default
runs, that it fits, and that what the register rule admits compiles without a large spill (NVRTC, sm_90)."""

from __future__ import annotations

import re

import pytest
import torch
from kernelzoo_plugins._flash import cuda as attention_cuda
from kernelzoo_plugins.attention import cuda as forward_cuda
from kernelzoo_plugins.attention_backward import cuda as attention_backward_cuda

from kernelzoo.backends import cuda
from kernelzoo.backends.cuda import CudaImplementation
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import registry

OP, IMPL = registry.op("attention"), registry.impl("attention", "cuda")
H100_SHARED = 227 * 1024


def patch(monkeypatch, name: str, value: object) -> None:
    """Replace the family's helper ``name`` where the plugins look it up: the family module and each plugin
    module that imported it."""
    for module in (attention_cuda, forward_cuda, attention_backward_cuda):
        if hasattr(module, name):
            monkeypatch.setattr(module, name, value)


@pytest.fixture(autouse=True)
def h100_shared_memory(monkeypatch):
    """The H100's shared memory per block, which the fit check asks the device for."""
    patch(monkeypatch, "shared_limit", lambda device: H100_SHARED)


def forward_call(d: int, masked: bool, dtype: torch.dtype = torch.float16):
    q = torch.zeros((1, 2, 33, d), dtype=dtype)
    mask = {"attn_mask": torch.ones((33, 33), dtype=torch.bool)} if masked else {}
    return OP.check(q, q, q, **mask)


@pytest.mark.parametrize(("d", "masked", "warps", "q_regs"), [
    (64, False, 4, 1),   # the default itself
    (16, True, 4, 1),    # small tiles fit the masked budget too
    (128, False, 4, 0),  # 32 rows of accumulators leave no room for q's fragments
    (64, True, 8, 1),    # an attn_mask's index arithmetic: 8 warps of 16 rows
    (128, True, 8, 1),
])
def test_the_default_falls_back_where_it_does_not_fit(d, masked, warps, q_regs):
    config = IMPL.fitted(forward_call(d, masked), IMPL.config())
    assert (config["WARPS"], config["Q_REGS"]) == (warps, q_regs)


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("d", range(8, 129, 8))
def test_a_call_given_the_default_gets_a_config_that_fits(d, masked):
    call = forward_call(d, masked)
    IMPL.shared_memory(call, IMPL.fitted(call, IMPL.config()))  # raises UnsupportedError where it does not fit


def test_a_config_other_than_the_default_is_run_as_given():
    call = forward_call(128, masked=False)
    config = IMPL.config({"BLOCK_N": 128})  # 4 warps, q in registers: 320 registers of tile state at 128
    assert IMPL.fitted(call, config) == config
    with pytest.raises(UnsupportedError, match="registers of tile state"):
        IMPL.shared_memory(call, config)


def ptxas_report(impl: CudaImplementation, defines: dict, arch: str = "sm_90",
                 dtype: str = "kz_half") -> tuple[bytes, str]:
    """The cubin of ``impl``'s cuda.cu compiled with ``defines``, and ptxas's report of it (-v: registers,
    spills, warnings)."""
    cubin = cuda.compile_cubin(impl.read_source("cuda.cu"), defines={"T": dtype, **defines},
                               options=["--ptxas-options=-v"], arch=arch, name="cuda.cu")
    return cubin, cuda.last_log()


def spills(log: str) -> list[int]:
    """The spill-store bytes of each kernel in a ptxas report."""
    return [int(n) for n in re.findall(r"(\d+) bytes spill stores", log)]


def spill_bytes(defines: dict) -> int:
    return max(spills(ptxas_report(IMPL, defines)[1]))


@pytest.mark.skipif(not cuda.compile_available()[0], reason="NVRTC not available")
@pytest.mark.parametrize(("d", "masked"), [(64, False), (128, False), (64, True), (128, True)])
def test_the_default_that_a_call_runs_compiles_without_a_large_spill(d, masked):
    """The register rule (STATE_REGISTERS) keeps what it admits near no spill. NVRTC 13.5 gives 0-16 bytes (16 at
    head dim 128 without a mask, FlashAttention-2's tiles); the test allows 64, against hundreds past the rule."""
    call = forward_call(d, masked)
    defines = attention_cuda.call_defines(call, IMPL.fitted(call, IMPL.config()))
    assert spill_bytes({k: v for k, v in defines.items() if k.isupper()}) <= 64


# --- the backward's SPLIT layout (pairs of warps, a head-dim half each) ------------------------------------------

BWD_OP, BWD = registry.op("attention_backward"), registry.impl("attention_backward", "cuda")


def backward_call(d: int):
    q = torch.zeros((1, 2, 33, d), dtype=torch.float16)
    return BWD_OP.check(q, q, q, q, torch.zeros((1, 2, 33)), q)


@pytest.mark.parametrize(("d", "expected"), [
    (64, {"WARPS": 4, "BLOCK_INNER": 32}),  # the tuner's choice at every head-dim-64 key
    (56, {"WARPS": 4, "BLOCK_INNER": 32}),  # compiled for head dim 64
    (128, {"SPLIT": 1}),                    # and at every head-dim-128 key
    (96, {}),                               # no entry: the default itself
])
def test_a_backward_given_the_default_runs_its_head_dims_tuned_shape(d, expected):
    assert BWD.fitted(backward_call(d), BWD.config()) == BWD.config(expected)
    assert BWD.fitted(backward_call(d), BWD.config({"STAGES": 3})) == BWD.config({"STAGES": 3})  # as given


def test_the_split_backward_takes_head_dims_that_are_multiples_of_32():
    config = BWD.config({"SPLIT": 1})
    shared = BWD.shared_memory(backward_call(128), config)
    # its Pᵀ and dSᵀ tiles (128 keys × 72 columns of 2 bytes each) come on top of the default's tiles and dSᵀ
    assert shared["attention_backward_dkdv_dq"] == BWD.shared_memory(backward_call(128), BWD.config())[
        "attention_backward_dkdv_dq"] + 2 * 128 * 72
    for d in (80, 112):
        with pytest.raises(UnsupportedError, match="multiples of 32"):
            BWD.shared_memory(backward_call(d), config)


@pytest.mark.skipif(not cuda.compile_available()[0], reason="NVRTC not available")
@pytest.mark.parametrize("d", [64, 128])
def test_the_split_backward_compiles_without_a_large_spill(d):
    """NVRTC 13.5 (CI's wheel) gives 0 bytes without a mask at head dims 64 and 128 (8 with an additive mask at
    128); NVRTC 13.0, with which the kernels were timed, 64 bytes at 128."""
    defines = attention_cuda.call_defines(backward_call(d), BWD.config({"SPLIT": 1}))
    _, log = ptxas_report(BWD, defines)
    assert "attention_backward_dkdv_dq" in log
    most = 16 if cuda.nvrtc_version() >= (13, 5) else 64
    assert max(spills(log)) <= most


# --- the warpgroup-MMA forward (WGMMA 1, sm_90a) ------------------------------------------------------------------

@pytest.mark.parametrize(("d", "masked", "expected"), [
    (64, False, {"WARPS": 12, "BLOCK_M": 192, "BLOCK_N": 128, "STAGES": 3, "PRODUCER": 3, "OVERLAP": 1}),
    # head dim 64 with a mask: three consumer warpgroups spill, one runs
    (56, True, {"WARPS": 4, "BLOCK_M": 64, "BLOCK_N": 128, "STAGES": 3, "PRODUCER": 2, "OVERLAP": 1}),
    (128, False, {"WARPS": 8, "BLOCK_N": 128, "STAGES": 3, "PRODUCER": 3, "OVERLAP": 1}),
    (128, True, {"WARPS": 8, "BLOCK_N": 64, "STAGES": 3, "PRODUCER": 2, "OVERLAP": 1}),  # 128-key scores overflow
])                                                                                        # the masked budget
def test_on_an_sm90_device_the_default_runs_the_warpgroup_mmas(monkeypatch, d, masked, expected):
    patch(monkeypatch, "sm90", lambda device: True)
    config = IMPL.fitted(forward_call(d, masked), IMPL.config())
    assert config == IMPL.config({"WGMMA": 1, **expected})


@pytest.mark.parametrize("d", [80, 96])
def test_elsewhere_the_default_is_the_mma_sync_kernel(monkeypatch, d):
    patch(monkeypatch, "sm90", lambda device: True)  # head dims the wgmma tiles do not take
    assert IMPL.fitted(forward_call(d, False), IMPL.config())["WGMMA"] == 0
    patch(monkeypatch, "sm90", lambda device: False)  # and any head dim off sm_90
    assert IMPL.fitted(forward_call(64, False), IMPL.config()) == IMPL.config()


@pytest.mark.parametrize(("overrides", "why"), [
    ({"WARPS": 4}, "BLOCK_M = 16·WARPS"),             # 128 rows over one warpgroup
    ({"WARPS": 8, "Q_REGS": 0}, "Q_REGS 1"),          # the same kernel as Q_REGS 1: not a second point
    ({"WGMMA": 0, "WARPS": 12, "BLOCK_M": 192}, "4 or 8 warps"),  # 12 warps are the warpgroup kernel's only
    ({"WGMMA": 0, "WARPS": 4, "PRODUCER": 1}, "warpgroup kernel's"),  # so is the producer warp
    ({"WGMMA": 0, "WARPS": 4, "OVERLAP": 1}, "warpgroup kernel's"),   # and FlashAttention-3's order,
    ({"WARPS": 4, "BLOCK_M": 64, "OVERLAP": 1}, "PRODUCER's mbarriers"),  # which hands stages back by mbarriers
])
def test_the_wgmma_configs_outside_its_shape_are_rejected(overrides, why):
    with pytest.raises(UnsupportedError, match=re.escape(why)):
        IMPL.shared_memory(forward_call(64, False), IMPL.config({"WGMMA": 1, **overrides}))
    with pytest.raises(UnsupportedError, match="head dims"):
        IMPL.shared_memory(forward_call(96, False), IMPL.config({"WGMMA": 1, "WARPS": 8}))


def test_the_wgmma_tiles_are_swizzled_without_padding():
    config = IMPL.config({"WGMMA": 1, "WARPS": 8, "BLOCK_N": 128, "STAGES": 3})
    # q (128 rows) and 3 stages of K and V (128 keys each), 2 bytes × 128 columns, and 1024 bytes to align them
    assert IMPL.shared_memory(forward_call(128, False), config) == {"attention_forward": 1024 + 2 * 128 * (128 + 768)}
    assert IMPL.target(config, "sm_90") == "sm_90a" and IMPL.target(IMPL.config(), "sm_90") == "sm_90"


@pytest.mark.skipif(not cuda.compile_available()[0], reason="NVRTC not available")
@pytest.mark.parametrize("dtype", ["kz_half", "kz_bf16"])
@pytest.mark.parametrize(("d", "masked", "overrides"), [
    (64, False, {"WARPS": 4, "BLOCK_M": 64, "BLOCK_N": 128}), (128, False, {"WARPS": 8, "BLOCK_N": 128}),
    (128, False, {"WARPS": 12, "BLOCK_M": 192, "BLOCK_N": 128}),
    (128, True, {"WARPS": 8, "BLOCK_N": 64}), (64, False, {"WARPS": 8, "BLOCK_N": 32}),
])
def test_the_wgmma_kernel_compiles_for_sm90a_without_spills_or_serialized_mmas(dtype, d, masked, overrides):
    """ptxas keeps the wgmma chains asynchronous (no 'wgmma.mma_async instructions are serialized' warning) and the
    tile state in registers: 76-188 registers and no spill through NVRTC 13.0 and 13.5 (192 rows: 158 of the 170
    that 12 warps leave a thread)."""
    call, config = forward_call(d, masked), IMPL.config({"WGMMA": 1, **overrides})
    IMPL.shared_memory(call, config)
    defines = {k: v for k, v in attention_cuda.call_defines(call, config).items() if k.isupper()}
    cubin, log = ptxas_report(IMPL, defines, "sm_90a", dtype)
    assert cubin[:4] == b"\x7fELF" and "'attention_forward' for 'sm_90a'" in log
    assert "serialized" not in log
    assert spills(log) == [0]


def test_the_producer_warp_takes_up_to_two_warpgroups_and_a_pair_of_mbarriers_a_stage():
    call = forward_call(128, False)
    config = IMPL.config({"WGMMA": 1, "WARPS": 8, "BLOCK_N": 128, "STAGES": 3, "PRODUCER": 1})
    assert IMPL.shared_memory(call, config) == {"attention_forward": 1024 + 2 * 128 * (128 + 768) + 16 * 3}
    with pytest.raises(UnsupportedError, match="up to two warpgroups"):
        IMPL.shared_memory(call, IMPL.config({"WGMMA": 1, "WARPS": 12, "BLOCK_M": 192, "PRODUCER": 1}))


@pytest.mark.skipif(not cuda.compile_available()[0], reason="NVRTC not available")
@pytest.mark.parametrize(("d", "producer", "overlap"), [
    (64, 1, 0), (128, 1, 0), (64, 2, 0), (128, 2, 0), (64, 2, 1), (64, 3, 1), (128, 3, 1)])
def test_the_producer_warp_kernel_compiles_for_sm90a(d, producer, overlap):
    """NVRTC 13.0 and 13.5: 139-168 registers and no spill, the wgmma chains asynchronous (cp.async or TMA; in
    FlashAttention-3's order too, where ptxas serializes them unless every group of the loop is committed
    unconditionally)."""
    builds_cleanly(forward_call(d, False),
                   IMPL.config({"WGMMA": 1, "WARPS": 8, "BLOCK_N": 128, "PRODUCER": producer, "OVERLAP": overlap}))


def builds_cleanly(call, config: dict) -> None:
    """``config`` fits ``call``, and ptxas builds it for sm_90a with the wgmma chains asynchronous and no spill."""
    IMPL.shared_memory(call, config)
    defines = {k: v for k, v in attention_cuda.call_defines(call, config).items() if k.isupper()}
    _, log = ptxas_report(IMPL, defines, "sm_90a")
    assert "serialized" not in log
    assert spills(log) == [0]


@pytest.mark.skipif(not cuda.compile_available()[0], reason="NVRTC not available")
@pytest.mark.parametrize(("d", "block_n"), [(64, 128), (64, 64), (128, 64)])
def test_three_consumer_warpgroups_compile_with_the_registers_the_producer_warpgroup_moves(d, block_n):
    """16 warps start with 128 registers a thread; the producer warpgroup keeps 24 and the three consumer
    warpgroups get 160: enough for FlashAttention-3's order without spills at head dim 64, and at 128 with 64-key
    tiles."""
    builds_cleanly(forward_call(d, False), IMPL.config({"WGMMA": 1, "WARPS": 12, "BLOCK_M": 192, "BLOCK_N": block_n,
                                                        "STAGES": 3, "PRODUCER": 3, "OVERLAP": 1}))


@pytest.mark.skipif(not cuda.compile_available()[0], reason="NVRTC not available")
@pytest.mark.parametrize("kind", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("causal", [False, True])
def test_three_consumer_warpgroups_compile_for_fp8_at_head_dim_64(kind, causal):
    """FP8 calls at head dim 64 run float16 products on the 16-bit tiles with the descales applied in the kernel:
    the three-warpgroup default builds without spills there too."""
    dtype = getattr(torch, kind)
    q = torch.zeros((1, 2, 33, 64)).to(dtype)
    call = OP.check(q, q, q, causal=causal)
    config = IMPL.config(IMPL.hopper_defaults[64][0])
    IMPL.shared_memory(call, config)
    defines = IMPL.defines(dtype, {**attention_cuda.call_defines(call, config), "SCALE_POSITIVE": 0})
    _, log = ptxas_report(IMPL, {k: v for k, v in defines.items() if k != "T"}, "sm_90a", defines["T"])
    assert "'attention_forward' for 'sm_90a'" in log and "serialized" not in log
    assert spills(log) == [0]


def test_three_consumer_warpgroups_refuse_what_spills_in_their_registers():
    """68 bytes a thread spill with an attn_mask at head dim 64 (NVRTC 13.5), 336 in FlashAttention-3's order with
    128-key tiles at head dim 128."""
    config = IMPL.config({"WGMMA": 1, "WARPS": 12, "BLOCK_M": 192, "BLOCK_N": 128, "STAGES": 2, "PRODUCER": 3,
                          "OVERLAP": 1})
    for call in (forward_call(128, False), forward_call(64, True)):
        with pytest.raises(UnsupportedError, match="spill"):
            IMPL.shared_memory(call, config)
    assert IMPL.shared_memory(forward_call(64, False), config)["attention_forward"] > 0


def test_flashattention3_s_order_at_head_dim_128_takes_the_producer_warpgroup_s_registers():
    config = IMPL.config({"WGMMA": 1, "WARPS": 8, "BLOCK_N": 128, "STAGES": 3, "OVERLAP": 1})
    with pytest.raises(UnsupportedError, match="PRODUCER 3 moves"):
        IMPL.shared_memory(forward_call(128, False), {**config, "PRODUCER": 2})
    assert IMPL.shared_memory(forward_call(128, False), {**config, "PRODUCER": 3})["attention_forward"] > 0
    # 156 registers at head dim 64
    assert IMPL.shared_memory(forward_call(64, False), {**config, "PRODUCER": 2})["attention_forward"] > 0


def test_where_tensor_maps_cannot_launch_the_default_runs_a_config_without_tma(monkeypatch):
    """A driver without cuFuncGetParamInfo (before CUDA 12.4) cannot pack a tensor map where the kernel reads it:
    the TMA producers are refused, and the default at head dim 128 runs the next Hopper default."""
    patch(monkeypatch, "sm90", lambda device: True)
    patch(monkeypatch, "tma_unavailable", lambda device: "the driver has no cuFuncGetParamInfo")
    with pytest.raises(UnsupportedError, match="loads by TMA"):
        IMPL.shared_memory(forward_call(128, False), IMPL.config({"WGMMA": 1, "WARPS": 8, "PRODUCER": 2}))
    config = IMPL.fitted(forward_call(128, False), IMPL.config())
    assert config == IMPL.config({"WGMMA": 1, "WARPS": 12, "BLOCK_M": 192, "BLOCK_N": 128})


# --- the backward's warpgroup-MMA dK/dV pass (WGMMA 1, sm_90a) ---------------------------------------------------

@pytest.fixture
def on_sm90(monkeypatch):
    """An sm_90 device, as both plugins see it (the backward imports sm90 by name)."""
    for module in (attention_cuda, attention_backward_cuda):
        monkeypatch.setattr(module, "sm90", lambda device: True)


@pytest.mark.parametrize(("d", "expected"), [
    (64, {"WGMMA": 1, "WARPS": 4, "BLOCK_OUTER": 64, "STAGES": 3}),  # one warpgroup of 64 keys
    (56, {"WGMMA": 1, "WARPS": 4, "BLOCK_OUTER": 64, "STAGES": 3}),  # compiled for head dim 64
    (128, {"WGMMA": 1, "STAGES": 3}),                                # two
    (96, {}),                                                        # not a wgmma head dim: the default
])
def test_on_an_sm90_device_the_backward_default_runs_the_warpgroup_mmas(on_sm90, d, expected):
    assert BWD.fitted(backward_call(d), BWD.config()) == BWD.config(expected)


@pytest.mark.parametrize(("overrides", "why"), [
    ({"BLOCK_OUTER": 64}, "BLOCK_OUTER = 16·WARPS"),  # 8 warps are two warpgroups of 64 keys
    ({"BLOCK_INNER": 32}, "64-row steps"),            # the dQ product's m64
    ({"DQ": "pass"}, "atomic dQ"),                    # the dQ pass is the mma.sync kernel's
    ({"SPLIT": 1}, "SPLIT 0"),
])
def test_the_backward_wgmma_configs_outside_its_shape_are_rejected(on_sm90, overrides, why):
    with pytest.raises(UnsupportedError, match=re.escape(why)):
        BWD.shared_memory(backward_call(64), BWD.config({"WGMMA": 1, **overrides}))
    with pytest.raises(UnsupportedError, match="head dims"):
        BWD.shared_memory(backward_call(96), BWD.config({"WGMMA": 1}))


def test_the_backward_wgmma_tiles_and_dq_share_fit_the_h100(on_sm90):
    config = BWD.config({"WGMMA": 1, "STAGES": 3})
    # 1024 to align; k, v (128 rows) and 3 stages of q and dO (64 rows) swizzled, 2 bytes × 128 columns; dSᵀ
    # (128 keys × 64 queries); lse and delta (3 × 64 floats each); a step's dQ (64 × 128 floats)
    shared = 1024 + 2 * 128 * (2 * 128 + 6 * 64) + 2 * 128 * 64 + 8 * 3 * 64 + 4 * 64 * 128
    assert BWD.shared_memory(backward_call(128), config)["attention_backward_dkdv_dq"] == shared <= H100_SHARED
    assert BWD.target(config, "sm_90") == "sm_90a" and BWD.target(BWD.config(), "sm_90") == "sm_90"


@pytest.mark.skipif(not cuda.compile_available()[0], reason="NVRTC not available")
@pytest.mark.parametrize("dtype", ["kz_half", "kz_bf16"])
@pytest.mark.parametrize(("d", "warps", "masked"), [(64, 4, False), (64, 8, False), (128, 8, False), (128, 8, True)])
def test_the_backward_wgmma_kernel_compiles_for_sm90a_without_serialized_mmas(dtype, d, warps, masked):
    """ptxas keeps the wgmma chains asynchronous and the tile state in registers (2 stages): 202-255 registers, no
    spill through NVRTC 13.5, 4 bytes with an additive mask at head dim 128 through 13.0."""
    defines = {**attention_cuda.call_defines(backward_call(d),
                                             BWD.config({"WGMMA": 1, "WARPS": warps, "BLOCK_OUTER": 16 * warps})),
               **({"MASK": 1, "MASK_T": "float"} if masked else {})}
    cubin, log = ptxas_report(BWD, defines, "sm_90a", dtype)
    assert cubin[:4] == b"\x7fELF" and "'attention_backward_dkdv_dq' for 'sm_90a'" in log
    assert "serialized" not in log
    assert max(spills(log)) <= 16


@pytest.mark.skipif(not cuda.compile_available()[0], reason="NVRTC not available")
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("d", [64, 128])
def test_the_backward_hopper_defaults_compile_for_sm90a_without_serialized_mmas(d, masked):
    """The configs a call given the default runs on an sm_90 device (3 stages): 210-255 registers, no spill but
    with an additive mask at head dim 128, 60 bytes through NVRTC 13.5 and 64 through 13.0."""
    config = BWD.config(BWD.hopper_defaults[d])
    defines = {**attention_cuda.call_defines(backward_call(d), config),
               **({"MASK": 1, "MASK_T": "float"} if masked else {})}
    _, log = ptxas_report(BWD, defines, "sm_90a")
    assert "serialized" not in log
    assert max(spills(log)) <= (64 if masked and d == 128 else 0)


@pytest.mark.skipif(not cuda.compile_available()[0], reason="NVRTC not available")
@pytest.mark.parametrize(("kind", "causal", "masked", "overrides"), [
    ("float8_e4m3fn", False, False, {}), ("float8_e5m2", True, False, {}),
    ("float8_e4m3fn", False, True, {"BLOCK_N": 64, "PRODUCER": 2}),
    ("float8_e4m3fn", False, False, {"WARPS": 12, "BLOCK_M": 192, "PRODUCER": 0, "OVERLAP": 0}),
    ("float8_e4m3fn", True, False, {"WARPS": 4, "BLOCK_M": 64, "PRODUCER": 2}),
])
def test_the_fp8_kernel_compiles_for_sm90a_without_spills_or_serialized_mmas(kind, causal, masked, overrides):
    """The FP8 forward (8-bit Q·Kᵀ, float16 P·V): 165-200 registers and no spill through NVRTC 13.5, the wgmma
    chains asynchronous."""
    dtype = getattr(torch, kind)
    q = torch.zeros((1, 2, 33, 128)).to(dtype)
    mask = {"attn_mask": torch.ones((33, 33), dtype=torch.bool)} if masked else {}
    call = OP.check(q, q, q, causal=causal, **mask)
    config = IMPL.config({"WGMMA": 1, "WARPS": 8, "BLOCK_N": 128, "STAGES": 3, "PRODUCER": 3, "OVERLAP": 1,
                          **overrides})
    IMPL.shared_memory(call, config)
    defines = IMPL.defines(dtype, {**attention_cuda.call_defines(call, config), "SCALE_POSITIVE": 0})
    cubin, log = ptxas_report(IMPL, {k: v for k, v in defines.items() if k != "T"}, "sm_90a", defines["T"])
    assert cubin[:4] == b"\x7fELF" and "'attention_forward' for 'sm_90a'" in log
    assert "serialized" not in log
    assert spills(log) == [0]
