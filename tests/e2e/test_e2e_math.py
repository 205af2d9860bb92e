"""Math library, integer intrinsics and conversions, checked against NumPy / exact Python
arithmetic.

Documented tolerances (CUDA Programming Guide, "Mathematical Functions" appendix, maximum
ulp error; cpuify may be more accurate, never less):
    float:  sinf/cosf/expf/tanhf 2 ulp, logf 1 ulp, rsqrtf 2 ulp, powf 4 ulp (checked at
            4 ulp), sqrtf/fabsf/floorf/fminf/fmaxf/fmaf exact (0 ulp, correctly rounded);
            hypotf/atan2f 3 ulp, cbrtf/log2f 1 ulp, erff/exp2f 2 ulp,
            fmodf/remainderf/ldexpf/frexpf/copysignf exact.
    double: sin/cos/tanh 2 ulp, exp/log 1 ulp (checked at 2), pow 2 ulp, sqrt/fma exact.
    fast intrinsics: __sinf absolute error <= 2^-21.41 on [-pi, pi] (checked at 1e-6),
            __expf relative error <= 2 + floor(|1.16 x|) ulp (checked at 1e-5 relative for
            |x| < 10), __fdividef like x/y within 2 ulp for normal y; the same bounds
            for sinf/expf under --use_fast_math.
"""

from __future__ import annotations

from fractions import Fraction
from math import erf

import numpy as np
import pytest

import cpuify

# one module per group, so a compiler problem in one group does not hide the others
F32_SRC = r'''
extern "C" __global__ void math_f32(const float *x, const float *y, const float *z,
                                    float *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float a = x[i], b = y[i], c = z[i];     // a in (0.01, 20), b in (-3, 3), c any
    float *r = o + 16 * i;
    r[0] = sinf(b * 10.0f);
    r[1] = cosf(b * 10.0f);
    r[2] = expf(b * 5.0f);
    r[3] = logf(a);
    r[4] = sqrtf(a);
    r[5] = rsqrtf(a);
    r[6] = powf(a, b);
    r[7] = tanhf(b);
    r[8] = fabsf(c);
    r[9] = floorf(c);
    r[10] = fminf(b, c);
    r[11] = fmaxf(b, c);
    r[12] = fmaf(a, b, c);
    r[13] = ceilf(c);
    r[14] = truncf(c);
    r[15] = roundf(c);
}
'''

F64_SRC = r'''
extern "C" __global__ void math_f64(const double *x, const double *y, const double *z,
                                    double *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double a = x[i], b = y[i], c = z[i];
    double *r = o + 10 * i;
    r[0] = sin(b * 10.0);
    r[1] = cos(b * 10.0);
    r[2] = exp(b * 5.0);
    r[3] = log(a);
    r[4] = sqrt(a);
    r[5] = pow(a, b);
    r[6] = tanh(b);
    r[7] = fma(a, b, c);
    r[8] = floor(c);
    r[9] = fmin(b, c);
}
'''

FAST_SRC = r'''
extern "C" __global__ void fast_math(const float *x, float *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float a = x[i];                          // a in [-pi, pi]
    o[3 * i + 0] = __sinf(a);
    o[3 * i + 1] = __expf(a * 3.0f);
    o[3 * i + 2] = __fdividef(a, 1.5f + a * a);
}
'''

INT_SRC = r'''
extern "C" __global__ void int_intrinsics(const unsigned int *u, const unsigned int *v,
                                          const unsigned long long *w, long long *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int a = u[i], b = v[i];
    unsigned long long c = w[i];
    long long *r = o + 14 * i;
    r[0] = __popc(a);
    r[1] = __popcll(c);
    r[2] = __clz(a);
    r[3] = __clzll(c);
    r[4] = __brev(a);
    r[5] = __ffs(a);
    r[6] = __ffsll((long long)c);
    r[7] = __byte_perm(a, b, b & 0x7777u);
    r[8] = __umulhi(a, b);
    r[9] = __mulhi((int)a, (int)b);
    r[10] = (long long)__umul64hi(c, (unsigned long long)a * 3u + 1u);
    r[11] = __mul24((int)(a & 0xffffff) - 0x800000, (int)(b & 0xffffff) - 0x800000);
    r[12] = __umul24(a, b);
    r[13] = __brevll(c) >> 1;
}

extern "C" __global__ void int_arith(const int *x, const int *y, const long long *X,
                                     const long long *Y, const int *s, long long *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int a = x[i], b = y[i];
    long long A = X[i], B = Y[i];
    int sh = s[i];                       // 0..31 for the C shifts
    unsigned int ua = (unsigned int)a;
    long long *r = o + 14 * i;
    r[0] = a / b;  r[1] = a % b;
    r[2] = A / B;  r[3] = A % B;
    r[4] = ua / (unsigned int)b;  r[5] = ua % (unsigned int)b;
    r[6] = min(a, b); r[7] = max(a, b);
    r[8] = min(ua, (unsigned int)b);  r[9] = max(ua, (unsigned int)b);
    r[10] = a << sh;   // as unsigned bits
    r[11] = a >> sh;   // arithmetic
    r[12] = ua >> sh;  // logical
    r[13] = A >> (sh * 2);
}

// PTX shift semantics for amounts >= the width (C++ leaves them undefined): the amount
// is clamped, so shl/shr.u give 0 and shr.s gives the sign fill
extern "C" __global__ void big_shifts(const int *x, const unsigned int *s, int *o,
                                      long long *o64, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int a = x[i]; unsigned int k = s[i];
    int r0, r1, r2;
    asm("shl.b32 %0, %1, %2;" : "=r"(r0) : "r"(a), "r"(k));
    asm("shr.s32 %0, %1, %2;" : "=r"(r1) : "r"(a), "r"(k));
    asm("shr.u32 %0, %1, %2;" : "=r"(r2) : "r"(a), "r"(k));
    o[5 * i + 0] = r0; o[5 * i + 1] = r1; o[5 * i + 2] = r2;
    o[5 * i + 3] = (int)__funnelshift_l((unsigned)a, 0x9abcdef0u, k);    // amount & 31
    o[5 * i + 4] = (int)__funnelshift_rc((unsigned)a, 0x9abcdef0u, k);   // clamped to 32
    long long A = ((long long)a << 20) ^ 0x5555;
    long long q0, q1;
    asm("shl.b64 %0, %1, %2;" : "=l"(q0) : "l"(A), "r"(k * 2));
    asm("shr.s64 %0, %1, %2;" : "=l"(q1) : "l"(A), "r"(k * 2));
    o64[2 * i] = q0; o64[2 * i + 1] = q1;
}

extern "C" __global__ void div_by_zero(const int *x, int *o, unsigned int *uo, int zero) {
    int i = threadIdx.x;
    o[i] = x[i] / zero;
    uo[i] = (unsigned int)x[i] / (unsigned int)zero;
}
'''

CONV_SRC = r'''
extern "C" __global__ void f2i(const float *x, int *o, unsigned int *uo, long long *lo, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float a = x[i];
    o[5 * i + 0] = __float2int_rn(a);
    o[5 * i + 1] = __float2int_rz(a);
    o[5 * i + 2] = __float2int_rd(a);
    o[5 * i + 3] = __float2int_ru(a);
    o[5 * i + 4] = (int)a;
    uo[2 * i + 0] = __float2uint_rn(a);
    uo[2 * i + 1] = (unsigned int)__saturatef(a) * 7u + __float2uint_rz(a);
    lo[2 * i + 0] = __float2ll_rn(a);
    lo[2 * i + 1] = __float2ll_rz(a);
}

extern "C" __global__ void conv_misc(const double *d, const int *k, const long long *L,
                                     float *fo, double *dout, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    fo[6 * i + 0] = __double2float_rn(d[i]);
    fo[6 * i + 1] = __double2float_rz(d[i]);
    fo[6 * i + 2] = __double2float_rd(d[i]);
    fo[6 * i + 3] = __double2float_ru(d[i]);
    fo[6 * i + 4] = __int2float_rn(k[i]);
    fo[6 * i + 5] = __int2float_rz(k[i]);
    dout[3 * i + 0] = (double)L[i];
    dout[3 * i + 1] = (double)__double2int_rn(d[i] * 1e9) ;
    dout[3 * i + 2] = (double)__double2ll_rd(d[i] * 1e12);
}
'''


_SRCS = {"math_f32": F32_SRC, "math_f64": F64_SRC, "fast_math": FAST_SRC,
         "int_intrinsics": INT_SRC, "int_arith": INT_SRC, "big_shifts": INT_SRC,
         "div_by_zero": INT_SRC, "f2i": CONV_SRC, "conv_misc": CONV_SRC}


class _Modules:
    def __init__(self):
        self.cache = {}

    def get_function(self, name):
        src = _SRCS[name]
        if src not in self.cache:
            self.cache[src] = cpuify.RawModule(code=src)
        return self.cache[src].get_function(name)


@pytest.fixture(scope="module")
def mod():
    return _Modules()


def ulp_diff(got, ref, dtype):
    """|got - ref| in units of the last place of ref rounded to dtype."""
    r = ref.astype(dtype)
    sp = np.spacing(np.abs(r)).astype(np.float64)
    return np.abs(got.astype(np.float64) - ref.astype(np.float64)) / sp


def assert_ulp(got, ref, dtype, max_ulp, what):
    d = ulp_diff(got, ref, dtype)
    worst = int(np.argmax(d))
    assert d[worst] <= max_ulp, (f"{what}: {d[worst]:.2f} ulp at index {worst} "
                                 f"(got {got[worst]!r}, want {ref[worst]!r})")


def _round_to(fr: Fraction, dtype):
    """Correctly rounded (to nearest even) conversion of an exact rational."""
    f = dtype(float(fr))
    cands = [f, np.nextafter(f, dtype(np.inf)), np.nextafter(f, dtype(-np.inf))]
    best = min(cands, key=lambda c: (abs(Fraction(float(c)) - fr),
                                     int(np.array(c).view(np.uint32 if dtype == np.float32 else np.uint64)) & 1))
    return best


def test_float32_math_functions(mod, rng):
    n = 400
    x = rng.uniform(0.01, 20, n).astype(np.float32)
    y = rng.uniform(-3, 3, n).astype(np.float32)
    z = (rng.standard_normal(n) * 100).astype(np.float32)
    z[:6] = [2.5, -2.5, 3.5, -0.5, 0.0, -7.0]
    o = np.zeros(16 * n, np.float32)
    mod.get_function("math_f32")((4,), (128,), (x, y, z, o, np.int32(n)))
    r = o.reshape(n, 16)
    X, Y, Z = (v.astype(np.float64) for v in (x, y, z))
    b10 = (y * np.float32(10)).astype(np.float64)
    b5 = (y * np.float32(5)).astype(np.float64)
    assert_ulp(r[:, 0], np.sin(b10), np.float32, 2, "sinf")
    assert_ulp(r[:, 1], np.cos(b10), np.float32, 2, "cosf")
    assert_ulp(r[:, 2], np.exp(b5), np.float32, 2, "expf")
    assert_ulp(r[:, 3], np.log(X), np.float32, 1, "logf")
    np.testing.assert_array_equal(r[:, 4], np.sqrt(x))                 # IEEE sqrt
    assert_ulp(r[:, 5], 1 / np.sqrt(X), np.float32, 2, "rsqrtf")
    assert_ulp(r[:, 6], X ** Y, np.float32, 4, "powf")
    assert_ulp(r[:, 7], np.tanh(Y), np.float32, 2, "tanhf")
    np.testing.assert_array_equal(r[:, 8], np.abs(z))
    np.testing.assert_array_equal(r[:, 9], np.floor(z))
    np.testing.assert_array_equal(r[:, 10], np.fmin(y, z))
    np.testing.assert_array_equal(r[:, 11], np.fmax(y, z))
    fma_ref = np.array([_round_to(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)),
                                  np.float32) for a, b, c in zip(x, y, z)], np.float32)
    np.testing.assert_array_equal(r[:, 12], fma_ref)
    np.testing.assert_array_equal(r[:, 13], np.ceil(z))
    np.testing.assert_array_equal(r[:, 14], np.trunc(z))
    # roundf rounds half away from zero (unlike np.round)
    np.testing.assert_array_equal(r[:, 15], np.sign(z) * np.floor(np.abs(z) + np.float32(0.5)))
    assert r[0, 15] == 3.0 and r[1, 15] == -3.0 and r[3, 15] == -1.0


def test_float64_math_functions(mod, rng):
    n = 300
    x = rng.uniform(0.01, 20, n)
    y = rng.uniform(-3, 3, n)
    z = rng.standard_normal(n) * 100
    o = np.zeros(10 * n)
    mod.get_function("math_f64")((3,), (128,), (x, y, z, o, np.int32(n)))
    r = o.reshape(n, 10)
    assert_ulp(r[:, 0], np.sin(y * 10), np.float64, 2, "sin")
    assert_ulp(r[:, 1], np.cos(y * 10), np.float64, 2, "cos")
    assert_ulp(r[:, 2], np.exp(y * 5), np.float64, 2, "exp")
    assert_ulp(r[:, 3], np.log(x), np.float64, 2, "log")
    np.testing.assert_array_equal(r[:, 4], np.sqrt(x))
    assert_ulp(r[:, 5], x ** y, np.float64, 2, "pow")
    assert_ulp(r[:, 6], np.tanh(y), np.float64, 2, "tanh")
    fma_ref = np.array([float(Fraction(a) * Fraction(b) + Fraction(c)) for a, b, c in zip(x, y, z)])
    np.testing.assert_array_equal(r[:, 7], fma_ref)
    np.testing.assert_array_equal(r[:, 8], np.floor(z))
    np.testing.assert_array_equal(r[:, 9], np.fmin(y, z))


def test_fast_intrinsics_looser_tolerance(mod, rng):
    n = 500
    x = rng.uniform(-np.pi, np.pi, n).astype(np.float32)
    o = np.zeros(3 * n, np.float32)
    mod.get_function("fast_math")((4,), (128,), (x, o, np.int32(n)))
    r = o.reshape(n, 3)
    X = x.astype(np.float64)
    np.testing.assert_allclose(r[:, 0], np.sin(X), rtol=0, atol=1e-6)
    np.testing.assert_allclose(r[:, 1], np.exp((x * np.float32(3)).astype(np.float64)), rtol=1e-5)
    np.testing.assert_allclose(r[:, 2], X / (1.5 + (x * x).astype(np.float64)), rtol=1e-6)


def _intrinsics_ref(a, b, c):
    a, b, c = int(a), int(b), int(c)
    s32 = lambda v: v - (1 << 32) if v >= 1 << 31 else v
    s24 = lambda v: (v & 0xFFFFFF) - (1 << 24) if v & 0x800000 else v & 0xFFFFFF
    sel = b & 0x7777
    bytes_ = a.to_bytes(4, "little") + b.to_bytes(4, "little")
    perm = 0
    for k in range(4):
        perm |= bytes_[(sel >> (4 * k)) & 7] << (8 * k)
    m = (a * 3 + 1) & 0xFFFFFFFFFFFFFFFF      # (unsigned long long)a * 3u + 1u
    ma, mb = (a & 0xFFFFFF) - 0x800000, (b & 0xFFFFFF) - 0x800000
    return [
        bin(a).count("1"),
        bin(c).count("1"),
        32 - a.bit_length(),
        64 - c.bit_length(),
        int(f"{a:032b}"[::-1], 2),
        (a & -a).bit_length(),
        (c & -c).bit_length(),
        perm,
        (a * b) >> 32,
        (s32(a) * s32(b)) >> 32,
        ((c * m) >> 64) - (1 << 64 if (c * m) >> 64 >= 1 << 63 else 0),
        s32(((s24(ma) * s24(mb)) & 0xFFFFFFFF)),
        ((a & 0xFFFFFF) * (b & 0xFFFFFF)) & 0xFFFFFFFF,
        int(f"{c:064b}"[::-1], 2) >> 1,
    ]


def test_integer_intrinsics(mod, rng):
    n = 256
    u = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    v = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    w = rng.integers(0, 2**63, n, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    u[:4] = [0, 1, 0x80000000, 0xFFFFFFFF]
    w[:4] = [0, 1, 1 << 63, 0xFFFFFFFFFFFFFFFF]
    w[4] = 1 << 40
    o = np.zeros(14 * n, np.int64)
    mod.get_function("int_intrinsics")((2,), (128,), (u, v, w, o, np.int32(n)))
    got = o.reshape(n, 14)
    names = ["popc", "popcll", "clz", "clzll", "brev", "ffs", "ffsll", "byte_perm", "umulhi",
             "mulhi", "umul64hi", "mul24", "umul24", "brevll"]
    for i in range(n):
        ref = _intrinsics_ref(u[i], v[i], w[i])
        for k in range(14):
            assert got[i, k] == ref[k], (f"__{names[k]} with a={u[i]:#x} b={v[i]:#x} "
                                          f"c={int(w[i]):#x}: got {got[i, k]}, want {ref[k]}")


def _cdiv(a, b):
    q = abs(a) // abs(b)
    return -q if (a < 0) != (b < 0) else q


def test_integer_division_shifts_minmax(mod, rng):
    n = 300
    x = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    y = rng.integers(-1000, 1000, n, dtype=np.int32)
    y[y == 0] = -7
    X = rng.integers(-2**62, 2**62, n, dtype=np.int64)
    Y = rng.integers(-2**31, 2**31, n, dtype=np.int64)
    Y[Y == 0] = 3
    x[:4] = [-7, 7, -7, 7]; y[:4] = [2, -2, -2, 2]
    s = rng.integers(0, 32, n, dtype=np.int32)
    o = np.zeros(14 * n, np.int64)
    mod.get_function("int_arith")((3,), (128,), (x, y, X, Y, s, o, np.int32(n)))
    got = o.reshape(n, 14)
    for i in range(n):
        a, b, A, B, sh = int(x[i]), int(y[i]), int(X[i]), int(Y[i]), int(s[i])
        ua, ub = a & 0xFFFFFFFF, b & 0xFFFFFFFF
        q = _cdiv(a, b)
        Q = _cdiv(A, B)
        shl = (ua << sh) & 0xFFFFFFFF
        ref = [q, a - b * q, Q, A - B * Q, ua // ub, ua % ub, min(a, b), max(a, b),
               min(ua, ub), max(ua, ub), shl - (1 << 32) if shl >> 31 else shl, a >> sh,
               ua >> sh, A >> (2 * sh)]
        np.testing.assert_array_equal(got[i], ref, err_msg=f"a={a} b={b} A={A} B={B} sh={sh}")
    assert list(got[:4, 0]) == [-3, -3, 3, 3] and list(got[:4, 1]) == [-1, 1, -1, 1]


def test_shift_amounts_at_and_beyond_width(mod, rng):
    n = 80
    x = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    x[0], x[1] = -1, np.int32(-2**31)
    s = np.arange(n, dtype=np.uint32)          # 0 .. 79: includes 32 and more
    o = np.zeros(5 * n, np.int32)
    o64 = np.zeros(2 * n, np.int64)
    mod.get_function("big_shifts")((1,), (128,), (x, s, o, o64, np.int32(n)))
    got = o.reshape(n, 5)
    g64 = o64.reshape(n, 2)
    for i in range(n):
        a, k = int(x[i]), int(s[i])
        ua = a & 0xFFFFFFFF
        kc = min(k, 32)
        s32 = lambda v: v - (1 << 32) if v & 0x80000000 else v
        # __funnelshift_l/_rc(lo, hi, shift) work on the 64-bit value hi:lo
        fl = ((((0x9abcdef0 << 32) | ua) << (k & 31)) >> 32) & 0xFFFFFFFF
        fr = ((((0x9abcdef0 << 32) | ua) >> kc)) & 0xFFFFFFFF
        ref = [s32((ua << kc) & 0xFFFFFFFF), a >> kc, s32(ua >> kc), s32(fl), s32(fr)]
        np.testing.assert_array_equal(got[i], ref, err_msg=f"a={a:#x} k={k}")
        A = (a << 20) ^ 0x5555
        k2 = min(2 * k, 64)
        sh = (A << k2) & 0xFFFFFFFFFFFFFFFF
        np.testing.assert_array_equal(g64[i], [sh - (1 << 64) if sh >> 63 else sh, A >> k2],
                                      err_msg=f"A={A:#x} k={2 * k}")


def test_integer_division_by_zero_is_all_ones(mod):
    x = np.array([5, -5, 0, 2**31 - 1], np.int32)
    o = np.zeros(4, np.int32)
    uo = np.zeros(4, np.uint32)
    mod.get_function("div_by_zero")((1,), (4,), (x, o, uo, np.int32(0)))
    assert (uo == 0xFFFFFFFF).all()
    assert (o == -1).all()


def test_float_to_int_rounding_and_saturation(mod):
    vals = np.array([2.5, 3.5, -2.5, -3.5, 2.4, -2.6, 0.5, -0.5, 1e20, -1e20, np.nan,
                     2147483520.0, -2147483648.0, 4294967040.0, 3e9, -1.0, 1e-30, np.inf,
                     -np.inf, 9.3e18, -9.3e18], np.float32)
    n = vals.size
    o = np.zeros(5 * n, np.int32)
    uo = np.zeros(2 * n, np.uint32)
    lo = np.zeros(2 * n, np.int64)
    mod.get_function("f2i")((1,), (32,), (vals, o, uo, lo, np.int32(n)))
    o = o.reshape(n, 5); uo = uo.reshape(n, 2); lo = lo.reshape(n, 2)
    IMAX, IMIN = 2**31 - 1, -2**31

    def sat(v, lo_, hi_):
        if np.isnan(v):
            return 0
        return int(min(max(v, lo_), hi_))

    for i, v in enumerate(vals.astype(np.float64)):
        rn = np.rint(v) if np.isfinite(v) else v
        exp = [sat(rn, IMIN, IMAX), sat(np.trunc(v) if np.isfinite(v) else v, IMIN, IMAX),
               sat(np.floor(v) if np.isfinite(v) else v, IMIN, IMAX),
               sat(np.ceil(v) if np.isfinite(v) else v, IMIN, IMAX),
               sat(np.trunc(v) if np.isfinite(v) else v, IMIN, IMAX)]
        np.testing.assert_array_equal(o[i], exp, err_msg=f"float {v!r} -> int (rn, rz, rd, ru, cast)")
        assert uo[i, 0] == sat(rn, 0, 2**32 - 1), f"__float2uint_rn({v!r}) = {uo[i, 0]}"
        satf = 0.0 if np.isnan(v) else min(max(v, 0.0), 1.0)
        assert uo[i, 1] == (int(satf) * 7 + sat(np.trunc(v) if np.isfinite(v) else v, 0, 2**32 - 1)) % 2**32, \
            f"__saturatef/__float2uint_rz({v!r}) = {uo[i, 1]}"
        LMAX, LMIN = 2**63 - 1, -2**63
        if np.isnan(v):
            ll_rn = ll_rz = LMIN      # PTX: NaN converts to 0 for .s32, but 0x8000... for .s64
        else:
            ll_rn = sat(rn, LMIN, LMAX) if abs(v) < 2**63 else (LMAX if v > 0 else LMIN)
            ll_rz = sat(np.trunc(v) if np.isfinite(v) else v, LMIN, LMAX) if abs(v) < 2**63 \
                else (LMAX if v > 0 else LMIN)
        if not np.isnan(v):
            assert lo[i, 0] == ll_rn and lo[i, 1] == ll_rz, f"__float2ll_rn/rz({v!r}) = {lo[i]}"
    assert o[8].tolist() == [IMAX] * 5 and o[9].tolist() == [IMIN] * 5    # 1e20f, -1e20f
    assert o[10].tolist() == [0] * 5                                       # NaN


def test_directed_rounding_conversions(mod, rng):
    n = 200
    d = rng.standard_normal(n) * 10.0 ** rng.integers(-5, 6, n)
    d[:3] = [1 / 3, -1 / 3, 0.1]
    k = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    k[:3] = [16777217, -16777219, 2**31 - 1]
    L = rng.integers(-2**62, 2**62, n, dtype=np.int64)
    fo = np.zeros(6 * n, np.float32)
    dout = np.zeros(3 * n)
    mod.get_function("conv_misc")((2,), (128,), (d, k, L, fo, dout, np.int32(n)))
    fo = fo.reshape(n, 6); dout = dout.reshape(n, 3)
    for i in range(n):
        v = Fraction(float(d[i]))
        rn = d[i].astype(np.float32)
        assert fo[i, 0] == rn
        below = rn if Fraction(float(rn)) <= v else np.nextafter(rn, np.float32(-np.inf))
        above = rn if Fraction(float(rn)) >= v else np.nextafter(rn, np.float32(np.inf))
        assert fo[i, 2] == below, f"__double2float_rd({d[i]!r})"
        assert fo[i, 3] == above, f"__double2float_ru({d[i]!r})"
        assert fo[i, 1] == (below if v > 0 else above), f"__double2float_rz({d[i]!r})"
        kv = int(k[i])
        kf = np.float32(kv)        # NumPy int -> float32 rounds to nearest even
        assert fo[i, 4] == kf, f"__int2float_rn({kv})"
        kz = kf if abs(Fraction(float(kf))) <= abs(kv) else np.nextafter(kf, np.float32(0))
        assert fo[i, 5] == kz, f"__int2float_rz({kv})"
        assert dout[i, 0] == float(int(L[i]))
        p9 = d[i] * 1e9
        assert dout[i, 1] == (min(max(np.rint(p9), -2**31), 2**31 - 1)), f"__double2int_rn({p9!r})"
        p12 = d[i] * 1e12
        assert dout[i, 2] == float(min(max(int(np.floor(p12)), -2**63), 2**63 - 1)), \
            f"__double2ll_rd({p12!r})"


SPECIAL_SRC = r'''
extern "C" __global__ void special(const float *x, const float *y, float *o, int *flags, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float a = x[i], b = y[i];
    float *r = o + 8 * i;
    r[0] = a / b;
    r[1] = fminf(a, b);
    r[2] = fmaxf(a, b);
    r[3] = sqrtf(a);
    r[4] = a * b;
    r[5] = copysignf(3.0f, b);
    r[6] = fmodf(a, b);
    r[7] = a - a;
    flags[4 * i + 0] = isnan(a);
    flags[4 * i + 1] = isinf(b);
    flags[4 * i + 2] = signbit(b) != 0;
    flags[4 * i + 3] = (a < b) + 2 * (a == b) + 4 * (a != b);
}

extern "C" __global__ void more_math(const float *x, const float *y, float *o, int *e, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float a = x[i], b = y[i];       // a in (0.1, 50), b in (-5, 5)
    float *r = o + 9 * i;
    r[0] = hypotf(a, b);
    r[1] = cbrtf(b);
    r[2] = atan2f(b, a);
    r[3] = erff(b);
    r[4] = remainderf(a, b);
    r[5] = ldexpf(b, (int)a - 20);
    int ex;
    r[6] = frexpf(a, &ex);
    e[i] = ex;
    r[7] = log2f(a);
    r[8] = exp2f(b);
}

// subnormal arithmetic: kept by default, flushed with -ftz=true
extern "C" __global__ void subnormals(const float *x, float *o) {
    int i = threadIdx.x;
    o[2 * i] = x[i] * 0.5f;
    o[2 * i + 1] = x[i] + x[i];
}
'''


@pytest.fixture(scope="module")
def special_mod():
    return cpuify.RawModule(code=SPECIAL_SRC)


def test_ieee_special_values(special_mod):
    nan, inf = np.float32(np.nan), np.float32(np.inf)
    pairs = [(1.0, 0.0), (-1.0, 0.0), (0.0, 0.0), (1.0, -0.0), (nan, 1.0), (1.0, nan), (inf, inf),
             (inf, -inf), (-4.0, 2.0), (5.5, -2.0), (-5.5, 2.0), (inf, 1.0), (1e30, 1e30), (-0.0, 0.0)]
    x = np.array([p[0] for p in pairs], np.float32)
    y = np.array([p[1] for p in pairs], np.float32)
    n = x.size
    o = np.zeros(8 * n, np.float32)
    fl = np.zeros(4 * n, np.int32)
    special_mod.get_function("special")((1,), (32,), (x, y, o, fl, np.int32(n)))
    o = o.reshape(n, 8)
    fl = fl.reshape(n, 4)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(o[:, 0], x / y)
        np.testing.assert_array_equal(o[:, 1], np.fmin(x, y))        # NaN only if both are
        np.testing.assert_array_equal(o[:, 2], np.fmax(x, y))
        np.testing.assert_array_equal(o[:, 3], np.sqrt(x))
        np.testing.assert_array_equal(o[:, 4], x * y)
        np.testing.assert_array_equal(o[:, 5], np.copysign(np.float32(3), y))
        np.testing.assert_array_equal(o[:, 6], np.fmod(x, y))
        np.testing.assert_array_equal(o[:, 7], x - x)
    # signs of zeros and infinities
    assert np.signbit(o[1, 0]) and np.isinf(o[1, 0])          # -1/0 = -inf
    assert np.signbit(o[3, 0])                                 # 1/-0 = -inf
    np.testing.assert_array_equal(fl[:, 0], np.isnan(x))
    np.testing.assert_array_equal(fl[:, 1], np.isinf(y))
    np.testing.assert_array_equal(fl[:, 2], np.signbit(y))
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(fl[:, 3], (x < y) + 2 * (x == y) + 4 * (x != y))


def test_more_float_library_functions(special_mod, rng):
    n = 300
    x = rng.uniform(0.1, 50, n).astype(np.float32)
    y = rng.uniform(-5, 5, n).astype(np.float32)
    o = np.zeros(9 * n, np.float32)
    e = np.zeros(n, np.int32)
    special_mod.get_function("more_math")((3,), (128,), (x, y, o, e, np.int32(n)))
    r = o.reshape(n, 9)
    X, Y = x.astype(np.float64), y.astype(np.float64)
    assert_ulp(r[:, 0], np.hypot(X, Y), np.float32, 3, "hypotf")
    assert_ulp(r[:, 1], np.cbrt(Y), np.float32, 1, "cbrtf")
    assert_ulp(r[:, 2], np.arctan2(Y, X), np.float32, 3, "atan2f")
    assert_ulp(r[:, 3], np.array([erf(v) for v in Y]), np.float32, 2, "erff")
    np.testing.assert_array_equal(r[:, 4], np.array([_remainder(a, b) for a, b in
                                                     zip(x.tolist(), y.tolist())], np.float32))
    np.testing.assert_array_equal(r[:, 5], np.ldexp(y, (x.astype(np.int32) - 20)))
    mant, ex = np.frexp(x)
    np.testing.assert_array_equal(r[:, 6], mant)
    np.testing.assert_array_equal(e, ex)
    assert_ulp(r[:, 7], np.log2(X), np.float32, 1, "log2f")
    assert_ulp(r[:, 8], np.exp2(Y), np.float32, 2, "exp2f")


def _remainder(a, b):
    """IEEE remainder, exactly: a - b*n with n = a/b rounded to nearest even."""
    fa, fb = Fraction(a), Fraction(b)
    q = fa / fb
    nq = round(q)                          # Python rounds halves to even
    return float(fa - fb * nq)


def test_subnormals_kept_in_plain_ptx_and_flushed_as_cupy_compiles():
    """PTX compiled without -ftz keeps f32 subnormals; source given to the CuPy-style API is
    compiled with -ftz=true appended, as CuPy does (so it flushes, as on a GPU under CuPy)."""
    from cpuify.frontend.nvrtc import compile_to_ptx
    tiny = np.array([1e-39, -3e-39, 1.2e-38, 1e-45, 2e-38, 5.0, 0.0, -1e-40], np.float32)
    assert np.count_nonzero(np.abs(tiny[tiny != 0]) < np.finfo(np.float32).tiny) >= 4
    o = np.zeros(2 * tiny.size, np.float32)
    plain = cpuify.RawModule(ptx=compile_to_ptx(SPECIAL_SRC, filename="special.cu").ptx)
    plain.get_function("subnormals")((1,), (tiny.size,), (tiny, o))
    np.testing.assert_array_equal(o[0::2], tiny * np.float32(0.5))
    np.testing.assert_array_equal(o[1::2], tiny + tiny)
    o[:] = 7
    ftz = cpuify.RawModule(code=SPECIAL_SRC)
    ftz.get_function("subnormals")((1,), (tiny.size,), (tiny, o))

    def flush(v):
        return np.where(np.abs(v) < np.finfo(np.float32).tiny, np.float32(0), v)
    np.testing.assert_array_equal(np.abs(o[0::2]), np.abs(flush(flush(tiny) * np.float32(0.5))))
    np.testing.assert_array_equal(np.abs(o[1::2]), np.abs(flush(flush(tiny) + flush(tiny))))


def test_use_fast_math_option(rng):
    src = r'''
    extern "C" __global__ void fm(const float *x, float *o, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) { o[3 * i] = sinf(x[i]); o[3 * i + 1] = expf(x[i]); o[3 * i + 2] = x[i] / 3.0f; }
    }'''
    m = cpuify.RawModule(code=src, options=("--use_fast_math",))
    assert "approx" in m.ptx                     # the fast paths really are in the PTX
    x = rng.uniform(-3, 3, 256).astype(np.float32)
    o = np.zeros(3 * x.size, np.float32)
    m.get_function("fm")((2,), (128,), (x, o, np.int32(x.size)))
    r = o.reshape(-1, 3)
    X = x.astype(np.float64)
    np.testing.assert_allclose(r[:, 0], np.sin(X), rtol=0, atol=1e-6)
    np.testing.assert_allclose(r[:, 1], np.exp(X), rtol=1e-5)
    np.testing.assert_allclose(r[:, 2], X / 3, rtol=1e-6)
