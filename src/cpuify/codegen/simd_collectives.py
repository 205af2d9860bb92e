"""Warp collectives as vector instructions across the lanes of a warp (COX's SIMD lowering
of warp functions), for the collectives the `simd-collectives` pass marked: a loop over the
warps of the block, each warp's 32 values loaded as one `<32 x i64>` vector and exchanged
with vector operations, the results stored as one vector.

    shfl.down/up  a contiguous vector load 32 values on (the guard zones around xval make
                  it safe at the block's ends), selected where the source is in the segment
    shfl.bfly     five constant xor-shuffles (`shufflevector`), each taken where its bit of
                  the (block-uniform) lane mask is set
    shfl.idx      full width: one value broadcast (splat)
    vote          `(value & 1) != 0` as `<32 x i1>`, bitcast to the i32 ballot
    redux         `llvm.vector.reduce.*` over the `<32 x i32>`

Used when every thread of the block waits at the collective, none has exited and the block
is whole warps; the scalar exchange (or the runtime scheduler) does the rest."""

from __future__ import annotations

from llvmlite import ir

from cpuify.codegen.lowering import I1, I32, I64

LANES = 32
V64 = ir.VectorType(I64, LANES)
V32 = ir.VectorType(I32, LANES)
V1 = ir.VectorType(I1, LANES)

#: redux modifier -> llvm.vector.reduce.* (min/max by signedness)
_REDUCE = {"add": "add", "and": "and", "or": "or", "xor": "xor"}


def _splat(b: ir.IRBuilder, x: ir.Value, vty: ir.VectorType) -> ir.Value:
    v = b.insert_element(ir.Constant(vty, ir.Undefined), x, I32(0))
    return b.shuffle_vector(v, ir.Constant(vty, ir.Undefined), ir.Constant(V32, [0] * LANES))


def _lanes() -> ir.Constant:
    return ir.Constant(V32, list(range(LANES)))


def simd_supported(kind: str, mods: list[str], operands: list[int | None]) -> bool:
    """Whether vector_exchange handles this collective (shfl.idx only at full width, known
    from a constant clamp word)."""
    if kind == "shfl" and "idx" in mods:
        c = operands[1]
        return c is not None and (c >> 8) & 31 == 0
    return kind in ("shfl", "vote", "redux")


def vector_exchange(mod, b: ir.IRBuilder, kind: str, mods: list[str],  # type: ignore[no-untyped-def]
                    xval: ir.Value, xout: ir.Value, xpred: ir.Value, base: ir.Value,
                    bval: ir.Value | None, cword: ir.Value | None) -> None:
    """The collective for the 32 lanes from thread `base` (i64): reads xval, writes xout
    and xpred.  `bval` and `cword` (i32, block-uniform): a shuffle's lane operand and clamp
    word."""
    vptr = V64.as_pointer()

    def load_lanes(first: ir.Value) -> ir.Value:
        ld = b.load(b.bitcast(b.gep(xval, [first]), vptr))
        ld.align = 8
        return ld

    own = load_lanes(base)
    pred_v: ir.Value = ir.Constant(V1, [1] * LANES)
    if kind == "shfl":
        assert bval is not None and cword is not None
        lane_b = b.and_(bval, I32(31))
        cval = b.and_(cword, I32(31))
        segmask = b.and_(b.lshr(cword, I32(8)), I32(31))
        lanes = _lanes()
        seg_v = _splat(b, segmask, V32)
        maxlane = b.or_(b.and_(lanes, seg_v), _splat(b, b.and_(cval, b.xor(segmask, I32(-1))), V32))
        bv = _splat(b, lane_b, V32)
        if "up" in mods:
            pred_v = b.icmp_signed(">=", b.sub(lanes, bv), maxlane)
            moved = load_lanes(b.sub(base, b.zext(lane_b, I64)))
        elif "down" in mods:
            pred_v = b.icmp_signed("<=", b.add(lanes, bv), maxlane)
            moved = load_lanes(b.add(base, b.zext(lane_b, I64)))
        elif "bfly" in mods:
            pred_v = b.icmp_signed("<=", b.xor(lanes, bv), maxlane)
            moved = own
            undef = ir.Constant(V64, ir.Undefined)
            for k in range(5):
                swapped = b.shuffle_vector(moved, undef,
                                           ir.Constant(V32, [l ^ (1 << k) for l in range(LANES)]))
                bit = b.icmp_unsigned("!=", b.and_(lane_b, I32(1 << k)), I32(0))
                moved = b.select(bit, swapped, moved)
        else:   # idx at full width: every lane reads lane b
            pred_v = b.icmp_signed("<=", bv, maxlane)
            one = b.load(b.gep(xval, [b.add(base, b.zext(lane_b, I64))]))
            moved = _splat(b, one, V64)
        out = b.select(pred_v, moved, own)
    elif kind == "vote":
        bits = b.icmp_unsigned("!=", b.and_(own, _splat(b, I64(1), V64)), ir.Constant(V64, [0] * LANES))
        ballot = b.bitcast(bits, I32)
        if "ballot" in mods:
            r = ballot
        elif "all" in mods:
            r = b.zext(b.icmp_unsigned("==", ballot, I32(-1)), I32)
        elif "any" in mods:
            r = b.zext(b.icmp_unsigned("!=", ballot, I32(0)), I32)
        else:   # uni
            r = b.zext(b.or_(b.icmp_unsigned("==", ballot, I32(0)),
                             b.icmp_unsigned("==", ballot, I32(-1))), I32)
        out = _splat(b, b.zext(r, I64), V64)
    else:       # redux
        vals = b.trunc(own, V32)
        op = next(m for m in mods if m in ("add", "min", "max", "and", "or", "xor"))
        if op in ("min", "max"):
            name = ("s" if "s32" in mods else "u") + op
        else:
            name = _REDUCE[op]
        fn = mod.intrinsic(f"llvm.vector.reduce.{name}.v32i32", I32, [V32])
        out = _splat(b, b.zext(b.call(fn, [vals]), I64), V64)
    st = b.store(out, b.bitcast(b.gep(xout, [base]), vptr))
    st.align = 8
    pst = b.store(b.zext(pred_v, V32), b.bitcast(b.gep(xpred, [base]), V32.as_pointer()))
    pst.align = 4
