"""Register values of the reference interpreter and the exact arithmetic behind them.

Representation (one Python object per IR value, by IR type):
  * `i1 i8 i16 i32 i64`: a Python int holding the unsigned bit pattern (0 <= v < 2**w);
    f16 values are carried as i16 bits, as everywhere in cpuify;
  * `f32`: a `numpy.float32` scalar, `f64`: a `numpy.float64` scalar.

PTX types name how an instruction *reads* a register (`add.s16` reads 16 bits of a 32-bit
register and sign-extends where a wider result is written): `ir_type_of()` gives the IR
type a PTX type is computed in, `read_as()` / `write_as()` convert between the two exactly
like the LLVM code generator (`SegmentEmitter.operand` / `result` / `coerce_bits`).

Directed rounding is computed from exact rational values (`fractions.Fraction`) and
`round_fraction()`: slow, but needs no reasoning about error-free transformations."""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import numpy as np

from cpuify.ir.modifiers import type_size

# --- integers -----------------------------------------------------------------------------


def mask(width: int) -> int:
    return (1 << width) - 1


def width_of(ir_type: str) -> int:
    return int(ir_type[1:])


def to_signed(x: int, width: int) -> int:
    """The two's complement value of the `width`-bit pattern x."""
    x &= mask(width)
    return x - (1 << width) if x >> (width - 1) else x


def resize_int(x: int, from_w: int, to_w: int, signed: bool) -> int:
    """Truncate, or zero/sign-extend, a `from_w`-bit pattern to `to_w` bits."""
    if to_w <= from_w:
        return x & mask(to_w)
    if signed:
        return to_signed(x, from_w) & mask(to_w)
    return x & mask(from_w)


def is_signed(ptx_type: str) -> bool:
    return ptx_type.startswith("s")


def is_float(ptx_type: str) -> bool:
    return ptx_type in ("f16", "f32", "f64")


def ir_type_of(ptx_type: str) -> str:
    """The IR type a PTX type is computed in (LLVM codegen's `ptx_llvm_type`)."""
    if ptx_type == "pred":
        return "i1"
    if ptx_type in ("f32", "f64"):
        return ptx_type
    if ptx_type in ("f16", "bf16"):
        return "i16"
    return f"i{8 * type_size(ptx_type)}"


# --- floats --------------------------------------------------------------------------------

F16, F32, F64 = np.float16, np.float32, np.float64
_NP_FLOAT = {"f16": F16, "f32": F32, "f64": F64}
_UINT = {"f16": np.uint16, "f32": np.uint32, "f64": np.uint64}
FLT_MIN = F32(1.1754943508222875e-38)


def f16_from_bits(bits: int) -> np.float16:
    return np.array([bits & 0xFFFF], dtype=np.uint16).view(np.float16)[0]


def f16_to_bits(v: np.float16) -> int:
    return int(np.array([v], dtype=np.float16).view(np.uint16)[0])


def bf16_from_bits(bits: int) -> np.float32:
    """A bf16 register's value, as the f32 it is the upper half of."""
    return np.array([(bits & 0xFFFF) << 16], dtype=np.uint32).view(np.float32)[0]


def bf16_to_bits(v: object) -> int:
    """The bits of a value already rounded to bf16 (an f32 whose low half is zero); NaN is
    the canonical 0x7FFF."""
    if np.isnan(v):  # type: ignore[call-overload]
        return 0x7FFF
    return int(np.array([v], dtype=np.float32).view(np.uint32)[0]) >> 16


def to_bits(v: object, ir_type: str) -> int:
    """The bit pattern of value v of IR type ir_type."""
    if ir_type == "f32":
        return struct.unpack("<I", np.float32(v).tobytes())[0]  # type: ignore[arg-type]
    if ir_type == "f64":
        return struct.unpack("<Q", np.float64(v).tobytes())[0]  # type: ignore[arg-type]
    if ir_type == "f16":
        return f16_to_bits(v)  # type: ignore[arg-type]
    return int(v) & mask(width_of(ir_type))  # type: ignore[call-overload]


def from_bits(bits: int, ir_type: str) -> object:
    if ir_type == "f32":
        return np.frombuffer(struct.pack("<I", bits & 0xFFFFFFFF), dtype=np.float32)[0]
    if ir_type == "f64":
        return np.frombuffer(struct.pack("<Q", bits & mask(64)), dtype=np.float64)[0]
    if ir_type == "f16":
        return f16_from_bits(bits)
    return bits & mask(width_of(ir_type))


def coerce(v: object, have: str, want: str) -> object:
    """Reinterpret a value of IR type `have` as `want` (codegen's `coerce_bits`): integers
    are truncated/zero-extended, same-width int<->float is a bitcast, other widths go
    through the integer of the source width."""
    if have == want:
        return v
    if have[0] == "i" and want[0] == "i":
        return resize_int(v, width_of(have), width_of(want), False)  # type: ignore[arg-type]
    bits = to_bits(v, have)
    hw, ww = width_of(have), width_of(want)
    if hw != ww:
        bits = resize_int(bits, hw, ww, False)
    return from_bits(bits, want)


def read_as(v: object, have: str, ptx_type: str) -> object:
    """A register of IR type `have` read as PTX type `ptx_type` (codegen's `operand`)."""
    want = ir_type_of(ptx_type)
    if have == want:
        return v
    if have[0] == "i" and want[0] == "i":
        return resize_int(v, width_of(have), width_of(want), is_signed(ptx_type))  # type: ignore[arg-type]
    return coerce(v, have, want)


def write_as(v: object, ptx_type: str, reg_type: str) -> object:
    """A value computed in PTX type `ptx_type` stored into a register of IR type
    `reg_type` (codegen's `result`: wider integer registers are sign-extended for .s types)."""
    have = ir_type_of(ptx_type)
    if have[0] == "i" and reg_type[0] == "i" and width_of(reg_type) > width_of(have):
        return resize_int(v, width_of(have), width_of(reg_type), is_signed(ptx_type))  # type: ignore[arg-type]
    return coerce(v, have, reg_type)


def isnan(x: object) -> bool:
    return bool(np.isnan(x))  # type: ignore[call-overload]


def isfinite(x: object) -> bool:
    return bool(np.isfinite(x))  # type: ignore[call-overload]


def signbit(x: object) -> bool:
    return bool(np.signbit(x))  # type: ignore[call-overload]


def ftz(x: object, on: bool) -> object:
    """Flush a subnormal f32 or f16 to a zero of the same sign (PTX .ftz)."""
    if on and isinstance(x, np.float32) and x != 0 and abs(x) < FLT_MIN:
        return np.float32(-0.0) if signbit(x) else np.float32(0.0)
    if on and isinstance(x, np.float16) and x != 0 and abs(x) < np.float16(2.0 ** -14):
        return np.float16(-0.0) if signbit(x) else np.float16(0.0)
    return x


def saturate(x: object) -> object:
    """PTX .sat for floats: clamp to [+0.0, 1.0] (so -0.0 becomes +0.0), NaN becomes +0.0."""
    t = type(x)
    if isnan(x) or x <= 0:  # type: ignore[operator]
        return t(0.0)
    if x > 1:  # type: ignore[operator]
        return t(1.0)
    return x


# --- exact rounding -----------------------------------------------------------------------

# (precision in bits incl. the implicit one, minimum normal exponent, maximum exponent)
_FORMAT = {"f16": (11, -14, 15), "bf16": (8, -126, 127), "f32": (24, -126, 127),
           "f64": (53, -1022, 1023)}


def exact(x: object) -> Fraction:
    """The exact rational value of a finite float."""
    return Fraction(float(x))  # type: ignore[arg-type]


def round_fraction(q: Fraction, fmt: str, mode: str) -> object:
    """Round the exact value q to float format fmt ('f16'|'bf16'|'f32'|'f64') with rounding mode
    'rn' (nearest even), 'rz', 'rm' or 'rp', with IEEE overflow and subnormals.  q == 0
    gives +0.0: the sign of an exact zero is the caller's business."""
    np_t = _NP_FLOAT.get(fmt, F32)          # (bf16 values are held as f32)
    if q == 0:
        return np_t(0.0)
    prec, emin, emax = _FORMAT[fmt]
    neg = q < 0
    a = -q if neg else q
    # exponent e with 2**e <= a < 2**(e+1)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    elif Fraction(2) ** (e + 1) <= a:
        e += 1
    quantum = max(e, emin) - (prec - 1)          # exponent of one unit in the last place
    scaled = a / Fraction(2) ** quantum
    n = scaled.numerator // scaled.denominator
    rest = scaled - n
    if rest:
        if mode == "rn":
            if rest > Fraction(1, 2) or rest == Fraction(1, 2) and n % 2 == 1:
                n += 1
        elif mode == "rp" and not neg or mode == "rm" and neg:
            n += 1
        elif mode not in ("rz", "rp", "rm"):
            raise ValueError(f"unknown rounding mode {mode!r}")
    mag = Fraction(n) * Fraction(2) ** quantum
    largest = (Fraction(2) - Fraction(2) ** (1 - prec)) * Fraction(2) ** emax
    if mag > largest:
        away = mode == "rn" or (mode == "rp" and not neg) or (mode == "rm" and neg)
        val = math.inf if away else float(largest)
    else:
        val = float(mag)          # exact: mag has at most `prec` significant bits
    return np_t(-val if neg else val)


def zero_sum(x_neg: bool, y_neg: bool, both_zero: bool, mode: str | None, np_t: type) -> object:
    """IEEE 754 sign of an exactly-zero sum x + y: the common sign of two zero addends,
    otherwise +0, except -0 when rounding toward -inf."""
    if both_zero and x_neg == y_neg:
        return np_t(-0.0 if x_neg else 0.0)
    return np_t(-0.0 if mode == "rm" else 0.0)


def next_toward(x: object, up: bool) -> object:
    t = type(x)
    return np.nextafter(x, t(np.inf) if up else t(-np.inf))  # type: ignore[call-overload]


def round_integral(x: object, mode: str) -> object:
    """cvt.rni/rzi/rmi/rpi: round to an integral value in the same format."""
    fn = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}[mode]
    return fn(x)


def float_min_max(a: object, b: object, is_min: bool, propagate_nan: bool) -> object:
    """PTX min/max.f32/f64: with .NaN any NaN input gives NaN; otherwise a NaN input is
    ignored (NaN only if both are).  -0.0 is smaller than +0.0."""
    t = type(a)
    if isnan(a) or isnan(b):
        if propagate_nan or isnan(a) and isnan(b):
            return t(np.nan)
        return b if isnan(a) else a
    if a == b:
        # equal: only signed zeros can differ
        pick_a = signbit(a) if is_min else not signbit(a)
        return a if pick_a else b
    if is_min:
        return a if a < b else b  # type: ignore[operator]
    return a if a > b else b  # type: ignore[operator]
