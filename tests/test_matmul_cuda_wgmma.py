"""matmul's Hopper kernel (cuda plugin, WGMMA 1): which configs and calls it takes, that every specialization the
config space admits compiles for sm_90a without spills or serialized warpgroup MMAs (NVRTC, no GPU needed), and on
an sm_90 GPU its results against the float64 reference: odd and aligned sizes, batches, broadcasts, transposed
operands, both 16-bit dtypes and float32 in TF32, several configs."""

from __future__ import annotations

import itertools
import re
import zlib

import pytest
import torch
from kernelzoo_plugins._gemm.hopper import k_major
from kernelzoo_plugins.matmul import cuda as matmul_cuda

from kernelzoo.backends import cuda
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import dtype_name, registry

OP, IMPL = registry.op("matmul"), registry.impl("matmul", "cuda")
H100_SHARED = 227 * 1024
HALF_TYPES = (torch.float16, torch.bfloat16)


def wgmma(**overrides: int) -> dict:
    return IMPL.config({"WGMMA": 1, "BK": 64, **overrides})


def admitted() -> list[dict]:
    """Every WGMMA point of the config space that the kernel takes and whose stages fit the H100's shared memory."""
    out = []
    space = IMPL.config_space
    for bm, bn, stages, consumers, store in itertools.product(space["BM"], space["BN"], space["STAGES"],
                                                              space["CONSUMERS"], space["TMA_STORE"]):
        config = wgmma(BM=bm, BN=bn, STAGES=stages, CONSUMERS=consumers, TMA_STORE=store)
        try:
            if IMPL.wgmma_shape(config)[1] <= H100_SHARED:
                out.append(config)
        except UnsupportedError:
            pass
    return out


def test_the_default_stays_on_the_mma_sync_kernels():
    assert IMPL.config()["WGMMA"] == 0
    assert IMPL.target(IMPL.config(), "sm_90") == "sm_90"
    assert IMPL.target(wgmma(), "sm_90") == "sm_90a"


def test_the_tuning_seeds_are_admitted_points_of_the_space():
    configs = admitted()
    for seed in IMPL.tuning_seeds:
        assert IMPL.in_space(IMPL.config(seed)) and IMPL.config(seed) in configs


@pytest.mark.parametrize(("overrides", "match"), [
    ({"BM": 256, "BN": 256, "CONSUMERS": 2}, "256 accumulators"),
    ({"BM": 128, "BN": 256, "CONSUMERS": 1}, "256 accumulators"),
    ({"BM": 64, "CONSUMERS": 2}, "32 rows"),
    ({"WM": 32}, "WGMMA runs WM 64 only"),
    ({"BK": 32}, "WGMMA runs BK 64 only"),
])
def test_configs_the_kernel_cannot_take_are_rejected(overrides, match):
    with pytest.raises(UnsupportedError, match=match):
        IMPL.wgmma_shape(wgmma(**overrides))


def test_threads_and_shared_memory_of_a_config():
    # a producer warpgroup and two consumers; 1 KiB of alignment, 4 stages of 128·64 + 64·256 elements, 8 mbarriers
    assert IMPL.wgmma_shape(wgmma(BM=128, BN=256, STAGES=4, CONSUMERS=2)) == (384, 1024 + 4 * 384 * 128 + 64)
    assert IMPL.wgmma_shape(wgmma(BM=128, BN=128, STAGES=5, CONSUMERS=1)) == (256, 1024 + 5 * 256 * 128 + 80)
    assert IMPL.wgmma_shape(wgmma(BM=128, BN=256, STAGES=5, CONSUMERS=2))[1] > H100_SHARED
    # TMA_STORE: two 64×64 staging tiles a consumer
    assert IMPL.wgmma_shape(wgmma(BM=256, BN=128, STAGES=4, CONSUMERS=2, TMA_STORE=1)) == (
        384, 1024 + 4 * 384 * 128 + 2 * 2 * 8192 + 64)


@pytest.mark.parametrize(("a_shape", "b_shape", "dtype", "match"), [
    ((33, 64), (64, 40), torch.float32, "float32 only in TF32, which torch.backends.cuda.matmul.allow_tf32 does "
                                        "not allow"),
    ((33, 60), (60, 40), torch.float16, "a of shape (33, 60) and strides (60, 1) has neither, and K = 60"),
    ((33, 64), (64, 36), torch.bfloat16, "b of shape (64, 36) and strides (36, 1) has neither, and N = 36"),
])
def test_calls_the_kernel_cannot_take_say_why(a_shape, b_shape, dtype, match):
    call = OP.check(torch.zeros(a_shape, dtype=dtype), torch.zeros(b_shape, dtype=dtype))
    assert match in IMPL.wgmma_unsupported(call)


def test_tf32_stores_c_from_registers(monkeypatch):
    monkeypatch.setattr(matmul_cuda, "tf32_products", lambda dtype, device: True)
    call = OP.check(torch.zeros(33, 60), torch.zeros(60, 36))  # any K and N: the operands are copied K-major
    assert IMPL.wgmma_unsupported(call, wgmma(TMA_STORE=0)) is None
    assert "TMA_STORE stores 16-bit outputs" in IMPL.wgmma_unsupported(call, wgmma(TMA_STORE=1))
    many = OP.check(torch.zeros(65536, 2, 4), torch.zeros(4, 2))  # a grid z a matrix for the copies
    assert "batch of up to 65535 (one grid z each), not 65536" in IMPL.wgmma_unsupported(many)


class RecordedKernel:
    """A kernel that records its launches instead of running them."""

    def __init__(self, name: str, specialization: dict, launches: list) -> None:
        self.name, self.specialization, self.launches = name, specialization, launches

    def __call__(self, *args: object, **launch: object) -> None:
        self.launches.append((self.name, self.specialization, args))


@pytest.mark.parametrize("b_layout", ["row-major", "column-major"])
def test_tf32_runs_a_row_major_b_as_the_transposed_product(monkeypatch, b_layout):
    """A B whose rows the TMA unit reads as they lie is the kernel's column-major A (Bᵀ, loaded into registers),
    A's rows its B, M and N swapped and C stored transposed, with nothing copied; a column-major B is read through
    Bᵀ's rows as they lie, the product as written."""
    launches: list = []
    monkeypatch.setattr(IMPL, "kernel", lambda name, dtype, spec: RecordedKernel(name, spec, launches))
    monkeypatch.setattr(IMPL, "resident_blocks", lambda *args: 1)
    monkeypatch.setattr(matmul_cuda, "tensor_map", lambda t, box: (t, box))
    a = torch.randn(1, 40, 64)  # broadcast over B's batch of 2
    b = torch.randn(2, 64, 72) if b_layout == "row-major" else torch.randn(2, 72, 64).transpose(1, 2)
    config = wgmma(CONSUMERS=2)
    threads, shared = IMPL.wgmma_shape(config)
    props = type("Props", (), {"multi_processor_count": 132})()
    IMPL.run_tf32(a, b, torch.empty(2, 40, 72), 2, config, threads, shared, props)
    (name, spec, args), = launches  # one launch: no copy
    first, second = args[0], args[1]
    assert name == "matmul_wgmma" and spec["TF32"] == 1 and spec["B_COL_MAJOR"] == 1
    if b_layout == "row-major":
        assert spec["A_COL_MAJOR"] == spec["C_COL_MAJOR"] == 1
        assert first[0].data_ptr() == b.data_ptr() and first[1] == (32, matmul_cuda.TF32_BK, 1)
        assert second[0].data_ptr() == a.data_ptr() and second[1] == (matmul_cuda.TF32_BK, config["BN"], 1)
        assert args[3:9] == (72, 40, 64, 2, 1, 0)  # the kernel's M, N, K: N, M, K; its A (B) steps with z
    else:
        assert spec["A_COL_MAJOR"] == spec["C_COL_MAJOR"] == 0
        assert first[0].data_ptr() == a.data_ptr() and second[0].data_ptr() == b.data_ptr()
        assert args[3:9] == (40, 72, 64, 2, 0, 1)


@pytest.mark.parametrize(("make", "copied"), [
    (lambda: torch.zeros(2, 40, 64), False),                    # contiguous rows 256 bytes apart
    (lambda: torch.zeros(1, 40, 65), True),                     # K = 65: rows 260 bytes apart
    (lambda: torch.zeros(2, 64, 40).transpose(1, 2), True),     # column-major
    (lambda: torch.zeros(1, 40, 64).expand(3, 40, 64), True),   # a batch stride of 0: the TMA unit steps by 16s
    (lambda: torch.zeros(40 * 64 + 1)[1:].view(1, 40, 64), True),  # 4 bytes off a 16-byte address
])
def test_k_major_reads_rows_as_they_lie_or_copies_them_into_padded_lines(make, copied):
    t = make()
    rows = k_major(t)
    assert (rows.data_ptr() != t.data_ptr()) == copied
    assert rows.stride(-1) == 1 and rows.data_ptr() % 16 == 0
    assert all(s * 4 % 16 == 0 for s, n in zip(rows.stride()[:-1], rows.shape[:-1]) if n > 1)
    assert torch.equal(rows, t)


def test_tma_store_needs_rows_of_c_aligned():
    call = OP.check(half(40, 64), half(36, 64).t())  # N = 36: B read by columns, C's rows 72 bytes apart
    assert IMPL.wgmma_unsupported(call, wgmma(TMA_STORE=0)) is None
    assert "N = 36 is not a multiple of 8" in IMPL.wgmma_unsupported(call, wgmma(TMA_STORE=1))


def half(*shape: int) -> torch.Tensor:
    return torch.zeros(shape, dtype=torch.float16)


@pytest.mark.parametrize("make", [
    lambda: (half(60, 32).t(), half(60, 40)),  # K = 60: A column-major (columns 32 apart), B row-major (rows 40 apart)
    lambda: (half(32, 64), half(36, 64).t()),  # N = 36: B column-major (columns 64 apart)
], ids=["k60", "n36"])
def test_operands_are_read_by_columns_where_their_rows_would_not_be_aligned(make):
    assert IMPL.wgmma_unsupported(OP.check(*make())) is None


@pytest.mark.parametrize(("make", "columns"), [
    (lambda: half(3, 40, 72), False),                  # contiguous rows
    (lambda: half(3, 72, 40).transpose(1, 2), True),   # a batch of column-major matrices
    (lambda: half(40, 80)[:, :72], False),             # rows of a wider matrix (stride 80)
    (lambda: half(1, 40, 1), True),                    # one column: read as one row of Aᵀ
    (lambda: half(1, 1, 40), False),
])
def test_tma_view_reads_rows_or_columns_as_they_lie(make, columns):
    t = make()
    view, got = matmul_cuda.tma_view(t)
    assert got == columns
    assert view.data_ptr() == t.data_ptr() and view.stride(-1) == 1
    assert torch.equal(view.transpose(-1, -2) if columns else view, t)


@pytest.mark.parametrize("make", [
    lambda: half(40, 73)[:, :72],                     # rows 73 elements apart
    lambda: half(40 * 72 + 1)[1:].view(40, 72),       # 2 bytes past an aligned address
    lambda: half(1, 40, 72).expand(3, 40, 72),        # a batch stride of 0
    lambda: half(40, 144)[:, ::2],                    # neither dim contiguous
])
def test_tma_view_refuses_what_the_tma_unit_cannot_step_along(make):
    assert matmul_cuda.tma_view(make()) is None


@pytest.mark.parametrize("overrides", [{"CONSUMERS": 2}, {"TMA_STORE": 1}])
def test_the_hopper_kernel_s_entries_are_refused_by_the_others(overrides):
    call = OP.check(torch.zeros(8, 8, dtype=torch.float16), torch.zeros(8, 8, dtype=torch.float16))
    with pytest.raises(UnsupportedError, match="CONSUMERS and TMA_STORE are the Hopper kernel's"):
        IMPL.run(call, IMPL.config(overrides))


@pytest.mark.skipif(not cuda.compile_available()[0], reason="NVRTC not available")
@pytest.mark.parametrize("dtype", HALF_TYPES, ids=dtype_name)
@pytest.mark.parametrize("config", admitted(),
                         ids=lambda c: f"{c['BM']}x{c['BN']}-s{c['STAGES']}-c{c['CONSUMERS']}-t{c['TMA_STORE']}")
def test_every_specialization_compiles_without_spills_or_serialized_mmas(config, dtype):
    """ptxas keeps the accumulators in registers and the warpgroup MMAs asynchronous: it says so when it must
    serialize them (C7510, "wgmma.mma_async instructions are serialized") or spill."""
    compile_checked(config, dtype)


def compile_checked(config: dict, dtype: torch.dtype) -> None:
    """Compile ``config`` for ``dtype`` (sm_90a) and check ptxas's report: no warning, no spill."""
    cubin = cuda.compile_cubin(IMPL.read_source("cuda.cu"), defines=IMPL.defines(dtype, config),
                               options=["--ptxas-options=-v"], arch=IMPL.target(config, "sm_90"), name="cuda.cu")
    log = cuda.last_log()
    assert cubin[:4] == b"\x7fELF"
    assert "matmul_wgmma" in log
    assert "serialized" not in log and "arning" not in log, log
    assert set(re.findall(r"(\d+) bytes spill stores", log)) == {"0"}, log  # each kernel of the module


@pytest.mark.skipif(not cuda.compile_available()[0], reason="NVRTC not available")
@pytest.mark.parametrize("config", [c for c in admitted() if not c["TMA_STORE"]],
                         ids=lambda c: f"{c['BM']}x{c['BN']}-s{c['STAGES']}-c{c['CONSUMERS']}")
@pytest.mark.parametrize("swap", [0, 1], ids=["ab", "swapped"])
def test_every_tf32_specialization_compiles_without_spills_or_serialized_mmas(config, swap):
    """Both TF32 forms: A and B K-major by descriptor, and Cᵀ = Bᵀ·Aᵀ with Bᵀ loaded into registers."""
    compile_checked({**config, "BK": matmul_cuda.TF32_BK, "TF32": 1, "A_COL_MAJOR": swap, "B_COL_MAJOR": 1,
                     "C_COL_MAJOR": swap}, torch.float32)


@pytest.mark.skipif(not cuda.compile_available()[0], reason="NVRTC not available")
@pytest.mark.parametrize("dtype", HALF_TYPES, ids=dtype_name)
@pytest.mark.parametrize(("a_columns", "b_columns"), [(1, 0), (0, 1), (1, 1)], ids=["ta", "tb", "tab"])
@pytest.mark.parametrize("seed", range(len(IMPL.tuning_seeds)), ids=lambda i: f"seed{i}")
def test_column_major_operands_compile_without_spills_or_serialized_mmas(seed, a_columns, b_columns, dtype):
    config = {**IMPL.config(IMPL.tuning_seeds[seed]), "A_COL_MAJOR": a_columns, "B_COL_MAJOR": b_columns}
    compile_checked(config, dtype)


# --- on an sm_90 GPU ---------------------------------------------------------------------------------------------

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
on_hopper = pytest.mark.skipif(not HOPPER, reason="the WGMMA kernel runs on sm_90 (Hopper) GPUs only")
GPU_CONFIGS = [pytest.param(IMPL.config(seed), id=f"seed{i}") for i, seed in enumerate(IMPL.tuning_seeds)] + [
    pytest.param(wgmma(BM=64, BN=256, STAGES=3, CONSUMERS=1), id="64x256-s3-c1"),
    pytest.param(wgmma(BM=128, BN=64, STAGES=4, CONSUMERS=2, TMA_STORE=1), id="128x64-s4-c2-t1"),
    pytest.param(wgmma(BM=256, BN=64, STAGES=3, CONSUMERS=2), id="256x64-s3-c2"),
    pytest.param(wgmma(BM=64, BN=128, STAGES=3, CONSUMERS=1, TMA_STORE=1), id="64x128-s3-c1-t1"),
]


def check(a: torch.Tensor, b: torch.Tensor, config: dict) -> None:
    call = OP.check(a, b)
    if IMPL.wgmma_unsupported(call, config) is not None:  # TMA_STORE with N not a multiple of 8
        assert IMPL.wgmma_unsupported(call) is None and config["TMA_STORE"]
        with pytest.raises(UnsupportedError, match="TMA_STORE writes C's rows by TMA"):
            IMPL.run(call, config)
        return
    out = IMPL.run(call, config)
    mismatch = OP.verify(call, out, OP.reference(call))
    assert mismatch is None, f"{call.describe()} with {config}: {mismatch}"


@on_hopper
@pytest.mark.parametrize("dtype", HALF_TYPES, ids=dtype_name)
@pytest.mark.parametrize("config", GPU_CONFIGS)
@pytest.mark.parametrize("mnk", [(1, 8, 8), (17, 24, 40), (200, 136, 264), (1000, 1032, 72), (255, 520, 1000),
                                 (4096, 4096, 4096), (1031, 2056, 8192)], ids=lambda s: "x".join(map(str, s)))
def test_matches_the_reference(mnk, config, dtype):
    m, n, k = mnk
    g = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr(mnk).encode()))
    a = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=dtype, generator=g)
    check(a, b, config)


@on_hopper
@pytest.mark.parametrize("dtype", HALF_TYPES, ids=dtype_name)
@pytest.mark.parametrize("config", GPU_CONFIGS)
@pytest.mark.parametrize("layout", ["batched", "broadcast-a", "broadcast-b-2d", "transposed-a", "transposed-b",
                                    "transposed-ab", "transposed-b-odd-n", "transposed-batched", "sliced", "offset"])
def test_layouts_match_the_reference(layout, config, dtype):
    g = torch.Generator(device="cuda").manual_seed(zlib.crc32(layout.encode()))

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(shape, device="cuda", dtype=dtype, generator=g)

    a, b = {
        "batched": lambda: (r(3, 130, 72), r(3, 72, 264)),
        "broadcast-a": lambda: (r(1, 130, 72), r(3, 72, 264)),
        "broadcast-b-2d": lambda: (r(3, 130, 72), r(72, 264)),
        "transposed-a": lambda: (r(72, 130).t(), r(72, 264)),
        "transposed-b": lambda: (r(130, 72), r(264, 72).t()),
        "transposed-ab": lambda: (r(72, 136).t(), r(264, 72).t()),
        "transposed-b-odd-n": lambda: (r(130, 72), r(33, 72).t()),  # stores of single elements
        "transposed-batched": lambda: (r(2, 72, 136).transpose(1, 2), r(2, 264, 72).transpose(1, 2)),
        "sliced": lambda: (r(130, 80)[:, :72], r(72, 272)[:, 3:267]),  # strided rows; b copied (unaligned start)
        "offset": lambda: (r(130 * 72 + 1)[1:].view(130, 72), r(72 * 264 + 1)[1:].view(72, 264)),
    }[layout]()
    check(a, b, config)


@on_hopper
@pytest.mark.parametrize("config", GPU_CONFIGS)
def test_the_op_s_cases_match_the_reference(config):
    """The conformance suite's cases on this config, those with 16-byte aligned rows (others are refused)."""
    for case in OP.cases():
        for dtype in HALF_TYPES:
            generator = torch.Generator().manual_seed(zlib.crc32(case.id.encode()))
            args, kwargs = case.make(torch.device("cuda"), dtype, generator)
            call = OP.check(*args, **kwargs)
            if IMPL.wgmma_unsupported(call, config):
                with pytest.raises(UnsupportedError):
                    IMPL.run(call, config)
                continue
            mismatch = OP.verify(call, IMPL.run(call, config), OP.reference(call))
            assert mismatch is None, f"{case.id} {call.describe()} with {config}: {mismatch}"


@pytest.fixture
def tf32():
    """torch's TF32 switch on for the test, as a user turns it on (set_float32_matmul_precision("high"))."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    yield
    torch.backends.cuda.matmul.allow_tf32 = before


TF32_CONFIGS = [p for p in GPU_CONFIGS if not p.values[0]["TMA_STORE"]]


@on_hopper
@pytest.mark.parametrize("config", TF32_CONFIGS)
@pytest.mark.parametrize("mnk", [(1, 8, 8), (17, 24, 40), (200, 136, 263), (1000, 1033, 72), (255, 520, 1000),
                                 (4096, 4096, 4096)], ids=lambda s: "x".join(map(str, s)))
def test_tf32_matches_the_reference(mnk, config, tf32):
    m, n, k = mnk
    g = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr(mnk).encode()))
    check(torch.randn(m, k, device="cuda", generator=g), torch.randn(k, n, device="cuda", generator=g), config)


@on_hopper
@pytest.mark.parametrize("config", TF32_CONFIGS[:2])
@pytest.mark.parametrize("layout", ["batched", "broadcast-a", "transposed-a", "transposed-b", "sliced", "offset"])
def test_tf32_layouts_match_the_reference(layout, config, tf32):
    g = torch.Generator(device="cuda").manual_seed(zlib.crc32(layout.encode()))

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(shape, device="cuda", generator=g)

    a, b = {
        "batched": lambda: (r(3, 130, 72), r(3, 72, 264)),
        "broadcast-a": lambda: (r(1, 130, 72), r(3, 72, 264)),
        "transposed-a": lambda: (r(72, 130).t(), r(72, 264)),
        "transposed-b": lambda: (r(130, 72), r(264, 72).t()),  # B column-major: read as it lies
        "sliced": lambda: (r(130, 80)[:, :71], r(71, 272)[:, 3:267]),
        "offset": lambda: (r(130 * 72 + 1)[1:].view(130, 72), r(72 * 264 + 1)[1:].view(72, 264)),
    }[layout]()
    check(a, b, config)


@on_hopper
def test_k_zero_gives_zeros():
    a = torch.empty(130, 0, device="cuda", dtype=torch.float16)
    b = torch.empty(0, 72, device="cuda", dtype=torch.float16)
    out = IMPL.run(OP.check(a, b), IMPL.config(IMPL.tuning_seeds[0]))
    assert out.shape == (130, 72) and not out.any()


class FakeKernel:
    """What resident_blocks asks of a compiled kernel: its register count."""

    def __init__(self, registers: int) -> None:
        self.registers = registers

    def attributes(self) -> dict[str, int]:
        return {"registers": self.registers}


class H200Properties:
    shared_memory_per_multiprocessor = 228 * 1024


@pytest.mark.parametrize(("registers", "threads", "config", "blocks"), [
    (168, 384, wgmma(BM=128, BN=256, STAGES=4, CONSUMERS=2), 1),  # both shared memory and registers allow one
    (94, 256, wgmma(BM=128, BN=64, STAGES=3, CONSUMERS=1), 2),    # 73 KiB: three by shared memory, two by registers
    (40, 256, wgmma(BM=64, BN=64, STAGES=3, CONSUMERS=1), 4),     # 49 KiB: four by shared memory
    (158, 256, wgmma(BM=64, BN=64, STAGES=3, CONSUMERS=1), 1),    # 160·256 registers: one
])
def test_the_persistent_grid_has_as_many_blocks_an_sm_as_fit(registers, threads, config, blocks):
    shared = IMPL.wgmma_shape(config)[1]
    assert IMPL.resident_blocks(FakeKernel(registers), threads, shared, H200Properties()) == blocks
