"""The reference interpreter's reading of the PTX instruction table (ir/ptx_table.py): the
expressions of an instruction's spec forms evaluated directly, integers as Python ints
(bit patterns of their width), floats as NumPy scalars of their precision; the hand-written
forms call the `@hand_evaluation` code of interp/ops.py.

This file shares nothing with the code generator's reading (codegen/ptx_spec.py) but the
table: each function of the expression language is implemented here from its definition
(ptx_table.FUNCTIONS and the PTX ISA), so the interpreter checks the compiler's lowering of
the same spec."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from cpuify.interp.ops import (
    HAND_EVALUATIONS, as_float, at_address, atomic_update, from_float, handles, load_value,
    store_value,
)
from cpuify.interp.values import (
    F16, F32, F64, exact, f16_from_bits, float_min_max, ftz, ir_type_of, is_float, is_signed,
    isfinite, isnan, mask, resize_int, round_fraction, saturate, signbit, to_bits, to_signed,
    width_of, zero_sum,
)
from cpuify.ir.core import Operation
from cpuify.ir.modifiers import has, mods, type_size
from cpuify.ir.ptx_table import (
    BY_IR_OP, Expr, Fn, Form, Lit, Src, is_address_type, resolve_param, resolve_type, space_of,
)

if TYPE_CHECKING:
    from cpuify.interp.thread import Thread

Typed = tuple[Any, str]          # a value and its PTX type


def _width(t: str) -> int:
    return width_of(ir_type_of(t))


def _signed(x: int, t: str) -> int:
    return to_signed(x, _width(t)) if is_signed(t) else x


def evaluate_table_op(th: "Thread", op: Operation) -> None:
    entry = BY_IR_OP[op.name]
    form = entry.form_of(op)
    if form is None:
        th.unsupported(f"'{'.'.join((entry.opcode, *mods(op)))}': this form of {entry.opcode} is "
                       "not supported", op)
        return
    if form.hand:
        HAND_EVALUATIONS[op.name](th, op)
        return
    _Evaluation(th, op, form).run()


for _name, _entry in BY_IR_OP.items():
    if _entry.spec_driven:
        handles(_name)(evaluate_table_op)


class _Evaluation:
    def __init__(self, th: "Thread", op: Operation, form: Form) -> None:
        self.th, self.op, self.form = th, op, form
        self.mods = mods(op)
        self.memo: dict[int, Typed] = {}

    def run(self) -> None:
        values = [self.value(r) for r in self.form.results]   # (an atom's too, unused or not)
        for i, (v, t) in enumerate(values[:len(self.op.results)]):
            if t in _FLOAT_TYPES:
                if self.form.flush == "all":
                    if t == "f16":                  # (flushed once rounded to f16)
                        v = F16(v)
                    if t == "f32" or t == "f16" and self.op.name != "ptx.cvt":
                        v = ftz(v, has(self.op, "ftz"))     # (a cvt's on its f32 side)
                    if has(self.op, "sat"):
                        v = saturate(v)
                v = from_float(v, t)
            elif t == "pred":
                v = int(v)
            elif is_address_type(t):            # an address: its 64 bits
                t = "u64"
            self.th.set(self.op, v, t, i)
        for e in self.form.effects:             # (a store's writes to memory, in order)
            self.value(e)

    def value(self, x: Expr) -> Typed:
        got = self.memo.get(id(x))
        if got is None:
            got = self.memo[id(x)] = self._value(x)
        return got

    def _value(self, x: Expr) -> Typed:
        if isinstance(x, Src):
            t = resolve_type(x.type, self.mods)
            if t == "R":                        # the register's bits, whatever its type
                return self.th.bits(self.op.operands[x.index]), t
            if is_address_type(t):              # 64 bits (a 32-bit register zero-extended)
                reg = self.op.operands[x.index]
                return resize_int(self.th.bits(reg), width_of(reg.type), 64, False), t
            v = self.th.src(self.op, x.index, t)
            if t in ("f16", "bf16"):
                v = as_float(v, t)
            if (t == "f32" or t == "f16" and self.op.name != "ptx.cvt") and \
                    self.form.flush != "none":
                v = ftz(v, has(self.op, "ftz"))
            return v, t
        if isinstance(x, Lit):
            t = resolve_type(x.type, self.mods)
            if t == "f32":
                return F32(x.value), t
            if t == "f64":
                return F64(x.value), t
            return int(x.value) & mask(_width(t)), t
        assert isinstance(x, Fn)
        args = [self.value(y) for y in x.args]
        return _FUNCTIONS[x.name](self, x, args)

    def param(self, x: Fn) -> Any:
        return resolve_param(x.param, self.mods)


def _rounded(kind: str, fi: Callable[[int, int, int], int]
             ) -> Callable[[_Evaluation, Fn, list[Typed]], Typed]:
    """add/sub/mul: integers wrap; floats are NumPy's round-to-nearest result, or under
    .rz/.rm/.rp the exact rational value rounded (non-finite operands give what they give
    under any rounding; an exactly zero sum takes IEEE's sign: -0 under .rm unless both
    terms are +0)."""
    def f(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
        (p, t), (q, _) = args
        if not is_float(t):
            w = _width(t)
            return fi(p, q, w) & mask(w), t
        rn = p + q if kind == "add" else p - q if kind == "sub" else p * q
        mode = ev.param(x)
        if mode in (None, "rn") or not (isfinite(p) and isfinite(q)):
            return rn, t
        term = -q if kind == "sub" else q
        value = exact(p) * exact(q) if kind == "mul" else exact(p) + exact(term)
        if value == 0:
            if kind == "mul":
                return rn, t                       # a zero factor: the sign is rn's
            return zero_sum(signbit(p), signbit(term), p == 0 and term == 0, mode, type(p)), t
        return round_fraction(value, t, mode), t
    return f


def _fma(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    """a * b + c rounded once (to nearest even, or as the param says): the exact rational
    value rounded.  Infinite and NaN results do not depend on the rounding; the product of
    finite factors is finite (exactly: not an f64 overflow), so with an infinite c it is
    c."""
    (p, t), (q, _), (r, _) = args
    mode = ev.param(x) or "rn"
    np_t = type(p)
    if not (isfinite(p) and isfinite(q) and isfinite(r)):
        if isfinite(p) and isfinite(q):
            return r, t
        return np_t(np.float64(p) * np.float64(q) + np.float64(r)), t
    value = exact(p) * exact(q) + exact(r)
    if value == 0:                       # the signed zero of an exact sum
        return zero_sum(signbit(p) != signbit(q), signbit(r),
                        (p == 0 or q == 0) and r == 0, mode, np_t), t
    return round_fraction(value, t, mode), t


def _div(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    """Floats: IEEE (x / 0 is +-inf, 0 / 0 NaN), under .rz/.rm/.rp the exact quotient of
    finite operands rounded."""
    (p, t), (q, _) = args
    if not is_float(t):
        return _int_div(p, q, t, rem=False), t
    rn = p / q
    mode = ev.param(x)
    if mode in (None, "rn") or q == 0 or not (isfinite(p) and isfinite(q)) or p == 0:
        return rn, t
    return round_fraction(exact(p) / exact(q), t, mode), t


def _rem(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    (p, t), (q, _) = args
    return _int_div(p, q, t, rem=True), t


def _int_div(a: int, c: int, t: str, rem: bool) -> int:
    """Truncating toward zero; x / 0 is all ones, x % 0 is x; MIN / -1 wraps."""
    w = _width(t)
    if c == 0:
        return a if rem else mask(w)
    x, y = _signed(a, t), _signed(c, t)
    q = abs(x) // abs(y)
    if (x < 0) != (y < 0):
        q = -q
    return (x - q * y if rem else q) & mask(w)


def _saturating(sign: int) -> Callable[[_Evaluation, Fn, list[Typed]], Typed]:
    def f(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
        (p, t), (q, _) = args
        s = to_signed(p, 32) + sign * to_signed(q, 32)
        return max(-2**31, min(2**31 - 1, s)) & mask(32), t
    return f


def _neg(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    (p, t), = args
    return (-p if is_float(t) else -p & mask(_width(t))), t


def _abs(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    (p, t), = args
    return (abs(p) if is_float(t) else abs(_signed(p, t)) & mask(_width(t))), t


def _min_max(is_min: bool, nan: bool) -> Callable[[_Evaluation, Fn, list[Typed]], Typed]:
    def f(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
        (p, t), (q, _) = args
        if is_float(t):
            return float_min_max(p, q, is_min, nan), t
        u, v = _signed(p, t), _signed(q, t)
        return (min(u, v) if is_min else max(u, v)) & mask(_width(t)), t
    return f


def _shift(left: bool) -> Callable[[_Evaluation, Fn, list[Typed]], Typed]:
    def f(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
        """Shift amounts are unsigned 32-bit and clamp: >= width gives 0 (or all sign
        bits)."""
        (a, t), (n, _) = args
        w = _width(t)
        if left:
            return (0 if n >= w else (a << n) & mask(w)), t
        if is_signed(t):
            return (to_signed(a, w) >> min(n, w - 1)) & mask(w), t
        return (0 if n >= w else a >> n), t
    return f


def _resize(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    (a, t), = args
    want = resolve_type(x.type or "T", ev.mods)
    v = _signed(a, t) if t != "pred" else int(a)
    return v & mask(_width(want)), want


def _ext(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    (a, t), = args
    want = resolve_type(x.type or "T", ev.mods)
    n = ev.param(x)
    low = a & mask(n)
    v = to_signed(low, n) if is_signed(t) else low
    return v & mask(_width(want)), want


def _slice(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    (a, _), = args
    want = resolve_type(x.type or "T", ev.mods)
    return (a >> ev.param(x)) & mask(_width(want)), want


_RELATIONS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": lambda u, v: u == v, "ne": lambda u, v: u != v, "lt": lambda u, v: u < v,
    "le": lambda u, v: u <= v, "gt": lambda u, v: u > v, "ge": lambda u, v: u >= v,
}
_UNSIGNED_NAMES = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}
_UNORDERED = ("equ", "neu", "ltu", "leu", "gtu", "geu")


def _cmp(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    (p, t), (q, _) = args
    rel = ev.param(x)
    if t in ("f16", "bf16", "f32", "f64"):
        nan = isnan(p) or isnan(q)
        if rel == "num":
            return not nan, "pred"
        if rel == "nan":
            return nan, "pred"
        if rel in _UNORDERED:                          # equ, neu, ltu, ...: true on NaN
            return nan or bool(_RELATIONS[rel[:-1]](p, q)), "pred"
        return not nan and bool(_RELATIONS[rel](p, q)), "pred"
    if rel in _UNSIGNED_NAMES:
        return bool(_RELATIONS[_UNSIGNED_NAMES[rel]](p, q)), "pred"
    return bool(_RELATIONS[rel](_signed(p, t), _signed(q, t))), "pred"


def _select(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    (c, _), (p, t), (q, _) = args
    return (p if c else q), t


def _testp(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    (a, t), = args
    tiny = 1.1754943508222875e-38 if t == "f32" else 2.2250738585072014e-308
    mag = abs(float(a))
    kind = ev.param(x)
    r = {"finite": math.isfinite(mag), "infinite": math.isinf(mag), "number": not isnan(a),
         "notanumber": isnan(a), "normal": tiny <= mag < math.inf,
         "subnormal": 0 < mag < tiny}[kind]
    return r, "pred"


def _bits(fn: Callable[[int, int], int]) -> Callable[[_Evaluation, Fn, list[Typed]], Typed]:
    def f(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
        (p, t), (q, _) = args
        return fn(int(p), int(q)) & mask(_width(t)), t
    return f


def _not(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    (p, t), = args
    return ~int(p) & mask(_width(t)), t


def _popc(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    (a, _), = args
    return bin(a).count("1"), "u32"


def _clz(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    (a, t), = args
    return _width(t) - a.bit_length(), "u32"


def _brev(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    (a, t), = args
    w = _width(t)
    return int(format(a, f"0{w}b")[::-1], 2), t


def _copysign(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    (p, _), (q, t) = args
    return np.copysign(q, p), t                      # |q| with the sign of p


# --- math functions: NumPy's, the approximate ones in double precision rounded once ----------

def _sqrt(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    """IEEE: correctly rounded in p's precision; under .rz/.rm/.rp the float next to NumPy's
    root on the side of the exact root, where r*r is on the wrong side of p."""
    (p, t), = args
    r = np.sqrt(p)
    mode = ev.param(x)
    if mode in (None, "rn") or not isfinite(r) or r == 0:
        return r, t
    square = exact(r) * exact(r)
    if square > exact(p) and mode in ("rm", "rz"):
        r = np.nextafter(r, type(r)(0))
    elif square < exact(p) and mode == "rp":
        r = np.nextafter(r, type(r)(np.inf))
    return r, t


def _rsqrt(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    """The exact quotient of the rounded square root (the compiled code may use the CPU's
    estimate within CUDA's 2 ulp: tests allow it)."""
    (p, t), = args
    return type(p)(1.0) / np.sqrt(p), t


def _approximate(fn: Callable[[Any], Any]) -> Callable[[_Evaluation, Fn, list[Typed]], Typed]:
    def f(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
        (p, t), = args
        return type(p)(fn(np.float64(p))), t
    return f


# --- bit fields and bytes: the PTX ISA's definitions, bit by bit -------------------------------

def _funnel(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    (lo, t), (hi, _), (n, _) = args
    both = (hi << 32) | lo                          # b holds bits 63..32
    n %= 32
    if x.param == "l":
        return (both << n) >> 32 & mask(32), t
    return both >> n & mask(32), t


def _bfe(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    """d[i] = a[pos + i] for i < len and pos + i <= msb, else the sign bit (0 unsigned)."""
    (a, t), (pos, _), (ln, _) = args
    msb = _width(t) - 1
    sign = 0 if not is_signed(t) or ln == 0 else a >> min(pos + ln - 1, msb) & 1
    d = 0
    for i in range(msb + 1):
        bit = a >> (pos + i) & 1 if i < ln and pos + i <= msb else sign
        d |= bit << i
    return d, t


def _bfi(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    """f = b, then f[pos + i] = a[i] for i < len while pos + i <= msb."""
    (a, t), (f, _), (pos, _), (ln, _) = args
    msb = _width(t) - 1
    i = 0
    while i < ln and pos + i <= msb:
        f = f & ~(1 << (pos + i)) | (a >> i & 1) << (pos + i)
        i += 1
    return f, t


def _prmt(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    """The bytes of b:a numbered 0..7 from a's low byte; result byte k is byte ctl[k]."""
    (lo, t), (hi, _), (c, _) = args
    data = (hi << 32) | lo
    mode = x.param
    s = c & 3
    d = 0
    for k in range(4):
        if mode is None:
            ctl = c >> (4 * k) & 0xF
            byte = data >> (8 * (ctl & 7)) & 0xFF
            if ctl & 8:                             # the byte's sign bit, 8 times
                byte = 0xFF * (byte >> 7)
        else:
            index = {"f4e": (s + k) % 8, "b4e": (s - k) % 8, "rc8": s,
                     "ecl": k if k > s else s, "ecr": k if k < s else s,
                     "rc16": (s & 1) * 2 + k % 2}[mode]
            byte = data >> (8 * index) & 0xFF
        d |= byte << (8 * k)
    return d, t


def _lop3(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    """Each bit of the result looks up the table at the index its a, b, c bits make."""
    (p, t), (q, _), (r, _), (lut, _) = args
    d = 0
    for i in range(32):
        index = (p >> i & 1) << 2 | (q >> i & 1) << 1 | (r >> i & 1)
        d |= (lut >> index & 1) << i
    return d, t


def _fns(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    """Walk from bit `base` up (offset > 0) or down (offset < 0), counting set bits; the
    position where the count reaches |offset|.  offset 0: base itself if set.  A base past
    bit 31 (undefined in PTX) finds nothing."""
    (bits, t), (base, _), (offset, _) = args
    offset = to_signed(offset, 32)
    if base > 31:
        return mask(32), t
    if offset == 0:
        return (base if bits >> base & 1 else mask(32)), t
    step = 1 if offset > 0 else -1
    left = abs(offset)
    pos = base
    while 0 <= pos <= 31:
        left -= bits >> pos & 1
        if left == 0:
            return pos, t
        pos += step
    return mask(32), t


# --- conversions: the exact value, rounded once (PTX ISA, cvt) ---------------------------------

_FLOAT_TYPES = ("f16", "bf16", "f32", "f64")
#: the NumPy type a value of each float type is held in (bf16: the f32 of its value)
_HELD_AS = {"f16": F16, "bf16": F32, "f32": F32, "f64": F64}


def _integral(q: Fraction, mode: str) -> int:
    """The rational q rounded to an integer: rni to nearest (a tie to the even one), rzi
    toward zero, rmi down, rpi up."""
    down = q.numerator // q.denominator
    up = down + (q != down)
    if mode == "rmi":
        return down
    if mode == "rpi":
        return up
    if mode == "rzi":
        return down if q >= 0 else up
    rest = q - down
    return up if rest > Fraction(1, 2) or rest == Fraction(1, 2) and down % 2 else down


def _convert(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    """The value of a (an integer's, or a float's) rounded once to the destination format
    with IEEE overflow and subnormals (round_fraction); NaN, infinities and signed zeros are
    no numbers: they stay what they are."""
    (p, st), = args
    want = resolve_type(x.type or "D", ev.mods)
    mode = ev.param(x) or "rn"
    if st in _FLOAT_TYPES:
        if want == "f16" and isnan(p):
            return f16_from_bits(0x7FFF), want      # the canonical f16 NaN, as on the GPU
        if not isfinite(p) or p == 0:
            return _HELD_AS[want](p), want
        value = exact(p)
    else:
        value = Fraction(_signed(p, st))
    return round_fraction(value, want, mode), want


def _round_int(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    """An integral value in a's own type (exact: a float with a fraction is small enough for
    its integer neighbours to be floats); a zero result keeps a's sign (IEEE)."""
    (p, t), = args
    if not isfinite(p) or p == 0:
        return p, t
    n = _integral(exact(p), ev.param(x))
    if n == 0:
        return type(p)(-0.0 if signbit(p) else 0.0), t
    return type(p)(n), t


def _to_int(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    """The integer a denotes (a float rounded, .rzi by default) clamped to the destination's
    range: PTX's float-to-integer conversions saturate, and .sat asks for it between
    integers.  A NaN has no integer: the GPU writes 0, or the top bit alone from an f64 or
    into 64 bits (measured on an H100: tests/test_gpu_truth.py)."""
    (p, st), = args
    want = resolve_type(x.type or "D", ev.mods)
    w = _width(want)
    lo, hi = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if is_signed(want) else (0, mask(w))
    if st not in _FLOAT_TYPES:
        v = _signed(p, st)
    elif isnan(p):
        return (1 << (w - 1) if st == "f64" or w == 64 else 0), want
    elif not isfinite(p):
        v = hi if p > 0 else lo
    else:
        v = _integral(exact(p), ev.param(x) or "rzi")
    return max(lo, min(hi, v)) & mask(w), want


def _tf32(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    """cvt.rna.tf32.f32: the f32 a rounded to 10 fraction bits (its quantum that of the f32
    binade, subnormals included), to nearest with ties away from zero; a magnitude rounded
    up to 2^128 is infinity.  The result is the f32 bits of that value; a NaN 0x7fffe000."""
    (p, _), = args
    want = resolve_type(x.type or "b32", ev.mods)
    if isnan(p):
        return 0x7FFFE000, want
    if isfinite(p) and p != 0:
        q = abs(exact(p))
        e = q.numerator.bit_length() - q.denominator.bit_length()
        e -= Fraction(2) ** e > q                  # 2^e <= q < 2^(e+1)
        quantum = Fraction(2) ** (max(e, -126) - 10)
        n = q / quantum
        k = n.numerator // n.denominator
        k += n - k >= Fraction(1, 2)
        mag = k * quantum
        value = math.inf if mag >= Fraction(2) ** 128 else float(mag)
        p = F32(-value if signbit(p) else value)
    return to_bits(p, "f32"), want


# --- addresses: the windows are this interpreter's own (machine.Thread) -----------------------

def _to_generic(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    """A shared or local offset plus its window's base; any other address is generic."""
    (a, t), = args
    space = space_of(t)
    if space in ("shared", "local"):
        a = (ev.th.window_base(space) + a) & mask(64)
    return a, "addr.generic"


def _to_space(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    (a, _), = args
    want = resolve_type(x.type or "S", ev.mods)
    space = space_of(want)
    if space in ("shared", "local"):
        a = (a - ev.th.window_base(space)) & mask(64)
    return a, want


def _in_space(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    (a, _), = args

    def inside(space: str) -> bool:
        return (a - ev.th.window_base(space)) & mask(64) < ev.th.window_size(space)

    space = ev.param(x)
    if space in ("shared", "local"):
        return inside(space), "pred"
    return not (inside("shared") or inside("local")), "pred"


def _concat(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    want = resolve_type(x.type or "T", ev.mods)
    part = _width(want) // len(args)
    out = 0
    for k, (bits, _) in enumerate(args):
        out |= (bits & mask(part)) << (part * k)
    return out, want


# --- memory (interp/ops.py: the accesses; machine.Thread: the windows and their checks) ----

def _at(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    """The whole access (all its elements) is checked here, once."""
    (a, t), = args
    elements = ev.form.dests or (ev.form.sources or 2) - 1
    size = type_size(resolve_type("T", ev.mods)) * elements
    return at_address(ev.th, ev.op, a, space_of(t), size), t


def _element(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    (p, t), = args
    return (p + ev.param(x) * type_size(resolve_type("T", ev.mods))) & mask(64), t


def _load(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    (p, t), = args
    return load_value(ev.th, p, space_of(t), resolve_type(x.type or "T", ev.mods))


def _store(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    (p, t), (v, vt) = args
    store_value(ev.th, p, space_of(t), v, vt)
    return None, "none"


def _atomic(ev: _Evaluation, x: Fn, args: list[Typed]) -> Typed:
    (p, t), (val, vt), *rest = args
    if vt in ("f16", "bf16"):               # atom.add.noftz on halves: their bits
        val = ev.th.src(ev.op, 1, vt)
    old = atomic_update(ev.th, ev.op, p, space_of(t), ev.param(x), vt, val,
                        rest[0][0] if rest else None)
    return old, "b16" if vt in ("f16", "bf16") else vt


_FUNCTIONS: dict[str, Callable[[_Evaluation, Fn, list[Typed]], Typed]] = {
    "add": _rounded("add", lambda p, q, w: p + q),
    "sub": _rounded("sub", lambda p, q, w: p - q),
    "mul": _rounded("mul", lambda p, q, w: p * q),
    "fma": _fma, "div": _div, "rem": _rem, "add_sat": _saturating(1), "sub_sat": _saturating(-1),
    "neg": _neg, "abs": _abs,
    "min": _min_max(True, False), "max": _min_max(False, False),
    "min_nan": _min_max(True, True), "max_nan": _min_max(False, True),
    "and": _bits(lambda p, q: p & q), "or": _bits(lambda p, q: p | q),
    "xor": _bits(lambda p, q: p ^ q), "not": _not,
    "shl": _shift(True), "shr": _shift(False),
    "popc": _popc, "clz": _clz, "brev": _brev,
    "cmp": _cmp, "select": _select, "resize": _resize, "ext": _ext, "slice": _slice,
    "copysign": _copysign, "testp": _testp,
    "sqrt": _sqrt, "rsqrt": _rsqrt, "sin": _approximate(np.sin), "cos": _approximate(np.cos),
    "ex2": _approximate(np.exp2), "lg2": _approximate(np.log2), "tanh": _approximate(np.tanh),
    "funnel": _funnel, "bfe": _bfe, "bfi": _bfi, "prmt": _prmt, "lop3": _lop3, "fns": _fns,
    "convert": _convert, "round_int": _round_int, "to_int": _to_int, "tf32": _tf32,
    "to_generic": _to_generic, "to_space": _to_space, "in_space": _in_space, "concat": _concat,
    "at": _at, "element": _element, "load": _load, "store": _store, "atomic": _atomic,
}
