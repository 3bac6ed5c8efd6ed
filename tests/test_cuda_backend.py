"""The raw CUDA backend: compiling and caching run wherever NVRTC is installed; launches need a GPU."""

from __future__ import annotations

import struct
import types

import pytest
import torch

from kernelzoo.backends import cuda

_ok, _why = cuda.compile_available()
if not _ok:
    pytest.skip(f"NVRTC not available: {_why}", allow_module_level=True)

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
DTYPES = [torch.float32, torch.float16, torch.bfloat16]

CONVERT = r"""
extern "C" __global__ void twice(const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = kz_from_float<T>(2.0f * kz_to_float(x[i]));
}
extern "C" __global__ void round_trip(const float* x, T* y, float* back, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) { y[i] = kz_from_float<T>(x[i]); back[i] = kz_to_float(y[i]); }
}
extern "C" __global__ void pairs(const kz_h2* x, kz_bf2* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float2 v = kz_to_float2(x[i]);
    y[i] = kz_from_float2<kz_bf2>(make_float2(v.x, fminf(v.y, KZ_INF)));
  }
}
"""


# `late` writes x[i] = i + 1 after spinning for `spin` clock cycles, having let its dependent start at once;
# `copy`, launched as that dependent, waits for it and copies x
DEPENDENT = r"""
extern "C" __global__ void late(int* x, int n, long long spin) {
  kz_launch_dependents();
  const long long start = clock64();
  while (clock64() - start < spin) {
  }
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] = i + 1;
}
extern "C" __global__ void copy(const int* x, int* y, int n) {
  kz_wait_prior_grids();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = x[i];
}
"""


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """A private disk cache and an empty memory cache for every test."""
    monkeypatch.setenv("KERNELZOO_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cuda.compiler, "_cubins", {})
    return tmp_path / "cuda"


# ----------------------------------------------------------------------------------------- no GPU needed


def test_nvrtc_found():
    assert cuda.nvrtc_library()
    major, minor = cuda.nvrtc_version()
    assert major >= 11 and minor >= 0


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_compile_prelude_types(arch, dtype):
    cubin = cuda.compile_cubin(CONVERT, defines={"T": cuda.dtype_define(dtype)}, arch=arch)
    assert len(cubin) > 64 and cubin.startswith(b"\x7fELF")


def test_second_compile_is_a_cache_hit(cache_dir, monkeypatch):
    first = cuda.compile_cubin(CONVERT, defines={"T": "kz_half"}, arch="sm_90")
    assert [p.suffix for p in cache_dir.iterdir()] == [".cubin"]  # no .tmp left, no log for a clean compile

    def no_compile(*args, **kwargs):
        raise AssertionError("NVRTC was called on a cache hit")

    monkeypatch.setattr(cuda.compiler, "_nvrtc_compile", no_compile)
    assert cuda.compile_cubin(CONVERT, defines={"T": "kz_half"}, arch="sm_90") == first  # from memory
    cuda.compiler._cubins.clear()
    assert cuda.compile_cubin(CONVERT, defines={"T": "kz_half"}, arch="sm_90") == first  # from disk
    with pytest.raises(AssertionError):  # anything else in the key is a miss
        cuda.compile_cubin(CONVERT, defines={"T": "kz_bf16"}, arch="sm_90")
    with pytest.raises(AssertionError):
        cuda.compile_cubin(CONVERT, defines={"T": "kz_half"}, arch="sm_80")


def test_syntax_error_raises_compile_error_with_the_log():
    source = 'extern "C" __global__ void broken(float* x) {\n  x[0] = 1.0f\n  x[1] = 2.0f;\n}\n'
    with pytest.raises(cuda.CompileError) as info:
        cuda.compile_cubin(source, arch="sm_90", options=["-lineinfo"], name="broken.cu")
    message = str(info.value)
    assert "broken.cu(3)" in message  # the line in `source`, not shifted by the prelude
    assert 'expected a ";"' in message
    assert "sm_90" in message and "-lineinfo" in message


def test_bad_option_raises_compile_error():
    with pytest.raises(cuda.CompileError, match="sm_10"):
        cuda.compile_cubin("__global__ void k() {}", arch="sm_10")


def test_warnings_are_kept_in_the_log_also_from_the_cache():
    source = 'extern "C" __global__ void k(float* x) { int unused = 1; x[0] = 0.0f; }'
    cuda.compile_cubin(source, arch="sm_90")
    assert "never referenced" in cuda.last_log()
    cuda.compile_cubin("__global__ void clean() {}", arch="sm_90")
    assert cuda.last_log() == ""
    cuda.compiler._cubins.clear()
    cuda.compile_cubin(source, arch="sm_90")
    assert "never referenced" in cuda.last_log()


def test_defines_are_checked_and_reach_the_source():
    source = "#if N != 3 || !FLAG\n#error defines lost\n#endif\n__global__ void k() {}\n"
    assert cuda.compile_cubin(source, defines={"N": 3, "FLAG": True}, arch="sm_90").startswith(b"\x7fELF")
    with pytest.raises(cuda.CompileError, match="defines lost"):
        cuda.compile_cubin(source, defines={"N": 4, "FLAG": True}, arch="sm_90")
    with pytest.raises(ValueError, match="identifier"):
        cuda.compile_cubin(source, defines={"N-1": 3}, arch="sm_90")


def test_dtype_define():
    assert [cuda.dtype_define(d) for d in DTYPES] == ["float", "kz_half", "kz_bf16"]
    with pytest.raises(TypeError):
        cuda.dtype_define(torch.int8)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answer on a machine without a GPU")
def test_available_says_why_not():
    ok, reason = cuda.available()
    assert ok is False and reason


def test_launch_config_structs_have_the_driver_s_layout():
    """cuLaunchKernelEx reads these structs as cuda.h lays them out (CUDA 12 and 13): an attribute is a 4-byte
    id, padding, and a 64-byte union at offset 8; the config's stream, attributes and count follow 7 uints."""
    ffi = cuda.bindings._ffi
    assert ffi.sizeof("CUlaunchAttribute") == 72 and ffi.offsetof("CUlaunchAttribute", "value") == 8
    assert ffi.sizeof("CUlaunchConfig") == 56
    assert [ffi.offsetof("CUlaunchConfig", f) for f in ("sharedMemBytes", "hStream", "attrs", "numAttrs")] == \
        [24, 32, 40, 48]
    assert cuda.launch._DEPENDENT.id == 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert cuda.launch._DEPENDENT.value.programmaticStreamSerializationAllowed == 1


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_dependent_launch_helpers_compile_everywhere(arch):
    """griddepcontrol is sm_90's; before it the helpers compile to nothing."""
    cubin = cuda.compile_cubin(DEPENDENT, arch=arch)
    assert cubin.startswith(b"\x7fELF")


def test_launch_arguments_are_checked_before_the_driver():
    kernel = cuda.Kernel(types.SimpleNamespace(device=0), "k", None)  # type: ignore[arg-type]
    kernel(torch.zeros(1), grid=0, block=128)  # an empty grid launches nothing
    with pytest.raises(ValueError, match="not on a CUDA device"):
        kernel(torch.zeros(1), grid=1, block=1)
    with pytest.raises(OverflowError, match="I64"):
        kernel(2**31, grid=1, block=1)
    with pytest.raises(TypeError, match="str"):
        kernel("x", grid=1, block=1)
    with pytest.raises(ValueError, match="grid"):
        kernel(grid=(1, 1, 1, 1), block=1)


def test_launch_arguments_are_packed_as_a_c_struct_of_them():
    """The parameter buffer handed to cuLaunchKernel has each argument where a C struct of the kernel's
    parameter types puts it (what the driver reads), padding included."""
    import cffi
    import numpy as np

    ffi = cffi.FFI()
    ffi.cdef("struct params { int a; unsigned long long p; float f; long long n; signed char c; double d;"
             " short h; unsigned long long none; _Bool b; int flag; };")
    args = (7, None, 0.5, cuda.I64(-(2**40)), np.int8(-3), np.float64(0.25), np.int16(-300), None,
            np.bool_(True), True)
    data, layout = cuda.launch._pack(args, {})
    assert len(data) == layout.size[0] <= ffi.sizeof("struct params")
    padded = bytearray(data) + bytes(ffi.sizeof("struct params") - len(data))
    view = ffi.cast("struct params *", ffi.from_buffer(padded))
    assert (view.a, view.p, view.f, view.n, view.c, view.d, view.h, view.none, view.b, view.flag) == \
        (7, 0, 0.5, -(2**40), -3, 0.25, -300, 0, True, 1)


def test_a_float_past_float32_s_range_is_packed_as_inf_as_c_converts_it():
    import struct

    data, layout = cuda.launch._pack((1e40, -1e39, 2.5), {})
    assert struct.unpack(layout.struct.format, data) == (float("inf"), float("-inf"), 2.5)


def test_a_second_launch_of_other_values_reuses_the_layout():
    layouts = {}  # a kernel's cache
    first, layout = cuda.launch._pack((1, 2.0, cuda.I64(3)), layouts)
    second, again = cuda.launch._pack((4, 5.0, cuda.I64(6)), layouts)
    assert again is layout and first != second
    assert cuda.launch._pack((1, 2.0, 3), layouts)[1] is not layout  # an int where an I64 was: another layout


# ------------------------------------------------------------------------------------------- GPU needed


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def test_a_launch_with_a_tensor_map_packs_each_argument_at_the_kernel_s_offset():
    """Offsets as cuFuncGetParamInfo gives them for (long long, int, map, float, map) on sm_90: a map 64-byte
    aligned in the constant bank, whose parameters start 16 bytes past a multiple of 64 (offsets 48 and 176)."""
    first, second = cuda.TensorMap(bytes(range(128))), cuda.TensorMap(bytes(128))
    params = [(0, 8), (8, 4), (48, 128), (176, 4), (240, 128)]
    data, layout = cuda.launch._pack((cuda.I64(5), 3, first, 2.5, second), {}, lambda passed: params)
    assert layout.size[0] == len(data) == 368
    assert data[:12] == struct.pack("<qi", 5, 3) and data[48:176] == bytes(range(128))
    assert data[176:180] == struct.pack("<f", 2.5) and data[240:368] == bytes(128)
    with pytest.raises(TypeError, match="pass I64"):
        cuda.launch._pack((3, 3, first, 2.5, second), {}, lambda passed: params)
    with pytest.raises(TypeError, match="takes 5 arguments, 4"):
        cuda.launch._pack((cuda.I64(5), 3, first, 2.5), {}, lambda passed: params)
    with pytest.raises(TypeError, match="kernel's offsets"):  # a map is never laid out as a C struct
        cuda.launch._pack((cuda.I64(5), 3, first), {})
    with pytest.raises(ValueError, match="128 bytes"):
        cuda.TensorMap(bytes(64))


def test_tma_strides_are_bytes_innermost_first_and_any_for_a_dim_of_one():
    assert cuda.tma_strides((4, 32, 1000, 64), (32 * 1000 * 64, 1000 * 64, 64, 1), 2) == (128, 128_000, 4_096_000)
    # a head dim of 56 in rows of 64 (a projection's view); batch of one with torch's stride 1 for it
    assert cuda.tma_strides((1, 8, 100, 56), (1, 6400, 64, 1), 2) == (128, 12_800, 102_400)
    assert cuda.tma_strides((3, 1, 5, 8), (40, 7, 8, 1), 4) == (32, 160, 160)  # the 1-dim: 5 rows of 32 bytes


def test_a_tensor_map_is_refused_what_the_tma_unit_cannot_read():
    with pytest.raises(ValueError, match="CUDA tensor"):
        cuda.tensor_map(torch.zeros(4, 64, dtype=torch.float16), (64, 4))
    with pytest.raises(ValueError, match="not supported"):
        cuda.tensor_map(torch.zeros(4, 64, dtype=torch.int8), (64, 4))


@pytest.mark.gpu
@needs_gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
                    reason="the TMA unit is sm_90's")
def test_a_tensor_map_box_lands_swizzled_and_zero_filled_past_the_tensor():
    """One TMA copy of a 64 x 16 box (the last rows past the tensor) into shared memory, read back: row r's
    16-byte chunk c sits at chunk c ^ (r % 8) under the 128-byte swizzle, rows past the end are zeros."""
    source = r"""
    struct __align__(64) Map { unsigned long long opaque[16]; };
    extern "C" __global__ void box(const __grid_constant__ Map map, int row0, unsigned short* out) {
      __shared__ __align__(1024) unsigned short tile[16 * 64];
      __shared__ __align__(8) unsigned long long bar;
      const unsigned t = (unsigned)__cvta_generic_to_shared(tile), b = (unsigned)__cvta_generic_to_shared(&bar);
      if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(16 * 64 * 2) : "memory");
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                     "[%0], [%1, {0, %2}], [%3];" ::"r"(t), "l"(&map), "r"(row0), "r"(b) : "memory");
      }
      __syncthreads();
      unsigned done = 0;
      while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\nselp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done) : "r"(b) : "memory");
      for (int i = threadIdx.x; i < 16 * 64; i += blockDim.x) out[i] = tile[i];
    }"""
    x = torch.arange(40 * 64, device="cuda", dtype=torch.int32).to(torch.float16).view(40, 64)
    out = torch.empty(16 * 64, device="cuda", dtype=torch.int16)
    kernel = cuda.load(source, arch=lambda arch: "sm_90a").function("box")
    kernel(cuda.tensor_map(x, (64, 16)), 32, out, grid=1, block=128)
    torch.cuda.synchronize()
    tile = out.view(torch.float16).view(16, 64).cpu()
    rows = torch.cat([x[32:].cpu(), torch.zeros(8, 64, dtype=torch.float16)])  # rows 32-39, then 8 past the end
    for r in range(16):
        for c in range(8):
            assert torch.equal(tile[r, (c ^ r % 8) * 8:(c ^ r % 8) * 8 + 8], rows[r, c * 8:c * 8 + 8]), (r, c)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_launch_doubles_a_tensor(dtype):
    x = torch.randn(1000, device="cuda").to(dtype)
    y = torch.empty_like(x)
    twice = cuda.load(CONVERT, defines={"T": cuda.dtype_define(dtype)}).function("twice")
    twice(x, y, x.numel(), grid=_cdiv(x.numel(), 256), block=256)
    torch.cuda.synchronize()
    assert torch.equal(y, x * 2)


@pytest.mark.gpu
@needs_gpu
def test_a_dependent_launch_reads_what_the_kernel_before_it_wrote():
    """The dependent kernel's blocks may start while `late` spins (about 0.1 ms), and read x only after it ends;
    where the device has no dependent launch (before sm_90) the launch is an ordinary one."""
    module = cuda.load(DEPENDENT)
    late, copy = module.function("late"), module.function("copy")
    n = 1 << 20
    for _ in range(3):
        x, y = torch.zeros(n, dtype=torch.int32, device="cuda"), torch.full((n,), -1, dtype=torch.int32, device="cuda")
        late(x, n, cuda.I64(200_000), grid=132, block=256)
        copy(x, y, n, grid=64, block=256, dependent=True)
        torch.cuda.synchronize()
        assert torch.equal(y, torch.arange(1, n + 1, dtype=torch.int32, device="cuda"))


@pytest.mark.gpu
@needs_gpu
def test_the_kernel_reads_each_argument_where_it_was_packed():
    import numpy as np

    source = r"""
    extern "C" __global__ void echo(signed char c, double* out, int i, short h, long long n, float f,
                                    const float* x, double d, unsigned char u) {
      out[0] = c; out[1] = i; out[2] = h; out[3] = (double)n; out[4] = f; out[5] = x[1]; out[6] = d;
      out[7] = u;
    }"""
    out = torch.zeros(8, device="cuda", dtype=torch.float64)
    x = torch.tensor([1.0, -2.5], device="cuda")
    cuda.load(source).function("echo")(np.int8(-5), out, -(2**31), np.int16(1234), cuda.I64(2**40 + 3), 0.75, x,
                                       np.float64(1e-300), np.uint8(200), grid=1, block=1)
    torch.cuda.synchronize()
    assert out.tolist() == [-5, -(2**31), 1234, 2**40 + 3, 0.75, -2.5, 1e-300, 200]


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_conversions_round_like_torch(dtype):
    x = torch.randn(1 << 16, device="cuda") * torch.logspace(-30, 30, 1 << 16, device="cuda")
    x[:4] = torch.tensor([float("inf"), -float("inf"), 0.0, -0.0])
    y, back = torch.empty_like(x, dtype=dtype), torch.empty_like(x)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())  # x is written on the default stream
    kernel = cuda.load(CONVERT, defines={"T": cuda.dtype_define(dtype)}).function("round_trip")
    with torch.cuda.stream(stream):  # the kernel follows torch's current stream
        kernel(x, y, back, cuda.I64(x.numel()), grid=_cdiv(x.numel(), 128), block=128)
    stream.synchronize()
    assert torch.equal(y.view(torch.int16), x.to(dtype).view(torch.int16))
    assert torch.equal(back, y.float())


@pytest.mark.gpu
@needs_gpu
def test_packed_pairs():
    x = torch.randn(512, device="cuda", dtype=torch.float16)
    y = torch.empty(512, device="cuda", dtype=torch.bfloat16)
    cuda.load(CONVERT, defines={"T": "float"}).function("pairs")(x, y, 256, grid=2, block=128)
    torch.cuda.synchronize()
    assert torch.equal(y, x.float().to(torch.bfloat16))


@pytest.mark.gpu
@needs_gpu
def test_attributes_and_large_dynamic_shared_memory():
    source = r"""
    extern "C" __global__ void stage(const float* x, float* y, int n) {
      __shared__ float fixed[256];
      extern __shared__ float dynamic[];
      int i = threadIdx.x;
      fixed[i] = x[i];
      for (int j = i; j < n; j += blockDim.x) dynamic[j] = fixed[i] + j;
      __syncthreads();
      y[i] = dynamic[n - 1 - i];
    }"""
    kernel = cuda.load(source).function("stage")
    attributes = kernel.attributes()
    assert set(attributes) == {"registers", "static_shared_bytes", "local_bytes", "max_threads_per_block"}
    assert attributes["static_shared_bytes"] == 256 * 4
    assert attributes["registers"] > 0 and 0 < attributes["max_threads_per_block"] <= 1024
    x, y, n = torch.randn(256, device="cuda"), torch.empty(256, device="cuda"), 96 * 1024 // 4
    kernel(x, y, n, grid=1, block=256, shared_mem=n * 4)  # 96 KiB: above the 48 KiB default
    torch.cuda.synchronize()
    j = n - 1 - torch.arange(256, device="cuda")  # thread i read dynamic[j], written by thread j % 256
    expected = x[j % 256] + j
    assert torch.equal(y, expected)
