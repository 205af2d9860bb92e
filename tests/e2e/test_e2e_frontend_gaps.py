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
    fn = volatile_mod.get_function(kernel)      # compiled before the clock starts
    setter = _set_later(flag, 5, 0.5)
    fn((1,), (4,), (flag, spins, out))
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
    # (the spin loop's yield point, spin-wait-yields, cuts it into segments: each has its
    # copies of the two volatile loads)
    assert texts["spin_on_host"].count("load volatile i32") >= 2
    assert texts["spin_on_host"].count("load volatile i32") % 2 == 0
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


# --- item 13: packed half and bfloat16 arithmetic -----------------------------------------------

HALF2_SRC = r'''
#include <cuda_fp16.h>
#include <cuda_bf16.h>
template <typename T2>
__device__ void ops(const T2 *a, const T2 *b, const T2 *c, T2 *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    T2 x = a[i], y = b[i], z = c[i];
    T2 *r = o + 8 * i;
    r[0] = __hadd2(x, y); r[1] = __hsub2(x, y); r[2] = __hmul2(x, y); r[3] = __hfma2(x, y, z);
    r[4] = __hneg2(x); r[5] = __habs2(x); r[6] = __hmin2(x, y); r[7] = __hmax2(x, y);
}
extern "C" __global__ void half2_ops(const __half2 *a, const __half2 *b, const __half2 *c,
                                     __half2 *o, int n) { ops(a, b, c, o, n); }
extern "C" __global__ void bf162_ops(const __nv_bfloat162 *a, const __nv_bfloat162 *b,
                                     const __nv_bfloat162 *c, __nv_bfloat162 *o, int n) {
    ops(a, b, c, o, n);
}
extern "C" __global__ void pack_convert(const float *x, __half2 *h, __nv_bfloat162 *bf,
                                        float *back, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    h[i] = __floats2half2_rn(x[2 * i], x[2 * i + 1]);          // cvt.rn.f16x2.f32
    bf[i] = __floats2bfloat162_rn(x[2 * i], x[2 * i + 1]);     // cvt.rn.bf16x2.f32
    float2 f = __half22float2(h[i]);                            // mov.b32 {lo, hi} + cvt
    float2 g = __bfloat1622float2(bf[i]);
    back[4 * i] = f.x; back[4 * i + 1] = f.y; back[4 * i + 2] = g.x; back[4 * i + 3] = g.y;
}
extern "C" __global__ void half2_compare_exp(const __half2 *a, const __half2 *b, __half2 *o,
                                             int *flags, __half *s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __half2 x = a[i], y = b[i];
    o[3 * i] = __hgt2(x, y);                    // set.gt.f16x2.f16x2: 1.0 or 0.0 per half
    o[3 * i + 1] = h2exp2(x);                   // ex2.approx.f16x2
    o[3 * i + 2] = __hmax2_nan(x, y);           // max.NaN.f16x2
    flags[i] = __hbgt2(x, y) + 2 * __hble2(x, y);   // setp.f16x2 p|q, both halves
    s[2 * i] = __hmin(__low2half(x), __high2half(y));   // min.f16
    s[2 * i + 1] = hexp2(__low2half(x));                // ex2.approx.f16
}
extern "C" __global__ void bf16_scalar(const __nv_bfloat16 *a, const __nv_bfloat16 *b,
                                       __nv_bfloat16 *o, float *f, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __nv_bfloat16 x = a[i], y = b[i];
    o[6 * i] = __hadd(x, y); o[6 * i + 1] = __hmul(x, y); o[6 * i + 2] = __hfma(x, y, x);
    o[6 * i + 3] = __hmin(x, y); o[6 * i + 4] = __float2bfloat16_rz(__bfloat162float(x) * 3.0f);
    o[6 * i + 5] = __hgt(x, y) ? x : y;
    f[i] = __bfloat162float(x) + __bfloat162float(y);
}
'''


def _exact_round(q, fmt: str):
    """The exact rational q rounded to nearest even in `fmt` (an independent reference)."""
    from fractions import Fraction
    prec, emin, emax = {"f16": (11, -14, 15), "bf16": (8, -126, 127)}[fmt]
    if q == 0:
        return 0.0
    neg, a = q < 0, abs(q)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    quantum = Fraction(2) ** (max(e, emin) - prec + 1)
    n, rest = divmod(a, quantum)
    if rest > quantum / 2 or rest == quantum / 2 and n % 2:
        n += 1
    v = float(n * quantum)
    if v > (2 - 2.0 ** (1 - prec)) * 2.0 ** emax:
        v = np.inf
    return -v if neg else v


def _bf16_bits(f32: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits, round to nearest even on the low 16 bits (NaN kept NaN)."""
    u = f32.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f32), np.uint16(0x7FFF), r)


def _bf16_values(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _half_samples(rng, n: int, fmt: str) -> np.ndarray:
    """Bits of finite values of mixed magnitudes (subnormals, large, small), no NaN."""
    if fmt == "f16":
        v = rng.standard_normal(n) * np.exp2(rng.integers(-20, 12, n))
        return v.astype(np.float16).view(np.uint16)
    v = (rng.standard_normal(n) * np.exp2(rng.integers(-130, 100, n))).astype(np.float32)
    return _bf16_bits(v)


@pytest.fixture(scope="module")
def half2_mod():
    return cpuify.RawModule(code=HALF2_SRC, options=("--gpu-architecture=compute_80",))


@pytest.mark.parametrize("fmt", ["f16", "bf16"])
def test_packed_half_arithmetic(half2_mod, rng, fmt):
    from fractions import Fraction
    n = 512
    a, b, c = (_half_samples(rng, 2 * n, fmt) for _ in range(3))
    a[:8] = b[:8]                       # x - x, min/max of equal values
    o = np.zeros(16 * n, np.uint16)
    kernel = "half2_ops" if fmt == "f16" else "bf162_ops"
    half2_mod.get_function(kernel)((4,), (128,), (a, b, c, o, np.int32(n)))
    if fmt == "f16":
        val = lambda bits: bits.view(np.float16).astype(np.float64)  # noqa: E731
    else:
        val = lambda bits: _bf16_values(bits).astype(np.float64)  # noqa: E731
    x, y, z = val(a), val(b), val(c)
    got = val(o).reshape(n, 8, 2).transpose(1, 0, 2).reshape(8, 2 * n)
    with np.errstate(all="ignore"):
        # sums, differences and products rounded to f32 first and then to the half format:
        # the same as one rounding (24 >= 2p + 2 bits); the references round only once
        want = [np.array([_exact_round(Fraction(p) + Fraction(q), fmt) for p, q in zip(x, y)]),
                np.array([_exact_round(Fraction(p) - Fraction(q), fmt) for p, q in zip(x, y)]),
                np.array([_exact_round(Fraction(p) * Fraction(q), fmt) for p, q in zip(x, y)]),
                np.array([_exact_round(Fraction(p) * Fraction(q) + Fraction(r), fmt)
                          for p, q, r in zip(x, y, z)]),
                -x, np.abs(x), np.fmin(x, y), np.fmax(x, y)]
    names = ["add", "sub", "mul", "fma", "neg", "abs", "min", "max"]
    for name, g, w in zip(names, got, want):
        np.testing.assert_array_equal(g, w, err_msg=f"{name}.{fmt}x2")
    # the interpreter computes the same bits
    oi = np.zeros_like(o)
    interpret_kernel(half2_mod.ptx, kernel, (1,), (64,), (a, b, c, oi, np.int32(64)))
    np.testing.assert_array_equal(oi[:16 * 64], o[:16 * 64])


def test_half2_fma_single_rounding(half2_mod):
    """(1 + 2^-5)(1 + 2^-6) = 1 + 2^-5 + 2^-6 + 2^-11 is half-way between two f16 values;
    + 2^-24 puts it above, so fma rounds up.  Rounded to f32 first, the 2^-24 is a tie that
    goes to even and the result then a tie that goes down.  The bf16 twin:
    (1 + 2^-4)^2 + 2^-100."""
    x = np.array([1 + 2**-5, 0.0], np.float16).view(np.uint16)
    y = np.array([1 + 2**-6, 0.0], np.float16).view(np.uint16)
    z = np.array([2.0**-24, 0.0], np.float16).view(np.uint16)
    o = np.zeros(16, np.uint16)
    half2_mod.get_function("half2_ops")((1,), (1,), (x, y, z, o, np.int32(1)))
    assert float(o.view(np.float16)[6]) == 1 + 2**-5 + 2**-6 + 2**-10
    xb = _bf16_bits(np.array([1 + 2**-4, 0.0], np.float32))
    zb = _bf16_bits(np.array([2.0**-100, 0.0], np.float32))
    half2_mod.get_function("bf162_ops")((1,), (1,), (xb, xb, zb, o, np.int32(1)))
    assert float(_bf16_values(o)[6]) == 1 + 2**-3 + 2**-7
    oi = np.zeros_like(o)
    interpret_kernel(half2_mod.ptx, "bf162_ops", (1,), (1,), (xb, xb, zb, oi, np.int32(1)))
    assert float(_bf16_values(oi)[6]) == 1 + 2**-3 + 2**-7


def test_pack_and_convert_f32_pairs(half2_mod, rng):
    n = 256
    x = (rng.standard_normal(2 * n) * np.exp2(rng.integers(-30, 30, 2 * n))).astype(np.float32)
    h = np.zeros(2 * n, np.uint16)
    bf = np.zeros(2 * n, np.uint16)
    back = np.zeros(4 * n, np.float32)
    half2_mod.get_function("pack_convert")((2,), (128,), (x, h, bf, back, np.int32(n)))
    with np.errstate(over="ignore"):
        h16 = x.astype(np.float16)
    np.testing.assert_array_equal(h.view(np.float16), h16)      # .x in the low half
    np.testing.assert_array_equal(bf, _bf16_bits(x))
    back = back.reshape(n, 4)
    np.testing.assert_array_equal(back[:, :2].ravel(), h16.astype(np.float32))
    np.testing.assert_array_equal(back[:, 2:].ravel(), _bf16_values(_bf16_bits(x)))


def _within_ulps(got: np.ndarray, want: np.ndarray, ulps: int) -> bool:
    """f16 results within `ulps` f16 ulps of the float64 reference (NaN where it is NaN)."""
    nan = np.isnan(want)
    with np.errstate(invalid="ignore"):
        ulp = np.spacing(np.abs(want).astype(np.float16)).astype(np.float64)
        close = np.abs(got.astype(np.float64) - want) <= ulps * ulp
    return bool((np.isnan(got) == nan).all() and close[~nan].all())


def test_half2_compare_and_exp(half2_mod, rng):
    n = 256
    a = (rng.standard_normal(2 * n) * 4).astype(np.float16)
    b = (rng.standard_normal(2 * n) * 4).astype(np.float16)
    b[:6] = a[:6]
    a[7], b[9] = np.nan, np.nan
    o = np.zeros(6 * n, np.float16)
    flags = np.zeros(n, np.int32)
    s = np.zeros(2 * n, np.float16)
    half2_mod.get_function("half2_compare_exp")((2,), (128,), (a, b, o, flags, s, np.int32(n)))
    o = o.reshape(n, 3, 2)
    x, y = a.reshape(n, 2), b.reshape(n, 2)
    np.testing.assert_array_equal(o[:, 0], (x > y).astype(np.float16))
    # ex2.approx: within 2 ulp of the f16 result
    want = np.exp2(x.astype(np.float64))
    assert _within_ulps(o[:, 1], want, 2)
    np.testing.assert_array_equal(o[:, 2], np.maximum(x, y))      # NaN propagates
    np.testing.assert_array_equal(flags, (x > y).all(axis=1) + 2 * (x <= y).all(axis=1))
    np.testing.assert_array_equal(s[0::2], np.fmin(x[:, 0], y[:, 1]))
    assert _within_ulps(s[1::2], np.exp2(x[:, 0].astype(np.float64)), 2)


def test_scalar_bf16(half2_mod, rng):
    from fractions import Fraction as Q
    n = 300
    a, b = _half_samples(rng, n, "bf16"), _half_samples(rng, n, "bf16")
    o = np.zeros(6 * n, np.uint16)
    f = np.zeros(n, np.float32)
    half2_mod.get_function("bf16_scalar")((3,), (128,), (a, b, o, f, np.int32(n)))
    x, y = _bf16_values(a).astype(np.float64), _bf16_values(b).astype(np.float64)
    got = _bf16_values(o).reshape(n, 6).T.astype(np.float64)
    np.testing.assert_array_equal(got[0], [_exact_round(Q(p) + Q(q), "bf16") for p, q in zip(x, y)])
    np.testing.assert_array_equal(got[1], [_exact_round(Q(p) * Q(q), "bf16") for p, q in zip(x, y)])
    np.testing.assert_array_equal(got[2], [_exact_round(Q(p) * Q(q) + Q(p), "bf16")
                                           for p, q in zip(x, y)])
    np.testing.assert_array_equal(got[3], np.fmin(x, y))
    # round toward zero: truncate the low half of the f32 product.  The f32 arithmetic is
    # compiled with -ftz=true, as CuPy compiles: bf16 subnormals (f32 subnormals) flush
    def flush(v):
        return np.where(np.abs(v) < np.finfo(np.float32).tiny, np.copysign(np.float32(0), v),
                        v).astype(np.float32)
    trunc = ((flush(flush(_bf16_values(a)) * np.float32(3))).view(np.uint32) >> 16).astype(np.uint16)
    np.testing.assert_array_equal(o.reshape(n, 6)[:, 4], trunc)
    np.testing.assert_array_equal(got[5], np.where(x > y, x, y))
    np.testing.assert_array_equal(f, flush(flush(_bf16_values(a)) + flush(_bf16_values(b))))
    oi = np.zeros_like(o)
    fi = np.zeros_like(f)
    interpret_kernel(half2_mod.ptx, "bf16_scalar", (1,), (64,), (a, b, oi, fi, np.int32(64)))
    np.testing.assert_array_equal(oi[:6 * 64], o[:6 * 64])


def test_saturated_f16_arithmetic():
    """add/mul/fma.sat.f16 (it was an internal error: the clamp was applied to the bits)."""
    src = r'''
    #include <cuda_fp16.h>
    extern "C" __global__ void sat(const __half *a, const __half *b, __half *o) {
        int i = threadIdx.x;
        o[3 * i] = __hadd_sat(a[i], b[i]);
        o[3 * i + 1] = __hmul_sat(a[i], b[i]);
        o[3 * i + 2] = __hfma_sat(a[i], b[i], a[i]);
    }'''
    m = cpuify.RawModule(code=src)
    a = np.array([0.5, -2, 3, 0.25, np.inf, -0.0], np.float16)
    b = np.array([0.75, 1, 0.1, -0.5, 1, 0.5], np.float16)
    o = np.zeros(18, np.float16)
    m.get_function("sat")((1,), (6,), (a, b, o))
    with np.errstate(all="ignore"):
        want = np.stack([a + b, a * b, np.float16(a.astype(np.float64) * b + a)], axis=1)
    want = np.nan_to_num(np.clip(want, 0, 1), nan=0.0).astype(np.float16)
    np.testing.assert_array_equal(o.reshape(6, 3), want)
    oi = np.zeros_like(o)
    interpret_kernel(m.ptx, "sat", (1,), (6,), (a, b, oi))
    np.testing.assert_array_equal(oi, o)


# --- item 11: virtual functions and function pointers -------------------------------------------

VIRTUAL_SRC = r'''
struct Shape {
    __device__ virtual float area() const = 0;
    __device__ virtual float scaled(float k) const { return k * area(); }
    __device__ virtual ~Shape() {}
};
struct Square : Shape {
    float s;
    __device__ Square(float s) : s(s) {}
    __device__ float area() const override { return s * s; }
};
struct Disc : Shape {
    float r;
    __device__ Disc(float r) : r(r) {}
    __device__ float area() const override { return 3.0f * r * r; }
    __device__ float scaled(float k) const override { return -k * area(); }
};
// objects of two derived classes built in device code, called through a base pointer
extern "C" __global__ void areas(const float *x, float *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    Square sq(x[i]);
    Disc d(x[i]);
    const Shape *s = (i % 3 == 0) ? (const Shape *)&d : (const Shape *)&sq;
    o[2 * i] = s->area();
    o[2 * i + 1] = s->scaled(2.0f);
}
// objects on the device heap, deleted through the base class's virtual destructor
extern "C" __global__ void heap_objects(const float *x, float *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    Shape *s = (i & 1) ? (Shape *)new Disc(x[i]) : (Shape *)new Square(x[i]);
    o[i] = s->area();
    delete s;
}
// a kernel of the same file that needs no virtual dispatch
extern "C" __global__ void plain(float *o) { o[threadIdx.x] = 2.0f * threadIdx.x; }

__device__ float twice(float v) { return 2.0f * v; }
__device__ float square(float v) { return v * v; }
__device__ float negate(float v) { return -v; }
__device__ float (*table[3])(float) = {twice, square, negate};
__device__ int add_one(int v) { return v + 1; }          // another signature: not a candidate
extern "C" __global__ void through_table(const float *x, const int *sel, float *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float (*f)(float) = table[sel[i]];
    o[i] = f(x[i]) + (f == negate ? 1000.0f : 0.0f);
}
extern "C" __global__ void pointer_from_code(const float *x, float *o, int n, int pick) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float (*f)(float) = pick ? square : twice;
    int (*g)(int) = add_one;
    if (i < n) o[i] = f(x[i]) + g(i);
}
extern "C" __global__ void bad_pointer(const float *x, float *o, unsigned long long p) {
    float (*f)(float) = (float (*)(float))p;
    o[threadIdx.x] = f(x[threadIdx.x]);
}
'''


@pytest.fixture(scope="module")
def virtual_mod():
    return cpuify.RawModule(code=VIRTUAL_SRC)


def test_virtual_calls_on_objects_built_in_device_code(virtual_mod, rng):
    n = 500
    x = rng.uniform(-3, 3, n).astype(np.float32)
    o = np.zeros(2 * n, np.float32)
    virtual_mod.get_function("areas")((4,), (128,), (x, o, np.int32(n)))
    disc = np.arange(n) % 3 == 0
    area = np.where(disc, np.float32(3) * x * x, x * x)
    np.testing.assert_array_equal(o[0::2], area)
    np.testing.assert_array_equal(o[1::2], np.where(disc, -2 * area, 2 * area))
    oi = np.zeros_like(o)
    interpret_kernel(virtual_mod.ptx, "areas", (1,), (32,), (x, oi, np.int32(32)))
    np.testing.assert_array_equal(oi[:64], o[:64])


def test_virtual_calls_on_heap_objects_and_virtual_destructor(virtual_mod, rng):
    n = 300
    x = rng.uniform(-3, 3, n).astype(np.float32)
    o = np.zeros(n, np.float32)
    virtual_mod.get_function("heap_objects")((3,), (128,), (x, o, np.int32(n)))
    np.testing.assert_array_equal(o, np.where(np.arange(n) & 1, np.float32(3) * x * x, x * x))


def test_kernel_without_virtual_calls_in_the_same_file(virtual_mod):
    o = np.zeros(32, np.float32)
    virtual_mod.get_function("plain")((1,), (32,), (o,))
    np.testing.assert_array_equal(o, 2 * np.arange(32))


def test_function_pointer_tables(virtual_mod, rng):
    n = 400
    x = rng.uniform(-3, 3, n).astype(np.float32)
    sel = rng.integers(0, 3, n).astype(np.int32)
    o = np.zeros(n, np.float32)
    virtual_mod.get_function("through_table")((4,), (128,), (x, sel, o, np.int32(n)))
    want = np.choose(sel, [2 * x, x * x, -x + np.float32(1000)])
    np.testing.assert_array_equal(o, want)
    oi = np.zeros_like(o)
    interpret_kernel(virtual_mod.ptx, "through_table", (1,), (64,), (x, sel, oi, np.int32(64)))
    np.testing.assert_array_equal(oi[:64], o[:64])
    for pick in (0, 1):
        virtual_mod.get_function("pointer_from_code")((4,), (128,), (x, o, np.int32(n), np.int32(pick)))
        np.testing.assert_array_equal(o, (x * x if pick else 2 * x) + np.arange(1, n + 1, dtype=np.float32))


def test_call_through_a_pointer_to_no_function_traps(virtual_mod):
    x = np.ones(4, np.float32)
    o = np.zeros(4, np.float32)
    with pytest.raises(cpuify.LaunchError, match="bad_pointer"):
        virtual_mod.get_function("bad_pointer")((1,), (4,), (x, o, np.uint64(12345)))


# --- the rest of the PTX census: half-precision atomics -----------------------------------------

HALF_ATOMIC_SRC = r'''
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void half_atomics(__half *h, __half2 *h2, __nv_bfloat16 *b,
                                        __nv_bfloat162 *b2, float *shared_out, int n) {
    __shared__ __half2 s[4];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (threadIdx.x < 4) s[threadIdx.x] = __floats2half2_rn(0.0f, 0.0f);
    __syncthreads();
    if (i < n) {
        atomicAdd(&h[i % 4], __float2half(1.0f));
        atomicAdd(&h2[i % 4], __floats2half2_rn(1.0f, 0.5f));
        atomicAdd(&b[i % 4], __float2bfloat16(1.0f));
        atomicAdd(&b2[i % 4], __floats2bfloat162_rn(0.5f, 1.0f));
        atomicAdd(&s[threadIdx.x % 4], __floats2half2_rn(1.0f, 2.0f));
    }
    __syncthreads();
    if (threadIdx.x < 4) {
        float2 f = __half22float2(s[threadIdx.x]);
        atomicAdd(&shared_out[2 * threadIdx.x], f.x);
        atomicAdd(&shared_out[2 * threadIdx.x + 1], f.y);
    }
}
'''


@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
def test_half_precision_atomic_add(arch):
    """atom.add.noftz.{f16,f16x2} and, for compute_90, {bf16,bf16x2} (compute_80 code adds
    bf16 with a compare-and-swap loop); sums of small integers are exact in any order."""
    m = cpuify.RawModule(code=HALF_ATOMIC_SRC, options=(f"--gpu-architecture={arch}",))
    n = 800
    h = np.zeros(4, np.float16)
    h2 = np.zeros(8, np.float16)
    b = np.zeros(4, np.uint16)
    b2 = np.zeros(8, np.uint16)
    so = np.zeros(8, np.float32)
    m.get_function("half_atomics")((4,), (256,), (h, h2, b, b2, so, np.int32(n)))
    np.testing.assert_array_equal(h, 200)
    np.testing.assert_array_equal(h2, np.tile([200, 100], 4))
    np.testing.assert_array_equal(_bf16_values(b), 200)
    np.testing.assert_array_equal(_bf16_values(b2), np.tile([100, 200], 4))
    # per block: 256 threads (the last block 32 of them) add (1, 2) into 4 slots
    per_slot = (3 * 64 + 8)
    np.testing.assert_array_equal(so, np.tile([per_slot, 2 * per_slot], 4))
    args = [np.zeros(4, np.float16), np.zeros(8, np.float16), np.zeros(4, np.uint16),
            np.zeros(8, np.uint16), np.zeros(8, np.float32)]
    interpret_kernel(m.ptx, "half_atomics", (2,), (32,), (*args, np.int32(64)))
    np.testing.assert_array_equal(args[0], 16)
    np.testing.assert_array_equal(_bf16_values(args[3]), np.tile([8, 16], 4))


def test_census_forms_down_to_one_in_ten_thousand_are_accepted():
    """Every PTX form (opcode with all modifiers) with at least 1 in 10,000 of the census's
    instructions passes the lifter's check, except textures (documented as not supported)
    and calls (inlined)."""
    from pathlib import Path
    from cpuify.frontend.ptx_ast import Instruction
    from cpuify.lifting.semantics import check_instruction
    path = Path(__file__).resolve().parents[3] / "shared" / "ptx" / "census-full-opcodes.tsv"
    if not path.exists():
        pytest.skip("shared/ptx census not present")
    rows = [r.split("\t") for r in path.read_text().splitlines()[1:]]
    total = sum(int(r[1]) for r in rows)

    class Refused(Exception):
        pass

    class Lifter:
        def error(self, msg, line, cls=None):  # noqa: ANN001, ANN201
            raise Refused(msg)

    refused = []
    for full, count, _files in rows:
        op, *mods = full.split(".")
        if int(count) * 10_000 < total or op in ("tex", "call"):
            continue
        try:
            check_instruction(Instruction(op, tuple(mods), (), 1, full), Lifter())  # type: ignore[arg-type]
        except Refused as exc:
            refused.append(f"{full}: {exc}")
    assert refused == []


def test_relu_forms():
    """.relu on cvt to f16/bf16 and on fma.f16x2: negative results become +0."""
    src = r'''
    #include <cuda_fp16.h>
    #include <cuda_bf16.h>
    extern "C" __global__ void relu(const float *x, unsigned short *h, unsigned short *b,
                                    __half2 *h2) {
        int i = threadIdx.x;
        unsigned short v, w;
        asm("cvt.rn.relu.f16.f32 %0, %1;" : "=h"(v) : "f"(x[i]));
        asm("cvt.rn.relu.bf16.f32 %0, %1;" : "=h"(w) : "f"(x[i]));
        h[i] = v;
        b[i] = w;
        h2[i] = __hfma2_relu(__floats2half2_rn(x[i], -x[i]), __floats2half2_rn(1.0f, 1.0f),
                             __floats2half2_rn(0.0f, 0.0f));
    }'''
    m = cpuify.RawModule(code=src, options=("--gpu-architecture=compute_80",))
    x = np.array([1.5, -2.0, 0.25, -0.0, 3.0, -7.0, 65504.0, -1e-3], np.float32)
    h, b = np.zeros(8, np.uint16), np.zeros(8, np.uint16)
    h2 = np.zeros(16, np.float16)
    m.get_function("relu")((1,), (8,), (x, h, b, h2))
    pos = np.maximum(x, 0)
    np.testing.assert_array_equal(h.view(np.float16), pos.astype(np.float16))
    np.testing.assert_array_equal(b, _bf16_bits(pos))
    np.testing.assert_array_equal(h2.reshape(8, 2),
                                  np.stack([pos, np.maximum(-x, 0)], 1).astype(np.float16))
    hi, bi, h2i = np.zeros_like(h), np.zeros_like(b), np.zeros_like(h2)
    interpret_kernel(m.ptx, "relu", (1,), (8,), (x, hi, bi, h2i))
    np.testing.assert_array_equal(hi, h)
    np.testing.assert_array_equal(bi, b)
    np.testing.assert_array_equal(h2i, h2)


# --- found by a sweep over public CUDA code: the min-cut of values kept across barriers -----------

CHUNK_SCAN_SRC = r'''
__device__ float block_exscan(float v, volatile float *s) {
    int t = threadIdx.x;
    s[t] = 0.0f;
    s[t + blockDim.x] = v;
    __syncthreads();
    for (int d = 1; d < blockDim.x; d *= 2) {
        float a = s[t + blockDim.x - d];
        __syncthreads();
        s[t + blockDim.x] += a;
        __syncthreads();
    }
    return s[t + blockDim.x] - v;
}
extern "C" __global__ void chunk_scan(const float *in, float *out, const float *seeds, int n) {
    extern __shared__ float s[];
    __shared__ float seed;
    const float4 *in4 = (const float4 *)in;
    float4 *out4 = (float4 *)out;
    n /= 4;
    int size = n / gridDim.x;
    int lo = blockIdx.x * size;
    int hi = blockIdx.x == gridDim.x - 1 ? n : lo + size;
    int i = lo + threadIdx.x;
    if (threadIdx.x == 0) seed = seeds[blockIdx.x];
    __syncthreads();
    for (int w = lo; w < hi; w += blockDim.x, i += blockDim.x) {
        float4 v = i < hi ? in4[i] : make_float4(0, 0, 0, 0);
        v.y += v.x; v.z += v.y; v.w += v.z;
        float before = block_exscan(v.w, s) + seed;
        if (i < hi) out4[i] = make_float4(v.x + before, v.y + before, v.z + before, v.w + before);
        __syncthreads();
        if (threadIdx.x == blockDim.x - 1) seed = before + v.w;
        __syncthreads();
    }
}
'''


def test_chunked_scan_whose_live_values_can_all_be_recomputed():
    """A block-chunked scan shaped like SHOC's bottom_scan: at one barrier every value that
    crosses it can be recomputed, so the min-cut's flow network had no edge from its source
    (a KeyError from the pass). Checked against NumPy."""
    m = cpuify.RawModule(code=CHUNK_SCAN_SRC)
    n, grid, bs = 4 * 128 * 3 + 32, 2, 128
    x = (np.arange(n) % 5).astype(np.float32)
    seeds = np.array([0.0, 50.0], np.float32)
    o = np.zeros(n, np.float32)
    m.get_function("chunk_scan")((grid,), (bs,), (x, o, seeds, np.int32(n)), shared_mem=2 * bs * 4)
    n4 = n // 4
    region = n4 // grid
    ref = np.zeros(n, np.float32)
    for b in range(grid):
        s, e = 4 * b * region, 4 * (n4 if b == grid - 1 else (b + 1) * region)
        ref[s:e] = np.cumsum(x[s:e]) + seeds[b]
    np.testing.assert_array_equal(o, ref)


PARAM_POINTER_PTX = r'''
.version 8.0
.target sm_75
.address_size 64
.func  (.param .b32 func_retval0) pick(.param .align 4 .b8 pick_param_0[64], .param .b32 pick_param_1)
{
	.reg .b32 %r<4>;
	.reg .b64 %rd<5>;
	mov.b64 %rd1, pick_param_0;
	ld.param.u32 %r1, [pick_param_1];
	mul.wide.s32 %rd2, %r1, 4;
	add.s64 %rd3, %rd1, %rd2;
	ld.param.u32 %r2, [%rd3];
	st.param.b32 [func_retval0+0], %r2;
	ret;
}
.visible .entry k(.param .align 4 .b8 k_param_0[64], .param .u64 k_param_1)
{
	.reg .b32 %r<40>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd1, [k_param_1];
	cvta.to.global.u64 %rd2, %rd1;
	ld.param.u32 %r1, [k_param_0];
	ld.param.u32 %r2, [k_param_0+4];
	ld.param.u32 %r3, [k_param_0+60];
	mov.u32 %r5, %tid.x;
	{
	.param .align 4 .b8 param0[64];
	st.param.b32 [param0+0], %r1;
	st.param.b32 [param0+4], %r2;
	st.param.b32 [param0+60], %r3;
	ld.param.u32 %r9, [k_param_0+8];
	st.param.b32 [param0+8], %r9;
	ld.param.u32 %r10, [k_param_0+12];
	st.param.b32 [param0+12], %r10;
	ld.param.u32 %r11, [k_param_0+16];
	st.param.b32 [param0+16], %r11;
	ld.param.u32 %r12, [k_param_0+20];
	st.param.b32 [param0+20], %r12;
	ld.param.u32 %r13, [k_param_0+24];
	st.param.b32 [param0+24], %r13;
	ld.param.u32 %r14, [k_param_0+28];
	st.param.b32 [param0+28], %r14;
	ld.param.u32 %r15, [k_param_0+32];
	st.param.b32 [param0+32], %r15;
	ld.param.u32 %r16, [k_param_0+36];
	st.param.b32 [param0+36], %r16;
	ld.param.u32 %r17, [k_param_0+40];
	st.param.b32 [param0+40], %r17;
	ld.param.u32 %r18, [k_param_0+44];
	st.param.b32 [param0+44], %r18;
	ld.param.u32 %r19, [k_param_0+48];
	st.param.b32 [param0+48], %r19;
	ld.param.u32 %r18, [k_param_0+52];
	st.param.b32 [param0+52], %r18;
	ld.param.u32 %r21, [k_param_0+56];
	st.param.b32 [param0+56], %r21;
	.param .b32 param1;
	st.param.b32 [param1+0], %r5;
	.param .b32 retval0;
	call.uni (retval0), pick, (param0, param1);
	ld.param.b32 %r6, [retval0+0];
	}
	mul.wide.u32 %rd3, %r5, 4;
	add.s64 %rd2, %rd2, %rd3;
	st.global.u32 [%rd2], %r6;
	ret;
}
'''


def test_device_function_loads_its_struct_parameter_through_a_register():
    """`ld.param [%rd]` in a device function, %rd computed from the address of its own
    by-value struct parameter: a load from the local copy the call made (it read through a
    local-window offset as if it were an address)."""
    p = np.arange(16, dtype=np.int32) * 3 + 1
    o = np.full(16, -1, np.int32)
    cpuify.RawModule(ptx=PARAM_POINTER_PTX).get_function("k")((1,), (16,), (p.tobytes(), o))
    np.testing.assert_array_equal(o, p)
    o[:] = -1
    interpret_kernel(PARAM_POINTER_PTX, "k", (1,), (16,), (p.tobytes(), o))
    np.testing.assert_array_equal(o, p)
