"""LLVM lowering of the conversion functions of the PTX instruction table's expression
language (ir/ptx_table.py FUNCTIONS): convert, round_int, to_int, tf32, what cvt is made of.
`ConvertLowering` is a part of ptx_spec._SpecLowering (which dispatches each function to its
`fn_<name>`).

f16 and bf16 values are their 16 bits here (i16); a conversion from one reads it as the f32
of the same value (exact).  Directed roundings are the round-to-nearest conversion moved one
step by the sign of its exact error (ptx_ops.directed); into bf16 from an f64 (or a 64-bit
integer) the value is first rounded to f32 *to odd*, which rounding to nearest then leaves
correctly rounded (half_float.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from llvmlite import ir

from cpuify.codegen.half_float import f32_to_bf16, f32_to_half, f64_to_f32_odd, half_to_f32
from cpuify.codegen.lowering import F16, F32, F64, I16, I32, is_float, is_signed, ptx_llvm_type
from cpuify.codegen.ptx_ops import call, directed, fsuffix, nextafter
from cpuify.frontend.ptx_ast import type_size
from cpuify.ir.core import Operation
from cpuify.ir.ptx_table import DIRECTED, Fn, resolve_param

if TYPE_CHECKING:
    from cpuify.codegen.segment_emitter import SegmentEmitter

Typed = tuple[ir.Value, str]          # an LLVM value and its PTX type

HALVES = ("f16", "bf16")
_ROUND_INT = {"rni": "llvm.rint", "rzi": "llvm.trunc", "rmi": "llvm.floor", "rpi": "llvm.ceil"}


def nan_to_int_bits(src_bits: int, dst_bits: int) -> int:
    """What cvt.{rni,rzi,rmi,rpi}.<int>.<float> gives for a NaN on the GPU (measured on an
    H100, every rounding and NaN payload): the destination's top bit alone when the source
    is f64 or the destination is 64 bits wide, else 0 (f16/f32 to 8..32-bit integers)."""
    return 1 << (dst_bits - 1) if src_bits == 64 or dst_bits == 64 else 0


class ConvertLowering:
    """The `fn_<name>` lowerings of the conversion functions (each returns the value and its
    PTX type); the attributes are _SpecLowering's."""

    e: SegmentEmitter
    b: ir.IRBuilder
    op: Operation
    mods: list[str]
    type_of: Callable[[str], str]

    def fn_convert(self, x: Fn, args: list[Typed]) -> Typed:
        """Into f16 through f32 (from an f64 rounded to odd: f32 is exact for every other
        source f16 does not overflow on), into bf16 through f64 and f32 rounded to odd."""
        (a, st), = args
        want = self.type_of(x.type or "D")
        param = resolve_param(x.param, self.mods)
        mode = param if param in DIRECTED else None
        b = self.b
        if st in HALVES:
            a, st = half_to_f32(b, a, st), "f32"          # exact
        if want == "bf16":
            return self._to_bf16(a, st, mode), want
        if want == "f16":
            r = self._to_float(a, st, "f64" if st == "f64" else "f32", mode)
            # (from an f64 through f32 rounded to odd, which rounding to nearest leaves
            # correctly rounded: LLVM has no x86 instruction for f64 -> f16 before
            # AVX512-FP16 and calls libgcc's __truncdfhf2, which the JIT does not link)
            h = b.fptrunc(f64_to_f32_odd(b, r) if st == "f64" else r, F16)
            if mode is not None:
                h = directed(self.e, h, _half_error(self.e, r, h), mode)
            # a NaN becomes the canonical f16 NaN 0x7FFF, as on the GPU (LLVM's fptrunc
            # keeps a quiet NaN's payload: 0x7E00 and up; the CUDA Handbook's float_to_float16)
            nan = b.fcmp_unordered("uno", r, r)
            return b.select(nan, ir.Constant(I16, 0x7FFF), b.bitcast(h, I16)), want
        return self._to_float(a, st, want, mode), want

    def _to_float(self, a: ir.Value, st: str, dt: str, mode: str | None) -> ir.Value:
        """a (of PTX type st: f32, f64 or an integer) in the float type dt (f32 or f64),
        rounded to nearest or as `mode` (rz rm rp) says."""
        b, e = self.b, self.e
        if is_float(st):
            sw, dw = type_size(st), type_size(dt)
            if sw == dw:
                return a
            if sw < dw:
                return b.fpext(a, ptx_llvm_type(dt))
            r = b.fptrunc(a, ptx_llvm_type(dt))
            if mode is not None:
                r = directed(e, r, b.fsub(a, b.fpext(r, a.type)), mode)
            return r
        ft = ptx_llvm_type(dt)
        signed = is_signed(st)
        if mode is not None and type_size(st) <= 4 and dt == "f32":
            wide = b.sitofp(a, F64) if signed else b.uitofp(a, F64)     # exact
            rn = b.fptrunc(wide, F32)
            return directed(e, rn, b.fsub(wide, b.fpext(rn, F64)), mode)
        if mode is not None and not (dt == "f64" and type_size(st) <= 4):
            return _int64_to_float_directed(e, a, ft, signed, mode)
        return b.sitofp(a, ft) if signed else b.uitofp(a, ft)

    def _to_bf16(self, a: ir.Value, st: str, mode: str | None) -> ir.Value:
        """The f64 of a (exact but for 64-bit integers: rounded to odd, or as `mode` says),
        then f32 (to odd, or as `mode` says), then bf16 as `mode` says (all directed roundings
        of one direction compose; rounding to odd before rounding to nearest is exact)."""
        b, e = self.b, self.e
        if not is_float(st) and type_size(st) == 8 and mode is None:
            r = _int64_to_f64_odd(e, a, is_signed(st))
        else:
            r = self._to_float(a, st, "f64", mode)
        if mode is None:
            f = f64_to_f32_odd(b, r)
        else:
            f = b.fptrunc(r, F32)
            f = directed(e, f, b.fsub(r, b.fpext(f, F64)), mode)
        return f32_to_bf16(b, f, mode or "rn")

    def fn_round_int(self, x: Fn, args: list[Typed]) -> Typed:
        """LLVM's rint (to nearest even in the default environment), trunc, floor, ceil; a
        half rounded in f32 and back (an integral half value is exact in either)."""
        (a, t), = args
        name = _ROUND_INT[str(resolve_param(x.param, self.mods))]
        if t in HALVES:
            f = half_to_f32(self.b, a, t)
            return f32_to_half(self.b, call(self.e, f"{name}.f32", F32, [f]), t), t
        return call(self.e, f"{name}.{fsuffix(a.type)}", a.type, [a]), t

    def fn_to_int(self, x: Fn, args: list[Typed]) -> Typed:
        """A float: rounded to an integral value, then LLVM's saturating conversion (NaN: 0,
        replaced by nan_to_int_bits); an integer clamped in one bit more than the wider of
        the two widths."""
        (a, st), = args
        want = self.type_of(x.type or "D")
        b, e = self.b, self.e
        it = ptx_llvm_type(want)
        if st in HALVES:
            a, st = half_to_f32(b, a, st), "f32"
        if is_float(st):
            rnd = resolve_param(x.param, self.mods) or "rzi"
            rounded = call(e, f"{_ROUND_INT[str(rnd)]}.{fsuffix(a.type)}", a.type, [a])
            kind = "fptosi" if is_signed(want) else "fptoui"
            r = call(e, f"llvm.{kind}.sat.i{it.width}.{fsuffix(a.type)}", it, [rounded])
            nan_bits = nan_to_int_bits(type_size(st) * 8, it.width)
            if nan_bits:
                r = b.select(b.fcmp_unordered("uno", a, a), it(nan_bits), r)
            return r, want
        sw_bits, dw_bits = a.type.width, it.width
        big = ir.IntType(max(sw_bits, dw_bits) + 1)
        v = b.sext(a, big) if is_signed(st) else b.zext(a, big)
        lo = -(1 << (dw_bits - 1)) if is_signed(want) else 0
        hi = (1 << (dw_bits - 1)) - 1 if is_signed(want) else (1 << dw_bits) - 1
        v = call(e, f"llvm.smax.i{big.width}", big, [v, big(lo)])
        v = call(e, f"llvm.smin.i{big.width}", big, [v, big(hi)])
        return b.trunc(v, it), want

    def fn_tf32(self, x: Fn, args: list[Typed]) -> Typed:
        """Ties away from zero on the upper 19 bits: add half of the last kept place to the
        magnitude's bits and clear the rest (a carry into the exponent gives the next binade
        or infinity)."""
        (a, _), = args
        b = self.b
        bits = b.bitcast(a, I32)
        r = b.and_(b.add(bits, I32(0x1000)), I32(0xFFFFE000 - (1 << 32)))
        nan = b.fcmp_unordered("uno", a, a)
        return b.select(nan, I32(0x7FFFE000), r), self.type_of(x.type or "b32")


def _int_error_sign(e: SegmentEmitter, a: ir.Value, rn: ir.Value, signed: bool) -> ir.Value:
    """+1.0, -1.0 or 0.0: the sign of a - rn for an integer a and its round-to-nearest float
    rn (compared as integers: rn is an integer in a's range unless it rounded up to 2^63 or
    2^64, which is then above a)."""
    b = e.b
    it, ft = a.type, rn.type
    limit = ir.Constant(ft, 2.0 ** (it.width - 1 if signed else it.width))
    above_range = b.fcmp_ordered(">=", rn, limit)
    back = b.fptosi(rn, it) if signed else b.fptoui(rn, it)
    back = b.select(above_range, ir.Constant(it, 0), back)      # (out of range: poison)
    gt = b.icmp_signed(">", a, back) if signed else b.icmp_unsigned(">", a, back)
    lt = b.icmp_signed("<", a, back) if signed else b.icmp_unsigned("<", a, back)
    lt = b.or_(lt, above_range)
    gt = b.and_(gt, b.not_(above_range))
    one, zero = ir.Constant(ft, 1.0), ir.Constant(ft, 0.0)
    return b.select(gt, one, b.select(lt, b.fneg(one), zero))


def _half_error(e: SegmentEmitter, r: ir.Value, h: ir.Value) -> ir.Value:
    """The sign of r - h, h the f16 rounded to nearest of the f32/f64 r: `r - fpext(h)`, but
    a finite r that overflowed to +-inf (|r| >= 65520) has the error -r (toward zero).  LLVM
    (22.1) folds `fpext(fptrunc(uitofp x))` to `uitofp x` wherever x's known bits fit f16's
    11-bit significand, though 2^31 is one bit wide and no f16: `cvt.rm.f16.u32` of
    `__brev(threadIdx.z)` in code specialized for 4 z threads gave inf, not 65504 (the
    fuzzer's fz_4244_266)."""
    b = e.b
    err = b.fsub(r, b.fpext(h, r.type))
    mag = call(e, f"llvm.fabs.{fsuffix(r.type)}", r.type, [r])
    over = b.and_(b.fcmp_ordered(">=", mag, ir.Constant(r.type, 65520.0)),
                  b.fcmp_ordered("<", mag, ir.Constant(r.type, float("inf"))))
    return b.select(over, b.fneg(r), err)


def _int64_to_float_directed(e: SegmentEmitter, a: ir.Value, ft: ir.Type, signed: bool,
                             mode: str) -> ir.Value:
    """cvt.{rz,rm,rp}.{f32,f64}.{s64,u64}: the round-to-nearest conversion, moved one step
    where the exact error points the other way."""
    b = e.b
    rn = b.sitofp(a, ft) if signed else b.uitofp(a, ft)
    return directed(e, rn, _int_error_sign(e, a, rn, signed), mode)


def _int64_to_f64_odd(e: SegmentEmitter, a: ir.Value, signed: bool) -> ir.Value:
    """A 64-bit integer rounded to f64 to odd: an inexact round-to-nearest result with an
    even last bit moves one step toward a (to its odd neighbour)."""
    b = e.b
    rn = b.sitofp(a, F64) if signed else b.uitofp(a, F64)
    err = _int_error_sign(e, a, rn, signed)
    even = b.icmp_unsigned("==", b.and_(b.bitcast(rn, ir.IntType(64)), ir.IntType(64)(1)),
                           ir.IntType(64)(0))
    toward = b.select(b.fcmp_ordered(">", err, ir.Constant(F64, 0.0)), nextafter(e, rn, True),
                      nextafter(e, rn, False))
    inexact = b.fcmp_ordered("!=", err, ir.Constant(F64, 0.0))
    return b.select(b.and_(inexact, even), toward, rn)
