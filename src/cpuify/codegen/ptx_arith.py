"""LLVM lowering of the PTX moves and of the float arithmetic the instruction table leaves
to hand-written code (ir/ptx_table.py: directed rounding, f16, the f16/bf16 fma, mad on
floats; ptx_spec.py lowers the integer and round-to-nearest forms; ptx_ops.py holds the
shared helpers).

Rounding: `.rn` is IEEE default; directed `.rz/.rm/.rp` on add/sub/mul/div and fma.f32 are
computed exactly from the round-to-nearest result and the sign of its exact error
(ptx_ops.directed); `.ftz` flushes subnormal inputs and outputs; `.sat` clamps to [0, 1]."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from llvmlite import ir

from cpuify.codegen.half_float import FMA_HALF_INLINE_LIMIT, fma_half, fma_half_call
from cpuify.codegen.helpers import float_from_bits
from cpuify.codegen.lowering import (
    F16, F32, F64, I16, hand_written, handles, _width,
)
from cpuify.codegen.ptx_ops import (
    call, fsuffix, directed, _mul_error_f64, _div_error, _rm_zero, fsrc, fdone,
    saturate,
)
from cpuify.frontend.ptx_ast import type_size
from cpuify.ir.core import Operation, OpResult, Value
from cpuify.ir.modifiers import has, mods, rounding, ty, types

if TYPE_CHECKING:
    from cpuify.codegen.segment_emitter import SegmentEmitter


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

@hand_written("ptx.add", "ptx.sub")
def _add(e: SegmentEmitter, op: Operation) -> None:
    """The hand-written forms of add/sub (ir/ptx_table.py): floats with directed rounding,
    f16."""
    b = e.b
    t = ty(op)
    is_add = op.name == "ptx.add"
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
        _half_done(e, op, r)
        return
    fdone(e, op, r, t)


def _half_done(e: SegmentEmitter, op: Operation, r: ir.Value) -> None:
    """An f16 result (LLVM half): .sat clamps it before it becomes the register's bits."""
    if has(op, "sat"):
        r = saturate(e, r)
    e.result(op, e.b.bitcast(r, I16), "f16")


@hand_written("ptx.mul")
def _mul(e: SegmentEmitter, op: Operation) -> None:
    """The hand-written forms of mul: floats with directed rounding, f16."""
    b = e.b
    t = ty(op)
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
        _half_done(e, op, r)
        return
    fdone(e, op, r, t)


@hand_written("ptx.mad")
def _mad(e: SegmentEmitter, op: Operation) -> None:
    """The hand-written forms of mad: floats (an fma)."""
    _fma(e, op)


def half_fmas(kc) -> int:  # type: ignore[no-untyped-def]
    """How many f16/bf16 fmas the kernel of `kc` holds (counted once per kernel)."""
    n = getattr(kc, "_half_fmas", None)
    if n is None:
        n = sum(1 for o in kc.kernel.op.walk()
                if o.name == "ptx.fma" and ty(o) in ("f16", "bf16"))
        kc._half_fmas = n
    return n


@hand_written("ptx.fma")
def _fma(e: SegmentEmitter, op: Operation) -> None:
    """The hand-written forms of fma (directed rounding, f16/bf16), and mad on floats."""
    b = e.b
    t = ty(op)
    a, c, d = fsrc(e, op, 0, t), fsrc(e, op, 1, t), fsrc(e, op, 2, t)
    if t in ("f16", "bf16"):
        # rounded once (LLVM's half fma rounds the f32 sum, then again to half)
        emit = fma_half_call if half_fmas(e.kc) > FMA_HALF_INLINE_LIMIT else fma_half
        e.result(op, emit(b, a, c, d, t, has(op, "sat")), t)
        return
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
    fdone(e, op, r, t)


def _f32_range(v: Value, depth: int = 0) -> tuple[float, float] | None:
    """Bounds of an f32 value where the IR shows them: a constant, `cvt.sat` (in [0, 1],
    NaN -> 0), a product of bounded values (widened by an f32 rounding step each way)."""
    if not isinstance(v, OpResult) or depth > 4:
        return None
    op = v.op
    if op.name == "upir.const" and v.type == "f32":
        value = op.attributes.get("value")
        if isinstance(value, int):          # (float registers' constants as their bits)
            value = float_from_bits(value, "f32")
        return (value, value) if isinstance(value, float) else None
    if op.name == "ptx.mov" and len(op.operands) == 1:
        return _f32_range(op.operands[0], depth + 1)
    if op.name == "ptx.cvt" and "sat" in mods(op) and all(m == "f32" for m in types(op)):
        return (0.0, 1.0)
    if op.name == "ptx.mul" and ty(op) == "f32" and rounding(op) not in ("rz", "rm", "rp"):
        ra, rb = _f32_range(op.operands[0], depth + 1), _f32_range(op.operands[1], depth + 1)
        if ra is None or rb is None:
            return None
        ends = [x * y for x in ra for y in rb]
        lo, hi = min(ends), max(ends)
        return (lo - abs(lo) * 2.0 ** -23, hi + abs(hi) * 2.0 ** -23)
    return None


def _quantized_fma(e: SegmentEmitter, op: Operation, mode: str, t: str, a: ir.Value,
                   c: ir.Value, d: ir.Value) -> ir.Value | None:
    """fma.{rm,rp,rz}.f32 whose exact result lies in one binade of at least 2^23, with a
    constant addend on that binade's grid (the rounding trick of NVRTC's expf:
    `fma.rm(sat(x * log2e / 128 + 0.5), 252, 12582913)`): every f32 there is a multiple of
    the binade's ulp, so rounding is a floor/ceil of the product, exact in f64, plus the
    addend.  Eight f64 operations instead of the general emulation's error-free sum and
    fix-ups.  None when the bounds are not known from the IR."""
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


@hand_written("ptx.div")
def _div(e: SegmentEmitter, op: Operation) -> None:
    """The hand-written forms of div: floats with directed rounding."""
    b = e.b
    t = ty(op)
    a, c = fsrc(e, op, 0, t), fsrc(e, op, 1, t)
    r = b.fdiv(a, c)
    mode = rounding(op)
    if mode in ("rz", "rm", "rp"):
        r = directed(e, r, _div_error(e, a, c, r), mode, [a, c],
                     exact_inf=b.fcmp_ordered("==", c, ir.Constant(c.type, 0.0)))
    fdone(e, op, r, t)
