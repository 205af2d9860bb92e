"""Half-precision values in LLVM code: f16 and bf16 registers hold their 16 bits (i16);
arithmetic converts them to f32 exactly and rounds the result back once.

bf16 is the upper half of an f32, so the conversions are shifts and a round-to-nearest-even
on the low 16 bits.  A result computed in f64 (fma: the product of two half values is exact
in f64, the sum is not) is first rounded to f32 *to odd* (an inexact result gets the odd
neighbour): rounding that to a format at least two bits narrower to nearest gives the
correctly rounded result (Boldo and Melquiond, "When double rounding is odd", 2005), where
two round-to-nearest steps could land on a half-way point."""

from __future__ import annotations

from typing import Callable

from llvmlite import ir

from cpuify.codegen.lowering import F16, F32, F64, I16, I32, I64

Intrinsic = Callable[[str, ir.Type, list[ir.Type]], ir.Function]


def bf16_to_f32(b: ir.IRBuilder, bits: ir.Value) -> ir.Value:
    """The f32 with the same value as a bf16 (exact)."""
    return b.bitcast(b.shl(b.zext(bits, I32), I32(16)), F32)


def half_to_f32(b: ir.IRBuilder, bits: ir.Value, t: str) -> ir.Value:
    """The f32 value of an f16 or bf16 register (exact)."""
    if t == "bf16":
        return bf16_to_f32(b, bits)
    return b.fpext(b.bitcast(bits, F16), F32)


def f32_to_bf16(b: ir.IRBuilder, f: ir.Value, mode: str = "rn") -> ir.Value:
    """An f32 rounded to bf16 (its bits) with rounding `mode`; NaN becomes the canonical
    bf16 NaN 0x7FFF, as PTX's cvt."""
    u = b.bitcast(f, I32)
    low = b.and_(u, I32(0xFFFF))
    top = b.lshr(u, I32(16))
    if mode == "rn":
        r = b.lshr(b.add(u, b.add(I32(0x7FFF), b.and_(top, I32(1)))), I32(16))
    else:
        negative = b.icmp_signed("<", u, I32(0))
        inexact = b.icmp_unsigned("!=", low, I32(0))
        away = {"rz": ir.Constant(ir.IntType(1), 0), "rp": b.not_(negative),
                "rm": negative}[mode]
        r = b.add(top, b.zext(b.and_(inexact, away), I32))     # the magnitude one step up
    is_nan = b.fcmp_unordered("uno", f, f)
    return b.trunc(b.select(is_nan, I32(0x7FFF), r), I16)


def f32_to_half(b: ir.IRBuilder, f: ir.Value, t: str) -> ir.Value:
    """An f32 rounded to nearest even f16 or bf16 (its bits)."""
    if t == "bf16":
        return f32_to_bf16(b, f)
    return b.bitcast(b.fptrunc(f, F16), I16)


def f64_to_f32_odd(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """x rounded to f32 to odd: exact values stay, an inexact one becomes whichever of its
    two f32 neighbours has an odd last bit (an overflow gives +-FLT_MAX)."""
    r = b.fptrunc(x, F32)
    back = b.fpext(r, F64)
    inexact = b.fcmp_ordered("one", back, x)
    bits = b.bitcast(r, I32)
    even = b.icmp_unsigned("==", b.and_(bits, I32(1)), I32(0))
    # r's magnitude moves toward x's: up when |x| > |r|
    up = b.fcmp_ordered(">", b.call(_fabs(b), [x]), b.call(_fabs(b), [back]))
    moved = b.select(up, b.add(bits, I32(1)), b.sub(bits, I32(1)))
    return b.bitcast(b.select(b.and_(inexact, even), moved, bits), F32)


def _fabs(b: ir.IRBuilder) -> ir.Function:
    mod = b.module
    fn = mod.globals.get("llvm.fabs.f64")
    if fn is None:
        fn = ir.Function(mod, ir.FunctionType(F64, [F64]), "llvm.fabs.f64")
    return fn


#: Half-precision fmas in one kernel above which each becomes a call of one shared,
#: not inlined function instead of its ~40 inline instructions (see fma_half_call).
FMA_HALF_INLINE_LIMIT = 256


def fma_half_call(b: ir.IRBuilder, a: ir.Value, c: ir.Value, d: ir.Value, t: str,
                  saturate: bool) -> ir.Value:
    """fma_half as a call of `cpuify_fma_<t>[_sat]`, an internal function of the module
    defined on first use and never inlined.  For kernels with thousands of half fmas
    (mixbench's f16x2 kernels: up to 4,000 per thread, 63k-200k lines of LLVM IR each,
    LLVM's loop vectorizer and instcombine growing with the loop body): the kernel's code
    stays small and its thread loop scalar, where inline fmas would be vectorized."""
    mod = b.module
    name = f"cpuify_fma_{t}" + ("_sat" if saturate else "")
    fn = mod.globals.get(name)
    if fn is None:
        fn = ir.Function(mod, ir.FunctionType(I16, [I16, I16, I16]), name)
        fn.linkage = "internal"
        fn.attributes.add("noinline")
        fn.attributes.add("nounwind")
        fb = ir.IRBuilder(fn.append_basic_block("entry"))
        fb.ret(fma_half(fb, *fn.args, t, saturate))
    return b.call(fn, [a, c, d])


def fma_half(b: ir.IRBuilder, a: ir.Value, c: ir.Value, d: ir.Value, t: str,
             saturate: bool) -> ir.Value:
    """fma.rn{.sat}.{f16,bf16} of three registers' bits, rounded once: the product is exact
    in f64; for bf16 the sum's error comes from TwoSum and makes the f64 result
    round-to-odd.  f16 needs no TwoSum: the f64 sum p + z is inexact only where the
    exponents of p and z are more than 31 apart, and then either z is an f16 value at
    least 2^-11 of its own magnitude from every f16 half-way point while |p| is below
    2^-30 of it (rounding the sum in f64 cannot reach a half-way point), or |p| > 2^28
    (the result is an overflow either way): f16's exponent range is that narrow."""
    x, y, z = (b.fpext(half_to_f32(b, v, t), F64) for v in (a, c, d))
    p = b.fmul(x, y)                                       # exact: 2 x 11 bits at most
    s = b.fadd(p, z)
    if t == "f16":
        if saturate:
            s = _saturated(b, s)
        return f32_to_half(b, f64_to_f32_odd(b, s), t)
    bb = b.fsub(s, p)
    err = b.fadd(b.fsub(p, b.fsub(s, bb)), b.fsub(z, bb))
    bits = b.bitcast(s, I64)
    finite = b.fcmp_ordered("<", b.call(_fabs(b), [s]), ir.Constant(F64, float("inf")))
    inexact = b.and_(finite, b.fcmp_ordered("one", err, ir.Constant(F64, 0.0)))
    even = b.icmp_unsigned("==", b.and_(bits, I64(1)), I64(0))
    # toward the exact value: magnitude up when err has s's sign
    same_sign = b.icmp_unsigned("==", b.lshr(bits, I64(63)),
                                b.lshr(b.bitcast(err, I64), I64(63)))
    moved = b.select(same_sign, b.add(bits, I64(1)), b.sub(bits, I64(1)))
    s = b.bitcast(b.select(b.and_(inexact, even), moved, bits), F64)
    if saturate:
        s = _saturated(b, s)
    return f32_to_half(b, f64_to_f32_odd(b, s), t)


def _saturated(b: ir.IRBuilder, s: ir.Value) -> ir.Value:
    """.sat of an f64 (clamping commutes with rounding: 0 and 1 are representable; NaN
    becomes 0)."""
    s = b.select(b.fcmp_ordered(">", s, ir.Constant(F64, 0.0)), s, ir.Constant(F64, 0.0))
    return b.select(b.fcmp_ordered("<", s, ir.Constant(F64, 1.0)), s, ir.Constant(F64, 1.0))
