"""LLVM lowering of the PTX moves and of the float arithmetic the instruction table leaves
to hand-written code (ir/ptx_table.py: f16 add/sub/mul, fma with directed rounding or on
f16/bf16, mad on floats; ptx_spec.py lowers the integer and f32/f64 forms, directed
rounding included; ptx_ops.py holds the shared helpers).

Rounding: `.rn` is IEEE default; directed `.rz/.rm/.rp` on fma.f32 is computed exactly from
the round-to-nearest result and the sign of its exact error (ptx_ops.directed); `.ftz`
flushes subnormal inputs and outputs; `.sat` clamps to [0, 1]."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from cpuify.codegen.half_float import FMA_HALF_INLINE_LIMIT, fma_half, fma_half_call
from cpuify.codegen.lowering import (
    F16, I16, hand_written, handles, _width,
)
from cpuify.codegen.ptx_ops import (
    fsrc, saturate,
)
from cpuify.frontend.ptx_ast import type_size
from cpuify.ir.core import Operation
from cpuify.ir.modifiers import has, ty

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
    """The hand-written forms of add/sub (ir/ptx_table.py): f16 (.rn only in PTX), in
    LLVM's half."""
    b = e.b
    a, c = b.bitcast(fsrc(e, op, 0, "f16"), F16), b.bitcast(fsrc(e, op, 1, "f16"), F16)
    _half_done(e, op, b.fadd(a, c) if op.name == "ptx.add" else b.fsub(a, c))


def _half_done(e: SegmentEmitter, op: Operation, r: ir.Value) -> None:
    """An f16 result (LLVM half): .sat clamps it before it becomes the register's bits."""
    if has(op, "sat"):
        r = saturate(e, r)
    e.result(op, e.b.bitcast(r, I16), "f16")


@hand_written("ptx.mul")
def _mul(e: SegmentEmitter, op: Operation) -> None:
    """The hand-written forms of mul: f16 (.rn only in PTX)."""
    b = e.b
    a, c = b.bitcast(fsrc(e, op, 0, "f16"), F16), b.bitcast(fsrc(e, op, 1, "f16"), F16)
    _half_done(e, op, b.fmul(a, c))


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
    """The hand-written forms of fma: f16/bf16, rounded once (LLVM's half fma rounds the
    f32 sum, then again to half)."""
    t = ty(op)
    a, c, d = fsrc(e, op, 0, t), fsrc(e, op, 1, t), fsrc(e, op, 2, t)
    emit = fma_half_call if half_fmas(e.kc) > FMA_HALF_INLINE_LIMIT else fma_half
    e.result(op, emit(e.b, a, c, d, t, has(op, "sat")), t)
