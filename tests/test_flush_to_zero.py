"""`.ftz` (flush f32 subnormals to signed zeros): CuPy compiles every source with -ftz=true,
so cpuify's CuPy-style API does too; kernels whose every floating-point operation allows it
run with the CPU's DAZ/FTZ switches set (codegen/denormals.py), the others flush in code.
References: what an H100 returned through CuPy for the same expressions (sqrtf and fmaf of
a subnormal gave 0: tests/gpu_truth/README.md), and IEEE results computed by NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.codegen.denormals import hardware_flush
from cpuify.compiler import lift_optimized
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx

F32_ONLY = r'''
extern "C" __global__ void f32_only(const float *x, float *root, float *scaled, float *sum) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    root[i] = sqrtf(x[i]);
    scaled[i] = fmaf(x[i], 2147483648.0f, 0.0f);
    sum[i] = x[i] + x[i];
}'''
WITH_F64 = r'''
extern "C" __global__ void with_f64(const float *x, float *root, double *d, double *dd) {
    int i = threadIdx.x;
    root[i] = sqrtf(x[i]);
    dd[i] = d[i] * 0.5;     // f64 keeps subnormals on the GPU: no hardware flush here
}'''

SUB = np.array([1e-40, -1e-40, 4.0, 1e-38, 1.2e-38, -3e-39, 0.0, -0.0], np.float32)


def _flushed(v: np.ndarray) -> np.ndarray:
    out = v.copy()
    tiny = np.abs(out) < np.float32(1.1754943508222875e-38)
    out[tiny] = np.copysign(np.float32(0), out[tiny])
    return out


def _decision(src: str, name: str, options: tuple[str, ...]) -> bool:
    module = parse_ptx(compile_to_ptx(src, options=options, filename="k.cu").ptx)
    entry = next(e for e in module.entries if e.name == name)
    return hardware_flush(lift_optimized(module, entry).op)


def test_hardware_flush_only_where_exact() -> None:
    assert _decision(F32_ONLY, "f32_only", ("-ftz=true",))
    assert not _decision(F32_ONLY, "f32_only", ())           # no .ftz: keep subnormals
    assert not _decision(WITH_F64, "with_f64", ("-ftz=true",))


def test_raw_kernel_flushes_like_cupy() -> None:
    n = SUB.size
    root, scaled, total = (np.full(n, 7, np.float32) for _ in range(3))
    cpuify.RawKernel(F32_ONLY, "f32_only")((1,), (n,), (SUB, root, scaled, total))
    x = _flushed(SUB)
    np.testing.assert_array_equal(root, _flushed(np.sqrt(x)))
    np.testing.assert_array_equal(np.signbit(root), np.signbit(_flushed(np.sqrt(x))))
    np.testing.assert_array_equal(scaled, _flushed(x * np.float32(2147483648.0)))
    np.testing.assert_array_equal(total, _flushed(x + x))
    # the H100 through CuPy: sqrtf(1e-40f) = 0, fmaf(1e-40f, 2^31, 0) = 0
    assert root[0] == 0 and scaled[0] == 0


def test_flush_in_code_next_to_f64() -> None:
    n = SUB.size
    root = np.zeros(n, np.float32)
    d = np.array([5e-324, 1e-310, 3.0, -1e-315, 0, 0, 0, 0])
    dd = np.zeros(n)
    cpuify.RawKernel(WITH_F64, "with_f64")((1,), (n,), (SUB, root, d, dd))
    np.testing.assert_array_equal(root, _flushed(np.sqrt(_flushed(SUB))))
    np.testing.assert_array_equal(dd, d * 0.5)          # f64 subnormals kept


def test_whole_module_without_ftz_keeps_subnormals() -> None:
    """A module compiled without -ftz (PTX given directly, as CuPy loads PTX) keeps them."""
    ptx = compile_to_ptx(F32_ONLY, filename="k.cu").ptx
    n = SUB.size
    root, scaled, total = (np.zeros(n, np.float32) for _ in range(3))
    cpuify.RawModule(ptx=ptx).get_function("f32_only")((1,), (n,), (SUB, root, scaled, total))
    np.testing.assert_array_equal(total, SUB + SUB)
    assert scaled[0] == np.float32(1e-40) * np.float32(2147483648.0)


@pytest.mark.parametrize("threads", [1, 2])
def test_cpu_mode_restored_after_flushing_kernels_and_faults(threads: int) -> None:
    """The switches are the kernel's alone: after a flushing kernel, and after one that
    faults midway (the runtime jumps out of it), kernels and host code keep subnormals."""
    cpuify.set_num_threads(threads)
    try:
        faulting = r'''
        extern "C" __global__ void fault(const float *x, float *y, unsigned long long bad) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            y[i] = x[i] * 0.5f;
            if (blockIdx.x == 1 && threadIdx.x == 3) *(float *)bad = 1.0f;
        }'''
        x = np.full(256, 1e-38, np.float32)
        y = np.zeros(256, np.float32)
        with pytest.raises(cpuify.errors.IllegalAddressError):
            cpuify.RawKernel(faulting, "fault")((4,), (64,), (x, y, np.uint64(16)))
        ptx = compile_to_ptx(F32_ONLY, filename="k.cu").ptx
        plain = cpuify.RawModule(ptx=ptx).get_function("f32_only")
        for _ in range(4):
            total = np.zeros(512, np.float32)
            xs = np.full(512, 1e-40, np.float32)
            plain((8,), (64,), (xs, np.zeros(512, np.float32), np.zeros(512, np.float32), total))
            np.testing.assert_array_equal(total, xs + xs)
        assert np.float32(1e-40) * np.float32(2) != 0
    finally:
        cpuify.set_num_threads(0)


BIT_LEVEL = r'''
extern "C" __global__ void bit_level(const float *x, float *o) {
    int i = threadIdx.x;
    float v = x[i];
    o[i * 8 + 0] = fabsf(v);
    o[i * 8 + 1] = -v;
    o[i * 8 + 2] = fminf(v, 1.0f);
    o[i * 8 + 3] = fmaxf(v, -1.0f);
    o[i * 8 + 4] = __log2f(v);
    o[i * 8 + 5] = exp2f(v);
    o[i * 8 + 6] = __fadd_rz(v, 1e-45f);
    o[i * 8 + 7] = v * 1.0f;
}'''


def test_bit_level_ops_flush_in_hardware_mode() -> None:
    """abs, neg, min/max, the .approx functions and directed roundings work on bits (MXCSR's
    DAZ does not see them): under -ftz they flush in code even when the kernel runs with the
    CPU's switches set (found by `tools/fuzz.py --ftz`: fabsf of a subnormal stayed subnormal).
    Reference: the interpreter's own .ftz semantics."""
    from cpuify.interp import InterpModule
    assert _decision(BIT_LEVEL, "bit_level", ("-ftz=true",))
    x = np.array([1e-40, -1e-40, 3e-39, -5e-39, 0.0, -0.0, 2.0, 1e-45], np.float32)
    got = np.zeros(x.size * 8, np.float32)
    cpuify.RawKernel(BIT_LEVEL, "bit_level")((1,), (x.size,), (x, got))
    want = np.zeros(x.size * 8, np.float32)
    ptx = compile_to_ptx(BIT_LEVEL, options=("-ftz=true",), filename="k.cu").ptx
    InterpModule(ptx).launch("bit_level", (1, 1, 1), (x.size, 1, 1), [x.copy(), want])
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


# Flushes the code generator leaves out where the value is never subnormal
# (codegen/denormals.known_flushed): an operand that is the result of another .ftz op.  And
# where it must not: `x * 1.0` and `x - 0.0`, which LLVM folds to `x` (the CPU never
# flushes them), an input loaded from memory.
KNOWN_FLUSHED_PTX = r'''
.version 8.0
.target sm_75
.address_size 64
.visible .entry chains(.param .u64 x_p, .param .u64 out_p) {
    .reg .b32 %r<4>;
    .reg .f32 %f<30>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [x_p];
    ld.param.u64 %rd2, [out_p];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 8;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
    ld.global.f32 %f2, [%rd4+4];
    mul.wide.u32 %rd5, %r1, 40;
    add.s64 %rd6, %rd2, %rd5;
    mul.ftz.f32 %f3, %f1, 0f3F800000;
    neg.ftz.f32 %f4, %f3;
    st.global.f32 [%rd6], %f4;
    add.ftz.f32 %f5, %f1, %f2;
    neg.ftz.f32 %f6, %f5;
    st.global.f32 [%rd6+4], %f6;
    ex2.approx.ftz.f32 %f7, %f1;
    abs.ftz.f32 %f8, %f7;
    st.global.f32 [%rd6+8], %f8;
    cvt.ftz.sat.f32.f32 %f9, %f5;
    st.global.f32 [%rd6+12], %f9;
    sub.ftz.f32 %f10, %f1, 0f00000000;
    neg.ftz.f32 %f11, %f10;
    st.global.f32 [%rd6+16], %f11;
    mul.ftz.f32 %f12, %f1, %f2;
    cvt.rni.ftz.f32.f32 %f13, %f12;
    neg.ftz.f32 %f14, %f12;
    add.ftz.f32 %f15, %f13, %f14;
    st.global.f32 [%rd6+20], %f14;
    div.rn.ftz.f32 %f16, %f1, %f2;
    neg.ftz.f32 %f17, %f16;
    st.global.f32 [%rd6+24], %f17;
    neg.ftz.f32 %f18, %f1;
    st.global.f32 [%rd6+28], %f18;
    abs.ftz.f32 %f19, %f1;
    sqrt.rn.ftz.f32 %f20, %f19;
    st.global.f32 [%rd6+32], %f20;
    abs.ftz.f32 %f21, %f2;
    rsqrt.approx.ftz.f32 %f22, %f21;
    st.global.f32 [%rd6+36], %f22;
    ret;
}
'''
PAIRS = np.array([[1e-39, 2e-39], [-1e-39, 5e-40], [-140.0, 1.0], [1e-20, 1e-20],
                  [3.0, -2.0], [1.5e-38, -1.2e-38], [0.5, 0.25], [-0.0, 1e-45]], np.float32)


def _chains_expected(p: np.ndarray) -> np.ndarray:
    a, b = _flushed(p[:, 0]), _flushed(p[:, 1])
    with np.errstate(divide="ignore", invalid="ignore"):
        cols = [
            -a,                                             # neg(mul(a, 1.0))
            -_flushed(a + b),                               # neg(add(a, b))
            np.abs(_flushed(np.exp2(a.astype(np.float64)).astype(np.float32))),
            _flushed(np.clip(_flushed(a + b), 0, 1)),      # cvt.sat(add)
            -a,                                             # neg(sub(a, 0.0))
            -_flushed(a * b),                               # neg(mul(a, b))
            -_flushed(a / b),                               # neg(div(a, b))
            -a,                                             # neg(a)
            np.sqrt(np.abs(a)),                             # sqrt(abs(a)): never subnormal
            (1 / np.sqrt(np.abs(b).astype(np.float64))).astype(np.float32),  # rsqrt(abs(b))
        ]
    return np.stack(cols, 1).astype(np.float32)


def _check_chains(out: np.ndarray, how: str) -> None:
    want = _chains_expected(PAIRS)
    for k in range(want.shape[1]):
        if k in (2, 9):     # ex2/rsqrt.approx: within their bounds; zeros and signs exact
            np.testing.assert_allclose(out[:, k], want[:, k], rtol=2.0 ** -21, err_msg=how)
        else:
            np.testing.assert_array_equal(out[:, k], want[:, k], err_msg=f"column {k} ({how})")
        np.testing.assert_array_equal(np.signbit(out[:, k]), np.signbit(want[:, k]),
                                      err_msg=f"column {k} sign ({how})")


def test_flushes_left_out_only_where_the_value_is_never_subnormal() -> None:
    from cpuify.interp import interpret_kernel
    n = PAIRS.shape[0]
    f = cpuify.RawModule(ptx=KNOWN_FLUSHED_PTX).get_function("chains")
    for _ in range(2):              # generic code, then the code specialized for the block
        out = np.full((n, 10), 7, np.float32)
        f((1,), (n,), (PAIRS.copy(), out))
        _check_chains(out, "compiled")
    out = np.full((n, 10), 7, np.float32)
    interpret_kernel(KNOWN_FLUSHED_PTX, "chains", (1,), (n,), (PAIRS.copy(), out))
    _check_chains(out, "interpreter")
