"""LLVM lowering of the PTX address conversions the instruction table leaves to hand-written
code: cvta and isspacep (address windows of shared and local memory).  cvt is lowered from
the table (ptx_spec.py, ptx_spec_convert.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from cpuify.codegen.lowering import I1, I64, PTR, handles
from cpuify.ir.core import Operation
from cpuify.ir.modifiers import mods

if TYPE_CHECKING:
    from cpuify.codegen.segment_emitter import SegmentEmitter


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
