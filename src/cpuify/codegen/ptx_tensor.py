"""Tensor-core instructions: `ptx.wmma_load`/`ptx.wmma_store` (one thread's fragment, from
the layouts of cpuify.lifting.tensor_cores) and `upir.warp_matrix`, the warp-wide part of
wmma.mma / mma.sync / ldmatrix after transforms/tensor_cores.py lowered them: every lane
has stored its registers to its record in local memory and the warp has met, so a lane reads
the records of the other lanes of its warp (thread t's local window is at
local_base + (t - own) * local_size) and computes its own result registers.

Arithmetic (the reference interpreter documents the same order): f16/bf16/tf32 products are
exact in f32 and are added to the f32 accumulator one k after another (one rounding each);
tf32 operands keep their upper 19 bits; f64 uses one fma per k; s8/u8 products are summed
exactly in 32 bits (64 with .satfinite, then clamped)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from cpuify.codegen.half_float import f32_to_half, half_to_f32
from cpuify.codegen.kernel_abi import ctx_index
from cpuify.codegen.layout import ERR_WARP_DIVERGENCE, STATE_UNKNOWN
from cpuify.codegen.lowering import F32, F64, I8, I16, I32, I64, PTR, handles
from cpuify.ir.core import Operation
from cpuify.lifting.tensor_cores import (
    MatrixOp, lane_elements, layout, parse_ldmatrix, parse_matrix_op, per_register, shape_dims,
)

if TYPE_CHECKING:
    from cpuify.codegen.segment_emitter import SegmentEmitter

_BITS = {"f16": 16, "bf16": 16, "s8": 8, "u8": 8, "tf32": 32, "f32": 32, "s32": 32, "f64": 64}
_INT = {8: I8, 16: I16, 32: I32, 64: I64}


def _space(op: Operation) -> str:
    return next((s for s in ("global", "shared") if s in op.attributes["mods"]), "generic")


def _lane_coords(e: "SegmentEmitter", lay, index: int) -> tuple[ir.Value, ir.Value]:  # type: ignore[no-untyped-def]
    """(row, column) of register element `index` of this thread's lane (i64)."""
    b = e.b
    lane = b.and_(e.linear_tid64, I64(31))
    g, t = b.lshr(lane, I64(2)), b.and_(lane, I64(3))
    (gr, gc), (tr, tc), offs = lay
    r0, c0 = offs[index]
    row = b.add(b.add(b.mul(g, I64(gr)), b.mul(t, I64(tr))), I64(r0))
    col = b.add(b.add(b.mul(g, I64(gc)), b.mul(t, I64(tc))), I64(c0))
    return row, col


def _element_pointers(e: "SegmentEmitter", op: Operation, spec: MatrixOp, matrix: str
                      ) -> list[ir.Value]:
    """Pointer to each register element of this lane's fragment in memory."""
    b = e.b
    t = spec.types[matrix]
    lay = layout(spec.family, spec.shape, t, matrix)
    assert lay is not None
    base = e.address(op, _space(op))
    stride = b.zext(e.get(op.operands[1]), I64)
    size = _BITS[t] // 8
    out = []
    for i in range(len(lay[2])):
        row, col = _lane_coords(e, lay, i)
        index = b.add(b.mul(row, stride), col) if spec.layouts[0] == "row" else \
            b.add(b.mul(col, stride), row)
        p = b.gep(base, [b.mul(index, I64(size))])
        out.append(b.bitcast(p, _INT[_BITS[t]].as_pointer()))
    return out


@handles("ptx.wmma_load")
def _wmma_load(e: "SegmentEmitter", op: Operation) -> None:
    spec = parse_matrix_op("wmma", tuple(op.attributes["mods"]))
    assert not isinstance(spec, str)
    t = spec.types[spec.matrix]
    b = e.b
    elems = [b.load(p) for p in _element_pointers(e, op, spec, spec.matrix)]
    per = per_register(t)
    w = 32 // per if per > 1 else _BITS[t]
    for k, r in enumerate(op.results):
        if per == 1:
            v = elems[k]
        else:
            v = I32(0)
            for j in range(per):
                v = b.or_(v, b.shl(b.zext(elems[k * per + j], I32), I32(w * j)))
        e.define(r, e.coerce_bits(v, e.llvm_type(r)))


@handles("ptx.wmma_store")
def _wmma_store(e: "SegmentEmitter", op: Operation) -> None:
    spec = parse_matrix_op("wmma", tuple(op.attributes["mods"]))
    assert not isinstance(spec, str)
    b = e.b
    t = spec.types["d"]
    ptrs = _element_pointers(e, op, spec, "d")
    regs = [e.get(v) for v in op.operands[2:]]
    if t == "f16":
        bits = [b.bitcast(r, I32) if not isinstance(r.type, ir.IntType) else r for r in regs]
        elems = [b.trunc(b.lshr(x, I32(16 * h)), I16) for x in bits for h in (0, 1)]
    else:
        elems = [e.coerce_bits(r, _INT[_BITS[t]]) for r in regs]
    for p, v in zip(ptrs, elems):
        b.store(v, p)


# ---- the warp-wide part ----

def _records(e: "SegmentEmitter", op: Operation) -> tuple[ir.Value, ir.Value]:
    """(pointer to lane 0's record of this warp, to this thread's record).  A warp the
    block's size cuts short fails the launch (the instruction needs all 32 lanes)."""
    b = e.b
    off = e.get(op.operands[0])
    own = b.gep(e.local_base, [off])
    lane = b.and_(e.linear_tid64, I64(31))
    partial = b.icmp_unsigned(">", b.add(b.sub(e.linear_tid64, lane), I64(32)), e.nthreads64)
    with b.if_then(partial, likely=False):
        b.store(I32(ERR_WARP_DIVERGENCE), b.gep(e.ctx, [I32(0), I32(ctx_index("error"))]))
        b.ret(I32(STATE_UNKNOWN))
    first = b.gep(own, [b.mul(b.sub(I64(0), lane), I64(e.kc.local_size))])
    return first, own


def _table(e: "SegmentEmitter", name: str, values: list[int]) -> ir.Value:
    mod = e.mod.module
    g = mod.globals.get(name)
    if g is None:
        ty = ir.ArrayType(I32, len(values))
        g = ir.GlobalVariable(mod, ty, name)
        g.global_constant = True
        g.linkage = "internal"
        g.initializer = ir.Constant(ty, values)
    return g


def _holders(spec: MatrixOp, matrix: str, first_reg: int) -> dict[tuple[int, int], tuple[int, int, int]]:
    """(row, column) -> (lane, record slot, element within the register) of one holder."""
    t = spec.types[matrix]
    lay = layout(spec.family, spec.shape, t, matrix)
    assert lay is not None
    per = per_register(t)
    out: dict[tuple[int, int], tuple[int, int, int]] = {}
    for lane in range(32):
        for i, rc in enumerate(lane_elements(lay, lane)):
            out.setdefault(rc, (lane, first_reg + i // per, i % per))
    return out


def _element(e: "SegmentEmitter", p: ir.Value, t: str, sub: ir.Value | int) -> ir.Value:
    """The value (f32, f64 or i32) of element `sub` of the register stored at `p`."""
    b = e.b
    if t == "f64":
        return b.load(b.bitcast(p, F64.as_pointer()))
    word = b.load(b.bitcast(p, I32.as_pointer()))
    sub_v = I32(sub) if isinstance(sub, int) else sub
    if t in ("f16", "bf16"):
        return half_to_f32(b, b.trunc(b.lshr(word, b.mul(sub_v, I32(16))), I16), t)
    if t in ("s8", "u8"):
        byte = b.trunc(b.lshr(word, b.mul(sub_v, I32(8))), I8)
        return b.sext(byte, I32) if t == "s8" else b.zext(byte, I32)
    if t == "tf32":
        return b.bitcast(b.and_(word, I32(0xFFFFE000)), F32)
    if t == "f32":
        return b.bitcast(word, F32)
    return word                                       # s32


@handles("upir.warp_matrix")
def _warp_matrix(e: "SegmentEmitter", op: Operation) -> None:
    if op.attributes["kind"] == "ldmatrix":
        _ldmatrix(e, op)
    else:
        _mma(e, op)


def _mma(e: "SegmentEmitter", op: Operation) -> None:
    spec = parse_matrix_op(str(op.attributes["family"]), tuple(op.attributes["mods"]))
    assert not isinstance(spec, str)
    b = e.b
    m, n, k = shape_dims(spec.shape)
    na, nb = spec.registers("a"), spec.registers("b")
    first, own = _records(e, op)
    lane = b.and_(e.linear_tid64, I64(31))
    lay_d = layout(spec.family, spec.shape, spec.types["d"], "d")
    assert lay_d is not None
    nd = len(lay_d[2])
    size = e.kc.local_size
    holders_a = _holders(spec, "a", 0)
    holders_b = _holders(spec, "b", na)
    # per (lane, output element, k): where A[row, k] and B[k, column] are, as the byte
    # offset from lane 0's record times 4 plus the element within the register
    key = f"{spec.family}.{spec.shape}.{spec.types['a']}.{size}"
    tabs = []
    for which, holders in (("a", holders_a), ("b", holders_b)):
        vals = []
        for ln in range(32):
            for r, c in lane_elements(lay_d, ln):
                for kk in range(k):
                    hl, slot, sub = holders[(r, kk) if which == "a" else (kk, c)]
                    vals.append((hl * size + 8 * slot) * 4 + sub)
        tabs.append(_table(e, f"cpuify_mma_{which}.{key}", vals))
    ta, tb = tabs
    t_in = spec.types["a"]
    t_c, t_d = spec.types["c"], spec.types["d"]
    per_c = per_register(t_c) if t_c == "f16" else 1
    is_int = t_in in ("s8", "u8")
    wide = is_int and spec.satfinite
    fma = None
    if t_in == "f64":
        fma = e.mod.intrinsic("llvm.fma.f64", F64, [F64, F64, F64])
    results: list[ir.Value] = []
    for d_index in range(nd):
        # the accumulator: this lane's own c element
        slot = na + nb + d_index // per_c
        acc = _element(e, b.gep(own, [I64(8 * slot)]), "f16" if t_c == "f16" else t_c,
                       d_index % per_c)
        if wide:
            acc = b.sext(acc, I64)
        row_base = b.mul(b.add(b.mul(lane, I64(nd)), I64(d_index)), I64(k))
        for kk in range(k):
            idx = b.add(row_base, I64(kk))
            xs = []
            for which, tab in (("a", ta), ("b", tb)):
                code = b.load(b.gep(tab, [I64(0), idx]))
                where = b.zext(b.lshr(code, I32(2)), I64)
                sub = b.and_(code, I32(3))
                tt = spec.types[which]
                xs.append(_element(e, b.gep(first, [where]), tt, sub))
            x, y = xs
            if is_int:
                if wide:
                    acc = b.add(acc, b.mul(b.sext(x, I64), b.sext(y, I64)))
                else:
                    acc = b.add(acc, b.mul(x, y))
            elif fma is not None:
                acc = b.call(fma, [x, y, acc])
            else:
                # the product is exact in f32: one rounding, as fma
                acc = b.fadd(acc, b.fmul(x, y))
        if wide:
            lo, hi = I64(-(1 << 31)), I64((1 << 31) - 1)
            acc = b.select(b.icmp_signed("<", acc, lo), lo, b.select(b.icmp_signed(">", acc, hi), hi, acc))
            acc = b.trunc(acc, I32)
        results.append(acc)
    if t_d == "f16":
        halves = [b.zext(f32_to_half(b, v, "f16"), I32) for v in results]
        regs = [b.or_(halves[i], b.shl(halves[i + 1], I32(16))) for i in range(0, nd, 2)]
    else:
        regs = results
    for r, v in zip(op.results, regs):
        e.define(r, e.coerce_bits(v, e.llvm_type(r)))


def _ldmatrix(e: "SegmentEmitter", op: Operation) -> None:
    spec = parse_ldmatrix(tuple(op.attributes["mods"]))
    assert not isinstance(spec, str)
    b = e.b
    first, _ = _records(e, op)
    lane = b.and_(e.linear_tid64, I64(31))
    g, t = b.lshr(lane, I64(2)), b.and_(lane, I64(3))
    size = I64(e.kc.local_size)

    def row_pointer(source_lane: ir.Value) -> ir.Value:
        rec = b.gep(first, [b.mul(source_lane, size)])
        addr = b.load(b.bitcast(rec, I64.as_pointer()))
        if spec.space == "shared":
            return b.gep(e.shared, [addr])
        return b.inttoptr(addr, PTR)

    for mi, r in enumerate(op.results):
        if not spec.trans:
            p = b.gep(row_pointer(b.add(I64(8 * mi), g)), [b.mul(t, I64(4))])
            v = b.load(b.bitcast(p, I32.as_pointer()))
        else:
            lo_p = b.gep(row_pointer(b.add(I64(8 * mi), b.mul(t, I64(2)))), [b.mul(g, I64(2))])
            hi_p = b.gep(row_pointer(b.add(I64(8 * mi + 1), b.mul(t, I64(2)))), [b.mul(g, I64(2))])
            lo = b.zext(b.load(b.bitcast(lo_p, I16.as_pointer())), I32)
            hi = b.zext(b.load(b.bitcast(hi_p, I16.as_pointer())), I32)
            v = b.or_(lo, b.shl(hi, I32(16)))
        e.define(r, e.coerce_bits(v, e.llvm_type(r)))
