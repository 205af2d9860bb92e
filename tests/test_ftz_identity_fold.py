"""`.ftz` ops LLVM folds to a move (issue #17): `mul.ftz.f32 y, x, 1.0`, `add.ftz.f32 y, x,
-0.0`, `fma.ftz` with identity operands...  With the CPU's DAZ/FTZ doing the flushing
(codegen/denormals.py) LLVM folded them to `x`, no instruction ran, and a subnormal `x`
loaded from memory was stored as it was where the GPU stores a zero of its sign.

Checked end to end, in the hardware-flush mode and with an f64 op forcing flushes in code,
on subnormals of both signs, zeros, normals, infinities and NaN, against a NumPy model of
the GPU's flushing (flush inputs and result to signed zeros) and the reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.codegen.denormals import hardware_flush
from cpuify.compiler import lift_optimized
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp import InterpModule

TINY = np.float32(1.1754943508222875e-38)
X = np.array([1e-40, -1e-40, 3e-39, -1.1e-38, 1e-45, -1e-45, 0.0, -0.0, 1.5, -2.5,
              np.inf, -np.inf, np.nan, 1.2e-38, -3.4e38, 1e-38], np.float32)


def _flush(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, np.float32).copy()
    small = np.abs(v) < TINY
    v[small] = np.copysign(np.float32(0), v[small])
    return v


def _same(got: np.ndarray, want: np.ndarray, what: str, sign: bool = True) -> None:
    np.testing.assert_array_equal(got, want, err_msg=what)
    if sign:
        keep = ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(got[keep]), np.signbit(want[keep]),
                                      err_msg=f"{what}: sign")


def _mode(ptx: str, name: str) -> bool:
    module = parse_ptx(ptx)
    entry = next(e for e in module.entries if e.name == name)
    return hardware_flush(lift_optimized(module, entry).op)


def _interpreted(ptx: str, name: str, args: list) -> None:  # type: ignore[type-arg]
    interp = InterpModule(ptx)
    interp.launch(name, (1,), (X.size,), args)


# -- hand-written PTX: the identities nvcc and clang emit, and ones built from moves ---------

PTX = r'''
.version 7.0
.target sm_70
.address_size 64

.visible .entry identities(.param .u64 px, .param .u64 po, .param .u64 pd)
{
    .reg .pred %p<2>;
    .reg .f32 %f<32>;
    .reg .f64 %fd<4>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<12>;

    ld.param.u64 %rd1, [px];
    ld.param.u64 %rd2, [po];
    ld.param.u64 %rd9, [pd];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
    mul.wide.u32 %rd5, %r1, 64;
    add.s64 %rd6, %rd2, %rd5;
    //F64
    mul.ftz.f32 %f2, %f1, 0f3F800000;
    st.global.f32 [%rd6], %f2;
    mul.ftz.f32 %f3, 0fBF800000, %f1;
    st.global.f32 [%rd6+4], %f3;
    add.ftz.f32 %f4, %f1, 0f80000000;
    st.global.f32 [%rd6+8], %f4;
    add.ftz.f32 %f5, %f1, 0f00000000;
    st.global.f32 [%rd6+12], %f5;
    sub.ftz.f32 %f6, %f1, 0f00000000;
    st.global.f32 [%rd6+16], %f6;
    sub.ftz.f32 %f7, 0f80000000, %f1;
    st.global.f32 [%rd6+20], %f7;
    mov.f32 %f8, 0f3F800000;
    mov.f32 %f9, 0f80000000;
    fma.rn.ftz.f32 %f10, %f1, %f8, %f9;
    st.global.f32 [%rd6+24], %f10;
    mad.rn.ftz.f32 %f11, %f8, %f1, %f9;
    st.global.f32 [%rd6+28], %f11;
    mov.f32 %f12, %f2;
    neg.ftz.f32 %f13, %f12;
    st.global.f32 [%rd6+32], %f13;
    abs.ftz.f32 %f14, %f4;
    st.global.f32 [%rd6+36], %f14;
    setp.gt.u32 %p1, %r1, 1000;
    selp.f32 %f15, %f2, %f6, %p1;
    st.global.f32 [%rd6+40], %f15;
    max.ftz.f32 %f16, %f2, 0fF149F2CA;
    st.global.f32 [%rd6+44], %f16;
    cvt.ftz.f32.f32 %f17, %f10;
    st.global.f32 [%rd6+48], %f17;
    mul.ftz.sat.f32 %f18, %f1, 0f3F800000;
    st.global.f32 [%rd6+52], %f18;
    add.ftz.f32 %f19, %f8, %f9;
    mul.ftz.f32 %f20, %f1, %f19;
    st.global.f32 [%rd6+56], %f20;
    fma.rn.ftz.f32 %f21, %f9, %f8, %f1;
    st.global.f32 [%rd6+60], %f21;
    ret;
}
'''
# f64 arithmetic keeps subnormals on the GPU: the kernel flushes in code
F64 = '''ld.global.f64 %fd1, [%rd9];
    add.f64 %fd2, %fd1, %fd1;
    st.global.f64 [%rd9], %fd2;'''
COLUMNS = 16


def _ptx_model(x: np.ndarray) -> list[np.ndarray]:
    xf = _flush(x)
    one, nzero = np.float32(1), np.float32(-0.0)
    times_one = _flush(xf * one)
    plus_nzero = _flush(xf + nzero)
    minus_zero = _flush(xf - np.float32(0))
    fused = _flush(xf * one + nzero)
    with np.errstate(invalid="ignore"):
        return [times_one, _flush(-xf), plus_nzero, _flush(xf + np.float32(0)), minus_zero,
                _flush(nzero - xf), fused, fused, -times_one, np.abs(plus_nzero), minus_zero,
                np.fmax(times_one, np.float32(-1e30)), fused,
                np.nan_to_num(np.clip(times_one, 0, 1), nan=0.0).astype(np.float32),
                times_one, _flush(nzero * one + xf)]


@pytest.mark.parametrize("in_code", [False, True], ids=["hardware-flush", "flush-in-code"])
def test_ptx_identities_flush(in_code: bool) -> None:
    ptx = PTX.replace("//F64", F64 if in_code else "")
    assert _mode(ptx, "identities") is not in_code
    want = _ptx_model(X)
    results = {}
    for how in ("compiled", "interpreter"):
        out = np.full(X.size * COLUMNS, 7, np.float32)
        d = np.array([5e-324], np.float64)
        args = [X, out, d]
        if how == "compiled":
            cpuify.RawModule(ptx=ptx).get_function("identities")((1,), (X.size,), tuple(args))
        else:
            _interpreted(ptx, "identities", args)
        got = out.reshape(X.size, COLUMNS)
        for c in range(COLUMNS):
            # mul.sat of -0: either zero is in [0, 1] (signs compared with the interpreter)
            _same(got[:, c], want[c], f"column {c} ({how}, in_code={in_code})", sign=c != 13)
        if in_code:
            assert 0 < d[0] < 1e-300        # f64 subnormals kept (every thread doubles d[0])
        results[how] = out
    np.testing.assert_array_equal(results["compiled"].view(np.uint32)[~np.isnan(results["compiled"])],
                                  results["interpreter"].view(np.uint32)[~np.isnan(results["compiled"])])


# -- CUDA through the Python API (-ftz=true, as CuPy) ------------------------------------

CUDA = r'''
template <typename T> __device__ __forceinline__ T scaled(T v, T s) { return v * s; }
extern "C" __global__ void identities(const float *x, float *out, double *d, int n, int f64) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    out[0 * n + i] = __fmul_rn(v, 1.0f);
    out[1 * n + i] = v + 0.0f;
    out[2 * n + i] = __fsub_rn(v, 0.0f);
    out[3 * n + i] = fmaf(v, 1.0f, -0.0f);
    out[4 * n + i] = __fadd_rn(v, -0.0f);
    out[5 * n + i] = fabsf(v + 0.0f);
    out[6 * n + i] = __fmaf_rn(1.0f, v, -0.0f);
    out[7 * n + i] = -__fmul_rn(v, 1.0f);
    out[8 * n + i] = scaled(v, 1.0f);   // folded by the front end: the PTX stores v
    if (f64) d[i] = d[i] * 0.5;
}'''


@pytest.mark.parametrize("in_code", [False, True], ids=["hardware-flush", "flush-in-code"])
def test_cuda_identities_flush(in_code: bool) -> None:
    if in_code:
        src = CUDA
    else:
        src = CUDA.replace("if (f64) d[i] = d[i] * 0.5;", "")
    ptx = compile_to_ptx(src, filename="k.cu", options=("-ftz=true",)).ptx
    assert _mode(ptx, "identities") is not in_code
    xf = _flush(X)
    with np.errstate(invalid="ignore"):
        want = [xf, _flush(xf + np.float32(0)), xf, xf, xf, np.abs(_flush(xf + np.float32(0))),
                xf, -xf, X]
    n = X.size
    for how in ("compiled", "interpreter"):
        out = np.full(n * len(want), 7, np.float32)
        d = np.full(n, 1e-310)
        args = [X, out, d, np.int32(n), np.int32(1)]
        if how == "compiled":
            cpuify.RawKernel(src, "identities")((1,), (n,), tuple(args))
        else:
            _interpreted(ptx, "identities", args)
        for c, w in enumerate(want):
            _same(out[c * n:(c + 1) * n], w, f"column {c} ({how}, in_code={in_code})")
        if in_code:
            np.testing.assert_array_equal(d, np.full(n, 1e-310) * 0.5)


def test_no_flush_added_where_the_operand_cannot_be_subnormal() -> None:
    """`(v * 2) * 1` folds to `v * 2`, which the CPU's FTZ flushes: no flush (a copysign and a select) in code."""
    from cpuify.codegen import jit
    from cpuify.codegen.llvm_gen import ModuleCodegen
    from cpuify.compiler import lift_and_optimize
    from cpuify.transforms.pass_manager import PipelineOptions

    def llvm(body: str) -> str:
        src = ('extern "C" __global__ void k(const float *x, float *y) {\n'
               f'    int i = threadIdx.x; float v = x[i]; y[i] = {body};\n}}')
        module = parse_ptx(compile_to_ptx(src, filename="k.cu", options=("-ftz=true",)).ptx)
        entry = module.entries[0]
        lifted, _ = lift_and_optimize(module, entry, PipelineOptions(), (32, 1, 1))
        gen = ModuleCodegen(module, *jit.triple_and_layout())
        gen.add_kernel(lifted, (32, 1, 1))
        return str(jit.optimize(gen.llvm_text()))

    assert "copysign" in llvm("__fmul_rn(v, 1.0f)")        # the guard can fail
    assert "copysign" not in llvm("__fmul_rn(__fmul_rn(v, 2.0f), 1.0f)")
    assert "copysign" not in llvm("__fmul_rn(v, 2.0f)")
