"""LLVM lowering of the PTX instructions the instruction table spells out (ir/ptx_table.py):
one dispatcher per such opcode picks the op's form; a spec form is lowered from its
expressions, a hand-written form calls its `@hand_written` code (none now).

Each function of the expression language (ptx_table.FUNCTIONS) has its lowering, a
`fn_<name>` method of _SpecLowering: here, or in its parts ptx_spec_arith.py (arithmetic
and math functions), ptx_spec_convert.py (conversions), ptx_spec_address.py (addresses
and moves), ptx_spec_memory.py (loads, stores, atomics).  The code generator's own
refinements, which are no part of the semantics, sit around them: pointer arithmetic as
GEPs, moves of pointers, shared loads at clamped or selected indices split into the loads
of their cases, `nsw` on index arithmetic
(analysis.no_signed_wrap), masked thread indices hidden from LLVM, lane-group bitwise ops,
the idle clamp of min/max, the deferred flush of min/max (transforms/flush.py), the
never-NaN workaround of LLVM's minimumnum, directed-rounding fmas on one binade's grid as a
floor/ceil (ptx_spec_arith._quantized_fma, from the operands' ranges in the IR)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from llvmlite import ir

from cpuify.codegen.half_float import f32_to_bf16, half_to_f32
from cpuify.codegen.lowering import (
    F16, HAND_LOWERINGS, I1, I8, I16, I32, I64, PTR, handles, is_float, is_signed,
    ptx_llvm_type,
)
from cpuify.codegen.ptx_ops import (
    call, fdone, fsrc, fsuffix, ftz, masked_thread_index, saturate, src, wrap_flags,
)
from cpuify.codegen.ptx_spec_address import AddressLowering
from cpuify.codegen.ptx_spec_arith import ArithmeticLowering
from cpuify.codegen.ptx_spec_convert import ConvertLowering
from cpuify.codegen.ptx_spec_memory import MemoryLowering
from cpuify.ir.core import Operation, Value
from cpuify.ir.modifiers import mods, ty
from cpuify.ir.ptx_table import (
    BY_IR_OP, Expr, Fn, Form, Lit, Src, is_address_type, memory_order, resolve_param,
    state_space, type_symbols,
)
from cpuify.ir.modifiers import type_size

if TYPE_CHECKING:
    from cpuify.codegen.segment_emitter import SegmentEmitter

Typed = tuple[ir.Value, str]          # an LLVM value and its PTX type


# --- refinements: the code generator's own lowering of some ops, tried first ----------------

def _pointer_arith(e: SegmentEmitter, op: Operation) -> bool:
    """add/sub on a pointer register: a GEP on the pointer operand."""
    res = op.results[0] if op.results else None
    if res is None or res not in e.kc.pointers or is_float(ty(op)):
        return False
    b = e.b
    base_i = 0 if op.operands[0] in e.kc.pointers else 1
    base = e.get(op.operands[base_i])
    off = e.operand(op.operands[1 - base_i], "s64")
    if op.name == "ptx.sub":
        off = b.neg(off)
    e.define(res, b.gep(base, [off]))
    return True


def _pointer_select(e: SegmentEmitter, op: Operation) -> bool:
    res = op.results[0]
    if res not in e.kc.pointers:
        return False
    c = e.operand(op.operands[2], "pred")
    a, d = e.get(op.operands[0]), e.get(op.operands[1])
    e.define(res, e.b.select(c, e.coerce_bits(a, PTR), e.coerce_bits(d, PTR)))
    return True


def _lane_or_masked(e: SegmentEmitter, op: Operation) -> bool:
    """and/xor of a thread index in lane groups (SegmentEmitter.lane_bitwise); `& mask` of
    a wrapping thread index hidden from LLVM (ptx_ops.masked_thread_index)."""
    t = ty(op)
    if e.lane_group is not None:
        v = e.lane_bitwise(op)
        if v is not None:
            e.result(op, v, t)
            return True
    if op.name == "ptx.and":
        masked = masked_thread_index(e, op, 0, 1)
        if masked is None:
            masked = masked_thread_index(e, op, 1, 0)
        if masked is not None:
            e.result(op, masked, t)
            return True
    return False


def _masked_rem(e: SegmentEmitter, op: Operation) -> bool:
    """`(tid + 1) % blockDim.x` in code specialized for a power-of-two block."""
    t = ty(op)
    if is_signed(t):
        return False
    masked = masked_thread_index(e, op, 0, 1, rem=True)
    if masked is None:
        return False
    e.result(op, masked, t)
    return True


def _pointer_move(e: SegmentEmitter, op: Operation) -> bool:
    """mov of an address: the pointer itself (into a pointer register, or from one into a
    64-bit register)."""
    if len(op.operands) != 1 or len(op.results) != 1:
        return False
    v = e.get(op.operands[0])
    r = op.results[0]
    if r in e.kc.pointers or isinstance(v.type, ir.PointerType) and r.type == "i64":
        e.define(r, v)
        return True
    return False


def _split_shared_load(e: SegmentEmitter, op: Operation) -> bool:
    """A weak scalar load of shared memory whose index is clamped or selected: split into
    the loads of the cases (SegmentEmitter.clamped_shared_load, selected_shared_load)."""
    if len(op.results) != 1 or state_space(mods(op)) != "shared" or \
            memory_order(mods(op), "load") != "weak":
        return False
    t = ty(op)
    split = e.clamped_shared_load(op, ptx_llvm_type(t), type_size(t))
    if split is None:
        split = e.selected_shared_load(op, ptx_llvm_type(t), type_size(t))
    if split is None:
        return False
    e.result(op, split, t)
    return True


REFINEMENTS: dict[str, Callable[["SegmentEmitter", Operation], bool]] = {
    "ptx.ld": _split_shared_load, "ptx.ldu": _split_shared_load,
    "ptx.add": _pointer_arith, "ptx.sub": _pointer_arith, "ptx.selp": _pointer_select,
    "ptx.mov": _pointer_move,
    "ptx.and": _lane_or_masked, "ptx.xor": _lane_or_masked, "ptx.rem": _masked_rem,
}


# --- the dispatcher ------------------------------------------------------------------------------

def lower_table_op(e: SegmentEmitter, op: Operation) -> None:
    entry = BY_IR_OP[op.name]
    form = entry.form_of(op)
    if form is None:
        e.kc.error(f"'{'.'.join((entry.opcode, *mods(op)))}': this form of {entry.opcode} is not "
                   "supported by cpuify", op)
        return
    if form.hand:
        HAND_LOWERINGS[op.name](e, op)
        return
    refine = REFINEMENTS.get(op.name)
    if refine is not None and refine(e, op):
        return
    _SpecLowering(e, op, form).run()


for _name, _entry in BY_IR_OP.items():
    if _entry.spec_driven:
        handles(_name)(lower_table_op)


# --- the expressions ---------------------------------------------------------------------------

_ICMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
         "lo": "<", "ls": "<=", "hi": ">", "hs": ">="}
_FCMP_UNORDERED = {"equ": "==", "neu": "!=", "ltu": "<", "leu": "<=", "gtu": ">", "geu": ">="}
_WRAPPING = ("add", "sub", "mul", "shl")


#: (exponent mask, quiet bit) of a float type's bits
_NAN_BITS = {16: (0x7C00, 0x0200), 32: (0x7F800000, 0x00400000),
             64: (0x7FF0000000000000, 0x0008000000000000)}


def _quieted(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """A float with its quiet bit set where it is a NaN (the same value otherwise)."""
    width = {"half": 16, "float": 32, "double": 64}[str(v.type)]
    it = ir.IntType(width)
    exp, quiet = _NAN_BITS[width]
    bits = b.bitcast(v, it)
    magnitude = b.and_(bits, ir.Constant(it, (1 << (width - 1)) - 1))
    is_nan = b.icmp_unsigned(">", magnitude, ir.Constant(it, exp))
    return b.bitcast(b.select(is_nan, b.or_(bits, ir.Constant(it, quiet)), bits), v.type)


class _SpecLowering(ArithmeticLowering, ConvertLowering, AddressLowering, MemoryLowering):
    def __init__(self, e: SegmentEmitter, op: Operation, form: Form) -> None:
        self.e, self.op, self.form = e, op, form
        self.b = e.b
        self.mods = mods(op)
        self.memo: dict[int, Typed] = {}
        self.symbols = type_symbols(self.mods)
        # flush_at_uses (transforms/flush.py): every reader flushes the result, which is then
        # the same as flushing the operands and the result here
        self.deferred = bool(op.attributes.get("flush_at_uses"))
        self.nsw = _nsw_nodes(form)
        self.root = form.results[0] if form.results else None
        # the expressions whose value the lowering proves never subnormal, or has flushed
        # itself (`fn_ex2` under .ftz): their result needs no flush in fdone
        self.never_subnormal: set[int] = set()

    def run(self) -> None:
        n = len(self.op.results)
        if self.form.dests is not None:
            # a vector form (ld.v4, mov's unpacking): each element computed and written in
            # turn
            for i, r in enumerate(self.form.results[:n]):
                self._write(i, *self.value(r))
        else:
            # the operands of all results, then all results (setp: p, !p, then each combined
            # with the predicate operand; the unused !p: LLVM drops it), then the writes
            for r in self.form.results:
                if isinstance(r, Fn):
                    self.operands(r)
            values = [self.value(r) for r in self.form.results]
            for i, (v, t) in enumerate(values[:n]):
                self._write(i, v, t)
        for x in self.form.effects:         # (a store's writes to memory, in order)
            self.value(x)

    def _write(self, i: int, v: ir.Value, t: str) -> None:
        result = self.form.results[i] if i < len(self.form.results) else None
        if is_address_type(t):              # an address: its 64 bits
            self.e.result(self.op, v, "u64", i)
        elif self.form.flush == "all" and t in ("f16", "bf16"):
            # (half values are their bits here; .ftz flushes an f16 result, as sources,
            # but a cvt's acts on its f32 side only)
            v = ftz(self.e, v, t == "f16" and "ftz" in self.mods and self.op.name != "ptx.cvt", t)
            if "sat" in self.mods:
                v = self._saturated_half(v, t)
            self.e.result(self.op, v, t, i)
        elif self.form.flush == "all" and is_float(t) and not self.deferred:
            fdone(self.e, self.op, v, t, never_subnormal=id(result) in self.never_subnormal)
        else:
            self.e.result(self.op, v, t, i)

    def _saturated_half(self, v: ir.Value, t: str) -> ir.Value:
        """.sat of an f16 in LLVM's half; of a bf16 in f32 (0, 1 and the values between are
        bf16 values: exact)."""
        b = self.b
        if t == "f16":
            return b.bitcast(saturate(self.e, b.bitcast(v, F16)), I16)
        return f32_to_bf16(b, saturate(self.e, half_to_f32(b, v, t)))

    def type_of(self, symbol: str) -> str:
        return self.symbols.get(symbol, symbol)

    def value(self, x: Expr) -> Typed:
        got = self.memo.get(id(x))
        if got is None:
            got = self.memo[id(x)] = self._value(x)
        return got

    def _value(self, x: Expr) -> Typed:
        e = self.e
        if isinstance(x, Src):
            t = self.type_of(x.type)
            if t == "R" or is_address_type(t):   # the register as it is (a pointer stays one)
                return e.get(self.op.operands[x.index]), t
            if is_float(t) and self.form.flush != "none" and not self.deferred:
                return fsrc(e, self.op, x.index, t), t
            return src(e, self.op, x.index, t), t
        if isinstance(x, Lit):
            t = self.type_of(x.type)
            value = float(x.value) if is_float(t) else x.value
            return ir.Constant(ptx_llvm_type(t), value), t
        assert isinstance(x, Fn)
        return getattr(self, "fn_" + x.name)(x, self.operands(x))

    def operands(self, x: Fn) -> list[Typed]:
        for y in x.args:               # the sources of extended operands before extending
            if isinstance(y, Fn) and y.name in ("resize", "ext"):
                while isinstance(y, Fn) and y.name in ("resize", "ext"):
                    y = y.args[0]
                if isinstance(y, Src):
                    self.value(y)
        if x.name == "atomic":         # the pointer to the datum before the data operands
            p, t = self.value(x.args[0])
            self.memo[id(x.args[0])] = (self.b.bitcast(p, ptx_llvm_type(self.type_of("T")).as_pointer()), t)
        return [self.value(y) for y in x.args]

    def flags(self, x: Fn) -> list[str]:
        return wrap_flags(self.e, self.op) if id(x) in self.nsw else []

    def operand_of(self, x: Expr) -> Value | None:
        """The IR operand an expression reads directly (Src), for the analyses below."""
        return self.op.operands[x.index] if isinstance(x, Src) else None

    def fn_neg(self, x: Fn, args: list[Typed]) -> Typed:
        (p, t), = args
        return (self.b.fneg(p) if is_float(t) else self.b.neg(p)), t

    def fn_abs(self, x: Fn, args: list[Typed]) -> Typed:
        (p, t), = args
        if is_float(t):
            return call(self.e, f"llvm.fabs.{fsuffix(p.type)}", p.type, [p]), t
        return call(self.e, f"llvm.abs.i{p.type.width}", p.type, [p, I1(0)]), t

    def fn_min(self, x: Fn, args: list[Typed]) -> Typed:
        return self._min_max(x, args, True, False)

    def fn_max(self, x: Fn, args: list[Typed]) -> Typed:
        return self._min_max(x, args, False, False)

    def fn_min_nan(self, x: Fn, args: list[Typed]) -> Typed:
        return self._min_max(x, args, True, True)

    def fn_max_nan(self, x: Fn, args: list[Typed]) -> Typed:
        return self._min_max(x, args, False, True)

    def _min_max(self, x: Fn, args: list[Typed], is_min: bool, nan: bool) -> Typed:
        (p, t), (q, _) = args
        e, b = self.e, self.b
        if is_float(t):
            sfx = fsuffix(p.type)
            # PTX orders -0 below +0; .NaN propagates NaN, otherwise a NaN operand is
            # ignored: llvm.minimum/maximum and llvm.minimumnum/maximumnum.  (The latter are
            # what the vectorizer knows as reductions; LLVM 22's x86 backend miscompiles
            # them, so jit.optimize replaces them before code generation.)
            name = f"llvm.{'minimum' if is_min else 'maximum'}{'' if nan else 'num'}.{sfx}"
            if nan:
                # quiet a signaling NaN first: LLVM 22's x86 lowering of minimum/maximum
                # tests an operand for NaN with vfpclass's quiet-NaN class only where it
                # knows the other is no NaN, and the CPU's min then returns the other
                # operand (fz_4243_574: min.NaN.f16 of 0x7cd0 and +inf gave +inf).  On the
                # bits (llvm.canonicalize, vectorized to <2 x float>, crashed LLVM's x86
                # instruction selection: fz_4244_64)
                p, q = (_quieted(b, v) for v in (p, q))
            return call(e, name, p.type, [p, q]), t
        kind = ("s" if is_signed(t) else "u") + ("min" if is_min else "max")
        r = call(e, f"llvm.{kind}.i{p.type.width}", p.type, [p, q])
        idle = e.idle_clamp(self.op) if x is self.root else None
        if idle is not None:
            # a clamp that selects the thread-dependent side for every thread of the block:
            # LLVM unswitches the thread loop on this uniform flag, and in the copy where it
            # holds, the clamped index is affine again (a contiguous load, not a gather)
            side, flag = idle
            r = b.select(flag, p if side == 0 else q, r)
        return r, t

    def fn_copysign(self, x: Fn, args: list[Typed]) -> Typed:
        (p, _), (q, t) = args
        return call(self.e, f"llvm.copysign.{fsuffix(q.type)}", q.type, [q, p]), t

    # -- bits
    def fn_and(self, x: Fn, args: list[Typed]) -> Typed:
        (p, t), (q, _) = args
        return self.b.and_(p, q), t

    def fn_or(self, x: Fn, args: list[Typed]) -> Typed:
        (p, t), (q, _) = args
        return self.b.or_(p, q), t

    def fn_xor(self, x: Fn, args: list[Typed]) -> Typed:
        (p, t), (q, _) = args
        return self.b.xor(p, q), t

    def fn_not(self, x: Fn, args: list[Typed]) -> Typed:
        (p, t), = args
        return self.b.not_(p), t

    def fn_shl(self, x: Fn, args: list[Typed]) -> Typed:
        return self._shift(x, args, left=True)

    def fn_shr(self, x: Fn, args: list[Typed]) -> Typed:
        return self._shift(x, args, left=False)

    def _shift(self, x: Fn, args: list[Typed], left: bool) -> Typed:
        """Shift amounts are unsigned 32-bit and clamp (LLVM's shifts by >= width are
        poison)."""
        (a, t), (n, _) = args
        e, b = self.e, self.b
        w = a.type.width
        n_w = e.int_resize(n, a.type, False) if w >= 32 else \
            b.trunc(call(e, "llvm.umin.i32", I32, [n, I32(w)]), a.type)
        big = b.icmp_unsigned(">=", n, I32(w))
        if left:
            r = b.select(big, a.type(0), b.shl(a, b.select(big, a.type(0), n_w), flags=self.flags(x)))
        elif is_signed(t):
            r = b.ashr(a, b.select(big, a.type(w - 1), n_w))
        else:
            r = b.select(big, a.type(0), b.lshr(a, b.select(big, a.type(0), n_w)))
        return r, t

    def fn_popc(self, x: Fn, args: list[Typed]) -> Typed:
        (a, _), = args
        r = call(self.e, f"llvm.ctpop.i{a.type.width}", a.type, [a])
        return self.e.int_resize(r, I32, False), "u32"

    def fn_clz(self, x: Fn, args: list[Typed]) -> Typed:
        (a, _), = args
        r = call(self.e, f"llvm.ctlz.i{a.type.width}", a.type, [a, I1(0)])
        return self.e.int_resize(r, I32, False), "u32"

    def fn_brev(self, x: Fn, args: list[Typed]) -> Typed:
        (a, t), = args
        return call(self.e, f"llvm.bitreverse.i{a.type.width}", a.type, [a]), t

    def fn_resize(self, x: Fn, args: list[Typed]) -> Typed:
        (a, t), = args
        want = self.type_of(x.type or "T")
        return self.e.int_resize(a, ptx_llvm_type(want), is_signed(t)), want

    def fn_ext(self, x: Fn, args: list[Typed]) -> Typed:
        (a, t), = args
        want = self.type_of(x.type or "T")
        bits = resolve_param(x.param, self.mods)
        assert isinstance(bits, int)
        if bits < a.type.width:
            a = self.b.trunc(a, ir.IntType(bits))
        return self.e.int_resize(a, ptx_llvm_type(want), is_signed(t)), want

    def fn_slice(self, x: Fn, args: list[Typed]) -> Typed:
        (a, _), = args
        want = self.type_of(x.type or "T")
        lo = resolve_param(x.param, self.mods)
        assert isinstance(lo, int)
        r = self.b.lshr(a, a.type(lo))
        lt = ptx_llvm_type(want)
        return (self.b.trunc(r, lt) if lt != a.type else r), want

    # -- bit fields and bytes
    def fn_funnel(self, x: Fn, args: list[Typed]) -> Typed:
        """LLVM's funnel shifts take the amount mod the width, as the function does."""
        (lo, t), (hi, _), (n, _) = args
        name = "llvm.fshl.i32" if x.param == "l" else "llvm.fshr.i32"
        return call(self.e, name, I32, [hi, lo, n]), t

    def fn_bfe(self, x: Fn, args: list[Typed]) -> Typed:
        """The field shifted down and masked to its valid bits (min(len, w - pos)); for
        signed types the bits above it are set where its top bit a[min(pos+len-1, msb)] is
        (and len is not 0)."""
        (a, t), (pos, _), (ln, _) = args
        b, e = self.b, self.e
        w = a.type.width
        it = a.type
        room = b.select(b.icmp_unsigned(">=", pos, I32(w)), I32(0), b.sub(I32(w), pos))
        eff = call(e, "llvm.umin.i32", I32, [ln, room])
        shifted = b.lshr(a, e.int_resize(b.select(b.icmp_unsigned(">=", pos, I32(w)), I32(0), pos), it, False))
        full = b.icmp_unsigned(">=", eff, I32(w))
        mask = b.select(full, it(-1), b.sub(b.shl(it(1), e.int_resize(b.select(full, I32(0), eff), it, False)), it(1)))
        r = b.and_(shifted, mask)
        if is_signed(t):
            top = call(e, "llvm.umin.i32", I32, [b.sub(b.add(pos, ln), I32(1)), I32(w - 1)])
            sbit = b.trunc(b.lshr(a, e.int_resize(top, it, False)), I1)
            sbit = b.and_(sbit, b.icmp_unsigned("!=", ln, I32(0)))
            r = b.select(sbit, b.or_(r, b.not_(mask)), r)
        return r, t

    def fn_bfi(self, x: Fn, args: list[Typed]) -> Typed:
        """a's low len bits shifted to pos, merged into b under the shifted mask; b as it is
        where len is 0 or pos past the msb."""
        (a, t), (c, _), (pos, _), (ln, _) = args
        b, e = self.b, self.e
        w = a.type.width
        posw = e.int_resize(pos, a.type, False)
        full = b.icmp_unsigned(">=", ln, I32(w))
        lnw = e.int_resize(ln, a.type, False)
        mask = b.select(full, a.type(-1), b.sub(b.shl(a.type(1), b.select(full, a.type(0), lnw)), a.type(1)))
        big = b.icmp_unsigned(">=", pos, I32(w))
        smask = b.shl(mask, b.select(big, a.type(0), posw))
        ins = b.shl(a, b.select(big, a.type(0), posw))
        r = b.or_(b.and_(c, b.not_(smask)), b.and_(ins, smask))
        return b.select(b.or_(big, b.icmp_unsigned("==", ln, I32(0))), c, r), t

    def fn_prmt(self, x: Fn, args: list[Typed]) -> Typed:
        """Each result byte shifted out of the 64-bit b:a by its index times 8."""
        (lo, t), (hi, _), (sel, _) = args
        b, e = self.b, self.e
        mode = x.param
        src64 = b.or_(b.zext(lo, I64), b.shl(b.zext(hi, I64), I64(32)))
        out = I32(0)
        for k in range(4):
            if mode is None:
                nib = b.and_(b.lshr(sel, I32(4 * k)), I32(0xF))
                idx = b.and_(nib, I32(7))
                byte = b.trunc(b.lshr(src64, b.zext(b.mul(idx, I32(8)), I64)), I8)
                sign = b.icmp_unsigned("!=", b.and_(nib, I32(8)), I32(0))
                byte = b.select(sign, b.ashr(byte, I8(7)), byte)
            else:
                s = b.and_(sel, I32(3))
                if mode == "f4e":
                    idx = b.and_(b.add(s, I32(k)), I32(7))
                elif mode == "b4e":
                    idx = b.and_(b.sub(s, I32(k)), I32(7))
                elif mode == "rc8":
                    idx = s
                elif mode == "ecl":
                    idx = call(e, "llvm.umax.i32", I32, [s, I32(k)])
                elif mode == "ecr":
                    idx = call(e, "llvm.umin.i32", I32, [s, I32(k)])
                else:  # rc16
                    idx = b.add(b.mul(b.and_(s, I32(1)), I32(2)), I32(k & 1))
                byte = b.trunc(b.lshr(src64, b.zext(b.mul(idx, I32(8)), I64)), I8)
            out = b.or_(out, b.shl(b.zext(byte, I32), I32(8 * k)))
        return out, t

    def fn_lop3(self, x: Fn, args: list[Typed]) -> Typed:
        """The or of the lookup table's minterms (a constant: PTX takes an immediate)."""
        (p, t), (q, _), (r, _), _ = args
        b = self.b
        lut_v = self.operand_of(x.args[3])
        if lut_v is None or not (hasattr(lut_v, "op") and lut_v.op.name == "upir.const"):  # type: ignore[union-attr]
            self.e.kc.error("lop3 with a non-constant lookup table", self.op)
            return I32(0), t
        lut = int(lut_v.op.attributes["value"]) & 0xFF  # type: ignore[union-attr]
        out = I32(0)
        for i in range(8):
            if lut >> i & 1:
                term = b.and_(b.and_(p if i & 4 else b.not_(p), q if i & 2 else b.not_(q)),
                              r if i & 1 else b.not_(r))
                out = b.or_(out, term)
        return out, t

    def fn_fns(self, x: Fn, args: list[Typed]) -> Typed:
        """Branch-free: the bits on the searched side of base, then the k-th set bit of
        those by a binary search on popcounts (5 steps)."""
        (bits, t), (base, _), (offset, _) = args
        b, e = self.b, self.e
        ones = I32(0xFFFFFFFF)
        sh = b.and_(base, I32(31))
        up = b.icmp_signed(">", offset, I32(0))
        # bits at positions >= base (searching up) or <= base (searching down)
        side = b.select(up, b.and_(bits, b.shl(ones, sh)), b.and_(bits, b.lshr(ones, b.sub(I32(31), sh))))
        total = call(e, "llvm.ctpop.i32", I32, [side])
        n = call(e, "llvm.abs.i32", I32, [offset, I1(0)])
        # 0-based rank from the bottom of the bit wanted: n-1 up, total-n down
        k = b.select(up, b.sub(n, I32(1)), b.sub(total, n))
        v, pos, rest = side, I32(0), k
        for step in (16, 8, 4, 2, 1):
            low = call(e, "llvm.ctpop.i32", I32, [b.and_(v, I32((1 << step) - 1))])
            skip = b.icmp_unsigned(">=", rest, low)
            rest = b.select(skip, b.sub(rest, low), rest)
            v = b.select(skip, b.lshr(v, I32(step)), v)
            pos = b.select(skip, b.add(pos, I32(step)), pos)
        found = b.icmp_unsigned("<=", n, total)
        nth = b.select(found, pos, ones)
        at_base = b.select(b.icmp_unsigned("!=", b.and_(b.lshr(bits, sh), I32(1)), I32(0)), base, ones)
        r = b.select(b.icmp_signed("==", offset, I32(0)), at_base, nth)
        return b.select(b.icmp_unsigned(">", base, I32(31)), ones, r), t

    # -- comparisons and selects
    def fn_cmp(self, x: Fn, args: list[Typed]) -> Typed:
        (p, t), (q, _) = args
        b = self.b
        rel = resolve_param(x.param, self.mods)
        assert isinstance(rel, str)
        if is_float(t):
            if t == "f16":
                p, q = b.bitcast(p, F16), b.bitcast(q, F16)
            if rel == "num":
                return b.fcmp_ordered("ord", p, q), "pred"
            if rel == "nan":
                return b.fcmp_unordered("uno", p, q), "pred"
            if rel in _FCMP_UNORDERED:
                return b.fcmp_unordered(_FCMP_UNORDERED[rel], p, q), "pred"
            return b.fcmp_ordered(_ICMP[rel], p, q), "pred"
        if rel in ("lo", "ls", "hi", "hs") or not is_signed(t):
            return b.icmp_unsigned(_ICMP[rel], p, q), "pred"
        return b.icmp_signed(_ICMP[rel], p, q), "pred"

    def fn_select(self, x: Fn, args: list[Typed]) -> Typed:
        (c, _), (p, t), (q, _) = args
        return self.b.select(c, p, q), t

    def fn_testp(self, x: Fn, args: list[Typed]) -> Typed:
        (a, t), = args
        b = self.b
        mag = call(self.e, f"llvm.fabs.{fsuffix(a.type)}", a.type, [a])
        inf = ir.Constant(a.type, float("inf"))
        tiny = ir.Constant(a.type, 1.1754943508222875e-38 if t == "f32" else 2.2250738585072014e-308)
        kind = resolve_param(x.param, self.mods)
        if kind == "finite":
            r = b.fcmp_ordered("<", mag, inf)
        elif kind == "infinite":
            r = b.fcmp_ordered("==", mag, inf)
        elif kind == "number":
            r = b.fcmp_ordered("ord", a, a)
        elif kind == "notanumber":
            r = b.fcmp_unordered("uno", a, a)
        elif kind == "normal":
            r = b.and_(b.fcmp_ordered(">=", mag, tiny), b.fcmp_ordered("<", mag, inf))
        else:
            r = b.and_(b.fcmp_ordered("<", mag, tiny), b.fcmp_ordered(">", mag, ir.Constant(a.type, 0.0)))
        return r, "pred"



_NSW_NODES: dict[int, frozenset[int]] = {}


def _nsw_nodes(form: Form) -> frozenset[int]:
    """The nodes that take `nsw` where analysis.no_signed_wrap marks the op's result: the
    result's add/sub/mul, and the product a mad adds."""
    found = _NSW_NODES.get(id(form))
    if found is None:
        if not form.results:
            return _NSW_NODES.setdefault(id(form), frozenset())
        root = form.results[0]
        nodes = {id(root)}
        if isinstance(root, Fn) and root.name == "add":
            nodes |= {id(x) for x in root.args if isinstance(x, Fn) and x.name == "mul"
                      and not any(isinstance(y, Fn) for y in x.args)}
        found = _NSW_NODES[id(form)] = frozenset(nodes)
    return found
