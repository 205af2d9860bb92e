"""LLVM lowering of the PTX moves and of the float arithmetic the instruction table leaves
to hand-written code (ir/ptx_table.py: the f16/bf16 fma, rounded once; ptx_spec.py lowers
the rest of the arithmetic, every rounding and f16 add/sub/mul included; ptx_ops.py holds
the shared helpers)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from cpuify.codegen.half_float import FMA_HALF_INLINE_LIMIT, fma_half, fma_half_call
from cpuify.codegen.lowering import hand_written, handles, _width
from cpuify.codegen.ptx_ops import fsrc
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
