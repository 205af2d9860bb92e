"""LLVM lowering of the PTX conversions the instruction table leaves to hand-written code
(cvt with a float or .sat; cvta, isspacep; ptx_spec.py lowers the integer conversions and
the math functions); ptx_ops.py holds the shared helpers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from cpuify.codegen.half_float import f32_to_bf16, f64_to_f32_odd, half_to_f32
from cpuify.codegen.lowering import (
    F16, F32, F64, I1, I16, I32, I64, PTR, hand_written, handles, is_float, is_signed,
    ptx_llvm_type,
)
from cpuify.codegen.denormals import known_flushed
from cpuify.codegen.ptx_ops import call, fsuffix, ftz, saturate, directed
from cpuify.frontend.ptx_ast import type_size
from cpuify.ir.core import Operation
from cpuify.ir.modifiers import mods, rounding, types

if TYPE_CHECKING:
    from cpuify.codegen.segment_emitter import SegmentEmitter


# --- math functions ---------------------------------------------------------------------------

# --- conversions ------------------------------------------------------------------------------

_ROUND_INT = {"rni": "llvm.rint", "rzi": "llvm.trunc", "rmi": "llvm.floor", "rpi": "llvm.ceil"}


def nan_to_int_bits(src_bits: int, dst_bits: int) -> int:
    """What cvt.{rni,rzi,rmi,rpi}.<int>.<float> gives for a NaN on the GPU (measured on an
    H100, every rounding and NaN payload): the destination's top bit alone when the source
    is f64 or the destination is 64 bits wide, else 0 (f16/f32 to 8..32-bit integers)."""
    return 1 << (dst_bits - 1) if src_bits == 64 or dst_bits == 64 else 0


@hand_written("ptx.cvt")
def _cvt(e: SegmentEmitter, op: Operation) -> None:
    """The hand-written forms of cvt (ir/ptx_table.py): every pair with a float, and the
    saturating integer conversions."""
    b = e.b
    ts = types(op)
    dt, st = ts[0], ts[-1]
    m = mods(op)
    irnd = next((x for x in m if x in _ROUND_INT), None)
    frnd = rounding(op)
    sat = "sat" in m
    ftz_on = "ftz" in m
    a = e.operand(op.operands[0], st)
    if dt == "tf32":
        # cvt.rna.tf32.f32: to nearest, ties away from zero, on the upper 19 bits (a carry
        # into the exponent gives the next binade or infinity); NaN stays a NaN
        bits = b.bitcast(a, I32)
        r = b.and_(b.add(bits, I32(0x1000)), I32(0xFFFFE000 - (1 << 32)))
        nan = b.fcmp_unordered("uno", a, a)
        e.result(op, b.select(nan, I32(0x7FFFE000), r), "b32")
        return
    if st in ("f16", "bf16"):
        a = half_to_f32(b, a, st)                 # exact
        st = "f32"
    to_half = dt == "f16"
    if to_half:
        dt = "f64" if st == "f64" else "f32"   # f64 -> f16 in one rounding
    to_bf16 = dt == "bf16"
    if to_bf16:
        dt = "f64"      # exact for f32 and integers up to 32 bits; rounded once below
    # (an input that is never subnormal needs no flush, and then neither does an f32 -> f32
    # result: rounded to an integer, saturated to [0, 1] or the input itself)
    flushed_input = ftz_on and is_float(st) and known_flushed(op.operands[0])
    if is_float(st):
        a = ftz(e, a, ftz_on and not flushed_input)
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
        r = ftz(e, r, ftz_on and not (flushed_input and st == dt == "f32"))
    elif is_float(st):
        # float -> int: round as asked (default rzi per PTX requirements), saturate; NaN
        # as an H100 converts it (nan_to_int_bits)
        rnd = irnd or "rzi"
        rounded = call(e, f"{_ROUND_INT[rnd]}.{fsuffix(a.type)}", a.type, [a])
        it = ptx_llvm_type(dt)
        kind = "fptosi" if is_signed(dt) else "fptoui"
        r = call(e, f"llvm.{kind}.sat.i{it.width}.{fsuffix(a.type)}", it, [rounded])
        nan_bits = nan_to_int_bits(type_size(st) * 8, it.width)
        if nan_bits:
            r = b.select(b.fcmp_unordered("uno", a, a), it(nan_bits), r)
    elif is_float(dt):
        ft = ptx_llvm_type(dt)
        if frnd in ("rz", "rm", "rp") and type_size(st) <= 4 and dt == "f32":
            wide = b.sitofp(a, F64) if is_signed(st) else b.uitofp(a, F64)
            rn = b.fptrunc(wide, F32)
            r = directed(e, rn, b.fsub(wide, b.fpext(rn, F64)), frnd)
        elif frnd in ("rz", "rm", "rp") and not (dt == "f64" and type_size(st) <= 4):
            r = _int64_to_float_directed(e, a, ft, is_signed(st), frnd)
        else:
            r = b.sitofp(a, ft) if is_signed(st) else b.uitofp(a, ft)
        if sat:
            r = saturate(e, r)
    else:
        # int -> int with .sat (without: the table's resize), clamped in one bit more than
        # the wider of the two
        dlt = ptx_llvm_type(dt)
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
    if to_bf16:
        mode = frnd or "rn"
        if mode == "rn":
            f = f64_to_f32_odd(b, r)
        else:
            f = b.fptrunc(r, F32)
            f = directed(e, f, b.fsub(r, b.fpext(f, F64)), mode)
        if sat:
            f = saturate(e, f)
        e.result(op, f32_to_bf16(b, f, mode), "bf16")
        return
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


def _int64_to_float_directed(e: SegmentEmitter, a: ir.Value, ft: ir.Type, signed: bool,
                             mode: str) -> ir.Value:
    """cvt.{rz,rm,rp}.{f32,f64}.{s64,u64}: the round-to-nearest conversion, moved one step
    where the exact error (a - rn, compared as integers: rn is an integer in range unless it
    rounded up to 2^63 or 2^64, which is then above a) points the other way."""
    b = e.b
    it = a.type
    rn = b.sitofp(a, ft) if signed else b.uitofp(a, ft)
    limit = ir.Constant(ft, 2.0 ** (it.width - 1 if signed else it.width))
    above_range = b.fcmp_ordered(">=", rn, limit)
    back = b.fptosi(rn, it) if signed else b.fptoui(rn, it)
    back = b.select(above_range, ir.Constant(it, 0), back)      # (out of range: poison)
    gt = b.icmp_signed(">", a, back) if signed else b.icmp_unsigned(">", a, back)
    lt = b.icmp_signed("<", a, back) if signed else b.icmp_unsigned("<", a, back)
    lt = b.or_(lt, above_range)
    gt = b.and_(gt, b.not_(above_range))
    one, zero = ir.Constant(ft, 1.0), ir.Constant(ft, 0.0)
    err_sign = b.select(gt, one, b.select(lt, b.fneg(one), zero))
    return directed(e, rn, err_sign, mode)
