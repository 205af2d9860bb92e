"""The reference interpreter (cpuify.interp): checked against NumPy, and used as an oracle for
the compiled path (differential tests: the same PTX, the same inputs, both executors).

Comparisons are bitwise (NaN == NaN) unless a test says otherwise.  The only tolerances are for
PTX's approximate transcendentals (sin/cos/ex2/lg2/tanh.approx): the compiled code evaluates
inline polynomials for the f32 sin/cos/ex2/lg2.approx (cpuify.codegen.approx_math, within 1 ulp
of the correctly rounded result; see tests/test_approx_math.py) and calls libm for tanh, the
interpreter rounds the double-precision NumPy function to f32, so they may differ by 1 ulp; and
for rsqrt.approx.f32, which compiled code on an
AVX-512 CPU computes from the CPU's estimate (within 2 ulp, CUDA's bound; see
tests/test_math_approx.py), the interpreter as the exact quotient.

Tests named `test_compiled_*` isolate a disagreement where the interpreter follows the PTX ISA
and the compiled path does not (each with a minimal kernel); the matching `test_interp_*`
test pins the PTX result the interpreter computes."""

from __future__ import annotations

import functools
import struct

import numpy as np
import pytest

import cpuify
from cpuify.errors import LaunchError, UnsupportedError
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.interp import InterpModule, interpret_kernel, pack_params

FLT_MAX = float(np.finfo(np.float32).max)
DBL_MAX = float(np.finfo(np.float64).max)


# --- helpers ------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def ptx_of(src: str, options: tuple[str, ...] = (), arch: str | None = None) -> str:
    return compile_to_ptx(src, options=options, arch=arch).ptx


@functools.lru_cache(maxsize=None)
def compiled(ptx: str) -> cpuify.RawModule:
    return cpuify.RawModule(ptx=ptx)


def _copies(args: tuple) -> tuple:
    return tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)


def run_both(ptx: str, name: str, grid, block, args: tuple, shared_mem: int = 0):
    """Run kernel `name` compiled and interpreted on separate copies of the array arguments;
    returns (compiled arrays, interpreted arrays) in argument order."""
    ca, ia = _copies(args), _copies(args)
    compiled(ptx).get_function(name)(grid, block, ca, shared_mem=shared_mem)
    interpret_kernel(ptx, name, grid, block, ia, shared_mem=shared_mem)
    arrays = [k for k, a in enumerate(args) if isinstance(a, np.ndarray)]
    return [ca[k] for k in arrays], [ia[k] for k in arrays]


def run_interp(ptx: str, name: str, grid, block, args: tuple, shared_mem: int = 0) -> list:
    a = _copies(args)
    interpret_kernel(ptx, name, grid, block, a, shared_mem=shared_mem)
    return [x for x in a if isinstance(x, np.ndarray)]


_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def same_bits(c: np.ndarray, i: np.ndarray) -> np.ndarray:
    if c.dtype.kind == "f":
        u = _UINT[c.dtype.itemsize]
        return (c.view(u) == i.view(u)) | (np.isnan(c) & np.isnan(i))
    return c == i


def assert_same(c: np.ndarray, i: np.ndarray, what: str = "") -> None:
    ok = same_bits(c, i)
    if not ok.all():
        bad = np.argwhere(~ok)[:8]
        idx = tuple(bad.T)
        raise AssertionError(f"{what}: compiled and interpreted results differ at {bad.tolist()}:\n"
                             f"  compiled: {c[idx]!r}\n  interp:   {i[idx]!r}")


def ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in f32 ulps (NaN vs NaN is 0)."""
    ia = a.view(np.int32).astype(np.int64)
    ib = b.view(np.int32).astype(np.int64)
    ia = np.where(ia < 0, -(ia & 0x7FFFFFFF), ia)
    ib = np.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    d = np.abs(ia - ib)
    d[np.isnan(a) & np.isnan(b)] = 0
    return d


def f32(v: float) -> np.float32:
    return np.float32(v)


def bits32(x) -> int:
    return struct.unpack("<I", np.float32(x).tobytes())[0]


# --- integer arithmetic: many opcodes ---------------------------------------------------------

INT_SRC = r"""
#define NOUT 96
#define ASM1(op, r, a) asm(op " %0, %1;" : "=r"(r) : "r"(a))
#define ASM2(op, r, a, b) asm(op " %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b))
#define ASM3(op, r, a, b, c) asm(op " %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c))
extern "C" __global__ void intops(const int* A, const int* B, const unsigned* S,
                                  const long long* A64, const long long* B64,
                                  unsigned* out, unsigned long long* out64, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int a = A[i], b = B[i];
    unsigned ua = a, ub = b, s = S[i];
    long long a64 = A64[i], b64 = B64[i];
    unsigned* o = out + i * NOUT;
    unsigned long long* q = out64 + i * 32;
    int k = 0, m = 0;
    unsigned r;
    o[k++] = a + b; o[k++] = a - b; o[k++] = a * b;                       // 0 1 2
    o[k++] = __mulhi(a, b); o[k++] = __umulhi(ua, ub);                    // 3 4
    ASM2("div.s32", r, a, b); o[k++] = r;                                 // 5
    ASM2("rem.s32", r, a, b); o[k++] = r;                                 // 6
    ASM2("div.u32", r, ua, ub); o[k++] = r;                               // 7
    ASM2("rem.u32", r, ua, ub); o[k++] = r;                               // 8
    ASM2("shl.b32", r, a, s); o[k++] = r;                                 // 9
    ASM2("shr.s32", r, a, s); o[k++] = r;                                 // 10
    ASM2("shr.u32", r, a, s); o[k++] = r;                                 // 11
    o[k++] = a << (s & 31); o[k++] = a >> (s & 31); o[k++] = ua >> (s & 31);
    o[k++] = a & b; o[k++] = a | b; o[k++] = a ^ b; o[k++] = ~a;          // 15..18
    o[k++] = (a & ~b) | (b ^ ua >> 3);
    o[k++] = __popc(a); o[k++] = __clz(a); o[k++] = __brev(a); o[k++] = __ffs(a);   // 20..23
    o[k++] = __byte_perm(a, b, s); o[k++] = __byte_perm(a, b, 0x8F3A);    // 24 25
    o[k++] = __funnelshift_l(a, b, s); o[k++] = __funnelshift_r(a, b, s);
    o[k++] = __funnelshift_lc(a, b, s); o[k++] = __funnelshift_rc(a, b, s);
    o[k++] = min(a, b); o[k++] = max(a, b); o[k++] = min(ua, ub); o[k++] = max(ua, ub);  // 30..33
    o[k++] = abs(a); o[k++] = __sad(a, b, ua); o[k++] = __usad(ua, ub, s);
    o[k++] = __mul24(a, b); o[k++] = __umul24(ua, ub);
    ASM2("mul24.hi.s32", r, a, b); o[k++] = r;
    ASM2("mul24.hi.u32", r, a, b); o[k++] = r;
    o[k++] = __hadd(a, b); o[k++] = __rhadd(a, b); o[k++] = __uhadd(ua, ub);
    o[k++] = (short)a; o[k++] = (signed char)a;     /* 44 */ o[k++] = (unsigned char)a; o[k++] = (unsigned short)b;
    o[k++] = a > b ? a : b * 3; o[k++] = (a < b) + (ua < ub) * 2 + (a == b) * 4 + (ua >= ub) * 8;
    ASM3("bfe.u32", r, a, s & 63, ub & 63); o[k++] = r;                   // 50
    asm("bfi.b32 %0, %1, %2, %3, %4;" : "=r"(r) : "r"(a), "r"(b), "r"(s & 63), "r"(ub & 63)); o[k++] = r;
    ASM1("bfind.s32", r, a); o[k++] = r;
    ASM1("bfind.u32", r, a); o[k++] = r;
    ASM1("bfind.shiftamt.u32", r, a); o[k++] = r;
    ASM1("cnot.b32", r, a & s); o[k++] = r;
    ASM2("add.sat.s32", r, a, b); o[k++] = r;                             // 56
    ASM2("sub.sat.s32", r, a, b); o[k++] = r;
    ASM1("cvt.sat.s8.s32", r, a); o[k++] = r;
    ASM1("cvt.sat.u16.s32", r, a); o[k++] = r;
    ASM1("cvt.sat.s32.u32", r, a); o[k++] = r;
    ASM3("prmt.b32.f4e", r, a, b, s); o[k++] = r;
    ASM3("prmt.b32.b4e", r, a, b, s); o[k++] = r;
    ASM3("prmt.b32.rc8", r, a, b, s); o[k++] = r;
    ASM3("prmt.b32.ecl", r, a, b, s); o[k++] = r;
    ASM3("prmt.b32.ecr", r, a, b, s); o[k++] = r;
    ASM3("prmt.b32.rc16", r, a, b, s); o[k++] = r;
    asm("lop3.b32 %0, %1, %2, %3, 0x96;" : "=r"(r) : "r"(a), "r"(b), "r"(s)); o[k++] = r;
    asm("lop3.b32 %0, %1, %2, %3, 0xE8;" : "=r"(r) : "r"(a), "r"(b), "r"(s)); o[k++] = r;
    o[k++] = __dp4a(a, b, (int)s); o[k++] = __dp4a(ua, ub, s);
    o[k++] = __dp2a_lo(a, b, (int)s); o[k++] = __dp2a_hi(ua, ub, s);
    ASM3("mad.hi.s32", r, a, b, s); o[k++] = r;
    ASM3("mad.lo.u32", r, a, b, s); o[k++] = r;
    ASM3("mad.hi.sat.s32", r, a, b, s); o[k++] = r;
    ASM3("sad.s32", r, a, b, s); o[k++] = r;
    asm("bmsk.clamp.b32 %0, %1, %2;" : "=r"(r) : "r"(s), "r"(ub & 63)); o[k++] = r;
    asm("bmsk.wrap.b32 %0, %1, %2;" : "=r"(r) : "r"(s), "r"(ub & 63)); o[k++] = r;
    asm("shf.l.wrap.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(s)); o[k++] = r;
    asm("shf.r.clamp.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(s)); o[k++] = r;
    { unsigned short h; asm("mul.lo.s16 %0, %1, %2;" : "=h"(h) : "h"((short)a), "h"((short)b)); o[k++] = h; }
    { unsigned short h; asm("shr.s16 %0, %1, %2;" : "=h"(h) : "h"((short)a), "r"(s)); o[k++] = h; }
    { int w; asm("mul.wide.s16 %0, %1, %2;" : "=r"(w) : "h"((short)a), "h"((short)b)); o[k++] = w; }
    { unsigned p; asm("{ .reg .pred p, q; setp.lt.s32 p|q, %1, %2; selp.u32 %0, 1, 2, q; }"
                      : "=r"(p) : "r"(a), "r"(b)); o[k++] = p; }
    { unsigned p; asm("{ .reg .pred p; setp.hi.and.u32 p, %1, %2, 1; set.ne.or.u32.s32 %0, %1, %3, p; }"
                      : "=r"(p) : "r"(a), "r"(b), "r"(s)); o[k++] = p; }
    q[m++] = a64 + b64; q[m++] = a64 * b64; q[m++] = __mul64hi(a64, b64);
    q[m++] = __umul64hi(a64, b64); q[m++] = a64 >> (s & 63); q[m++] = (unsigned long long)a64 >> (s & 63);
    q[m++] = a64 << (s & 63);
    { long long rr; asm("div.s64 %0, %1, %2;" : "=l"(rr) : "l"(a64), "l"(b64)); q[m++] = rr; }
    { long long rr; asm("rem.s64 %0, %1, %2;" : "=l"(rr) : "l"(a64), "l"(b64)); q[m++] = rr; }
    { long long rr; asm("div.u64 %0, %1, %2;" : "=l"(rr) : "l"(a64), "l"(b64)); q[m++] = rr; }
    { long long rr; asm("shr.s64 %0, %1, %2;" : "=l"(rr) : "l"(a64), "r"(s)); q[m++] = rr; }
    { long long rr; asm("bfe.u64 %0, %1, %2, %3;" : "=l"(rr) : "l"(a64), "r"(s & 127), "r"(ub & 127)); q[m++] = rr; }
    q[m++] = __popcll(a64); q[m++] = __clzll(a64); q[m++] = __brevll(a64); q[m++] = __ffsll(a64);
    q[m++] = (long long)a * b; q[m++] = (unsigned long long)ua * ub;
    q[m++] = min(a64, b64); q[m++] = max((unsigned long long)a64, (unsigned long long)b64);
    q[m++] = (long long)a; q[m++] = (unsigned long long)ua; q[m++] = (int)a64; q[m++] = (short)a64;
    q[m++] = llabs(a64);
}
"""


def _int_inputs(n: int = 64):
    rng = np.random.default_rng(1)
    edge = np.array([0, 1, -1, 2**31 - 1, -2**31, 7, -7, 255, -256, 65535, 12345678, -98765432])
    A = rng.integers(-2**31, 2**31, n).astype(np.int32)
    B = rng.integers(-2**31, 2**31, n).astype(np.int32)
    A[:len(edge)] = edge
    B[:len(edge)] = edge[::-1]
    B[20:28] = [0, -1, 1, 0, 2, 3, -2, 0]
    A[20:24] = [-2**31, -2**31, 5, -5]
    S = rng.integers(0, 70, n).astype(np.uint32)
    S[:8] = [0, 31, 32, 33, 64, 65, 255, 256]
    A64 = rng.integers(-2**63, 2**63, n, dtype=np.int64)
    B64 = rng.integers(-2**63, 2**63, n, dtype=np.int64)
    A64[:4] = [-2**63, -1, 0, 2**63 - 1]
    B64[:6] = [-1, 0, 3, -1, 1, 0]
    return A, B, S, A64, B64


@pytest.fixture(scope="module")
def int_results():
    n = 64
    A, B, S, A64, B64 = _int_inputs(n)
    args = (A, B, S, A64, B64, np.zeros(n * 96, np.uint32), np.zeros(n * 32, np.uint64), np.int32(n))
    (*_, co, co64), (*_, io, io64) = run_both(ptx_of(INT_SRC), "intops", (2,), (32,), args)
    return (A, B, S, A64, B64), (co.reshape(n, 96), co64.reshape(n, 32)), (io.reshape(n, 96), io64.reshape(n, 32))


def test_int_ops_interp_matches_numpy(int_results):
    (A, B, S, A64, B64), _, (o, q) = int_results
    a, b, s = A.astype(np.int64), B.astype(np.int64), S.astype(np.int64)
    u32 = lambda v: np.asarray(v, dtype=np.int64) & 0xFFFFFFFF   # noqa: E731
    ua, ub = u32(a), u32(b)
    np.testing.assert_array_equal(o[:, 0], u32(a + b))
    np.testing.assert_array_equal(o[:, 1], u32(a - b))
    np.testing.assert_array_equal(o[:, 2], u32(a * b))
    np.testing.assert_array_equal(o[:, 3], u32((a * b) >> 32))
    np.testing.assert_array_equal(o[:, 4], u32((ua * ub) >> 32))
    for i in range(len(a)):
        x, y, sh = int(a[i]), int(b[i]), int(s[i])
        # PTX division: truncation toward zero, x/0 = all ones, x%0 = x, MIN/-1 wraps
        q_ = 0xFFFFFFFF if y == 0 else (abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1)
        r_ = x if y == 0 else x - q_ * y
        assert o[i, 5] == q_ & 0xFFFFFFFF, (x, y)
        assert o[i, 6] == r_ & 0xFFFFFFFF, (x, y)
        assert o[i, 7] == (0xFFFFFFFF if y == 0 else (x & 0xFFFFFFFF) // (y & 0xFFFFFFFF))
        # shifts clamp: amounts >= 32 give 0 (shl, shr.u) or the sign (shr.s)
        assert o[i, 9] == (0 if sh >= 32 else (x << sh) & 0xFFFFFFFF)
        assert o[i, 10] == (x >> min(sh, 31)) & 0xFFFFFFFF
        assert o[i, 11] == (0 if sh >= 32 else (x & 0xFFFFFFFF) >> sh)
        assert o[i, 20] == bin(x & 0xFFFFFFFF).count("1")
        assert o[i, 22] == int(format(x & 0xFFFFFFFF, "032b")[::-1], 2)
        assert o[i, 56] == max(-2**31, min(2**31 - 1, x + y)) & 0xFFFFFFFF
        assert o[i, 58] == max(-128, min(127, x)) & 0xFFFFFFFF
        ux, uy = x & 0xFFFFFFFF, y & 0xFFFFFFFF
        pos, ln = sh & 63, uy & 63
        assert o[i, 50] == (0 if pos >= 32 else (ux >> pos) & ((1 << min(ln, 32)) - 1))
        both = (uy << 32) | ux
        assert o[i, 79] == ((both << (sh & 31)) >> 32) & 0xFFFFFFFF            # shf.l.wrap
        assert o[i, 80] == (both >> min(sh, 32)) & 0xFFFFFFFF                   # shf.r.clamp
        sel = sh & 0x7777                       # __byte_perm masks the selector: no sign mode
        exp = 0
        for k in range(4):                                                      # prmt
            nib = (sel >> (4 * k)) & 15
            byte = (both >> (8 * (nib & 7))) & 0xFF
            exp |= ((0xFF if byte & 0x80 else 0) if nib & 8 else byte) << (8 * k)
        assert o[i, 24] == exp
    np.testing.assert_array_equal(o[:, 30], u32(np.minimum(a, b)))
    np.testing.assert_array_equal(o[:, 33], np.maximum(ua, ub))
    np.testing.assert_array_equal(o[:, 44], u32(a.astype(np.int16)))
    sb = lambda v, k: ((v >> (8 * k)) & 0xFF) - (((v >> (8 * k)) & 0x80) << 1)   # noqa: E731
    np.testing.assert_array_equal(o[:, 69], u32(sum(sb(a, k) * sb(b, k) for k in range(4)) + s))
    np.testing.assert_array_equal(q[:, 0], (A64 + B64).view(np.uint64))
    np.testing.assert_array_equal(q[:, 1], (A64 * B64).view(np.uint64))
    np.testing.assert_array_equal(q[:, 16], (a * b).view(np.uint64))


def test_int_ops_compiled_vs_interp(int_results):
    _, (co, cq), (io, iq) = int_results
    assert_same(co, io, "32-bit integer ops")
    assert_same(cq, iq, "64-bit integer ops")


# --- bfe.s32/.s64: fields reaching past the msb are filled with the sign bit -----------------------

BFE_SRC = r"""
extern "C" __global__ void bfe(const int* A, const unsigned* P, const unsigned* L, int* out,
                               const long long* A64, long long* out64, int n)
{
    int i = threadIdx.x;
    if (i >= n) return;
    int r; long long r64;
    asm("bfe.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(A[i]), "r"(P[i]), "r"(L[i]));
    asm("bfe.s64 %0, %1, %2, %3;" : "=l"(r64) : "l"(A64[i]), "r"(P[i] * 2), "r"(L[i] * 2));
    out[i] = r; out64[i] = r64;
}
"""


def _bfe_reference(a: int, pos: int, ln: int, w: int) -> int:
    """PTX ISA pseudocode of bfe.sW."""
    msb = w - 1
    pos, ln = pos & 0xFF, ln & 0xFF
    sbit = 0 if ln == 0 else (a >> min(pos + ln - 1, msb)) & 1
    d = 0
    for i in range(w):
        bit = (a >> (pos + i)) & 1 if i < ln and pos + i <= msb else sbit
        d |= bit << i
    return d


def _bfe_args():
    A = np.array([-2**31, -7, 0x12345678, -0x12345678, 5, -1, 0x40000000, -2], np.int32)
    P = np.array([28, 255, 4, 20, 3, 40, 29, 0], np.uint32)
    L = np.array([8, 7, 32, 16, 0, 3, 10, 32], np.uint32)
    A64 = A.astype(np.int64) << 32
    return (A, P, L, np.zeros(8, np.int32), A64, np.zeros(8, np.int64), np.int32(8))


def test_interp_bfe_signed_matches_ptx_isa():
    A, P, L, _, A64, _, _ = args = _bfe_args()
    out, _, out64 = run_interp(ptx_of(BFE_SRC), "bfe", 1, 8, args)[3:6]
    for i in range(8):
        assert out.view(np.uint32)[i] == _bfe_reference(int(A[i]) & 0xFFFFFFFF, int(P[i]), int(L[i]), 32)
        assert out64.view(np.uint64)[i] == _bfe_reference(int(A64[i]) & (2**64 - 1), 2 * int(P[i]),
                                                          2 * int(L[i]), 64)
    assert out[0] == -8            # bfe.s32 0x80000000, pos 28, len 8: 0xFFFFFFF8


def test_compiled_bfe_signed_past_msb():
    """Compiled bfe.s32 leaves field bits beyond the msb zero (e.g. 0x80000000 pos 28 len 8
    gives 0xFFFFFF08 instead of 0xFFFFFFF8; pos >= 32 gives 0xFFFFFF80-style values)."""
    c, i = run_both(ptx_of(BFE_SRC), "bfe", 1, 8, _bfe_args())
    assert_same(c[3], i[3], "bfe.s32")
    assert_same(c[5], i[5], "bfe.s64")


# --- add.cc / addc: the carry flag ---------------------------------------------------------------

CARRY_SRC = r"""
extern "C" __global__ void add128(const unsigned* X, const unsigned* Y, unsigned* Z, int n)
{
    int i = threadIdx.x;
    if (i >= n) return;
    const unsigned* x = X + 4 * i; const unsigned* y = Y + 4 * i; unsigned* z = Z + 4 * i;
    asm("add.cc.u32 %0, %4, %8;\n\taddc.cc.u32 %1, %5, %9;\n\taddc.cc.u32 %2, %6, %10;\n\taddc.u32 %3, %7, %11;"
        : "=r"(z[0]), "=r"(z[1]), "=r"(z[2]), "=r"(z[3])
        : "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3]), "r"(y[0]), "r"(y[1]), "r"(y[2]), "r"(y[3]));
}
"""


def _carry_args():
    rng = np.random.default_rng(5)
    X = rng.integers(0, 2**32, 32, dtype=np.uint64).astype(np.uint32)
    Y = rng.integers(0, 2**32, 32, dtype=np.uint64).astype(np.uint32)
    X[:8] = 0xFFFFFFFF
    Y[:4] = 1
    return X, Y, np.zeros(32, np.uint32), np.int32(8)


def test_interp_add_cc_carry_chain():
    X, Y, Z, n = _carry_args()
    (z,) = run_interp(ptx_of(CARRY_SRC), "add128", 1, 8, (X, Y, Z, n))[2:]
    for i in range(8):
        xs = sum(int(X[4 * i + k]) << (32 * k) for k in range(4))
        ys = sum(int(Y[4 * i + k]) << (32 * k) for k in range(4))
        got = sum(int(z[4 * i + k]) << (32 * k) for k in range(4))
        assert got == (xs + ys) % 2**128


def test_add_cc_carry_chain_compiled_vs_interp():
    c, i = run_both(ptx_of(CARRY_SRC), "add128", 1, 8, _carry_args())
    assert_same(c[2], i[2], "128-bit add")


# --- floating point --------------------------------------------------------------------------------

FLOAT_SRC = r"""
#include <cuda_fp16.h>
#define NOUT 80
extern "C" __global__ void fops(const float* X, const float* Y, const float* Z, const int* I,
                                const double* D, const double* E, float* out, double* dout,
                                int* iout, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = X[i], y = Y[i], z = Z[i];
    int iv = I[i];
    double d = D[i], e = E[i];
    float* o = out + i * NOUT;
    double* od = dout + i * 32;
    int* oi = iout + i * 16;
    int k = 0, m = 0, j = 0;
    o[k++] = x + y; o[k++] = x - y; o[k++] = x * y; o[k++] = x / y; o[k++] = fmaf(x, y, z);
    o[k++] = sqrtf(fabsf(x)); o[k++] = rsqrtf(fabsf(x)); o[k++] = __fdividef(x, y); o[k++] = 1.0f / x;
    o[k++] = fminf(x, y); o[k++] = fmaxf(x, y); o[k++] = fabsf(x); o[k++] = copysignf(x, y); o[k++] = -x;
    o[k++] = __saturatef(x);
    o[k++] = __fadd_rz(x, y); o[k++] = __fadd_rd(x, y); o[k++] = __fadd_ru(x, y);
    o[k++] = __fsub_rz(x, y); o[k++] = __fmul_rz(x, y); o[k++] = __fmul_rd(x, y); o[k++] = __fmul_ru(x, y);
    o[k++] = __fdiv_rz(x, y); o[k++] = __fdiv_rd(x, y); o[k++] = __fdiv_ru(x, y);
    o[k++] = __fsqrt_rz(fabsf(x)); o[k++] = __fsqrt_rd(fabsf(x)); o[k++] = __fsqrt_ru(fabsf(x));
    o[k++] = __frcp_rn(x); o[k++] = __frcp_rz(x); o[k++] = __frcp_rd(x); o[k++] = __frcp_ru(x);
    o[k++] = __fmaf_rn(x, y, z); o[k++] = __fmaf_rz(x, y, z); o[k++] = __fmaf_rd(x, y, z); o[k++] = __fmaf_ru(x, y, z);
    o[k++] = rintf(x); o[k++] = truncf(x); o[k++] = floorf(x); o[k++] = ceilf(x); o[k++] = roundf(x);
    o[k++] = __int2float_rn(iv); o[k++] = __int2float_rz(iv); o[k++] = __int2float_rd(iv); o[k++] = __int2float_ru(iv);
    o[k++] = __uint2float_rn(iv); o[k++] = __uint2float_rz(iv); o[k++] = __uint2float_ru(iv);
    o[k++] = __ll2float_rn((long long)iv * 1000003LL);
    o[k++] = __double2float_rn(d); o[k++] = __double2float_rz(d);
    o[k++] = __double2float_rd(d); o[k++] = __double2float_ru(d);
    o[k++] = (x < y) + 2 * (x <= y) + 4 * (x == y) + 8 * (x != y) + 16 * !(x >= y) + 32 * !(x > y)
             + 64 * isnan(x) + 128 * isinf(x) + 256 * isfinite(x) + 512 * signbit(x);
    o[k++] = x > 0.5f ? y : z;
    float xh = fminf(fmaxf(x, -6e4f), 6e4f), yh = fminf(fmaxf(y, -6e4f), 6e4f);  // no f16 overflow
    o[k++] = __half2float(__float2half_rn(xh)); o[k++] = __half2float(__float2half_rz(xh));
    o[k++] = __half2float(__float2half_rd(xh)); o[k++] = __half2float(__float2half_ru(xh));
    o[k++] = __half2float(__hadd(__float2half(xh), __float2half(yh)));
    o[k++] = __half2float(__hmul(__float2half(xh), __float2half(yh)));
    o[k++] = __half2float(__hfma(__float2half(xh), __float2half(yh), __float2half(z)));
    o[k++] = __half2float(__hsub(__float2half(xh), __float2half(yh)));
    o[k++] = fdimf(x, y); o[k++] = fmodf(x, 3.0f);
    o[k++] = __int_as_float(__float_as_int(x) ^ iv);
    oi[j++] = __float2int_rn(x); oi[j++] = __float2int_rz(x); oi[j++] = __float2int_rd(x); oi[j++] = __float2int_ru(x);
    oi[j++] = __float2uint_rn(x); oi[j++] = (int)x; oi[j++] = (unsigned)y; oi[j++] = (short)z;
    oi[j++] = (int)__float2ll_rz(x * 1e6f); oi[j++] = (int)(__float2ll_rn(x) >> 32);
    oi[j++] = (int)__double2int_rn(d); oi[j++] = __double2uint_rz(e);
    oi[j++] = __half_as_ushort(__double2half(d));
    od[m++] = d + e; od[m++] = d * e; od[m++] = d / e; od[m++] = fma(d, e, (double)z); od[m++] = sqrt(fabs(d));
    od[m++] = __dadd_rz(d, e); od[m++] = __dadd_rd(d, e); od[m++] = __dadd_ru(d, e);
    od[m++] = __dmul_rz(d, e); od[m++] = __dmul_ru(d, e); od[m++] = __ddiv_rd(d, e); od[m++] = __ddiv_ru(d, e);
    od[m++] = __dsqrt_rd(fabs(d)); od[m++] = __dsqrt_ru(fabs(d)); od[m++] = __drcp_rz(d);
    od[m++] = (double)x; od[m++] = fmin(d, e); od[m++] = fmax(d, e); od[m++] = rint(d); od[m++] = floor(e);
    od[m++] = __int2double_rn(iv); od[m++] = (double)(unsigned)iv; od[m++] = __ll2double_rn((long long)iv << 20);
    od[m++] = d > e ? d : -e;
}

extern "C" __global__ void fapprox(const float* X, float* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = X[i];
    float* o = out + i * 8;
    o[0] = __sinf(x); o[1] = __cosf(x); o[2] = __expf(x); o[3] = __logf(fabsf(x)); o[4] = exp2f(x);
    o[5] = __log2f(fabsf(x)); o[6] = tanhf(x); o[7] = sinf(x) + cosf(x);
}

extern "C" __global__ void cvt64(const long long* L, float* of, double* od, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long v = L[i];
    of[4 * i] = __ll2float_rz(v); of[4 * i + 1] = __ll2float_rd(v); of[4 * i + 2] = __ll2float_ru(v);
    of[4 * i + 3] = __ull2float_rn(v);
    od[2 * i] = __ll2double_rz(v); od[2 * i + 1] = __ull2double_ru(v);
}
"""


def _float_inputs(n: int = 64, subnormals: bool = False):
    """Ordinary inputs plus inf/NaN/zeros; no results at the overflow/underflow thresholds of
    the directed-rounding ops (those are separate tests)."""
    rng = np.random.default_rng(2)
    X = (rng.standard_normal(n) * 10).astype(np.float32)
    Y = (rng.standard_normal(n) * 10).astype(np.float32)
    Z = rng.standard_normal(n).astype(np.float32)
    X[:10] = [0.0, np.inf, -np.inf, np.nan, 1.5, -2.5, 0.5, 2.0**24 + 2, 3.0, -0.5]
    Y[:10] = [2.0, 3.0, np.nan, 1.0, -0.25, 0.0, 7.0, 1.0, 3.0, np.inf]
    X[10:14] = [1e10, -1e-10, 123456.7, 65519.0]
    Y[10:14] = [1e10, 3.0, -0.1, 2.0]
    if subnormals:
        X[14:18] = [1e-40, -1e-41, 2e-39, 1e-45]
        Y[14:18] = [3.0, 2.5, -2.0, 0.5]
    Z[:4] = [1e-3, -1.0, 0.0, np.nan]
    I = rng.integers(-2**31, 2**31, n).astype(np.int32)
    I[:6] = [0, -1, 2**31 - 1, -2**31, 16777217, -16777219]
    D = rng.standard_normal(n) * 1e3
    D[:5] = [0.1, np.nan, 1e10, -1e-5, 65519.0]
    E = rng.standard_normal(n)
    E[:4] = [0.0, -3.0, 1e-3, 7.0]
    return X, Y, Z, I, D, E


RSQRT_COLUMN = 6     # o[6] = rsqrtf(fabsf(x)) in FLOAT_SRC


def _float_args(n: int = 64, subnormals: bool = False):
    return (*_float_inputs(n, subnormals), np.zeros(n * 80, np.float32), np.zeros(n * 32, np.float64),
            np.zeros(n * 16, np.int32), np.int32(n))


@pytest.mark.parametrize("options", [(), ("-ftz=true",), ("-ftz=true", "-prec-div=false", "-prec-sqrt=false")],
                         ids=["ieee", "ftz", "ftz-approx-div-sqrt"])
def test_float_ops_compiled_vs_interp(options):
    ptx = ptx_of(FLOAT_SRC, options)
    if options:
        assert ".ftz.f32" in ptx
    c, i = run_both(ptx, "fops", (2,), (32,), _float_args(64, subnormals=bool(options)))
    co, io = c[6].reshape(64, 80), i[6].reshape(64, 80)
    assert ulps(co[:, RSQRT_COLUMN], io[:, RSQRT_COLUMN]).max() <= 2, "rsqrtf"
    co[:, RSQRT_COLUMN] = io[:, RSQRT_COLUMN]
    assert_same(c[6], i[6], "f32 results")
    assert_same(c[7], i[7], "f64 results")
    assert_same(c[8], i[8], "integer results")


def test_float_ops_interp_matches_numpy():
    args = _float_args()
    X, Y, Z, I, D, E = args[:6]
    out, dout, iout = run_interp(ptx_of(FLOAT_SRC), "fops", (2,), (32,), args)[6:9]
    o, od, oi = out.reshape(64, 80), dout.reshape(64, 32), iout.reshape(64, 16)
    with np.errstate(all="ignore"):
        for col, ref in ((0, X + Y), (1, X - Y), (2, X * Y), (3, X / Y), (5, np.sqrt(np.abs(X))),
                         (9, np.fmin(X, Y)), (10, np.fmax(X, Y)), (13, -X), (36, np.rint(X)),
                         (37, np.trunc(X)), (38, np.floor(X)), (39, np.ceil(X))):
            assert same_bits(o[:, col], ref.astype(np.float32)).all(), col
        fma = (X.astype(np.float64) * Y + Z).astype(np.float32)   # exact product in f64
        ok = same_bits(o[:, 4], fma) | ~np.isfinite(fma)
        assert ok.all()
        np.testing.assert_array_equal(o[:, 14], np.clip(np.nan_to_num(X, nan=0.0), 0, 1))
        np.testing.assert_array_equal(o[:, 41], I.astype(np.float32))
        np.testing.assert_array_equal(o[:, 49], D.astype(np.float32))
        np.testing.assert_array_equal(o[:, 55], np.fmin(np.fmax(X, -6e4), 6e4).astype(np.float16).astype(np.float32))
        assert same_bits(od[:, 0], D + E).all() and same_bits(od[:, 2], D / E).all()
        # cvt.rni/rzi.s32.f32 saturate, NaN -> 0
        exp_rn = np.where(np.isnan(X), 0, np.clip(np.rint(np.nan_to_num(X).astype(np.float64)), -2**31, 2**31 - 1))
        np.testing.assert_array_equal(oi[:, 0], exp_rn.astype(np.int64))
    # directed rounding against exact rationals, a few spot checks
    from fractions import Fraction
    for r in range(20, 64):
        x, y = Fraction(float(X[r])), Fraction(float(Y[r]))
        lo, hi = sorted([float(o[r, 16]), float(o[r, 17])])
        assert Fraction(lo) <= x + y <= Fraction(hi)          # rd <= exact <= ru
        assert np.nextafter(np.float32(lo), np.float32(np.inf)) >= np.float32(hi)


def test_float_approx_within_one_ulp():
    """sin/cos/ex2/lg2.approx and tanh: inline polynomials (libm for tanh) in compiled code,
    rounded f64 in the interpreter.  sinf(x) + cosf(x) under --use_fast_math is the sum of
    sin.approx and cos.approx, which cancels near x = 3pi/4 + k pi: there the two 1-ulp errors
    of the terms are held to an absolute bound instead (PTX documents an absolute error)."""
    X = np.concatenate([np.linspace(-20, 20, 56), [0.0, -0.0, 1e-3, 100.0, np.inf, np.nan, 1e-40, 88.0]])
    X = X.astype(np.float32)
    n = len(X)
    for options in ((), ("--use_fast_math",)):
        c, i = run_both(ptx_of(FLOAT_SRC, options), "fapprox", (2,), (32,),
                        (X, np.zeros(n * 8, np.float32), np.int32(n)))
        c, i = c[1].reshape(n, 8), i[1].reshape(n, 8)
        assert ulps(c[:, :7], i[:, :7]).max() <= 1, options
        if options:
            d = np.abs(c[:, 7].astype(np.float64) - i[:, 7])
            assert np.isnan(c[:, 7]).tolist() == np.isnan(i[:, 7]).tolist()
            assert np.nanmax(d) <= 2.0 ** -22, options
        else:
            assert ulps(c[:, 7], i[:, 7]).max() <= 1


def test_interp_cvt_directed_from_64bit_ints():
    """cvt.r{z,m,p}.f32/f64.s64 (refused by the compiled path): rd <= v <= ru with rd and ru
    adjacent (or equal when v is representable), rz towards zero; .rn as NumPy's cast."""
    from fractions import Fraction
    L = np.array([2**62 + 2**38 + 1, -(2**62 + 2**38 + 1), 2**53 + 1, -(2**53 + 1), 0, -1, 2**63 - 1,
                  -2**63], np.int64)
    of, od = run_interp(ptx_of(FLOAT_SRC), "cvt64", 1, 8, (L, np.zeros(32, np.float32),
                                                         np.zeros(16, np.float64), np.int32(8)))[1:]
    of, od = of.reshape(8, 4), od.reshape(8, 2)
    for k, v in enumerate(L.tolist()):
        rz, rd, ru = (Fraction(float(of[k, c])) for c in range(3))
        assert rd <= v <= ru and (rd == ru == v or np.nextafter(of[k, 1], np.float32(np.inf)) == of[k, 2])
        assert rz == (rd if v >= 0 else ru)
        assert of[k, 3] == L[k:k + 1].view(np.uint64).astype(np.float32)[0]       # __ull2float_rn
        dz = Fraction(float(od[k, 0]))
        assert abs(dz) <= abs(v) and abs(v - dz) < Fraction(2) ** (max(abs(v), 1).bit_length() - 53)
        du = Fraction(float(od[k, 1]))
        assert v % 2**64 <= du < v % 2**64 + Fraction(2) ** ((v % 2**64 or 1).bit_length() - 52)
    assert of[0, 0] == f32(2.0**62) and of[0, 2] == np.nextafter(f32(2.0**62), f32(np.inf))
    assert od[2, 0] == 2.0**53 and od[3, 0] == -(2.0**53)


MISC_ASM_SRC = r"""
#define P1(op, r, a) asm("{ .reg .pred p; " op " p, %1; selp.u32 %0, 1, 0, p; }" : "=r"(r) : "f"(a))
#define P2(op, r, a, b) asm("{ .reg .pred p; " op " p, %1, %2; selp.u32 %0, 1, 0, p; }" : "=r"(r) : "f"(a), "f"(b))
extern "C" __global__ void misc(const float* X, const float* Y, const int* I, unsigned* out, float* fout)
{
    __shared__ int sh[32];
    int t = threadIdx.x;
    float x = X[t], y = Y[t];
    int iv = I[t];
    unsigned* o = out + 24 * t;
    float* f = fout + 10 * t;
    unsigned r;
    P1("testp.finite.f32", o[0], x); P1("testp.infinite.f32", o[1], x); P1("testp.number.f32", o[2], x);
    P1("testp.notanumber.f32", o[3], x); P1("testp.normal.f32", o[4], x); P1("testp.subnormal.f32", o[5], x);
    P2("setp.ltu.f32", o[6], x, y); P2("setp.geu.f32", o[7], x, y); P2("setp.equ.f32", o[8], x, y);
    P2("setp.neu.f32", o[9], x, y); P2("setp.num.f32", o[10], x, y); P2("setp.nan.f32", o[11], x, y);
    P2("setp.ne.f32", o[12], x, y);
    asm("slct.f32.s32 %0, %1, %2, %3;" : "=f"(f[0]) : "f"(x), "f"(y), "r"(iv));
    asm("slct.f32.f32 %0, %1, %2, %3;" : "=f"(f[1]) : "f"(x), "f"(y), "f"(x - y));
    asm("copysign.f32 %0, %1, %2;" : "=f"(f[2]) : "f"(x), "f"(y));
    asm("set.gt.f32.f32 %0, %1, %2;" : "=f"(f[3]) : "f"(x), "f"(y));
    asm("min.NaN.f32 %0, %1, %2;" : "=f"(f[4]) : "f"(x), "f"(y));
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(f[5]) : "f"(x), "f"(y));
    asm("sqrt.approx.f32 %0, %1;" : "=f"(f[6]) : "f"(fabsf(x)));
    asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(*(double*)&f[8]) : "d"((double)y));
    sh[t] = iv;
    __syncthreads();
    unsigned long long g;
    asm("cvta.shared.u64 %0, %1;" : "=l"(g) : "l"((unsigned long long)(4 * ((t + 1) & 31))));
    o[13] = *(int*)g;
    asm("{ .reg .pred p; isspacep.shared p, %1; selp.u32 %0, 1, 0, p; }" : "=r"(r) : "l"(g)); o[14] = r;
    asm("{ .reg .pred p; isspacep.global p, %1; selp.u32 %0, 1, 0, p; }" : "=r"(r) : "l"(X)); o[15] = r;
    unsigned long long back;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(back) : "l"(g)); o[16] = (unsigned)back;
    asm("ld.global.nc.u32 %0, [%1];" : "=r"(o[17]) : "l"(I + ((t + 3) & 31)));
    __syncthreads();
    asm("red.shared.add.u32 [%0], %1;" :: "r"((unsigned)(4 * (t & 7))), "r"(t));
    asm("atom.shared.inc.u32 %0, [%1], 5;" : "=r"(o[18]) : "r"(4u * 8));
    __syncthreads();
    o[19] = sh[t];
    asm("mul.hi.u64 %0, %1, %2;" : "=l"(*(unsigned long long*)&o[20]) : "l"((long long)iv * 977), "l"(-1LL));
    asm("mad.wide.s32 %0, %1, %2, %3;" : "=l"(*(long long*)&o[22]) : "r"(iv), "r"(iv), "l"(-5LL));
}
"""


def test_misc_instructions():
    ptx = ptx_of(MISC_ASM_SRC, arch="compute_80")
    X = np.array([0.0, -1.5, np.inf, -np.inf, np.nan, 1e-40, -3.0, 2.0] * 4, np.float32)
    Y = np.array([1.0, -1.5, np.nan, 2.0, 0.5, 1e-41, 4.0, -2.0] * 4, np.float32)
    I = np.arange(32, dtype=np.int32) * 37 - 500
    args = (X, Y, I, np.zeros(32 * 24, np.uint32), np.zeros(32 * 10, np.float32))
    c, i = run_both(ptx, "misc", 1, 32, args)
    o = i[3].reshape(32, 24)
    f = i[4].reshape(32, 10)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(o[:8, 0], np.isfinite(X[:8]))
        np.testing.assert_array_equal(o[:8, 5], [0, 0, 0, 0, 0, 1, 0, 0])
        np.testing.assert_array_equal(o[:8, 6], (X[:8] < Y[:8]) | np.isnan(X[:8]) | np.isnan(Y[:8]))
        np.testing.assert_array_equal(o[:8, 12], (X[:8] != Y[:8]) & ~np.isnan(X[:8]) & ~np.isnan(Y[:8]))
    np.testing.assert_array_equal(f[:8, 0], np.where(I[:8] >= 0, X[:8], Y[:8]))
    np.testing.assert_array_equal(f[:8, 2], np.copysign(Y[:8], X[:8]))
    assert np.isnan(f[2, 4]) and np.isnan(f[4, 5]) and f[0, 4] == 0.0 and f[7, 5] == 2.0
    np.testing.assert_array_equal(f[:8, 6], np.sqrt(np.abs(X[:8])))
    np.testing.assert_array_equal(f[:, 8:10].copy().view(np.float64).ravel(), 1.0 / Y.astype(np.float64))
    np.testing.assert_array_equal(o[:, 13], I[(np.arange(32) + 1) & 31].view(np.uint32))
    np.testing.assert_array_equal(o[:, 14:17], np.stack([np.ones(32), np.ones(32), 4 * ((np.arange(32) + 1) & 31)], 1))
    np.testing.assert_array_equal(o[:, 17], I[(np.arange(32) + 3) & 31].view(np.uint32))
    red = I.astype(np.int64).copy()
    for t in range(32):
        red[t & 7] += t
    incs = []                               # atom.inc with limit 5: old >= 5 (unsigned) ? 0 : old + 1
    for t in range(32):
        incs.append(red[8])
        red[8] = 0 if red[8] >= 5 or red[8] < 0 else red[8] + 1
    np.testing.assert_array_equal(o[:, 18], np.array(incs) & 0xFFFFFFFF)
    np.testing.assert_array_equal(o[:8, 19].view(np.int32), red[:8])
    for x, y in zip(c, i):
        assert_same(x, y, "misc instructions")


# --- directed-rounding corner cases: overflow, underflowing error terms, double rounding ----------

CORNER_SRC = r"""
#include <cuda_fp16.h>
#define F1(op, i) asm(op " %0, %1;" : "=f"(o[i]) : "f"(a[i]))
#define F2(op, i) asm(op " %0, %1, %2;" : "=f"(o[i]) : "f"(a[i]), "f"(b[i]))
#define F3(op, i) asm(op " %0, %1, %2, %3;" : "=f"(o[i]) : "f"(a[i]), "f"(b[i]), "f"(c[i]))
extern "C" __global__ void overflow(const float* a, const float* b, const float* c, float* o,
                                    const double* da, double* od, unsigned short* oh)
{
    if (threadIdx.x) return;
    F2("add.rz.f32", 0); F2("mul.rm.f32", 1); F2("mul.rp.f32", 2); F2("div.rz.f32", 3);
    F1("rcp.rz.f32", 4); F3("fma.rz.f32", 5); F2("sub.rm.f32", 6);
    asm("cvt.rz.f32.f64 %0, %1;" : "=f"(o[7]) : "d"(da[0]));
    asm("cvt.rm.f32.f64 %0, %1;" : "=f"(o[8]) : "d"(da[1]));
    asm("add.rz.f64 %0, %1, %2;" : "=d"(od[0]) : "d"(da[2]), "d"(da[2]));
    asm("div.rp.f64 %0, %1, %2;" : "=d"(od[1]) : "d"(da[2]), "d"(da[3]));
    asm("cvt.rz.f16.f32 %0, %1;" : "=h"(oh[0]) : "f"(a[9]));
    asm("cvt.rm.f16.f32 %0, %1;" : "=h"(oh[1]) : "f"(a[9]));
}

extern "C" __global__ void tiny(const float* a, const float* b, const float* c, float* o,
                                const double* da, double* od)
{
    if (threadIdx.x) return;
    F2("mul.rp.f32", 0); F1("sqrt.rz.f32", 1); F1("sqrt.rp.f32", 2); F1("sqrt.rm.f32", 3);
    asm("sqrt.rm.f64 %0, %1;" : "=d"(od[0]) : "d"(da[0]));
    asm("mul.rp.f64 %0, %1, %2;" : "=d"(od[1]) : "d"(da[1]), "d"(da[1]));
}

extern "C" __global__ void dround(const float* a, const float* b, const float* c, float* o,
                                  const double* da, unsigned short* oh)
{
    if (threadIdx.x) return;
    F3("fma.rp.f32", 0); F3("fma.rm.f32", 1); F3("fma.rz.f32", 2);
    asm("cvt.rn.f16.f64 %0, %1;" : "=h"(oh[0]) : "d"(da[0]));
    asm("cvt.rn.f16.f64 %0, %1;" : "=h"(oh[1]) : "d"(da[1]));
}

extern "C" __global__ void zeros(const float* a, const float* b, const float* c, float* o)
{
    if (threadIdx.x) return;
    F2("min.f32", 0); F2("min.f32", 1); F2("max.f32", 2); F2("max.f32", 3);
    F2("add.rm.f32", 4); F2("sub.rm.f32", 5); F2("add.rm.f32", 6); F3("fma.rm.f32", 7);
    F1("cvt.sat.f32.f32", 8); F2("add.rn.f32", 9);
}
"""


def _corner(name: str):
    ptx = ptx_of(CORNER_SRC)
    f = lambda *v: np.array(list(v) + [0.0] * (10 - len(v)), np.float32)   # noqa: E731
    d = lambda *v: np.array(list(v) + [0.0] * (4 - len(v)), np.float64)    # noqa: E731
    if name == "overflow":
        a = f(3e38, 3e38, -3e38, 1.5, 1e-40, 3e38, -3e38, 0, 0, 1e5)
        b = f(3e38, 3e38, 3e38, 1e-40, 0, 3e38, 3e38)
        c = f(0, 0, 0, 0, 0, 1.0)
        args = (a, b, c, np.zeros(10, np.float32), d(1e300, 1e300, 1.7e308, -1e-10),
                np.zeros(4, np.float64), np.zeros(2, np.uint16))
        expect = {3: [FLT_MAX, FLT_MAX, -FLT_MAX, FLT_MAX, FLT_MAX, FLT_MAX, -np.inf, FLT_MAX, FLT_MAX],
                  5: [DBL_MAX, -DBL_MAX], 6: [0x7BFF, 0x7BFF]}
    elif name == "tiny":
        a = f(1e-38, 1e-38, 1e-40, 1e-38)
        b = f(1e-38)
        args = (a, b, f(), np.zeros(10, np.float32), d(1e-310, 1e-200), np.zeros(4, np.float64))
        s1, s2 = np.sqrt(f32(1e-38)), np.sqrt(f32(1e-40))
        expect = {3: [1e-45, np.nextafter(s1, f32(0)), np.nextafter(s2, f32(1)), np.nextafter(s1, f32(0))],
                  5: [np.nextafter(np.sqrt(1e-310), 0.0), 5e-324]}
    elif name == "dround":
        a = f(1.0, 1.0, -1.0)
        b = f(1.0, 1.0, 1e-30)
        c = f(1e-24, -1e-24, 1.0)
        args = (a, b, c, np.zeros(10, np.float32), d(1 + 2**-11 + 2**-40, 1 + 2**-11 - 2**-40),
                np.zeros(2, np.uint16))
        expect = {3: [np.nextafter(f32(1), f32(2)), np.nextafter(f32(1), f32(0)), np.nextafter(f32(1), f32(0))],
                  5: [0x3C01, 0x3C00]}
    else:  # zeros
        a = f(0.0, -0.0, -0.0, 0.0, -7.0, 5.0, 0.0, 2.0, -0.0, -7.0)
        b = f(-0.0, 0.0, 0.0, -0.0, 7.0, 5.0, -0.0, 3.0, 0, 7.0)
        c = f(0, 0, 0, 0, 0, 0, 0, -6.0)
        args = (a, b, c, np.zeros(10, np.float32))
        expect = {3: [-0.0, -0.0, 0.0, 0.0, -0.0, -0.0, -0.0, -0.0, 0.0, 0.0]}
    return ptx, args, expect


CORNERS = ["overflow", "tiny", "dround", "zeros"]


@pytest.mark.parametrize("name", CORNERS)
def test_interp_directed_rounding_corners(name):
    """Results of the PTX ISA (IEEE 754 rounding of the exact value, signed zeros)."""
    ptx, args, expect = _corner(name)
    out = _copies(args)
    interpret_kernel(ptx, name, 1, 1, out)
    for k, vals in expect.items():
        got = out[k][:len(vals)]
        want = np.array(vals, dtype=got.dtype)
        assert same_bits(got, want).all(), (name, k, got, want)


@pytest.mark.parametrize("name", CORNERS)
def test_compiled_directed_rounding_corners(name):
    """overflow: add/mul/div/rcp/fma/cvt.rz|rm give inf instead of the largest finite value;
    tiny: mul.rp/sqrt.rz|rp|rm whose error term underflows are left rounded to nearest;
    dround: fma.rz|rm|rp.f32 via an f64 fma and cvt.rn.f16.f64 via f32 round twice;
    zeros: min/max.f32 of +0/-0, exact zero sums under .rm, cvt.sat of -0."""
    ptx, args, expect = _corner(name)
    c, i = run_both(ptx, name, 1, 1, args)
    for k in range(len(c)):
        assert_same(c[k], i[k], f"{name} output {k}")


# --- shared memory algorithms ------------------------------------------------------------------------

ALGO_SRC = r"""
extern "C" __global__ void reduce_sum(const float* x, float* out, const int* xi, int* outi)
{
    __shared__ float s[64];
    __shared__ int si[64];
    int t = threadIdx.x, g = blockIdx.x * blockDim.x + t;
    s[t] = x[g]; si[t] = xi[g];
    __syncthreads();
    for (int st = blockDim.x / 2; st > 0; st >>= 1) {
        if (t < st) { s[t] += s[t + st]; si[t] += si[t + st]; }
        __syncthreads();
    }
    if (t == 0) { out[blockIdx.x] = s[0]; outi[blockIdx.x] = si[0]; }
}

// work-efficient exclusive scan (Blelloch), 2 elements per thread
extern "C" __global__ void blelloch(const int* in, int* out, int n)
{
    extern __shared__ int tmp[];
    int t = threadIdx.x, base = blockIdx.x * n;
    tmp[2 * t] = in[base + 2 * t]; tmp[2 * t + 1] = in[base + 2 * t + 1];
    int offset = 1;
    for (int d = n >> 1; d > 0; d >>= 1) {
        __syncthreads();
        if (t < d) {
            int ai = offset * (2 * t + 1) - 1, bi = offset * (2 * t + 2) - 1;
            tmp[bi] += tmp[ai];
        }
        offset *= 2;
    }
    if (t == 0) tmp[n - 1] = 0;
    for (int d = 1; d < n; d *= 2) {
        offset >>= 1;
        __syncthreads();
        if (t < d) {
            int ai = offset * (2 * t + 1) - 1, bi = offset * (2 * t + 2) - 1;
            int v = tmp[ai]; tmp[ai] = tmp[bi]; tmp[bi] += v;
        }
    }
    __syncthreads();
    out[base + 2 * t] = tmp[2 * t]; out[base + 2 * t + 1] = tmp[2 * t + 1];
}

extern "C" __global__ void bitonic(int* data)
{
    __shared__ int s[64];
    unsigned t = threadIdx.x;
    s[t] = data[blockIdx.x * 64 + t];
    __syncthreads();
    for (unsigned k = 2; k <= 64; k <<= 1) {
        for (unsigned j = k >> 1; j > 0; j >>= 1) {
            unsigned p = t ^ j;
            if (p > t) {
                bool up = (t & k) == 0;
                if ((s[t] > s[p]) == up) { int v = s[t]; s[t] = s[p]; s[p] = v; }
            }
            __syncthreads();
        }
    }
    data[blockIdx.x * 64 + t] = s[t];
}

#define TILE 8
extern "C" __global__ void matmul(const float* A, const float* B, float* C, int n)
{
    __shared__ float As[TILE][TILE], Bs[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int t0 = 0; t0 < n; t0 += TILE) {
        As[ty][tx] = A[row * n + t0 + tx];
        Bs[ty][tx] = B[(t0 + ty) * n + col];
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    C[row * n + col] = acc;
}

__device__ __noinline__ int block_sum(int* s, int v)
{
    int t = threadIdx.x;
    s[t] = v;
    __syncthreads();
    for (int st = blockDim.x / 2; st > 0; st >>= 1) {
        if (t < st) s[t] += s[t + st];
        __syncthreads();
    }
    int r = s[0];
    __syncthreads();
    return r;
}

extern "C" __global__ void devfunc(const int* x, int* out)
{
    __shared__ int s[64];
    int t = threadIdx.x;
    int total = block_sum(s, x[t]);
    int squares = block_sum(s, x[t] * x[t]);
    out[t] = total * 1000 + squares - t;
}

extern "C" __global__ void local_sort(const int* x, int* out, int n)
{
    int a[16];
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    for (int k = 0; k < 16; ++k) a[k] = x[(t * 7 + k * 13) % n];
    for (int p = 0; p < 16; ++p)
        for (int q = 0; q + 1 < 16 - p; ++q)
            if (a[q] > a[q + 1]) { int v = a[q]; a[q] = a[q + 1]; a[q + 1] = v; }
    int pick = x[t] & 15;
    out[t] = a[pick] * 16 + pick;
}

extern "C" __global__ void dims(int* out)
{
    int lin = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    int blk = (blockIdx.y * gridDim.x + blockIdx.x);
    unsigned lane, warp;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    asm("mov.u32 %0, %%warpid;" : "=r"(warp));
    int* o = out + (blk * 32 + lin) * 4;
    o[0] = lin + 100 * threadIdx.y + 1000 * threadIdx.z;
    o[1] = lane + 100 * warp;
    o[2] = __shfl_xor_sync(0xffffffff, lin, 5);
    o[3] = blockIdx.x + 10 * blockIdx.y + 100 * gridDim.x + 1000 * blockDim.z;
}
"""


def test_shared_reduction():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(256).astype(np.float32)
    xi = rng.integers(-1000, 1000, 256).astype(np.int32)
    args = (x, np.zeros(4, np.float32), xi, np.zeros(4, np.int32))
    c, i = run_both(ptx_of(ALGO_SRC), "reduce_sum", 4, 64, args)
    np.testing.assert_array_equal(i[3], xi.reshape(4, 64).sum(1))
    np.testing.assert_allclose(i[1], x.reshape(4, 64).sum(1), rtol=1e-5, atol=1e-5)
    for a, b in zip(c, i):
        assert_same(a, b, "reduction")


def test_blelloch_scan():
    rng = np.random.default_rng(4)
    n = 64
    x = rng.integers(-50, 50, 2 * n).astype(np.int32)
    args = (x, np.zeros(2 * n, np.int32), np.int32(n))
    c, i = run_both(ptx_of(ALGO_SRC), "blelloch", 2, n // 2, args, shared_mem=n * 4)
    for blk in range(2):
        seg = x[blk * n:(blk + 1) * n]
        np.testing.assert_array_equal(i[1][blk * n:(blk + 1) * n], np.concatenate([[0], np.cumsum(seg)[:-1]]))
    assert_same(c[1], i[1], "scan")


def test_bitonic_sort():
    rng = np.random.default_rng(6)
    data = rng.integers(-100, 100, 128).astype(np.int32)
    c, i = run_both(ptx_of(ALGO_SRC), "bitonic", 2, 64, (data,))
    np.testing.assert_array_equal(i[0], np.sort(data.reshape(2, 64), axis=1).ravel())
    assert_same(c[0], i[0], "bitonic")


def test_tiled_matmul():
    rng = np.random.default_rng(7)
    n = 16
    A = rng.standard_normal((n, n)).astype(np.float32)
    B = rng.standard_normal((n, n)).astype(np.float32)
    c, i = run_both(ptx_of(ALGO_SRC), "matmul", (2, 2), (8, 8), (A, B, np.zeros((n, n), np.float32), np.int32(n)))
    np.testing.assert_allclose(i[2], A @ B, rtol=1e-5, atol=1e-5)
    assert_same(c[2], i[2], "matmul")


def test_device_function_with_barriers():
    ptx = ptx_of(ALGO_SRC)
    assert ".func" in ptx and "call" in ptx            # really a call, inlined by lifting
    x = np.arange(64, dtype=np.int32) - 20
    c, i = run_both(ptx, "devfunc", 1, 64, (x, np.zeros(64, np.int32)))
    expect = x.sum() * 1000 + (x * x).sum() - np.arange(64)
    np.testing.assert_array_equal(i[1], expect)
    assert_same(c[1], i[1], "device function")


def test_local_arrays():
    ptx = ptx_of(ALGO_SRC)
    assert ".local" in ptx
    rng = np.random.default_rng(8)
    n = 64
    x = rng.integers(0, 1000, n).astype(np.int32)
    c, i = run_both(ptx, "local_sort", 2, 32, (x, np.zeros(n, np.int32), np.int32(n)))
    for t in range(n):
        a = sorted(x[(t * 7 + k * 13) % n] for k in range(16))
        pick = x[t] & 15
        assert i[1][t] == a[pick] * 16 + pick
    assert_same(c[1], i[1], "local arrays")


def test_block_and_grid_dims():
    out = np.zeros(4 * 32 * 4, np.int32)
    c, i = run_both(ptx_of(ALGO_SRC), "dims", (2, 2), (4, 4, 2), (out,))
    o = i[0].reshape(4, 32, 4)
    lin = np.arange(32)
    np.testing.assert_array_equal(o[0, :, 0], lin + 100 * ((lin // 4) % 4) + 1000 * (lin // 16))
    np.testing.assert_array_equal(o[1, :, 1], lin)
    np.testing.assert_array_equal(o[2, :, 2], lin ^ 5)
    np.testing.assert_array_equal(o[:, 0, 3], [200 + 2000, 201 + 2000, 210 + 2000, 211 + 2000])
    assert_same(c[0], i[0], "dims")


MEM_SRC = r"""
__device__ __noinline__ int weighted(const int* p, int n)
{
    int s = 0;
    for (int i = 0; i < n; ++i) s += p[i] * (i + 1);
    return s;
}

extern "C" __global__ void vecmem(const float4* a, float4* b, const int2* c, int2* d, const double* e,
                                  int* hl, double* f, int* g)
{
    int t = threadIdx.x;
    float4 v = a[t];
    b[t] = make_float4(v.w, v.z * 2.0f, v.y + v.x, -v.x);
    int2 w = c[t];
    d[t] = make_int2(w.y, w.x ^ t);
    double x = e[t];
    hl[2 * t] = __double2hiint(x); hl[2 * t + 1] = __double2loint(x);
    f[t] = __hiloint2double(__double2loint(x) | 1, __double2hiint(x));
    int loc[8];
    for (int i = 0; i < 8; ++i) loc[i] = t * i + c[(t + i) % blockDim.x].x;
    g[t] = weighted(loc, (t % 8) + 1);        // a generic pointer into local memory
}
"""


def test_vector_memory_and_generic_local_pointers():
    ptx = ptx_of(MEM_SRC)
    assert "ld.global.v4.f32" in ptx and "cvta.local" in ptx and "mov.b64" in ptx
    rng = np.random.default_rng(14)
    n = 32
    a = rng.standard_normal(4 * n).astype(np.float32)
    c = rng.integers(-1000, 1000, 2 * n).astype(np.int32)
    e = rng.standard_normal(n) * 1e5
    args = (a, np.zeros(4 * n, np.float32), c, np.zeros(2 * n, np.int32), e, np.zeros(2 * n, np.int32),
            np.zeros(n, np.float64), np.zeros(n, np.int32))
    cr, ir = run_both(ptx, "vecmem", 1, n, args)
    A = a.reshape(n, 4)
    np.testing.assert_array_equal(ir[1].reshape(n, 4), np.stack([A[:, 3], A[:, 2] * 2, A[:, 1] + A[:, 0], -A[:, 0]], 1))
    C = c.reshape(n, 2)
    np.testing.assert_array_equal(ir[3].reshape(n, 2), np.stack([C[:, 1], C[:, 0] ^ np.arange(n)], 1))
    ebits = e.view(np.uint64)
    np.testing.assert_array_equal(ir[5].reshape(n, 2).view(np.uint32), np.stack([ebits >> 32, ebits & 0xFFFFFFFF], 1))
    np.testing.assert_array_equal(ir[6].view(np.uint64), (((ebits & 0xFFFFFFFF) | 1) << 32) | (ebits >> 32))
    for t in range(n):
        loc = [t * i + int(C[(t + i) % n, 0]) for i in range(8)]
        assert ir[7][t] == sum(loc[i] * (i + 1) for i in range(t % 8 + 1))
    for x, y in zip(cr, ir):
        assert_same(x, y, "vector memory")


# --- warp collectives ----------------------------------------------------------------------------------

WARP_SRC = r"""
#define FULL 0xffffffffu
extern "C" __global__ void warps(const int* x, int* out)
{
    int t = threadIdx.x, lane = t & 31;
    int v = x[blockIdx.x * blockDim.x + t];
    int* o = out + (blockIdx.x * blockDim.x + t) * 16;
    int s = v;
    for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(FULL, s, off);
    o[0] = s;
    int b = v;
    for (int m = 1; m < 32; m <<= 1) b = max(b, __shfl_xor_sync(FULL, b, m));
    o[1] = b;
    o[2] = __shfl_sync(FULL, v, (lane * 7) & 31);
    int inc = v;
    for (int d = 1; d < 32; d <<= 1) { int y = __shfl_up_sync(FULL, inc, d); if (lane >= d) inc += y; }
    o[3] = inc;
    o[4] = __ballot_sync(FULL, v > 0);
    o[5] = __any_sync(FULL, v > 90) + 2 * __all_sync(FULL, v > -200);
    o[6] = __shfl_down_sync(FULL, v, 1, 8);
    o[7] = __shfl_sync(FULL, v, 3, 4);
    o[8] = __match_any_sync(FULL, v & 3);
    if (lane < 10) {
        o[9] = __activemask();
        o[10] = __shfl_xor_sync(0x3ff, v, 1);
        o[11] = __ballot_sync(0x3ff, v & 1);
    }
    __syncwarp();
    unsigned mask = __ballot_sync(FULL, lane & 1);
    if (lane & 1) o[12] = __shfl_sync(mask, v, 1);
    int pred;
    o[13] = __match_all_sync(FULL, v > -1000, &pred) + pred;
    double dv = v * 0.5 + 1e-9 * lane;
    o[14] = (int)(__shfl_xor_sync(FULL, dv, 3) * 4.0);
    o[15] = (int)(__shfl_sync(FULL, (long long)v << 33, 31 - lane) >> 33);
}
"""

REDUX_SRC = r"""
extern "C" __global__ void redux(const int* x, unsigned* out)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int v = x[t];
    unsigned* o = out + t * 6;
    o[0] = __reduce_add_sync(0xffffffff, v);
    o[1] = __reduce_min_sync(0xffffffff, v);
    o[2] = __reduce_max_sync(0xffffffff, (unsigned)v);
    o[3] = __reduce_and_sync(0xffffffff, (unsigned)v | 0x100);
    o[4] = __reduce_or_sync(0xffffffff, (unsigned)v & 0xff);
    o[5] = __reduce_xor_sync(0xffffffff, (unsigned)v);
}
"""


def test_warp_collectives():
    rng = np.random.default_rng(9)
    n = 48                                  # one full warp and one of 16 lanes
    x = rng.integers(-100, 100, 2 * n).astype(np.int32)
    ptx = ptx_of(WARP_SRC)
    for kw in ("shfl.sync.down", "shfl.sync.bfly", "shfl.sync.up", "shfl.sync.idx", "vote.sync.ballot",
               "match.any.sync", "activemask"):
        assert kw in ptx, kw
    c, i = run_both(ptx, "warps", 2, n, (x, np.zeros(2 * n * 16, np.int32)))
    o = i[1].reshape(2, n, 16)
    for blk in range(2):
        w = x[blk * n: blk * n + 32]
        assert o[blk, 0, 0] == w.sum()
        np.testing.assert_array_equal(o[blk, :32, 1], np.full(32, w.max()))
        np.testing.assert_array_equal(o[blk, :32, 2], w[(np.arange(32) * 7) & 31])
        np.testing.assert_array_equal(o[blk, :32, 3], np.cumsum(w))
        ballot = sum(1 << k for k in range(32) if w[k] > 0)
        np.testing.assert_array_equal(o[blk, :32, 4].view(np.uint32), np.full(32, ballot, np.uint32))
        seg = np.arange(32)
        expect6 = np.where(seg % 8 < 7, w[np.minimum(seg + 1, 31)], w)
        np.testing.assert_array_equal(o[blk, :32, 6], expect6)
        np.testing.assert_array_equal(o[blk, :32, 7], w[(seg & ~3) | 3])
        np.testing.assert_array_equal(o[blk, :10, 9], np.full(10, 0x3FF))
        np.testing.assert_array_equal(o[blk, :10, 10], w[np.arange(10) ^ 1])
        np.testing.assert_array_equal(o[blk, :10, 11], np.full(10, sum(1 << k for k in range(10) if w[k] & 1)))
        np.testing.assert_array_equal(o[blk, 1:32:2, 12], np.full(16, w[1]))
        np.testing.assert_array_equal(o[blk, :32, 13], np.zeros(32))        # match.all: mask + pred
        np.testing.assert_array_equal(o[blk, :32, 14], np.trunc((w[seg ^ 3] * 0.5 + 1e-9 * (seg ^ 3)) * 4))
        np.testing.assert_array_equal(o[blk, :32, 15], w[31 - seg])
        same = [sum(1 << m for m in range(32) if (w[m] & 3) == (w[k] & 3)) for k in range(32)]
        np.testing.assert_array_equal(o[blk, :32, 8].view(np.uint32), same)
        assert (o[blk, :32, 5] == int((w > 90).any()) + 2 * int((w > -200).all())).all()
        # partial warp (16 lanes): reductions over the lanes that exist
        w2 = x[blk * n + 32: blk * n + 48]
        np.testing.assert_array_equal(o[blk, 32:, 1], np.full(16, w2.max()))
        np.testing.assert_array_equal(o[blk, 32:48, 3], np.cumsum(w2))
    assert_same(c[1], i[1], "warp collectives")


def test_warp_redux_sm80():
    ptx = ptx_of(REDUX_SRC, arch="compute_80")
    assert "redux.sync" in ptx
    rng = np.random.default_rng(10)
    x = rng.integers(-1000, 1000, 64).astype(np.int32)
    c, i = run_both(ptx, "redux", 2, 32, (x, np.zeros(64 * 6, np.uint32)))
    o = i[1].reshape(64, 6)
    for blk in range(2):
        w = x[blk * 32:(blk + 1) * 32]
        u = w.view(np.uint32)
        r = o[blk * 32]
        assert r[0] == int(w.sum()) & 0xFFFFFFFF and r[1] == int(w.min()) & 0xFFFFFFFF
        assert r[2] == u.max() and r[3] == np.bitwise_and.reduce(u | 0x100)
        assert r[4] == np.bitwise_or.reduce(u & 0xFF) and r[5] == np.bitwise_xor.reduce(u)
    assert_same(c[1], i[1], "redux")


# --- __syncthreads_count / _and / _or ----------------------------------------------------------------

SYNC_RED_SRC = r"""
extern "C" __global__ void syncred(const int* x, int* out)
{
    int t = threadIdx.x;
    int v = x[blockIdx.x * blockDim.x + t];
    int* o = out + (blockIdx.x * blockDim.x + t) * 3;
    o[0] = __syncthreads_count(v > 0);
    o[1] = __syncthreads_and(v > -50);
    o[2] = __syncthreads_or(v > 95);
}
"""


def _syncred_expect(x: np.ndarray) -> np.ndarray:
    blocks = x.reshape(2, 64)
    exp = np.zeros((2, 64, 3), np.int32)
    for b in range(2):
        exp[b, :, 0] = (blocks[b] > 0).sum()
        exp[b, :, 1] = int((blocks[b] > -50).all())
        exp[b, :, 2] = int((blocks[b] > 95).any())
    return exp.ravel()


def _syncred_x() -> np.ndarray:
    x = np.random.default_rng(11).integers(-100, 100, 128).astype(np.int32)
    x[64:] = np.abs(x[64:]) - 10
    return x


def test_interp_syncthreads_count_and_or():
    x = _syncred_x()
    (out,) = run_interp(ptx_of(SYNC_RED_SRC), "syncred", 2, 64, (x, np.zeros(128 * 3, np.int32)))[1:]
    np.testing.assert_array_equal(out, _syncred_expect(x))


def test_syncthreads_count_and_or_compiled_vs_interp():
    x = _syncred_x()
    c, i = run_both(ptx_of(SYNC_RED_SRC), "syncred", 2, 64, (x, np.zeros(128 * 3, np.int32)))
    np.testing.assert_array_equal(c[1], _syncred_expect(x))
    assert_same(c[1], i[1], "__syncthreads_count/and/or")


# --- atomics ---------------------------------------------------------------------------------------------

ATOMIC_SRC = r"""
extern "C" __global__ void hist(const int* x, int* ghist, int* gstats, unsigned* gbits)
{
    __shared__ int sh[16];
    __shared__ unsigned sx;
    int t = threadIdx.x, v = x[blockIdx.x * blockDim.x + t];
    if (t < 16) sh[t] = 0;
    if (t == 0) sx = 0;
    __syncthreads();
    atomicAdd(&sh[v & 15], 1);
    atomicXor(&sx, (unsigned)v);
    __syncthreads();
    if (t < 16) atomicAdd(&ghist[t], sh[t]);
    if (t == 0) atomicXor(&gbits[2], sx);
    atomicMax(&gstats[0], v); atomicMin(&gstats[1], v);
    atomicMax((unsigned*)&gstats[2], (unsigned)v);
    atomicAnd(&gbits[0], ~(1u << (v & 31))); atomicOr(&gbits[1], 1u << (v & 31));
    atomicInc(&gbits[3], 17u); atomicDec(&gbits[4], 5u);
    atomicAdd((unsigned long long*)&gbits[6], (unsigned long long)(v & 0xff) << 31);
}

__device__ float cas_add(float* p, float v)
{
    int* ip = (int*)p;
    int old = *ip, assumed;
    do {
        assumed = old;
        old = atomicCAS(ip, assumed, __float_as_int(__int_as_float(assumed) + v));
    } while (assumed != old);
    return __int_as_float(old);
}

extern "C" __global__ void ordered(const float* x, float* fsum, int* ticket, int* order, float* olds,
                                   double* dsum, unsigned long long* big, float* fx)
{
    __shared__ float s;
    __shared__ int sw;
    int t = threadIdx.x;
    if (t == 0) { s = 0.0f; sw = -1; }
    __syncthreads();
    float v = x[t];
    atomicAdd(&fsum[0], v);
    olds[t] = cas_add(&fsum[1], v * 2.0f);
    atomicAdd(&s, v);
    int prev = atomicExch(&sw, t);
    int k = atomicAdd(ticket, 1);
    order[k] = t * 1000 + prev;
    atomicAdd(dsum, (double)v * 1e-3);
    unsigned long long want = big[0];
    while (atomicCAS(big, want, want * 3 + t) != want) want = big[0];
    fx[t] = atomicExch(&fx[64], v);
    __syncthreads();
    if (t == 0) fsum[2] = s;
}
"""


def test_atomics_shared_and_global():
    rng = np.random.default_rng(12)
    x = rng.integers(-500, 500, 128).astype(np.int32)
    stats = np.array([-2**31, 2**31 - 1, 0], np.int32)
    bits = np.array([0xFFFFFFFF, 0, 0, 0, 3, 0, 0, 0], np.uint32)
    args = (x, np.zeros(16, np.int32), stats, bits)
    c, i = run_both(ptx_of(ATOMIC_SRC), "hist", 2, 64, args)
    ghist, gstats, gbits = i[1], i[2], i[3]
    np.testing.assert_array_equal(ghist, np.bincount(x & 15, minlength=16))
    assert gstats[0] == x.max() and gstats[1] == x.min()
    assert gstats[2] == x.view(np.uint32).max().view(np.int32)
    lowbits = sum(1 << int(b) for b in set((x & 31).tolist()))
    assert gbits[0] == 0xFFFFFFFF & ~lowbits and gbits[1] == lowbits
    assert gbits[2] == np.bitwise_xor.reduce(x.view(np.uint32))
    inc = 0
    dec = 3
    for _ in range(128):
        inc = 0 if inc >= 17 else inc + 1
        dec = 5 if dec == 0 or dec > 5 else dec - 1
    assert gbits[3] == inc and gbits[4] == dec
    assert gbits[6:8].view(np.uint64)[0] == sum((int(v) & 0xFF) << 31 for v in x)
    for a, b in zip(c, i):
        assert_same(a, b, "atomics")


def test_atomics_ordered_single_block():
    """One block: the compiled thread loop and the interpreter run threads in the same order,
    so even order-dependent atomics (float sums, tickets, exchanges) agree bitwise."""
    x = np.random.default_rng(13).standard_normal(64).astype(np.float32)
    args = (x, np.zeros(3, np.float32), np.zeros(1, np.int32), np.zeros(64, np.int32), np.zeros(64, np.float32),
            np.zeros(1, np.float64), np.array([1], np.uint64), np.full(65, -1.0, np.float32))
    c, i = run_both(ptx_of(ATOMIC_SRC), "ordered", 1, 64, args)
    fsum, ticket, order, olds, dsum, big, fx = i[1:8]
    seq = np.float32(0)
    for v in x:
        seq = np.float32(seq + v)
    assert fsum[0] == seq and fsum[2] == seq
    assert ticket[0] == 64
    np.testing.assert_array_equal(order, np.arange(64) * 1000 + np.arange(-1, 63))
    assert olds[0] == 0 and olds[1] == np.float32(x[0] * 2)
    acc = 0.0
    for v in x:
        acc += float(v) * 1e-3
    assert dsum[0] == acc
    b = 1
    for t in range(64):
        b = (b * 3 + t) % 2**64
    assert big[0] == b
    np.testing.assert_array_equal(fx, np.concatenate([[-1.0], x]))
    for a, b in zip(c, i):
        assert_same(a, b, "ordered atomics")


# --- launch failures ----------------------------------------------------------------------------------

FAIL_SRC = r"""
extern "C" __global__ void diverge(int* x, int reps)
{
    __shared__ int s[64];
    int t = threadIdx.x;
    for (int i = 0; i < (t & 1) + reps; ++i) { s[t] = i; __syncthreads(); }
    s[t] += 1;
    __syncthreads();
    x[t] = s[(t + 1) & 63];
}

extern "C" __global__ void trapper(int* x)
{
    if (blockIdx.x == 1 && threadIdx.x == 5) asm volatile("trap;");
    x[blockIdx.x * blockDim.x + threadIdx.x] = 1;
}

extern "C" __global__ void asserter(const int* x)
{
    assert(x[threadIdx.x] >= 0);
}

extern "C" __global__ void early_exit(const int* x, int* out)
{
    __shared__ int s[64];
    int t = threadIdx.x;
    if (x[t] < 0) return;          // exited threads are not waited for at barriers
    s[t] = x[t];
    __syncthreads();
    out[t] = s[t] + s[(t + 2) & 63] * 0;
}
"""


def test_barrier_divergence_raises():
    ptx = ptx_of(FAIL_SRC)
    x = np.zeros(64, np.int32)
    with pytest.raises(LaunchError, match=r"kernel 'diverge' failed in block \(0, 0, 0\).*same __syncthreads"):
        interpret_kernel(ptx, "diverge", 1, 64, (x, np.int32(1)))
    with pytest.raises(LaunchError, match="diverge"):
        compiled(ptx).get_function("diverge")(1, 64, (x, np.int32(1)))


def test_trap_and_assert_raise(capfd):
    ptx = ptx_of(FAIL_SRC)
    x = np.zeros(128, np.int32)
    with pytest.raises(LaunchError, match=r"trapper' failed in block \(1, 0, 0\).*trap"):
        interpret_kernel(ptx, "trapper", 2, 64, (x,))
    with pytest.raises(LaunchError, match="trap"):
        compiled(ptx).get_function("trapper")(2, 64, (x,))
    bad = np.array([1, 2, -3, 4], np.int32)
    with pytest.raises(LaunchError, match="assert"):
        interpret_kernel(ptx, "asserter", 1, 4, (bad,))
    assert "x[threadIdx.x] >= 0" in capfd.readouterr().err
    interpret_kernel(ptx, "asserter", 1, 4, (np.abs(bad),))      # passes


def test_exited_threads_do_not_block_barriers():
    x = np.arange(64, dtype=np.int32)
    x[::3] = -1
    c, i = run_both(ptx_of(FAIL_SRC), "early_exit", 1, 64, (x, np.full(64, 7, np.int32)))
    np.testing.assert_array_equal(i[1], np.where(x < 0, 7, x))
    assert_same(c[1], i[1], "early exit")


# --- printf, module variables, dynamic shared memory ----------------------------------------------------

MISC_SRC = r"""
__device__ int counter;
__device__ float table[4] = {1.5f, -2.0f, 0.25f, 8.0f};
__constant__ int coef[3] = {3, -1, 7};

extern "C" __global__ void say(const float* x)
{
    int t = threadIdx.x;
    printf("thread %d: x=%.3f hex=%#x s=%s %lld %5.1e|\n", t, x[t], t * 255, t & 1 ? "odd" : "even",
           -1234567890123LL * t, (double)x[t] * 1e10);
}

extern "C" __global__ void globals(const int* x, int* out)
{
    int t = threadIdx.x;
    int k = atomicAdd(&counter, 1);
    out[t] = x[t] * coef[t % 3] + (int)table[t & 3] + 0 * k;
    if (t == 7) table[3] += 1.0f;
}

extern "C" __global__ void reverse_dyn(float* x)
{
    extern __shared__ float buf[];
    int t = threadIdx.x, n = blockDim.x;
    buf[t] = x[blockIdx.x * n + t];
    __syncthreads();
    unsigned dyn;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    x[blockIdx.x * n + t] = buf[n - 1 - t] + (dyn == n * 4 ? 0.0f : 1000.0f);
}
"""


def test_printf_matches_compiled(capfd):
    ptx = ptx_of(MISC_SRC)
    x = np.array([0.5, -1.25, 3.14159, 1e-3], np.float32)
    compiled(ptx).get_function("say")(1, 4, (x,))
    out_c = capfd.readouterr().out
    interpret_kernel(ptx, "say", 1, 4, (x,))
    out_i = capfd.readouterr().out
    assert "thread 2: x=3.142 hex=0x1fe s=even -2469135780246" in out_i
    assert out_i == out_c


PRINTF_FORMATS_SRC = r"""
extern "C" __global__ void formats(const double* d, const long long* q)
{
    int t = threadIdx.x;
    printf("[%c|%-6s|%+.3e|%g|%o|%X|%#o|%#x|%lu|%hhd|%hu|%05d|%-5i|%%|%.0f|%10.4G|%a]\n",
           'a' + t, t ? "ab" : "", d[t], d[t] * 1e-7, t * 8 + 7, 0xbeef + t, t, t,
           (unsigned long)q[t], 300 + t, 70000 + t, -t, t, d[t], d[t] * 1e6, d[t]);
    printf("%s %5.1s|%ld %lld %llx %zu|%q %d\n", "str", "xyz", q[t], -q[t], q[t], (size_t)t, t);
    printf("%*d|%p|%d %d\n", 3, t, (void*)0, t);
}
"""


def test_printf_conversions_match_compiled(capfd):
    """The interpreter's printf (its own, on the C library's snprintf) prints what the
    native runtime prints: flags, widths, precisions, length modifiers, `%%`, and the
    conversions it copies as written (`*` widths, unknown letters)."""
    ptx = ptx_of(PRINTF_FORMATS_SRC)
    d = np.array([3.25, -1e300, np.inf, np.nan], np.float64)
    q = np.array([0, -1, 2**40 + 3, -(2**62)], np.int64)
    compiled(ptx).get_function("formats")(1, 4, (d, q))
    out_c = capfd.readouterr().out
    interpret_kernel(ptx, "formats", 1, 4, (d, q))
    out_i = capfd.readouterr().out
    assert "[a|      |+3.250e+00|3.25e-07|7|BEEF|0|0|0|44|4464|00000|0    |%|3|  3.25E+06|0x1.ap+1]" in out_i
    assert "str     x|-1 1 ffffffffffffffff 1|%q 1\n" in out_i
    assert out_i == out_c


def test_interpreter_shares_no_code_with_what_it_checks():
    """The oracle imports only the IR, the errors, and (to start from PTX text) the
    frontend and lifting: never code generation, analyses, transforms, the API or the
    runtime.  And the IR does not import the frontend."""
    import ast
    import subprocess
    import sys
    from pathlib import Path

    src = Path(cpuify.__file__).parent

    def imports(path: Path) -> set[str]:
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
        return {m for m in found if m == "cpuify" or m.startswith("cpuify.")}

    allowed = ("cpuify.ir", "cpuify.errors", "cpuify.frontend", "cpuify.lifting", "cpuify.interp")
    for path in sorted((src / "interp").glob("*.py")):
        bad = [m for m in imports(path) if not m.startswith(allowed)]
        assert not bad, f"{path.name} imports {bad}"
    for path in sorted((src / "ir").glob("*.py")):
        bad = [m for m in imports(path) if not m.startswith(("cpuify.ir", "cpuify.errors"))]
        assert not bad, f"ir/{path.name} imports {bad}"
    code = ("import sys, cpuify.interp; print(' '.join(sorted(m for m in sys.modules "
            "if m.startswith('cpuify.'))))")
    loaded = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                            text=True).stdout.split()
    for layer in ("codegen", "analysis", "transforms", "api", "runtime", "compiler"):
        assert not [m for m in loaded if m.startswith(f"cpuify.{layer}")], (layer, loaded)


def test_module_variables_persist_per_module():
    ptx = ptx_of(MISC_SRC)
    x = np.arange(8, dtype=np.int32)
    mod = InterpModule(ptx)
    out = np.zeros(8, np.int32)
    mod.launch("globals", 1, 8, (x, out))
    np.testing.assert_array_equal(out, x * np.array([3, -1, 7] * 3)[:8] + np.array([1, -2, 0, 8] * 2))
    mod.launch("globals", 1, 8, (x, out))
    assert mod.get_global("counter", np.int32)[0] == 16
    np.testing.assert_array_equal(mod.get_global("table", np.float32), [1.5, -2.0, 0.25, 10.0])
    rm = cpuify.RawModule(ptx=ptx)
    cout = np.zeros(8, np.int32)
    rm.get_function("globals")(1, 8, (x, cout))
    rm.get_function("globals")(1, 8, (x, cout))
    np.testing.assert_array_equal(cout, out)
    assert rm.get_global("counter", np.int32)[0] == 16
    np.testing.assert_array_equal(rm.get_global("table", np.float32), mod.get_global("table", np.float32))


def test_dynamic_shared_memory():
    x = np.arange(64, dtype=np.float32)
    (res,) = run_interp(ptx_of(MISC_SRC), "reverse_dyn", 2, 32, (x,), shared_mem=32 * 4)
    np.testing.assert_array_equal(res, x.reshape(2, 32)[:, ::-1].ravel())


def test_dynamic_smem_size_register_compiled_vs_interp():
    x = np.arange(64, dtype=np.float32)
    c, i = run_both(ptx_of(MISC_SRC), "reverse_dyn", 2, 32, (x,), shared_mem=32 * 4)
    assert_same(c[0], i[0], "%dynamic_smem_size")


# --- parameter packing, errors -------------------------------------------------------------------------

PACK_SRC = r"""
struct S { int a; double b; char c; };
extern "C" __global__ void params(const float* p, signed char c8, unsigned short u16, int i32,
                                  unsigned long long u64, float f, double d, S s, long long* q, int* out)
{
    out[0] = c8; out[1] = u16; out[2] = i32; out[3] = (int)u64; out[4] = (int)(u64 >> 32);
    out[5] = __float_as_int(f); out[6] = (int)(d * 10); out[7] = s.a; out[8] = (int)s.b; out[9] = s.c;
    out[10] = (int)p[1]; out[11] = q == 0;
}
"""


def test_pack_params_matches_api():
    """The kernel echoes its parameters: the interpreter's packer and the API's agree on
    pointers, scalars of every width and signedness, None, bools and structs by value."""
    ptx = ptx_of(PACK_SRC)
    fn = compiled(ptx).get_function("params")
    st = np.zeros((), dtype=np.dtype([("a", "<i4"), ("b", "<f8"), ("c", "i1")], align=True))
    st["a"], st["b"], st["c"] = -5, 42.9, 7
    p = np.array([0.0, 9.5], np.float32)
    raw = bytearray(16)
    variants = [
        (p, np.int8(-3), 65535, -7, 2**63 + 5, 1.25, 2.5, st[()], None),
        (bytearray(8), True, np.uint16(7), np.int64(-2**31), np.uint64(2**64 - 1), np.float64(0.1),
         np.int32(3), st.tobytes(), memoryview(raw)),
        (p, -128, -1, 2**32 - 1, -2**63, 3, 1e300, st[()], p),
    ]
    kernel = InterpModule(ptx).kernel("params").lifted
    for v in variants:
        out_c, out_i = np.zeros(12, np.int32), np.zeros(12, np.int32)
        fn(1, 1, v + (out_c,))
        interpret_kernel(ptx, "params", 1, 1, v + (out_i,))
        np.testing.assert_array_equal(out_i, out_c)
        assert len(pack_params(kernel, v + (out_i,))) == kernel.param_size
    # last variant: -1 for .u16 wraps to 65535, 3 for an f32 is 3.0f, (int)1e301 saturates
    np.testing.assert_array_equal(out_i, [-128, 65535, -1, 0, -2**31, bits32(3.0), 2**31 - 1, -5, 42, 7, 9, 0])
    out = np.zeros(12, np.int32)
    interpret_kernel(ptx, "params", 1, 1, variants[0] + (out,))
    np.testing.assert_array_equal(out, [-3, 65535, -7, 5, -2**31, bits32(1.25), 25, -5, 42, 7, 9, 1])
    with pytest.raises(ValueError, match="does not fit"):
        pack_params(kernel, (p, 300, 1, 1, 1, 1.0, 1.0, st[()], None, out))
    with pytest.raises(TypeError, match="takes 10 argument"):
        pack_params(kernel, (p,))
    with pytest.raises(TypeError):
        pack_params(kernel, (p, 1.5, 1, 1, 1, 1.0, 1.0, st[()], None, out))


def test_unsupported_op_names_op_and_line():
    ptx = ptx_of(ALGO_SRC)
    mod = InterpModule(ptx)
    k = mod.kernel("bitonic")
    op = next(op for b in k.region.blocks for op in b.ops if op.name == "ptx.xor")
    op.name = "ptx.bogus"           # (an op the lifter would never make: no semantics)
    with pytest.raises(UnsupportedError, match=r"PTX line \d+: interpreter: no semantics for 'ptx.bogus'"):
        mod.launch("bitonic", 1, 64, (np.zeros(64, np.int32),))


def test_shared_out_of_bounds_is_reported():
    src = r"""extern "C" __global__ void oob(int* x, int k)
    { __shared__ int s[8]; s[threadIdx.x + k] = 1; __syncthreads(); x[threadIdx.x] = s[threadIdx.x]; }"""
    with pytest.raises(LaunchError, match="shared memory access out of bounds"):
        interpret_kernel(ptx_of(src), "oob", 1, 8, (np.zeros(8, np.int32), np.int32(100)))


def test_empty_struct_parameter():
    """An empty functor struct is a one-byte array parameter: passed as bytes."""
    src = r"""struct Empty {};
    extern "C" __global__ void functor(Empty e, int* out) { out[threadIdx.x] = threadIdx.x * 3; }"""
    ptx = ptx_of(src)
    c, i = run_both(ptx, "functor", 1, 4, (b"\0", np.zeros(4, np.int32)))
    np.testing.assert_array_equal(i[0], [0, 3, 6, 9])
    assert_same(c[0], i[0], "functor")
