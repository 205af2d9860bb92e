"""The PTX instruction table (cpuify.ir.ptx_table): its entries are consistent with what the
lifter, the dialect registry, the code generator and the interpreter register, its
expressions are well-typed, and an instruction added as one entry (vabsdiff4/vabsdiff2,
SIMD video instructions from the census) runs compiled and interpreted, both equal to a
hand computation."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.errors import UnsupportedError
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.interp import interpret_kernel
from cpuify.ir import dialects
from cpuify.ir.core import Operation
from cpuify.ir.ptx_table import (
    BY_IR_OP, FUNCTIONS, TABLE, Expr, Fn, Lit, Src, result_type, takes_arguments,
)
from cpuify.lifting.semantics import ALLOWED


# --- the table agrees with its readers ------------------------------------------------------------

def _exprs(e: Expr):
    yield e
    if isinstance(e, Fn):
        for x in e.args:
            yield from _exprs(x)


def test_every_function_in_the_table_is_known_with_its_arity():
    for entry in TABLE.values():
        for form in entry.forms:
            for r in form.results:
                for x in _exprs(r):
                    if isinstance(x, Fn):
                        assert x.name in FUNCTIONS, (entry.opcode, x.name)
                        assert takes_arguments(x.name, len(x.args)), (entry.opcode, x.name)
                    else:
                        assert isinstance(x, (Src, Lit))


@pytest.mark.parametrize("mods", [["s32"], ["u64"], ["f32"], ["lo", "s32"], ["wide", "s32"],
                                  ["hi", "u64"], ["lt", "f32"], ["u32", "f32"]])
def test_binary_functions_have_operands_of_one_width(mods):
    """What the LLVM reader needs: both operands of add/and/cmp/... have the same width."""
    from cpuify.ir.modifiers import type_size
    for entry in TABLE.values():
        form = entry.form_for(mods)
        if form is None or form.hand:
            continue
        for r in form.results:
            for x in _exprs(r):
                if isinstance(x, Fn) and x.name in ("add", "sub", "mul", "and", "or", "xor",
                                                    "min", "max", "cmp", "div", "rem"):
                    widths = {type_size(result_type(y, mods)) for y in x.args}
                    assert len(widths) == 1, (entry.opcode, mods, x.name)


def test_the_lifter_accepts_exactly_the_table_modifiers():
    for op, entry in TABLE.items():
        assert ALLOWED[op] == set(entry.modifiers)


def test_the_dialect_registry_takes_purity_and_effects_from_the_table():
    for name, entry in BY_IR_OP.items():
        info = dialects.REGISTRY[name]
        assert info.pure == entry.pure_ir_op, name
        if not entry.pure_ir_op:
            op = Operation(name, [], [], {"mods": ["shared"]})
            effects = dialects.memory_effects(op)
            kinds = {k for k, _ in entry.effects if k != "none"}
            assert {k for k, _ in effects} == kinds, name


def test_every_form_has_its_lowering_and_its_evaluation():
    """A spec-driven opcode is lowered and evaluated from the spec, its hand-written forms
    by code registered under its name in both readers; a hand-written opcode has both."""
    from cpuify.codegen import llvm_gen  # noqa: F401  (registers the lowerings)
    from cpuify.codegen.lowering import HAND_LOWERINGS, PTX_HANDLERS
    from cpuify.codegen.ptx_spec import lower_table_op
    from cpuify.interp import machine  # noqa: F401
    from cpuify.interp.ops import HAND_EVALUATIONS, PTX_OPS
    from cpuify.interp.spec_eval import evaluate_table_op
    for name, entry in BY_IR_OP.items():
        assert name in PTX_HANDLERS and name in PTX_OPS, name
        if entry.spec_driven:
            assert PTX_HANDLERS[name] is lower_table_op, name
            assert PTX_OPS[name] is evaluate_table_op, name
            if entry.hand_written:
                assert name in HAND_LOWERINGS and name in HAND_EVALUATIONS, name
        else:
            assert PTX_HANDLERS[name] is not lower_table_op, name
            assert PTX_OPS[name] is not evaluate_table_op, name
    assert set(HAND_LOWERINGS) == set(HAND_EVALUATIONS)
    assert all(BY_IR_OP[n].hand_written and BY_IR_OP[n].spec_driven for n in HAND_LOWERINGS)


def test_the_simple_arithmetic_is_spec_driven():
    spec = {e.opcode for e in TABLE.values() if e.spec_driven}
    for op in ("add", "sub", "mul", "mad", "div", "rem", "neg", "abs", "min", "max", "and",
               "or", "xor", "not", "cnot", "shl", "shr", "popc", "clz", "brev", "setp", "set",
               "selp", "slct", "copysign", "testp", "mul24", "mad24", "sad", "vabsdiff4",
               "vabsdiff2", "fma", "bfind", "dp4a", "dp2a", "addc", "subc", "madc", "shf", "fns",
               "bfe", "bfi", "bmsk", "prmt", "lop3", "cvt", "sqrt", "rsqrt", "rcp", "sin", "cos",
               "ex2", "lg2", "tanh"):
        assert op in spec, op


# --- vabsdiff4 / vabsdiff2: one table entry each -----------------------------------------------

SIMD_SRC = r"""
extern "C" __global__ void simd(const unsigned* A, const unsigned* B, const unsigned* C,
                                unsigned* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned a = A[i], b = B[i], c = C[i], r;
    unsigned* o = out + 8 * i;
    asm("vabsdiff4.u32.u32.u32.add %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); o[0] = r;
    asm("vabsdiff4.u32.u32.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); o[1] = r;
    asm("vabsdiff4.s32.s32.s32.add %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); o[2] = r;
    asm("vabsdiff4.s32.s32.s32.sat %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); o[3] = r;
    asm("vabsdiff4.u32.s32.u32.sat %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); o[4] = r;
    asm("vabsdiff4.s32.s32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); o[5] = r;
    asm("vabsdiff2.u32.u32.u32.add %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); o[6] = r;
    asm("vabsdiff2.s32.s32.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); o[7] = r;
}
"""


def _lanes(x: int, bits: int, signed: bool) -> list[int]:
    out = []
    for k in range(32 // bits):
        v = (x >> (bits * k)) & ((1 << bits) - 1)
        if signed and v >> (bits - 1):
            v -= 1 << bits
        out.append(v)
    return out


def _absdiff(a: int, b: int, c: int, bits: int, dtype: str, atype: str, btype: str,
             add: bool, sat: bool) -> int:
    """Hand computation from the PTX ISA text: lanes extended by their operand's type,
    |a_k - b_k|; .add sums them onto c, otherwise each is packed into its lane of d
    (clamped to the destination lane's range with .sat, else its low bits)."""
    diffs = [abs(x - y) for x, y in zip(_lanes(a, bits, atype == "s32"), _lanes(b, bits, btype == "s32"))]
    if add:
        return (c + sum(diffs)) & 0xFFFFFFFF
    top = (1 << bits) - 1 if dtype == "u32" else (1 << (bits - 1)) - 1
    d = 0
    for k, v in enumerate(diffs):
        if sat:
            v = min(v, top)
        d |= (v & ((1 << bits) - 1)) << (bits * k)
    return d


_FORMS = [  # (bits, d, a, b, add, sat) of the kernel's outputs, in order
    (8, "u32", "u32", "u32", True, False), (8, "u32", "u32", "u32", False, False),
    (8, "s32", "s32", "s32", True, False), (8, "s32", "s32", "s32", False, True),
    (8, "u32", "s32", "u32", False, True), (8, "s32", "s32", "s32", False, False),
    (16, "u32", "u32", "u32", True, False), (16, "s32", "s32", "u32", False, False),
]


def _simd_inputs():
    rng = np.random.default_rng(15)
    n = 64
    edge = np.array([0, 0xFFFFFFFF, 0x80808080, 0x7F7F7F7F, 0x01FF80FE, 0x80007FFF,
                     0x12345678, 0xFEDCBA98], np.uint32)
    A = np.concatenate([edge, rng.integers(0, 2**32, n - 8, dtype=np.uint64).astype(np.uint32)])
    B = np.concatenate([edge[::-1], rng.integers(0, 2**32, n - 8, dtype=np.uint64).astype(np.uint32)])
    C = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    return A, B, C, n


def test_vabsdiff_compiled_and_interpreted_equal_the_hand_computation():
    ptx = compile_to_ptx(SIMD_SRC).ptx
    assert "vabsdiff4.u32.u32.u32.add" in ptx and "vabsdiff2" in ptx
    A, B, C, n = _simd_inputs()
    expect = np.array([[_absdiff(int(a), int(b), int(c), *f) for f in _FORMS]
                       for a, b, c in zip(A, B, C)], np.uint32)
    out_c = np.zeros((n, 8), np.uint32)
    cpuify.RawModule(ptx=ptx).get_function("simd")((1,), (n,), (A, B, C, out_c, np.int32(n)))
    out_i = np.zeros((n, 8), np.uint32)
    interpret_kernel(ptx, "simd", (1,), (n,), (A, B, C, out_i, np.int32(n)))
    for col, form in enumerate(_FORMS):
        np.testing.assert_array_equal(out_c[:, col], expect[:, col], err_msg=f"compiled {form}")
        np.testing.assert_array_equal(out_i[:, col], expect[:, col], err_msg=f"interpreted {form}")


def test_vabsdiff4_add_is_the_sum_of_absolute_byte_differences():
    """__usad4-style use: c + sum |a_k - b_k| over the four bytes (numbers by hand)."""
    # bytes of a: 10, 200, 0, 255; of b: 20, 100, 255, 0 -> 10 + 100 + 255 + 255 = 620
    a = 10 | 200 << 8 | 0 << 16 | 255 << 24
    b = 20 | 100 << 8 | 255 << 16 | 0 << 24
    assert _absdiff(a, b, 7, 8, "u32", "u32", "u32", True, False) == 627
    # .sat with a signed a: byte 0 of 0xFF is -1, |-1 - 1| = 2 (254 if a were unsigned)
    assert _absdiff(0xFF, 0x01, 0, 8, "u32", "s32", "u32", False, True) == 2
    src = r"""
    extern "C" __global__ void k(unsigned* out, unsigned a, unsigned b) {
        unsigned r;
        asm("vabsdiff4.u32.u32.u32.add %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(7u));
        out[0] = r;
    }"""
    ptx = compile_to_ptx(src).ptx
    out = np.zeros(1, np.uint32)
    cpuify.RawModule(ptx=ptx).get_function("k")((1,), (1,), (out, np.uint32(a), np.uint32(b)))
    assert out[0] == 627


def test_an_unsupported_form_of_a_table_instruction_is_refused_with_its_line():
    ptx = """
.version 7.0
.target sm_75
.address_size 64
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    mov.b32 %r1, 5;
    vabsdiff4.u32.u32.b32 %r2, %r1, %r1, %r1;
    st.global.u32 [%rd1], %r2;
    ret;
}
"""
    with pytest.raises(UnsupportedError) as info:
        cpuify.RawModule(ptx=ptx).get_function("k")((1,), (1,), (np.zeros(1, np.uint32),))
    assert "vabsdiff4.u32.u32.b32" in str(info.value) and "not supported" in str(info.value)
    with pytest.raises(UnsupportedError) as info:
        interpret_kernel(ptx, "k", (1,), (1,), (np.zeros(1, np.uint32),))
    assert "vabsdiff4.u32.u32.b32" in str(info.value)


def test_simd_operand_selectors_are_refused_with_a_clear_message():
    ptx = """
.version 7.0
.target sm_75
.address_size 64
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    mov.b32 %r1, 5;
    vabsdiff4.u32.u32.u32.add %r2, %r1.b3210, %r1.b7654, %r1;
    st.global.u32 [%rd1], %r2;
    ret;
}
"""
    with pytest.raises(UnsupportedError) as info:
        cpuify.RawModule(ptx=ptx).get_function("k")((1,), (1,), (np.zeros(1, np.uint32),))
    assert "operand selectors" in str(info.value) and "line 11" in str(info.value)


# --- bfind, dp4a, dp2a: moved onto the table; hand-computed values ------------------------------

BITS_SRC = r"""
extern "C" __global__ void bits(const int* A, const long long* A64, const int* B, unsigned* out, int n)
{
    int i = threadIdx.x;
    if (i >= n) return;
    int a = A[i], b = B[i];
    long long a64 = A64[i];
    unsigned r, *o = out + 8 * i;
    asm("bfind.s32 %0, %1;" : "=r"(r) : "r"(a)); o[0] = r;
    asm("bfind.shiftamt.u32 %0, %1;" : "=r"(r) : "r"(a)); o[1] = r;
    asm("bfind.s64 %0, %1;" : "=r"(r) : "l"(a64)); o[2] = r;
    asm("bfind.shiftamt.u64 %0, %1;" : "=r"(r) : "l"(a64)); o[3] = r;
    asm("dp4a.s32.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(7)); o[4] = r;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(-7)); o[5] = r;
    asm("dp2a.lo.s32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(0)); o[6] = r;
    asm("dp2a.hi.u32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(1)); o[7] = r;
}
"""


def _bfind(x: int, w: int, signed: bool, shiftamt: bool) -> int:
    x &= (1 << w) - 1
    if signed and x >> (w - 1):
        x = ~x & ((1 << w) - 1)          # the most significant bit that differs from the sign
    if x == 0:
        return 0xFFFFFFFF
    pos = x.bit_length() - 1
    return (w - 1) - pos if shiftamt else pos


def _dot(a: int, b: int, c: int, a_bits: int, a_signed: bool, b_signed: bool, b_from: int) -> int:
    xs = _lanes(a, a_bits, a_signed)
    ys = _lanes(b, 8, b_signed)[b_from:b_from + len(xs)]
    return (c + sum(x * y for x, y in zip(xs, ys))) & 0xFFFFFFFF


def test_bfind_and_dot_products_against_a_hand_computation():
    A = np.array([0, -1, 1, 0x40000000, -2**31, 0x12345678, -0x12345678, 0x7F80FF01], np.int32)
    A64 = np.array([0, -1, 1 << 40, -(1 << 62), 5, 0x7FFFFFFFFFFFFFFF, -(2**63), 1 << 32], np.int64)
    B = np.array([0x01020304, -1, 0x7F80FF01, 0x12345678, 3, -0x01010101, 0x80808080 - 2**32, 9],
                 np.int32)
    n = len(A)
    expect = []
    for a, a64, b in zip(A.tolist(), A64.tolist(), B.tolist()):
        expect.append([_bfind(a, 32, True, False), _bfind(a, 32, False, True),
                       _bfind(a64, 64, True, False), _bfind(a64, 64, False, True),
                       _dot(a, b, 7, 8, True, False, 0), _dot(a, b, -7, 8, False, True, 0),
                       _dot(a, b, 0, 16, True, True, 0), _dot(a, b, 1, 16, False, True, 2)])
    expect_arr = np.array(expect, np.uint32)
    ptx = compile_to_ptx(BITS_SRC).ptx
    for run in ("compiled", "interpreted"):
        out = np.zeros((n, 8), np.uint32)
        args = (A, A64, B, out, np.int32(n))
        if run == "compiled":
            cpuify.RawModule(ptx=ptx).get_function("bits")((1,), (n,), args)
        else:
            interpret_kernel(ptx, "bits", (1,), (n,), args)
        np.testing.assert_array_equal(out, expect_arr, err_msg=run)


# --- carry chains: add.cc/addc, sub.cc/subc, mad.cc/madc (the flag as the table's second result)

CHAIN_SRC = r"""
extern "C" __global__ void chains(const unsigned* X, const unsigned* Y, unsigned* S, unsigned* D,
                                  unsigned* P, int n)
{
    int i = threadIdx.x;
    if (i >= n) return;
    const unsigned* x = X + 4 * i; const unsigned* y = Y + 4 * i;
    unsigned* s = S + 4 * i; unsigned* d = D + 4 * i; unsigned* p = P + 4 * i;
    asm("add.cc.u32 %0, %4, %8;\n\taddc.cc.u32 %1, %5, %9;\n\taddc.cc.u32 %2, %6, %10;\n\taddc.u32 %3, %7, %11;"
        : "=r"(s[0]), "=r"(s[1]), "=r"(s[2]), "=r"(s[3])
        : "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3]), "r"(y[0]), "r"(y[1]), "r"(y[2]), "r"(y[3]));
    asm("sub.cc.u32 %0, %4, %8;\n\tsubc.cc.u32 %1, %5, %9;\n\tsubc.cc.u32 %2, %6, %10;\n\tsubc.u32 %3, %7, %11;"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3]), "r"(y[0]), "r"(y[1]), "r"(y[2]), "r"(y[3]));
    // (x1:x0) * (y1:y0) as a 128-bit product, schoolbook with carries
    asm("mul.lo.u32 %0, %4, %6;\n\t"
        "mul.hi.u32 %1, %4, %6;\n\t"
        "mad.lo.cc.u32 %1, %5, %6, %1;\n\t"
        "madc.hi.u32 %2, %5, %6, 0;\n\t"
        "mad.lo.cc.u32 %1, %4, %7, %1;\n\t"
        "madc.hi.cc.u32 %2, %4, %7, %2;\n\t"
        "addc.u32 %3, 0, 0;\n\t"
        "mad.lo.cc.u32 %2, %5, %7, %2;\n\t"
        "madc.hi.u32 %3, %5, %7, %3;"
        : "=r"(p[0]), "=r"(p[1]), "=r"(p[2]), "=r"(p[3])
        : "r"(x[0]), "r"(x[1]), "r"(y[0]), "r"(y[1]));
}
"""


def test_carry_chains_against_big_integers():
    rng = np.random.default_rng(128)
    n = 16
    X = rng.integers(0, 2**32, 4 * n, dtype=np.uint64).astype(np.uint32)
    Y = rng.integers(0, 2**32, 4 * n, dtype=np.uint64).astype(np.uint32)
    X[:8], Y[:4], Y[4:8] = 0xFFFFFFFF, 1, 0xFFFFFFFF          # carries and borrows all the way
    X[8:12], Y[8:12] = 0, 1
    ptx = compile_to_ptx(CHAIN_SRC).ptx
    assert "madc.hi.cc.u32" in ptx and "subc.cc.u32" in ptx

    def word(v: np.ndarray, i: int, k: int = 4) -> int:
        return sum(int(v[4 * i + j]) << (32 * j) for j in range(k))

    for run in ("compiled", "interpreted"):
        S, D, P = (np.zeros(4 * n, np.uint32) for _ in range(3))
        args = (X, Y, S, D, P, np.int32(n))
        if run == "compiled":
            cpuify.RawModule(ptx=ptx).get_function("chains")((1,), (n,), args)
        else:
            interpret_kernel(ptx, "chains", (1,), (n,), args)
        for i in range(n):
            x, y = word(X, i), word(Y, i)
            assert word(S, i) == (x + y) % 2**128, (run, i)
            assert word(D, i) == (x - y) % 2**128, (run, i)
            assert word(P, i) == word(X, i, 2) * word(Y, i, 2), (run, i)
