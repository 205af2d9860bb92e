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
