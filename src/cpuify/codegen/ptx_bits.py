"""LLVM lowering of the PTX bit-field and byte instructions that the instruction table leaves
to hand-written code (ir/ptx_table.py; ptx_spec.py lowers the plain bitwise ops, shifts,
comparisons and selects; ptx_ops.py holds the shared helpers)."""

from __future__ import annotations

from typing import TYPE_CHECKING


from cpuify.codegen.lowering import (
    I1, I8, I32, I64, handles, is_signed,
)
from cpuify.codegen.ptx_ops import call, src
from cpuify.ir.core import Operation
from cpuify.ir.modifiers import has, mods, ty

if TYPE_CHECKING:
    from cpuify.codegen.segment_emitter import SegmentEmitter


# --- bitwise ------------------------------------------------------------------------------------

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
