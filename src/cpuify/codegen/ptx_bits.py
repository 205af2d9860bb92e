"""LLVM lowering of the PTX bitwise instructions, comparisons and selects (ptx_ops.py holds
the shared helpers)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from cpuify.codegen.lowering import (
    F16, F32, I1, I8, I16, I32, I64, PTR, handles, is_float, is_signed, ptx_llvm_type,
)
from cpuify.codegen.ptx_ops import call, fsuffix, wrap_flags, src, fsrc, _int_binop, masked_thread_index
from cpuify.ir.core import Operation
from cpuify.ir.modifiers import has, mods, ty, types

if TYPE_CHECKING:
    from cpuify.codegen.segment_emitter import SegmentEmitter


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
    if op.name == "ptx.and":
        masked = masked_thread_index(e, op, 0, 1)
        if masked is None:
            masked = masked_thread_index(e, op, 1, 0)
        if masked is not None:
            e.result(op, masked, ty(op))
            return
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


@handles("ptx.fns")
def _fns(e: SegmentEmitter, op: Operation) -> None:
    """fns.b32 d, mask, base, offset: the |offset|-th set bit of mask from bit `base` up
    (offset > 0) or down (offset < 0), 0xffffffff if there is none.  Branch-free: the bits
    on the searched side of base, then the k-th set bit of those by a binary search on
    popcounts (5 steps)."""
    b = e.b
    bits, base = src(e, op, 0, "b32"), src(e, op, 1, "u32")
    offset = src(e, op, 2, "s32")
    ones = I32(0xFFFFFFFF)
    sh = b.and_(base, I32(31))
    up = b.icmp_signed(">", offset, I32(0))
    # bits at positions >= base (searching up) or <= base (searching down)
    side = b.select(up, b.and_(bits, b.shl(ones, sh)), b.and_(bits, b.lshr(ones, b.sub(I32(31), sh))))
    total = call(e, "llvm.ctpop.i32", I32, [side])
    n = call(e, "llvm.abs.i32", I32, [offset, I1(0)])
    # 0-based rank from the bottom of the bit wanted: n-1 up, total-n down
    k = b.select(up, b.sub(n, I32(1)), b.sub(total, n))
    x, pos, rest = side, I32(0), k
    for step in (16, 8, 4, 2, 1):
        low = call(e, "llvm.ctpop.i32", I32, [b.and_(x, I32((1 << step) - 1))])
        skip = b.icmp_unsigned(">=", rest, low)
        rest = b.select(skip, b.sub(rest, low), rest)
        x = b.select(skip, b.lshr(x, I32(step)), x)
        pos = b.select(skip, b.add(pos, I32(step)), pos)
    found = b.icmp_unsigned("<=", n, total)
    nth = b.select(found, pos, ones)
    at_base = b.select(b.icmp_unsigned("!=", b.and_(b.lshr(bits, sh), I32(1)), I32(0)), base, ones)
    r = b.select(b.icmp_signed("==", offset, I32(0)), at_base, nth)
    e.result(op, b.select(b.icmp_unsigned(">", base, I32(31)), ones, r), "b32")


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
        elif dt in ("f16", "bf16"):         # 1.0 in the half format
            v = b.select(p, I16(0x3C00 if dt == "f16" else 0x3F80), I16(0))
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
