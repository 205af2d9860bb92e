"""`.ftz` on f16 arithmetic: subnormal sources and results flushed to a zero of the same sign
(what ptxas compiles `add.ftz.f16` to: HADD2.FTZ, which flushes input and output denormals;
`neg.ftz.f16` and `abs.ftz.f16` too: HADD2.FTZ of -x or |x| and -0),
in compiled code and in the reference interpreter, bit for bit against NumPy.  cpuify kept
f16 subnormals under `.ftz` before; the packed `.f16x2` forms act per half."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.interp import InterpModule

TINY = np.float16(2.0 ** -14)        # the smallest normal f16

#: name -> (PTX of the op on %h1, %h2, %h3 into %h5, reference on flushed float64 inputs)
OPS = {
    "add": ("add.ftz.f16 %h5, %h1, %h2;", lambda a, b, c: a + b),
    "sub": ("sub.ftz.f16 %h5, %h1, %h2;", lambda a, b, c: a - b),
    "mul": ("mul.ftz.f16 %h5, %h1, %h2;", lambda a, b, c: a * b),
    "fma": ("fma.rn.ftz.f16 %h5, %h1, %h2, %h3;", lambda a, b, c: a * b + c),
    "neg": ("neg.ftz.f16 %h5, %h1;", lambda a, b, c: -a),
    "abs": ("abs.ftz.f16 %h5, %h1;", lambda a, b, c: np.abs(a)),
    "f16x2 neg": ("mov.b32 %r1, {%h1, %h2};\n\tneg.ftz.f16x2 %r3, %r1;\n"
                  "\tmov.b32 {%h5, %h6}, %r3;", lambda a, b, c: -a),
    "mul, add (fused)": ("mul.ftz.f16 %h4, %h1, %h2;\n\tadd.ftz.f16 %h5, %h4, %h3;",
                         lambda a, b, c: a * b + c),
    # an f32 .ftz op beside it: the kernel runs with the CPU's DAZ/FTZ set (codegen/
    # denormals.py), which leave f16 subnormals alone (normal numbers in f32)
    "add, f32 beside": ("add.ftz.f16 %h5, %h1, %h2;\n\tcvt.ftz.f32.f16 %f1, %h3;\n"
                        "\tadd.ftz.f32 %f2, %f1, %f1;\n\tst.global.f32 [%rd6+4096], %f2;",
                        lambda a, b, c: a + b),
    "f16x2 add": ("mov.b32 %r1, {%h1, %h2};\n\tmov.b32 %r2, {%h2, %h3};\n"
                  "\tadd.ftz.f16x2 %r3, %r1, %r2;\n\tmov.b32 {%h5, %h6}, %r3;",
                  lambda a, b, c: a + b),
}


def _ptx(body: str) -> str:
    return f""".version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 pin, .param .u64 pout)
{{
	.reg .b16 %h<8>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<8>;
	.reg .f32 %f<4>;
	ld.param.u64 %rd1, [pin];
	ld.param.u64 %rd2, [pout];
	mov.u32 %r0, %tid.x;
	mul.wide.u32 %rd3, %r0, 6;
	add.s64 %rd4, %rd1, %rd3;
	mul.wide.u32 %rd5, %r0, 2;
	add.s64 %rd6, %rd2, %rd5;
	ld.global.b16 %h1, [%rd4];
	ld.global.b16 %h2, [%rd4+2];
	ld.global.b16 %h3, [%rd4+4];
	{body}
	st.global.b16 [%rd6], %h5;
	ret;
}}
"""


def _flush(x: np.ndarray) -> np.ndarray:
    return np.where(np.abs(x) < TINY, np.copysign(np.float16(0), x), x).astype(np.float16)


def _inputs(n: int) -> np.ndarray:
    """Halves in [-2, 2] (so that a * b + c is exact in float64), a third of them subnormal,
    and pairs whose sums and products are subnormal."""
    rng = np.random.default_rng(11)
    x = rng.uniform(-2, 2, (n, 3)).astype(np.float16)
    small = rng.random((n, 3)) < 0.35
    x[small] = (rng.uniform(-1, 1, small.sum()) * 2.0 ** -14).astype(np.float16)
    near = rng.random(n) < 0.2                     # a + b and a * b near the subnormal range
    x[near, 1] = (-x[near, 0].astype(np.float64) * (1 + rng.uniform(-1e-3, 1e-3, near.sum()))
                  ).astype(np.float16)
    return x


@pytest.mark.parametrize("run", ["native", "interp"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_ftz_flushes_f16_sources_and_results(name: str, run: str) -> None:
    body, ref = OPS[name]
    n = 1024
    x = _inputs(n)
    a, b, c = (_flush(x[:, k]).astype(np.float64) for k in range(3))
    want = _flush(np.asarray(ref(a, b, c)).astype(np.float16))
    kept = np.asarray(ref(*(x[:, k].astype(np.float64) for k in range(3)))).astype(np.float16)
    assert np.count_nonzero(want.view(np.uint16) != kept.view(np.uint16)) > n // 20
    out = np.zeros(4 * n, np.float16)
    ptx = _ptx(body)
    if run == "native":
        cpuify.RawModule(ptx=ptx).get_function("k")((1,), (n,), [x, out])
    else:
        InterpModule(ptx).launch("k", (1, 1, 1), (n, 1, 1), [x, out])
    np.testing.assert_array_equal(out[:n].view(np.uint16), want.view(np.uint16))


def test_f16_without_ftz_keeps_subnormals_under_the_cpus_flush_switches() -> None:
    """A kernel run with the CPU's DAZ/FTZ set (an f32 .ftz op beside it) whose f16 fma has
    no .ftz keeps f16 subnormals: they are normal numbers in f32, and AVX512-FP16's own
    fma (used where the CPU has it) ignores the switches."""
    body = ("fma.rn.f16 %h5, %h1, %h2, %h3;\n\tcvt.ftz.f32.f16 %f1, %h3;\n"
            "\tadd.ftz.f32 %f2, %f1, %f1;\n\tst.global.f32 [%rd6+4096], %f2;")
    n = 1024
    rng = np.random.default_rng(2)
    x = np.zeros((n, 3), np.float16)
    x[:, 0] = (rng.uniform(-1, 1, n) * 2.0 ** -14).astype(np.float16)
    x[:, 1] = rng.uniform(0.5, 2, n).astype(np.float16)
    x[:, 2] = (rng.uniform(-1, 1, n) * 2.0 ** -15).astype(np.float16)
    want = (x[:, 0].astype(np.float64) * x[:, 1] + x[:, 2]).astype(np.float16)
    assert np.count_nonzero(np.abs(want) < TINY) > n // 2
    out = np.zeros(4 * n, np.float16)
    cpuify.RawModule(ptx=_ptx(body)).get_function("k")((1,), (n,), [x, out])
    np.testing.assert_array_equal(out[:n].view(np.uint16), want.view(np.uint16))


NAN_TO_HALF = r'''
#include <cuda_fp16.h>
extern "C" __global__ void to_half(const unsigned *bits, unsigned short *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __half_as_ushort(__float2half_rn(__uint_as_float(bits[i])));
}
extern "C" __global__ void to_half_from_double(const double *x, unsigned short *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __half_as_ushort(__double2half(x[i]));
}
'''


def test_nan_converted_to_f16_is_the_canonical_nan() -> None:
    """cvt.rn.f16.f32 (and from f64) of any NaN gives the canonical f16 NaN 0x7FFF, as on the
    GPU (the CUDA Handbook's float_to_float16 checks every f32: LLVM's fptrunc kept a quiet
    NaN's payload, 0x7E00 and up); other values round as NumPy's float16."""
    mod = cpuify.RawModule(code=NAN_TO_HALF)
    nans = [0x7F800001, 0x7F80000A, 0x7FC00000, 0x7FFFFFFF, 0xFFC00000, 0xFF800001]
    finite = np.random.default_rng(3).standard_normal(250).astype(np.float32) * 1000
    bits = np.concatenate([np.array(nans, np.uint32), finite.view(np.uint32),
                           np.array([0x7F800000, 0xFF800000], np.uint32)])
    out = np.zeros(bits.size, np.uint16)
    mod.get_function("to_half")((2,), (256,), (bits, out, np.int32(bits.size)))
    assert [hex(v) for v in out[:len(nans)]] == ["0x7fff"] * len(nans)
    np.testing.assert_array_equal(out[len(nans):], bits[len(nans):].view(np.float32)
                                  .astype(np.float16).view(np.uint16))
    x = np.array([np.nan, -np.nan, 1.5, 65504.0], np.float64)
    out = np.zeros(x.size, np.uint16)
    mod.get_function("to_half_from_double")((1,), (32,), (x, out, np.int32(x.size)))
    assert [hex(v) for v in out] == ["0x7fff", "0x7fff", "0x3e00", "0x7bff"]
    # the reference interpreter gives the same bits
    interp = InterpModule(mod.ptx)
    got = np.zeros(len(nans), np.uint16)
    interp.launch("to_half", (1, 1, 1), (32, 1, 1), [np.array(nans, np.uint32), got, np.int32(len(nans))])
    assert [hex(v) for v in got] == ["0x7fff"] * len(nans)
    got = np.zeros(x.size, np.uint16)
    interp.launch("to_half_from_double", (1, 1, 1), (32, 1, 1), [x, got, np.int32(x.size)])
    assert [hex(v) for v in got] == ["0x7fff", "0x7fff", "0x3e00", "0x7bff"]
