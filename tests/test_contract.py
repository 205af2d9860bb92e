"""Which unrounded mul + add/sub pairs cpuify fuses into one fma, as ptxas does
(lifting/contract.py).

Each shape below was compiled by NVIDIA's ptxas 13.0 for sm_80 and sm_90 and its SASS read
(nvdisasm from PyPI's nvidia-cuda-nvdisasm): FFMA/DFMA where ptxas fused, FMUL/DMUL + FADD
where it did not.  The GPU runs that SASS; the fuzzer's H200 run found the cross-block case
(fz_2810_2948: a product hoisted out of a loop and subtracted in its body, fused by ptxas).
The end-to-end tests check the fused bits against NumPy on inputs where a fused and an
unfused result differ in every element."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.lifting.lift import lift_kernel

HEAD = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 p, .param .f32 a, .param .f32 b, .param .f32 c, .param .u32 n)
{
	.reg .pred %p<4>;
	.reg .b32 %r<9>;
	.reg .f32 %f<12>;
	.reg .f64 %fd<12>;
	.reg .b64 %rd<5>;
	ld.param.u64 %rd1, [p];
	cvta.to.global.u64 %rd2, %rd1;
	ld.param.f32 %f1, [a];
	ld.param.f32 %f2, [b];
	ld.param.f32 %f3, [c];
	ld.param.u32 %r1, [n];
	ld.global.f32 %f7, [%rd2+16];
	ld.global.f32 %f8, [%rd2+20];
	mov.f32 %f9, %f3;
	cvt.f64.f32 %fd1, %f1;
	cvt.f64.f32 %fd2, %f2;
	cvt.f64.f32 %fd3, %f3;
"""

IF_N = "\tsetp.eq.u32 %p1, %r1, 0;\n\t@%p1 bra L1;\n"
LOOP = "\tmov.u32 %r2, 0;\nL1:\n"
LOOP_END = "\tadd.u32 %r2, %r2, 1;\n\tsetp.lt.u32 %p1, %r2, %r1;\n\t@%p1 bra L1;\n"
STORE = "\tst.global.f32 [%rd2], %f9;\n"
STORE64 = "\tst.global.f64 [%rd2], %fd3;\n"

#: name -> (body, fmas, muls left): what ptxas 13.0's SASS has
SHAPES = {
    "same block": ("\tmul.f32 %f4, %f1, %f2;\n\tadd.f32 %f9, %f4, %f3;\n" + STORE, 1, 0),
    "two sums in one block": ("\tmul.f32 %f4, %f1, %f2;\n\tadd.f32 %f9, %f4, %f3;\n"
                              "\tsub.f32 %f9, %f4, %f9;\n" + STORE, 2, 0),
    "sum in an if": ("\tmul.f32 %f4, %f1, %f2;\n" + IF_N + "\tadd.f32 %f9, %f4, %f3;\nL1:\n" + STORE,
                     1, 0),
    "one sum in each branch": ("\tmul.f32 %f4, %f1, %f2;\n" + IF_N + "\tadd.f32 %f9, %f4, %f3;\n"
                               "\tbra L2;\nL1:\n\tsub.f32 %f9, %f4, %f3;\nL2:\n" + STORE, 2, 0),
    "sum after a join": ("\tmul.f32 %f4, %f1, %f2;\n" + IF_N + "\tadd.f32 %f3, %f3, %f3;\nL1:\n"
                         "\tadd.f32 %f9, %f4, %f3;\n" + STORE, 1, 0),
    "product hoisted out of a loop": ("\tmul.f32 %f4, %f1, %f2;\n" + LOOP + "\tsub.f32 %f9, %f9, %f4;\n"
                                      + LOOP_END + STORE, 1, 0),
    "sum after a loop": ("\tmul.f32 %f4, %f1, %f2;\n" + LOOP + LOOP_END + "\tadd.f32 %f9, %f4, %f3;\n"
                         + STORE, 1, 0),
    "product in a loop, sum after it": (LOOP + "\tcvt.rn.f32.u32 %f5, %r2;\n\tmul.f32 %f4, %f5, %f2;\n"
                                        + LOOP_END + "\tadd.f32 %f9, %f4, %f1;\n" + STORE, 0, 1),
    "through neg and mov": ("\tmul.f32 %f4, %f1, %f2;\n\tneg.f32 %f5, %f4;\n\tmov.f32 %f6, %f5;\n"
                            "\tadd.f32 %f9, %f6, %f3;\n\tsub.f32 %f9, %f9, %f4;\n" + STORE, 2, 0),
    "also stored": ("\tmul.f32 %f4, %f1, %f2;\n\tadd.f32 %f9, %f4, %f3;\n"
                    "\tst.global.f32 [%rd2+4], %f4;\n" + STORE, 0, 1),
    "neg also stored": ("\tmul.f32 %f4, %f1, %f2;\n\tneg.f32 %f5, %f4;\n\tadd.f32 %f9, %f5, %f3;\n"
                        "\tst.global.f32 [%rd2+4], %f5;\n" + STORE, 0, 1),
    "also compared": ("\tmul.f32 %f4, %f1, %f2;\n\tadd.f32 %f9, %f4, %f3;\n"
                      "\tsetp.gt.f32 %p1, %f4, %f3;\n\tselp.f32 %f9, %f9, %f3, %p1;\n" + STORE, 0, 1),
    "abs of it": ("\tmul.f32 %f4, %f1, %f2;\n\tabs.f32 %f5, %f4;\n\tadd.f32 %f9, %f5, %f3;\n" + STORE,
                  0, 1),
    "t + t": ("\tmul.f32 %f4, %f1, %f2;\n\tadd.f32 %f9, %f4, %f4;\n" + STORE, 0, 1),
    "one add.rn": ("\tmul.f32 %f4, %f1, %f2;\n\tadd.rn.f32 %f9, %f4, %f3;\n"
                   "\tadd.f32 %f9, %f4, %f9;\n" + STORE, 0, 1),
    "mul.ftz, add": ("\tmul.ftz.f32 %f4, %f1, %f2;\n\tadd.f32 %f9, %f4, %f3;\n" + STORE, 0, 1),
    "mul.ftz, add.ftz and add": ("\tmul.ftz.f32 %f4, %f1, %f2;\n\tadd.ftz.f32 %f9, %f4, %f3;\n"
                                 "\tadd.f32 %f9, %f4, %f9;\n" + STORE, 0, 1),
    "add.sat": ("\tmul.f32 %f4, %f1, %f2;\n\tadd.sat.f32 %f9, %f4, %f3;\n" + STORE, 1, 0),
    "mul.sat": ("\tmul.sat.f32 %f4, %f1, %f2;\n\tadd.f32 %f9, %f4, %f3;\n" + STORE, 0, 1),
    "product of a product": ("\tmul.f32 %f4, %f1, %f2;\n\tmul.f32 %f5, %f4, %f3;\n"
                             "\tadd.f32 %f9, %f5, %f1;\n\tadd.f32 %f9, %f9, %f4;\n" + STORE, 1, 1),
    "sum of two products": ("\tmul.f32 %f4, %f1, %f2;\n\tmul.f32 %f5, %f3, %f1;\n"
                            "\tsub.f32 %f9, %f4, %f5;\n" + STORE, 1, 1),
    "second product used again": ("\tmul.f32 %f4, %f1, %f2;\n\tmul.f32 %f5, %f3, %f1;\n"
                                  "\tadd.f32 %f9, %f4, %f5;\n\tadd.f32 %f9, %f9, %f5;\n" + STORE, 1, 1),
    "registers, same block": ("\tmul.f32 %f4, %f7, %f8;\n\tadd.f32 %f9, %f4, %f3;\n" + STORE, 1, 0),
    "registers, sum in an if": ("\tmul.f32 %f4, %f7, %f8;\n" + IF_N + "\tadd.f32 %f9, %f4, %f3;\nL1:\n"
                                + STORE, 0, 1),
    "registers, product hoisted out of a loop": ("\tmul.f32 %f4, %f7, %f8;\n" + LOOP
                                                 + "\tsub.f32 %f9, %f9, %f4;\n" + LOOP_END + STORE, 0, 1),
    "registers, one sum in each block": ("\tmul.f32 %f4, %f7, %f8;\n\tadd.f32 %f9, %f4, %f3;\n" + IF_N
                                         + "\tadd.f32 %f9, %f4, %f9;\nL1:\n" + STORE, 0, 1),
    "square of a register, sum in an if": ("\tmul.f32 %f4, %f7, %f7;\n" + IF_N
                                           + "\tadd.f32 %f9, %f4, %f3;\nL1:\n" + STORE, 0, 1),
    "register and immediate, loop": ("\tmul.f32 %f4, %f7, 0f40400000;\n" + LOOP + "\tsub.f32 %f9, %f9, %f4;\n"
                                     + LOOP_END + STORE, 1, 0),
    "abs of a register and immediate, if": ("\tabs.f32 %f5, %f7;\n\tmul.f32 %f4, %f5, 0f40400000;\n"
                                            + IF_N + "\tadd.f32 %f9, %f4, %f3;\nL1:\n" + STORE, 1, 0),
    "register and parameter, if": ("\tmul.f32 %f4, %f7, %f1;\n" + IF_N + "\tadd.f32 %f9, %f4, %f3;\nL1:\n"
                                   + STORE, 1, 0),
    "register and negated parameter, if": ("\tneg.f32 %f5, %f1;\n\tmul.f32 %f4, %f7, %f5;\n" + IF_N
                                           + "\tadd.f32 %f9, %f4, %f3;\nL1:\n" + STORE, 1, 0),
    "register and converted parameter, if": ("\tcvt.rn.f32.u32 %f5, %r1;\n\tmul.f32 %f4, %f7, %f5;\n"
                                             + IF_N + "\tadd.f32 %f9, %f4, %f3;\nL1:\n" + STORE, 0, 1),
    "f64 same block": ("\tmul.f64 %fd4, %fd1, %fd2;\n\tadd.f64 %fd5, %fd4, %fd3;\n"
                       "\tsub.f64 %fd3, %fd5, %fd4;\n" + STORE64, 2, 0),
    "f64 through neg": ("\tmul.f64 %fd4, %fd1, %fd2;\n\tneg.f64 %fd5, %fd4;\n"
                        "\tadd.f64 %fd3, %fd5, %fd3;\n" + STORE64, 1, 0),
    "f64 parameters, sum in an if": ("\tld.param.f64 %fd6, [p];\n\tmul.f64 %fd4, %fd6, 0d4008000000000000;\n"
                                     + IF_N + "\tadd.f64 %fd3, %fd4, %fd3;\nL1:\n" + STORE64, 1, 0),
    "f64 sum in an if": ("\tmul.f64 %fd4, %fd1, %fd2;\n" + IF_N + "\tadd.f64 %fd3, %fd4, %fd3;\nL1:\n"
                         + STORE64, 0, 1),
    "f64 product hoisted out of a loop": ("\tmul.f64 %fd4, %fd1, %fd2;\n" + LOOP
                                          + "\tsub.f64 %fd3, %fd3, %fd4;\n" + LOOP_END + STORE64, 0, 1),
}


def _count(body: str) -> tuple[int, int]:
    module = parse_ptx(HEAD + body + "\tret;\n}\n")
    ops = [op for op in lift_kernel(module, module.functions["k"]).op.walk()]
    fmas = sum(op.name == "ptx.fma" for op in ops)
    muls = sum(op.name == "ptx.mul" and op.results[0].type in ("f32", "f64") for op in ops)
    return fmas, muls


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_fuses_as_ptxas(shape: str) -> None:
    body, fmas, muls = SHAPES[shape]
    assert _count(body) == (fmas, muls)


def _inputs(n: int = 64) -> tuple[np.ndarray, np.float32, np.ndarray]:
    """a, b and c = -round(a*b): a*b + c is the product's rounding error when fused (exact
    in f64, nonzero here), 0 when not."""
    rng = np.random.default_rng(5)
    a = rng.uniform(1, 2, n).astype(np.float32)
    b = np.float32(1.2345679)
    a = a[(a.astype(np.float64) * b) != (a * b).astype(np.float64)]
    return a, b, -(a * b)


LOOP_KERNEL = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 p, .param .u64 pa, .param .f32 b, .param .u64 pc, .param .u32 n)
{
	.reg .pred %p<4>;
	.reg .b32 %r<9>;
	.reg .f32 %f<12>;
	.reg .b64 %rd<12>;
	ld.param.u64 %rd1, [p];
	ld.param.u64 %rd5, [pa];
	ld.param.u64 %rd7, [pc];
	ld.param.u32 %r1, [n];
	mov.u32 %r3, %tid.x;
	mul.wide.u32 %rd8, %r3, 4;
	add.s64 %rd2, %rd1, %rd8;
	add.s64 %rd5, %rd5, %rd8;
	add.s64 %rd7, %rd7, %rd8;
	ld.global.f32 %f1, [%rd5];
	ld.param.f32 %f2, [b];
	ld.global.f32 %f3, [%rd7];
	mov.f32 %f9, 0f00000000;
	mul.f32 %f4, %f1, %f2;
	setp.eq.u32 %p2, %r1, 0;
	@%p2 bra DONE;
	mov.u32 %r2, 0;
L1:
	add.f32 %f5, %f4, %f3;
	add.f32 %f9, %f9, %f5;
	add.u32 %r2, %r2, 1;
	setp.lt.u32 %p1, %r2, %r1;
	@%p1 bra L1;
DONE:
	st.global.f32 [%rd2], %f9;
	ret;
}
"""


@pytest.mark.parametrize("run", ["native", "interp"])
def test_product_hoisted_out_of_a_loop_is_fused(run: str) -> None:
    """The fz_2810_2948 shape, end to end: a product of a register and a parameter computed
    before a loop and added in its body gives each iteration fma(a, b, c), the product's
    rounding error here."""
    a, b, c = _inputs()
    out = np.zeros_like(a)
    args = [out, a, b, c, np.uint32(1)]
    if run == "native":
        cpuify.RawModule(ptx=LOOP_KERNEL).get_function("k")((1,), (a.size,), args)
    else:
        from cpuify.interp import InterpModule
        InterpModule(LOOP_KERNEL).launch("k", (1, 1, 1), (a.size, 1, 1), args)
    want = (a.astype(np.float64) * b + c).astype(np.float32)
    assert np.all(want != 0)
    np.testing.assert_array_equal(out, want)


# --- the half types: ptxas fuses f16, bf16 (sm_90) and their packed forms the same way, a
# packed product only into packed sums (never through an unpacking mov into scalar sums) ---

HALF_HEAD = """.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 p)
{
	.reg .pred %p<4>;
	.reg .b16 %h<16>;
	.reg .b32 %r<16>;
	.reg .b64 %rd<5>;
	ld.param.u64 %rd1, [p];
	cvta.to.global.u64 %rd2, %rd1;
	ld.global.b16 %h1, [%rd2];
	ld.global.b16 %h2, [%rd2+2];
	ld.global.b16 %h3, [%rd2+4];
	ld.global.b32 %r1, [%rd2+8];
	ld.global.b32 %r2, [%rd2+12];
	ld.global.b32 %r3, [%rd2+16];
"""
ST16 = "\tst.global.b16 [%rd2+32], %h5;\n"
ST32 = "\tst.global.b32 [%rd2+32], %r5;\n"

#: name -> (body, fmas, muls left): lane fmas and lane muls, as ptxas 13.0's SASS for sm_80
#: and sm_90 has them (HFMA2 against HMUL2 + HADD2; a packed fma is two lane fmas here)
HALF_SHAPES = {
    "f16": ("\tmul.f16 %h4, %h1, %h2;\n\tadd.f16 %h5, %h4, %h3;\n" + ST16, 1, 0),
    "f16, mul.rn": ("\tmul.rn.f16 %h4, %h1, %h2;\n\tadd.f16 %h5, %h4, %h3;\n" + ST16, 0, 1),
    "f16 sub": ("\tmul.f16 %h4, %h1, %h2;\n\tsub.f16 %h5, %h3, %h4;\n" + ST16, 1, 0),
    "f16 ftz": ("\tmul.ftz.f16 %h4, %h1, %h2;\n\tadd.ftz.f16 %h5, %h4, %h3;\n" + ST16, 1, 0),
    "f16, add.ftz": ("\tmul.f16 %h4, %h1, %h2;\n\tadd.ftz.f16 %h5, %h4, %h3;\n" + ST16, 0, 1),
    "f16, two sums": ("\tmul.f16 %h4, %h1, %h2;\n\tadd.f16 %h5, %h4, %h3;\n\tadd.f16 %h6, %h4, %h1;\n"
                      "\tst.global.b16 [%rd2+34], %h6;\n" + ST16, 2, 0),
    "f16, also stored": ("\tmul.f16 %h4, %h1, %h2;\n\tadd.f16 %h5, %h4, %h3;\n"
                         "\tst.global.b16 [%rd2+34], %h4;\n" + ST16, 0, 1),
    "f16 add.sat": ("\tmul.f16 %h4, %h1, %h2;\n\tadd.sat.f16 %h5, %h4, %h3;\n" + ST16, 1, 0),
    "f16 mul.sat": ("\tmul.sat.f16 %h4, %h1, %h2;\n\tadd.f16 %h5, %h4, %h3;\n" + ST16, 0, 1),
    "f16 through neg": ("\tmul.f16 %h4, %h1, %h2;\n\tneg.f16 %h6, %h4;\n\tadd.f16 %h5, %h6, %h3;\n"
                        + ST16, 1, 0),
    "f16 registers, sum in an if": ("\tmul.f16 %h4, %h1, %h2;\n\tsetp.eq.b16 %p1, %h3, 0;\n"
                                    "\t@%p1 bra L1;\n\tadd.f16 %h5, %h4, %h3;\n" + ST16 + "L1:\n", 0, 1),
    "f16x2": ("\tmul.f16x2 %r4, %r1, %r2;\n\tadd.f16x2 %r5, %r4, %r3;\n" + ST32, 2, 0),
    "f16x2 ftz": ("\tmul.ftz.f16x2 %r4, %r1, %r2;\n\tadd.ftz.f16x2 %r5, %r4, %r3;\n" + ST32, 2, 0),
    "f16x2 add.sat": ("\tmul.f16x2 %r4, %r1, %r2;\n\tadd.sat.f16x2 %r5, %r4, %r3;\n" + ST32, 2, 0),
    "f16x2 through neg": ("\tmul.f16x2 %r4, %r1, %r2;\n\tneg.f16x2 %r6, %r4;\n"
                          "\tadd.f16x2 %r5, %r6, %r3;\n" + ST32, 2, 0),
    "f16x2 through mov": ("\tmul.f16x2 %r4, %r1, %r2;\n\tmov.b32 %r6, %r4;\n"
                          "\tadd.f16x2 %r5, %r6, %r3;\n" + ST32, 2, 0),
    "f16x2, add and sub": ("\tmul.f16x2 %r4, %r1, %r2;\n\tadd.f16x2 %r5, %r4, %r3;\n"
                           "\tsub.f16x2 %r6, %r1, %r4;\n\tst.global.b32 [%rd2+36], %r6;\n" + ST32, 4, 0),
    "f16x2 t + t": ("\tmul.f16x2 %r4, %r1, %r2;\n\tadd.f16x2 %r5, %r4, %r4;\n" + ST32, 0, 2),
    "f16x2, a lane also stored": ("\tmul.f16x2 %r4, %r1, %r2;\n\tadd.f16x2 %r5, %r4, %r3;\n"
                                  "\tmov.b32 {%h6, %h7}, %r4;\n\tst.global.b16 [%rd2+40], %h6;\n"
                                  + ST32, 0, 2),
    "f16x2 lanes into scalar sums": ("\tmul.f16x2 %r4, %r1, %r2;\n\tmov.b32 {%h6, %h7}, %r4;\n"
                                     "\tadd.f16 %h8, %h6, %h1;\n\tadd.f16 %h9, %h7, %h2;\n"
                                     "\tmov.b32 %r5, {%h8, %h9};\n" + ST32, 0, 2),
    "scalar products into a packed sum": ("\tmul.f16 %h4, %h1, %h2;\n\tmul.f16 %h5, %h2, %h3;\n"
                                          "\tmov.b32 %r4, {%h4, %h5};\n\tadd.f16x2 %r5, %r4, %r3;\n"
                                          + ST32, 0, 2),
    "bf16": ("\tmul.bf16 %h4, %h1, %h2;\n\tadd.bf16 %h5, %h4, %h3;\n" + ST16, 1, 0),
    "bf16, rn": ("\tmul.rn.bf16 %h4, %h1, %h2;\n\tadd.rn.bf16 %h5, %h4, %h3;\n" + ST16, 0, 1),
    "bf16x2": ("\tmul.bf16x2 %r4, %r1, %r2;\n\tadd.bf16x2 %r5, %r4, %r3;\n" + ST32, 2, 0),
}


def _half_count(body: str) -> tuple[int, int]:
    module = parse_ptx(HALF_HEAD + body + "\tret;\n}\n")
    ops = list(lift_kernel(module, module.functions["k"]).op.walk())
    fmas = sum(op.name == "ptx.fma" for op in ops)
    # (an unfused bf16 product is an f32 mul between conversions after lifting)
    muls = sum(op.name == "ptx.mul" and bool({"f16", "f32"} & set(op.attributes["mods"]))
               for op in ops)
    return fmas, muls


@pytest.mark.parametrize("shape", sorted(HALF_SHAPES))
def test_half_products_fuse_as_ptxas(shape: str) -> None:
    body, fmas, muls = HALF_SHAPES[shape]
    assert _half_count(body) == (fmas, muls)


HALF_SRC = r"""
#include <cuda_fp16.h>
extern "C" __global__ void axpy_h(const __half *a, const __half *b, const __half *c, __half *y,
                                  int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a[i] * b[i] + c[i];
}
extern "C" __global__ void axpy_h2(const __half2 *a, const __half2 *b, const __half2 *c,
                                   __half2 *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a[i] * b[i] - c[i];
}
"""


@pytest.mark.parametrize("run", ["native", "interp"])
@pytest.mark.parametrize("kernel", ["axpy_h", "axpy_h2"])
def test_half_operators_fuse_end_to_end(kernel: str, run: str) -> None:
    """`a * b + c` on __half and `a * b - c` on __half2 (cuda_fp16.h's operators: mul.f16 and
    add.f16, no rounding modifier) round once, as on the GPU: bit for bit the f64 result
    rounded to f16 (exact in f64 for these magnitudes), which differs from the twice rounded
    result in about a quarter of the elements."""
    rng = np.random.default_rng(3)
    n = 2048
    a, b = (rng.uniform(-4, 4, n).astype(np.float16) for _ in range(2))
    c = rng.uniform(-8, 8, n).astype(np.float16)
    sign = 1.0 if kernel == "axpy_h" else -1.0
    want = (a.astype(np.float64) * b + sign * c.astype(np.float64)).astype(np.float16)
    twice = (a * b + np.float16(sign) * c).astype(np.float16)
    assert np.count_nonzero(want != twice) > n // 8
    m = n if kernel == "axpy_h" else n // 2
    y = np.zeros(n, np.float16)
    args = [a, b, c, y, np.int32(m)]
    if run == "native":
        cpuify.RawModule(code=HALF_SRC).get_function(kernel)(((m + 127) // 128,), (128,), args)
    else:
        from cpuify.interp import InterpModule
        from cpuify.frontend.nvrtc import compile_to_ptx
        InterpModule(compile_to_ptx(HALF_SRC).ptx).launch(kernel, ((m + 127) // 128, 1, 1),
                                                      (128, 1, 1), args)
    np.testing.assert_array_equal(y.view(np.uint16), want.view(np.uint16))
