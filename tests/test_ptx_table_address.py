"""Addresses, state spaces and moves on the PTX instruction table (ir/ptx_table.py: the
address types and the functions to_generic, to_space, in_space, concat), checked three ways:
compiled code, the reference interpreter and a hand computation written here from the PTX
ISA agree.

- cvta.<space> and cvta.to.<space> (shared, local, global; .u64, and .u32 into a 32-bit
  register): a shared or local address to generic and back gives the address again, the
  generic address is the one a generic load or store uses (the data written through it is
  read by ld.shared/ld.local), global addresses are generic ones;
- isspacep on each space for a shared, a local, a global address, null, and addresses just
  inside and just outside the shared and local windows;
- mov's vector forms: {a, b} packed into a wide register and unpacked from one, of 16-, 32-
  and 64-bit registers, integer and float.

Generic addresses are host addresses that differ between runs and between the two readers:
the kernels output differences of addresses, which do not."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.errors import UnsupportedError
from cpuify.interp import interpret_kernel
from cpuify.ir.ptx_table import TABLE

M32, M64 = (1 << 32) - 1, (1 << 64) - 1
RNG = np.random.default_rng(20261127)
SHARED_BYTES, LOCAL_BYTES = 512, 64
SPACES = ("shared", "local", "global", "const", "param")


def _run_both(ptx: str, name: str, rows: np.ndarray, n_out: int) -> list[np.ndarray]:
    """The kernel's outputs per row (one thread per row, one block), compiled and
    interpreted."""
    n = len(rows)
    flat = np.ascontiguousarray(rows, dtype=np.uint64)
    outs = []
    for run in ("compiled", "interpreted"):
        out = np.zeros((n, n_out), np.uint64)
        args = (flat, out)
        if run == "compiled":
            cpuify.RawModule(ptx=ptx).get_function(name)((1,), (n,), args)
        else:
            interpret_kernel(ptx, name, (1,), (n,), args)
        outs.append(out)
    return outs


def _check(ptx: str, name: str, rows: list[tuple[int, ...]], expect: list[list[int]]) -> None:
    want = np.array(expect, dtype=np.uint64)
    for run, got in zip(("compiled", "interpreted"),
                        _run_both(ptx, name, np.array(rows, dtype=np.uint64), want.shape[1])):
        bad = np.argwhere(got != want)
        if len(bad):
            i, k = bad[0]
            raise AssertionError(f"{run}: row {i} {rows[i]} output {k}: {int(got[i, k]):#x}, "
                                 f"expected {int(want[i, k]):#x} ({len(bad)} differ)")


_HEAD = """.version 7.8
.target sm_80
.address_size 64

.visible .entry {name}(.param .u64 pin, .param .u64 pout)
{{
    .reg .pred %p<40>;
    .reg .b16 %h<16>;
    .reg .b32 %r<40>;
    .reg .b64 %rd<80>;
    .reg .f32 %f<8>;
    .reg .f64 %fd<8>;
    .shared .align 8 .b8 buf[{shared}];
    .local .align 8 .b8 loc[{local}];
    ld.param.u64 %rd1, [pin];
    ld.param.u64 %rd2, [pout];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, {row_in};
    add.s64 %rd4, %rd1, %rd3;
    mul.wide.u32 %rd5, %r1, {row_out};
    add.s64 %rd6, %rd2, %rd5;
"""


def _space_bits(reg: str, first_pred: int, first_reg: int) -> tuple[list[str], str]:
    """PTX that computes isspacep of `reg` on each of SPACES as bit k of a b64 register
    (bit 0 shared, 1 local, 2 global, 3 const, 4 param); the register's name."""
    lines = []
    acc = f"%rd{first_reg}"
    lines.append(f"mov.u64 {acc}, 0;")
    for k, space in enumerate(SPACES):
        p, r = f"%p{first_pred + k}", f"%rd{first_reg + 1 + k}"
        lines += [f"isspacep.{space} {p}, {reg};", f"selp.u64 {r}, {1 << k}, 0, {p};",
                  f"or.b64 {acc}, {acc}, {r};"]
    return lines, acc


def _address_kernel() -> str:
    """Thread i reads x (a byte offset into buf, may lie outside it) and y (into loc) and
    writes: 0 cvta.shared(buf + x) - cvta.shared(buf); 1 cvta.to.shared of it minus buf;
    2 isspacep bits of it; 3 the u32 cvta.to.shared of it minus buf (32 bits); 4-6 the same
    for loc + y; 7 isspacep bits of the thread's global output row; 8 cvta.to.global(p) - p;
    9 cvta.global(p) - p; 10 isspacep bits of null; 11 what ld.shared reads at buf + 4i
    after a generic store of 0xC0DE0000 + i through cvta.shared(buf + 4i); 12 what ld.local
    reads at loc + 8 after a generic store of i through cvta.local(loc + 8)."""
    body = [
        "ld.global.u64 %rd7, [%rd4];",             # x
        "ld.global.u64 %rd8, [%rd4+8];",           # y
        "mov.u64 %rd9, buf;",
        "add.s64 %rd10, %rd9, %rd7;",
        "cvta.shared.u64 %rd11, %rd10;",
        "cvta.shared.u64 %rd12, %rd9;",
        "sub.s64 %rd13, %rd11, %rd12;",
        "st.global.u64 [%rd6], %rd13;",
        "cvta.to.shared.u64 %rd14, %rd11;",
        "sub.s64 %rd15, %rd14, %rd9;",
        "st.global.u64 [%rd6+8], %rd15;",
    ]
    bits, acc = _space_bits("%rd11", 1, 20)
    body += bits + [f"st.global.u64 [%rd6+16], {acc};",
                    "cvta.to.shared.u32 %r2, %rd11;", "cvt.u32.u64 %r3, %rd9;",
                    "sub.s32 %r4, %r2, %r3;", "cvt.u64.u32 %rd16, %r4;",
                    "st.global.u64 [%rd6+24], %rd16;",
                    "mov.u64 %rd30, loc;", "add.s64 %rd31, %rd30, %rd8;",
                    "cvta.local.u64 %rd32, %rd31;", "cvta.local.u64 %rd33, %rd30;",
                    "sub.s64 %rd34, %rd32, %rd33;", "st.global.u64 [%rd6+32], %rd34;",
                    "cvta.to.local.u64 %rd35, %rd32;", "sub.s64 %rd36, %rd35, %rd30;",
                    "st.global.u64 [%rd6+40], %rd36;"]
    bits, acc = _space_bits("%rd32", 6, 40)
    body += bits + [f"st.global.u64 [%rd6+48], {acc};"]
    bits, acc = _space_bits("%rd6", 11, 50)
    body += bits + [f"st.global.u64 [%rd6+56], {acc};",
                    "cvta.to.global.u64 %rd37, %rd6;", "sub.s64 %rd38, %rd37, %rd6;",
                    "st.global.u64 [%rd6+64], %rd38;",
                    "cvta.global.u64 %rd39, %rd6;", "sub.s64 %rd45, %rd39, %rd6;",
                    "st.global.u64 [%rd6+72], %rd45;", "mov.u64 %rd46, 0;"]
    bits, acc = _space_bits("%rd46", 16, 60)
    body += bits + [f"st.global.u64 [%rd6+80], {acc};",
                    # a store through the generic address of a shared word, read back
                    "mul.wide.u32 %rd70, %r1, 4;", "add.s64 %rd71, %rd9, %rd70;",
                    "cvta.shared.u64 %rd72, %rd71;", "add.s32 %r5, %r1, -1059192832;",
                    "st.u32 [%rd72], %r5;", "ld.shared.u32 %r6, [%rd71];",
                    "cvt.u64.u32 %rd73, %r6;", "st.global.u64 [%rd6+88], %rd73;",
                    # and of a local word
                    "add.s64 %rd74, %rd30, 8;", "cvta.local.u64 %rd75, %rd74;",
                    "st.u32 [%rd75], %r1;", "ld.local.u32 %r7, [%rd74];",
                    "cvt.u64.u32 %rd76, %r7;", "st.global.u64 [%rd6+96], %rd76;"]
    head = _HEAD.format(name="addresses", shared=SHARED_BYTES, local=LOCAL_BYTES, row_in=16,
                        row_out=13 * 8)
    return head + "".join(f"    {line}\n" for line in body) + "    ret;\n}\n"


def _expected_space_bits(window: str | None) -> int:
    """isspacep of each space (bit k: SPACES[k]) for an address in the shared or local
    window, or in neither (None): global, const and param are 'in neither window'."""
    if window is not None:
        return 1 << SPACES.index(window)
    return 0b11100


def test_cvta_both_ways_and_isspacep_on_each_space():
    xs = [0, 4, 8, 100, SHARED_BYTES - 4, SHARED_BYTES - 1, SHARED_BYTES, SHARED_BYTES + 8,
          4096, M64 - 7, M64]                        # the last two: just below the window
    ys = [0, 8, LOCAL_BYTES - 1, LOCAL_BYTES, LOCAL_BYTES + 100, M64 - 15, 16, 32, 1, 2, 3]
    rows, expect = [], []
    for i, (x, y) in enumerate(zip(xs, ys)):
        rows.append((x, y))
        expect.append([
            x, x, _expected_space_bits("shared" if x < SHARED_BYTES else None), x & M32,
            y, y, _expected_space_bits("local" if y < LOCAL_BYTES else None),
            _expected_space_bits(None), 0, 0, _expected_space_bits(None),
            (0xC0DE0000 + i) & M32, i])
    _check(_address_kernel(), "addresses", rows, expect)


def _mov_kernel() -> str:
    """Thread i reads a (u64) and b (u64) and writes: 0 mov.b64 {a.lo, b.lo}; 1 mov.b32
    {a.h0, b.h0}; 2 mov.b64 {a.h0, a.h1, b.h0, b.h1}; 3 mov.b64 {f, g} of the f32 registers
    holding a.lo, b.lo; 4-5 mov.b64 {lo, hi} of a, 6-9 mov.b64 {h0..h3} of b; 10-11 mov.b32
    {h, h} of a.lo; 12-13 mov.b64 {f, g} of the f64 register holding a."""
    body = [
        "ld.global.u64 %rd7, [%rd4];", "ld.global.u64 %rd8, [%rd4+8];",
        "cvt.u32.u64 %r2, %rd7;", "cvt.u32.u64 %r3, %rd8;",
        "mov.b64 %rd9, {%r2, %r3};", "st.global.u64 [%rd6], %rd9;",
        "cvt.u16.u64 %h1, %rd7;", "cvt.u16.u64 %h2, %rd8;",
        "mov.b32 %r4, {%h1, %h2};", "cvt.u64.u32 %rd10, %r4;", "st.global.u64 [%rd6+8], %rd10;",
        "shr.u64 %rd11, %rd7, 16;", "cvt.u16.u64 %h3, %rd11;",
        "shr.u64 %rd12, %rd8, 16;", "cvt.u16.u64 %h4, %rd12;",
        "mov.b64 %rd13, {%h1, %h3, %h2, %h4};", "st.global.u64 [%rd6+16], %rd13;",
        "mov.b32 %f1, %r2;", "mov.b32 %f2, %r3;",
        "mov.b64 %rd14, {%f1, %f2};", "st.global.u64 [%rd6+24], %rd14;",
        "mov.b64 {%r5, %r6}, %rd7;", "cvt.u64.u32 %rd15, %r5;", "cvt.u64.u32 %rd16, %r6;",
        "st.global.u64 [%rd6+32], %rd15;", "st.global.u64 [%rd6+40], %rd16;",
        "mov.b64 {%h5, %h6, %h7, %h8}, %rd8;",
    ]
    for k in range(4):
        body += [f"cvt.u64.u16 %rd{17 + k}, %h{5 + k};",
                 f"st.global.u64 [%rd6+{48 + 8 * k}], %rd{17 + k};"]
    body += ["mov.b32 {%h9, %h10}, %r2;", "cvt.u64.u16 %rd21, %h9;", "cvt.u64.u16 %rd22, %h10;",
             "st.global.u64 [%rd6+80], %rd21;", "st.global.u64 [%rd6+88], %rd22;",
             "mov.b64 %fd1, %rd7;", "mov.b64 {%f3, %f4}, %fd1;",
             "mov.b32 %r7, %f3;", "mov.b32 %r8, %f4;",
             "cvt.u64.u32 %rd23, %r7;", "cvt.u64.u32 %rd24, %r8;",
             "st.global.u64 [%rd6+96], %rd23;", "st.global.u64 [%rd6+104], %rd24;"]
    head = _HEAD.format(name="moves", shared=16, local=16, row_in=16, row_out=14 * 8)
    return head + "".join(f"    {line}\n" for line in body) + "    ret;\n}\n"


def _halves(x: int, n: int) -> list[int]:
    return [(x >> (16 * k)) & 0xFFFF for k in range(n)]


def test_mov_packs_and_unpacks_vectors():
    edges = [0, 1, M64, 1 << 63, 0x0123456789ABCDEF, 0xFEDCBA9876543210,
             0x7FC00001FF800000, 0x80000000_00000001]      # (float NaN and infinity bits)
    words = edges + [int(v) for v in RNG.integers(0, 2**63, 40, dtype=np.uint64) * 2 + 1]
    rows = [(words[i], words[(i * 7 + 3) % len(words)]) for i in range(len(words))]
    expect = []
    for a, b in rows:
        alo, blo = a & M32, b & M32
        ah, bh = _halves(a, 4), _halves(b, 4)
        expect.append([alo | blo << 32, ah[0] | bh[0] << 16,
                       ah[0] | ah[1] << 16 | bh[0] << 32 | bh[1] << 48, alo | blo << 32,
                       alo, a >> 32, *bh, ah[0], ah[1], alo, a >> 32])
    _check(_mov_kernel(), "moves", rows, expect)


def test_addresses_and_moves_are_table_driven():
    for opcode in ("cvta", "isspacep", "mov"):
        entry = TABLE[opcode]
        assert entry.spec_driven and not entry.hand_written, opcode


def test_a_mov_of_three_parts_is_refused_with_its_line():
    """No form packs three registers into one: the lifter names the instruction and line."""
    ptx = "\n".join([".version 7.8", ".target sm_80", ".address_size 64",
                     ".visible .entry k(.param .u64 p)", "{", "    .reg .b32 %r<4>;",
                     "    .reg .b64 %rd<4>;", "    mov.u32 %r1, 1;",
                     "    mov.b64 %rd1, {%r1, %r1, %r1};", "    ret;", "}", ""])
    with pytest.raises(UnsupportedError, match=r"PTX line 9: 'mov.b64': this form of mov"):
        cpuify.RawModule(ptx=ptx).get_function("k")


def test_cvta_of_constant_memory_reads_the_same_data():
    """cvta.const of a __constant__ array's address is a generic address of the same data;
    cvta.to.const gives the address back; isspacep.const (and .global: cpuify cannot tell
    them apart) holds for it, .shared and .local not."""
    words = [0x0123456789ABCDEF, 0xFEDCBA9876543210, 7, M64]
    ptx = "\n".join([
        ".version 7.8", ".target sm_80", ".address_size 64",
        ".const .align 8 .u64 cdata[4] = {" + ", ".join(str(w) for w in words) + "};",
        ".visible .entry k(.param .u64 pin, .param .u64 pout)", "{",
        "    .reg .pred %p<8>;", "    .reg .b32 %r<8>;", "    .reg .b64 %rd<40>;",
        "    ld.param.u64 %rd2, [pout];", "    cvta.to.global.u64 %rd2, %rd2;",
        "    mov.u32 %r1, %tid.x;", "    mul.wide.u32 %rd3, %r1, 8;",
        "    mov.u64 %rd4, cdata;", "    add.s64 %rd5, %rd4, %rd3;",
        "    cvta.const.u64 %rd6, %rd5;", "    ld.u64 %rd7, [%rd6];",
        "    ld.const.u64 %rd8, [%rd5];", "    sub.s64 %rd9, %rd7, %rd8;",
        "    cvta.to.const.u64 %rd10, %rd6;", "    sub.s64 %rd11, %rd10, %rd5;",
        *("    " + line for line in _space_bits("%rd6", 1, 20)[0]),
        "    mul.wide.u32 %rd12, %r1, 32;", "    add.s64 %rd13, %rd2, %rd12;",
        "    st.global.u64 [%rd13], %rd7;", "    st.global.u64 [%rd13+8], %rd9;",
        "    st.global.u64 [%rd13+16], %rd11;", "    st.global.u64 [%rd13+24], %rd20;",
        "    ret;", "}", ""])
    rows = [(0,)] * 4
    expect = [[w, 0, 0, _expected_space_bits(None)] for w in words]
    _check(ptx, "k", rows, expect)
