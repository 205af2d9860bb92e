"""LLVM lowering of the arithmetic functions of the PTX instruction table's expression
language (ir/ptx_table.py FUNCTIONS): add sub mul fma div rem add_sat sub_sat, the float
ones with every rounding (`"$rnd"`; fma on f16/bf16 too), and the math functions sqrt rsqrt sin cos ex2 lg2 tanh.
`ArithmeticLowering` is a part of ptx_spec._SpecLowering (which dispatches each function to
its `fn_<name>`); the range analysis behind the directed-rounding fma on one binade's grid
(_f32_range, _quantized_fma) lives here with it."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING, Callable

from llvmlite import ir

from cpuify.codegen import approx_math, half_float, jit
from cpuify.codegen.helpers import float_from_bits
from cpuify.codegen.lowering import F16, F32, F64, I16, I32, is_float, is_signed
from cpuify.codegen.ptx_ops import call, directed, div_error, fsuffix, mul_error_f64, rm_zero
from cpuify.ir.core import Operation, OpResult, Value
from cpuify.ir.modifiers import mods, rounding, ty, types
from cpuify.ir.ptx_table import DIRECTED, Fn, resolve_param

if TYPE_CHECKING:
    from cpuify.codegen.segment_emitter import SegmentEmitter

Typed = tuple[ir.Value, str]          # an LLVM value and its PTX type


class ArithmeticLowering:
    """The `fn_<name>` lowerings of the arithmetic and math functions (each returns the
    value and its PTX type); the attributes are _SpecLowering's."""

    e: SegmentEmitter
    b: ir.IRBuilder
    op: Operation
    mods: list[str]
    flags: Callable[[Fn], list[str]]
    never_subnormal: set[int]

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
        by the error's sign.  f16/bf16 (their bits): the CPU's f16 fma where it has
        AVX512-FP16; otherwise rounded once from the product in f64 (half_float.fma_half),
        a call of one shared function where the kernel has more than FMA_HALF_INLINE_LIMIT
        of them."""
        (p, t), (q, _), (r, _) = args
        b, e = self.b, self.e
        if t == "f16" and jit.has_avx512fp16():     # the CPU's own f16 fma, rounded once
            halves = [b.bitcast(v, F16) for v in (p, q, r)]
            return b.bitcast(call(e, "llvm.fma.f16", F16, halves), I16), t
        if t in ("f16", "bf16"):
            many = _half_fmas(e.kc) > half_float.FMA_HALF_INLINE_LIMIT
            emit = half_float.fma_half_call if many else half_float.fma_half
            return emit(b, p, q, r, t, False), t
        mode = resolve_param(x.param, self.mods)
        if mode not in DIRECTED:
            return call(e, f"llvm.fma.{fsuffix(p.type)}", p.type, [p, q, r]), t
        quantized = _quantized_fma(e, self.op, mode, t, p, q, r)
        if quantized is not None:
            self.never_subnormal.add(id(x))     # in a binade of at least 2^23: no flush
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
            ftz = "ftz" in self.mods
            if ftz:
                self.never_subnormal.add(id(x))     # flushed by exp2_f32 itself
            return approx_math.exp2_f32(self.b, self.e.mod.intrinsic, p, ftz=ftz,
                                        scalef=jit.has_avx512()), t
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


def _half_fmas(kc) -> int:  # type: ignore[no-untyped-def]
    """How many f16/bf16 fmas the kernel of `kc` holds (counted once per kernel)."""
    n = getattr(kc, "_half_fmas", None)
    if n is None:
        n = sum(1 for o in kc.kernel.op.walk()
                if o.name == "ptx.fma" and ty(o) in ("f16", "bf16"))
        kc._half_fmas = n
    return n


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
