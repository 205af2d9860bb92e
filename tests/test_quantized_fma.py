"""fma with directed rounding whose result lies on a known grid (codegen/ptx_arith.py
_quantized_fma): NVRTC's expf rounds `sat(x) * 252 + 12582913` down to an integer with
`fma.rm.f32`; with its operands' bounds known from the IR (cvt.sat gives [0, 1], constants)
the rounding is a floor of the product, exact in double.  The results must be those of the
exact rounding, checked against NumPy, against the general emulation (the same values
through a parameter, bounds unknown) and the reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.interp import interpret_kernel

PTX = r"""
.version 8.0
.target sm_75
.address_size 64
.visible .entry grid_fma(.param .u64 x_p, .param .u64 out_p, .param .f32 scale, .param .f32 addend) {
    .reg .b32 %r<4>;
    .reg .f32 %f<16>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [x_p];
    ld.param.u64 %rd2, [out_p];
    ld.param.f32 %f10, [scale];
    ld.param.f32 %f11, [addend];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mad.lo.s32 %r1, %r2, %r3, %r1;
    cvta.to.global.u64 %rd3, %rd1;
    mul.wide.u32 %rd4, %r1, 4;
    add.s64 %rd5, %rd3, %rd4;
    ld.global.f32 %f1, [%rd5];
    cvt.sat.f32.f32 %f2, %f1;
    mov.f32 %f3, 0f437C0000;
    mov.f32 %f4, 0f4B400001;
    fma.rm.f32 %f5, %f2, %f3, %f4;          // bounds known: floor, in one binade
    fma.rp.f32 %f6, %f2, %f3, %f4;
    fma.rz.f32 %f7, %f2, %f3, %f4;
    fma.rm.f32 %f8, %f2, %f10, %f11;        // the same through parameters: general
    mov.f32 %f12, 0f4A800000;
    fma.rm.f32 %f9, %f2, %f3, %f12;         // addend 2^22: a binade with ulp 1/2 -> general
    cvta.to.global.u64 %rd6, %rd2;
    mul.wide.u32 %rd7, %r1, 20;
    add.s64 %rd6, %rd6, %rd7;
    st.global.f32 [%rd6], %f5;
    st.global.f32 [%rd6+4], %f6;
    st.global.f32 [%rd6+8], %f7;
    st.global.f32 [%rd6+12], %f8;
    st.global.f32 [%rd6+16], %f9;
    ret;
}
"""


def _inputs(n: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    # values whose product with 252 is an integer or just beside one, the ends, NaN
    k = rng.integers(0, 253, n // 2)
    near = (k + rng.choice([-1e-6, 0.0, 1e-6], n // 2)) / 252.0
    x = np.concatenate([near, rng.uniform(-0.5, 1.5, n - n // 2 - 6),
                        [0.0, 1.0, -0.0, np.nan, np.inf, -np.inf]]).astype(np.float32)
    return x


def _expected(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        s = np.nan_to_num(np.clip(x.astype(np.float64), 0, 1), nan=0.0)   # cvt.sat: NaN -> 0
    p = s * 252.0                                    # exact in double
    c = 12582913.0
    down, up = c + np.floor(p), c + np.ceil(p)
    half = 2.0 ** 22 + np.floor(p * 2) / 2           # 2^22 + p rounded down to halves
    return np.stack([down, up, down, down, half], 1).astype(np.float32)


@pytest.mark.parametrize("n", [256 * 8])
def test_quantized_directed_fma(n: int) -> None:
    x = _inputs(n)
    ref = _expected(x)
    f = cpuify.RawModule(ptx=PTX).get_function("grid_fma")
    for _ in range(2):          # generic code, then the specialized block shape
        out = np.zeros((n, 5), np.float32)
        f((n // 256,), (256,), (x, out, np.float32(252.0), np.float32(12582913.0)))
        np.testing.assert_array_equal(out, ref)
    small = np.zeros((64, 5), np.float32)
    interpret_kernel(PTX, "grid_fma", (1,), (64,), (x[:64], small, np.float32(252.0),
                                                      np.float32(12582913.0)))
    np.testing.assert_array_equal(small, ref[:64])
