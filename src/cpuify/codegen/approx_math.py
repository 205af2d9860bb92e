"""Inline LLVM IR for PTX's approximate f32 transcendentals: ex2.approx, lg2.approx,
sin.approx and cos.approx.

Each is a straight-line sequence of plain f32/i32 operations (range reduction, a minimax
polynomial evaluated with llvm.fma, the exponent handled through bitcasts, special values
by selects): no calls and no branches, so a thread loop that uses them is vectorized to 16
lanes with no scalarized libm calls (llvm.exp2.v16f32 without a vector math library is 16
calls to exp2f), and the results are the same bits on every x86 CPU (no libm, no
CPU-dependent estimates).  Only .f32 exists in PTX for these instructions.

Accuracy (measured over every f32 input by tests/test_approx_math.py, slow sweep), against
what PTX ISA 9.x documents for the instruction:

* ex2.approx.f32: PTX, 2 ulp from the correctly rounded result over the full range.  Here:
  2^x = 2^n * p(f), n = rint(x), f = x - n in [-1/2, 1/2] (exact), p a degree-6 polynomial
  (relative error 2^-28.9) ending in fma(f, q, 1); below 1 ulp from the exact result, so
  within 1 ulp of the correctly rounded one.  The scaling by 2^n is two multiplications by
  2^(n/2) and 2^(n - n/2), each a normal power of two built from its exponent bits, so that
  results that overflow become +inf and subnormal results (x < -126) are rounded once,
  correctly, from p * 2^(n/2).  -inf -> +0, +inf -> +inf, NaN -> NaN; .ftz flushes the
  subnormal inputs (-> 1) in the caller and the results (-> +0) here, where x < -126.
* lg2.approx.f32: PTX, absolute error 2^-22 in (0.5, 2), relative error 2^-22 elsewhere.
  Here: x = 2^e * m with m in [sqrt(1/2), sqrt(2)) (integer arithmetic on the bits), f = m - 1
  (exact), log2(1 + f) = f * (1/ln 2) + f^2 * Q(f), Q of degree 8 (relative error
  2^-27.9), 1/ln 2 split in two floats; then e + that.  Relative error below 2^-23 and within
  1 ulp of the correctly rounded result everywhere.  Subnormal inputs (without .ftz) are
  scaled by 2^23 first.  +-0 -> -inf, +inf -> +inf, negative inputs and NaN -> NaN.
* sin.approx.f32 / cos.approx.f32: PTX, absolute error 2^-20.5 in [-2pi, 2pi] and 2^-14.7 in
  [-100pi, 100pi], best effort outside.  Here: |x| = k * pi/2 + r with k = rint(|x| * 2/pi)
  and r = |x| - k * pi/2 by three fmas with pi/2 split in three floats (the first one is exact
  while k < 2^23), sin and cos of r by odd/even polynomials of degree 7/8 fitted on
  |r| <= 0.8 (relative error 2^-27.8 / 2^-32.7), picked and negated by k mod 4; sin takes
  the sign of x (so sin(-0) = -0).  Absolute error below 2^-23.5 for |x| < 2^17, where
  results above 2^-10 are also within 2 ulp of the correctly rounded ones (1 ulp but for
  about one input in 3 million: r itself is rounded); above that the reduction degrades
  (|x| is clamped to 2^30 and r to [-0.8, 0.8]: results stay in [-1, 1]).  +-inf and
  NaN -> NaN.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from llvmlite import ir

from cpuify.codegen.lowering import F32, I32

Intrinsic = Callable[[str, ir.Type, list], ir.Function]


def _f(bits: int) -> float:
    """The f32 with these bits, as a Python float (exact)."""
    return struct.unpack("<f", struct.pack("<I", bits))[0]


# 2^f = 1 + f * (c1 + c2 f + ... + c6 f^5) on [-1/2, 1/2]
_EX2 = [_f(b) for b in (0x3F317218, 0x3E75FDEE, 0x3D635774, 0x3C1D96A6, 0x3AAF9F2A, 0x3920FDDE)]
# log2(1 + f) = f * (C1_HI + C1_LO) + f^2 * (q0 + q1 f + ... + q8 f^8) on [sqrt(1/2)-1, sqrt(2)-1]
_LG2 = [_f(b) for b in (0xBF38AA38, 0x3EF6384B, 0xBEB8AD39, 0x3E93BF1E, 0xBE755E87, 0x3E5182CA,
                        0xBE43A42A, 0x3E3EA3C6, 0xBDE13230)]
_C1_HI, _C1_LO = _f(0x3FB8AA3B), _f(0x32A57060)           # 1/ln 2 = C1_HI + C1_LO (+ 2^-51)
_SQRT_HALF_BITS = 0x3F3504F3
# sin(r) = r + r^3 (s0 + s1 z + s2 z^2), cos(r) = 1 + z (-1/2 + z (c0 + c1 z + c2 z^2)),
# z = r^2, |r| <= 0.8
_SIN = [_f(b) for b in (0xBE2AAAA2, 0x3C08833D, 0xB94C8127)]
_COS = [_f(b) for b in (0x3D2AAAA4, 0xBAB605B1, 0x37CCD7D3)]
_PIO2 = [_f(b) for b in (0x3FC90FDB, 0xB33BBD2E, 0xA6F72CED)]   # pi/2 = A + B + C (+ 2^-76)
_TWO_OVER_PI = _f(0x3F22F983)
_R_MAX = 0.8


class _Emit:
    """A builder with f32 helpers."""

    def __init__(self, b: ir.IRBuilder, intrinsic: Intrinsic) -> None:
        self.b = b
        self._intrinsic = intrinsic

    def call(self, name: str, *args: ir.Value) -> ir.Value:
        return self.b.call(self._intrinsic(name, F32, [a.type for a in args]), list(args))

    def fma(self, x: ir.Value, y: ir.Value | float, z: ir.Value | float) -> ir.Value:
        return self.call("llvm.fma.f32", x, _c(y), _c(z))

    def horner(self, x: ir.Value, coefs: list[float]) -> ir.Value:
        """coefs[0] + coefs[1] x + ... by fmas from the highest degree down."""
        acc: ir.Value = _c(coefs[-1])
        for k in coefs[-2::-1]:
            acc = self.fma(acc, x, k)
        return acc

    def pow2(self, n: ir.Value) -> ir.Value:
        """2^n for an i32 n in [-126, 127], from its exponent bits."""
        return self.b.bitcast(self.b.shl(self.b.add(n, I32(127)), I32(23)), F32)

    def is_nan(self, x: ir.Value) -> ir.Value:
        return self.b.fcmp_unordered("uno", x, x)


def _c(v: ir.Value | float) -> ir.Value:
    return v if isinstance(v, ir.Value) else ir.Constant(F32, v)


def exp2_f32(b: ir.IRBuilder, intrinsic: Intrinsic, x: ir.Value, ftz: bool = False,
             scalef: bool = False) -> ir.Value:
    """ex2.approx.f32: 2^x (below 1 ulp from the exact result; subnormal results correctly
    rounded).  ftz: the result's flush too (the input's is the caller's), as +0 wherever
    x < -126: a compare of the input, off the path of the polynomial, instead of a test of
    the result's magnitude.  The same values: x >= -126 gives n >= -125 with p >= 0.7, or
    n = -126 with f >= 0 and p >= 1, so a result >= 2^-126; x < -126 gives n <= -127, or
    n = -126 with f <= -2^-17 (the f32 below -126 is -126 - 2^-17) and p < 1, so a
    subnormal or zero result.  scalef (for AVX-512 CPUs: the caller's check): the scaling by
    2^n as llvm.ldexp, which LLVM vectorizes and x86 lowers to one vscalefps, rounded once
    as the two multiplications are (the same bits): with the conversion of n back to a
    float, two instructions instead of the eight that build and apply the two powers of
    two; elsewhere ldexp is a libm call."""
    m = _Emit(b, intrinsic)
    # NaN becomes -160 here (maxnum returns the number), is restored at the end
    xc = m.call("llvm.minnum.f32", m.call("llvm.maxnum.f32", x, _c(-160.0)), _c(160.0))
    n = m.call("llvm.rint.f32", xc)
    f = b.fsub(xc, n)                                   # exact, |f| <= 1/2
    p = m.fma(f, m.horner(f, _EX2), 1.0)                # 2^f in [0.707, 1.414]
    ni = b.fptosi(n, I32)                               # [-160, 160]
    if scalef:
        r = b.call(intrinsic("llvm.ldexp.f32.i32", F32, [F32, I32]), [p, ni])
    else:
        n1 = b.ashr(ni, I32(1))
        n2 = b.sub(ni, n1)                              # both in [-80, 80]
        r = b.fmul(b.fmul(p, m.pow2(n1)), m.pow2(n2))   # exact, then one rounding
    r = b.select(m.is_nan(x), x, r)
    if ftz:
        r = b.select(b.fcmp_ordered("<", x, _c(-126.0)), _c(0.0), r)
    return r


def log2_f32(b: ir.IRBuilder, intrinsic: Intrinsic, x: ir.Value, subnormals: bool) -> ir.Value:
    """lg2.approx.f32: log2(x) (relative error below 2^-23, within 1 ulp of the correctly
    rounded result).  subnormals: scale subnormal inputs (False after .ftz flushed them)."""
    m = _Emit(b, intrinsic)
    xs = x
    if subnormals:
        tiny = b.fcmp_ordered("<", x, _c(2.0 ** -126))      # also zeros, negative inputs
        xs = b.select(tiny, b.fmul(x, _c(2.0 ** 23)), x)
    bits = b.bitcast(xs, I32)
    # x = 2^e * m, m in [sqrt(1/2), sqrt(2)): t = e << 23
    t = b.and_(b.sub(bits, I32(_SQRT_HALF_BITS)), I32(-(1 << 23)))
    f = b.fsub(b.bitcast(b.sub(bits, t), F32), _c(1.0))       # exact
    e = b.sitofp(b.ashr(t, I32(23)), F32)
    if subnormals:
        e = b.fadd(e, b.select(tiny, _c(-23.0), _c(0.0)))
    r = m.fma(b.fmul(f, f), m.horner(f, _LG2), b.fmul(f, _c(_C1_LO)))
    y = b.fadd(e, m.fma(f, _C1_HI, r))
    y = b.select(b.fcmp_ordered("==", x, _c(float("inf"))), _c(float("inf")), y)
    y = b.select(b.fcmp_ordered("==", x, _c(0.0)), _c(float("-inf")), y)
    return b.select(b.fcmp_unordered("<", x, _c(0.0)), _c(float("nan")), y)   # x < 0, NaN


def sin_cos_f32(b: ir.IRBuilder, intrinsic: Intrinsic, x: ir.Value, cos: bool) -> ir.Value:
    """sin.approx.f32 / cos.approx.f32 (absolute error below 2^-23.5 for |x| < 2^17)."""
    m = _Emit(b, intrinsic)
    a = m.call("llvm.fabs.f32", x)
    a = m.call("llvm.minnum.f32", a, _c(2.0 ** 30))     # NaN, inf -> 2^30: k fits an i32
    k = m.call("llvm.rint.f32", b.fmul(a, _c(_TWO_OVER_PI)))
    nk = b.fneg(k)
    r = a
    for part in _PIO2:
        r = m.fma(nk, part, r)
    # |r| <= 0.8 wherever the reduction is accurate; beyond, keep the polynomials bounded
    r = b.select(b.fcmp_ordered(">", r, _c(_R_MAX)), _c(_R_MAX), r)
    r = b.select(b.fcmp_ordered("<", r, _c(-_R_MAX)), _c(-_R_MAX), r)
    z = b.fmul(r, r)
    s = m.fma(b.fmul(z, r), m.horner(z, _SIN), r)
    co = m.fma(m.fma(m.horner(z, _COS), z, -0.5), z, 1.0)
    q = b.fptosi(k, I32)
    if cos:
        q = b.add(q, I32(1))                             # cos(a) = sin(a + pi/2)
    y = b.select(b.icmp_unsigned("!=", b.and_(q, I32(1)), I32(0)), co, s)
    sign = b.shl(b.and_(q, I32(2)), I32(30))             # quadrants 2, 3: negate
    if not cos:
        sign = b.xor(sign, b.and_(b.bitcast(x, I32), I32(-(1 << 31))))   # sin(-x) = -sin(x)
    y = b.bitcast(b.xor(b.bitcast(y, I32), sign), F32)
    inf_or_nan = b.fcmp_unordered("==", m.call("llvm.fabs.f32", x), _c(float("inf")))
    return b.select(inf_or_nan, _c(float("nan")), y)


def rsqrt_f32(b: ir.IRBuilder, intrinsic: Intrinsic, a: ir.Value) -> ir.Value:
    """rsqrt.approx.f32 within CUDA's bound for rsqrtf (2 ulp from the correctly rounded
    result; this is within 1 ulp, checked for every positive f32): the CPU's reciprocal
    square root estimate refined by one third-order step, a handful of multiplies instead
    of a square root and a division (n-body 49.3 -> 35.8 ms).  For AVX-512 CPUs only (the
    caller's check), in a module that asks for estimates without refinement (the caller
    sets ModuleCodegen.rsqrt_estimates).  After LLVM's optimization, rsqrt_widths replaces
    this sequence, where it was vectorized, with vrsqrt14 and one Newton-Raphson step.

    The estimate comes from `1 / sqrt(x)` with LLVM's approximate-function flags:
    vrsqrt14ps (relative error < 2^-14) in 16-wide loops, rsqrtps/rsqrtss (< 1.5 * 2^-12)
    in narrower ones, which one Newton-Raphson step would leave above 2 ulp.  The step has
    exact flags: r = 1 - (x*y)*y by an fma, y * (1 + r/2 + 3r^2/8) (the series of
    (1 - r)^(-1/2), error about 2.5 e^3).  Subnormal inputs, which the 12-bit estimate
    flushes, are scaled by 2^24 first and the result by 2^12.  Where r is NaN the
    estimate stands: a zero (-> infinity of its sign), +inf (-> +0), a negative input or
    NaN (-> NaN).  Without AVX-512 (no vrsqrt14ps for the main loops) the exact quotient is
    used; so does the interpreter (tests allow the 2 ulp)."""
    fast = ("afn", "arcp", "contract")
    sqrt = intrinsic("llvm.sqrt.f32", F32, [F32])

    def fma(x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
        return b.call(intrinsic("llvm.fma.f32", F32, [F32, F32, F32]), [x, y, z])

    tiny = b.fcmp_ordered("<", a, _c(2.0 ** -126))        # also zeros and negative inputs
    x = b.select(tiny, b.fmul(a, _c(2.0 ** 24)), a)
    y = b.fdiv(_c(1.0), b.call(sqrt, [x], fastmath=fast), flags=fast)
    r = fma(b.fneg(b.fmul(x, y)), y, _c(1.0))
    refined = fma(y, b.fmul(r, fma(r, _c(0.375), _c(0.5))), y)
    y = b.select(b.fcmp_unordered("uno", r, r), y, refined)
    return b.select(tiny, b.fmul(y, _c(2.0 ** 12)), y)
