"""The memory instructions on the PTX instruction table (ir/ptx_table.py: ld, ldu, st, atom
and red as forms of the functions at, element, load, store and atomic), checked three ways:
compiled code, the reference interpreter and a hand computation written here from the PTX
ISA agree.

- ld/st of scalars and vectors (.v2, .v4) in global, shared, local and generic memory, of
  8- to 64-bit integers (sign- and zero-extended into wider registers) and floats, weak and
  with each memory-order qualifier (.volatile, .relaxed, .acquire, .release);
- atom of every operation (add min max inc dec and or xor exch cas) on u32, s32, u64, f32
  and f64 as the ISA defines them, in global and shared memory, the old value returned and
  the new one stored; red; many threads adding to one word."""

from __future__ import annotations

import numpy as np

import cpuify
from cpuify.interp import interpret_kernel
from cpuify.ir.ptx_table import TABLE, memory_order

M32, M64 = (1 << 32) - 1, (1 << 64) - 1
RNG = np.random.default_rng(20261128)

_HEAD = """.version 7.8
.target sm_80
.address_size 64

.visible .entry {name}(.param .u64 pin, .param .u64 pout, .param .u64 pcount)
{{
    .reg .pred %p<8>;
    .reg .b16 %h<32>;
    .reg .b32 %r<200>;
    .reg .b64 %rd<200>;
    .reg .f32 %f<200>;
    .reg .f64 %fd<200>;
    .shared .align 16 .b8 buf[{shared}];
    .local .align 16 .b8 loc[64];
    ld.param.u64 %rd1, [pin];
    ld.param.u64 %rd2, [pout];
    ld.param.u64 %rd3, [pcount];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    cvta.to.global.u64 %rd3, %rd3;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd4, %r1, {row_in};
    add.s64 %rd4, %rd1, %rd4;
    mul.wide.u32 %rd5, %r1, {row_out};
    add.s64 %rd5, %rd2, %rd5;
    mul.wide.u32 %rd6, %r1, {row_shared};
    mov.u64 %rd7, buf;
    add.s64 %rd6, %rd7, %rd6;
"""


def _run_both(ptx: str, name: str, rows: np.ndarray, n_out: int) -> list[tuple[np.ndarray, np.ndarray]]:
    n = len(rows)
    flat = np.ascontiguousarray(rows, dtype=np.uint64)
    results = []
    for run in ("compiled", "interpreted"):
        out = np.zeros((n, n_out), np.uint64)
        count = np.zeros(2, np.uint64)
        args = (flat, out, count)
        if run == "compiled":
            cpuify.RawModule(ptx=ptx).get_function(name)((1,), (n,), args)
        else:
            interpret_kernel(ptx, name, (1,), (n,), args)
        results.append((out, count))
    return results


def _check(ptx: str, name: str, rows: list[tuple[int, ...]], expect: list[list[int]],
           count: tuple[int, int] | None = None) -> None:
    want = np.array(expect, dtype=np.uint64)
    for run, (got, got_count) in zip(("compiled", "interpreted"),
                                     _run_both(ptx, name, np.array(rows, dtype=np.uint64),
                                               want.shape[1])):
        bad = np.argwhere(got != want)
        if len(bad):
            i, k = bad[0]
            raise AssertionError(f"{run}: row {i} {[hex(v) for v in rows[i]]} output {k}: "
                                 f"{int(got[i, k]):#x}, expected {int(want[i, k]):#x} "
                                 f"({len(bad)} differ)")
        if count is not None:
            assert [int(c) for c in got_count] == list(count), (run, got_count, count)


def _body(name: str, lines: list[str], row_in: int, row_out: int, row_shared: int) -> str:
    head = _HEAD.format(name=name, shared=max(row_shared, 1) * 128, row_in=row_in,
                        row_out=row_out, row_shared=row_shared)
    return head + "".join(f"    {x}\n" for x in lines) + "    ret;\n}\n"


# --- loads and stores ------------------------------------------------------------------------------

def _moves_kernel() -> str:
    """Thread i reads w0..w3 (u64) and writes:
    0-1 ld.global.v4.u32 of its first 16 input bytes, stored to shared as .v4 in reverse
        order, read back as ld.shared.v2.u64 and written (global .v2.u64) swapped;
    2-3 the first two of those u32 words;
    4-5 w0, w1 through local memory (st.local.v2.u64, ld.local.u64 x2) and back via a
        generic address (cvta.local, st.u64, ld.local.v2.u64);
    6   ld.global.s8 of byte 1 of w2 into an s32 register, sign-extended (as u32);
    7   ld.global.u16 of bytes 2-3 of w2 into a u32 register;
    8   ld.global.s16 into an s64 register (sign-extended to 64 bits);
    9   ld.volatile.global.f32 of w3's low word, added to itself (f32) and stored with
        st.release.gpu.global.f32;
    10  ld.relaxed.gpu.global.u64 of w3, stored with st.volatile.global.u64;
    11  ld.acquire.gpu.global.u32 of w0's low word, stored with st.relaxed.gpu.global.u32;
    12  st.global.u8 of w0's low byte over w1's bytes (the output word: w1 with byte 0 set),
        st.global.v2.u16 of bytes 2-5 (w0's bytes 2-3, then w0's bytes 4-5);
    13  ldu.global.u64 of w1."""
    lines = [
        "ld.global.v4.u32 {%r10, %r11, %r12, %r13}, [%rd4];",
        "st.shared.v4.u32 [%rd6], {%r13, %r12, %r11, %r10};",
        "ld.shared.v2.u64 {%rd10, %rd11}, [%rd6];",
        "st.global.v2.u64 [%rd5], {%rd11, %rd10};",
        # the same words as four u32 outputs (slot 2, 3: zero-extended halves of slot 0, 1)
        "cvt.u64.u32 %rd12, %r10;", "cvt.u64.u32 %rd13, %r11;",
        "st.global.u64 [%rd5+16], %rd12;", "st.global.u64 [%rd5+24], %rd13;",
        "ld.global.v2.u64 {%rd14, %rd15}, [%rd4];",
        "mov.u64 %rd16, loc;",
        "st.local.v2.u64 [%rd16], {%rd14, %rd15};",
        "ld.local.u64 %rd17, [%rd16];", "ld.local.u64 %rd18, [%rd16+8];",
        "cvta.local.u64 %rd19, %rd16;",
        "st.u64 [%rd19+16], %rd17;", "st.u64 [%rd19+24], %rd18;",
        "ld.local.v2.u64 {%rd20, %rd21}, [%rd16+16];",
        "st.global.v2.u64 [%rd5+32], {%rd20, %rd21};",
        "ld.global.s8 %r20, [%rd4+17];", "cvt.u64.u32 %rd22, %r20;", "st.global.u64 [%rd5+48], %rd22;",
        "ld.global.u16 %r21, [%rd4+18];", "cvt.u64.u32 %rd23, %r21;", "st.global.u64 [%rd5+56], %rd23;",
        "ld.global.s16 %rd24, [%rd4+18];", "st.global.u64 [%rd5+64], %rd24;",
        "ld.volatile.global.f32 %f1, [%rd4+24];", "add.rn.f32 %f2, %f1, %f1;",
        "st.release.gpu.global.f32 [%rd5+72], %f2;",
        "ld.relaxed.gpu.global.u64 %rd25, [%rd4+24];", "st.volatile.global.u64 [%rd5+80], %rd25;",
        "ld.acquire.gpu.global.u32 %r22, [%rd4];", "st.relaxed.gpu.global.u32 [%rd5+88], %r22;",
        "ld.global.u64 %rd26, [%rd4+8];", "st.global.u64 [%rd5+96], %rd26;",
        "cvt.u16.u32 %h1, %r10;", "st.global.u8 [%rd5+96], %h1;",
        "shr.u32 %r23, %r10, 16;", "cvt.u16.u32 %h2, %r23;", "cvt.u16.u32 %h3, %r11;",
        "st.global.v2.u16 [%rd5+98], {%h2, %h3};",
        "ldu.global.u64 %rd27, [%rd4+8];", "st.global.u64 [%rd5+104], %rd27;",
    ]
    return _body("moves", lines, 32, 14 * 8, 16)


def _f32_double(bits: int) -> int:
    x = np.array([bits & M32], np.uint32).view(np.float32)
    return int((x + x).view(np.uint32)[0])


def test_loads_and_stores_of_every_width_space_and_order():
    words = [0, M64, 0x0123456789ABCDEF, 0xFEDCBA9876543210, 0x80808080_7F7F7F7F,
             0x3F800000_40490FDB, 0x00000001_FF7FFFFF, 0x7FC00000_00800000]
    words += [int(v) for v in RNG.integers(0, 2**63, 64, dtype=np.uint64) * 2 + 1]
    rows = [tuple(words[(4 * i + k) % len(words)] for k in range(4)) for i in range(32)]
    expect = []
    for w0, w1, w2, w3 in rows:
        lo0, hi0, lo1, hi1 = w0 & M32, w0 >> 32, w1 & M32, w1 >> 32
        # shared: u32 {hi1, lo1, hi0, lo0} at +0..+15; read as u64 x, y; stored (y, x)
        x, y = hi1 | lo1 << 32, hi0 | lo0 << 32
        b1 = (w2 >> 8) & 0xFF
        s8 = (b1 - 256 if b1 & 0x80 else b1) & M32
        h = (w2 >> 16) & 0xFFFF
        s16 = (h - 65536 if h & 0x8000 else h) & M64
        byte_patched = (w1 & ~0xFF) | (lo0 & 0xFF)
        byte_patched = (byte_patched & ~(0xFFFFFFFF << 16)) | (lo0 >> 16) << 16 | (hi0 & 0xFFFF) << 32
        expect.append([y, x, lo0, hi0, w0, w1, s8, h, s16, _f32_double(w3), w3, lo0,
                       byte_patched, w1])
    _check(_moves_kernel(), "moves", rows, expect)


# --- atomics ---------------------------------------------------------------------------------------

#: (PTX type, register prefix, width) of the atomics tested
_REG = {"u32": ("%r", 32), "s32": ("%r", 32), "b32": ("%r", 32), "u64": ("%rd", 64),
        "b64": ("%rd", 64), "f32": ("%f", 32), "f64": ("%fd", 64)}
CASES = [(k, t) for k in ("add", "min", "max", "inc", "dec", "and", "or", "xor", "exch", "cas")
         for t in ("u32",)] + \
    [(k, "s32") for k in ("add", "min", "max")] + \
    [(k, "u64") for k in ("add", "min", "max")] + [(k, "b64") for k in ("and", "or", "xor", "exch", "cas")] + \
    [(k, "f32") for k in ("add", "min", "max", "exch")] + [("add", "f64")]


def _atomics_kernel(space: str) -> str:
    """Thread i reads x, y, z (u64), f (an f32 pair: x low, y high) and dx, dy (f64), and
    for each case c of CASES: stores x (as the case's type) to its word (global: output
    slot 2c + 1; shared: its own word), runs atom.<space>.<kind>.<type> old, [word], y
    (, z), and writes old to slot 2c and the word's new value to slot 2c + 1; then
    red.<space>.add.u32 of y to a word holding x (slots 2|CASES|, + 1); and every thread
    adds 1 (atom.global.add.u32) and its index (red.global.add.u64) to the two counters."""
    lines = ["ld.global.u64 %rd10, [%rd4];", "ld.global.u64 %rd11, [%rd4+8];",
             "ld.global.u64 %rd12, [%rd4+16];",
             "cvt.u32.u64 %r10, %rd10;", "cvt.u32.u64 %r11, %rd11;", "cvt.u32.u64 %r12, %rd12;",
             "ld.global.v2.f32 {%f10, %f11}, [%rd4+24];",
             "ld.global.f64 %fd10, [%rd4+32];", "ld.global.f64 %fd11, [%rd4+40];"]
    n = 20
    for c, (kind, t) in enumerate(CASES):
        reg, width = _REG[t]
        x, y, z = {"%r": ("%r10", "%r11", "%r12"), "%rd": ("%rd10", "%rd11", "%rd12"),
                   "%f": ("%f10", "%f11", None), "%fd": ("%fd10", "%fd11", None)}[reg]
        old = f"{reg}{n}"
        n += 1
        word = f"[%rd5+{16 * c + 8}]" if space == "global" else f"[%rd6+{8 * c}]"
        lines.append(f"st.{space}.{t} {word}, {x};")
        operands = f"{y}, {z}" if kind == "cas" else y
        lines.append(f"atom.{space}.{kind}.{t} {old}, {word}, {operands};")
        lines.append(f"st.global.{t} [%rd5+{16 * c}], {old};")
        if space == "shared":
            new = f"{reg}{n}"
            n += 1
            lines += [f"ld.shared.{t} {new}, {word};", f"st.global.{t} [%rd5+{16 * c + 8}], {new};"]
    red = len(CASES)
    word = f"[%rd5+{16 * red + 8}]" if space == "global" else f"[%rd6+{8 * red}]"
    lines += [f"st.{space}.u32 {word}, %r10;", f"red.{space}.add.u32 {word}, %r11;",
              f"st.global.u32 [%rd5+{16 * red}], %r10;"]
    if space == "shared":
        lines += [f"ld.shared.u32 %r150, {word};", f"st.global.u32 [%rd5+{16 * red + 8}], %r150;"]
    lines += ["atom.global.add.u32 %r151, [%rd3], 1;", "cvt.u64.u32 %rd150, %r1;",
              "red.global.add.u64 [%rd3+8], %rd150;"]
    return _body(f"atomics_{space}", lines, 48, 16 * (red + 1), 8 * (red + 1))


def _float(bits: int, t: str) -> float:
    return float(np.array([bits], np.uint32 if t == "f32" else np.uint64).view(
        np.float32 if t == "f32" else np.float64)[0])


def _bits(v: float, t: str) -> int:
    return int(np.array([v], np.float32 if t == "f32" else np.float64).view(
        np.uint32 if t == "f32" else np.uint64)[0])


def _atomic_by_hand(kind: str, t: str, old: int, b: int, c: int) -> int:
    """The new value of atom.<kind>.<t> (PTX ISA), on bit patterns of t's width."""
    w = _REG[t][1]
    m = (1 << w) - 1
    if t in ("f32", "f64"):
        if kind == "exch":
            return b
        x, y = _float(old, t), _float(b, t)
        if kind == "add":                   # rounded once in the type's precision
            ft = np.float32 if t == "f32" else np.float64
            return _bits(ft(x) + ft(y), t)
        return _bits(min(x, y) if kind == "min" else max(x, y), t)
    sx = old - (1 << w) if t[0] == "s" and old >> (w - 1) else old
    sy = b - (1 << w) if t[0] == "s" and b >> (w - 1) else b
    return {"add": old + b, "min": min(sx, sy), "max": max(sx, sy),
            "inc": 0 if old >= b else old + 1, "dec": b if old == 0 or old > b else old - 1,
            "and": old & b, "or": old | b, "xor": old ^ b, "exch": b,
            "cas": c if old == b else old}[kind] & m


def _atomic_rows() -> list[tuple[int, ...]]:
    """x, y, z with the cases' edges (equal operands: cas hits, inc/dec at their wrap;
    zero; the signed and unsigned extremes), and float operands: finite, without signed
    zeros (whose order LLVM's atomic fmin/fmax leave open), some equal, some tiny."""
    ints = [(5, 5, 9), (0, 7, 1), (7, 0, 3), (M64, 1, 2), (1 << 31, (1 << 31) - 1, 4),
            ((1 << 31) - 1, 1 << 31, 5), (3, 3, 3), (10, 4, 0), (1 << 63, (1 << 63) - 1, 6),
            (M32, M32, 0), (M64, M64, 11), (0, 0, 12)]
    ints += [tuple(int(v) for v in RNG.integers(0, 2**63, 3, dtype=np.uint64) * 2)
             for _ in range(12)]
    floats = list(RNG.standard_normal(2 * len(ints)))
    floats[:6] = [1.5, 1.5, 1e-40, 3e-39, -2.0, 2.0 ** -149]
    rows = []
    for k, (x, y, z) in enumerate(ints):
        fx, fy = np.float32(floats[2 * k]), np.float32(floats[2 * k + 1])
        pair = _bits(fx, "f32") | _bits(fy, "f32") << 32
        rows.append((x, y, z, pair, _bits(floats[2 * k] * 1e10, "f64"),
                     _bits(floats[2 * k + 1] / 3, "f64")))
    return rows


def _atomic_expectation(rows: list[tuple[int, ...]]) -> list[list[int]]:
    expect = []
    for x, y, z, pair, dx, dy in rows:
        out = []
        for kind, t in CASES:
            if t == "f32":
                a, b, c = pair & M32, pair >> 32, 0
            elif t == "f64":
                a, b, c = dx, dy, 0
            else:
                m = (1 << _REG[t][1]) - 1
                a, b, c = x & m, y & m, z & m
            out += [a, _atomic_by_hand(kind, t, a, b, c)]
        out += [x & M32, ((x & M32) + (y & M32)) & M32]
        expect.append(out)
    return expect


def test_atomics_of_every_operation_in_global_and_shared_memory():
    rows = _atomic_rows()
    n = len(rows)
    for space in ("global", "shared"):
        _check(_atomics_kernel(space), f"atomics_{space}", rows, _atomic_expectation(rows),
               count=(n, n * (n - 1) // 2))


def test_memory_instructions_are_table_driven_with_their_effects():
    """Each memory entry's forms are the table's functions, its declared effects what those
    functions do (load: read, store: write, atomic: both), and its qualifiers ordered as the
    ISA says."""
    does = {"load": {"read"}, "store": {"write"}, "atomic": {"read", "write"}}
    for opcode in ("ld", "ldu", "st", "atom", "red"):
        entry = TABLE[opcode]
        assert entry.spec_driven and not entry.hand_written, opcode
        used: set[str] = set()
        for form in entry.forms:
            work = [*form.results, *form.effects]
            while work:
                x = work.pop()
                if hasattr(x, "args"):
                    used |= does.get(x.name, set())
                    work.extend(x.args)
        assert used == {k for k, _ in entry.effects}, opcode
        assert all(space == "$space" for _, space in entry.effects), opcode
    assert memory_order(["global", "u32"], "load") == "weak"
    assert memory_order(["acquire", "gpu", "global", "u32"], "load") == "acquire"
    assert memory_order(["release", "gpu", "global", "u32"], "load") == "weak"
    assert memory_order(["release", "gpu", "global", "u32"], "store") == "release"
    assert memory_order(["relaxed", "gpu", "u64"], "store") == "relaxed"
    assert memory_order(["volatile", "shared", "u64"], "load") == "volatile"


ORDERED_ATOMICS = """.version 7.8
.target sm_80
.address_size 64

.visible .entry ordered(.param .u64 pout)
{
    .reg .b32 %r<12>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [pout];
    cvta.to.global.u64 %rd1, %rd1;
    atom.global.add.u32 %r1, [%rd1], 1;
    atom.relaxed.gpu.global.add.u32 %r2, [%rd1], 2;
    atom.acquire.gpu.global.add.u32 %r3, [%rd1], 4;
    atom.release.gpu.global.exch.b32 %r4, [%rd1+4], 7;
    atom.acq_rel.gpu.global.or.b32 %r5, [%rd1+8], 8;
    atom.acquire.gpu.global.cas.b32 %r6, [%rd1+12], 0, 9;
    atom.release.gpu.global.cas.b32 %r7, [%rd1+16], 0, 10;
    red.release.gpu.global.add.u32 [%rd1+20], 11;
    add.u32 %r8, %r1, %r2;
    add.u32 %r8, %r8, %r3;
    st.global.u32 [%rd1+24], %r8;
    ret;
}
"""


def test_atomics_keep_their_memory_order():
    """atom/red with .acquire, .release or .acq_rel are LLVM read-modify-writes of that
    ordering (a lock taken with atom.acquire.cas orders the reads after it), relaxed and
    unqualified ones monotonic; a failing compare-and-swap acquires at most."""
    from cpuify.codegen import jit
    from cpuify.codegen.llvm_gen import ModuleCodegen
    from cpuify.compiler import lift_and_optimize
    from cpuify.frontend.ptx_parser import parse_ptx
    from cpuify.transforms.pass_manager import PipelineOptions
    module = parse_ptx(ORDERED_ATOMICS)
    lifted, _ = lift_and_optimize(module, module.functions["ordered"], PipelineOptions())
    gen = ModuleCodegen(module, *jit.triple_and_layout())
    gen.add_kernel(lifted, None)
    orders = []
    for line in gen.llvm_text().splitlines():
        if "atomicrmw " in line or "cmpxchg " in line:
            orders.append(" ".join(w for w in line.replace(",", " ").split()
                                   if w in ("monotonic", "acquire", "release", "acq_rel")))
    assert orders == ["monotonic", "monotonic", "acquire", "release", "acq_rel",
                      "acquire acquire", "release monotonic", "release"]
    out = np.zeros(8, np.uint32)
    cpuify.RawModule(ptx=ORDERED_ATOMICS).get_function("ordered")((1,), (1,), (out,))
    assert out.tolist() == [7, 7, 8, 9, 10, 11, 0 + 1 + 3, 0]
