"""fma with directed rounding whose result lies on a known grid (codegen/ptx_arith.py
_quantized_fma): NVRTC's expf rounds `sat(x) * 252 + 12582913` down to an integer with
`fma.rm.f32`; with its operands' bounds known from the IR (cvt.sat gives [0, 1], constants)
the rounding is a floor of the product (in f32 where the product's sign is the rounding's
direction: its error by an fma, a step back where the rounded product sits on the grid).  The results must be those of the
exact rounding, checked against NumPy, against the general emulation (the same values
through a parameter, bounds unknown) and the reference interpreter."""

from __future__ import annotations

import contextlib
import io
import re

import numpy as np
import pytest

import cpuify
from cpuify.cli.main import main as cli_main
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
    mov.f32 %f13, 0fC37C0000;               // -252
    mov.f32 %f14, 0f4B4000FF;               // 12583167
    fma.rp.f32 %f15, %f2, %f13, %f14;       // a product <= 0 rounded up: a ceil in f32
    cvta.to.global.u64 %rd6, %rd2;
    mul.wide.u32 %rd7, %r1, 24;
    add.s64 %rd6, %rd6, %rd7;
    st.global.f32 [%rd6], %f5;
    st.global.f32 [%rd6+4], %f6;
    st.global.f32 [%rd6+8], %f7;
    st.global.f32 [%rd6+12], %f8;
    st.global.f32 [%rd6+16], %f9;
    st.global.f32 [%rd6+20], %f15;
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
    return np.stack([down, up, down, down, half, 12583167.0 - np.floor(p)], 1).astype(np.float32)


@pytest.mark.parametrize("n", [256 * 8])
def test_quantized_directed_fma(n: int) -> None:
    x = _inputs(n)
    ref = _expected(x)
    f = cpuify.RawModule(ptx=PTX).get_function("grid_fma")
    for _ in range(2):          # generic code, then the specialized block shape
        out = np.zeros((n, 6), np.float32)
        f((n // 256,), (256,), (x, out, np.float32(252.0), np.float32(12582913.0)))
        np.testing.assert_array_equal(out, ref)
    small = np.zeros((64, 6), np.float32)
    interpret_kernel(PTX, "grid_fma", (1,), (64,), (x[:64], small, np.float32(252.0),
                                                      np.float32(12582913.0)))
    np.testing.assert_array_equal(small, ref[:64])


EDGE_PTX = r"""
.version 8.0
.target sm_75
.address_size 64
.visible .entry edge_fma(.param .u64 out_p) {
    .reg .f32 %f<16>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [out_p];
    cvta.to.global.u64 %rd2, %rd1;
    mov.f32 %f1, 0f00800000;                // 2^-126
    mov.f32 %f2, 0fCF000001;                // -(2^31 + 256)
    mov.f32 %f3, 0f4B800000;                // 2^24
    mov.f32 %f4, 0f4F000001;                // 2^31 + 256
    mov.f32 %f5, 0f4B000000;                // 2^23
    fma.rm.f32 %f6, %f1, %f2, %f3;          // 2^24 - tiny: one binade below the addend's
    fma.rp.f32 %f7, %f1, %f2, %f3;
    fma.rz.f32 %f8, %f1, %f2, %f3;
    fma.rm.f32 %f9, %f1, %f4, %f5;          // 2^23 + tiny
    fma.rp.f32 %f10, %f1, %f4, %f5;
    sqrt.rp.f32 %f11, %f6;                  // the fuzzer's shape: sqrt(16777215) rounded up
    st.global.f32 [%rd2], %f6;
    st.global.f32 [%rd2+4], %f7;
    st.global.f32 [%rd2+8], %f8;
    st.global.f32 [%rd2+12], %f9;
    st.global.f32 [%rd2+16], %f10;
    st.global.f32 [%rd2+20], %f11;
    ret;
}
"""


def test_quantized_fma_just_below_a_power_of_two() -> None:
    """The fuzzer's fz_2806_1018: fma.rm(2^-126, -(2^31 + 256), 2^24) is 2^24 - 2^-95 -
    2^-118, which rounds down to 2^24 - 1.  Its bounds were summed in f64, where that is
    2^24: the binade (ulp 2) was one too high and the floor gave 2^24 - 2.  Checked against
    the exact roundings, worked by hand, and the reference interpreter."""
    expected = np.array([2.0 ** 24 - 1, 2.0 ** 24, 2.0 ** 24 - 1, 2.0 ** 23, 2.0 ** 23 + 1,
                         4096.0], np.float32)      # sqrt(2^24 - 1) is just below 4096
    out = np.zeros(6, np.float32)
    cpuify.RawModule(ptx=EDGE_PTX).get_function("edge_fma")((1,), (1,), (out,))
    np.testing.assert_array_equal(out, expected)
    ref = np.zeros(6, np.float32)
    interpret_kernel(EDGE_PTX, "edge_fma", (1,), (1,), (ref,))
    np.testing.assert_array_equal(ref, expected)


EXPF_PTX = PTX.replace(".entry grid_fma", ".entry expf_grid").split("    fma.rp.f32 %f6")[0] + """
    cvta.to.global.u64 %rd6, %rd2;
    mul.wide.u32 %rd7, %r1, 4;
    add.s64 %rd6, %rd6, %rd7;
    st.global.f32 [%rd6], %f5;
    ret;
}
"""


def test_quantized_fma_stays_in_f32(tmp_path) -> None:
    """NVRTC's expf rounding (a product >= 0 rounded down) is lowered without f64: vectors
    of 16 floats, not two halves converted to double and back (row softmax's expf loop)."""
    path = tmp_path / "expf_grid.ptx"
    path.write_text(EXPF_PTX)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli_main(["llvm", str(path), "--kernel", "expf_grid", "--block", "256"]) in (0, None)
    text = buf.getvalue()
    assert re.search(r"@llvm\.floor\.(v\d+)?f32", text)
    assert "double" not in text and "fpext" not in text
    x = _inputs(256 * 4)
    out = np.zeros(x.size, np.float32)
    cpuify.RawModule(ptx=EXPF_PTX).get_function("expf_grid")((4,), (256,), (x, out, np.float32(0),
                                                                             np.float32(0)))
    np.testing.assert_array_equal(out, _expected(x)[:, 0])
