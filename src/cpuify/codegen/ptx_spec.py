"""LLVM lowering of the PTX instructions the instruction table spells out (ir/ptx_table.py):
one dispatcher per such opcode picks the op's form; a spec form is lowered from its
expressions, a hand-written form calls the `@hand_written` code (ptx_arith.py, ...).

Each function of the expression language (ptx_table.FUNCTIONS) has its lowering here.  The
code generator's own refinements, which are no part of the semantics, sit around them:
pointer arithmetic as GEPs, `nsw` on index arithmetic (analysis.no_signed_wrap), masked
thread indices hidden from LLVM, lane-group bitwise ops, the idle clamp of min/max, the
deferred flush of min/max (transforms/flush.py), the never-NaN workaround of LLVM's
minimumnum, directed-rounding fmas on one binade's grid as a floor/ceil (_quantized_fma,
from the operands' ranges in the IR)."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING, Callable

from llvmlite import ir

from cpuify.codegen import approx_math, jit
from cpuify.codegen.lowering import (
    F16, F32, F64, HAND_LOWERINGS, I1, I8, I16, I32, I64, PTR, handles, is_float, is_signed,
    ptx_llvm_type,
)
from cpuify.codegen.ptx_ops import (
    call, directed, div_error, fdone, fsrc, fsuffix, masked_thread_index, mul_error_f64, rm_zero,
    saturate, src, wrap_flags,
)
from cpuify.codegen.helpers import float_from_bits
from cpuify.ir.core import Operation, OpResult, Value
from cpuify.ir.modifiers import mods, rounding, ty, types
from cpuify.ir.ptx_table import (
    BY_IR_OP, DIRECTED, Expr, Fn, Form, Lit, Src, resolve_param, type_symbols,
)

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


REFINEMENTS: dict[str, Callable[["SegmentEmitter", Operation], bool]] = {
    "ptx.add": _pointer_arith, "ptx.sub": _pointer_arith, "ptx.selp": _pointer_select,
    "ptx.and": _lane_or_masked, "ptx.xor": _lane_or_masked, "ptx.rem": _masked_rem,
}


# --- the dispatcher ------------------------------------------------------------------------------

def lower_table_op(e: SegmentEmitter, op: Operation) -> None:
    entry = BY_IR_OP[op.name]
    form = entry.form_for(mods(op))
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


class _SpecLowering:
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
        self.root = form.results[0]

    def run(self) -> None:
        # the operands of all results, then all results (setp: p, !p, then each combined
        # with the predicate operand), then the writes
        for r in self.form.results:
            if isinstance(r, Fn):
                self.operands(r)
        values = [self.value(r) for r in self.form.results]   # (setp's unused !p: LLVM drops it)
        for i, (v, t) in enumerate(values[:len(self.op.results)]):
            if self.form.flush == "all" and t == "f16":
                if "sat" in self.mods:          # (f16 values are their bits here)
                    v = self.b.bitcast(saturate(self.e, self.b.bitcast(v, F16)), I16)
                self.e.result(self.op, v, t, i)
            elif self.form.flush == "all" and is_float(t) and not self.deferred:
                fdone(self.e, self.op, v, t)
            else:
                self.e.result(self.op, v, t, i)

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
        return [self.value(y) for y in x.args]

    def flags(self, x: Fn) -> list[str]:
        return wrap_flags(self.e, self.op) if id(x) in self.nsw else []

    def operand_of(self, x: Expr) -> Value | None:
        """The IR operand an expression reads directly (Src), for the analyses below."""
        return self.op.operands[x.index] if isinstance(x, Src) else None

    # -- arithmetic (floats with directed rounding: the round-to-nearest result moved one
    #    step where the sign of its exact error says, ptx_ops.directed)
    def fn_add(self, x: Fn, args: list[Typed]) -> Typed:
        (p, t), (q, _) = args
        if not is_float(t):
            return self.b.add(p, q, flags=self.flags(x)), t
        if t == "f16":
            return self._half(self.b.fadd, p, q), t
        return self._directed_sum(x, p, q, self.b.fadd(p, q), q), t

    def fn_sub(self, x: Fn, args: list[Typed]) -> Typed:
        (p, t), (q, _) = args
        if not is_float(t):
            return self.b.sub(p, q, flags=self.flags(x)), t
        if t == "f16":
            return self._half(self.b.fsub, p, q), t
        r = self.b.fsub(p, q)
        mode = resolve_param(x.param, self.mods)
        return self._directed_sum(x, p, q, r, self.b.fneg(q) if mode in DIRECTED else q), t

    def _half(self, operation: Callable[[ir.Value, ir.Value], ir.Value], p: ir.Value,
              q: ir.Value) -> ir.Value:
        """An f16 operation (round to nearest) on the bits of its operands, in LLVM's half
        (which x86 computes in f32 and rounds once more: exact for + - *, as f32 has more
        than twice f16's precision)."""
        b = self.b
        return b.bitcast(operation(b.bitcast(p, F16), b.bitcast(q, F16)), I16)

    def _directed_sum(self, x: Fn, p: ir.Value, q: ir.Value, r: ir.Value, addend: ir.Value
                      ) -> ir.Value:
        """r = p + addend rounded to nearest, rounded as x's param says: the exact error by
        TwoSum; under .rm an exactly zero sum is -0 unless both terms are +0."""
        mode = resolve_param(x.param, self.mods)
        if mode not in DIRECTED:
            return r
        b = self.b
        bb = b.fsub(r, p)
        err = b.fadd(b.fsub(p, b.fsub(r, bb)), b.fsub(addend, bb))
        r = directed(self.e, r, err, mode, [p, q])
        return rm_zero(self.e, r, [p, addend]) if mode == "rm" else r

    def fn_mul(self, x: Fn, args: list[Typed]) -> Typed:
        (p, t), (q, _) = args
        b = self.b
        if not is_float(t):
            return b.mul(p, q, flags=self.flags(x)), t
        if t == "f16":
            return self._half(b.fmul, p, q), t
        r = b.fmul(p, q)
        mode = resolve_param(x.param, self.mods)
        if mode not in DIRECTED:
            return r, t
        if p.type == F32:
            # the product of two floats is exact in double: no underflow of the error
            err = b.fsub(b.fmul(b.fpext(p, F64), b.fpext(q, F64)), b.fpext(r, F64))
        else:
            err = mul_error_f64(self.e, p, q, r)
        return directed(self.e, r, err, mode, [p, q]), t

    def fn_fma(self, x: Fn, args: list[Typed]) -> Typed:
        """Directed rounding: a product and addend whose bounds the IR shows, on one
        binade's grid, as a floor/ceil (_quantized_fma); otherwise (f32 only) the exact
        a*b + c as an f64 sum and its TwoSum error, the f32 round-to-nearest result moved
        by the error's sign."""
        (p, t), (q, _), (r, _) = args
        b, e = self.b, self.e
        mode = resolve_param(x.param, self.mods)
        if mode not in DIRECTED:
            return call(e, f"llvm.fma.{fsuffix(p.type)}", p.type, [p, q, r]), t
        quantized = _quantized_fma(e, self.op, mode, t, p, q, r)
        if quantized is not None:
            return quantized, t
        if t != "f32":
            e.kc.error(f"fma.{mode}.{t} (directed rounding) is not supported", self.op)
        # exact: the f32 product is exact in f64; TwoSum with the addend gives s + tail
        product = b.fmul(b.fpext(p, F64), b.fpext(q, F64))
        addend = b.fpext(r, F64)
        s = b.fadd(product, addend)
        bb = b.fsub(s, product)
        tail = b.fadd(b.fsub(product, b.fsub(s, bb)), b.fsub(addend, bb))
        rn = b.fptrunc(s, F32)
        err = b.fadd(b.fsub(s, b.fpext(rn, F64)), tail)
        out = directed(e, rn, err, mode, [p, q, r])
        if mode == "rm":
            exact_zero = b.fcmp_ordered("==", b.fadd(s, tail), ir.Constant(F64, 0.0))
            out = rm_zero(e, out, [b.fptrunc(product, F32), r], exact_zero=exact_zero)
        return out, t

    def fn_add_sat(self, x: Fn, args: list[Typed]) -> Typed:
        (p, t), (q, _) = args
        return call(self.e, "llvm.sadd.sat.i32", I32, [p, q]), t

    def fn_sub_sat(self, x: Fn, args: list[Typed]) -> Typed:
        (p, t), (q, _) = args
        return call(self.e, "llvm.ssub.sat.i32", I32, [p, q]), t

    def fn_div(self, x: Fn, args: list[Typed]) -> Typed:
        """Floats: directed rounding by the sign of the exact remainder; x / 0 is an exact
        infinity, not an overflow."""
        (p, t), (q, _) = args
        if not is_float(t):
            return self._int_div(p, q, t, rem=False), t
        b = self.b
        r = b.fdiv(p, q)
        mode = resolve_param(x.param, self.mods)
        if mode not in DIRECTED:
            return r, t
        return directed(self.e, r, div_error(self.e, p, q, r), mode, [p, q],
                        exact_inf=b.fcmp_ordered("==", q, ir.Constant(q.type, 0.0))), t

    def fn_rem(self, x: Fn, args: list[Typed]) -> Typed:
        (p, t), (q, _) = args
        return self._int_div(p, q, t, rem=True), t

    def _int_div(self, a: ir.Value, c: ir.Value, t: str, rem: bool) -> ir.Value:
        """PTX: x / 0 is all ones, x % 0 is x (a CPU would fault); MIN / -1 wraps (x86
        faults)."""
        b = self.b
        zero = b.icmp_unsigned("==", c, c.type(0))
        safe_c = b.select(zero, c.type(1), c)
        if is_signed(t):
            minv = c.type(1 << (c.type.width - 1))
            ovf = b.and_(b.icmp_signed("==", a, minv), b.icmp_signed("==", c, c.type(-1)))
            safe_c = b.select(ovf, c.type(1), safe_c)
            r = b.srem(a, safe_c) if rem else b.sdiv(a, safe_c)
            if rem:
                r = b.select(ovf, c.type(0), r)
        else:
            r = b.urem(a, safe_c) if rem else b.udiv(a, safe_c)
        return b.select(zero, a if rem else c.type(-1), r)

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

    # -- math functions: the approximations are this reader's own (PTX allows each .approx
    #    an error; the interpreter rounds the double-precision function instead)
    def fn_sqrt(self, x: Fn, args: list[Typed]) -> Typed:
        """Directed rounding by the sign of the exact a - r*r (an fma in double; a tiny
        double and its root scaled so that it cannot underflow)."""
        (p, t), = args
        b = self.b
        r = call(self.e, f"llvm.sqrt.{fsuffix(p.type)}", p.type, [p])
        mode = resolve_param(x.param, self.mods)
        if mode not in DIRECTED:
            return r, t
        if p.type == F32:
            r64 = b.fpext(r, F64)
            err = call(self.e, "llvm.fma.f64", F64, [b.fneg(r64), r64, b.fpext(p, F64)])
        else:
            tiny = b.fcmp_ordered("<", p, ir.Constant(F64, 2.0 ** -900))
            ra = b.select(tiny, ir.Constant(F64, 2.0 ** 300), ir.Constant(F64, 1.0))
            aa = b.select(tiny, ir.Constant(F64, 2.0 ** 600), ir.Constant(F64, 1.0))
            rs = b.fmul(r, ra)
            err = call(self.e, "llvm.fma.f64", F64, [b.fneg(rs), rs, b.fmul(p, aa)])
        return directed(self.e, r, err, mode), t

    def fn_rsqrt(self, x: Fn, args: list[Typed]) -> Typed:
        """f32 on an AVX-512 CPU: the CPU's estimate refined (approx_math.rsqrt_f32);
        otherwise 1 / sqrt(x), each rounded."""
        (p, t), = args
        if p.type == F32 and jit.has_avx512():
            self.e.mod.rsqrt_estimates = True
            return approx_math.rsqrt_f32(self.b, self.e.mod.intrinsic, p), t
        sqrt = call(self.e, f"llvm.sqrt.{fsuffix(p.type)}", p.type, [p])
        return self.b.fdiv(ir.Constant(p.type, 1.0), sqrt), t

    def fn_sin(self, x: Fn, args: list[Typed]) -> Typed:
        return self._sin_cos(args, cos=False)

    def fn_cos(self, x: Fn, args: list[Typed]) -> Typed:
        return self._sin_cos(args, cos=True)

    def _sin_cos(self, args: list[Typed], cos: bool) -> Typed:
        """f32: inline polynomials (approx_math); f64: LLVM's (libm)."""
        (p, t), = args
        if p.type == F32:
            return approx_math.sin_cos_f32(self.b, self.e.mod.intrinsic, p, cos=cos), t
        return call(self.e, f"llvm.{'cos' if cos else 'sin'}.f64", p.type, [p]), t

    def fn_ex2(self, x: Fn, args: list[Typed]) -> Typed:
        (p, t), = args
        if p.type == F32:
            return approx_math.exp2_f32(self.b, self.e.mod.intrinsic, p), t
        return call(self.e, "llvm.exp2.f64", p.type, [p]), t

    def fn_lg2(self, x: Fn, args: list[Typed]) -> Typed:
        """f32: inline (subnormal inputs handled unless .ftz flushed them); f64: libm."""
        (p, t), = args
        if p.type == F32:
            return approx_math.log2_f32(self.b, self.e.mod.intrinsic, p,
                                        subnormals="ftz" not in self.mods), t
        return call(self.e, "llvm.log2.f64", p.type, [p]), t

    def fn_tanh(self, x: Fn, args: list[Typed]) -> Typed:
        (p, t), = args
        return call(self.e, "tanhf" if p.type == F32 else "tanh", p.type, [p]), t

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
    if not all(math.isfinite(x) for x in (*ra, *rc, addend)):
        return None
    # exactly, in rationals: 2^24 - 2^-95 is 2^24 in f64, one binade too high
    ends = [Fraction(x) * Fraction(y) for x in ra for y in rc]
    lo, hi = Fraction(addend) + min(ends), Fraction(addend) + max(ends)
    if lo <= 0:
        return None
    exp = math.floor(math.log2(lo))
    exp += (lo >= Fraction(2) ** (exp + 1)) - (lo < Fraction(2) ** exp)
    if exp < 23 or hi >= Fraction(2) ** (exp + 1) or exp > 126:
        return None
    ulp = 2.0 ** (exp - 23)
    if addend % ulp:
        return None
    b = e.b
    if (min(ends) >= 0) if mode != "rp" else (max(ends) <= 0):
        return _quantized_fma_f32(e, mode, a, c, d, ulp)
    p = b.fmul(b.fpext(a, F64), b.fpext(c, F64))                   # exact
    q = b.fmul(p, ir.Constant(F64, 1.0 / ulp))                      # exact (a power of two)
    # all values are positive: rz is rm
    k = call(e, "llvm.ceil.f64" if mode == "rp" else "llvm.floor.f64", F64, [q])
    r = b.fadd(b.fmul(k, ir.Constant(F64, ulp)), b.fpext(d, F64))   # on the binade's grid
    return b.fptrunc(r, F32)


def _quantized_fma_f32(e: SegmentEmitter, mode: str, a: ir.Value, c: ir.Value, d: ir.Value,
                       ulp: float) -> ir.Value:
    """_quantized_fma in f32 alone, where the product's sign is that of the rounding's
    direction (rm/rz: a product >= 0, rp: <= 0; NVRTC's expf): the product rounded to
    nearest, its exact error by an fma, the floor (ceil) of the product scaled to the grid,
    one step down (up) where the rounded product sits on the grid but the exact one is
    below (above) it.  Ten f32 operations that vectorize at full width instead of eight f64
    ones and four conversions (half-width vectors).

    Exact: a rounded product on the grid is a multiple of ulp >= 1, so the exact product is
    at least 1/2 and its error is a float (no underflow); a rounded product off the grid has
    no multiple of the grid between it and the exact one (multiples of ulp are floats), and
    one below the first multiple, with the product's sign, rounds to nothing else."""
    b = e.b
    floor = mode != "rp"
    p = b.fmul(a, c)
    err = call(e, "llvm.fma.f32", F32, [a, c, b.fneg(p)])          # a*c - p, exact
    q = b.fmul(p, ir.Constant(F32, 1.0 / ulp))                      # exact (a power of two)
    k = call(e, "llvm.floor.f32" if floor else "llvm.ceil.f32", F32, [q])
    beyond = b.and_(b.fcmp_ordered("==", k, q),
                    b.fcmp_ordered("<" if floor else ">", err, ir.Constant(F32, 0.0)))
    k = b.select(beyond, b.fadd(k, ir.Constant(F32, -1.0 if floor else 1.0)), k)
    return b.fadd(b.fmul(k, ir.Constant(F32, ulp)), d)              # on the binade's grid


_NSW_NODES: dict[int, frozenset[int]] = {}


def _nsw_nodes(form: Form) -> frozenset[int]:
    """The nodes that take `nsw` where analysis.no_signed_wrap marks the op's result: the
    result's add/sub/mul, and the product a mad adds."""
    found = _NSW_NODES.get(id(form))
    if found is None:
        root = form.results[0]
        nodes = {id(root)}
        if isinstance(root, Fn) and root.name == "add":
            nodes |= {id(x) for x in root.args if isinstance(x, Fn) and x.name == "mul"
                      and not any(isinstance(y, Fn) for y in x.args)}
        found = _NSW_NODES[id(form)] = frozenset(nodes)
    return found
