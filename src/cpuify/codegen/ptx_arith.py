"""LLVM lowering of the PTX moves, which the instruction table leaves to hand-written code
(ir/ptx_table.py; ptx_spec.py lowers the arithmetic; ptx_ops.py holds the shared
helpers)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from cpuify.codegen.lowering import handles, _width
from cpuify.frontend.ptx_ast import type_size
from cpuify.ir.core import Operation
from cpuify.ir.modifiers import ty

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
