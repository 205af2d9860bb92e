"""fma.rn{.sat}.f16 and .bf16 on the PTX instruction table (the table's fma on halves):
compiled code, the reference interpreter and the exact value rounded here (the neighbours
of a Fraction among every f16/bf16 value, tests/test_ptx_table_cvt.py's third computation)
agree bit for bit; a directed rounding of a half fma has no form and is refused."""

from __future__ import annotations

import math

import numpy as np
import pytest

import cpuify
from cpuify.codegen import jit
from cpuify.errors import UnsupportedError
from cpuify.interp import interpret_kernel
from cpuify.ir.ptx_table import TABLE
from test_ptx_table_cvt import _exact, _float_bits, _is_nan, _rounded, _value

RNG = np.random.default_rng(6)


def _kernel(t: str) -> str:
    """out[i][k] = fma{mods_k}.t(a, b, c) of the halves in[i][0..2]."""
    lines = [".version 7.8", ".target sm_80", ".address_size 64", "",
             ".visible .entry hfma(.param .u64 pin, .param .u64 pout, .param .u32 pn)", "{",
             "    .reg .pred %p<2>;", "    .reg .b16 %h<8>;", "    .reg .b32 %i<8>;",
             "    .reg .b64 %a<8>;",
             "    ld.param.u64 %a1, [pin];", "    ld.param.u64 %a2, [pout];",
             "    ld.param.u32 %i1, [pn];", "    mov.u32 %i2, %tid.x;", "    mov.u32 %i3, %ctaid.x;",
             "    mov.u32 %i4, %ntid.x;", "    mad.lo.s32 %i2, %i3, %i4, %i2;",
             "    setp.ge.u32 %p1, %i2, %i1;", "    @%p1 bra DONE;",
             "    cvta.to.global.u64 %a1, %a1;", "    cvta.to.global.u64 %a2, %a2;",
             "    mul.wide.u32 %a3, %i2, 6;", "    add.s64 %a4, %a1, %a3;",
             "    mul.wide.u32 %a5, %i2, 4;", "    add.s64 %a6, %a2, %a5;",
             "    ld.global.b16 %h0, [%a4];", "    ld.global.b16 %h1, [%a4+2];",
             "    ld.global.b16 %h2, [%a4+4];",
             f"    fma.rn.{t} %h3, %h0, %h1, %h2;", "    st.global.b16 [%a6], %h3;",
             f"    fma.rn.sat.{t} %h4, %h0, %h1, %h2;", "    st.global.b16 [%a6+2], %h4;",
             "DONE:", "    ret;", "}", ""]
    return "\n".join(lines)


def _expected(a: int, b: int, c: int, t: str, sat: bool) -> int | None:
    """a * b + c rounded once (None: NaN); IEEE's infinities and signed zeros."""
    x, y, z = (_value(v, t) for v in (a, b, c))
    if x is None or y is None or z is None or (math.isinf(x) or math.isinf(y)) and \
            (x == 0 or y == 0):
        r = None
    elif math.isinf(x) or math.isinf(y) or math.isinf(z):
        p = x * y if not (math.isinf(x) or math.isinf(y)) else math.copysign(math.inf, x * y)
        s = p + z
        r = None if math.isnan(s) else _float_bits(s, t) if math.isinf(s) else _float_bits(z, t)
    else:
        v = _exact(a, t) * _exact(b, t) + _exact(c, t)
        if v == 0:                                      # IEEE's sign of an exact zero sum
            neg_p = (math.copysign(1, x) * math.copysign(1, y)) < 0
            both = (x == 0 or y == 0) and z == 0 and neg_p == (math.copysign(1, z) < 0)
            r = _float_bits(-0.0 if both and neg_p else 0.0, t)
        else:
            r = _rounded(v, t, "rn")
    if sat:
        value = 0.0 if r is None else _value(r, t)
        assert value is not None
        r = _float_bits(0.0 if value <= 0 else min(value, 1.0), t)
    return r


@pytest.mark.parametrize("t,path", [("f16", "cpu"), ("f16", "emulated"), ("bf16", "cpu")])
def test_half_fma_rounded_once_compiled_interpreted_and_exact(t, path, monkeypatch):
    """`path`: "cpu", what this machine runs (the CPU's f16 fma where it has AVX512-FP16);
    "emulated", the f64 product and sum rounded to odd that other CPUs run."""
    if path == "emulated":
        monkeypatch.setattr(jit, "has_avx512fp16", lambda: False)
        monkeypatch.setenv("CPUIFY_NO_CACHE", "1")
    top = 0x7C00 if t == "f16" else 0x7F80
    special = [0, 0x8000, 1, 0x8001, top - 1, top | 0x8000 - 1, top, top | 0x8000,
               top | 0x200 if t == "f16" else top | 0x40, 0x3C00 if t == "f16" else 0x3F80,
               0x3800 if t == "f16" else 0x3F00, 0xBC00 if t == "f16" else 0xBF80]
    rows = [(a, b, c) for a in special for b in special for c in special[:8]]
    n_special = len(rows)
    vals = RNG.integers(0, 1 << 16, (600, 3))
    rows += [tuple(int(v) for v in r) for r in vals]
    # products near ties: a = 1 + k ulp, b = 1 + j ulp, c = -1 (the product's low bits decide)
    one = 0x3C00 if t == "f16" else 0x3F80
    rows += [(one + k, one + j, one | 0x8000) for k in range(1, 40) for j in range(1, 6)]
    # tiny products (subnormal factors) added to values one ulp either side of 1 and 1024:
    # the f64 sum is inexact, the result must still round as the exact one does
    tiny = [1, 3, 0x8001, 0x3FF, 0x83FF] if t == "f16" else [1, 3, 0x8001, 0x7F, 0x807F]
    near = [one - 1, one + 1, one + 2] + ([0x6400 - 1, 0x6401] if t == "f16" else [0x4480 - 1, 0x4481])
    rows += [(x, y, c) for x in tiny for y in tiny for c in near]
    flat = np.array(rows, np.uint16)
    ptx = _kernel(t)
    for interpreted in (False, True):
        out = np.zeros((len(rows), 2), np.uint16)
        args = (flat, out, np.uint32(len(rows)))
        grid, block = ((len(rows) + 127) // 128,), (128,)
        if interpreted:
            interpret_kernel(ptx, "hfma", grid, block, args)
        else:
            cpuify.RawModule(ptx=ptx).get_function("hfma")(grid, block, args)
        for i, (a, b, c) in enumerate(rows):
            for k, sat in enumerate((False, True)):
                want, got = _expected(a, b, c, t, sat), int(out[i, k])
                ok = _is_nan(got, t) if want is None else got == want
                assert ok, (("interpreted" if interpreted else "compiled"), t, sat,
                            hex(a), hex(b), hex(c), hex(got), want and hex(want), n_special)


def test_half_fma_is_spec_driven_and_directed_rounding_is_refused():
    assert not TABLE["fma"].hand_written
    ptx = _kernel("f16").replace("fma.rn.f16", "fma.rz.f16")
    with pytest.raises(UnsupportedError, match="fma"):
        cpuify.RawModule(ptx=ptx).get_function("hfma")
