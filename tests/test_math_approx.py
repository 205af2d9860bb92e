"""rsqrtf (rsqrt.approx.f32): on an AVX-512 CPU the compiled code refines the CPU's reciprocal
square root estimate (approx_math.rsqrt_f32) instead of dividing by a square root.  CUDA
documents rsqrtf as within 2 ulp of the correctly rounded result; these tests hold the
compiled code to that against NumPy's float64 1/sqrt rounded to f32, on a sample of every
binade (subnormals included) and on the special values, in generic and specialized code and
in block shapes whose thread loops run 16-wide, narrower and scalar (after LLVM's
optimization each is vrsqrt14 and one Newton-Raphson step, codegen.rsqrt_widths; before it,
the sequence that is right for the 12-bit estimates too).  The full sweep over every f32 is in
test_rsqrt_every_float (slow): 1 ulp at most on the machine it was written on."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.codegen import jit
from cpuify.codegen.llvm_gen import ModuleCodegen
from cpuify.codegen.rsqrt_widths import lean_rsqrt_estimates
from cpuify.compiler import lift_optimized
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx

SRC = r'''
extern "C" __global__ void rsq(const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = rsqrtf(x[i]);
}
// n-body's use: the inverse distance cubed, summed over a tile in shared memory
extern "C" __global__ void inv_cube_sum(const float *d2, float *out, int n) {
    __shared__ float t[128];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.0f;
    for (int tile = 0; tile < n; tile += blockDim.x) {
        int j = tile + threadIdx.x;
        t[threadIdx.x] = j < n ? d2[j] : 1.0f;
        __syncthreads();
        for (int k = 0; k < blockDim.x; k++) {
            float r = rsqrtf(t[k] + (i < n ? d2[i] : 1.0f));
            acc += r * r * r;
        }
        __syncthreads();
    }
    if (i < n) out[i] = acc;
}
'''


@pytest.fixture(scope="module")
def ptx():
    return compile_to_ptx(SRC).ptx


@pytest.fixture(scope="module")
def mod(ptx):
    return cpuify.RawModule(ptx=ptx)


def _rsqrt(mod, x, block):
    x = np.ascontiguousarray(x, np.float32)
    f = mod.get_function("rsq")
    results = []
    for _ in range(2):          # generic code, then the code specialized for the block
        y = np.full_like(x, np.nan)
        f(((x.size + block - 1) // block,), (block,), (x, y, np.int32(x.size)))
        results.append(y)
    return results


def _ulps_from_correctly_rounded(x, y):
    with np.errstate(divide="ignore"):
        ref = (1.0 / np.sqrt(x.astype(np.float64))).astype(np.float32)
    finite = np.isfinite(ref) & (ref != 0)
    assert (y[~finite] == ref[~finite]).all(), (x[~finite], y[~finite])
    return np.abs(y[finite].astype(np.float64) - ref[finite]) / np.spacing(ref[finite])


def _sample():
    # every 4099th non-negative f32 from 0 to +inf, the first subnormals and the binade edges
    bits = np.concatenate([np.arange(0, 0x7F800001, 4099), np.arange(0, 4096),
                           np.arange(0x00800000 - 64, 0x00800000 + 64),
                           np.arange(0x7F7FFF00, 0x7F800001)]).astype(np.uint32)
    return bits.view(np.float32)


@pytest.mark.parametrize("block", [256, 100, 7, 1])
def test_rsqrt_within_cuda_bound(mod, block):
    x = _sample()
    for y in _rsqrt(mod, x, block):
        assert _ulps_from_correctly_rounded(x, y).max() <= 2


def test_rsqrt_special_values(mod):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, -1e-45, 1.0, 4.0, 0.25, 1e-45,
                  3.4028235e38], np.float32)
    for y in _rsqrt(mod, x, 32):
        assert np.isposinf(y[0]) and np.isneginf(y[1])
        assert y[2] == 0.0 and not np.signbit(y[2])
        assert np.isnan(y[3:7]).all()
        assert list(y[7:10]) == [1.0, 0.5, 2.0]     # exact where the result is a power of 2
        assert _ulps_from_correctly_rounded(x[10:], y[10:]).max() <= 2


def test_rsqrt_ftz_flushes_subnormal_inputs():
    f = cpuify.RawModule(code=SRC, options=("--use_fast_math",)).get_function("rsq")
    x = np.array([1e-40, -1e-40, 2.0], np.float32)
    y = np.zeros_like(x)
    f((1,), (32,), (x, y, np.int32(3)))
    assert np.isposinf(y[0]) and np.isneginf(y[1])
    assert abs(y[2] - np.float32(1 / np.sqrt(2))) <= np.spacing(np.float32(0.7))


@pytest.mark.parametrize("block", [128, 32])
def test_inverse_distance_cubes_match_numpy(mod, block):
    n = 1000
    d2 = np.random.default_rng(block).uniform(0.01, 10.0, n).astype(np.float32)
    out = np.zeros(n, np.float32)
    f = mod.get_function("inv_cube_sum")
    ref = ((d2[:, None].astype(np.float64) + d2[None, :]) ** -1.5).sum(axis=1)
    pad = (-n) % block                      # the padding threads' terms: d2[i] + 1
    ref += pad * (d2.astype(np.float64) + 1.0) ** -1.5
    for _ in range(2):
        f(((n + block - 1) // block,), (block,), (d2, out, np.int32(n)))
        np.testing.assert_allclose(out, ref, rtol=2e-5)


def test_estimate_is_used_with_avx512(ptx):
    module = parse_ptx(ptx)
    gen = ModuleCodegen(module)
    gen.add_kernel(lift_optimized(module, module.functions["rsq"], (256, 1, 1)), (256, 1, 1))
    text = gen.llvm_text()
    if not jit.has_avx512():
        assert "reciprocal-estimates" not in text and "afn" not in text
        pytest.skip("no AVX-512: rsqrtf is the exact quotient")
    assert '"reciprocal-estimates"="sqrtf:0,vec-sqrtf:0"' in text
    optimized = jit.optimize(text)
    asm = jit.emit_assembly(optimized)
    assert "vrsqrt14ps" in asm and "vsqrtps" not in asm and "vdivps" not in asm
    # the 16-wide thread loop's estimate is refined by the lean step: no subnormal scaling
    assert "@llvm.x86.avx512.rsqrt14.ps.512(" in str(optimized)
    assert "@llvm.sqrt." not in "".join(line for line in str(optimized).splitlines()
                                        if "call" in line)


# approx_math.rsqrt_f32's sequence as LLVM's O3 leaves it in a 16-wide loop (LLVM 22)
REFINED_V16 = """define <16 x float> @f(<16 x float> %a) {
  %t = fcmp olt <16 x float> %a, splat (float 0x3810000000000000)
  %m = fmul <16 x float> %a, splat (float 0x4170000000000000)
  %x = select <16 x i1> %t, <16 x float> %m, <16 x float> %a
  %s = tail call arcp contract afn <16 x float> @llvm.sqrt.v16f32(<16 x float> %x)
  %y = fdiv arcp contract afn <16 x float> splat (float 1.000000e+00), %s
  %yn = fneg <16 x float> %y
  %p = fmul <16 x float> %x, %yn
  %r = tail call <16 x float> @llvm.fma.v16f32(<16 x float> %p, <16 x float> %y, <16 x float> splat (float 1.000000e+00))
  %q = tail call <16 x float> @llvm.fma.v16f32(<16 x float> %r, <16 x float> splat (float 3.750000e-01), <16 x float> splat (float 5.000000e-01))
  %rq = fmul <16 x float> %r, %q
  %z = tail call <16 x float> @llvm.fma.v16f32(<16 x float> %y, <16 x float> %rq, <16 x float> %y)
  %u = fcmp uno <16 x float> %r, zeroinitializer
  %o = select <16 x i1> %u, <16 x float> %y, <16 x float> %z
  %d = fmul <16 x float> %o, splat (float 4.096000e+03)
  %res = select <16 x i1> %t, <16 x float> %d, <16 x float> %o
  ret <16 x float> %res
}
declare <16 x float> @llvm.sqrt.v16f32(<16 x float>)
declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, <16 x float>)
"""


def test_lean_rsqrt_rewrites_the_refined_estimate():
    lean = lean_rsqrt_estimates(REFINED_V16, vector_lengths=False)
    assert lean is not None
    body = lean.split("ret ")[0]
    # the result is now vrsqrt14 of the unscaled input and one Newton-Raphson step
    assert "%cpuify.rsqrt1.e = call <16 x float> @llvm.x86.avx512.rsqrt14.ps.512(<16 x float> %a," in body
    assert "%res = select <16 x i1> %cpuify.rsqrt1.u, <16 x float> %cpuify.rsqrt1.e, " \
           "<16 x float> %cpuify.rsqrt1.f" in body
    assert "declare <16 x float> @llvm.x86.avx512.rsqrt14.ps.512(<16 x float>, <16 x float>, i16)" in lean
    jit._init()
    import llvmlite.binding as llvm
    llvm.parse_assembly(lean).verify()
    # 8 lanes need AVX-512VL; a sequence not of that shape (an exact square root, another
    # scaling constant) is left alone
    assert lean_rsqrt_estimates(REFINED_V16.replace("<16 x", "<8 x").replace("v16f32", "v8f32"),
                                vector_lengths=False) is None
    assert lean_rsqrt_estimates(REFINED_V16.replace("arcp contract afn <16 x float> @llvm.sqrt",
                                                    "<16 x float> @llvm.sqrt"),
                                vector_lengths=True) is None
    assert lean_rsqrt_estimates(REFINED_V16.replace("4.096000e+03", "2.048000e+03"),
                                vector_lengths=True) is None


@pytest.mark.slow
def test_rsqrt_every_float(mod):
    worst = 0.0
    for lo in range(0, 0x7F800001, 1 << 25):
        x = np.arange(lo, min(lo + (1 << 25), 0x7F800001), dtype=np.uint32).view(np.float32)
        y = _rsqrt(mod, x, 256)[1]
        worst = max(worst, float(_ulps_from_correctly_rounded(x, y).max()))
    assert worst <= 1
