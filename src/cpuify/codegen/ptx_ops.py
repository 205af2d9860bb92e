"""LLVM lowering of `ptx.*` ops: PTX instruction semantics (ISA 9.x), one handler per opcode.

Rounding: `.rn` is IEEE default; directed `.rz/.rm/.rp` on add/sub/mul/div/sqrt/rcp and
fma.f32 are computed exactly from the round-to-nearest result and the sign of its exact
error (error-free transformations, in double for f32 so the error cannot underflow);
`.ftz` flushes subnormal inputs and outputs; `.sat` clamps to [0, 1].
Integer division by zero yields all ones instead of a CPU fault."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from cpuify.codegen import approx_math, jit
from cpuify.analysis.pointers import memory_space
from cpuify.codegen.lowering import (
    F16, F32, F64, I1, I8, I16, I32, I64, PTR, handles, is_float, is_signed, ptx_llvm_type, _width,
)
from cpuify.frontend.ptx_ast import type_size
from cpuify.ir.core import Operation, OpResult, Value

if TYPE_CHECKING:
    from cpuify.codegen.segment_emitter import SegmentEmitter
from cpuify.ir.modifiers import has, mods, rounding, ty, types




def call(e: SegmentEmitter, name: str, ret: ir.Type, args: list[ir.Value]) -> ir.Value:
    fn = e.mod.intrinsic(name, ret, [a.type for a in args])
    return e.b.call(fn, args)


def fsuffix(t: ir.Type) -> str:
    return {32: "f32", 64: "f64", 16: "f16"}[_width(t)]


def ftz(e: SegmentEmitter, v: ir.Value, on: bool) -> ir.Value:
    """Flush a subnormal f32 to a zero of the same sign."""
    if not on or v.type != F32:
        return v
    b = e.b
    mag = call(e, "llvm.fabs.f32", F32, [v])
    tiny = b.fcmp_ordered("<", mag, ir.Constant(F32, 1.1754943508222875e-38))
    zero = call(e, "llvm.copysign.f32", F32, [ir.Constant(F32, 0.0), v])
    return b.select(tiny, zero, v)


def saturate(e: SegmentEmitter, v: ir.Value) -> ir.Value:
    """Clamp to [0, 1]; NaN becomes 0 (PTX .sat)."""
    b = e.b
    s = fsuffix(v.type)
    lo = call(e, f"llvm.maxnum.{s}", v.type, [v, ir.Constant(v.type, 0.0)])
    hi = call(e, f"llvm.minnum.{s}", v.type, [lo, ir.Constant(v.type, 1.0)])
    is_nan = b.fcmp_unordered("uno", v, v)
    return b.select(is_nan, ir.Constant(v.type, 0.0), hi)


def nextafter(e: SegmentEmitter, v: ir.Value, up: bool) -> ir.Value:
    """The float adjacent to v towards +inf (up) or -inf; NaN/inf in that direction unchanged."""
    b = e.b
    w = _width(v.type)
    it = ir.IntType(w)
    bits = b.bitcast(v, it)
    sign = b.icmp_signed("<", bits, it(0))
    is_zero = b.fcmp_ordered("==", v, ir.Constant(v.type, 0.0))
    # moving away from zero means bits+1, towards zero bits-1
    away = b.xor(sign, I1(1)) if up else sign
    stepped = b.select(away, b.add(bits, it(1)), b.sub(bits, it(1)))
    smallest = it(1) if up else it((1 << (w - 1)) | 1)
    res = b.select(is_zero, smallest, stepped)
    out = b.bitcast(res, v.type)
    # NaN stays; +-inf stays when stepping away from zero, else becomes +-MAX
    is_nan = b.fcmp_unordered("uno", v, v)
    is_inf = b.fcmp_ordered("==", call(e, f"llvm.fabs.{fsuffix(v.type)}", v.type, [v]),
                            ir.Constant(v.type, float("inf")))
    keep = b.or_(is_nan, b.and_(is_inf, away))
    return b.select(keep, v, out)


def all_finite(e: SegmentEmitter, values: list[ir.Value]) -> ir.Value:
    b = e.b
    ok: ir.Value = I1(1)
    for v in values:
        mag = call(e, f"llvm.fabs.{fsuffix(v.type)}", v.type, [v])
        ok = b.and_(ok, b.fcmp_ordered("<", mag, ir.Constant(v.type, float("inf"))))
    return ok


def directed(e: SegmentEmitter, rn: ir.Value, err_sign: ir.Value, mode: str | None,
             inputs: list[ir.Value] | None = None, exact_inf: ir.Value | None = None) -> ir.Value:
    """Adjust a round-to-nearest result `rn` whose exact error (true - rn) has the sign of
    `err_sign` (a float) to the directed rounding `mode`.  With `inputs` given, an overflow
    to +-inf from finite inputs is treated as an error towards zero (so .rz gives MAX)."""
    if mode in (None, "rn"):
        return rn
    b = e.b
    if inputs is not None:
        mag = call(e, f"llvm.fabs.{fsuffix(rn.type)}", rn.type, [rn])
        overflow = b.and_(b.fcmp_ordered("==", mag, ir.Constant(rn.type, float("inf"))),
                          all_finite(e, inputs))
        if exact_inf is not None:      # x/0 is an exact infinity, not an overflow
            overflow = b.and_(overflow, b.not_(exact_inf))
        towards_zero = b.fneg(rn)
        if err_sign.type != rn.type:
            towards_zero = b.fpext(towards_zero, err_sign.type)
        err_sign = b.select(overflow, towards_zero, err_sign)
    zero = ir.Constant(err_sign.type, 0.0)
    pos = b.fcmp_ordered(">", err_sign, zero)
    neg = b.fcmp_ordered("<", err_sign, zero)
    if mode == "rp":
        return b.select(pos, nextafter(e, rn, True), rn)
    if mode == "rm":
        return b.select(neg, nextafter(e, rn, False), rn)
    # rz: toward zero
    rn_pos = b.fcmp_ordered(">", rn, ir.Constant(rn.type, 0.0))
    rn_neg = b.fcmp_ordered("<", rn, ir.Constant(rn.type, 0.0))
    down = b.and_(rn_pos, neg)
    up = b.and_(rn_neg, pos)
    r = b.select(down, nextafter(e, rn, False), rn)
    return b.select(up, nextafter(e, r, True), r)


def _mul_error_f64(e: SegmentEmitter, a: ir.Value, c: ir.Value, r: ir.Value) -> ir.Value:
    """Sign of a*c - r for doubles, exact even when the product underflows: the smaller
    factor and r are scaled by 2^600 first (the smaller factor of a tiny product is tiny)."""
    b = e.b
    mag_a = call(e, "llvm.fabs.f64", F64, [a])
    mag_c = call(e, "llvm.fabs.f64", F64, [c])
    a_small = b.fcmp_ordered("<", mag_a, mag_c)
    small, other = b.select(a_small, a, c), b.select(a_small, c, a)
    tiny = b.fcmp_ordered("<", call(e, "llvm.fabs.f64", F64, [r]), ir.Constant(F64, 2.0 ** -900))
    k = b.select(tiny, ir.Constant(F64, 2.0 ** 600), ir.Constant(F64, 1.0))
    return call(e, "llvm.fma.f64", F64, [b.fmul(small, k), other, b.fneg(b.fmul(r, k))])


def _div_error(e: SegmentEmitter, a: ir.Value, c: ir.Value, q: ir.Value) -> ir.Value:
    """A value with the sign of a/c - q (q the rounded quotient): the exact remainder
    a - q*c (in double for floats, so it cannot underflow) times the sign of c."""
    b = e.b
    if a.type == F32:
        a, c, q = b.fpext(a, F64), b.fpext(c, F64), b.fpext(q, F64)
    rem = call(e, f"llvm.fma.{fsuffix(a.type)}", a.type, [b.fneg(q), c, a])
    neg_c = b.fcmp_ordered("<", c, ir.Constant(c.type, 0.0))
    return b.select(neg_c, b.fneg(rem), rem)


def _rm_zero(e: SegmentEmitter, r: ir.Value, terms: list[ir.Value],
             exact_zero: ir.Value | None = None) -> ir.Value:
    """IEEE: an exactly zero sum rounded toward -inf is -0, unless every term is +0."""
    b = e.b
    it = ir.IntType(_width(r.type))
    zero = b.fcmp_ordered("==", r, ir.Constant(r.type, 0.0)) if exact_zero is None else \
        b.and_(exact_zero, b.fcmp_ordered("==", r, ir.Constant(r.type, 0.0)))
    all_pos_zero: ir.Value = I1(1)
    for t in terms:
        all_pos_zero = b.and_(all_pos_zero,
                              b.icmp_unsigned("==", b.bitcast(t, ir.IntType(_width(t.type))),
                                              ir.IntType(_width(t.type))(0)))
    neg_zero = b.bitcast(it(1 << (_width(r.type) - 1)), r.type)
    return b.select(b.and_(zero, b.not_(all_pos_zero)), neg_zero, r)


def wrap_flags(e: SegmentEmitter, op: Operation) -> list[str]:
    """nsw for index arithmetic whose wrapping would be undefined (analysis.no_signed_wrap)."""
    return ["nsw"] if op.results and op.results[0] in e.kc.nsw else []


def src(e: SegmentEmitter, op: Operation, i: int, t: str) -> ir.Value:
    return e.operand(op.operands[i], t)


def fsrc(e: SegmentEmitter, op: Operation, i: int, t: str) -> ir.Value:
    return ftz(e, e.operand(op.operands[i], t), has(op, "ftz"))


def fdone(e: SegmentEmitter, op: Operation, v: ir.Value, t: str) -> None:
    v = ftz(e, v, has(op, "ftz"))
    if has(op, "sat"):
        v = saturate(e, v)
    e.result(op, v, t)


# --- moves ---------------------------------------------------------------------------------

@handles("ptx.mov")
def _mov(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    t = ty(op)
    if len(op.operands) > 1:          # pack {a, b} -> wide
        w = type_size(t) * 8
        part = w // len(op.operands)
        acc: ir.Value = ir.IntType(w)(0)
        for k, v in enumerate(op.operands):
            pv = e.int_resize(e.coerce_bits(e.get(v), ir.IntType(_width(e.llvm_type(v)))), ir.IntType(part), False)
            acc = b.or_(acc, b.shl(b.zext(pv, ir.IntType(w)), ir.IntType(w)(part * k)))
        e.result(op, acc, t)
        return
    if len(op.results) > 1:           # unpack wide -> {a, b}
        w = type_size(t) * 8
        part = w // len(op.results)
        v = e.operand(op.operands[0], t)
        v = e.coerce_bits(v, ir.IntType(w))
        for k in range(len(op.results)):
            piece = b.trunc(b.lshr(v, ir.IntType(w)(part * k)), ir.IntType(part))
            e.result(op, piece, "b%d" % part, k)
        return
    v = e.get(op.operands[0])
    r = op.results[0]
    if r in e.kc.pointers or isinstance(v.type, ir.PointerType) and r.type == "i64":
        e.define(r, v)
        return
    e.result(op, e.operand(op.operands[0], t), t)


# --- integer and float arithmetic -------------------------------------------------------------

def _int_binop(e: SegmentEmitter, op: Operation, fn) -> None:  # type: ignore[no-untyped-def]
    t = ty(op)
    a, c = src(e, op, 0, t), src(e, op, 1, t)
    e.result(op, fn(a, c), t)


@handles("ptx.add", "ptx.sub")
def _add(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    t = ty(op)
    is_add = op.name == "ptx.add"
    if is_float(t):
        a, c = fsrc(e, op, 0, t), fsrc(e, op, 1, t)
        if t == "f16":
            a, c = b.bitcast(a, F16), b.bitcast(c, F16)
        r = b.fadd(a, c) if is_add else b.fsub(a, c)
        mode = rounding(op)
        if mode in ("rz", "rm", "rp"):
            cc = c if is_add else b.fneg(c)
            # TwoSum: exact error of a + cc
            bb = b.fsub(r, a)
            err = b.fadd(b.fsub(a, b.fsub(r, bb)), b.fsub(cc, bb))
            r = directed(e, r, err, mode, [a, c])
            if mode == "rm":
                r = _rm_zero(e, r, [a, cc])
        if t == "f16":
            r = b.bitcast(r, I16)
        fdone(e, op, r, t)
        return
    res = op.results[0]
    # pointer arithmetic: GEP on the pointer operand
    if res in e.kc.pointers:
        base_i = 0 if op.operands[0] in e.kc.pointers else 1
        base = e.get(op.operands[base_i])
        off = e.operand(op.operands[1 - base_i], "s64")
        if not is_add:
            off = b.neg(off)
        e.define(res, b.gep(base, [off]))
        return
    a, c = src(e, op, 0, t), src(e, op, 1, t)
    if has(op, "sat"):
        r = call(e, f"llvm.{'sadd' if is_add else 'ssub'}.sat.i32", I32, [a, c])
    elif has(op, "cc") or op.name in ("ptx.addc", "ptx.subc"):
        r = _carry_op(e, op, a, c, is_add)
        return
    else:
        flags = wrap_flags(e, op)
        r = b.add(a, c, flags=flags) if is_add else b.sub(a, c, flags=flags)
    e.result(op, r, t)


def _carry_op(e: SegmentEmitter, op: Operation, a: ir.Value, c: ir.Value, is_add: bool) -> None:
    """add.cc / addc / sub.cc / subc with the carry flag as an i32 (0/1) SSA value."""
    b = e.b
    t = ty(op)
    w = a.type.width
    wide = ir.IntType(w + 1)
    carry_in = None
    if op.name in ("ptx.addc", "ptx.subc"):
        carry_in = e.operand(op.operands[2], "u32")
    if is_add:
        s = b.add(b.zext(a, wide), b.zext(c, wide))
        if carry_in is not None:
            s = b.add(s, b.zext(b.trunc(carry_in, I1), wide))
        r = b.trunc(s, a.type)
        cout = b.zext(b.trunc(b.lshr(s, wide(w)), I1), I32)
    else:
        s = b.sub(b.zext(a, wide), b.zext(c, wide))
        if carry_in is not None:
            s = b.sub(s, b.zext(b.trunc(carry_in, I1), wide))
        r = b.trunc(s, a.type)
        cout = b.zext(b.trunc(b.lshr(s, wide(w)), I1), I32)   # borrow
    e.result(op, r, t)
    if len(op.results) > 1:
        e.result(op, cout, "u32", 1)


@handles("ptx.addc", "ptx.subc")
def _addc(e: SegmentEmitter, op: Operation) -> None:
    t = ty(op)
    _carry_op(e, op, src(e, op, 0, t), src(e, op, 1, t), op.name == "ptx.addc")


def _mul_parts(e: SegmentEmitter, op: Operation, a: ir.Value, c: ir.Value, t: str) -> tuple[ir.Value, str]:
    b = e.b
    w = a.type.width
    if has(op, "wide"):
        wt = ir.IntType(2 * w)
        ext = b.sext if is_signed(t) else b.zext
        return b.mul(ext(a, wt), ext(c, wt)), ("s" if is_signed(t) else "u") + str(2 * w)
    if has(op, "hi"):
        wt = ir.IntType(2 * w)
        ext = b.sext if is_signed(t) else b.zext
        p = b.mul(ext(a, wt), ext(c, wt))
        return b.trunc(b.lshr(p, wt(w)), a.type), t
    return b.mul(a, c, flags=wrap_flags(e, op)), t


@handles("ptx.mul")
def _mul(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    t = ty(op)
    if is_float(t):
        a, c = fsrc(e, op, 0, t), fsrc(e, op, 1, t)
        if t == "f16":
            a, c = b.bitcast(a, F16), b.bitcast(c, F16)
        r = b.fmul(a, c)
        mode = rounding(op)
        if mode in ("rz", "rm", "rp"):
            if a.type == F32:
                # the product of two floats is exact in double: no underflow of the error
                err = b.fsub(b.fmul(b.fpext(a, F64), b.fpext(c, F64)), b.fpext(r, F64))
            else:
                err = _mul_error_f64(e, a, c, r)
            r = directed(e, r, err, mode, [a, c])
        if t == "f16":
            r = b.bitcast(r, I16)
        fdone(e, op, r, t)
        return
    a, c = src(e, op, 0, t), src(e, op, 1, t)
    r, rt = _mul_parts(e, op, a, c, t)
    e.result(op, r, rt)


@handles("ptx.mul24", "ptx.mad24")
def _mul24(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    t = ty(op)
    a, c = src(e, op, 0, t), src(e, op, 1, t)
    ext = b.sext if is_signed(t) else b.zext
    a = ext(b.trunc(a, ir.IntType(24)), I64)
    c = ext(b.trunc(c, ir.IntType(24)), I64)
    p = b.mul(a, c)
    r = b.trunc(b.lshr(p, I64(16)), I32) if has(op, "hi") else b.trunc(p, I32)
    if op.name == "ptx.mad24":
        r = b.add(r, src(e, op, 2, t))
    e.result(op, r, t)


@handles("ptx.mad", "ptx.madc")
def _mad(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    t = ty(op)
    if is_float(t):
        _fma(e, op)
        return
    a, c = src(e, op, 0, t), src(e, op, 1, t)
    p, rt = _mul_parts(e, op, a, c, t)
    d = src(e, op, 2, rt)
    if has(op, "cc") or op.name == "ptx.madc":
        w = p.type.width
        wide = ir.IntType(w + 1)
        s = b.add(b.zext(p, wide), b.zext(d, wide))
        if op.name == "ptx.madc":
            s = b.add(s, b.zext(b.trunc(e.operand(op.operands[3], "u32"), I1), wide))
        e.result(op, b.trunc(s, p.type), rt)
        if len(op.results) > 1:
            e.result(op, b.zext(b.trunc(b.lshr(s, wide(w)), I1), I32), "u32", 1)
        return
    if has(op, "sat"):
        r = call(e, "llvm.sadd.sat.i32", I32, [p, d])
    else:
        r = b.add(p, d, flags=wrap_flags(e, op))
    e.result(op, r, rt)


@handles("ptx.fma")
def _fma(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    t = ty(op)
    a, c, d = fsrc(e, op, 0, t), fsrc(e, op, 1, t), fsrc(e, op, 2, t)
    if t == "f16":
        a, c, d = (b.bitcast(x, F16) for x in (a, c, d))
    mode = rounding(op)
    sfx = fsuffix(a.type)
    quantized = _quantized_fma(e, op, mode, t, a, c, d) if mode in ("rz", "rm", "rp") else None
    if quantized is not None:
        r = quantized
    elif mode in ("rz", "rm", "rp"):
        if t != "f32":
            e.kc.error(f"fma.{mode}.{t} (directed rounding) is not supported", op)
        # exact: the f32 product is exact in f64; TwoSum with the addend gives s + t == a*c + d
        p = b.fmul(b.fpext(a, F64), b.fpext(c, F64))
        d64 = b.fpext(d, F64)
        s = b.fadd(p, d64)
        bb = b.fsub(s, p)
        t = b.fadd(b.fsub(p, b.fsub(s, bb)), b.fsub(d64, bb))
        rn = b.fptrunc(s, F32)
        err = b.fadd(b.fsub(s, b.fpext(rn, F64)), t)
        r = directed(e, rn, err, mode, [a, c, d])
        if mode == "rm":
            exact_zero = b.fcmp_ordered("==", b.fadd(s, t), ir.Constant(F64, 0.0))
            r = _rm_zero(e, r, [b.fptrunc(p, F32), d], exact_zero=exact_zero)
    elif mode is None and op.name == "ptx.mad" and t == "f32" and not has(op, "rn"):
        r = b.fadd(b.fmul(a, c), d)     # mad.f32 without rounding: not fused on sm_1x; use fma
        r = call(e, f"llvm.fma.{sfx}", a.type, [a, c, d])
    else:
        r = call(e, f"llvm.fma.{sfx}", a.type, [a, c, d])
    if t == "f16":
        r = b.bitcast(r, I16)
    fdone(e, op, r, t)


def _f32_range(v: Value, depth: int = 0) -> tuple[float, float] | None:
    """Bounds of an f32 value where the IR shows them: a constant, `cvt.sat` (in [0, 1],
    NaN -> 0), a product of bounded values."""
    if not isinstance(v, OpResult) or depth > 4:
        return None
    op = v.op
    if op.name == "upir.const" and isinstance(op.attributes.get("value"), (int, float)):
        x = _const_f32(op)
        return (x, x) if x is not None else None
    if op.name == "ptx.mov" and len(op.operands) == 1:
        return _f32_range(op.operands[0], depth + 1)
    if op.name == "ptx.cvt" and "sat" in mods(op) and all(m == "f32" for m in types(op)):
        return (0.0, 1.0)
    if op.name == "ptx.mul" and ty(op) == "f32" and not rounding(op) in ("rz", "rm", "rp"):
        ra, rb = _f32_range(op.operands[0], depth + 1), _f32_range(op.operands[1], depth + 1)
        if ra is None or rb is None:
            return None
        ends = [x * y for x in ra for y in rb]
        return (min(ends), max(ends))
    return None


def _const_f32(op: Operation) -> float | None:
    """An f32 constant's value (constants of float registers are stored as their bits)."""
    import struct
    value = op.attributes.get("value")
    if op.results[0].type == "f32" and isinstance(value, float):
        return value
    if isinstance(value, int) and 0 <= value < 2 ** 32:
        return struct.unpack("<f", struct.pack("<I", value))[0]
    return None


def _quantized_fma(e: SegmentEmitter, op: Operation, mode: str, t: str, a: ir.Value,
                   c: ir.Value, d: ir.Value) -> ir.Value | None:
    """fma.{rm,rp,rz}.f32 whose exact result lies in one binade of at least 2^23, with a
    constant addend on that binade's grid (the rounding trick of NVRTC's expf:
    `fma.rm(sat(x * log2e / 128 + 0.5), 252, 12582913)`): every f32 there is a multiple of
    the binade's ulp, so rounding is a floor/ceil of the product, exact in f64, plus the
    addend.  Eight f64 operations instead of the general emulation's error-free sum and
    fix-ups.  None when the bounds are not known from the IR."""
    import math
    if t != "f32":
        return None
    ra, rc = _f32_range(op.operands[0]), _f32_range(op.operands[1])
    rd = _f32_range(op.operands[2])
    if ra is None or rc is None or rd is None or rd[0] != rd[1]:
        return None
    addend = rd[0]
    ends = [x * y for x in ra for y in rc]
    lo, hi = addend + min(ends), addend + max(ends)
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo <= 0:
        return None
    exp = math.floor(math.log2(lo))
    if exp < 23 or hi >= 2.0 ** (exp + 1) or exp > 126:
        return None
    ulp = 2.0 ** (exp - 23)
    if addend % ulp:
        return None
    b = e.b
    p = b.fmul(b.fpext(a, F64), b.fpext(c, F64))                   # exact
    q = b.fmul(p, ir.Constant(F64, 1.0 / ulp))                      # exact (a power of two)
    # all values are positive: rz is rm
    k = call(e, "llvm.ceil.f64" if mode == "rp" else "llvm.floor.f64", F64, [q])
    r = b.fadd(b.fmul(k, ir.Constant(F64, ulp)), b.fpext(d, F64))   # on the binade's grid
    return b.fptrunc(r, F32)


@handles("ptx.div")
def _div(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    t = ty(op)
    if is_float(t):
        a, c = fsrc(e, op, 0, t), fsrc(e, op, 1, t)
        r = b.fdiv(a, c)
        mode = rounding(op)
        if mode in ("rz", "rm", "rp"):
            r = directed(e, r, _div_error(e, a, c, r), mode, [a, c],
                         exact_inf=b.fcmp_ordered("==", c, ir.Constant(c.type, 0.0)))
        fdone(e, op, r, t)
        return
    _int_div(e, op, rem=False)


def _int_div(e: SegmentEmitter, op: Operation, rem: bool) -> None:
    b = e.b
    t = ty(op)
    a, c = src(e, op, 0, t), src(e, op, 1, t)
    zero = b.icmp_unsigned("==", c, c.type(0))
    safe_c = b.select(zero, c.type(1), c)
    if is_signed(t):
        # INT_MIN / -1 faults on x86: PTX wraps
        minv = c.type(1 << (c.type.width - 1))
        ovf = b.and_(b.icmp_signed("==", a, minv), b.icmp_signed("==", c, c.type(-1)))
        safe_c = b.select(ovf, c.type(1), safe_c)
        r = b.srem(a, safe_c) if rem else b.sdiv(a, safe_c)
        if rem:
            r = b.select(ovf, c.type(0), r)
    else:
        r = b.urem(a, safe_c) if rem else b.udiv(a, safe_c)
    r = b.select(zero, a if rem else c.type(-1), r)
    e.result(op, r, t)


@handles("ptx.rem")
def _rem(e: SegmentEmitter, op: Operation) -> None:
    _int_div(e, op, rem=True)


@handles("ptx.neg")
def _neg(e: SegmentEmitter, op: Operation) -> None:
    t = ty(op)
    if is_float(t):
        a = fsrc(e, op, 0, t)
        if t == "f16":
            e.result(op, e.b.xor(a, I16(0x8000)), t)
            return
        fdone(e, op, e.b.fneg(a), t)
    else:
        e.result(op, e.b.neg(src(e, op, 0, t)), t)


@handles("ptx.abs")
def _abs(e: SegmentEmitter, op: Operation) -> None:
    t = ty(op)
    if is_float(t):
        a = fsrc(e, op, 0, t)
        if t == "f16":
            e.result(op, e.b.and_(a, I16(0x7FFF)), t)
            return
        fdone(e, op, call(e, f"llvm.fabs.{fsuffix(a.type)}", a.type, [a]), t)
    else:
        a = src(e, op, 0, t)
        e.result(op, call(e, f"llvm.abs.i{a.type.width}", a.type, [a, I1(0)]), t)


@handles("ptx.min", "ptx.max")
def _minmax(e: SegmentEmitter, op: Operation) -> None:
    t = ty(op)
    is_min = op.name == "ptx.min"
    if is_float(t):
        a, c = fsrc(e, op, 0, t), fsrc(e, op, 1, t)
        if t == "f16":
            e.kc.error("f16 min/max is not supported", op)
        sfx = fsuffix(a.type)
        # PTX orders -0 below +0; .NaN propagates NaN, otherwise a NaN operand is ignored
        if has(op, "NaN"):
            name = f"llvm.{'minimum' if is_min else 'maximum'}.{sfx}"
        else:
            name = f"llvm.{'minimumnum' if is_min else 'maximumnum'}.{sfx}"
        fdone(e, op, call(e, name, a.type, [a, c]), t)
        return
    a, c = src(e, op, 0, t), src(e, op, 1, t)
    kind = ("s" if is_signed(t) else "u") + ("min" if is_min else "max")
    r = call(e, f"llvm.{kind}.i{a.type.width}", a.type, [a, c])
    idle = e.idle_clamp(op)
    if idle is not None:
        # a clamp that selects the thread-dependent side for every thread of the block:
        # LLVM unswitches the thread loop on this uniform flag, and in the copy where it
        # holds, the clamped index is affine again (a contiguous load, not a gather)
        side, flag = idle
        r = e.b.select(flag, a if side == 0 else c, r)
    e.result(op, r, t)


@handles("ptx.copysign")
def _copysign(e: SegmentEmitter, op: Operation) -> None:
    t = ty(op)
    a, c = src(e, op, 0, t), src(e, op, 1, t)
    # PTX copysign d, a, b: magnitude of b, sign of a
    e.result(op, call(e, f"llvm.copysign.{fsuffix(a.type)}", a.type, [c, a]), t)


# --- bitwise ------------------------------------------------------------------------------------

@handles("ptx.and", "ptx.or", "ptx.xor")
def _bitwise(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    if op.name in ("ptx.and", "ptx.xor") and e.lane_group is not None:
        v = e.lane_bitwise(op)
        if v is not None:
            e.result(op, v, ty(op))
            return
    fn = {"ptx.and": b.and_, "ptx.or": b.or_, "ptx.xor": b.xor}[op.name]
    _int_binop(e, op, fn)


@handles("ptx.not")
def _not(e: SegmentEmitter, op: Operation) -> None:
    t = ty(op)
    e.result(op, e.b.not_(src(e, op, 0, t)), t)


@handles("ptx.cnot")
def _cnot(e: SegmentEmitter, op: Operation) -> None:
    t = ty(op)
    a = src(e, op, 0, t)
    e.result(op, e.b.zext(e.b.icmp_unsigned("==", a, a.type(0)), a.type), t)


@handles("ptx.shl", "ptx.shr")
def _shift(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    t = ty(op)
    a = src(e, op, 0, t)
    n = e.operand(op.operands[1], "u32")
    w = a.type.width
    n_w = e.int_resize(n, a.type, False) if w >= 32 else b.trunc(call(e, "llvm.umin.i32", I32, [n, I32(w)]), a.type)
    big = b.icmp_unsigned(">=", n, I32(w))
    if op.name == "ptx.shl":
        r = b.select(big, a.type(0), b.shl(a, b.select(big, a.type(0), n_w), flags=wrap_flags(e, op)))
    elif is_signed(t):
        r = b.ashr(a, b.select(big, a.type(w - 1), n_w))
    else:
        r = b.select(big, a.type(0), b.lshr(a, b.select(big, a.type(0), n_w)))
    e.result(op, r, t)


@handles("ptx.shf")
def _shf(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    a, c = src(e, op, 0, "b32"), src(e, op, 1, "b32")
    n = src(e, op, 2, "u32")
    if has(op, "clamp"):
        n = call(e, "llvm.umin.i32", I32, [n, I32(32)])
        is32 = b.icmp_unsigned("==", n, I32(32))
    else:
        n = b.and_(n, I32(31))
        is32 = I1(0)
    if has(op, "l"):
        r = call(e, "llvm.fshl.i32", I32, [c, a, n])
        r = b.select(is32, a, r)
    else:
        r = call(e, "llvm.fshr.i32", I32, [c, a, n])
        r = b.select(is32, c, r)
    e.result(op, r, "b32")


@handles("ptx.popc", "ptx.clz")
def _bitcount(e: SegmentEmitter, op: Operation) -> None:
    t = ty(op)
    a = src(e, op, 0, t)
    w = a.type.width
    if op.name == "ptx.popc":
        r = call(e, f"llvm.ctpop.i{w}", a.type, [a])
    else:
        r = call(e, f"llvm.ctlz.i{w}", a.type, [a, I1(0)])
    e.result(op, e.int_resize(r, I32, False), "u32")


@handles("ptx.brev")
def _brev(e: SegmentEmitter, op: Operation) -> None:
    t = ty(op)
    a = src(e, op, 0, t)
    e.result(op, call(e, f"llvm.bitreverse.i{a.type.width}", a.type, [a]), t)


@handles("ptx.bfind")
def _bfind(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    t = ty(op)
    a = src(e, op, 0, t)
    w = a.type.width
    x = a
    if is_signed(t):
        x = b.select(b.icmp_signed("<", a, a.type(0)), b.not_(a), a)
    lz = e.int_resize(call(e, f"llvm.ctlz.i{w}", a.type, [x, I1(0)]), I32, False)
    none = b.icmp_unsigned("==", x, x.type(0))
    pos = b.sub(I32(w - 1), lz)
    if has(op, "shiftamt"):
        pos = lz
    e.result(op, b.select(none, I32(0xFFFFFFFF), pos), "u32")


@handles("ptx.bfe")
def _bfe(e: SegmentEmitter, op: Operation) -> None:
    """PTX bfe: bits pos..pos+len-1 of a; for .s types every bit above the field (or past
    the top of a) is the sign bit a[min(pos+len-1, msb)]."""
    b = e.b
    t = ty(op)
    a = src(e, op, 0, t)
    w = a.type.width
    it = a.type
    pos = b.and_(src(e, op, 1, "u32"), I32(0xFF))
    ln = b.and_(src(e, op, 2, "u32"), I32(0xFF))
    # valid field bits: min(len, max(0, w - pos))
    room = b.select(b.icmp_unsigned(">=", pos, I32(w)), I32(0), b.sub(I32(w), pos))
    eff = call(e, "llvm.umin.i32", I32, [ln, room])
    shifted = b.lshr(a, e.int_resize(b.select(b.icmp_unsigned(">=", pos, I32(w)), I32(0), pos), it, False))
    full = b.icmp_unsigned(">=", eff, I32(w))
    mask = b.select(full, it(-1), b.sub(b.shl(it(1), e.int_resize(b.select(full, I32(0), eff), it, False)), it(1)))
    r = b.and_(shifted, mask)
    if is_signed(t):
        top = call(e, "llvm.umin.i32", I32, [b.sub(b.add(pos, ln), I32(1)), I32(w - 1)])
        sbit = b.trunc(b.lshr(a, e.int_resize(top, it, False)), I1)
        sbit = b.and_(sbit, b.icmp_unsigned("!=", ln, I32(0)))
        r = b.select(sbit, b.or_(r, b.not_(mask)), r)
    e.result(op, r, t)


@handles("ptx.bfi")
def _bfi(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    t = ty(op)
    a, c = src(e, op, 0, t), src(e, op, 1, t)
    w = a.type.width
    pos = b.and_(src(e, op, 2, "u32"), I32(0xFF))
    ln = b.and_(src(e, op, 3, "u32"), I32(0xFF))
    posw = e.int_resize(pos, a.type, False)
    full = b.icmp_unsigned(">=", ln, I32(w))
    lnw = e.int_resize(ln, a.type, False)
    mask = b.select(full, a.type(-1), b.sub(b.shl(a.type(1), b.select(full, a.type(0), lnw)), a.type(1)))
    big = b.icmp_unsigned(">=", pos, I32(w))
    smask = b.shl(mask, b.select(big, a.type(0), posw))
    ins = b.shl(a, b.select(big, a.type(0), posw))
    r = b.or_(b.and_(c, b.not_(smask)), b.and_(ins, smask))
    e.result(op, b.select(b.or_(big, b.icmp_unsigned("==", ln, I32(0))), c, r), t)


@handles("ptx.bmsk")
def _bmsk(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    a, c = src(e, op, 0, "u32"), src(e, op, 1, "u32")
    if has(op, "wrap"):
        a, c = b.and_(a, I32(31)), b.and_(c, I32(31))
    else:
        a = call(e, "llvm.umin.i32", I32, [a, I32(32)])
        c = call(e, "llvm.umin.i32", I32, [c, I32(32)])
    end = call(e, "llvm.umin.i32", I32, [b.add(a, c), I32(32)])
    hi = b.select(b.icmp_unsigned(">=", end, I32(32)), I32(-1), b.sub(b.shl(I32(1), end), I32(1)))
    lo = b.select(b.icmp_unsigned(">=", a, I32(32)), I32(-1), b.sub(b.shl(I32(1), a), I32(1)))
    e.result(op, b.and_(hi, b.not_(lo)), "b32")


@handles("ptx.prmt")
def _prmt(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    a, c, sel = src(e, op, 0, "b32"), src(e, op, 1, "b32"), src(e, op, 2, "b32")
    mode = next((m for m in mods(op) if m in ("f4e", "b4e", "rc8", "ecl", "ecr", "rc16")), None)
    src64 = b.or_(b.zext(a, I64), b.shl(b.zext(c, I64), I64(32)))
    out = I32(0)
    for k in range(4):
        if mode is None:
            nib = b.and_(b.lshr(sel, I32(4 * k)), I32(0xF))
            idx = b.and_(nib, I32(7))
            byte = b.trunc(b.lshr(src64, b.zext(b.mul(idx, I32(8)), I64)), I8)
            sign = b.icmp_unsigned("!=", b.and_(nib, I32(8)), I32(0))
            msb = b.ashr(byte, I8(7))
            byte = b.select(sign, msb, byte)
        else:
            s = b.and_(sel, I32(3))
            if mode == "f4e":
                idx = b.and_(b.add(s, I32(k)), I32(7))
            elif mode == "b4e":
                idx = b.and_(b.sub(s, I32(k)), I32(7))
            elif mode == "rc8":
                idx = s
            elif mode == "ecl":
                idx = call(e, "llvm.umax.i32", I32, [s, I32(k)])
            elif mode == "ecr":
                idx = call(e, "llvm.umin.i32", I32, [s, I32(k)])
            else:  # rc16
                idx = b.add(b.mul(b.and_(s, I32(1)), I32(2)), I32(k & 1))
            byte = b.trunc(b.lshr(src64, b.zext(b.mul(idx, I32(8)), I64)), I8)
        out = b.or_(out, b.shl(b.zext(byte, I32), I32(8 * k)))
    e.result(op, out, "b32")


@handles("ptx.lop3")
def _lop3(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    a, c, d = src(e, op, 0, "b32"), src(e, op, 1, "b32"), src(e, op, 2, "b32")
    lut_v = op.operands[3]
    if not (hasattr(lut_v, "op") and lut_v.op.name == "upir.const"):  # type: ignore[union-attr]
        e.kc.error("lop3 with a non-constant lookup table", op)
    lut = int(lut_v.op.attributes["value"]) & 0xFF  # type: ignore[union-attr]
    out = I32(0)
    for i in range(8):
        if lut >> i & 1:
            term = b.and_(b.and_(a if i & 4 else b.not_(a), c if i & 2 else b.not_(c)),
                          d if i & 1 else b.not_(d))
            out = b.or_(out, term)
    e.result(op, out, "b32")


@handles("ptx.dp4a", "ptx.dp2a")
def _dp4a(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    ts = types(op)
    a, c = src(e, op, 0, "b32"), src(e, op, 1, "b32")
    acc = src(e, op, 2, "b32")
    if op.name == "ptx.dp4a":
        for k in range(4):
            x = b.trunc(b.lshr(a, I32(8 * k)), I8)
            y = b.trunc(b.lshr(c, I32(8 * k)), I8)
            xe = b.sext(x, I32) if ts[0].startswith("s") else b.zext(x, I32)
            ye = b.sext(y, I32) if ts[-1].startswith("s") else b.zext(y, I32)
            acc = b.add(acc, b.mul(xe, ye))
    else:
        half = 2 if has(op, "hi") else 0
        for k in range(2):
            x = b.trunc(b.lshr(a, I32(16 * k)), I16)
            y = b.trunc(b.lshr(c, I32(8 * (k + half))), I8)
            xe = b.sext(x, I32) if ts[0].startswith("s") else b.zext(x, I32)
            ye = b.sext(y, I32) if ts[-1].startswith("s") else b.zext(y, I32)
            acc = b.add(acc, b.mul(xe, ye))
    e.result(op, acc, "s32")


@handles("ptx.sad")
def _sad(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    t = ty(op)
    a, c, d = src(e, op, 0, t), src(e, op, 1, t), src(e, op, 2, t)
    lt = b.icmp_signed("<", a, c) if is_signed(t) else b.icmp_unsigned("<", a, c)
    e.result(op, b.add(d, b.select(lt, b.sub(c, a), b.sub(a, c))), t)


# --- comparisons and selects ---------------------------------------------------------------------

_ICMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
         "lo": "<", "ls": "<=", "hi": ">", "hs": ">="}
_FCMP_ORD = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_FCMP_UNORD = {"equ": "==", "neu": "!=", "ltu": "<", "leu": "<=", "gtu": ">", "geu": ">="}


def compare(e: SegmentEmitter, op: Operation, a: ir.Value, c: ir.Value, t: str) -> ir.Value:
    b = e.b
    cmp = next(m for m in mods(op) if m in _ICMP or m in _FCMP_UNORD or m in ("num", "nan"))
    if is_float(t):
        if t == "f16":
            a, c = b.bitcast(a, F16), b.bitcast(c, F16)
        if cmp == "num":
            return b.fcmp_ordered("ord", a, c)
        if cmp == "nan":
            return b.fcmp_unordered("uno", a, c)
        if cmp in _FCMP_ORD:
            return b.fcmp_ordered(_FCMP_ORD[cmp], a, c)
        return b.fcmp_unordered(_FCMP_UNORD[cmp], a, c)
    if cmp in ("lo", "ls", "hi", "hs") or t.startswith("u") or t.startswith("b"):
        if cmp in ("lt", "le", "gt", "ge") and t.startswith("b"):
            return b.icmp_unsigned(_ICMP[cmp], a, c)
        return b.icmp_unsigned(_ICMP[cmp], a, c)
    return b.icmp_signed(_ICMP[cmp], a, c)


@handles("ptx.setp", "ptx.set")
def _setp(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    ts = types(op)
    t = ts[-1]
    a, c = fsrc(e, op, 0, t), fsrc(e, op, 1, t)
    p = compare(e, op, a, c, t)
    q = b.not_(p)
    boolop = next((m for m in mods(op) if m in ("and", "or", "xor")), None)
    if boolop is not None:
        x = e.operand(op.operands[2], "pred")
        f = {"and": b.and_, "or": b.or_, "xor": b.xor}[boolop]
        p, q = f(p, x), f(q, x)
    if op.name == "ptx.set":
        dt = ts[0]
        if dt == "f32":
            v = b.select(p, ir.Constant(F32, 1.0), ir.Constant(F32, 0.0))
        else:
            v = b.sext(p, ptx_llvm_type(dt))
        e.result(op, v, dt)
        return
    e.result(op, p, "pred")
    if len(op.results) > 1:
        e.result(op, q, "pred", 1)


@handles("ptx.selp")
def _selp(e: SegmentEmitter, op: Operation) -> None:
    t = ty(op)
    c = e.operand(op.operands[2], "pred")
    res = op.results[0]
    if res in e.kc.pointers:
        a, d = e.get(op.operands[0]), e.get(op.operands[1])
        e.define(res, e.b.select(c, e.coerce_bits(a, PTR), e.coerce_bits(d, PTR)))
        return
    e.result(op, e.b.select(c, src(e, op, 0, t), src(e, op, 1, t)), t)


@handles("ptx.slct")
def _slct(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    ts = types(op)
    dt, ct = ts[0], ts[-1]
    a, c = src(e, op, 0, dt), src(e, op, 1, dt)
    x = fsrc(e, op, 2, ct)
    cond = b.fcmp_ordered(">=", x, ir.Constant(x.type, 0.0)) if is_float(ct) else b.icmp_signed(">=", x, x.type(0))
    e.result(op, b.select(cond, a, c), dt)


@handles("ptx.testp")
def _testp(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    t = ty(op)
    a = src(e, op, 0, t)
    sfx = fsuffix(a.type)
    mag = call(e, f"llvm.fabs.{sfx}", a.type, [a])
    inf = ir.Constant(a.type, float("inf"))
    tiny = ir.Constant(a.type, 1.1754943508222875e-38 if t == "f32" else 2.2250738585072014e-308)
    kind = next(m for m in mods(op) if m in ("finite", "infinite", "number", "notanumber", "normal", "subnormal"))
    if kind == "finite":
        r = b.fcmp_ordered("<", mag, inf)
    elif kind == "infinite":
        r = b.fcmp_ordered("==", mag, inf)
    elif kind == "number":
        r = b.fcmp_ordered("ord", a, a)
    elif kind == "notanumber":
        r = b.fcmp_unordered("uno", a, a)
    elif kind == "normal":
        r = b.and_(b.fcmp_ordered(">=", mag, tiny), b.fcmp_ordered("<", mag, inf))
    else:
        r = b.and_(b.fcmp_ordered("<", mag, tiny), b.fcmp_ordered(">", mag, ir.Constant(a.type, 0.0)))
    e.result(op, r, "pred")


# --- math functions ---------------------------------------------------------------------------

@handles("ptx.sqrt", "ptx.rsqrt", "ptx.rcp", "ptx.sin", "ptx.cos", "ptx.ex2", "ptx.lg2", "ptx.tanh")
def _math(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    t = ty(op)
    a = fsrc(e, op, 0, t)
    if t == "f16":
        e.kc.error(f"{op.name[4:]}.f16 is not supported", op)
    sfx = fsuffix(a.type)
    one = ir.Constant(a.type, 1.0)
    name = op.name[4:]
    mode = rounding(op)
    if name == "sqrt":
        r = call(e, f"llvm.sqrt.{sfx}", a.type, [a])
        if mode in ("rz", "rm", "rp"):
            if a.type == F32:
                r64 = b.fpext(r, F64)
                err = call(e, "llvm.fma.f64", F64, [b.fneg(r64), r64, b.fpext(a, F64)])
            else:
                # scaled so that the error of a tiny square root does not underflow
                tiny = b.fcmp_ordered("<", a, ir.Constant(F64, 2.0 ** -900))
                ra = b.select(tiny, ir.Constant(F64, 2.0 ** 300), ir.Constant(F64, 1.0))
                aa = b.select(tiny, ir.Constant(F64, 2.0 ** 600), ir.Constant(F64, 1.0))
                rs = b.fmul(r, ra)
                err = call(e, "llvm.fma.f64", F64, [b.fneg(rs), rs, b.fmul(a, aa)])
            r = directed(e, r, err, mode)
    elif name == "rsqrt" and a.type == F32 and jit.has_avx512():
        r = approx_rsqrt_f32(e, a)
    elif name == "rsqrt":
        r = b.fdiv(one, call(e, f"llvm.sqrt.{sfx}", a.type, [a]))
    elif name == "rcp":
        r = b.fdiv(one, a)
        if mode in ("rz", "rm", "rp"):
            r = directed(e, r, _div_error(e, one, a, r), mode, [a],
                         exact_inf=b.fcmp_ordered("==", a, ir.Constant(a.type, 0.0)))
    elif name in ("sin", "cos") and a.type == F32:
        r = approx_math.sin_cos_f32(b, e.mod.intrinsic, a, cos=name == "cos")
    elif name == "ex2" and a.type == F32:
        r = approx_math.exp2_f32(b, e.mod.intrinsic, a)
    elif name == "lg2" and a.type == F32:
        r = approx_math.log2_f32(b, e.mod.intrinsic, a, subnormals=not has(op, "ftz"))
    elif name == "sin":
        r = call(e, f"llvm.sin.{sfx}", a.type, [a])
    elif name == "cos":
        r = call(e, f"llvm.cos.{sfx}", a.type, [a])
    elif name == "ex2":
        r = call(e, f"llvm.exp2.{sfx}", a.type, [a])
    elif name == "lg2":
        r = call(e, f"llvm.log2.{sfx}", a.type, [a])
    else:
        r = call(e, "tanhf" if t == "f32" else "tanh", a.type, [a])
    fdone(e, op, r, t)


def approx_rsqrt_f32(e: SegmentEmitter, a: ir.Value) -> ir.Value:
    """rsqrt.approx.f32 within CUDA's bound for rsqrtf (2 ulp from the correctly rounded
    result; this is within 1 ulp, checked for every positive f32): the CPU's reciprocal
    square root estimate refined by one third-order step, a handful of multiplies instead
    of a square root and a division (n-body 49.3 -> 35.8 ms).

    The estimate comes from `1 / sqrt(x)` with LLVM's approximate-function flags in a
    module that asks for estimates without refinement (ModuleCodegen.rsqrt_estimates):
    vrsqrt14ps (relative error < 2^-14) in 16-wide loops, rsqrtps/rsqrtss (< 1.5 * 2^-12)
    in narrower ones, which one Newton-Raphson step would leave above 2 ulp.  The step has
    exact flags: r = 1 - (x*y)*y by an fma, y * (1 + r/2 + 3r^2/8) (the series of
    (1 - r)^(-1/2), error about 2.5 e^3).  Subnormal inputs, which the 12-bit estimate
    flushes, are scaled by 2^24 first and the result by 2^12.  Where r is NaN the
    estimate stands: a zero (-> infinity of its sign), +inf (-> +0), a negative input or
    NaN (-> NaN).  Without AVX-512 (no vrsqrt14ps for the main loops) the exact quotient is
    used; so does the interpreter (tests allow the 2 ulp)."""
    b = e.b
    e.mod.rsqrt_estimates = True
    fast = ("afn", "arcp", "contract")
    sqrt = e.mod.intrinsic("llvm.sqrt.f32", F32, [F32])     # (call() sets no flags)

    def c(v: float) -> ir.Constant:
        return ir.Constant(F32, v)

    def fma(x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
        return call(e, "llvm.fma.f32", F32, [x, y, z])

    tiny = b.fcmp_ordered("<", a, c(2.0 ** -126))        # also zeros and negative inputs
    x = b.select(tiny, b.fmul(a, c(2.0 ** 24)), a)
    y = b.fdiv(c(1.0), b.call(sqrt, [x], fastmath=fast), flags=fast)
    r = fma(b.fneg(b.fmul(x, y)), y, c(1.0))
    refined = fma(y, b.fmul(r, fma(r, c(0.375), c(0.5))), y)
    y = b.select(b.fcmp_unordered("uno", r, r), y, refined)
    return b.select(tiny, b.fmul(y, c(2.0 ** 12)), y)


# --- conversions ------------------------------------------------------------------------------

_ROUND_INT = {"rni": "llvm.rint", "rzi": "llvm.trunc", "rmi": "llvm.floor", "rpi": "llvm.ceil"}


@handles("ptx.cvt")
def _cvt(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    ts = types(op)
    dt, st = ts[0], ts[-1]
    m = mods(op)
    irnd = next((x for x in m if x in _ROUND_INT), None)
    frnd = rounding(op)
    sat = "sat" in m
    ftz_on = "ftz" in m
    a = e.operand(op.operands[0], st)
    if st in ("f16",):
        a = b.fpext(b.bitcast(a, F16), F32)
        st = "f32"
    to_half = dt == "f16"
    if to_half:
        dt = "f64" if st == "f64" else "f32"   # f64 -> f16 in one rounding
    if is_float(st):
        a = ftz(e, a, ftz_on)
    if is_float(st) and is_float(dt):
        sw, dw = type_size(st), type_size(dt)
        if sw == dw:
            r = call(e, f"{_ROUND_INT[irnd]}.{fsuffix(a.type)}", a.type, [a]) if irnd else a
        elif sw < dw:
            r = b.fpext(a, ptx_llvm_type(dt))
        else:
            r = b.fptrunc(a, ptx_llvm_type(dt))
            if frnd in ("rz", "rm", "rp"):
                err = b.fsub(a, b.fpext(r, a.type))
                r = directed(e, r, err, frnd)
        if sat:
            r = saturate(e, r)
        r = ftz(e, r, ftz_on)
    elif is_float(st):
        # float -> int: round as asked (default rzi per PTX requirements), saturate, NaN -> 0
        rnd = irnd or "rzi"
        rounded = call(e, f"{_ROUND_INT[rnd]}.{fsuffix(a.type)}", a.type, [a])
        it = ptx_llvm_type(dt)
        kind = "fptosi" if is_signed(dt) else "fptoui"
        r = call(e, f"llvm.{kind}.sat.i{it.width}.{fsuffix(a.type)}", it, [rounded])
    elif is_float(dt):
        ft = ptx_llvm_type(dt)
        if frnd in ("rz", "rm", "rp") and type_size(st) <= 4 and dt == "f32":
            wide = b.sitofp(a, F64) if is_signed(st) else b.uitofp(a, F64)
            rn = b.fptrunc(wide, F32)
            r = directed(e, rn, b.fsub(wide, b.fpext(rn, F64)), frnd)
        elif frnd in ("rz", "rm", "rp") and not (dt == "f64" and type_size(st) <= 4):
            e.kc.error(f"cvt.{frnd}.{dt}.{st} (directed rounding from 64-bit integers) is not supported", op)
            return
        else:
            r = b.sitofp(a, ft) if is_signed(st) else b.uitofp(a, ft)
        if sat:
            r = saturate(e, r)
    else:
        # int -> int
        dlt = ptx_llvm_type(dt)
        if sat:
            sw_bits = a.type.width
            dw_bits = dlt.width
            s_signed, d_signed = is_signed(st), is_signed(dt)
            big = ir.IntType(max(sw_bits, dw_bits) + 1)
            x = b.sext(a, big) if s_signed else b.zext(a, big)
            lo = -(1 << (dw_bits - 1)) if d_signed else 0
            hi = (1 << (dw_bits - 1)) - 1 if d_signed else (1 << dw_bits) - 1
            x = call(e, f"llvm.smax.i{big.width}", big, [x, big(lo)])
            x = call(e, f"llvm.smin.i{big.width}", big, [x, big(hi)])
            r = b.trunc(x, dlt)
        else:
            r = e.int_resize(a, dlt, is_signed(st))
    if to_half:
        if not isinstance(r.type, (ir.FloatType, ir.DoubleType)):
            r = b.sitofp(r, F32)
        h = b.fptrunc(r, F16)
        if frnd in ("rz", "rm", "rp"):
            h = directed(e, h, b.fsub(r, b.fpext(h, r.type)), frnd)
        r = b.bitcast(h, I16)
        dt = "f16"
    e.result(op, r, dt)


@handles("ptx.cvta")
def _cvta(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    m = mods(op)
    space = next((s for s in ("shared", "local", "global", "const", "param") if s in m), "global")
    res = op.results[0]
    v = e.get(op.operands[0])
    if "to" in m:
        # generic -> space
        if space in ("shared", "local"):
            root = e.shared if space == "shared" else e.local_base
            pv = v if isinstance(v.type, ir.PointerType) else b.inttoptr(e.int_resize(v, I64, False), PTR)
            off = b.sub(b.ptrtoint(pv, I64), b.ptrtoint(root, I64))
            e.result(op, off, "u64")
        else:
            e.define(res, v)
        return
    # space -> generic
    if space in ("shared", "local"):
        root = e.shared if space == "shared" else e.local_base
        iv = b.ptrtoint(v, I64) if isinstance(v.type, ir.PointerType) else e.int_resize(v, I64, False)
        e.define(res, b.gep(root, [iv]))
    else:
        e.define(res, v)


@handles("ptx.isspacep")
def _isspacep(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    space = next((s for s in ("shared", "local", "global", "const", "param") if s in mods(op)), "global")
    v = e.get(op.operands[0])
    iv = b.ptrtoint(v, I64) if isinstance(v.type, ir.PointerType) else e.int_resize(v, I64, False)
    if space in ("shared", "local"):
        root = b.ptrtoint(e.shared if space == "shared" else e.local_base, I64)
        size = I64(e.kc.shared.dynamic_offset + 48 * 1024) if space == "shared" else I64(e.kc.local_size)
        rel = b.sub(iv, root)
        r = b.icmp_unsigned("<", rel, size)
    else:
        r = I1(1)
    e.result(op, r, "pred")


# --- memory -------------------------------------------------------------------------------------

_ORDERED_LOADS = ("acquire", "relaxed", "volatile")


@handles("ptx.ld", "ptx.ldu")
def _ld(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    t = ty(op)
    space = memory_space(op)
    if space == "shared" and len(op.results) == 1 and not (set(mods(op)) & set(_ORDERED_LOADS)):
        split = e.clamped_shared_load(op, ptx_llvm_type(t), type_size(t))
        if split is None:
            split = e.selected_shared_load(op, ptx_llvm_type(t), type_size(t))
        if split is not None:
            e.result(op, split, t)
            return
    p = e.address(op, space)
    lt = ptx_llvm_type(t)
    size = type_size(t)
    m = mods(op)
    for k in range(len(op.results)):
        pk = b.gep(p, [I64(k * size)]) if k else p
        v = b.load(b.bitcast(pk, lt.as_pointer()))
        v.align = size if space in ("shared", "local") else min(size, 4) if size > 1 else 1
        if space == "shared":
            e.tag_shared_access(op, v)
        if "volatile" in m:
            v.volatile = True  # type: ignore[attr-defined]
        elif "acquire" in m or "relaxed" in m:
            v.volatile = True  # type: ignore[attr-defined]
        e.result(op, v, t, k)
    if "acquire" in m:
        b.fence("acquire")


@handles("ptx.st")
def _st(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    t = ty(op)
    space = memory_space(op)
    m = mods(op)
    if "release" in m:
        b.fence("release")
    p = e.address(op, space)
    lt = ptx_llvm_type(t)
    size = type_size(t)
    for k, v in enumerate(op.operands[1:]):
        pk = b.gep(p, [I64(k * size)]) if k else p
        val = e.operand(v, t)
        s = b.store(val, b.bitcast(pk, lt.as_pointer()))
        s.align = size if space in ("shared", "local") else min(size, 4) if size > 1 else 1
        if space == "shared":
            e.tag_shared_access(op, s)
        if "volatile" in m or "relaxed" in m or "release" in m:
            s.volatile = True  # type: ignore[attr-defined]


_RMW = {"add": "add", "and": "and", "or": "or", "xor": "xor", "exch": "xchg",
        "inc": "uinc_wrap", "dec": "udec_wrap"}


@handles("ptx.atom", "ptx.red")
def _atom(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    t = ty(op)
    space = memory_space(op)
    m = mods(op)
    p = e.address(op, space)
    lt = ptx_llvm_type(t)
    ptr = b.bitcast(p, lt.as_pointer())
    val = e.operand(op.operands[1], t)
    opname = next(x for x in m if x in ("add", "min", "max", "inc", "dec", "and", "or", "xor", "exch", "cas"))
    if opname == "cas":
        new = e.operand(op.operands[2], t)
        if is_float(t):
            e.kc.error("atom.cas on floating-point types is not supported", op)
        res = b.cmpxchg(ptr, val, new, "monotonic", "monotonic")
        old = b.extract_value(res, 0)
    else:
        if opname in ("min", "max"):
            if is_float(t):
                kind = "fmin" if opname == "min" else "fmax"
            else:
                kind = ("" if is_signed(t) else "u") + opname
        elif opname == "add" and is_float(t):
            kind = "fadd"
        else:
            kind = _RMW[opname]
        if space == "shared":
            # a block runs on one worker, one CUDA thread at a time: no CPU atomic needed
            old = b.load(ptr)
            old.align = type_size(t)
            new = _rmw_value(e, kind, old, val)
            st = b.store(new, ptr)
            st.align = type_size(t)
            e.serial_accesses.update((old, st))
        else:
            old = b.atomic_rmw(kind, ptr, val, "monotonic")
    if op.results and op.name == "ptx.atom":
        e.result(op, old, t)


def _rmw_value(e: SegmentEmitter, kind: str, old: ir.Value, val: ir.Value) -> ir.Value:
    b = e.b
    if kind == "add":
        return b.add(old, val)
    if kind == "fadd":
        return b.fadd(old, val)
    if kind in ("and", "or", "xor"):
        return {"and": b.and_, "or": b.or_, "xor": b.xor}[kind](old, val)
    if kind == "xchg":
        return val
    if kind in ("min", "max", "umin", "umax"):
        return call(e, f"llvm.{'s' + kind if kind in ('min', 'max') else kind}.i{old.type.width}", old.type, [old, val])
    if kind in ("fmin", "fmax"):
        return call(e, f"llvm.{'minnum' if kind == 'fmin' else 'maxnum'}.{fsuffix(old.type)}", old.type, [old, val])
    if kind == "uinc_wrap":
        return b.select(b.icmp_unsigned(">=", old, val), old.type(0), b.add(old, old.type(1)))
    if kind == "udec_wrap":
        wrap = b.or_(b.icmp_unsigned("==", old, old.type(0)), b.icmp_unsigned(">", old, val))
        return b.select(wrap, val, b.sub(old, old.type(1)))
    raise AssertionError(kind)


