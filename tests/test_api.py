"""Python API details: module sources, launch bounds, globals, argument conversion."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify

SRC = r'''
__constant__ float coeff[4];
__device__ int counter;

extern "C" __global__ void __launch_bounds__(128) bounded(float *x) {
    x[threadIdx.x] = coeff[threadIdx.x % 4];
}

extern "C" __global__ void count(int n) {
    if (threadIdx.x < n) atomicAdd(&counter, 1);
}

struct Pair { int a; double b; };
extern "C" __global__ void take_pair(Pair p, double *out) { out[0] = p.a + p.b; }
'''


@pytest.fixture(scope="module")
def mod():
    return cpuify.RawModule(code=SRC)


def test_kernel_names_and_repr(mod):
    assert set(mod.kernel_names) == {"bounded", "count", "take_pair"}
    assert "bounded" in repr(mod.get_function("bounded"))
    assert mod.get_function("bounded") is mod.get_function("bounded")


def test_launch_bounds_are_enforced(mod):
    f = mod.get_function("bounded")
    assert f.max_threads_per_block == 128
    with pytest.raises(ValueError, match="bounded.*256 threads"):
        f((1,), (256,), (np.zeros(256, np.float32),))


def test_constant_memory_through_get_global(mod):
    coeff = mod.get_global("coeff", dtype=np.float32)
    assert coeff.shape == (4,)
    coeff[:] = [1.5, 2.5, 3.5, 4.5]
    x = np.zeros(128, np.float32)
    mod.get_function("bounded")((1,), (128,), (x,))
    np.testing.assert_array_equal(x, np.tile(coeff, 32))


def test_device_global_accumulates_across_launches(mod):
    counter = mod.get_global("counter", dtype=np.int32)
    counter[0] = 0
    f = mod.get_function("count")
    f((3,), (64,), (np.int32(10),))
    f((2,), (64,), (np.int32(64),))
    assert counter[0] == 3 * 10 + 2 * 64


def test_struct_by_value(mod):
    dt = np.dtype([("a", np.int32), ("b", np.float64)], align=True)
    p = np.zeros((), dt)
    p["a"], p["b"] = 7, 0.25
    out = np.zeros(1, np.float64)
    mod.get_function("take_pair")((1,), (1,), (p[()], out))
    assert out[0] == 7.25
    out[0] = 0
    mod.get_function("take_pair")((1,), (1,), (p.tobytes(), out))
    assert out[0] == 7.25
    with pytest.raises(ValueError, match="16 bytes"):
        mod.get_function("take_pair")((1,), (1,), (b"\0" * 8, out))
    with pytest.raises(TypeError, match="struct"):
        mod.get_function("take_pair")((1,), (1,), (3, out))


def test_unknown_global_and_function(mod):
    with pytest.raises(LookupError, match="nothere"):
        mod.get_global("nothere")
    with pytest.raises(LookupError, match="kernels: bounded"):
        mod.get_function("nothere")


def test_module_from_path_and_ptx(tmp_path):
    cu = tmp_path / "k.cu"
    cu.write_text('extern "C" __global__ void one(int *p) { p[threadIdx.x] = 1; }')
    m = cpuify.RawModule(path=str(cu))
    p = np.zeros(8, np.int32)
    m.get_function("one")((1,), (8,), (p,))
    assert (p == 1).all()
    ptx = tmp_path / "k.ptx"
    ptx.write_text(m.ptx)
    m2 = cpuify.RawModule(path=ptx)
    p[:] = 0
    m2.get_function("one")((1,), (8,), (p,))
    assert (p == 1).all()
    with pytest.raises(TypeError, match="exactly one"):
        cpuify.RawModule()


def test_pointer_arguments_accept_buffers_and_addresses():
    k = cpuify.RawKernel('extern "C" __global__ void inc(unsigned char *p) { p[threadIdx.x] += 1; }', "inc")
    b = bytearray(4)
    k((1,), (4,), (b,))
    assert b == bytearray([1, 1, 1, 1])
    a = np.zeros(4, np.uint8)
    k((1,), (4,), (a.ctypes.data,))
    assert (a == 1).all()
    with pytest.raises(TypeError, match="pointer"):
        k((1,), (4,), ("not an array",))


def test_dim3_forms():
    k = cpuify.RawKernel('extern "C" __global__ void d(int *p) {'
                         ' p[0] = gridDim.x * 100 + blockDim.x * 10 + blockDim.y; }', "d")
    p = np.zeros(1, np.int32)
    k(2, 3, (p,))
    assert p[0] == 231
    k((2,), [3, 2], (p,))
    assert p[0] == 232
    with pytest.raises(ValueError, match="1 to 3 dimensions"):
        k((1, 1, 1, 1), 1, (p,))
    with pytest.raises(TypeError, match="tuple"):
        k("x", 1, (p,))


def test_launch_config_specialization_gives_the_same_results(tmp_path, monkeypatch):
    """From the second launch with a block shape on, a kernel runs code compiled for that
    shape; results must not change, and other shapes still use the generic code."""
    monkeypatch.setenv("CPUIFY_CACHE_DIR", str(tmp_path))
    src = r'''
    extern "C" __global__ void block_sum(const float *x, float *out) {
        extern __shared__ float s[];
        int t = threadIdx.y * blockDim.x + threadIdx.x, n = blockDim.x * blockDim.y;
        s[t] = x[blockIdx.x * n + t];
        __syncthreads();
        for (int k = n / 2; k > 0; k >>= 1) {
            if (t < k) s[t] += s[t + k];
            __syncthreads();
        }
        if (t == 0) out[blockIdx.x] = s[0];
    }'''
    f = cpuify.RawModule(code=src).get_function("block_sum")
    rng = np.random.default_rng(3)
    for block in [(16, 16), (16, 16), (16, 16), (8, 4), (8, 4), (256, 1)]:
        n = block[0] * block[1]
        x = rng.integers(-8, 8, 7 * n).astype(np.float32)
        out = np.zeros(7, np.float32)
        f((7,), block, (x, out), shared_mem=4 * n)
        np.testing.assert_array_equal(out, x.reshape(7, n).sum(axis=1), err_msg=str(block))
    assert set(f._shape_addr) == {(16, 16, 1), (8, 4, 1)}
    assert all(a != f._addr for a in f._shape_addr.values())
    assert list(tmp_path.glob("*.spec"))         # the specialization is cached on disk


SCALARS = r'''
extern "C" __global__ void scalars(unsigned char u8, short s16, int s32, unsigned u32,
                                   long long s64, float f32, double f64, const int *p,
                                   double *out) {
    out[0] = u8; out[1] = s16; out[2] = s32; out[3] = u32; out[4] = (double)s64;
    out[5] = f32; out[6] = f64; out[7] = p[1];
}
'''


def test_argument_packing_fast_and_general_paths_agree():
    """The packer's fast path (NumPy scalars of a parameter's width, floats, arrays) writes
    the same bytes as the general conversion (Python ints, bools, buffers)."""
    from cpuify.api.arguments import ArgumentPacker, pack_arguments
    f = cpuify.RawModule(code=SCALARS).get_function("scalars")
    p = np.array([5, -9], np.int32)
    out = np.zeros(8, np.float64)
    fast = (np.uint8(200), np.int16(-7), np.int32(-5), np.uint32(4_000_000_000),
            np.int64(-2**40), np.float32(0.1), 0.3, p, out)
    general = (200, -7, -5, 4_000_000_000, -2**40, 0.1, 0.3, memoryview(p), out)
    packer = ArgumentPacker(f.name, f._plan, f._aggregate)
    a, b = bytearray(f._param_size), bytearray(f._param_size)
    packer(fast, a)
    pack_arguments(f.name, f._plan, f._aggregate, general, b)
    assert a == b
    f((1,), (1,), fast)
    assert list(out[:5]) == [200, -7, -5, 4_000_000_000, -2**40]
    assert out[5] == np.float32(0.1) and out[6] == 0.3 and out[7] == -9
    fast = fast[:-1]
    # errors come from the general path, whichever argument is off
    with pytest.raises(ValueError, match="argument 2: 5000000000 does not fit"):
        f((1,), (1,), fast[:2] + (5_000_000_000,) + fast[3:] + (out,))
    with pytest.raises(TypeError, match="argument 5: expected a f32"):
        f((1,), (1,), fast[:5] + ("x",) + fast[6:] + (out,))
    with pytest.raises(TypeError, match="takes 9 argument"):
        f((1,), (1,), fast)


def test_array_addresses_read_from_the_object():
    from cpuify.api.arguments import array_address
    base = np.arange(64, dtype=np.float64)
    for a in (base, base[5:], base[::-1], base.reshape(8, 8)[2:, 3:], np.zeros(0), np.empty(3)):
        assert array_address(a) == a.__array_interface__["data"][0]
    a = np.zeros(8, np.int32)
    before = array_address(a)
    a.resize(1 << 16, refcheck=False)           # reallocates in place
    assert array_address(a) == a.__array_interface__["data"][0] != before


def test_launch_checks_hold_after_the_first_launch(mod):
    f = cpuify.RawKernel('extern "C" __global__ void s(int *p) { extern __shared__ int t[];'
                         ' t[threadIdx.x] = 1; p[threadIdx.x] = t[threadIdx.x]; }', "s")
    p = np.zeros(32, np.int32)
    for _ in range(2):
        f((1,), (32,), (p,), shared_mem=4096)
    f.max_dynamic_shared_size_bytes = 1024
    with pytest.raises(ValueError, match="4096 bytes of dynamic shared memory"):
        f((1,), (32,), (p,), shared_mem=4096)
    for _ in range(2):
        with pytest.raises(ValueError, match="out of range"):
            f((0,), (32,), (p,))
