"""Tensor-core instructions: `ptx.wmma_load`/`ptx.wmma_store` (one thread's fragment, from
the layouts of cpuify.lifting.tensor_cores) and `upir.warp_matrix`, the warp-wide parts of
wmma.mma / mma.sync / ldmatrix after transforms/tensor_cores.py lowered them.  Each lane has
a record in its local memory, and reaches the records of the other lanes of its warp
(thread t's local window is at local_base + (t - own) * local_size): before a warp sync
each lane writes its A and B elements into the warp's dense matrices there (row r of A in
lane r's record, column c of B after it in lane c's; ldmatrix: its row address), after it
each lane loads the rows and columns its D elements need as vectors.

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
    Layout, MatrixOp, lane_base, parse_ldmatrix, parse_matrix_op, per_register,
)

if TYPE_CHECKING:
    from cpuify.codegen.segment_emitter import SegmentEmitter

_BITS = {"f16": 16, "bf16": 16, "s8": 8, "u8": 8, "tf32": 32, "f32": 32, "s32": 32, "f64": 64}
_INT = {8: I8, 16: I16, 32: I32, 64: I64}


def _space(op: Operation) -> str:
    return next((s for s in ("global", "shared") if s in op.attributes["mods"]), "generic")


def _lane_coords(e: "SegmentEmitter", lay: Layout, index: int) -> tuple[ir.Value, ir.Value]:
    """(row, column) of register element `index` of this thread's lane (i64)."""
    b = e.b
    lane = b.and_(e.linear_tid64, I64(31))
    r0, c0 = lay[2][index]
    if lay[0] == "table":
        # (Volta's quad pairs) the lane's base row and column from a constant table
        bases = [lane_base(lay, ln) for ln in range(32)]
        ty = ir.ArrayType(I32, 64)
        name = "cpuify_lanes." + ".".join(f"{r}_{c}" for r, c in bases)
        g = e.mod.module.globals.get(name)
        if g is None:
            g = ir.GlobalVariable(e.mod.module, ty, name)
            g.global_constant = True
            g.linkage = "internal"
            g.initializer = ir.Constant(ty, [x for rc in bases for x in rc])
        two = b.mul(lane, I64(2))
        row = b.zext(b.load(b.gep(g, [I64(0), two])), I64)
        col = b.zext(b.load(b.gep(g, [I64(0), b.add(two, I64(1))])), I64)
        return b.add(row, I64(r0)), b.add(col, I64(c0))
    (gr, gc), (tr, tc) = lay[0], lay[1]              # type: ignore[misc]
    g, t = b.lshr(lane, I64(2)), b.and_(lane, I64(3))
    row = b.add(b.add(b.mul(g, I64(gr)), b.mul(t, I64(tr))), I64(r0))
    col = b.add(b.add(b.mul(g, I64(gc)), b.mul(t, I64(tc))), I64(c0))
    return row, col


def _element_pointers(e: "SegmentEmitter", op: Operation, spec: MatrixOp, matrix: str
                      ) -> list[ir.Value]:
    """Pointer to each register element of this lane's fragment in memory."""
    b = e.b
    t = spec.types[matrix]
    lay = spec.layout(matrix)
    assert lay is not None
    base = e.address(op, _space(op))
    stride = e.int_resize(e.get(op.operands[1]), I64, False)      # (a u32 register)
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


def _buffers(e: "SegmentEmitter", op: Operation) -> tuple[ir.Value, ir.Value]:
    """(lane 0's, this thread's) buffer of the records that this instruction uses: the
    counter at the record's start says which of the two."""
    b = e.b
    first, own = _records(e, op)
    which = b.and_(b.load(b.bitcast(own, I32.as_pointer())), I32(1))
    off = b.add(I64(16), b.mul(b.zext(which, I64), I64(int(op.attributes["buffer"]))))
    return b.gep(first, [off]), b.gep(own, [off])


def _value(e: "SegmentEmitter", reg: ir.Value, t: str, sub: int) -> ir.Value:
    """Element `sub` of a fragment register as f32 (f16, bf16, tf32, f32), f64 or i32."""
    b = e.b
    if t == "f64":
        return e.coerce_bits(reg, F64)
    word = e.coerce_bits(reg, I32)
    if t in ("f16", "bf16"):
        return half_to_f32(b, b.trunc(b.lshr(word, I32(16 * sub)), I16), t)
    if t in ("s8", "u8"):
        byte = b.trunc(b.lshr(word, I32(8 * sub)), I8)
        return b.sext(byte, I32) if t == "s8" else b.zext(byte, I32)
    if t == "tf32":
        return b.bitcast(b.and_(word, I32(0xFFFFE000 - (1 << 32))), F32)
    if t == "f32":
        return b.bitcast(word, F32)
    return word                                       # s32


def _concat(b: ir.IRBuilder, vecs: list[ir.Value]) -> ir.Value:
    """One vector of the vectors' elements in order (all of one length)."""
    while len(vecs) > 1:
        if len(vecs) % 2:
            vecs = vecs + [ir.Constant(vecs[0].type, ir.Undefined)]
        n = vecs[0].type.count
        vecs = [b.shuffle_vector(vecs[i], vecs[i + 1],
                                 ir.Constant(ir.VectorType(I32, 2 * n), list(range(2 * n))))
                for i in range(0, len(vecs), 2)]
    return vecs[0]


def _elem_type(t: str) -> ir.Type:
    return F64 if t == "f64" else I32 if t in ("s8", "u8", "s32") else F32


@handles("upir.warp_matrix")
def _warp_matrix(e: "SegmentEmitter", op: Operation) -> None:
    kind = op.attributes["kind"]
    if op.attributes["phase"] == "put":
        if kind == "mma":
            _mma_scatter(e, op)
        else:
            # the row address (ldmatrix, stmatrix) or the register (movmatrix) to the
            # lane's own buffer
            _, own = _buffers(e, op)
            v = e.get(op.operands[1])
            ty = I32 if kind == "movmatrix" else I64
            e.b.store(e.int_resize(v, ty, False) if isinstance(v.type, ir.IntType) else
                      e.b.ptrtoint(v, ty), e.b.bitcast(own, ty.as_pointer()))
        return
    {"ldmatrix": _ldmatrix, "stmatrix": _stmatrix, "movmatrix": _movmatrix,
     "mma": _mma}[kind](e, op)
    # the next instruction uses the other buffer
    b = e.b
    counter = b.bitcast(b.gep(e.local_base, [e.get(op.operands[0])]), I32.as_pointer())
    b.store(b.xor(b.load(counter), I32(1)), counter)


def _spec(op: Operation) -> MatrixOp:
    spec = parse_matrix_op(str(op.attributes["family"]), tuple(op.attributes["mods"]))
    assert not isinstance(spec, str)
    return spec


def _mma_scatter(e: "SegmentEmitter", op: Operation) -> None:
    """This lane's A and B elements into the warp's dense rows: A[r, k] at element k of lane
    r's record, B[k, c] at element K + k of lane c's (each element once: the copies f16
    fragments hold are skipped)."""
    spec = _spec(op)
    b = e.b
    _, _, k = spec.dims()
    first, _ = _buffers(e, op)
    size = I64(e.kc.local_size)
    regs = [e.get(v) for v in op.operands[1:]]
    na = spec.registers("a")
    for matrix, base_reg in (("a", 0), ("b", na)):
        t = spec.types[matrix]
        lay = spec.layout(matrix)
        assert lay is not None
        per = per_register(t)
        ety = _elem_type(t)
        esize = 8 if ety == F64 else 4
        seen: set[tuple[int, int]] = set()
        for i, off in enumerate(lay[2]):
            if off in seen:
                continue
            seen.add(off)
            row, col = _lane_coords(e, lay, i)
            owner, kk = (row, col) if matrix == "a" else (col, row)
            at = b.add(b.mul(owner, size), b.mul(kk, I64(esize)))
            if matrix == "b":
                at = b.add(at, I64(k * esize))
            p = b.bitcast(b.gep(first, [at]), ety.as_pointer())
            b.store(_value(e, regs[base_reg + i // per], t, i % per), p)


def _mma(e: "SegmentEmitter", op: Operation) -> None:
    """This lane's D elements: each from the row of A and the column of B it needs, read as
    vectors from the dense rows _mma_scatter wrote, added to C in the order k = 0, 1, ..."""
    spec = _spec(op)
    b = e.b
    _, _, k = spec.dims()
    first, _ = _buffers(e, op)
    size = I64(e.kc.local_size)
    t_in, t_c, t_d = spec.types["a"], spec.types["c"], spec.types["d"]
    ety = _elem_type(t_in)
    esize = 8 if ety == F64 else 4
    vty = ir.VectorType(ety, k)
    lay_d = spec.layout("d")
    assert lay_d is not None
    offs = lay_d[2]
    nd = len(offs)
    # the distinct rows of A and columns of B this lane's outputs use, one vector load each
    row_offs = sorted({r for r, _ in offs})
    col_offs = sorted({c for _, c in offs})

    def lines(which: str, distinct: list[int]) -> ir.Value:
        vecs = []
        for off in distinct:
            index = next(i for i, (r, c) in enumerate(offs) if (r if which == "a" else c) == off)
            row, col = _lane_coords(e, lay_d, index)
            at = b.mul(row if which == "a" else col, size)
            if which == "b":
                at = b.add(at, I64(k * esize))
            vec = b.load(b.bitcast(b.gep(first, [at]), vty.as_pointer()))
            vec.align = esize
            vecs.append(vec)
        return _concat(b, vecs)

    all_a, all_b = lines("a", row_offs), lines("b", col_offs)
    # the outputs as one vector: for k = 0, 1, ...: D += A[row(e), k] * B[k, col(e)], element
    # e of the vector being output e (the order of the sums is that of each element alone)
    c_regs = [e.get(v) for v in op.operands[1:]]
    per_c = per_register(t_c) if t_c == "f16" else 1
    is_int = t_in in ("s8", "u8")
    wide = is_int and spec.satfinite
    acc_ty = I64 if wide else ety
    acc: ir.Value = ir.Constant(ir.VectorType(acc_ty, nd), ir.Undefined)
    for d_index in range(nd):
        c = _value(e, c_regs[d_index // per_c], t_c, d_index % per_c)
        acc = b.insert_element(acc, b.sext(c, I64) if wide else c, I32(d_index))
    fma = None
    if t_in == "f64":
        vf = ir.VectorType(F64, nd)
        fma = e.mod.intrinsic(f"llvm.fma.v{nd}f64", vf, [vf, vf, vf])
    for kk in range(k):
        x = b.shuffle_vector(all_a, ir.Constant(all_a.type, ir.Undefined), ir.Constant(
            ir.VectorType(I32, nd), [row_offs.index(r) * k + kk for r, _ in offs]))
        y = b.shuffle_vector(all_b, ir.Constant(all_b.type, ir.Undefined), ir.Constant(
            ir.VectorType(I32, nd), [col_offs.index(c) * k + kk for _, c in offs]))
        if wide:
            vt = ir.VectorType(I64, nd)
            acc = b.add(acc, b.mul(b.sext(x, vt), b.sext(y, vt)))
        elif is_int:
            acc = b.add(acc, b.mul(x, y))
        elif fma is not None:
            acc = b.call(fma, [x, y, acc])
        else:
            # the product is exact in f32: one rounding, as fma
            acc = b.fadd(acc, b.fmul(x, y))
    results: list[ir.Value] = []
    for d_index in range(nd):
        v = b.extract_element(acc, I32(d_index))
        if wide:
            lo, hi = I64(-(1 << 31)), I64((1 << 31) - 1)
            v = b.select(b.icmp_signed("<", v, lo), lo, b.select(b.icmp_signed(">", v, hi), hi, v))
            v = b.trunc(v, I32)
        results.append(v)
    if t_d == "f16":
        halves = [b.zext(f32_to_half(b, v, "f16"), I32) for v in results]
        regs = [b.or_(halves[i], b.shl(halves[i + 1], I32(16))) for i in range(0, len(offs), 2)]
    else:
        regs = results
    for r, v in zip(op.results, regs):
        e.define(r, e.coerce_bits(v, e.llvm_type(r)))


def _ldmatrix(e: "SegmentEmitter", op: Operation) -> None:
    spec = parse_ldmatrix(tuple(op.attributes["mods"]))
    assert not isinstance(spec, str)
    b = e.b
    first, _ = _buffers(e, op)
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


def _row_pointer(e: "SegmentEmitter", first: ir.Value, source_lane: ir.Value, shared: bool
                 ) -> ir.Value:
    """The row address lane `source_lane` of the warp gave (ldmatrix/stmatrix)."""
    b = e.b
    rec = b.gep(first, [b.mul(source_lane, I64(e.kc.local_size))])
    addr = b.load(b.bitcast(rec, I64.as_pointer()))
    return b.gep(e.shared, [addr]) if shared else b.inttoptr(addr, PTR)


def _stmatrix(e: "SegmentEmitter", op: Operation) -> None:
    """This lane's registers to the rows other lanes' addresses name (ldmatrix reversed)."""
    spec = parse_ldmatrix(tuple(op.attributes["mods"]), "stmatrix")
    assert not isinstance(spec, str)
    b = e.b
    first, _ = _buffers(e, op)
    lane = b.and_(e.linear_tid64, I64(31))
    g, t = b.lshr(lane, I64(2)), b.and_(lane, I64(3))
    shared = spec.space == "shared"
    for mi, v in enumerate(op.operands[1:]):
        word = e.coerce_bits(e.get(v), I32)
        if not spec.trans:
            p = b.gep(_row_pointer(e, first, b.add(I64(8 * mi), g), shared), [b.mul(t, I64(4))])
            b.store(word, b.bitcast(p, I32.as_pointer()))
        else:
            for half in (0, 1):
                src = b.add(I64(8 * mi + half), b.mul(t, I64(2)))
                p = b.gep(_row_pointer(e, first, src, shared), [b.mul(g, I64(2))])
                b.store(b.trunc(b.lshr(word, I32(16 * half)), I16), b.bitcast(p, I16.as_pointer()))


def _movmatrix(e: "SegmentEmitter", op: Operation) -> None:
    """Lane l's register of the transposed 8x8 matrix: M[2t][g] and M[2t + 1][g], where
    M[r][c] is half c % 2 of lane 4r + c / 2's register."""
    b = e.b
    first, _ = _buffers(e, op)
    lane = b.and_(e.linear_tid64, I64(31))
    g, t = b.lshr(lane, I64(2)), b.and_(lane, I64(3))
    size = I64(e.kc.local_size)
    shift = b.trunc(b.mul(b.and_(g, I64(1)), I64(16)), I32)
    halves = []
    for dr in (0, 1):
        src = b.add(b.mul(b.add(b.mul(t, I64(2)), I64(dr)), I64(4)), b.lshr(g, I64(1)))
        word = b.load(b.bitcast(b.gep(first, [b.mul(src, size)]), I32.as_pointer()))
        halves.append(b.and_(b.lshr(word, shift), I32(0xFFFF)))
    v = b.or_(halves[0], b.shl(halves[1], I32(16)))
    e.define(op.results[0], e.coerce_bits(v, e.llvm_type(op.results[0])))
