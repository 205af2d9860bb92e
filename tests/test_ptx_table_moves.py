"""Instructions moved onto the PTX instruction table (ir/ptx_table.py), checked three ways:
compiled code, the reference interpreter and a hand computation written here from the PTX
ISA (or NumPy) agree.

- the bit-field and byte instructions shf fns bfe bfi bmsk prmt lop3 (the functions funnel,
  bfe, bfi, prmt, lop3 and fns; bmsk a composition of shifts): edge cases (shift amounts
  and field positions at and past the width, fields running past the msb, every prmt mode
  and selector nibble, all 256 lop3 tables) and random inputs;
- cvt between integer types (the table's resize; .sat stays hand-written): every pair of
  the 8 integer types against NumPy's casts;
- the math functions, as the table's sqrt/rsqrt/sin/cos/ex2/lg2/tanh and rcp as div(1, a):
  round-to-nearest results against NumPy.

The kernels are PTX written here (one thread per input row), so that the operand types, the
immediates and the modifiers are exactly the ones named."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

import cpuify
from cpuify.errors import UnsupportedError
from cpuify.interp import interpret_kernel
from cpuify.ir.ptx_table import TABLE

M32, M64 = (1 << 32) - 1, (1 << 64) - 1
RNG = np.random.default_rng(20261127)


def _kernel(name: str, n_in: int, body: list[str], wide_in: tuple[int, ...] = ()) -> str:
    """A PTX kernel `name(in, out, n)`: thread i reads its row of n_in u64 slots of `in` into
    %a0.. (the low 32 bits; %w<k> the whole slot for k in wide_in), runs `body`, whose
    results %o0.. (b32) / %q0.. (b64) it stores to its row of 64 u64 slots of `out` (a line
    `OUT k %oj` / `OUT64 k %qj`)."""
    lines = [".version 7.8", ".target sm_80", ".address_size 64", "",
             f".visible .entry {name}(.param .u64 pin, .param .u64 pout, .param .u32 pn)", "{",
             "    .reg .pred %p<2>;", "    .reg .b32 %a<16>;", "    .reg .b32 %o<300>;",
             "    .reg .b32 %r<8>;", "    .reg .b64 %w<16>;", "    .reg .b64 %q<64>;",
             "    .reg .b64 %rd<8>;", "    .reg .f32 %f<40>;", "    .reg .f64 %fd<40>;",
             "    .reg .b16 %h<40>;",
             "    ld.param.u64 %rd1, [pin];", "    ld.param.u64 %rd2, [pout];",
             "    ld.param.u32 %r1, [pn];", "    mov.u32 %r2, %tid.x;", "    mov.u32 %r3, %ctaid.x;",
             "    mov.u32 %r4, %ntid.x;", "    mad.lo.s32 %r2, %r3, %r4, %r2;",
             "    setp.ge.u32 %p1, %r2, %r1;", "    @%p1 bra DONE;",
             "    cvta.to.global.u64 %rd1, %rd1;", "    cvta.to.global.u64 %rd2, %rd2;",
             f"    mul.wide.u32 %rd3, %r2, {8 * n_in};", "    add.s64 %rd4, %rd1, %rd3;",
             "    mul.wide.u32 %rd5, %r2, 512;", "    add.s64 %rd6, %rd2, %rd5;"]
    for k in range(n_in):
        lines.append(f"    ld.global.u32 %a{k}, [%rd4+{8 * k}];")
        if k in wide_in:
            lines.append(f"    ld.global.u64 %w{k}, [%rd4+{8 * k}];")
    for line in body:
        if line.startswith("OUT64 "):
            _, k, reg = line.split()
            lines.append(f"    st.global.u64 [%rd6+{8 * int(k)}], {reg};")
        elif line.startswith("OUT "):
            _, k, reg = line.split()
            lines.append(f"    st.global.u32 [%rd6+{8 * int(k)}], {reg};")
        else:
            lines.append(f"    {line}")
    lines += ["DONE:", "    ret;", "}", ""]
    return "\n".join(lines)


def _run_both(ptx: str, name: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's outputs per row, compiled and interpreted."""
    n = len(rows)
    flat = np.ascontiguousarray(rows, dtype=np.uint64)
    outs = []
    for run in ("compiled", "interpreted"):
        out = np.zeros((n, 64), np.uint64)
        args = (flat, out, np.uint32(n))
        grid, block = ((n + 63) // 64,), (64,)
        if run == "compiled":
            cpuify.RawModule(ptx=ptx).get_function(name)(grid, block, args)
        else:
            interpret_kernel(ptx, name, grid, block, args)
        outs.append(out)
    return outs[0], outs[1]


def _check(ptx: str, name: str, rows: list[tuple[int, ...]], expect: list[list[int]]) -> None:
    compiled, interpreted = _run_both(ptx, name, np.array(rows, dtype=np.uint64))
    want = np.array(expect, dtype=np.uint64)
    cols = want.shape[1]
    for run, got in (("compiled", compiled), ("interpreted", interpreted)):
        bad = np.argwhere(got[:, :cols] != want)
        if len(bad):
            i, k = bad[0]
            raise AssertionError(f"{run}: row {i} {[hex(v) for v in rows[i]]} output {k}: "
                                 f"{int(got[i, k]):#x}, expected {int(want[i, k]):#x} "
                                 f"({len(bad)} differ)")


def _words(n: int, bits: int = 32) -> list[int]:
    return [int(x) for x in RNG.integers(0, 2**bits, n, dtype=np.uint64)]


EDGE32 = [0, 1, M32, 0x80000000, 0x7FFFFFFF, 0x12345678, 0xF0F0F0F0, 0xDEADBEEF]
EDGE64 = [0, 1, M64, 1 << 63, (1 << 63) - 1, 0x0123456789ABCDEF, 0xFEDCBA9876543210]
AMOUNTS = [0, 1, 7, 15, 31, 32, 33, 63, 64, 65, 127, 200, 255, 256, 257, 0x1FF, 0x10001F,
           0x7FFFFFFF, 0x80000000, M32]


def _signed(x: int, w: int) -> int:
    return x - (1 << w) if x >> (w - 1) else x


# --- shf: funnel shifts ---------------------------------------------------------------------------

def _shf(a: int, b: int, c: int, left: bool, clamp: bool) -> int:
    """PTX ISA: n = min(c, 32) (.clamp) or c & 31 (.wrap); the 64-bit b:a shifted, the high
    (.l) or low (.r) word."""
    n = min(c, 32) if clamp else c & 31
    both = b << 32 | a
    return (both << n >> 32 if left else both >> n) & M32


def test_shf_all_modes_with_amounts_at_and_past_32():
    forms = [(left, clamp) for left in (True, False) for clamp in (True, False)]
    body = []
    for k, (left, clamp) in enumerate(forms):
        op = f"shf.{'l' if left else 'r'}.{'clamp' if clamp else 'wrap'}.b32"
        body += [f"{op} %o{k}, %a0, %a1, %a2;", f"OUT {k} %o{k}"]
    # an immediate amount past 32 (typed as the u32 operand the table reads)
    body += ["shf.l.clamp.b32 %o10, %a0, %a1, 40;", "OUT 4 %o10",
             "shf.r.wrap.b32 %o11, %a0, %a1, 37;", "OUT 5 %o11"]
    ptx = _kernel("shf", 3, body)
    rows = [(a, b, c) for a, b in ((0x89ABCDEF, 0x01234567), (M32, 0), (0, M32))
            for c in AMOUNTS]
    rows += list(zip(_words(64), _words(64), _words(64)))
    expect = [[_shf(a, b, c, *f) for f in forms] + [_shf(a, b, 40, True, True),
                                                   _shf(a, b, 37, False, False)]
              for a, b, c in rows]
    _check(ptx, "shf", rows, expect)


# --- bfe / bfi: bit fields ------------------------------------------------------------------------

def _bfe(a: int, pos: int, ln: int, w: int, signed: bool) -> int:
    """From the ISA's description: the field a[pos .. pos+len-1] (what lies inside a),
    zero-extended, or for .s types sign-extended from its top bit a[min(pos+len-1, msb)]
    (a start past the msb gives that bit replicated); len 0 gives 0."""
    pos, ln = pos & 0xFF, ln & 0xFF
    if ln == 0:
        return 0
    if not signed:
        return (a >> pos) & ((1 << ln) - 1) & ((1 << w) - 1)
    s = _signed(a, w)                     # Python's >> of a negative int is arithmetic
    if pos >= w:
        return (s >> (w - 1)) & ((1 << w) - 1)
    if pos + ln >= w:
        return (s >> pos) & ((1 << w) - 1)
    field = (a >> pos) & ((1 << ln) - 1)
    return _signed(field, ln) & ((1 << w) - 1)


def _bfi(a: int, b: int, pos: int, ln: int, w: int) -> int:
    pos, ln = pos & 0xFF, ln & 0xFF
    if ln == 0 or pos >= w:
        return b
    m = ((1 << min(ln, w - pos)) - 1) << pos
    return (b & ~m | (a << pos) & m) & ((1 << w) - 1)


FIELD = [0, 1, 5, 8, 16, 24, 31, 32, 33, 40, 63, 64, 65, 100, 255, 256, 257, 0x1FF, 0x1000F]


def test_bfe_signed_and_unsigned_32_and_64_with_fields_past_the_msb():
    body = ["bfe.u32 %o0, %a0, %a2, %a3;", "OUT 0 %o0",
            "bfe.s32 %o1, %a0, %a2, %a3;", "OUT 1 %o1",
            "bfe.u64 %q0, %w1, %a2, %a3;", "OUT64 2 %q0",
            "bfe.s64 %q1, %w1, %a2, %a3;", "OUT64 3 %q1",
            "bfe.s32 %o2, %a0, 28, 8;", "OUT 4 %o2",          # immediates, past the msb
            "bfe.u64 %q2, %w1, 60, 255;", "OUT64 5 %q2"]
    ptx = _kernel("bfe", 4, body, wide_in=(1,))
    rows = [(a, a64, p, n) for a, a64 in ((0x80000000, 1 << 63), (0x7FFFFFFF, (1 << 63) - 1),
                                           (0xDEADBEEF, 0xFEDCBA9876543210))
            for p, n in itertools.product(FIELD, FIELD)]
    rows += list(zip(_words(64), _words(64, 64), _words(64), _words(64)))
    expect = [[_bfe(a, p, n, 32, False), _bfe(a, p, n, 32, True), _bfe(a64, p, n, 64, False),
               _bfe(a64, p, n, 64, True), _bfe(a, 28, 8, 32, True), _bfe(a64, 60, 255, 64, False)]
              for a, a64, p, n in rows]
    _check(ptx, "bfe", rows, expect)


def test_bfi_32_and_64_with_fields_past_the_msb():
    body = ["bfi.b32 %o0, %a0, %a1, %a2, %a3;", "OUT 0 %o0",
            "bfi.b64 %q0, %w0, %w1, %a2, %a3;", "OUT64 1 %q0",
            "bfi.b32 %o1, %a0, %a1, 24, 16;", "OUT 2 %o1"]
    ptx = _kernel("bfi", 4, body, wide_in=(0, 1))
    rows = [(a, b, p, n) for a, b in ((M64, 0), (0, M64), (0x0123456789ABCDEF, 0xFEDCBA9876543210))
            for p, n in itertools.product(FIELD, FIELD)]
    rows += list(zip(_words(64, 64), _words(64, 64), _words(64), _words(64)))
    expect = [[_bfi(a & M32, b & M32, p, n, 32), _bfi(a, b, p, n, 64),
               _bfi(a & M32, b & M32, 24, 16, 32)] for a, b, p, n in rows]
    _check(ptx, "bfi", rows, expect)


# --- bmsk: a composition of shifts in the table ----------------------------------------------------

def _bmsk(a: int, b: int, clamp: bool) -> int:
    """The ones from bit a up to, not including, bit a + b, cut at bit 32: .clamp takes a and
    b at most 32, .wrap mod 32."""
    lo, width = (min(a, 32), min(b, 32)) if clamp else (a & 31, b & 31)
    return sum(1 << i for i in range(lo, min(lo + width, 32)))


def test_bmsk_clamp_and_wrap_exhaustively_to_35_and_past_2_to_the_31():
    ptx = _kernel("bmsk", 2, ["bmsk.clamp.b32 %o0, %a0, %a1;", "OUT 0 %o0",
                              "bmsk.wrap.b32 %o1, %a0, %a1;", "OUT 1 %o1",
                              "bmsk.wrap.b32 %o2, 1, 2;", "OUT 2 %o2"])   # the ISA's 0x6
    values = list(range(36)) + [40, 62, 63, 64, 65, 0x7FFFFFFF, 0x80000000, 0x80000001, M32 - 1, M32]
    rows = list(itertools.product(values, values))
    expect = [[_bmsk(a, b, True), _bmsk(a, b, False), 0x6] for a, b in rows]
    _check(ptx, "bmsk", rows, expect)


def test_bmsk_needs_its_mode():
    ptx = _kernel("nomode", 2, ["bmsk.b32 %o0, %a0, %a1;", "OUT 0 %o0"])
    with pytest.raises(UnsupportedError, match="bmsk.b32.*not supported"):
        _run_both(ptx, "nomode", np.zeros((1, 2), np.uint64))


# --- prmt: byte permutes --------------------------------------------------------------------------

# the ISA's tables of the modes: per c & 3, the source bytes of d's bytes 3, 2, 1, 0
_MODES = {"f4e": ("3210", "4321", "5432", "6543"), "b4e": ("5670", "6701", "7012", "0123"),
          "rc8": ("0000", "1111", "2222", "3333"), "ecl": ("3210", "3211", "3222", "3333"),
          "ecr": ("0000", "1110", "2210", "3210"), "rc16": ("1010", "3232", "1010", "3232")}


def _prmt(a: int, b: int, c: int, mode: str | None) -> int:
    data = (b << 32 | a).to_bytes(8, "little")
    if mode is not None:
        picks = _MODES[mode][c & 3]
        return int.from_bytes(bytes(data[int(ch)] for ch in reversed(picks)), "little")
    out = bytearray()
    for k in range(4):
        sel = c >> (4 * k) & 0xF
        byte = data[sel & 7]
        out.append((0xFF if byte >= 0x80 else 0) if sel >= 8 else byte)
    return int.from_bytes(bytes(out), "little")


def test_prmt_every_mode_and_every_selector_nibble():
    modes = [None, *_MODES]
    body = []
    for k, m in enumerate(modes):
        body += [f"prmt.b32{'.' + m if m else ''} %o{k}, %a0, %a1, %a2;", f"OUT {k} %o{k}"]
    body += ["prmt.b32 %o20, %a0, %a1, 0x7531;", "OUT 7 %o20",
             "prmt.b32.ecl %o21, %a0, %a1, 2;", "OUT 8 %o21"]
    ptx = _kernel("prmt", 3, body)
    a, b = 0x83F27140, 0x06A5C4E9                  # bytes with and without their sign bit
    selectors = [n * 0x1111 for n in range(16)] + [0x3210, 0x7654, 0xFEDC, 0x89AB, 0x0F1E,
                                                   M32, 0xFFFF0000 | 0x4567]
    rows = [(a, b, c) for c in selectors] + [(a, b, c) for c in range(4)]
    rows += list(zip(_words(64), _words(64), _words(64)))
    expect = [[_prmt(x, y, c, m) for m in modes] + [_prmt(x, y, 0x7531, None), _prmt(x, y, 2, "ecl")]
              for x, y, c in rows]
    _check(ptx, "prmt", rows, expect)


# --- lop3: all 256 lookup tables ------------------------------------------------------------------

def test_lop3_all_256_tables():
    """The ISA defines the table as the function applied to a = 0xF0, b = 0xCC, c = 0xAA:
    that input gives the table back (in every byte); random inputs are checked bit by bit
    (NumPy) against the table."""
    body = []
    for lut in range(256):
        body += [f"lop3.b32 %o{lut}, %a0, %a1, %a2, {lut:#x};", f"OUT {lut % 64} %o{lut}"]
    # outputs are 64 per launch: four kernels, one per quarter of the tables
    rows = [(0xF0F0F0F0, 0xCCCCCCCC, 0xAAAAAAAA)] + list(zip(_words(63), _words(63), _words(63)))
    arr = np.array(rows, dtype=np.uint64)
    a, b, c = (arr[:, k][:, None] >> np.arange(32, dtype=np.uint64) & 1 for k in range(3))
    index = (a << 2 | b << 1 | c).astype(np.int64)
    for quarter in range(4):
        q_body = body[2 * 64 * quarter: 2 * 64 * (quarter + 1)]
        ptx = _kernel("lop3", 3, q_body)
        compiled, interpreted = _run_both(ptx, "lop3", arr)
        for slot in range(64):
            lut = 64 * quarter + slot
            table = np.array([lut >> i & 1 for i in range(8)], dtype=np.uint64)
            want = (table[index] << np.arange(32, dtype=np.uint64)).sum(axis=1)
            assert want[0] == lut * 0x01010101
            np.testing.assert_array_equal(compiled[:, slot], want, err_msg=f"compiled {lut:#x}")
            np.testing.assert_array_equal(interpreted[:, slot], want, err_msg=f"interpreted {lut:#x}")


def test_lop3_with_a_register_table_is_refused_by_the_compiler():
    ptx = _kernel("lopreg", 4, ["lop3.b32 %o0, %a0, %a1, %a2, %a3;", "OUT 0 %o0"])
    with pytest.raises(UnsupportedError, match="non-constant lookup table"):
        cpuify.RawModule(ptx=ptx).get_function("lopreg")((1,), (1,), (
            np.zeros(4, np.uint64), np.zeros(64, np.uint64), np.uint32(1)))


# --- fns: the n-th set bit ------------------------------------------------------------------------

def _fns(mask: int, base: int, offset: int) -> int:
    """The ISA: the |offset|-th set bit counting from base (included) up for a positive
    offset, down for a negative one; offset 0: base if its bit is set; else 0xffffffff.  A
    base past 31 (undefined in the ISA) finds nothing in cpuify."""
    offset = _signed(offset, 32)
    if base > 31:
        return M32
    if offset == 0:
        return base if mask >> base & 1 else M32
    ones = [i for i in range(32) if mask >> i & 1]
    side = [i for i in ones if i >= base] if offset > 0 else [i for i in reversed(ones) if i <= base]
    return side[abs(offset) - 1] if abs(offset) <= len(side) else M32


def test_fns_up_down_and_past_the_last_set_bit():
    ptx = _kernel("fns", 3, ["fns.b32 %o0, %a0, %a1, %a2;", "OUT 0 %o0",
                             "fns.b32 %o1, %a0, 4, -2;", "OUT 1 %o1"])
    masks = [0, M32, 1, 0x80000000, 0x80000001, 0x00F00F00, 0x55555555, 0x12345678]
    offsets = [0, 1, 2, 3, 5, 16, 31, 32, 33, -1, -2, -3, -5, -16, -32, -33, -(1 << 31)]
    rows = [(m, base, o & M32) for m in masks for base in (0, 1, 4, 8, 15, 30, 31, 32, 40)
            for o in offsets]
    rows += [(m, base, o) for m, base, o in zip(_words(64), [int(x) for x in RNG.integers(0, 32, 64)],
                                                [int(x) & M32 for x in RNG.integers(-40, 41, 64)])]
    expect = [[_fns(m, base, o), _fns(m, 4, (-2) & M32)] for m, base, o in rows]
    _check(ptx, "fns", rows, expect)


def test_the_bit_field_instructions_are_spec_driven():
    for op in ("shf", "fns", "bfe", "bfi", "bmsk", "prmt", "lop3"):
        entry = TABLE[op]
        assert entry.spec_driven and not entry.hand_written, op


# --- cvt between integer types: the table's resize (and the hand-written .sat) -------------------

_CVT_INTS = ("u8", "s8", "u16", "s16", "u32", "s32", "u64", "s64")
_REG = {8: "%h", 16: "%h", 32: "%r", 64: "%d"}


def test_cvt_between_every_pair_of_integer_types_against_numpy():
    """cvt.D.S wraps (truncates, or extends by S's signedness) as a C cast, which NumPy's
    astype does; cvt.sat.D.S clamps the value S denotes to D's range."""
    lines = [".version 7.8", ".target sm_80", ".address_size 64", "",
             ".visible .entry cvts(.param .u64 pin, .param .u64 pout, .param .u32 pn)", "{",
             "    .reg .pred %p<2>;", "    .reg .b16 %h<300>;", "    .reg .b32 %r<300>;",
             "    .reg .b64 %d<300>;", "    .reg .b64 %rd<8>;", "    .reg .b32 %t<8>;",
             "    ld.param.u64 %rd1, [pin];", "    ld.param.u64 %rd2, [pout];",
             "    ld.param.u32 %t1, [pn];", "    mov.u32 %t2, %tid.x;",
             "    setp.ge.u32 %p1, %t2, %t1;", "    @%p1 bra DONE;",
             "    mul.wide.u32 %rd3, %t2, 8;", "    add.s64 %rd4, %rd1, %rd3;",
             "    mul.wide.u32 %rd5, %t2, 1024;", "    add.s64 %rd6, %rd2, %rd5;",
             "    ld.global.u8 %h1, [%rd4];", "    ld.global.u16 %h2, [%rd4];",
             "    ld.global.u32 %r1, [%rd4];", "    ld.global.u64 %d1, [%rd4];"]
    source = {8: "%h1", 16: "%h2", 32: "%r1", 64: "%d1"}
    pairs = [(d, s, sat) for sat in (False, True) for d in _CVT_INTS for s in _CVT_INTS]
    for k, (d, s, sat) in enumerate(pairs):
        dw = int(d[1:])
        reg = f"{_REG[dw]}{100 + k}"
        lines += [f"    cvt{'.sat' if sat else ''}.{d}.{s} {reg}, {source[int(s[1:])]};",
                  f"    st.global.u{dw} [%rd6+{8 * k}], {reg};"]
    lines += ["DONE:", "    ret;", "}", ""]
    ptx = "\n".join(lines)
    values = [0, 1, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000,
              M32, 1 << 32, (1 << 63) - 1, 1 << 63, M64, 0xFEDCBA9876543210, 0x0123456789ABCDEF]
    rows = np.array(values + _words(14, 64), dtype=np.uint64)
    n = len(rows)
    outs = []
    for run in ("compiled", "interpreted"):
        out = np.zeros((n, 128), np.uint64)
        if run == "compiled":
            cpuify.RawModule(ptx=ptx).get_function("cvts")((1,), (n,), (rows, out, np.uint32(n)))
        else:
            interpret_kernel(ptx, "cvts", (1,), (n,), (rows, out, np.uint32(n)))
        outs.append(out)
    for k, (d, s, sat) in enumerate(pairs):
        # the value S denotes: the slot's low bits, as S's NumPy type (astype wraps)
        src = rows.astype(np.dtype(f"{'int' if s[0] == 's' else 'uint'}{s[1:]}"))
        dst = np.dtype(f"{'int' if d[0] == 's' else 'uint'}{d[1:]}")
        if sat:
            info = np.iinfo(dst)
            want = [min(max(int(v), info.min), info.max) for v in src]
        else:
            want = [int(v) for v in src.astype(dst)]
        want_bits = np.array([v & ((1 << int(d[1:])) - 1) for v in want], dtype=np.uint64)
        for run, got in zip(("compiled", "interpreted"), outs):
            np.testing.assert_array_equal(got[:, k], want_bits,
                                          err_msg=f"{run} cvt{'.sat' if sat else ''}.{d}.{s}")


# --- math functions: the table's functions, rcp as div(1, a) --------------------------------------

def test_math_functions_rounded_to_nearest_against_numpy():
    """sqrt.rn/.approx and rcp.rn/.approx are correctly rounded in both readers (cpuify's
    .approx is the IEEE operation), rsqrt.approx.f64 the quotient of the rounded square
    root; .ftz flushes a subnormal f32 input (sqrt of it: +-0).  The approximate f32
    functions are the other tests' (test_approx_math.py, test_math_approx.py); here both
    readers must stay within 2 ulp of NumPy's double-precision value."""
    body32 = ["sqrt.rn.f32", "sqrt.approx.f32", "sqrt.approx.ftz.f32", "rcp.rn.f32",
              "rcp.approx.ftz.f32", "sin.approx.f32", "cos.approx.f32", "ex2.approx.f32",
              "lg2.approx.f32", "tanh.approx.f32", "rsqrt.approx.f32"]
    body64 = ["sqrt.rn.f64", "rcp.rn.f64", "rsqrt.approx.f64", "sin.approx.f64"]
    lines = ["ld.global.f32 %f1, [%rd4];", "ld.global.f64 %fd1, [%rd4+8];"]
    for k, name in enumerate(body32):
        lines += [f"{name} %f{10 + k}, %f1;", f"st.global.f32 [%rd6+{8 * k}], %f{10 + k};"]
    for k, name in enumerate(body64):
        lines += [f"{name} %fd{10 + k}, %fd1;", f"st.global.f64 [%rd6+{8 * (16 + k)}], %fd{10 + k};"]
    ptx = _kernel("math", 2, lines)
    f32 = np.array([0.0, -0.0, 1.0, 2.0, 3.0, 0.1, 1e-40, -1e-40, 1e30, 7.5, 0.7, -0.3,
                    np.inf, 1.1754942e-38, 100.0, 1e-3], np.float32)
    f64 = np.array([0.0, -0.0, 1.0, 2.0, 3.0, 0.1, 1e-310, 5e-324, 1e300, 7.5, 0.7, -0.3,
                    np.inf, 1e-200, 100.0, 1e-3])
    rows = np.zeros((len(f32), 2), np.uint64)
    rows[:, 0] = f32.view(np.uint32)
    rows[:, 1] = f64.view(np.uint64)
    compiled, interpreted = _run_both(ptx, "math", rows)
    with np.errstate(all="ignore"):
        flushed = np.where(np.abs(f32) < np.float32(1.1754944e-38), np.copysign(np.float32(0), f32), f32)
        exact32 = {"sqrt.rn.f32": np.sqrt(f32), "sqrt.approx.f32": np.sqrt(f32),
                   "sqrt.approx.ftz.f32": np.sqrt(flushed), "rcp.rn.f32": np.float32(1) / f32}
        rcp_ftz = np.float32(1) / flushed
        exact32["rcp.approx.ftz.f32"] = np.where(np.abs(rcp_ftz) < np.float32(1.1754944e-38),
                                                 np.copysign(np.float32(0), rcp_ftz), rcp_ftz)
        near32 = {"sin.approx.f32": np.sin, "cos.approx.f32": np.cos, "ex2.approx.f32": np.exp2,
                  "lg2.approx.f32": np.log2, "tanh.approx.f32": np.tanh,
                  "rsqrt.approx.f32": lambda x: 1 / np.sqrt(x)}
        exact64 = {"sqrt.rn.f64": np.sqrt(f64), "rcp.rn.f64": 1 / f64,
                   "rsqrt.approx.f64": 1 / np.sqrt(f64)}
    for run, out in (("compiled", compiled), ("interpreted", interpreted)):
        got32 = out[:, :16].astype(np.uint32).view(np.float32)
        got64 = out[:, 16:32].view(np.float64)
        for k, name in enumerate(body32):
            if name in exact32:
                np.testing.assert_array_equal(got32[:, k], exact32[name], err_msg=f"{run} {name}")
                continue
            finite = np.isfinite(f32) & (np.abs(f32) < 50) & (f32 > 0 if "lg2" in name or "rsqrt" in name else True)
            with np.errstate(all="ignore"):
                want = near32[name](f32.astype(np.float64)).astype(np.float32)
            ulps = np.abs(got32[finite, k].view(np.int32).astype(np.int64)
                          - want[finite].view(np.int32).astype(np.int64))
            assert ulps.max() <= 2, (run, name, f32[finite][ulps.argmax()], ulps.max())
        for k, name in enumerate(body64[:3]):
            np.testing.assert_array_equal(got64[:, k], exact64[name], err_msg=f"{run} {name}")


# --- directed rounding: add/sub/mul/div/sqrt/rcp with a rounding parameter ------------------------

def _directed(value: Fraction, rn: np.floating, mode: str) -> np.floating:
    """The float of rn's type next to the exact value on the side `mode` says, found from the
    round-to-nearest result rn (within half an ulp of it): stepped once where rn lies on the
    wrong side (an infinite rn of a finite value: the largest finite on .rz's side)."""
    t = type(rn)
    if np.isinf(rn):
        big = np.finfo(t).max
        toward_zero = t(big) if rn > 0 else t(-big)
        keep = mode == "rp" and rn > 0 or mode == "rm" and rn < 0
        return rn if keep else toward_zero
    have = Fraction(float(rn))
    if have == value:
        return rn
    up = mode == "rp" or mode == "rz" and value < 0
    if (have < value) == up:
        return np.nextafter(rn, t(np.inf) if up else t(-np.inf))
    return rn


def _directed_ref(name: str, x: np.floating, y: np.floating, mode: str) -> np.floating:
    t = type(x)
    with np.errstate(all="ignore"):
        rn = {"add": x + y, "sub": x - y, "mul": x * y, "div": x / y, "sqrt": np.sqrt(x),
              "rcp": t(1) / x}[name]
    operands = (x,) if name in ("sqrt", "rcp") else (x, y)
    if not all(np.isfinite(v) for v in operands) or np.isnan(rn):
        return rn
    if name in ("div", "rcp") and (y if name == "div" else x) == 0:
        return rn                                   # an exact infinity (or 0 / 0)
    fx, fy = Fraction(float(x)), Fraction(float(y)) if len(operands) == 2 else Fraction(0)
    if name == "sqrt":
        return rn if rn == 0 else _directed_sqrt(x, rn, mode)
    value = {"add": fx + fy, "sub": fx - fy, "mul": fx * fy,
             "div": fx / fy if fy else None, "rcp": 1 / fx if fx else None}[name]
    if value == 0:
        if name == "mul" or name == "div":
            return rn
        # an exactly zero sum: -0 under .rm, else +0, unless both terms are zeros of one sign
        term = y if name == "add" else -y
        if x == 0 and term == 0 and np.signbit(x) == np.signbit(term):
            return x
        return t(-0.0) if mode == "rm" else t(0.0)
    return _directed(value, rn, mode)


def _directed_fma(x: np.floating, y: np.floating, mode: str) -> np.floating:
    """x * y + x rounded once: the exact value from the nearest double (Python rounds a
    Fraction correctly) and then to x's type, which is one of the two neighbours."""
    t = type(x)
    if not (np.isfinite(x) and np.isfinite(y)):
        with np.errstate(all="ignore"):
            return t(np.float64(x) * np.float64(y) + np.float64(x))
    value = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(x))
    if value == 0:                                  # IEEE's sign of an exactly zero sum
        product_neg = bool(np.signbit(x)) != bool(np.signbit(y))
        if x == 0 and product_neg == bool(np.signbit(x)):     # two zeros of one sign
            return t(-0.0) if product_neg else t(0.0)
        return t(-0.0) if mode == "rm" else t(0.0)
    with np.errstate(all="ignore"):
        rn = t(float(value))
    return _directed(value, rn, mode)


def _directed_sqrt(x: np.floating, rn: np.floating, mode: str) -> np.floating:
    """The exact root lies where r*r compares with x."""
    t = type(x)
    square, fx = Fraction(float(rn)) ** 2, Fraction(float(x))
    if square == fx:
        return rn
    if mode == "rp" and square < fx:
        return np.nextafter(rn, t(np.inf))
    if mode in ("rm", "rz") and square > fx:
        return np.nextafter(rn, t(0))
    return rn


def test_directed_rounding_of_add_sub_mul_div_sqrt_rcp_fma_mad_against_exact_rationals():
    names = ["add", "sub", "mul", "div", "sqrt", "rcp"]
    modes = ["rz", "rm", "rp"]
    body = []
    k = 0
    for width, (reg, x, y) in ((32, ("%f", "%f1", "%f2")), (64, ("%fd", "%fd1", "%fd2"))):
        for name in names:
            for mode in modes:
                srcs = f"{x}, {y}" if name not in ("sqrt", "rcp") else x
                body += [f"{name}.{mode}.f{width} {reg}{k % 30 + 5}, {srcs};",
                         f"st.global.f{width} [%rd6+{8 * k}], {reg}{k % 30 + 5};"]
                k += 1
    for mode in modes:                              # (f64 fma.rz/rm/rp: refused compiled)
        for op in ("fma", "mad"):
            body += [f"{op}.{mode}.f32 %f{k % 30 + 5}, %f1, %f2, %f1;",
                     f"st.global.f32 [%rd6+{8 * k}], %f{k % 30 + 5};"]
            k += 1
    ptx = _kernel("directed", 4, ["ld.global.f32 %f1, [%rd4];", "ld.global.f32 %f2, [%rd4+8];",
                                  "ld.global.f64 %fd1, [%rd4+16];",
                                  "ld.global.f64 %fd2, [%rd4+24];", *body])
    f32 = [0.0, -0.0, 1.0, 3.0, 0.1, -0.7, 1e-45, -1e-40, 3.4e38, -3.4e38, 1.1754944e-38, 7.0,
           np.inf, 1e20, 2.0 ** -126, 1.5]
    f64 = [0.0, -0.0, 1.0, 3.0, 0.1, -0.7, 5e-324, -1e-310, 1.7e308, -1.7e308, 2.2e-308, 7.0,
           np.inf, 1e200, 2.0 ** -1022, 1.5]
    pairs = [(i, j) for i in range(16) for j in range(16)]
    rows = np.zeros((len(pairs) + 64, 4), np.uint64)
    xs32 = np.array([f32[i] for i, _ in pairs] + list(RNG.standard_normal(64) * 1e3), np.float32)
    ys32 = np.array([f32[j] for _, j in pairs] + list(RNG.standard_normal(64)), np.float32)
    xs64 = np.array([f64[i] for i, _ in pairs] + list(RNG.standard_normal(64) * 1e3))
    ys64 = np.array([f64[j] for _, j in pairs] + list(RNG.standard_normal(64)))
    rows[:, 0], rows[:, 1] = xs32.view(np.uint32), ys32.view(np.uint32)
    rows[:, 2], rows[:, 3] = xs64.view(np.uint64), ys64.view(np.uint64)
    compiled, interpreted = _run_both(ptx, "directed", rows)
    k = 0
    for width, xs, ys in ((32, xs32, ys32), (64, xs64, ys64)):
        for name in names:
            for mode in modes:
                want = np.array([_directed_ref(name, x, y, mode) for x, y in zip(xs, ys)])
                for run, out in (("compiled", compiled), ("interpreted", interpreted)):
                    got = out[:, k].astype(np.uint32).view(np.float32) if width == 32 else \
                        out[:, k].view(np.float64)
                    number = ~np.isnan(want)                 # (a NaN's sign is no result)
                    np.testing.assert_array_equal(
                        np.signbit(got[number]), np.signbit(want[number].astype(got.dtype)),
                        err_msg=f"{run} {name}.{mode}.f{width} (sign)")
                    np.testing.assert_array_equal(got, want.astype(got.dtype),
                                                  err_msg=f"{run} {name}.{mode}.f{width}")
                k += 1
    for mode in modes:
        want = np.array([_directed_fma(x, y, mode) for x, y in zip(xs32, ys32)], np.float32)
        for op in ("fma", "mad"):
            for run, out in (("compiled", compiled), ("interpreted", interpreted)):
                got = out[:, k].astype(np.uint32).view(np.float32)
                number = ~np.isnan(want)
                np.testing.assert_array_equal(np.signbit(got[number]), np.signbit(want[number]),
                                              err_msg=f"{run} {op}.{mode}.f32 (sign)")
                np.testing.assert_array_equal(got, want, err_msg=f"{run} {op}.{mode}.f32")
            k += 1


# --- f16 add/sub/mul: the table's functions on halves ----------------------------------------------

def test_f16_add_sub_mul_and_f16x2_against_exact_rationals():
    """add/sub/mul.f16 (.rn, the only PTX rounding) round the exact value once; .sat clamps
    to [0, 1] (NaN to 0); .f16x2 is two of them."""
    ops = ["add.f16", "sub.f16", "mul.f16", "add.sat.f16", "mul.rn.sat.f16", "sub.rn.f16"]
    body = ["ld.global.b16 %h1, [%rd4];", "ld.global.b16 %h2, [%rd4+8];"]
    for k, name in enumerate(ops):
        body += [f"{name} %h{10 + k}, %h1, %h2;", f"st.global.b16 [%rd6+{8 * k}], %h{10 + k};"]
    body += ["add.f16x2 %o0, %a2, %a3;", "OUT 6 %o0", "mul.f16x2 %o1, %a2, %a3;", "OUT 7 %o1"]
    ptx = _kernel("halves", 4, body)
    special = [0.0, -0.0, 1.0, -1.0, 0.5, 65504.0, -65504.0, 6e-8, 1e-4, 3.0, np.inf, np.nan,
               0.333, 1000.0]
    pairs = [(x, y) for x in special for y in special]
    xs = np.array([x for x, _ in pairs] + list(RNG.standard_normal(64) * 100), np.float16)
    ys = np.array([y for _, y in pairs] + list(RNG.standard_normal(64) * 10), np.float16)
    xs2 = np.array(RNG.standard_normal(2 * len(xs)) * 50, np.float16)
    ys2 = np.array(RNG.standard_normal(2 * len(xs)), np.float16)
    rows = np.zeros((len(xs), 4), np.uint64)
    rows[:, 0], rows[:, 1] = xs.view(np.uint16), ys.view(np.uint16)
    rows[:, 2] = xs2.view(np.uint32)
    rows[:, 3] = ys2.view(np.uint32)
    compiled, interpreted = _run_both(ptx, "halves", rows)

    def rounded(x: np.float16, y: np.float16, kind: str, sat: bool) -> np.float16:
        if not (np.isfinite(x) and np.isfinite(y)):
            with np.errstate(all="ignore"):
                r = {"add": x + y, "sub": x - y, "mul": x * y}[kind]
        else:
            fx, fy = Fraction(float(x)), Fraction(float(y))
            value = {"add": fx + fy, "sub": fx - fy, "mul": fx * fy}[kind]
            with np.errstate(all="ignore"):
                r = np.float16(float(value))        # (the double is exact or rounds innocuously)
            if value == 0:                          # the sign of an exact zero: IEEE's
                with np.errstate(all="ignore"):
                    r = {"add": x + y, "sub": x - y, "mul": x * y}[kind]
        if sat:
            r = np.float16(0.0) if np.isnan(r) or r <= 0 else min(r, np.float16(1.0))
        return r

    kinds = [("add", False), ("sub", False), ("mul", False), ("add", True), ("mul", True),
             ("sub", False)]
    for run, out in (("compiled", compiled), ("interpreted", interpreted)):
        for k, (kind, sat) in enumerate(kinds):
            want = np.array([rounded(x, y, kind, sat) for x, y in zip(xs, ys)], np.float16)
            got = out[:, k].astype(np.uint16).view(np.float16)
            np.testing.assert_array_equal(got, want, err_msg=f"{run} {ops[k]}")
            number = ~np.isnan(want)
            np.testing.assert_array_equal(np.signbit(got[number]), np.signbit(want[number]),
                                          err_msg=f"{run} {ops[k]} (sign)")
        for k, kind in ((6, "add"), (7, "mul")):
            got = out[:, k].astype(np.uint32).view(np.float16).reshape(-1, 2)
            want = np.array([rounded(x, y, kind, False) for x, y in zip(xs2, ys2)],
                            np.float16).reshape(-1, 2)
            np.testing.assert_array_equal(got, want, err_msg=f"{run} {kind}.f16x2")
