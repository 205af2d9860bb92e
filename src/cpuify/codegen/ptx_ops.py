"""LLVM lowering of `ptx.*` ops: PTX instruction semantics (ISA 9.x), one handler per opcode.

Rounding: `.rn` is IEEE default; directed `.rz/.rm/.rp` on add/sub/mul/div/sqrt/rcp and
fma.f32 are computed exactly from the round-to-nearest result and the sign of its exact
error (error-free transformations, in double for f32 so the error cannot underflow);
`.ftz` flushes subnormal inputs and outputs; `.sat` clamps to [0, 1].
Integer division by zero yields all ones instead of a CPU fault.

This module holds the helpers the handlers share (operands, results, `.ftz`/`.sat`, the
directed-rounding emulation) and the memory instructions; the instructions the table
spells out (ir/ptx_table.py: arithmetic with its rounding modes, bitwise, bit fields and
bytes, comparisons, selects, math functions, conversions) are lowered from it by
ptx_spec.py (moves and address conversions included)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from cpuify.analysis.pointers import memory_space
from cpuify.codegen.half_float import f32_to_half, half_to_f32
from cpuify.codegen.lowering import (
    F32, F64, I1, I8, I16, I32, I64, PTR, handles, _width,
)
from cpuify.codegen.denormals import folds_to_operand, known_flushed
from cpuify.frontend.ptx_ast import type_size
from cpuify.ir.core import BlockArgument, Operation, Value
from cpuify.ir.modifiers import has, mods, ty, types

if TYPE_CHECKING:
    from cpuify.codegen.segment_emitter import SegmentEmitter


def call(e: SegmentEmitter, name: str, ret: ir.Type, args: list[ir.Value]) -> ir.Value:
    fn = e.mod.intrinsic(name, ret, [a.type for a in args])
    return e.b.call(fn, args)


def fsuffix(t: ir.Type) -> str:
    return {32: "f32", 64: "f64", 16: "f16"}[_width(t)]


# ops whose f32 operands reach an SSE/AVX arithmetic instruction as they are (which MXCSR's
# DAZ flushes), and whose round-to-nearest results come from one (which FTZ flushes); abs,
# neg, min/max, the approximations and directed roundings work on bits and flush in code
_HW_INPUTS = {"ptx.add", "ptx.sub", "ptx.mul", "ptx.fma", "ptx.mad", "ptx.setp", "ptx.set",
              "ptx.slct"}
_HW_RESULTS = {"ptx.add", "ptx.sub", "ptx.mul", "ptx.fma", "ptx.mad"}


def ftz(e: SegmentEmitter, v: ir.Value, on: bool, t: str = "f32") -> ir.Value:
    """Flush a subnormal f32, or an f16 held as its bits, to a zero of the same sign."""
    if on and t == "f16" and v.type == ir.IntType(16):
        b = e.b
        tiny = b.icmp_unsigned("==", b.and_(v, ir.Constant(v.type, 0x7C00)), ir.Constant(v.type, 0))
        return b.select(tiny, b.and_(v, ir.Constant(v.type, 0x8000)), v)
    if not on or v.type != F32:
        return v
    b = e.b
    mag = call(e, "llvm.fabs.f32", F32, [v])
    tiny = b.fcmp_ordered("<", mag, ir.Constant(F32, 1.1754943508222875e-38))
    zero = call(e, "llvm.copysign.f32", F32, [ir.Constant(F32, 0.0), v])
    return b.select(tiny, zero, v)


def saturate(e: SegmentEmitter, v: ir.Value) -> ir.Value:
    """Clamp to [+0, 1]; NaN and -0 become +0 (PTX .sat).  Two selects on ordered compares,
    `v > 0 ? v : +0` (false for NaN and -0) and `lo < 1 ? lo : 1`: x86's max and min
    instructions, which return their second operand where a compare is false, take them
    one each (maxnum/minnum and a NaN test were three instructions)."""
    b = e.b
    zero, one = ir.Constant(v.type, 0.0), ir.Constant(v.type, 1.0)
    lo = b.select(b.fcmp_ordered(">", v, zero), v, zero)
    return b.select(b.fcmp_ordered("<", lo, one), lo, one)


def nextafter(e: SegmentEmitter, v: ir.Value, up: bool) -> ir.Value:
    """The float adjacent to v towards +inf (up) or -inf; NaN/inf in that direction unchanged."""
    b = e.b
    w = _width(v.type)
    it = ir.IntType(w)
    bits = b.bitcast(v, it)
    sign = b.icmp_signed("<", bits, it(0))
    is_zero = b.fcmp_ordered("==", v, ir.Constant(v.type, 0.0))
    # moving away from zero means bits+1, towards zero bits-1
    away = b.xor(sign, I1(1)) if up else sign
    stepped = b.select(away, b.add(bits, it(1)), b.sub(bits, it(1)))
    smallest = it(1) if up else it((1 << (w - 1)) | 1)
    res = b.select(is_zero, smallest, stepped)
    out = b.bitcast(res, v.type)
    # NaN stays; +-inf stays when stepping away from zero, else becomes +-MAX
    is_nan = b.fcmp_unordered("uno", v, v)
    is_inf = b.fcmp_ordered("==", call(e, f"llvm.fabs.{fsuffix(v.type)}", v.type, [v]),
                            ir.Constant(v.type, float("inf")))
    keep = b.or_(is_nan, b.and_(is_inf, away))
    return b.select(keep, v, out)


def all_finite(e: SegmentEmitter, values: list[ir.Value]) -> ir.Value:
    b = e.b
    ok: ir.Value = I1(1)
    for v in values:
        mag = call(e, f"llvm.fabs.{fsuffix(v.type)}", v.type, [v])
        ok = b.and_(ok, b.fcmp_ordered("<", mag, ir.Constant(v.type, float("inf"))))
    return ok


def directed(e: SegmentEmitter, rn: ir.Value, err_sign: ir.Value, mode: str | None,
             inputs: list[ir.Value] | None = None, exact_inf: ir.Value | None = None) -> ir.Value:
    """Adjust a round-to-nearest result `rn` whose exact error (true - rn) has the sign of
    `err_sign` (a float) to the directed rounding `mode`.  With `inputs` given, an overflow
    to +-inf from finite inputs is treated as an error towards zero (so .rz gives MAX)."""
    if mode in (None, "rn"):
        return rn
    b = e.b
    if inputs is not None:
        mag = call(e, f"llvm.fabs.{fsuffix(rn.type)}", rn.type, [rn])
        overflow = b.and_(b.fcmp_ordered("==", mag, ir.Constant(rn.type, float("inf"))),
                          all_finite(e, inputs))
        if exact_inf is not None:      # x/0 is an exact infinity, not an overflow
            overflow = b.and_(overflow, b.not_(exact_inf))
        towards_zero = b.fneg(rn)
        if err_sign.type != rn.type:
            towards_zero = b.fpext(towards_zero, err_sign.type)
        err_sign = b.select(overflow, towards_zero, err_sign)
    zero = ir.Constant(err_sign.type, 0.0)
    pos = b.fcmp_ordered(">", err_sign, zero)
    neg = b.fcmp_ordered("<", err_sign, zero)
    if mode == "rp":
        return b.select(pos, nextafter(e, rn, True), rn)
    if mode == "rm":
        return b.select(neg, nextafter(e, rn, False), rn)
    # rz: toward zero
    rn_pos = b.fcmp_ordered(">", rn, ir.Constant(rn.type, 0.0))
    rn_neg = b.fcmp_ordered("<", rn, ir.Constant(rn.type, 0.0))
    down = b.and_(rn_pos, neg)
    up = b.and_(rn_neg, pos)
    r = b.select(down, nextafter(e, rn, False), rn)
    return b.select(up, nextafter(e, r, True), r)


def mul_error_f64(e: SegmentEmitter, a: ir.Value, c: ir.Value, r: ir.Value) -> ir.Value:
    """Sign of a*c - r for doubles, exact even when the product underflows: the smaller
    factor and r are scaled by 2^600 first (the smaller factor of a tiny product is tiny),
    and when the other factor is tiny too (below 2^-300: 1e-310 * 1e-310, a product below
    the smallest subnormal) it and r again, so that the scaled product is a normal number."""
    b = e.b
    mag_a = call(e, "llvm.fabs.f64", F64, [a])
    mag_c = call(e, "llvm.fabs.f64", F64, [c])
    a_small = b.fcmp_ordered("<", mag_a, mag_c)
    small, other = b.select(a_small, a, c), b.select(a_small, c, a)
    one, up = ir.Constant(F64, 1.0), ir.Constant(F64, 2.0 ** 600)
    tiny = b.fcmp_ordered("<", call(e, "llvm.fabs.f64", F64, [r]), ir.Constant(F64, 2.0 ** -900))
    both = b.and_(tiny, b.fcmp_ordered("<", b.select(a_small, mag_c, mag_a),
                                       ir.Constant(F64, 2.0 ** -300)))
    k1 = b.select(tiny, up, one)
    k2 = b.select(both, up, one)
    r_scaled = b.fmul(b.fmul(r, k1), k2)          # (in two steps: 2^1200 is no double)
    return call(e, "llvm.fma.f64", F64, [b.fmul(small, k1), b.fmul(other, k2), b.fneg(r_scaled)])


def div_error(e: SegmentEmitter, a: ir.Value, c: ir.Value, q: ir.Value) -> ir.Value:
    """A value with the sign of a/c - q (q the rounded quotient): the exact remainder
    a - q*c (in double for floats, so it cannot underflow) times the sign of c.  For doubles
    a tiny dividend (below 2^-900) and q are scaled by 2^200 first: the remainder of a
    subnormal quotient or dividend would underflow to a zero and lose its sign."""
    b = e.b
    if a.type == F32:
        a, c, q = b.fpext(a, F64), b.fpext(c, F64), b.fpext(q, F64)
    else:
        mag = call(e, "llvm.fabs.f64", F64, [a])
        scale = b.select(b.fcmp_ordered("<", mag, ir.Constant(F64, 2.0 ** -900)),
                         ir.Constant(F64, 2.0 ** 200), ir.Constant(F64, 1.0))
        a, q = b.fmul(a, scale), b.fmul(q, scale)
    rem = call(e, f"llvm.fma.{fsuffix(a.type)}", a.type, [b.fneg(q), c, a])
    neg_c = b.fcmp_ordered("<", c, ir.Constant(c.type, 0.0))
    return b.select(neg_c, b.fneg(rem), rem)


def rm_zero(e: SegmentEmitter, r: ir.Value, terms: list[ir.Value],
             exact_zero: ir.Value | None = None) -> ir.Value:
    """IEEE: an exactly zero sum rounded toward -inf is -0, unless every term is +0."""
    b = e.b
    it = ir.IntType(_width(r.type))
    zero = b.fcmp_ordered("==", r, ir.Constant(r.type, 0.0)) if exact_zero is None else \
        b.and_(exact_zero, b.fcmp_ordered("==", r, ir.Constant(r.type, 0.0)))
    all_pos_zero: ir.Value = I1(1)
    for t in terms:
        all_pos_zero = b.and_(all_pos_zero,
                              b.icmp_unsigned("==", b.bitcast(t, ir.IntType(_width(t.type))),
                                              ir.IntType(_width(t.type))(0)))
    neg_zero = b.bitcast(it(1 << (_width(r.type) - 1)), r.type)
    return b.select(b.and_(zero, b.not_(all_pos_zero)), neg_zero, r)


def wrap_flags(e: SegmentEmitter, op: Operation) -> list[str]:
    """nsw for index arithmetic whose wrapping would be undefined (analysis.no_signed_wrap)."""
    return ["nsw"] if op.results and op.results[0] in e.kc.nsw else []


def src(e: SegmentEmitter, op: Operation, i: int, t: str) -> ir.Value:
    return e.operand(op.operands[i], t)


def _flushed_by_cpu(e: SegmentEmitter, op: Operation, names: set[str]) -> bool:
    """Whether MXCSR's DAZ/FTZ flush this operand/result of `op` (codegen/denormals.py):
    a kernel run with them set, an op in `names`, rounded to nearest, not approximate."""
    return e.kc.hardware_flush and op.name in names and not (
        {"rz", "rm", "rp", "approx", "full"} & set(mods(op)))


def fsrc(e: SegmentEmitter, op: Operation, i: int, t: str) -> ir.Value:
    # (an f16 subnormal is a normal f32, which the CPU's DAZ keeps: flushed here; a cvt's
    # .ftz acts on its f32 side only)
    if t == "f16":
        return ftz(e, e.operand(op.operands[i], t), has(op, "ftz") and op.name != "ptx.cvt", t)
    on = has(op, "ftz") and not _flushed_by_cpu(e, op, _HW_INPUTS) and \
        not known_flushed(op.operands[i])
    return ftz(e, e.operand(op.operands[i], t), on)


def fdone(e: SegmentEmitter, op: Operation, v: ir.Value, t: str,
          never_subnormal: bool = False) -> None:
    # neg/abs, and an f32 -> f32 cvt (an integral value, saturated or as it is), of a value
    # that is never subnormal is never subnormal; a square root (of anything: sqrt(2^-149) =
    # 2^-74.5) and a reciprocal square root (rsqrt(FLT_MAX) ~ 2^-64) never are.  An op LLVM
    # may fold to a move of its operand (x * 1) leaves the CPU nothing to flush: flushed here
    by_cpu = _flushed_by_cpu(e, op, _HW_RESULTS) and not folds_to_operand(op)
    keeps_flushed = op.name in ("ptx.neg", "ptx.abs") or \
        op.name == "ptx.cvt" and all(x == "f32" for x in types(op))
    # never_subnormal: the lowering proved the value normal, zero, infinite or NaN, or
    # flushed it itself (ptx_spec_arith: fma on one binade's grid, ex2.approx.ftz)
    v = ftz(e, v, has(op, "ftz") and not by_cpu and not never_subnormal and not (
        keeps_flushed and known_flushed(op.operands[0])) and
        op.name not in ("ptx.sqrt", "ptx.rsqrt"))
    if has(op, "sat"):
        v = saturate(e, v)
    e.result(op, v, t)


def masked_thread_index(e: SegmentEmitter, op: Operation, value: int, mask: int,
                        rem: bool = False) -> ir.Value | None:
    """`operand[value] & operand[mask]` (a run of ones: `& 31`, `& 248`; or `% modulus`, a
    power of two) with the mask hidden from LLVM, where the operand is a thread index plus an
    offset that wraps in the block (`(tid + 1) & 31`): LLVM 22's loop vectorizer takes such an index for a consecutive one
    once another access of the loop needs a run-time no-wrap check (codegen/jit.py, "masked
    indices").  None where the pattern is not there (the plain `and`/`rem` is emitted)."""
    from cpuify.codegen.helpers import masks_shifted_thread_index, uniform_constant
    t = ty(op)
    ntid = tuple(e.kc.launch_dims) if e.kc.launch_dims is not None else None
    if t not in ("b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64"):
        return None
    if rem:
        modulus = uniform_constant(op.operands[mask], ntid)
        if modulus is None:
            return None
        m = modulus - 1
    else:
        m = uniform_constant(op.operands[mask], ntid)
        if m is None:
            return None
        m &= (1 << (8 * type_size(t))) - 1
        run = m >> ((m & -m).bit_length() - 1) if m else 0
        if run & (run + 1):
            return None                    # not one run of ones (`& 31`, `& 248`)
        modulus = 1 << m.bit_length()
    if modulus < 2 or modulus & (modulus - 1) or modulus >= 1 << (8 * type_size(t)):
        return None
    if not any(masks_shifted_thread_index(v, modulus, ntid, m & -m)
               for v in _merged_values(e, op.operands[value])):
        return None
    if not _may_reach_an_address(op):
        return None                        # a parity test, a value stored: no index
    a = src(e, op, value, t)
    return e.b.and_(a, e.opaque_int(a.type, m))


def _merged_values(e: SegmentEmitter, v: Value, depth: int = 4) -> list[Value]:
    """v, or where v is a block argument the values it merges (through up to `depth` joins):
    nvcc takes the `% n` of `if (c) i = t + 1; else i = 7 * t; s[i % n]` after the join (the
    fuzzer's fz_2801_1669, thread 127 of a 128-thread block read past the array)."""
    out: list[Value] = []
    work, seen = [(v, 0)], set()
    while work:
        x, d = work.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, BlockArgument) and d < depth:
            work.extend((y, d + 1) for y in e.kc.incoming_values().get(x, ()))
        else:
            out.append(x)
    return out


# integer ops an index goes through on its way to an address
_INDEX_ARITHMETIC = frozenset(f"ptx.{n}" for n in (
    "add", "sub", "mul", "mad", "shl", "shr", "and", "or", "xor", "cvt", "mov", "cvta", "selp",
    "min", "max", "neg", "rem", "div"))
# uses that read a value but never as an address
_NOT_ADDRESS_USES = frozenset(("ptx.setp",))


def _may_reach_an_address(op: Operation, limit: int = 256) -> bool:
    """Whether op's result may become part of a memory address: through integer arithmetic
    to a load's or store's address operand, or to any use this walk does not know (a branch
    argument, a call: then it may).  Compares and the data operand of a store are not."""
    seen: set[int] = set()
    work = [r for r in op.results]
    while work:
        v = work.pop()
        for user in v.uses:
            if id(user) in seen:
                continue
            seen.add(id(user))
            if len(seen) > limit:
                return True
            if user.name in _NOT_ADDRESS_USES:
                continue
            if user.name == "ptx.st" and user.operands[0] is not v:
                continue
            if user.name in _INDEX_ARITHMETIC:
                work.extend(user.results)
                continue
            return True
    return False


# --- memory -------------------------------------------------------------------------------------

@handles("ptx.cp_async")
def _cp_async(e: SegmentEmitter, op: Operation) -> None:
    """cp.async copied at issue (lifting/translate.py says why that is exact): cp-size
    bytes to shared memory, the first min(src-size, cp-size) from global memory, zeros
    after them.  A full copy (src-size a constant >= cp-size, the usual case) is one vector
    load and store; otherwise a memcpy of the bytes read and a memset of the rest."""
    from cpuify.codegen.helpers import const_int
    b = e.b
    size = int(op.attributes["size"])
    dst = b.gep(e.shared, [e.shared_index(b, op, e.get(op.operands[0]))])
    src_v = e.get(op.operands[1])
    if not isinstance(src_v.type, ir.PointerType):
        src_v = b.inttoptr(e.int_resize(src_v, I64, False), PTR)
    src_off = int(op.attributes.get("src_offset", 0))
    src_p = b.gep(src_v, [I64(src_off)]) if src_off else src_v
    known = const_int(op.operands[2])
    if known is not None and known >= size:
        vt = ir.VectorType(I32, size // 4) if size > 4 else I32
        v = b.load(b.bitcast(src_p, vt.as_pointer()))
        v.align = 4
        st = b.store(v, b.bitcast(dst, vt.as_pointer()))
        st.align = size
        return
    n = e.int_resize(call(e, "llvm.umin.i32", I32, [src(e, op, 2, "u32"), I32(size)]), I64, False)
    call(e, "llvm.memcpy.p0.p0.i64", ir.VoidType(), [dst, src_p, n, I1(0)])
    call(e, "llvm.memset.p0.i64", ir.VoidType(), [b.gep(dst, [n]), I8(0), b.sub(I64(size), n), I1(0)])


def half_atomic_add(e: SegmentEmitter, op: Operation, ptr: ir.Value, val: ir.Value, t: str,
                     space: str) -> ir.Value:
    """atom/red.add.noftz.{f16,bf16,f16x2,bf16x2}: each half added in f32 and rounded to
    nearest even once, stored with a compare-and-swap loop (CPUs have no half-precision
    atomic add); in shared memory a plain update (one worker runs the whole block)."""
    b = e.b
    lane = t[:-2] if t.endswith("x2") else t
    it = val.type
    size = type_size(t)

    def added(old: ir.Value) -> ir.Value:
        out: ir.Value = it(0)
        for k in range(it.width // 16):
            def half(v: ir.Value) -> ir.Value:
                return b.trunc(b.lshr(v, it(16 * k)), I16) if it.width > 16 else v
            s = b.fadd(half_to_f32(b, half(old), lane), half_to_f32(b, half(val), lane))
            h = f32_to_half(b, s, lane)
            out = b.or_(out, b.shl(b.zext(h, it), it(16 * k))) if it.width > 16 else h
        return out

    if space == "shared":
        old = b.load(ptr)
        old.align = size
        st = b.store(added(old), ptr)
        st.align = size
        e.serial_accesses.update((old, st))
        return old
    first = b.load(ptr)
    first.align = size
    entry = b.block
    loop = e.fn.append_basic_block("atom.half")
    done = e.fn.append_basic_block("atom.half.done")
    b.branch(loop)
    b.position_at_end(loop)
    old = b.phi(it)
    old.add_incoming(first, entry)
    res = b.cmpxchg(ptr, old, added(old), "monotonic", "monotonic")
    old.add_incoming(b.extract_value(res, 0), loop)
    b.cbranch(b.extract_value(res, 1), done, loop)
    b.position_at_end(done)
    e.serial_accesses.add(first)
    return old


def rmw_value(e: SegmentEmitter, kind: str, old: ir.Value, val: ir.Value) -> ir.Value:
    b = e.b
    if kind == "add":
        return b.add(old, val)
    if kind == "fadd":
        return b.fadd(old, val)
    if kind in ("and", "or", "xor"):
        return {"and": b.and_, "or": b.or_, "xor": b.xor}[kind](old, val)
    if kind == "xchg":
        return val
    if kind in ("min", "max", "umin", "umax"):
        return call(e, f"llvm.{'s' + kind if kind in ('min', 'max') else kind}.i{old.type.width}", old.type, [old, val])
    if kind in ("fmin", "fmax"):
        return call(e, f"llvm.{'minnum' if kind == 'fmin' else 'maxnum'}.{fsuffix(old.type)}", old.type, [old, val])
    if kind == "uinc_wrap":
        return b.select(b.icmp_unsigned(">=", old, val), old.type(0), b.add(old, old.type(1)))
    if kind == "udec_wrap":
        wrap = b.or_(b.icmp_unsigned("==", old, old.type(0)), b.icmp_unsigned(">", old, val))
        return b.select(wrap, val, b.sub(old, old.type(1)))
    raise AssertionError(kind)


# An mbarrier object (64 bits of shared memory; PTX leaves its layout to the implementation):
# bits 0-19 the arrivals pending in the current phase, 20-39 the arrivals each phase expects,
# 40-62 the transaction count pending (expect_tx / complete_tx), bit 63 the phase parity.
# The state an arrive returns is the object before the arrival (its bit 63: the phase it
# arrived in).  A block runs on one worker, one CUDA thread at a time: the updates need no
# CPU atomics (as shared-memory atomics).
MBAR_COUNT = 0xFFFFF
MBAR_EXPECTED_SHIFT = 20
MBAR_TX_SHIFT = 40
MBAR_TX = 0x7FFFFF
MBAR_PHASE_SHIFT = 63


@handles("ptx.mbarrier")
def _mbarrier(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    m = set(mods(op))
    if "pending_count" in m:
        state = e.operand(op.operands[0], "b64")
        e.result(op, b.trunc(b.and_(state, I64(MBAR_COUNT)), I32), "u32")
        return
    space = "shared" if any(x.startswith("shared") for x in m) else memory_space(op)
    ptr = b.bitcast(e.address(op, space), I64.as_pointer())

    def store(v: ir.Value) -> None:
        st = b.store(v, ptr)
        st.align = 8
        e.serial_accesses.add(st)

    if "init" in m:
        n = b.and_(b.zext(e.operand(op.operands[1], "u32"), I64), I64(MBAR_COUNT))
        store(b.or_(n, b.shl(n, I64(MBAR_EXPECTED_SHIFT))))
        return
    if "inval" in m:
        store(I64(0))
        return
    old = b.load(ptr)
    old.align = 8
    e.serial_accesses.add(old)
    phase = b.lshr(old, I64(MBAR_PHASE_SHIFT))
    if "test_wait" in m or "try_wait" in m:
        if "parity" in m:
            want = b.and_(b.zext(e.operand(op.operands[1], "u32"), I64), I64(1))
        else:
            want = b.lshr(e.operand(op.operands[1], "b64"), I64(MBAR_PHASE_SHIFT))
        e.result(op, b.icmp_unsigned("!=", phase, want), "pred")     # that phase is over
        return
    pending = b.and_(old, I64(MBAR_COUNT))
    expected = b.and_(b.lshr(old, I64(MBAR_EXPECTED_SHIFT)), I64(MBAR_COUNT))
    tx = b.and_(b.lshr(old, I64(MBAR_TX_SHIFT)), I64(MBAR_TX))
    arg = b.zext(e.operand(op.operands[1], "u32"), I64) if len(op.operands) > 1 else I64(1)
    count = I64(1)
    if "expect_tx" in m:
        tx = b.and_(b.add(tx, arg), I64(MBAR_TX))
    elif "complete_tx" in m:
        tx = b.and_(b.sub(tx, arg), I64(MBAR_TX))
    else:
        count = arg
    complete = ir.Constant(ir.IntType(1), 0)
    if "arrive" in m or "arrive_drop" in m:
        pending = b.and_(b.sub(pending, count), I64(MBAR_COUNT))
        if "arrive_drop" in m:
            expected = b.and_(b.sub(expected, count), I64(MBAR_COUNT))
    if "noComplete" not in m and ("arrive" in m or "arrive_drop" in m or "complete_tx" in m):
        complete = b.and_(b.icmp_unsigned("==", pending, I64(0)), b.icmp_unsigned("==", tx, I64(0)))
    pending = b.select(complete, expected, pending)
    phase = b.xor(phase, b.zext(complete, I64))
    new = b.or_(b.or_(pending, b.shl(expected, I64(MBAR_EXPECTED_SHIFT))),
                b.or_(b.shl(tx, I64(MBAR_TX_SHIFT)), b.shl(phase, I64(MBAR_PHASE_SHIFT))))
    store(new)
    if op.results:
        e.result(op, old, "b64")
