"""cvt with floats on the PTX instruction table (ir/ptx_table.py: the functions convert,
round_int, to_int and tf32), checked three ways: compiled code, the reference interpreter
and a third computation written here from the PTX ISA agree bit for bit.

The third computation rounds exactly without sharing the interpreter's rounding: the two
neighbours of the exact value (a Fraction) in the destination format are found by bisection
over every finite f16/bf16 value, or from the double Python rounds a Fraction to (f32, f64)
and stepped by bits; the mode picks one (a tie to the even bit pattern; past the largest
finite value the next bit pattern is infinity).  Float to integer: Python's round/trunc/
floor/ceil of the Fraction, clamped; a NaN as an H100 converts it (tests/test_gpu_truth.py).

The inputs are dense at the edges: f16 and bf16 bit patterns (all of them with --runslow);
f32 and f64 values at, next to and halfway between f16/bf16/f32 values; values at and
beyond every integer range and halfway between integers; subnormals with and without .ftz;
NaN, infinities, -0.  The compiled code runs all of them; the interpreter (slow) a subset
with every special case."""

from __future__ import annotations

import functools
import math
import struct
from bisect import bisect_right
from fractions import Fraction

import numpy as np
import pytest

import cpuify
from cpuify.interp import interpret_kernel
from cpuify.ir.ptx_table import TABLE

RNG = np.random.default_rng(20261127)
FLOATS = ("f16", "bf16", "f32", "f64")
INTS = ("s8", "u8", "s16", "u16", "s32", "u32", "s64", "u64")
WIDTH = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64, "s8": 8, "u8": 8, "s16": 16,
         "u16": 16, "s32": 32, "u32": 32, "s64": 64, "u64": 64, "tf32": 32}


# --- the kernels: one thread per input, one output slot per conversion -----------------------------

def _reg(t: str, k: int) -> str:
    if t in ("f16", "bf16"):
        return f"%h{k}"
    if t == "f32":
        return f"%f{k}"
    if t == "f64":
        return f"%fd{k}"
    return f"%rd{k}" if WIDTH[t] == 64 else f"%r{k}"


def _store_type(t: str) -> str:
    return {16: "b16", 32: "b32", 64: "b64"}[max(WIDTH[t], 32) if t in INTS else WIDTH[t]]


def _kernel(name: str, src: str, ops: list[tuple[str, str]]) -> str:
    """A PTX kernel `name(in, out, n)`: thread i loads its source (type `src`) from the u64
    slot in[i], runs each `cvt<modifiers>` of `ops` ((modifiers, destination type): `.rn.f16`)
    into its own register and stores it to slot k of its row of len(ops) u64 slots."""
    n = len(ops) + 2
    lines = [".version 7.8", ".target sm_80", ".address_size 64", "",
             f".visible .entry {name}(.param .u64 pin, .param .u64 pout, .param .u32 pn)", "{",
             "    .reg .pred %p<2>;", f"    .reg .b16 %h<{n}>;", f"    .reg .b32 %r<{n}>;",
             f"    .reg .b64 %rd<{n}>;", f"    .reg .f32 %f<{n}>;", f"    .reg .f64 %fd<{n}>;",
             "    .reg .b32 %i<8>;", "    .reg .b64 %a<8>;",
             "    ld.param.u64 %a1, [pin];", "    ld.param.u64 %a2, [pout];",
             "    ld.param.u32 %i1, [pn];", "    mov.u32 %i2, %tid.x;", "    mov.u32 %i3, %ctaid.x;",
             "    mov.u32 %i4, %ntid.x;", "    mad.lo.s32 %i2, %i3, %i4, %i2;",
             "    setp.ge.u32 %p1, %i2, %i1;", "    @%p1 bra DONE;",
             "    cvta.to.global.u64 %a1, %a1;", "    cvta.to.global.u64 %a2, %a2;",
             "    mul.wide.u32 %a3, %i2, 8;", "    add.s64 %a4, %a1, %a3;",
             f"    mul.wide.u32 %a5, %i2, {8 * len(ops)};", "    add.s64 %a6, %a2, %a5;",
             f"    ld.global.{_store_type(src)} {_reg(src, 0)}, [%a4];"]
    for k, (modifiers, dst) in enumerate(ops):
        lines += [f"    cvt{modifiers}.{src} {_reg(dst, k + 1)}, {_reg(src, 0)};",
                  f"    st.global.{_store_type(dst)} [%a6+{8 * k}], {_reg(dst, k + 1)};"]
    lines += ["DONE:", "    ret;", "}", ""]
    return "\n".join(lines)


def _run(ptx: str, name: str, bits: list[int], n_out: int, interpreted: bool) -> np.ndarray:
    n = len(bits)
    inp = np.array(bits, dtype=np.uint64)
    out = np.zeros((n, n_out), np.uint64)
    args = (inp, out, np.uint32(n))
    grid, block = ((n + 127) // 128,), (128,)
    if interpreted:
        interpret_kernel(ptx, name, grid, block, args)
    else:
        cpuify.RawModule(ptx=ptx).get_function(name)(grid, block, args)
    return out


def _subset(n: int, specials: int, step: int = 23) -> list[int]:
    """The rows the interpreter runs: the first `specials` (the edge cases) and every
    `step`-th of the rest."""
    return list(range(min(n, specials))) + list(range(specials, n, step))


def _check(src: str, ops: list[tuple[str, str]], bits: list[int],
           expect: list[list[int | None]], specials: int) -> None:
    """Compiled (all rows) and interpreted (a subset) against the expected bits (None: any
    NaN of the destination type)."""
    name = "cvt_" + src
    ptx = _kernel(name, src, ops)
    rows = {False: list(range(len(bits))), True: _subset(len(bits), specials)}
    for interpreted in (False, True):
        chosen = rows[interpreted]
        got = _run(ptx, name, [bits[i] for i in chosen], len(ops), interpreted)
        run = "interpreted" if interpreted else "compiled"
        bad = []
        for j, i in enumerate(chosen):
            for k, (modifiers, dst) in enumerate(ops):
                g = int(got[j, k]) & ((1 << WIDTH[dst]) - 1)
                want = expect[i][k]
                if (not _is_nan(g, dst)) if want is None else g != want:
                    bad.append((i, k, g, want))
        if bad:
            i, k, g, want = bad[0]
            raise AssertionError(
                f"{run}: cvt{ops[k][0]}.{src} of {bits[i]:#x}: {g:#x}, expected "
                f"{'NaN' if want is None else hex(want)} ({len(bad)} differ)")


# --- the third computation --------------------------------------------------------------------------

# (exponent bits, fraction bits) of each float format
_LAYOUT = {"f16": (5, 10), "bf16": (8, 7), "f32": (8, 23), "f64": (11, 52)}


def _is_nan(bits: int, t: str) -> bool:
    e, f = _LAYOUT[t]
    return (bits >> f) & ((1 << e) - 1) == (1 << e) - 1 and bits & ((1 << f) - 1) != 0


@functools.lru_cache(maxsize=1 << 16)
def _magnitude(bits: int, t: str) -> Fraction:
    """The value of a non-negative finite bit pattern from its fields; the pattern of
    infinity stands for 2^(emax+1), one step past the largest finite value."""
    e, f = _LAYOUT[t]
    bias = (1 << (e - 1)) - 1
    exp, frac = bits >> f, bits & ((1 << f) - 1)
    if exp == (1 << e) - 1:
        return Fraction(2) ** (bias + 1)
    if exp == 0:
        return Fraction(math.ldexp(frac, 1 - bias - f))         # (exact: a double)
    return Fraction(math.ldexp(frac | 1 << f, exp - bias - f))


_GRIDS: dict[str, list[float]] = {}


def _below(a: Fraction, t: str) -> int:
    """The bit pattern of the largest non-negative finite value <= a (a < 2^(emax+1)): a
    first guess from the double nearest a, then exact comparisons."""
    e, f = _LAYOUT[t]
    top = ((1 << e) - 1) << f                               # infinity's pattern
    near = float(a)
    if t in ("f16", "bf16"):
        grid = _GRIDS.get(t)
        if grid is None:                    # every value of the format, as doubles
            patterns = np.arange(top + 1, dtype=np.uint32)
            values = (patterns.astype(np.uint16).view(np.float16) if t == "f16" else
                      (patterns << 16).view(np.float32)).astype(np.float64)
            values[-1] = float(_magnitude(top, t))
            grid = _GRIDS[t] = values.tolist()
        bits = max(bisect_right(grid, near) - 1, 0)
    elif t == "f32":
        try:
            bits = struct.unpack("<I", struct.pack("<f", near))[0]
        except OverflowError:
            bits = top
    else:
        bits = struct.unpack("<Q", struct.pack("<d", near))[0]
    bits = min(bits, top - 1)
    while _magnitude(bits, t) > a:
        bits -= 1
    while bits + 1 < top and _magnitude(bits + 1, t) <= a:
        bits += 1
    return bits


def _rounded(v: Fraction, t: str, mode: str) -> int:
    """The bit pattern of the exact value v rounded to format t as `mode` (rn rz rm rp)."""
    e, f = _LAYOUT[t]
    sign = (1 << (e + f)) if v < 0 else 0
    a = abs(v)
    top = ((1 << e) - 1) << f
    if a >= _magnitude(top, t):                              # at or past 2^(emax+1)
        lo = top - 1
    else:
        lo = _below(a, t)
    if _magnitude(lo, t) == a:
        return sign | lo
    hi = lo + 1                                              # (may be infinity's pattern)
    up = {"rz": False, "rp": v > 0, "rm": v < 0}.get(mode)
    if up is None:                                           # rn: the nearer, a tie even
        d_lo, d_hi = a - _magnitude(lo, t), _magnitude(hi, t) - a
        up = d_hi < d_lo or d_hi == d_lo and hi % 2 == 0
    return sign | (hi if up else lo)


def _float_bits(x: float, t: str) -> int:
    """The bits of a float value that is exact in format t (zeros, infinities included)."""
    e, f = _LAYOUT[t]
    sign = (1 << (e + f)) if math.copysign(1.0, x) < 0 else 0
    if math.isinf(x):
        return sign | ((1 << e) - 1) << f
    return _rounded(Fraction(x), t, "rn") | sign if x else sign


def _value(bits: int, t: str) -> float | None:
    """The value of a source's bits (None: NaN)."""
    if t in INTS:
        w = WIDTH[t]
        bits &= (1 << w) - 1
        return float(bits - (1 << w) if t[0] == "s" and bits >> (w - 1) else bits)
    if _is_nan(bits, t):
        return None
    e, f = _LAYOUT[t]
    neg = bits >> (e + f)
    mag = bits & ((1 << (e + f)) - 1)
    if mag == ((1 << e) - 1) << f:
        return -math.inf if neg else math.inf
    v = float(_magnitude(mag, t))
    return -v if neg else v


def _exact(bits: int, t: str) -> Fraction:
    """The exact value of an integer's or a finite float's bits."""
    if t in INTS:
        w = WIDTH[t]
        bits &= (1 << w) - 1
        return Fraction(bits - (1 << w) if t[0] == "s" and bits >> (w - 1) else bits)
    e, f = _LAYOUT[t]
    mag = _magnitude(bits & ((1 << (e + f)) - 1), t)
    return -mag if bits >> (e + f) else mag


def _expected_float(bits: int, src: str, dst: str, mode: str, ftz: bool = False,
                    sat: bool = False) -> int | None:
    """cvt{.mode}{.ftz}{.sat}.dst.src of the source bits (None: a NaN)."""
    x = _value(bits, src)
    if x is None:
        return _float_bits(0.0, dst) if sat else None
    if math.isinf(x) or x == 0:
        r = _float_bits(x, dst)
    else:
        v = _exact(bits, src)
        if ftz and src == "f32" and abs(v) < Fraction(2) ** -126:
            v, r = Fraction(0), _float_bits(math.copysign(0.0, x), dst)
        else:
            r = _rounded(v, dst, mode)
    if ftz and dst == "f32" and r & 0x7FFFFFFF and r & 0x7F800000 == 0:
        r &= 0x80000000                                      # a subnormal result: flushed
    if sat:
        value = _value(r, dst)
        assert value is not None
        r = _float_bits(0.0 if value <= 0 else min(value, 1.0), dst)
    return r


def _expected_int(bits: int, src: str, dst: str, mode: str, ftz: bool = False) -> int:
    """cvt.<mode>{.ftz}.dst.src: rounded, clamped; NaN 0 or the top bit alone (from f64 or
    into 64 bits)."""
    w = WIDTH[dst]
    lo, hi = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if dst[0] == "s" else (0, (1 << w) - 1)
    x = _value(bits, src)
    if x is None:
        return 1 << (w - 1) if src == "f64" or w == 64 else 0
    if math.isinf(x):
        n = hi if x > 0 else lo
    else:
        v = _exact(bits, src)
        if ftz and src == "f32" and abs(v) < Fraction(2) ** -126:
            v = Fraction(0)
        n = {"rni": round(v), "rzi": int(v), "rmi": math.floor(v), "rpi": math.ceil(v)}[mode]
    return max(lo, min(hi, n)) & ((1 << w) - 1)


def _round_integral(bits: int, t: str, mode: str, ftz: bool = False) -> int | None:
    """cvt.<mode>{.ftz}.t.t: an integral value of t, a zero keeping the sign."""
    x = _value(bits, t)
    if x is None:
        return None
    if math.isinf(x) or x == 0:
        return _float_bits(x, t)
    v = _exact(bits, t)
    if ftz and t == "f32" and abs(v) < Fraction(2) ** -126:
        v = Fraction(0)
    n = {"rni": round(v), "rzi": int(v), "rmi": math.floor(v), "rpi": math.ceil(v)}[mode]
    return _float_bits(math.copysign(0.0, x), t) if n == 0 else _rounded(Fraction(n), t, "rn")


def test_the_third_computation_on_hand_worked_values():
    """The reference itself, on values worked out by hand."""
    assert _rounded(Fraction(65520), "f16", "rn") == 0x7C00             # the tie: infinity
    assert _rounded(Fraction(65519), "f16", "rn") == 0x7BFF
    assert _rounded(Fraction(65520), "f16", "rz") == 0x7BFF
    assert _rounded(Fraction(-70000), "f16", "rm") == 0xFC00
    assert _rounded(Fraction(-70000), "f16", "rp") == 0xFBFF
    assert _rounded(Fraction(2049), "f16", "rn") == 0x6800               # 2048, even
    assert _rounded(Fraction(2051), "f16", "rn") == 0x6802               # 2052, even
    assert _rounded(Fraction(257), "bf16", "rn") == 0x4380               # 256
    assert _rounded(Fraction(2 ** 60 + 2 ** 52 + 1), "bf16", "rn") == 0x5D81
    assert _rounded(Fraction(1, 3), "f32", "rz") == 0x3EAAAAAA
    assert _rounded(Fraction(1, 3), "f32", "rp") == 0x3EAAAAAB
    assert _rounded(Fraction(2 ** 24 + 1), "f32", "rn") == 0x4B800000
    assert _rounded(Fraction(2) ** -150, "f32", "rn") == 0                # half the least: even
    assert _rounded(Fraction(3) * Fraction(2) ** -151, "f32", "rn") == 1
    assert _expected_int(0x7FC00000, "f32", "s32", "rni") == 0
    assert _expected_int(0x7FF8000000000000, "f64", "s32", "rzi") == 0x80000000
    assert _expected_int(_float_bits(2.5, "f32"), "f32", "s32", "rni") == 2
    assert _expected_int(_float_bits(-2.5, "f32"), "f32", "u32", "rmi") == 0
    assert _expected_int(_float_bits(1e-45, "f32"), "f32", "s32", "rpi") == 1
    assert _expected_int(_float_bits(1e-45, "f32"), "f32", "s32", "rpi", ftz=True) == 0


# --- the inputs ---------------------------------------------------------------------------------

def _bits32(xs) -> list[int]:
    return [int(v) for v in np.array(xs, np.float32).view(np.uint32)]


def _bits64(xs) -> list[int]:
    return [int(v) for v in np.array(xs, np.float64).view(np.uint64)]


def _around(xs, t: str) -> list[int]:
    """The bits of each value in format t (rounded to nearest) and of its two neighbours."""
    np_t, it = (np.float32, np.uint32) if t == "f32" else (np.float64, np.uint64)
    with np.errstate(all="ignore"):
        v = np.array(xs, np.float64).astype(np_t)
    v = v[np.isfinite(v)]
    out = np.concatenate([v, np.nextafter(v, np_t(np.inf)), np.nextafter(v, np_t(-np.inf))])
    return [int(b) for b in out.view(it)]


def _midpoints(t: str, step: int) -> list[float]:
    """Values halfway between consecutive f16 (bf16) values, every `step`-th pattern (and
    every subnormal and the top of the range): exact in f32."""
    top = 0x7C00 if t == "f16" else 0x7F80
    chosen = sorted(set(range(0, top - 1, step)) | set(range(0, 40)) |
                    set(range(top - 40, top - 1)) | set(range(0x3F0, 0x410)))
    return [float((_magnitude(b, t) + _magnitude(b + 1, t)) / 2) for b in chosen]


def _integer_edges() -> list[float]:
    """Values at and around the ends of every integer range, and halfway between small
    integers."""
    xs: list[float] = []
    for w in (8, 16, 32, 64):
        for edge in (2.0 ** (w - 1), 2.0 ** w):
            xs += [edge - 1, edge - 0.5, edge, edge + 0.5, edge + 1, -edge, -edge - 0.5,
                   -edge - 1, -edge + 0.5]
    xs += [k + 0.5 for k in range(-5, 5)] + [0.25, 0.75, -0.25, -0.75, 1.0, -1.0]
    return xs


SPECIAL32 = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
             0x7F800001, 0x7FBFFFFF, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF,
             0x00800000, 0x80800000, 0x00400000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F000000,
             0xBF000000, 0x3EFFFFFF, 0x3FC00000, 0xC0200000, 0x477FE000, 0x477FEFFF,
             0x477FF000, 0x47800000, 0x7F7F8000, 0x7F7F7FFF, 0x33000000, 0x33000001,
             0x337FFFFF, 0x3F801000, 0x3F803000, 0x3F802FFF, 0x4F000000, 0xCF000000,
             0x4F800000, 0x5F000000, 0xDF000000, 0x5F800000, 0x4B000001, 0x3F7FFFFF]


def _f32_inputs() -> tuple[list[int], int]:
    bits = SPECIAL32 + _around(_integer_edges(), "f32")
    n_special = len(bits)
    bits += _around(_midpoints("f16", 61) + _midpoints("bf16", 251), "f32")
    bits += _bits32(RNG.standard_normal(400) * 10.0 ** RNG.integers(-40, 39, 400))
    bits += [int(b) for b in RNG.integers(0, 2 ** 32, 400, dtype=np.uint64)]
    return bits, n_special


SPECIAL64 = [0, 1 << 63, 0x7FF0000000000000, 0xFFF0000000000000, 0x7FF8000000000000,
             0xFFF8000000000000, 0x7FF0000000000001, 1, (1 << 63) | 1, 0x000FFFFFFFFFFFFF,
             0x0010000000000000, 0x7FEFFFFFFFFFFFFF, 0xFFEFFFFFFFFFFFFF]


def _f64_inputs() -> tuple[list[int], int]:
    flt_max = float(np.finfo(np.float32).max)
    edges = [flt_max, flt_max + 2.0 ** 103, 2.0 ** 128, -flt_max - 2.0 ** 103, 65520.0,
             65504.0, 2.0 ** -149, 2.0 ** -150, 3 * 2.0 ** -151, 2.0 ** -126, 2.0 ** -127,
             2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26, 1e-310, 1 / 3, -2 / 3, 0.1]
    bits = SPECIAL64 + _around(edges + _integer_edges(), "f64")
    n_special = len(bits)
    f32_mid = []                                             # halfway between f32 values
    for x in RNG.standard_normal(300) * 10.0 ** RNG.integers(-45, 39, 300):
        f = np.float32(x)
        g = np.nextafter(f, np.float32(np.inf))
        if np.isfinite(g):
            f32_mid.append(float((Fraction(float(f)) + Fraction(float(g))) / 2))
    bits += _around(f32_mid + _midpoints("f16", 41) + _midpoints("bf16", 509), "f64")
    bits += _bits64(RNG.standard_normal(300) * 10.0 ** RNG.integers(-320, 300, 300))
    return bits, n_special


def _half_inputs(t: str, step: int = 1) -> tuple[list[int], int]:
    """The special values, then every `step`-th bit pattern and all the subnormals, the
    largest binade and the binades around 1 (all of them: step 1)."""
    specials = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3800, 0x3C00, 0x3E00, 0x4100,
                0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFE00] if t == "f16" else \
               [0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x0080, 0x3F00, 0x3F80, 0x3FC0, 0x4020,
                0x7F7F, 0xFF7F, 0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFC0, 0x4F00, 0x4F80, 0xCF00]
    f = 10 if t == "f16" else 7
    edges = [b for sign in (0, 0x8000) for b in (*range(1 << f), *range(0x3800, 0x4400),
                                                   *range(0x7C00 - (1 << f), 0x7C00))]
    chosen = sorted(set(range(0, 1 << 16, step)) | set(edges))
    return specials + chosen, len(specials)


def _int_inputs(t: str) -> tuple[list[int], int]:
    """At and next to the range ends, powers of two and the numbers halfway between f16,
    bf16, f32 and f64 values (2^11 + 1, 2^24 + 1, 2^53 + 1, 2^60 + 2^52 + 1, ...)."""
    w = WIDTH[t]
    m = (1 << w) - 1
    xs = [0, 1, m, 1 << (w - 1), (1 << (w - 1)) - 1, (1 << (w - 1)) + 1, m - 1]
    for k in range(w):
        xs += [1 << k, (1 << k) + 1, (1 << k) - 1, -(1 << k), -(1 << k) - 1]
    for p in (8, 11, 24, 53):                                # halfway for each precision
        for k in range(p, w):
            half = 1 << (k - p)
            xs += [(1 << k) + half, (1 << k) + half + 1, (1 << k) + half - 1,
                   (1 << k) + 3 * half, -(1 << k) - half, -(1 << k) - 3 * half]
    xs += [65504, 65519, 65520, 65535, 65536, 100000, -65520, -65519]
    bits = [x & m for x in xs]
    n_special = len(bits)
    bits += [int(b) & m for b in RNG.integers(0, 2 ** 63, 300, dtype=np.uint64)]
    bits += [int(b) & m for b in RNG.integers(-70000, 70000, 300)]
    return bits, n_special


MODES = ("rn", "rz", "rm", "rp")
IMODES = ("rni", "rzi", "rmi", "rpi")


# --- the tests ---------------------------------------------------------------------------------------

def test_cvt_is_entirely_spec_driven():
    assert TABLE["cvt"].spec_driven and not TABLE["cvt"].hand_written


@pytest.mark.parametrize("src", ["f32", "f64"])
def test_float_to_float_every_rounding_ftz_and_sat(src):
    """Into f16, bf16, f32, f64 with .rn/.rz/.rm/.rp: ties (to even), overflow (infinity or
    the largest finite), subnormal results; .ftz (f32 sources and results) and .sat."""
    bits, n_special = _f32_inputs() if src == "f32" else _f64_inputs()
    ops: list[tuple[str, str, str, bool, bool]] = []       # (mods, dst, mode, ftz, sat)
    for dst in FLOATS:
        if WIDTH[dst] < WIDTH[src] or dst == "bf16":
            ops += [(f".{m}", dst, m, False, False) for m in MODES]
        elif dst != src:
            ops.append(("", dst, "rn", False, False))
    if src == "f64":
        ops += [(".rz.ftz", "f32", "rz", True, False),
                (".rn.sat", "f32", "rn", False, True), (".rn.sat", "f16", "rn", False, True),
                (".rm.sat", "bf16", "rm", False, True), (".sat", "f64", "rn", False, True)]
    else:
        ops += [(".ftz", "f64", "rn", True, False), (".rn.ftz", "f16", "rn", True, False),
                (".rp.ftz", "bf16", "rp", True, False), (".sat", "f32", "rn", False, True),
                (".ftz.sat", "f32", "rn", True, True), (".rn.sat", "f16", "rn", False, True),
                (".rn.sat", "bf16", "rn", False, True)]
    expect = [[_expected_float(x, src, dst, mode, ftz, sat) for _, dst, mode, ftz, sat in ops]
              for x in bits]
    _check(src, [(m + "." + d, d) for m, d, *_ in ops], bits, expect, n_special)


@pytest.mark.parametrize("src, step", [("f16", 5), ("bf16", 5),
                                       pytest.param("f16", 1, marks=pytest.mark.slow),
                                       pytest.param("bf16", 1, marks=pytest.mark.slow)])
def test_halves_to_floats_and_integral_values(src, step):
    """f16 (bf16) bit patterns (every one of them with --runslow): into the other floats
    (exact, or rounded: bf16 <-> f16 with each rounding), and rounded to an integral value in
    its own type."""
    bits, n_special = _half_inputs(src, step)
    other = "bf16" if src == "f16" else "f16"
    ops = [("", "f32", "rn", False), ("", "f64", "rn", False), (".ftz", "f32", "rn", True)]
    ops += [(f".{m}", other, m, False) for m in MODES]
    expect = [[_expected_float(x, src, dst, mode, ftz) for _, dst, mode, ftz in ops] +
              [_round_integral(x, src, m) for m in IMODES] for x in bits]
    _check(src, [(m + "." + d, d) for m, d, *_ in ops] + [(f".{m}.{src}", src) for m in IMODES],
           bits, expect, n_special)


@pytest.mark.parametrize("src", ["f16", "bf16", "f32", "f64"])
def test_float_to_every_integer_type_with_every_rounding(src):
    """Rounded as .rni/.rzi/.rmi/.rpi (.rzi: none named), clamped at and past the ends of
    each range, NaN as an H100 converts it; .ftz on f32 flushes a subnormal first (rpi of
    the least positive f32: 1, with .ftz 0)."""
    if src in ("f16", "bf16"):
        bits, n_special = _half_inputs(src, step=7)
    else:
        bits, n_special = _f32_inputs() if src == "f32" else _f64_inputs()
    ops = [(f".{m}", dst, m, False) for dst in INTS for m in IMODES]
    ops += [("", "s32", "rzi", False), (".sat", "u16", "rzi", False)]
    if src == "f32":
        ops += [(".rpi.ftz", "s32", "rpi", True), (".rmi.ftz", "s64", "rmi", True)]
    expect = [[_expected_int(x, src, dst, mode, ftz) for _, dst, mode, ftz in ops]
              for x in bits]
    _check(src, [(m + "." + d, d) for m, d, *_ in ops], bits, expect, n_special)


@pytest.mark.parametrize("src", INTS)
def test_integer_to_every_float_type_with_every_rounding(src):
    """The integer's exact value rounded once: ties to even (2^24 + 1 into f32, 2^60 + 2^52
    + 1 into bf16: above the tie), overflow of f16 (65520 and up: infinity under .rn), .sat."""
    bits, n_special = _int_inputs(src)
    ops = [(f".{m}", dst, m, False) for dst in FLOATS for m in MODES]
    ops += [(".rn.sat", "f32", "rn", True), (".rz.sat", "f16", "rz", True)]
    expect = [[_expected_float(x, src, dst, mode, sat=sat) for _, dst, mode, sat in ops]
              for x in bits]
    _check(src, [(m + "." + d, d) for m, d, *_ in ops], bits, expect, n_special)


@pytest.mark.parametrize("src", ["f32", "f64"])
def test_integral_values_in_the_same_type(src):
    """cvt.rni/rzi/rmi/rpi.f32.f32 (.f64.f64): halfway cases, values past 2^23 (2^52)
    already integral, -0.5 to -0, subnormals (with .ftz: flushed before rounding up)."""
    bits, n_special = _f32_inputs() if src == "f32" else _f64_inputs()
    ops = [(f".{m}", m, False) for m in IMODES]
    if src == "f32":
        ops += [(f".{m}.ftz", m, True) for m in ("rpi", "rmi")] + [(".rni.ftz.sat", "rni", True)]
    expect = []
    for x in bits:
        row = []
        for mods, mode, ftz in ops:
            r = _round_integral(x, src, mode, ftz)
            if "sat" in mods:
                v = _value(r, src) if r is not None else 0.0
                r = _float_bits(0.0 if v is None or v <= 0 else min(v, 1.0), src)
            row.append(r)
        expect.append(row)
    _check(src, [(m + "." + src, src) for m, *_ in ops], bits, expect, n_special)


def test_rna_into_tf32():
    """cvt.rna.tf32.f32: 10 fraction bits, the tie (low 13 bits 0x1000) away from zero, the
    largest f32 to infinity; subnormals on the same grid; NaN 0x7fffe000."""
    bits, n_special = _f32_inputs()
    bits = [0x3F801000, 0xBF801000, 0x3F800FFF, 0x3F803000, 0x007FF000, 0x00001000,
            0x00000FFF] + bits

    def tf32(x: int) -> int:
        v = _value(x, "f32")
        if v is None:
            return 0x7FFFE000
        if math.isinf(v) or v == 0:
            return x
        q = abs(_exact(x, "f32"))
        lo = _rounded(q, "f32", "rz") & ~0x1FFF              # toward zero on tf32's grid
        gap = _magnitude(lo + 0x2000, "f32") - _magnitude(lo, "f32")
        mag = lo + 0x2000 if q - _magnitude(lo, "f32") >= gap / 2 else lo
        return (x & 0x80000000) | min(mag, 0x7F800000)

    _check("f32", [(".rna.tf32", "tf32")], bits, [[tf32(x)] for x in bits], n_special + 7)
