"""Frontend gaps seen on real CUDA code (issue 16, items 7-13), each with a regression test:
NVRTC-compiled kernels or hand-written PTX run through the Python API and through the
reference interpreter, checked against NumPy."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import cpuify
from cpuify.interp import interpret_kernel


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return np.abs(got - want) / np.spacing(np.abs(want).astype(want.dtype))


# --- item 7: warpSize ---------------------------------------------------------------------------

def test_warp_size_in_arithmetic_and_comparisons():
    k = cpuify.RawKernel(r'''
    extern "C" __global__ void k(int *o) {
        int t = threadIdx.x;
        o[t] = (t & (warpSize - 1)) + 100 * (t / warpSize) + (t < warpSize ? 10000 : 0);
    }''', "k")
    o = np.zeros(96, np.int32)
    k((1,), (96,), (o,))
    t = np.arange(96)
    np.testing.assert_array_equal(o, t % 32 + 100 * (t // 32) + np.where(t < 32, 10000, 0))


# --- item 9: nested register scopes -------------------------------------------------------------

TRIG_SRC = r'''
extern "C" __global__ void trig(const double *x, double *s, double *c, double *t, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { s[i] = sin(x[i]); c[i] = cos(x[i]); t[i] = tan(x[i]); }
}'''

HUGE = np.array([2.0 ** 31, -2.0 ** 31 - 3.5, 3e9, 1e10, 123456789012.5, -5e15, 1e22, 2.0 ** 70,
                 1e100, -1e200, 1e300, 1.7976931348623157e308, 0.5, -2.0, 1e5, 6.0e7],
                np.float64)


def test_double_trig_of_huge_arguments_payne_hanek():
    """libdevice reduces |x| >= 2^31 with the Payne-Hanek algorithm, whose PTX declares
    `.reg .u32 %r0, %r1, ...` in a nested scope that shadows the function's own %r1: the
    inner registers must not overwrite the outer ones (it crashed the process)."""
    m = cpuify.RawModule(code=TRIG_SRC)
    n = len(HUGE)
    s, c, t = (np.zeros(n) for _ in range(3))
    m.get_function("trig")((1,), (32,), (HUGE, s, c, t, np.int32(n)))
    # CUDA's bound for double sin/cos/tan is 2 ulp
    assert _ulps(s, np.sin(HUGE)).max() <= 2
    assert _ulps(c, np.cos(HUGE)).max() <= 2
    assert _ulps(t, np.tan(HUGE)).max() <= 2


def test_double_trig_of_huge_arguments_interpreted():
    m = cpuify.RawModule(code=TRIG_SRC)
    x = HUGE[:6]
    n = len(x)
    s, c, t = (np.zeros(n) for _ in range(3))
    interpret_kernel(m.ptx, "trig", (1,), (8,), (x, s, c, t, np.int32(n)))
    assert _ulps(s, np.sin(x)).max() <= 2
    assert _ulps(c, np.cos(x)).max() <= 2
    assert _ulps(t, np.tan(x)).max() <= 2


SCOPED_PTX = r'''
.version 8.0
.target sm_75
.address_size 64

.visible .entry scoped(.param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, 7;
    {
    .reg .b32 %r1, %r2;
    .reg .b64 %t;
    mov.u32 %r1, 1000;
    add.s32 %r2, %r1, %r1;
    mov.b64 %t, {%r1, %r2};
    {
    .reg .b32 %r1;
    mov.u32 %r1, 5;
    add.s32 %r2, %r2, %r1;
    }
    add.s32 %r3, %r2, %r1;
    }
    {
    .reg .b16 %r2;
    mov.u16 %r2, 9;
    }
    mad.lo.s32 %r3, %r1, %r2, %r3;
    mul.wide.u32 %rd1, %r1, 4;
    add.s64 %rd2, %rd2, %rd1;
    st.global.u32 [%rd2], %r3;
    ret;
}
'''


def test_nested_scopes_shadow_outer_registers():
    """An inner `.reg` of the same name is a different register until its scope closes;
    a sibling scope may even give the name another type."""
    # inner: r1 = 1000, r2 = 2000 + 5, r3 = 2005 + 1000; outer: out = tid * 7 + 3005
    want = np.arange(8, dtype=np.int32) * 7 + 3005
    o = np.zeros(8, np.int32)
    cpuify.RawModule(ptx=SCOPED_PTX).get_function("scoped")((1,), (8,), (o,))
    np.testing.assert_array_equal(o, want)
    o[:] = 0
    interpret_kernel(SCOPED_PTX, "scoped", (1,), (8,), (o,))
    np.testing.assert_array_equal(o, want)


# --- item 8: dynamic indexing into by-value struct parameters -----------------------------------

STRUCT_SRC = r'''
struct Big { int v[8100]; };            // 32,400 bytes (CUDA 12.1+ allows 32,764)
struct Mid { double s; int v[300]; };
__device__ __noinline__ int pick(Mid m, int i) { return m.v[i] + (int)m.s; }
extern "C" __global__ void big(Big p, const int *idx, int *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = p.v[idx[i]];
}
extern "C" __global__ void mid(Mid m, const int *idx, int *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = pick(m, idx[i]) - m.v[(idx[i] + 1) % 300];
}'''

BIG = np.dtype([("v", np.int32, 8100)])
MID = np.dtype([("s", np.float64), ("v", np.int32, 300)], align=True)


@pytest.fixture(scope="module")
def struct_mod():
    return cpuify.RawModule(code=STRUCT_SRC)


def _struct_args(rng):
    p = np.zeros((), BIG)
    p["v"] = rng.integers(-10**6, 10**6, 8100)
    m = np.zeros((), MID)
    m["s"] = 7.0
    m["v"] = rng.integers(-1000, 1000, 300)
    idx = rng.integers(0, 8100, 1000).astype(np.int32)
    return p, m, idx


def test_large_struct_parameter_dynamic_index(struct_mod, rng):
    """`p.v[i]` with i from memory: the kernel takes the parameter's address and loads
    through it (it failed with "use of undeclared register '%rd9+0'")."""
    p, _, idx = _struct_args(rng)
    o = np.zeros(1000, np.int32)
    struct_mod.get_function("big")((8,), (128,), (p, idx, o, np.int32(1000)))
    np.testing.assert_array_equal(o, p["v"][idx])
    o[:] = 0
    interpret_kernel(struct_mod.ptx, "big", (2,), (32,), (p, idx, o, np.int32(64)))
    np.testing.assert_array_equal(o[:64], p["v"][idx[:64]])


def test_struct_parameter_of_device_function_indexed(struct_mod, rng):
    """A by-value struct passed on to a device function that indexes it: PTX puts the
    function parameter's address in the local window, so the call stores the argument."""
    _, m, idx = _struct_args(rng)
    idx %= 300
    o = np.zeros(1000, np.int32)
    want = m["v"][idx] + 7 - m["v"][(idx + 1) % 300]
    struct_mod.get_function("mid")((8,), (128,), (m, idx, o, np.int32(1000)))
    np.testing.assert_array_equal(o, want)
    o[:] = 0
    interpret_kernel(struct_mod.ptx, "mid", (1,), (32,), (m, idx, o, np.int32(32)))
    np.testing.assert_array_equal(o[:32], want[:32])


# --- item 10: volatile and ordered accesses -----------------------------------------------------

VOLATILE_SRC = r'''
// the spins are bounded: if a load were hoisted out of the loop, LLVM would run the counter
// to the bound at once and the kernel would report it instead of hanging
#define LIMIT (1LL << 60)
extern "C" __global__ void spin_on_host(volatile int *flag, long long *spins, int *out) {
    long long k = 0;
    while (flag[0] == 0 && k < LIMIT) k++;
    spins[threadIdx.x] = k;
    out[threadIdx.x] = flag[0] + threadIdx.x;
}
extern "C" __global__ void publish_and_wait(volatile int *flag, int *data, long long *spins) {
    // block 0 publishes; every other block waits for it (blocks start in order, so the
    // wait ends whether or not the two run on different workers)
    if (blockIdx.x == 0) {
        if (threadIdx.x == 0) { data[0] = 42; __threadfence(); *flag = 1; }
    } else if (threadIdx.x == 0) {
        long long k = 0;
        while (*flag == 0 && k < LIMIT) k++;
        spins[blockIdx.x] = k;
        data[blockIdx.x] = data[0] + (int)blockIdx.x;
    }
}
__device__ unsigned ld_acquire(const unsigned *p) {
    unsigned v; asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v;
}
__device__ unsigned ld_relaxed(const unsigned *p) {
    unsigned v; asm volatile("ld.relaxed.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v;
}
__device__ void st_release(unsigned *p, unsigned v) {
    asm volatile("st.release.gpu.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
extern "C" __global__ void acquire_spin(unsigned *flag, long long *spins, unsigned *out) {
    long long k = 0;
    while (ld_acquire(flag) == 0u && k < LIMIT) k++;
    spins[threadIdx.x] = k;
    st_release(out + threadIdx.x, ld_relaxed(flag) * 2u + threadIdx.x);
}
'''


@pytest.fixture(scope="module")
def volatile_mod():
    return cpuify.RawModule(code=VOLATILE_SRC)


def _set_later(array: np.ndarray, value: int, delay: float) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        array[0] = value
    t = threading.Thread(target=run)
    t.start()
    return t


@pytest.mark.parametrize("kernel", ["spin_on_host", "acquire_spin"])
def test_spin_sees_a_flag_the_host_sets_during_the_launch(volatile_mod, kernel):
    dtype = np.int32 if kernel == "spin_on_host" else np.uint32
    flag = np.zeros(1, dtype)
    spins = np.zeros(4, np.int64)
    out = np.zeros(4, dtype)
    setter = _set_later(flag, 5, 0.2)
    volatile_mod.get_function(kernel)((1,), (4,), (flag, spins, out))
    setter.join()
    assert (spins < 1 << 60).all() and spins[0] > 0
    want = 5 if kernel == "spin_on_host" else 10
    np.testing.assert_array_equal(out, want + np.arange(4))


def test_blocks_wait_for_a_flag_another_block_sets(volatile_mod):
    for _ in range(3):
        flag = np.zeros(1, np.int32)
        data = np.zeros(16, np.int32)
        spins = np.zeros(16, np.int64)
        volatile_mod.get_function("publish_and_wait")((16,), (32,), (flag, data, spins))
        assert (spins < 1 << 60).all()
        np.testing.assert_array_equal(data, 42 + np.arange(16) * (np.arange(16) > 0))


def test_volatile_and_ordered_accesses_stay_in_llvm(volatile_mod):
    """Every volatile access is an LLVM volatile access; `.acquire`/`.relaxed`/`.release`
    are atomic ones with that ordering (after LLVM's optimizations)."""
    from cpuify.codegen.llvm_gen import ModuleCodegen
    from cpuify.compiler import lift_optimized
    from cpuify.frontend.ptx_parser import parse_ptx
    module = parse_ptx(volatile_mod.ptx)
    texts = {}
    for name in ("spin_on_host", "acquire_spin"):
        gen = ModuleCodegen(module)
        gen.add_kernel(lift_optimized(module, module.functions[name]), None)
        texts[name] = gen.llvm_text()
    assert texts["spin_on_host"].count("load volatile i32") == 2
    assert "load atomic volatile i32" in texts["acquire_spin"] and " acquire, align 4" in texts["acquire_spin"]
    assert " monotonic, align 4" in texts["acquire_spin"]
    assert "store atomic volatile i32" in texts["acquire_spin"] and " release, align 4" in texts["acquire_spin"]


# --- item 13: conversions with directed rounding on 64-bit integers ------------------------------

CVT64_SRC = r'''
extern "C" __global__ void ll_to_fp(const long long *s, const unsigned long long *u, float *f,
                                    double *d, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long a = s[i]; unsigned long long b = u[i];
    f[8 * i + 0] = __ll2float_rn(a); f[8 * i + 1] = __ll2float_rz(a);
    f[8 * i + 2] = __ll2float_rd(a); f[8 * i + 3] = __ll2float_ru(a);
    f[8 * i + 4] = __ull2float_rn(b); f[8 * i + 5] = __ull2float_rz(b);
    f[8 * i + 6] = __ull2float_rd(b); f[8 * i + 7] = __ull2float_ru(b);
    d[8 * i + 0] = __ll2double_rn(a); d[8 * i + 1] = __ll2double_rz(a);
    d[8 * i + 2] = __ll2double_rd(a); d[8 * i + 3] = __ll2double_ru(a);
    d[8 * i + 4] = __ull2double_rn(b); d[8 * i + 5] = __ull2double_rz(b);
    d[8 * i + 6] = __ull2double_rd(b); d[8 * i + 7] = __ull2double_ru(b);
}
extern "C" __global__ void fp_to_ll(const float *f, const double *d, long long *s,
                                    unsigned long long *u, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = f[i]; double y = d[i];
    long long *ps = s + 8 * i; unsigned long long *pu = u + 8 * i;
    ps[0] = __float2ll_rn(x); ps[1] = __float2ll_rz(x); ps[2] = __float2ll_rd(x); ps[3] = __float2ll_ru(x);
    ps[4] = __double2ll_rn(y); ps[5] = __double2ll_rz(y); ps[6] = __double2ll_rd(y); ps[7] = __double2ll_ru(y);
    pu[0] = __float2ull_rn(x); pu[1] = __float2ull_rz(x); pu[2] = __float2ull_rd(x); pu[3] = __float2ull_ru(x);
    pu[4] = __double2ull_rn(y); pu[5] = __double2ull_rz(y); pu[6] = __double2ull_rd(y); pu[7] = __double2ull_ru(y);
}
'''


def _round_int(v: int, ftype, mode: str):
    """The float of type `ftype` nearest to the integer v in direction `mode`, exactly (the
    neighbours of v found by exact comparisons; ties to even)."""
    from fractions import Fraction as Q
    lo = ftype(float(v))
    inf = ftype(np.inf)
    while Q(float(lo)) > v:
        lo = np.nextafter(lo, -inf)
    while np.isfinite(np.nextafter(lo, inf)) and Q(float(np.nextafter(lo, inf))) <= v:
        lo = np.nextafter(lo, inf)
    if Q(float(lo)) == v:
        return lo
    hi = np.nextafter(lo, inf)
    if mode == "rd" or mode == "rz" and v > 0:
        return lo
    if mode == "ru" or mode == "rz":
        return hi
    d_lo, d_hi = v - Q(float(lo)), Q(float(hi)) - v
    if d_lo != d_hi:
        return lo if d_lo < d_hi else hi
    bits = np.array([lo]).view(np.uint32 if ftype is np.float32 else np.uint64)[0]
    return lo if bits % 2 == 0 else hi


def _int_samples(rng) -> tuple[np.ndarray, np.ndarray]:
    edges = [0, 1, -1, 2**24 + 1, -(2**24 + 1), 2**53 + 1, -(2**53 + 1), 2**62 + 2**38 + 1,
             2**63 - 1, -2**63, -2**63 + 1, (1 << 40) + 3, -(1 << 40) - 3, 123456789123456789]
    s = np.array(edges + list(rng.integers(-2**63, 2**63 - 1, 50, dtype=np.int64)), np.int64)
    uedges = [0, 1, 2**64 - 1, 2**63, 2**63 + 1, 2**53 + 1, 2**24 + 1, 2**64 - 2**39 - 1]
    u = np.array(uedges + list(rng.integers(0, 2**64 - 1, len(s) - len(uedges), dtype=np.uint64)),
                 np.uint64)
    return s, u


def test_cvt_directed_rounding_from_64_bit_integers(rng):
    m = cpuify.RawModule(code=CVT64_SRC)
    s, u = _int_samples(rng)
    n = len(s)
    f = np.zeros(8 * n, np.float32)
    d = np.zeros(8 * n, np.float64)
    m.get_function("ll_to_fp")((1,), (128,), (s, u, f, d, np.int32(n)))
    fi = np.zeros_like(f)
    di = np.zeros_like(d)
    interpret_kernel(m.ptx, "ll_to_fp", (1,), (n,), (s, u, fi, di, np.int32(n)))
    modes = ("rn", "rz", "rd", "ru")
    for i in range(n):
        for k, mode in enumerate(modes):
            for j, v in ((k, int(s[i])), (4 + k, int(u[i]))):
                assert f[8 * i + j] == _round_int(v, np.float32, mode), (v, mode, "f32")
                assert d[8 * i + j] == _round_int(v, np.float64, mode), (v, mode, "f64")
    np.testing.assert_array_equal(fi, f)
    np.testing.assert_array_equal(di, d)


def test_cvt_float_to_64_bit_integers_each_rounding(rng):
    m = cpuify.RawModule(code=CVT64_SRC)
    vals = [0.5, -0.5, 1.5, -1.5, 2.5, -2.7, 1e18 + 0.0, -9.3e18, 2.0**62 * 1.5, 1e19, -1.0,
            4503599627370497.5, 3.999999]
    x = np.array(vals + list(rng.uniform(-1e6, 1e6, 20)), np.float64)
    n = len(x)
    f = x.astype(np.float32)
    sv = np.zeros(8 * n, np.int64)
    uv = np.zeros(8 * n, np.uint64)
    m.get_function("fp_to_ll")((1,), (64,), (f, x, sv, uv, np.int32(n)))
    rounders = {"rn": np.rint, "rz": np.trunc, "rd": np.floor, "ru": np.ceil}
    for i in range(n):
        for k, mode in enumerate(("rn", "rz", "rd", "ru")):
            for j, v in ((k, float(f[i])), (4 + k, float(x[i]))):
                r = int(rounders[mode](v))
                assert sv[8 * i + j] == max(-2**63, min(2**63 - 1, r)), (v, mode)
                assert uv[8 * i + j] == max(0, min(2**64 - 1, r)), (v, mode)
