"""Kernels the differential fuzzer (tools/fuzz.py) found wrong, minimized, each checked against
a NumPy or hand-computed result (and the reference interpreter where it was right).

fz_300_16 (seed 300, kernel 16): a shared-memory rotation `s[(t + 1) % 32]` after a barrier,
stored with a stride (`out[gt * 7 + 5]`), in code specialized for blocks of 32 threads.  The
last thread of each block read the word past the array (0.0) instead of `s[0]`.  The cause is
LLVM's (llvmlite 0.46, LLVM 22.1) loop vectorizer, not cpuify's IR: the raw LLVM IR of the
segment is right (`urem (tx + 1), 32`), and the same miscompile happens on a ten-line LLVM
function (`test_llvm_vectorizer_drops_the_wrap_of_a_masked_index`).  What goes wrong: the
masked index is a narrow recurrence to LLVM's scalar evolution (`(i + 1) & 31` is
`zext(i5 {1,+,1})`); to treat the load as consecutive the vectorizer needs the predicate "this
i5 recurrence does not wrap", and the strided store already needs "the i32 recurrence
{224 * bx + 5,+,7} does not wrap"; LLVM takes the second for implying the first (its start
and step are no smaller) although the narrower type wraps first, so no run-time check is
emitted for the i5 one and the vector loop reads `s[1..32]` as one range.  (A store whose
start is not known to be >= the load's, `out[gt * 7]`, makes the check appear and the result
right.)  No LLVM option turns off just that: cpuify hides the mask of such an index from
LLVM (codegen.ptx_ops.masked_thread_index, documented in codegen/jit.py), which the tests
below check on `% blockDim.x` in specialized code and on nvcc's `& 248` of a literal `& 31`."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cpuify
from cpuify.interp import interpret_kernel

ROTATE = r'''
extern "C" __global__ void rotate(const double *in, unsigned long long *out) {
    const unsigned t = threadIdx.x, n = blockDim.x, g = blockIdx.x * n + t;
    __shared__ double s[32];
    s[t] = in[t] + 1.0;
    __syncthreads();
    double v = s[(t + 1u) % n];
    out[g * 7u + 5u] = __double_as_longlong(v);
}'''


def _rotate_expected(x: np.ndarray, blocks: int) -> np.ndarray:
    return np.tile(np.roll(x + 1.0, -1), blocks)


def _rotate_launch(fn, x: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    out = np.zeros(2 * 32 * 7, np.uint64)
    fn((2,), (32,), (x, out))
    return out.reshape(-1, 7)[:, 5].view(np.float64)


@pytest.fixture(scope="module")
def rotate_module() -> cpuify.RawModule:
    return cpuify.RawModule(code=ROTATE)


def test_rotation_generic_code_and_interpreter(rotate_module: cpuify.RawModule) -> None:
    x = np.arange(32, dtype=np.float64) * 0.5
    got = _rotate_launch(cpuify.RawModule(code=ROTATE).get_function("rotate"), x)
    np.testing.assert_array_equal(got, _rotate_expected(x, 2))
    out = np.zeros(2 * 32 * 7, np.uint64)
    interpret_kernel(rotate_module.ptx, "rotate", (2,), (32,), (x, out))
    np.testing.assert_array_equal(out.reshape(-1, 7)[:, 5].view(np.float64), _rotate_expected(x, 2))


def test_rotation_specialized_code(rotate_module: cpuify.RawModule) -> None:
    x = np.arange(32, dtype=np.float64) * 0.5
    fn = rotate_module.get_function("rotate")
    _rotate_launch(fn, x)                       # the generic code
    got = _rotate_launch(fn, x)                 # the code specialized for blocks of 32
    np.testing.assert_array_equal(got, _rotate_expected(x, 2))


LITERAL_MASK = r'''
extern "C" __global__ void rotate_lit(const double *in, unsigned long long *out, unsigned k) {
    const unsigned t = threadIdx.x, g = blockIdx.x * blockDim.x + t;
    __shared__ double s[32];
    s[t] = in[t] + 1.0;
    __syncthreads();
    out[g * 7u + 5u] = __double_as_longlong(s[(t + 1u) & 31u]);          // nvcc: (8t + 8) & 248
    out[g * 7u + 6u] = __double_as_longlong(s[(t + k) & 31u]);          // a block-uniform shift
}'''


def test_rotation_by_a_literal_mask_specialized_code() -> None:
    x = np.arange(32, dtype=np.float64) * 0.25
    fn = cpuify.RawModule(code=LITERAL_MASK).get_function("rotate_lit")
    for run in ("generic", "specialized"):
        out = np.zeros(2 * 32 * 7, np.uint64)
        fn((2,), (32,), (x, out, np.uint32(5)))
        got = out.reshape(-1, 7).view(np.float64)
        np.testing.assert_array_equal(got[:, 5], _rotate_expected(x, 2), err_msg=run)
        np.testing.assert_array_equal(got[:, 6], np.tile(np.roll(x + 1.0, -5), 2), err_msg=run)


NARROWED = r'''
extern "C" __global__ void rotate_u8(const float *in, unsigned long long *out) {
    const unsigned t = threadIdx.x, g = blockIdx.x * blockDim.x + t;
    __shared__ float s[256];
    s[t] = in[t] + 1.0f;
    __syncthreads();
    unsigned char k = (unsigned char)(t + 1u);                        // nvcc: (4t + 4) & 1020
    out[g * 7u + 5u] = __float_as_uint(s[k]);
}'''


def test_rotation_by_a_narrowing_conversion_specialized_code() -> None:
    x = np.arange(256, dtype=np.float32) * 0.5
    fn = cpuify.RawModule(code=NARROWED).get_function("rotate_u8")
    want = np.tile(np.roll(x + 1, -1), 2).view(np.uint32)
    for run in ("generic", "specialized"):
        out = np.zeros(2 * 256 * 7, np.uint64)
        fn((2,), (256,), (x, out))
        np.testing.assert_array_equal(out.reshape(-1, 7)[:, 5].astype(np.uint32), want, err_msg=run)


# fz_200_300 (seed 200, kernel 300), minimized: the same LLVM bug through the linear thread
# index of a 3D block, `sh[(lt + 1) % nt]` with lt = tx + ntid.x * (ty + ntid.y * tz) and nt
# the product of the block's dimensions, stored to out[gt * 9 + 7]: in code specialized for
# (32, 1, 1) the last thread of each block read sh[32] (0.0 where -0.0 was expected).
LINEAR = r'''
extern "C" __global__ void rotate_linear(const double *in, unsigned long long *out) {
    const unsigned lt = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned nt = blockDim.x * blockDim.y * blockDim.z;
    const unsigned bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const unsigned gt = bid * nt + lt;
    __shared__ double sh[32];
    sh[lt] = in[lt];
    __syncthreads();
    out[gt * 9u + 7u] = __double_as_longlong(sh[(lt + 1u) % nt]);
}'''


def test_rotation_of_the_linear_thread_index_specialized_code() -> None:
    x = -np.arange(32, dtype=np.float64)                 # x[0] = -0.0: what the last lane reads
    x[0] = -0.0
    fn = cpuify.RawModule(code=LINEAR).get_function("rotate_linear")
    want = np.tile(np.roll(x, -1), 6)
    for run in ("generic", "specialized"):
        out = np.zeros(6 * 32 * 9, np.uint64)
        fn((3, 1, 2), (32, 1, 1), (x, out))
        got = out.reshape(-1, 9)[:, 7]
        np.testing.assert_array_equal(got, want.view(np.uint64), err_msg=run)   # bits: -0.0


# fz_2611_77 (seed 2611, kernel 77, the 10k run of 2026-11-26), minimized: f0 is computed from
# iu[(gt * 25 + 52) & 255] before a __ballot_sync in a block-uniform `if`, then two barriers and
# a __syncthreads_and.  In blocks that took the `if`, the compiled code (generic and
# specialized) stored f0 as if computed from iu[(lt * 25 + 52) & 255] (gt without blockIdx):
# min-cut fission kept, at the barrier after the `if`, values computed before the `if`, which a
# thread resumed after the ballot had not computed in its segment; it read them from slots the
# previous block had filled (block 0: gt = lt).  Fixed in analysis.sync_points
# (_available_before: values computed since the previous sync point on every way to it).
# Right with --disable-pass=min-cut-fission and in the reference interpreter all along.
MINCUT = r'''
extern "C" __global__ void mincut(const unsigned *iu, const float *ifl, const double *idb,
                                  unsigned long long *out) {
  const unsigned lt = threadIdx.x;
  const unsigned nt = blockDim.x * blockDim.y * blockDim.z;
  const unsigned bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned gt = bid * nt + lt;
  const unsigned warp = lt >> 5;
  const unsigned wn = nt - warp * 32u >= 32u ? 32u : nt - warp * 32u;
  const unsigned wmask = wn == 32u ? 0xFFFFFFFFu : (1u << wn) - 1u;
  __shared__ unsigned sh_u[32];
  unsigned u0 = iu[(gt * 1u + 194u) & 255u];
  unsigned u1 = iu[(gt * 39u + 193u) & 255u];
  unsigned u2 = iu[(gt * 25u + 52u) & 255u];
  int s0 = (int)iu[(gt * 29u + 24u) & 255u];
  unsigned long long w0 = ((unsigned long long)iu[(gt * 27u + 216u) & 255u] << 32) | iu[(gt * 5u + 93u) & 255u];
  float f0 = ifl[(gt * 27u + 213u) & 255u];
  double d0 = idb[(gt * 7u + 138u) & 255u];
  double d1 = idb[(gt * 5u + 98u) & 255u];
  f0 = (float)((unsigned)w0 + __vsub2(2147483647u, u2));
  if (bid & 1u) {
    u0 = __ballot_sync(wmask, (__float2ll_rd(f0) == 12345ll));
  }
  __syncthreads(); sh_u[lt] = warp; __syncthreads(); u2 = sh_u[lt];
  u0 = (unsigned)__syncthreads_and(s0 > 3);
  out[gt * 8u + 0u] = (unsigned long long)u0; out[gt * 8u + 1u] = (unsigned long long)u1;
  out[gt * 8u + 2u] = (unsigned long long)u2; out[gt * 8u + 3u] = (unsigned long long)(unsigned)s0;
  out[gt * 8u + 4u] = w0; out[gt * 8u + 5u] = (unsigned long long)__float_as_uint(f0);
  out[gt * 8u + 6u] = (unsigned long long)__double_as_longlong(d0);
  out[gt * 8u + 7u] = (unsigned long long)__double_as_longlong(d1);
}'''


def _mincut_case() -> tuple:
    iu = (np.arange(256, dtype=np.uint64) * 2654435761 % 2**32).astype(np.uint32)
    ifl = np.linspace(-3, 3, 256).astype(np.float32)
    idb = np.linspace(-5, 5, 256)
    gt = np.arange(64, dtype=np.uint64)
    u2 = iu[(gt * 25 + 52) & 255].astype(np.uint64)
    lo = iu[(gt * 5 + 93) & 255].astype(np.uint64)
    a = np.uint64(0x7FFFFFFF)
    vsub2 = ((((a >> 16) - (u2 >> 16)) & 0xFFFF) << 16) | (((a & 0xFFFF) - (u2 & 0xFFFF)) & 0xFFFF)
    f0 = ((lo + vsub2) & 0xFFFFFFFF).astype(np.float32)   # by hand: (float)(unsigned)(lo + vsub2)
    return iu, ifl, idb, f0.view(np.uint32)


def test_value_recomputed_after_a_ballot_in_a_uniform_if_interpreter() -> None:
    iu, ifl, idb, want = _mincut_case()
    out = np.zeros(64 * 8, np.uint64)
    interpret_kernel(cpuify.RawModule(code=MINCUT).ptx, "mincut", (2,), (32,), (iu, ifl, idb, out))
    np.testing.assert_array_equal(out.reshape(-1, 8)[:, 5].astype(np.uint32), want)


def test_value_recomputed_after_a_ballot_in_a_uniform_if_compiled() -> None:
    iu, ifl, idb, want = _mincut_case()
    fn = cpuify.RawModule(code=MINCUT).get_function("mincut")
    for run in ("generic", "specialized"):
        out = np.zeros(64 * 8, np.uint64)
        fn((2,), (32,), (iu, ifl, idb, out))
        np.testing.assert_array_equal(out.reshape(-1, 8)[:, 5].astype(np.uint32), want, err_msg=run)


def test_value_recomputed_after_a_ballot_without_min_cut_fission() -> None:
    iu, ifl, idb, want = _mincut_case()
    fn = cpuify.RawModule(code=MINCUT, options=("--disable-pass=min-cut-fission",)).get_function("mincut")
    for run in ("generic", "specialized"):
        out = np.zeros(64 * 8, np.uint64)
        fn((2,), (32,), (iu, ifl, idb, out))
        np.testing.assert_array_equal(out.reshape(-1, 8)[:, 5].astype(np.uint32), want, err_msg=run)


MASKED_INDEX_LOOP = r'''
define void @f(ptr noalias %s, ptr noalias %out, i32 %bx) {
entry:
  %base = mul i32 %bx, 32
  %mask = MASK
  br label %head
head:
  %i = phi i32 [0, %entry], [%next, %latch]
  %c = icmp ult i32 %i, 32
  br i1 %c, label %body, label %exit
body:
  %i1 = add i32 %i, 1
  %r = and i32 %i1, %mask
  %off = shl i32 %r, 3
  %off64 = sext i32 %off to i64
  %p = getelementptr i8, ptr %s, i64 %off64
  %v = load i64, ptr %p, align 8
  %gt = add i32 %base, %i
  %o7 = mul i32 %gt, 7
  %o75 = add i32 %o7, 5
  %o64 = zext i32 %o75 to i64
  %o8 = mul i64 %o64, 8
  %q = getelementptr i8, ptr %out, i64 %o8
  store i64 %v, ptr %q, align 8
  br label %latch
latch:
  %next = add nuw i32 %i, 1
  br label %head
exit:
  ret void
}
'''


def _run_masked_index_loop(mask: str) -> None:
    """A loop over i < 32 storing s[(i + 1) & 31] to out[(32 * bx + i) * 7 + 5], optimized at
    O3 by cpuify's pipeline (jit.optimize), emitted and run.  The last iteration must store
    s[0]."""
    import ctypes

    from cpuify.codegen import jit
    triple, layout = jit.triple_and_layout()
    text = f'target triple = "{triple}"\ntarget datalayout = "{layout}"\n' + \
        MASKED_INDEX_LOOP.replace("MASK", mask)
    loaded = jit.LoadedObject(jit.emit_object(jit.optimize(text)))
    f = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32)(loaded.function_address("f"))
    s = np.zeros(40, np.uint64)
    s[:32] = np.arange(100, 132)
    s[32:] = 7777                          # what lies past the 32 words
    out = np.zeros(32 * 7 * 2, np.uint64)
    f(s.ctypes.data, out.ctypes.data, 1)
    got = out.reshape(-1, 7)[32:, 5]
    np.testing.assert_array_equal(got, np.roll(s[:32], -1))


@pytest.mark.xfail(strict=True, reason="LLVM 22.1 loop-vectorizer miscompile (module docstring); "
                                       "an XPASS means LLVM fixed it: the workaround may go")
def test_llvm_vectorizer_drops_the_wrap_of_a_masked_index() -> None:
    """The bug without cpuify's IR (the mask a constant, as LLVM sees it without the
    workaround)."""
    _run_masked_index_loop("add i32 31, 0")


def test_llvm_vectorizer_with_the_mask_hidden() -> None:
    """The same loop with the mask as cpuify emits it for such an index (an empty inline asm,
    SegmentValues.opaque_int): right."""
    _run_masked_index_loop('call i32 asm "", "=r,0"(i32 31)')


# fz_400_27 (seed 400, kernel 27): d = __fma_rn(d, 1e308, e) with d = -2147483648.5 and
# e = +inf.  The exact product (-2.1e317) is finite, so IEEE's fused multiply-add gives e,
# +inf; the compiled code did, the reference interpreter computed `a * c + d` in doubles once
# an input was not finite, and the overflowed product made -inf + inf = NaN.  Fixed in the
# interpreter (cpuify.interp.spec_eval._fma, was interp.ops._fma: a finite product plus an
# infinite addend is the addend).
FMA = r'''
extern "C" __global__ void fma_inf(const double *a, const double *b, const double *c, double *out,
                                   const float *af, const float *bf, const float *cf, float *outf) {
    int i = threadIdx.x;
    out[i] = __fma_rn(a[i], b[i], c[i]);
    outf[i] = __fmaf_rn(af[i], bf[i], cf[i]);
}'''


def test_fma_of_an_overflowing_product_and_an_infinite_addend() -> None:
    inf, nan = np.inf, np.nan
    a = np.array([-2147483648.5, 1e308, 1e308, 2.0, inf, 1e308, 0.0, nan])
    b = np.array([1e308, 10.0, -10.0, 3.0, 2.0, 10.0, inf, 1.0])
    c = np.array([inf, -inf, inf, -inf, -inf, nan, 1.0, inf])
    # by hand: a finite product plus an infinite addend is the addend; inf - inf and 0 * inf
    # are invalid (NaN); NaN in, NaN out
    want = np.array([inf, -inf, inf, -inf, nan, nan, nan, nan])
    af = np.array([-3e38, 3e38, 2.0, 1.0, 0.0, 1.0, 1.0, 1.0], np.float32)
    bf = np.array([10.0, -10.0, 3.0, inf, 1.0, 1.0, 1.0, 1.0], np.float32)
    cf = np.array([inf, inf, -inf, -inf, -inf, 1.0, 1.0, 1.0], np.float32)
    wantf = np.array([inf, inf, -inf, nan, -inf, 2.0, 2.0, 2.0], np.float32)
    mod = cpuify.RawModule(code=FMA)
    runs = []
    for run in ("compiled", "interpreted"):
        out, outf = np.zeros(8), np.zeros(8, np.float32)
        args = (a, b, c, out, af, bf, cf, outf)
        if run == "compiled":
            mod.get_function("fma_inf")((1,), (8,), args)
        else:
            interpret_kernel(mod.ptx, "fma_inf", (1,), (8,), args)
        runs.append((out, outf))
        np.testing.assert_array_equal(out, want, err_msg=run)
        np.testing.assert_array_equal(outf, wantf, err_msg=run)


# fz_400_170 (seed 400, kernel 170), minimized: f = fminf(fmaxf(f, -7.25f), __double2float_ru(d))
# in an if/else, with d = NaN.  PTX: cvt.rp.f32.f64 (NaN), max.f32, min.f32; min/max ignore a
# NaN operand, so the result is fmaxf(f, -7.25f).  The interpreter agreed; the compiled code
# returned NaN: LLVM 22's x86 backend miscompiles llvm.minimumnum(llvm.maximumnum(x, k), y)
# (knowing the inner result is never NaN, it dropped the check of y).  Fixed in
# codegen.ptx_spec (was ptx_arith; min/max as the NaN-propagating op plus selects of the other
# operand);
# the last test below checks the pattern on every pair of special values.
CLAMP = r'''
extern "C" __global__ void clamp_nan(const float *f, const double *d, float *out, unsigned p1) {
    int t = threadIdx.x;
    float f0 = f[t];
    if (p1 > 7u) {
    } else {
        f0 = fminf(fmaxf(f0, -7.25f), __double2float_ru(d[t]));
    }
    out[t] = f0;
}'''


def _clamp_case() -> tuple:
    f = np.array([2.7854154, 1.0, -100.0, np.nan], np.float32)
    d = np.array([np.nan, np.nan, np.nan, 1.0])
    want = np.array([2.7854154, 1.0, -7.25, -7.25], np.float32)     # by hand (see above)
    return f, d, want


def test_clamp_with_a_nan_bound_interpreter() -> None:
    f, d, want = _clamp_case()
    out = np.zeros(4, np.float32)
    interpret_kernel(cpuify.RawModule(code=CLAMP).ptx, "clamp_nan", (1,), (4,), (f, d, out, np.uint32(1)))
    np.testing.assert_array_equal(out, want)


def test_clamp_with_a_nan_bound_compiled() -> None:
    f, d, want = _clamp_case()
    out = np.zeros(4, np.float32)
    cpuify.RawModule(code=CLAMP).get_function("clamp_nan")((1,), (4,), (f, d, out, np.uint32(1)))
    np.testing.assert_array_equal(out, want)


MINMAX = r'''
extern "C" __global__ void minmax(const float *x, const float *y, const int *k, float *out,
                                  int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[6 * i] = fminf(fmaxf(x[i], -7.25f), y[i]);
        out[6 * i + 1] = fmaxf(fminf(x[i], 3.5f), y[i]);
        out[6 * i + 2] = fminf(x[i], y[i]);
        out[6 * i + 3] = fmaxf(x[i], y[i]);
        out[6 * i + 4] = fminf((float)k[i], y[i]);      // an int converted: never NaN
        out[6 * i + 5] = fmaxf(y[i], (float)k[i]);
    }
}'''


def _pick(a: float, b: float, smaller: bool) -> float:
    """PTX min/max: a NaN operand is ignored, -0 is below +0 (by hand, per element)."""
    if np.isnan(a):
        return b
    if np.isnan(b):
        return a
    if a == b == 0:
        neg = a if np.signbit(a) else b
        pos = b if np.signbit(a) else a
        return neg if smaller else pos
    return min(a, b) if smaller else max(a, b)


def test_min_max_chains_on_special_values() -> None:
    vals = np.array([1.5, -9.0, np.nan, 0.0, -0.0, np.inf, -np.inf, -7.25, 3.5], np.float32)
    x, y = (a.ravel() for a in np.meshgrid(vals, vals))
    n = x.size
    k = np.arange(n, dtype=np.int32) % 7 - 3
    out = np.zeros(6 * n, np.float32)
    cpuify.RawKernel(MINMAX, "minmax")(((n + 31) // 32,), (32,), (x, y, k, out, np.int32(n)))
    want = np.array([[_pick(_pick(a, np.float32(-7.25), False), b, True),
                      _pick(_pick(a, np.float32(3.5), True), b, False),
                      _pick(a, b, True), _pick(a, b, False),
                      _pick(np.float32(j), b, True), _pick(b, np.float32(j), False)]
                     for a, b, j in zip(x, y, k)], np.float32)
    np.testing.assert_array_equal(out, want.ravel())                     # NaN where NaN
    np.testing.assert_array_equal(np.signbit(out[out == 0]), np.signbit(want.ravel()[out == 0]))


# fz_2615_1978 (seed 2615, kernel 1978), minimized: fmaxf(f0 / f1, (-7.25f == f1) ? f1 : K)
# with f0 / f1 = NaN: the same LLVM 22 miscompile of llvm.maximumnum, reached through a select
# whose arm is compared equal to a constant (LLVM puts the constant in the arm, so it knows
# the operand is never NaN).  First fixed by recognising that pattern; since fz_2619_931
# (below) codegen.ptx_spec never emits llvm.minimumnum/maximumnum.
SELECTED_BOUND = r'''
extern "C" __global__ void selected_bound(const float *x, const float *y, float *out,
                                          unsigned *bits) {
    __shared__ float sh[128];
    unsigned t = threadIdx.x, nt = blockDim.x, i = blockIdx.x * nt + t;
    float a = x[i], b = y[i];
    atomicOr(bits, i);              // (as in the fuzzer's kernel: the barrier after it goes)
    __syncthreads();
    sh[t] = fmaxf(a / b, (-7.25f == b) ? b : 4294967296.0f);
    __syncthreads();
    out[i] = sh[(t + 1) % nt];      // the next thread's result
}'''


@pytest.mark.parametrize("run", ["compiled", "interpreted"])
def test_max_of_a_selected_constant_on_special_values(run: str) -> None:
    vals = np.array([1.5, -9.0, np.nan, 0.0, -0.0, np.inf, -np.inf, -7.25, 3.5, 2.0], np.float32)
    x, y = (a.ravel() for a in np.meshgrid(vals, vals))
    x, y = np.resize(x, 256), np.resize(y, 256)         # two blocks of 128
    out = np.zeros(256, np.float32)
    args = (x, y, out, np.zeros(1, np.uint32))
    mod = cpuify.RawModule(code=SELECTED_BOUND)
    if run == "compiled":
        mod.get_function("selected_bound")((2,), (128,), args)
    else:
        interpret_kernel(mod.ptx, "selected_bound", (2,), (128,), args)
    with np.errstate(all="ignore"):
        q = x / y
    f32 = np.float32
    mine = np.array([_pick(a, b if b == f32(-7.25) else f32(4294967296.0), False)
                     for a, b in zip(q, y)], np.float32).reshape(2, 128)
    want = np.roll(mine, -1, axis=1).ravel()            # each thread stores its neighbour's
    assert args[3][0] == np.bitwise_or.reduce(np.arange(256, dtype=np.uint32))
    np.testing.assert_array_equal(out, want)                             # NaN where NaN
    np.testing.assert_array_equal(np.signbit(out[out == 0]), np.signbit(want[out == 0]))


# fz_2619_931 (seed 2619, kernel 931), minimized: fmin(fmin(d0, d1), trunc(4.9e-324)) where
# one branch sets d0 = ceil((double)l) and d1 = NaN.  min.f64 ignores the NaN: the inner min
# is d0.  The compiled code (every pipeline, passes on or off) gave NaN: LLVM 22's x86
# backend, proving ceil((double)l) never NaN, drops the NaN check of the other operand of
# llvm.minimumnum.  The pattern-based guard (a constant, an int converted, another min/max,
# a select) did not see ceil of a converted int behind a branch argument.  Fixed in
# codegen.ptx_spec: float min/max never become llvm.minimumnum/maximumnum.
ROUNDED_INT = r'''
extern "C" __global__ void rounded_int(const long long *l, const double *d, double *out,
                                       float *outf, unsigned *count, int p) {
    int t = threadIdx.x;
    atomicAdd(count, 1u);       // (the fuzzer's kernel had atomics: the thread loop stays scalar)
    double d0 = d[t], d1 = d[t + 32];
    float f0 = (float)d0, f1 = (float)d1;
    if (t >= p) {               // a data-dependent branch, as in the fuzzer's kernel
        d0 = ceil((double)l[t]);
        f0 = floorf((float)(int)l[t]);
    }
    out[3 * t] = fmin(fmin(d0, d1), trunc(4.9e-324));
    out[3 * t + 1] = fmax(d1, trunc((double)l[t]));
    out[3 * t + 2] = fmin(ceil((double)l[t]), d1);
    outf[t] = fminf(f1, rintf(f0));
}'''


@pytest.mark.parametrize("run", ["compiled", "interpreted"])
def test_min_of_a_rounded_integer_and_nan(run: str) -> None:
    vals = [1.5, -9.0, np.nan, 0.0, -0.0, np.inf, -np.inf, 2.0]
    d = np.array([vals[i % 8] for i in range(32)] + [vals[(i // 4) % 8] for i in range(32)])
    l = np.arange(32, dtype=np.int64) * 3 - 40
    out = np.zeros(96)
    outf = np.zeros(32, np.float32)
    args = (l, d, out, outf, np.zeros(1, np.uint32), np.int32(8))
    mod = cpuify.RawModule(code=ROUNDED_INT)
    if run == "compiled":
        mod.get_function("rounded_int")((1,), (32,), args)
    else:
        interpret_kernel(mod.ptx, "rounded_int", (1,), (32,), args)
    want, wantf = [], []
    for t in range(32):
        d0, d1 = d[t], d[t + 32]
        f0, f1 = np.float32(d0), np.float32(d1)
        if t >= 8:
            d0 = float(np.ceil(float(l[t])))
            f0 = np.floor(np.float32(int(l[t])))
        want += [_pick(_pick(d0, d1, True), 0.0, True), _pick(d1, float(np.trunc(float(l[t]))), False),
                 _pick(float(np.ceil(float(l[t]))), d1, True)]
        wantf.append(_pick(f1, np.rint(f0), True))
    want, wantf = np.array(want), np.array(wantf, np.float32)
    np.testing.assert_array_equal(out, want)                             # NaN where NaN
    np.testing.assert_array_equal(np.signbit(out[out == 0]), np.signbit(want[out == 0]))
    np.testing.assert_array_equal(outf, wantf)
    np.testing.assert_array_equal(np.signbit(outf[outf == 0]), np.signbit(wantf[outf == 0]))
    assert args[4][0] == 32


SIGNED_ZEROS = r'''
extern "C" __global__ void signed_zeros(double *d, float *f) {
    double m = -0.0;
    d[threadIdx.x] = fabs(0.0) / __fma_rn(0.0, m, 0.1);     // +0 / 0.1 = +0
    float mf = -0.0f;
    f[threadIdx.x] = (threadIdx.x & 1) ? mf : 0.0f;          // a select between the two zeros
}'''


def test_constants_minus_zero_and_zero_stay_apart() -> None:
    """fz_101_472 (seed 101, kernel 472, found by comparing with an H100, which gave +0):
    the lifter kept one constant per value, and -0.0 == 0.0 in Python, so the PTX constants
    0d8000000000000000 and 0d0000000000000000 became one (-0.0), in the compiler and the
    interpreter alike.  Constants are keyed by their bits now (selects of equal constants
    too)."""
    from cpuify.frontend.nvrtc import compile_to_ptx
    from cpuify.interp import InterpModule
    ptx = compile_to_ptx(SIGNED_ZEROS, filename="z.cu").ptx
    for run in ("native", "interp"):
        d, f = np.ones(4), np.ones(4, np.float32)
        if run == "native":
            cpuify.RawModule(ptx=ptx).get_function("signed_zeros")((1,), (4,), (d, f))
        else:
            InterpModule(ptx).launch("signed_zeros", (1, 1, 1), (4, 1, 1), [d, f])
        assert not np.signbit(d).any(), run
        np.testing.assert_array_equal(np.signbit(f), [False, True, False, True])


def test_directed_mul_f64_that_underflows_completely() -> None:
    """fz_2613_1387 (seed 2613, kernel 1387, the last run of 2026-11-26): `__dmul_ru(x, x)`
    with x = 1e-310 is, exactly, 1e-620 > 0, below the smallest subnormal 2^-1074: rounded up
    it is 2^-1074 (the reference interpreter gave that), compiled code gave 0.0: the sign of
    the product's error was taken from an fma whose scaled product still underflowed (only
    the smaller factor was scaled).  Checked by hand: a positive exact product below 2^-1074
    rounds up to 2^-1074 and down/to zero to 0; a negative one the mirror image."""
    src = r'''
extern "C" __global__ void k(const double *x, const double *y, double *o) {
    int i = threadIdx.x;
    o[6 * i + 0] = __dmul_ru(x[i], y[i]);
    o[6 * i + 1] = __dmul_rd(x[i], y[i]);
    o[6 * i + 2] = __dmul_rz(x[i], y[i]);
    o[6 * i + 3] = __dmul_ru(-x[i], y[i]);
    o[6 * i + 4] = __dmul_rd(-x[i], y[i]);
    o[6 * i + 5] = __dmul_rn(x[i], y[i]);
}'''
    tiny = 2.0 ** -1074
    # (x, y): both subnormal; both tiny normals; a subnormal times 0.75; the
    # smallest subnormal squared; a tiny product that is exactly representable
    x = np.array([1e-310, 1e-200, 8095 * tiny, tiny, 2.0 ** -600])
    y = np.array([1e-310, 1e-200, 0.75, tiny, 2.0 ** -400])
    o = np.zeros(6 * len(x))
    cpuify.RawKernel(src, "k")((1,), (len(x),), (x, y, o))
    got = o.reshape(-1, 6)
    for i in range(4):      # exact products below 2^-1074
        if i == 2:
            continue
        np.testing.assert_array_equal(got[i], [tiny, 0.0, 0.0, -0.0, -tiny, 0.0], err_msg=str(i))
        assert not np.signbit(got[i][1]) and np.signbit(got[i][3])
    # 8095 * 2^-1074 * 0.75 = 6071.25 * 2^-1074: up 6072, down and toward zero 6071
    np.testing.assert_array_equal(got[2], np.array([6072, 6071, 6071, -6071, -6072, 6071]) * tiny)
    exact = 2.0 ** -1000
    np.testing.assert_array_equal(got[4], [exact, exact, exact, -exact, -exact, exact])
    from cpuify.frontend.nvrtc import compile_to_ptx
    ptx = compile_to_ptx(src, filename="k.cu").ptx
    ref = np.zeros_like(o)
    interpret_kernel(ptx, "k", (1, 1, 1), (len(x), 1, 1), [x, y, ref])
    np.testing.assert_array_equal(o, ref)


# fz_2615_743 (seed 2615, kernel 743): warps out of step at warp-level sync points.  In an
# outer loop `for i1 < p1`, an inner loop of `warp + 1` rounds with a `__syncwarp()` (nvcc
# unrolls it by 4 with a remainder: the warps pass through different __syncwarp points),
# then a shuffle of the running value.  Warp 0 runs on while warp 1 still waits at a
# __syncwarp: it reached the sync points of its second outer iteration while warp 1 was in
# the first.  The outer loop's counter, block-uniform, was kept as one copy per block
# across the sync points (the copy of the last thread that stopped): warp 1 resumed with
# warp 0's counter, one iteration ahead, and left the loop after one shuffle (p1 = 2 gave
# what p1 = 1 gives).  Right in the reference interpreter all along, wrong in every compiled
# build (generic, specialized, --passes=).  Fixed in analysis.uniformity
# (uniform_across_warp_syncs): where a warp-level sync point is in a divergent branch or
# loop, only values computed outside all loops keep one copy per block.
OUT_OF_STEP = r'''
#define KERNEL(NAME, T, CALL)                                                        \
extern "C" __global__ void NAME(const T *in, T *out, unsigned p1) {                 \
  const unsigned lt = threadIdx.x + blockDim.x * threadIdx.y;                        \
  const unsigned warp = lt >> 5;                                                     \
  T d0 = in[lt];                                                                     \
  for (unsigned i1 = 0u; i1 < p1; i1++) {                                            \
    for (unsigned i2 = 0u; i2 < (warp + 1u); i2++) {                                 \
      __syncwarp(0xffffffffu);                                                       \
    }                                                                                \
    d0 = CALL;                                                                       \
  }                                                                                  \
  out[lt] = d0;                                                                      \
}
KERNEL(down_f64, double, __shfl_down_sync(0xffffffffu, d0 + 1.0, 1u, 4))
KERNEL(up_f64, double, __shfl_up_sync(0xffffffffu, d0 + 1.0, 1u, 4))
KERNEL(xor_f64, double, __shfl_xor_sync(0xffffffffu, d0 + 1.0, 1, 4))
KERNEL(idx_f64, double, __shfl_sync(0xffffffffu, d0 + 1.0, 2, 4))
KERNEL(down_f32, float, __shfl_down_sync(0xffffffffu, d0 + 1.0f, 1u, 4))
KERNEL(up_f32, float, __shfl_up_sync(0xffffffffu, d0 + 1.0f, 1u, 4))
KERNEL(xor_f32, float, __shfl_xor_sync(0xffffffffu, d0 + 1.0f, 1, 4))
KERNEL(idx_f32, float, __shfl_sync(0xffffffffu, d0 + 1.0f, 2, 4))
'''

_OUT_OF_STEP_SHAPES = [(64, 1), (32, 2), (96, 1), (32, 3)]


def _out_of_step_expected(x: np.ndarray, mode: str, p1: int) -> np.ndarray:
    """By hand: each outer round adds 1 and moves the values within segments of 4 lanes
    (a source lane outside the segment gives the lane its own value)."""
    t = np.arange(len(x))
    lane = t % 4
    src = {"down": np.where(lane + 1 < 4, t + 1, t), "up": np.where(lane >= 1, t - 1, t),
           "xor": t ^ 1, "idx": t - lane + 2}[mode]
    d = x.copy()
    for _ in range(p1):
        d = (d + 1)[src]
    return d


@pytest.fixture(scope="module")
def out_of_step_module() -> cpuify.RawModule:
    return cpuify.RawModule(code=OUT_OF_STEP)


@pytest.mark.parametrize("ty", ["f64", "f32"])
@pytest.mark.parametrize("mode", ["down", "up", "xor", "idx"])
def test_warps_out_of_step_at_shuffles_compiled(out_of_step_module: cpuify.RawModule,
                                                mode: str, ty: str) -> None:
    dtype = np.float64 if ty == "f64" else np.float32
    fn = out_of_step_module.get_function(f"{mode}_{ty}")
    for block in _OUT_OF_STEP_SHAPES:
        n = block[0] * block[1]
        x = (np.arange(n) * 10).astype(dtype)
        for p1 in (1, 2, 3, 4, 2):          # (the last: the code specialized for the shape)
            out = np.zeros(n, dtype)
            fn((1,), block, (x, out, np.uint32(p1)))
            np.testing.assert_array_equal(out, _out_of_step_expected(x, mode, p1),
                                          err_msg=f"block {block}, p1 = {p1}")


def test_warps_out_of_step_at_shuffles_without_passes() -> None:
    fn = cpuify.RawModule(code=OUT_OF_STEP, options=("--passes=",)).get_function("down_f64")
    for block in ((64, 1), (96, 1)):
        x = np.arange(block[0]) * 10.0
        for p1 in (2, 3):
            out = np.zeros(block[0])
            fn((1,), block, (x, out, np.uint32(p1)))
            np.testing.assert_array_equal(out, _out_of_step_expected(x, "down", p1))


@pytest.mark.parametrize("name", ["down_f64", "idx_f32"])
def test_warps_out_of_step_at_shuffles_interpreter(out_of_step_module: cpuify.RawModule,
                                                   name: str) -> None:
    mode, ty = name.split("_")
    dtype = np.float64 if ty == "f64" else np.float32
    for block in ((64, 1), (32, 3)):
        n = block[0] * block[1]
        x = (np.arange(n) * 10).astype(dtype)
        for p1 in (2, 3):
            out = np.zeros(n, dtype)
            interpret_kernel(out_of_step_module.ptx, name, (1, 1, 1), (*block, 1),
                             (x, out, np.uint32(p1)))
            np.testing.assert_array_equal(out, _out_of_step_expected(x, mode, p1))


def test_loop_counter_not_shared_where_warps_wait_in_divergent_loops(
        out_of_step_module: cpuify.RawModule) -> None:
    """The mechanism: the outer loop's counter is block-uniform (uniform_values) but not one
    copy per block across sync points (uniform_across_warp_syncs) when a __syncwarp is in
    a loop whose trip count depends on the warp; with a block-uniform trip count it is."""
    from cpuify.analysis.cfg import cyclic_blocks
    from cpuify.analysis.uniformity import uniform_across_warp_syncs, uniform_values
    from cpuify.frontend.ptx_parser import parse_ptx
    from cpuify.ir.core import defining_block
    from cpuify.ir.structure import block_body
    from cpuify.lifting import lift_kernel

    def shared_in_loops(ptx: str, name: str) -> tuple[set, set]:
        module = parse_ptx(ptx)
        region = block_body(lift_kernel(module, module.functions[name]).op)
        uniform = uniform_values(region)
        cyclic = cyclic_blocks(region)
        in_loops = {v for v in uniform if defining_block(v) in cyclic and
                    getattr(v, "type", "") == "i32"}
        return in_loops, uniform_across_warp_syncs(region, uniform)

    in_loops, shared = shared_in_loops(out_of_step_module.ptx, "down_f64")
    assert in_loops                              # the outer counter (and its next value)
    assert not in_loops & shared
    in_step = OUT_OF_STEP.replace("(warp + 1u)", "(p1 + 1u)")
    in_loops, shared = shared_in_loops(cpuify.RawModule(code=in_step).ptx, "down_f64")
    assert in_loops and in_loops <= shared


def test_warps_out_of_step_in_a_loop_with_a_barrier() -> None:
    """The same with a __syncthreads() in every iteration of the loop and the __syncwarp in
    `if (warp == 0)`: the other warps passed the shuffle and the loop's latch and waited at
    the next iteration's barrier with the counter of that iteration while warp 0 waited at
    its __syncwarp; warp 0 resumed with their counter (p1 = 2 and 3 were wrong).  A barrier
    in every iteration does not keep the warps in the same iteration."""
    src = r'''
extern "C" __global__ void k(const double *in, double *out, unsigned p1) {
  const unsigned lt = threadIdx.x;
  const unsigned warp = lt >> 5;
  double d0 = in[lt];
  for (unsigned i1 = 0u; i1 < p1; i1++) {
    __syncthreads();
    if (warp == 0) __syncwarp();
    d0 = __shfl_down_sync(0xffffffffu, d0 + i1, 1u, 4);
  }
  out[lt] = d0;
}'''
    m = cpuify.RawModule(code=src)
    fn = m.get_function("k")
    for n in (64, 96):
        x = np.arange(n) * 10.0
        t = np.arange(n)
        src_lane = np.where(t % 4 + 1 < 4, t + 1, t)
        for p1 in (1, 2, 3, 4, 3):
            want = x.copy()
            for i1 in range(p1):
                want = (want + i1)[src_lane]
            out = np.zeros(n)
            fn((1,), (n,), (x, out, np.uint32(p1)))
            np.testing.assert_array_equal(out, want, err_msg=f"{n} threads, p1 = {p1}")
            if p1 in (2, 3) and n == 64:
                ref = np.zeros(n)
                interpret_kernel(m.ptx, "k", (1, 1, 1), (n, 1, 1), (x, ref, np.uint32(p1)))
                np.testing.assert_array_equal(ref, want)


def test_spin_wait_in_a_loop_with_a_barrier() -> None:
    """Found with fz_2615_743, the same cause at a spin-wait's yield point: thread 0 spins
    on a flag thread 32 sets, in a loop with a __syncthreads() in every iteration; the
    other threads ran on to the next iteration's barrier and thread 0 resumed from its
    yield point with their loop counter (it added 11 where 1 + 11 = 12 was right)."""
    src = r'''
extern "C" __global__ void y(volatile int *flag, double *out, unsigned p1) {
  for (unsigned i = 0; i < p1; i++) {
    __syncthreads();
    if (threadIdx.x == 0) { while (flag[i] == 0) {} }
    if (threadIdx.x == 32) flag[i] = 1;
    out[threadIdx.x] += i * 10.0 + 1.0;
  }
}'''
    fn = cpuify.RawModule(code=src).get_function("y")
    for p1 in (1, 2, 3, 3):
        flag = np.zeros(8, np.int32)
        out = np.zeros(64)
        fn((1,), (64,), (flag, out, np.uint32(p1)))
        np.testing.assert_array_equal(out, np.full(64, sum(i * 10.0 + 1.0 for i in range(p1))),
                                      err_msg=f"p1 = {p1}")
        np.testing.assert_array_equal(flag[:p1], 1)


FENCED = r'''
extern "C" __global__ void fenced(const float *in, float *out, unsigned p1) {
  const unsigned lt = threadIdx.x;
  float v = in[lt];
  for (unsigned i1 = 0u; i1 < p1; i1++) {
    __syncthreads();
    if ((lt >> 5) == 0u) v = __shfl_xor_sync(0xffffffffu, v, 1) + (float)i1;
    __syncthreads();
    v = v * 0.5f;
  }
  out[lt] = v;
}'''


def test_loop_counter_shared_where_the_waiting_warp_is_fenced_by_barriers() -> None:
    """A shuffle in `if (warp == 0)` between two __syncthreads() in a loop: the other warps
    wait at the second barrier, never past the loop's latch, so its counter stays one copy
    per block (uniform_across_warp_syncs), and the results are right."""
    from cpuify.analysis.cfg import cyclic_blocks
    from cpuify.analysis.uniformity import uniform_across_warp_syncs, uniform_values
    from cpuify.frontend.ptx_parser import parse_ptx
    from cpuify.ir.core import defining_block
    from cpuify.ir.structure import block_body
    from cpuify.lifting import lift_kernel
    m = cpuify.RawModule(code=FENCED)
    module = parse_ptx(m.ptx)
    region = block_body(lift_kernel(module, module.functions["fenced"]).op)
    uniform = uniform_values(region)
    cyclic = cyclic_blocks(region)
    in_loops = {v for v in uniform if defining_block(v) in cyclic and getattr(v, "type", "") == "i32"}
    assert in_loops and in_loops <= uniform_across_warp_syncs(region, uniform)
    fn = m.get_function("fenced")
    x = np.arange(96, dtype=np.float32)
    for p1 in (1, 2, 3, 3):
        want = x.copy()
        for i1 in range(p1):
            want[:32] = want[:32][np.arange(32) ^ 1] + np.float32(i1)
            want = want * np.float32(0.5)
        out = np.zeros(96, np.float32)
        fn((1,), (96,), (x, out, np.uint32(p1)))
        np.testing.assert_array_equal(out, want, err_msg=f"p1 = {p1}")


# fz_2617_449 and fz_2617_719 (seed 2617, the 10k run of 2026-11-27), minimized: a 32-bit
# result sign-extended to 64 bits and stored, `(long long)__mul24(s, s)` (nvcc: shl 8, shr.s
# 8, mul.lo.s32, cvt.s64.s32) and `(long long)(int)((unsigned)__float2int_rz(-2147483904.0f)
# + (unsigned)(int)__sad(-100000, -100000, u))` (add.s32, cvt.s64.s32).  Compiled (every
# pipeline, --passes= included), the first was the zero-extended value (0x83459d04 for
# 0xffffffff83459d04) and the second computed in 64 bits (0xffffffffffffffde where 0x7fffffde
# is right).  analysis.no_signed_wrap flagged every 32-bit add/sub/mul/mad that only fed a
# sign extension `nsw`, taking it for a C++ `int` index; LLVM then proved the square
# non-negative (sext -> zext) and distributed the extension over the sum.  Both are
# well-defined CUDA (`__mul24` is the low 32 bits of a 48-bit product; the sum is unsigned).
# Fixed there: nsw only where the extension feeds nothing but addresses
# (analysis.pointers.address_only).  The reference interpreter was right all along.
SIGN_EXTENDED = r'''
__device__ __forceinline__ int mad24(int a, int b, int c) {
  int r; asm("mad24.lo.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); return r; }
__device__ __forceinline__ int mul24hi(int a, int b) {
  int r; asm("mul24.hi.s32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
__device__ __forceinline__ int madlo(int a, int b, int c) {
  int r; asm("mad.lo.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); return r; }
__device__ __forceinline__ int sadu(unsigned a, unsigned b, unsigned c) {
  int r; asm("sad.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); return r; }
extern "C" __global__ void square24(const int *in, long long *out) {
  int s = in[threadIdx.x];
  out[threadIdx.x] = (long long)__mul24(s, s);
}
extern "C" __global__ void saturated_sum(const unsigned *in, long long *out) {
  unsigned u = in[threadIdx.x];
  out[threadIdx.x] = (long long)(int)((unsigned)__float2int_rz(-2147483904.0f)
                                      + (unsigned)(int)__sad(-100000, -100000, u));
}
// the siblings: each 32-bit result that may wrap or be negative, sign-extended and stored
extern "C" __global__ void siblings(const unsigned *x, const unsigned *y, long long *out) {
  unsigned a = x[threadIdx.x], b = y[threadIdx.x];
  int sa = (int)a, sb = (int)b;
  long long *o = out + 12 * threadIdx.x;
  o[0] = (long long)__mul24(sa, sa);
  o[1] = (long long)(int)__umul24(a, b);
  o[2] = (long long)mad24(sa, sb, sa);
  o[3] = (long long)__mulhi(sa, sb);
  o[4] = (long long)(int)__sad(sa, sb, a);
  o[5] = (long long)(int)(a + b);
  o[6] = (long long)(int)(a * b);
  o[7] = (long long)(int)(a - b);
  o[8] = (long long)madlo(sa, sb, sa);
  o[9] = (long long)(int)((unsigned)__float2int_rz(__uint_as_float(b)) + a);
  o[10] = (long long)mul24hi(sa, sb);
  o[11] = (long long)sadu(a, b, a);
}'''


def _s32(v: int) -> int:
    v %= 1 << 32
    return v - (1 << 32) if v >= 1 << 31 else v


def _s24(v: int) -> int:
    v &= 0xFFFFFF
    return v - (1 << 24) if v >= 1 << 23 else v


def _float2int_rz(bits: int) -> int:
    f = float(np.array([bits], np.uint32).view(np.float32)[0])
    if np.isnan(f):
        return 0
    return int(max(-2.0**31, min(2.0**31 - 1, np.trunc(f))))     # saturating, as cvt.rzi.s32.f32


def _siblings_case() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inputs (edges first: INT_MAX/INT_MIN/-1, 2^23, floats beyond the int range) and every
    column by hand, in Python integers."""
    rng = np.random.default_rng(2617)
    n = 64
    x = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    y = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    x[:4] = [0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x00800000]
    y[:4] = [1, 0xFFFFFFFF, 0x80000000, 0x00800000]
    y[4:8] = np.array([-3e9, 3e9, -2147483904.0, 2147483520.0], np.float32).view(np.uint32)
    want = np.zeros((n, 12), np.int64)
    for i in range(n):
        a, b = int(x[i]), int(y[i])
        sa, sb = _s32(a), _s32(b)
        want[i] = [_s32(_s24(a) * _s24(a)), _s32((a & 0xFFFFFF) * (b & 0xFFFFFF)),
                   _s32(_s24(a) * _s24(b) + sa), (sa * sb) >> 32, _s32(abs(sa - sb) + a),
                   _s32(a + b), _s32(a * b), _s32(a - b), _s32(sa * sb + sa),
                   _s32(_float2int_rz(b) + a), _s32((_s24(a) * _s24(b)) >> 16),
                   _s32(abs(a - b) + a)]
    return x, y, want


@pytest.fixture(scope="module")
def sign_extended_module() -> cpuify.RawModule:
    return cpuify.RawModule(code=SIGN_EXTENDED)


def _sign_extended_runs(module: cpuify.RawModule, name: str, grid_block: tuple, args: tuple,
                        shape: tuple) -> dict[str, np.ndarray]:
    """The kernel's int64 output: compiled generic, specialized, with every pass off, and
    interpreted."""
    got = {}
    nopasses = cpuify.RawModule(code=SIGN_EXTENDED, options=("--passes=",)).get_function(name)
    for run in ("generic", "specialized", "no passes", "interpreter"):
        out = np.zeros(shape, np.int64)
        if run == "interpreter":
            interpret_kernel(module.ptx, name, *grid_block, (*args, out))
        elif run == "no passes":
            nopasses(*grid_block, (*args, out))
        else:
            module.get_function(name)(*grid_block, (*args, out))
        got[run] = out
    return got


def test_square_by_mul24_sign_extended(sign_extended_module: cpuify.RawModule) -> None:
    s = np.array([0x123456, -0x7AB1C3, 0x7FFFFF, -0x800000, 5, -34, 0x5C3A41, 0], np.int32)
    # by hand: the low 32 bits of the 48-bit square of the sign-extended low 24 bits, as int
    want = np.array([_s32(_s24(int(v)) ** 2) for v in s], np.int64)
    assert (want < 0).sum() >= 3
    for run, out in _sign_extended_runs(sign_extended_module, "square24", ((1,), (8,)), (s,),
                                        (8,)).items():
        np.testing.assert_array_equal(out, want, err_msg=run)


def test_unsigned_sum_with_a_saturated_conversion_sign_extended(
        sign_extended_module: cpuify.RawModule) -> None:
    u = np.array([0xFFFFFFDE, 0xFFFFFFE7, 0xC37261BF, 0x80000000, 0, 1, 0x7FFFFFFF, 34], np.uint32)
    # by hand: __float2int_rz saturates to INT_MIN; |a - a| = 0; the unsigned sum wraps
    want = np.array([_s32(0x80000000 + int(v)) for v in u], np.int64)
    assert want[0] == 0x7FFFFFDE and want[3] == 0
    for run, out in _sign_extended_runs(sign_extended_module, "saturated_sum", ((1,), (8,)), (u,),
                                        (8,)).items():
        np.testing.assert_array_equal(out, want, err_msg=run)


def test_sibling_operations_sign_extended(sign_extended_module: cpuify.RawModule) -> None:
    """mul24/umul24/mad24/mul24.hi/mul.hi/sad (signed and unsigned)/add/sub/mul/mad.lo and a
    saturating conversion, each sign-extended and stored."""
    x, y, want = _siblings_case()
    for run, out in _sign_extended_runs(sign_extended_module, "siblings", ((1,), (64,)), (x, y),
                                        (64, 12)).items():
        for col in range(12):
            np.testing.assert_array_equal(out[:, col], want[:, col], err_msg=f"{run}, column {col}")


INDEX_OR_VALUE = r'''
extern "C" __global__ void index_or_value(const float *in, float *out, long long *vals,
                                          int n, int m, int p, int q) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i * n + m] = in[i * n + m];          // an index only: nsw
  vals[i] = (long long)(i * p + q);        // a value: may wrap
  vals[i + 64] = (long long)(i * i);       // a value: may wrap
}'''


def _index_or_value_region() -> tuple:
    from cpuify.compiler import lift_and_optimize
    from cpuify.frontend.ptx_parser import parse_ptx
    from cpuify.ir.structure import block_body
    from cpuify.transforms.pass_manager import PipelineOptions
    module = parse_ptx(cpuify.RawModule(code=INDEX_OR_VALUE).ptx)
    entry = next(e for e in module.entries if e.name == "index_or_value")
    lifted, _ = lift_and_optimize(module, entry, PipelineOptions(), (64, 1, 1))
    return module, lifted, block_body(lifted.op)


def test_nsw_only_on_indices_ir() -> None:
    """analysis.no_signed_wrap on the optimized IR: `i * n + m`, used only as an index, is
    flagged; `i * p + q` and `i * i`, sign-extended and stored, are not (must not fire)."""
    from cpuify.analysis.pointers import address_only, no_signed_wrap
    from cpuify.ir.core import OpResult
    _, _, region = _index_or_value_region()
    nsw = no_signed_wrap(region)
    ops = [op for b in region.blocks for op in b.ops]

    def param_offset(v: object) -> int | None:
        return v.op.attributes["offset"] if isinstance(v, OpResult) and v.op.name == "upir.param" else None

    products = [op for op in ops if op.name in ("ptx.mad", "ptx.mul") and "lo" in op.attributes["mods"]]
    by_n = [op for op in products if param_offset(op.operands[1]) == 24]     # i * n + m
    by_p = [op for op in products if param_offset(op.operands[1]) == 32]     # i * p + q
    squares = [op for op in products if op.operands[0] is op.operands[1]]
    assert by_n and by_p and squares
    assert all(op.results[0] in nsw for op in by_n)
    assert not any(op.results[0] in nsw for op in by_p + squares)
    # the stored extensions are not addresses
    stored = [op.operands[1] for op in ops if op.name == "ptx.st" and op.operands[1].type == "i64"]
    assert len(stored) == 2 and not set(stored) & address_only(region)


def test_nsw_only_on_indices_llvm_and_results() -> None:
    """The code generator's LLVM: no `nsw` on the square; and the results against a hand
    computation where `i * p + q` and `i * i` wrap as 32-bit ints."""
    from cpuify.codegen import jit
    from cpuify.codegen.llvm_gen import ModuleCodegen
    module, lifted, _ = _index_or_value_region()
    gen = ModuleCodegen(module, *jit.triple_and_layout())
    gen.add_kernel(lifted, (64, 1, 1))
    text = gen.llvm_text()
    assert re.search(r"(mul|add) nsw i32", text)                # the index
    assert re.search(r"mul i32 (%\S+), \1$", text, re.MULTILINE)          # the square, no nsw
    fn = cpuify.RawModule(code=INDEX_OR_VALUE).get_function("index_or_value")
    n, m, p, q = 3, 2, 0x7654321, 0x7FFFFFF0
    inp = np.arange(1, 64 * n + 8, dtype=np.float32)
    want = np.zeros_like(inp)
    for i in range(64):
        want[i * n + m] = inp[i * n + m]
    ws = [_s32(i * p + q) for i in range(64)] + [_s32(i * i) for i in range(64)]
    for run in ("generic", "specialized"):
        out = np.zeros_like(inp)
        vals = np.zeros(128, np.int64)
        fn((1,), (64,), (inp, out, vals, np.int32(n), np.int32(m), np.int32(p), np.int32(q)))
        np.testing.assert_array_equal(out, want, err_msg=run)
        np.testing.assert_array_equal(vals, np.array(ws, np.int64), err_msg=run)


# Found while fixing fz_2619_931: the loop vectorizer ends a running fmaxf/fminf (a
# maximumnum reduction) with llvm.vector.reduce.fmax/fmin, which order no zeros: a row of
# -0 and +0 gave -0 as its max.  PTX's max orders -0 below +0.  codegen.jit replaces the
# reductions with trees of the PTX min/max after optimization.
ROW_EXTREMES = r'''
extern "C" __global__ void row_extremes(const float *x, float *hi, float *lo, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    float m = -3.402823466e38f, n = 3.402823466e38f;
    for (int c = 0; c < cols; c++) {
        m = fmaxf(m, x[r * cols + c]);
        n = fminf(n, x[r * cols + c]);
    }
    hi[r] = m;
    lo[r] = n;
}'''


@pytest.mark.parametrize("run", ["compiled", "interpreted"])
def test_running_min_max_order_signed_zeros(run: str) -> None:
    cols, rows = 64, 80
    x = np.full((rows, cols), -0.0, np.float32)
    x[1, ::2] = 0.0                         # alternating
    x[2] = 0.0                              # all +0
    x[3] = np.nan                           # all NaN: the start values
    x[4, 1:] = np.nan                       # -0 then NaN
    x[5] = np.where(np.arange(cols) % 3 == 0, np.nan, 0.0)
    x[6] = np.linspace(-1, 1, cols)         # ordinary numbers
    for r in range(7, 7 + cols):            # one +0 among -0, at every position
        x[r, r - 7] = 0.0
    x[0, 40] = 0.0
    hi, lo = np.zeros(rows, np.float32), np.zeros(rows, np.float32)
    args = (x, hi, lo, np.int32(cols))
    mod = cpuify.RawModule(code=ROW_EXTREMES, options=("-ftz=false",))   # no flushes: a reduction
    if run == "compiled":
        mod.get_function("row_extremes")((1,), (rows,), args)
    else:
        interpret_kernel(mod.ptx, "row_extremes", (1,), (rows,), args)
    want_hi, want_lo = [], []
    for row in x:
        m, n = np.float32(-3.402823466e38), np.float32(3.402823466e38)
        for v in row:
            m, n = _pick(m, v, False), _pick(n, v, True)
        want_hi.append(m)
        want_lo.append(n)
    want_hi, want_lo = np.array(want_hi, np.float32), np.array(want_lo, np.float32)
    np.testing.assert_array_equal(hi, want_hi)
    np.testing.assert_array_equal(lo, want_lo)
    np.testing.assert_array_equal(np.signbit(hi), np.signbit(want_hi))
    np.testing.assert_array_equal(np.signbit(lo), np.signbit(want_lo))


def test_maximumnum_reduction_in_llvm_orders_signed_zeros() -> None:
    """The same at the LLVM level, where it showed: a running llvm.maximumnum over 64 floats,
    optimized by jit.optimize (vectorized) and run.  Before the fix a row of -0 with one +0
    at index 40 gave -0."""
    import ctypes

    import llvmlite.binding as llvm

    from cpuify.codegen import jit
    from cpuify.forksafe import compile_section
    ir = """
declare float @llvm.maximumnum.f32(float, float)
define float @running_max(float* noalias %x, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %loop]
  %m = phi float [0xC7EFFFFFE0000000, %entry], [%m1, %loop]
  %p = getelementptr float, float* %x, i64 %i
  %v = load float, float* %p
  %m1 = call float @llvm.maximumnum.f32(float %m, float %v)
  %i1 = add i64 %i, 1
  %c = icmp ult i64 %i1, %n
  br i1 %c, label %loop, label %exit
exit:
  ret float %m1
}"""
    mod = jit.optimize(ir)
    assert "@llvm.maximum.v" in str(mod)         # vectorized, and the num forms replaced
    with compile_section():
        engine = llvm.create_mcjit_compiler(mod, jit.new_target_machine())
        engine.finalize_object()
    f = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_void_p, ctypes.c_int64)(
        engine.get_function_address("running_max"))
    for at in range(64):
        x = np.full(64, -0.0, np.float32)
        x[at] = 0.0
        r = np.float32(f(x.ctypes.data, x.size))
        assert r == 0 and not np.signbit(r), at
    x = np.full(64, np.nan, np.float32)
    assert np.float32(f(x.ctypes.data, 64)) == np.float32(-3.4028234663852886e38)
    x[17] = -0.0
    r = np.float32(f(x.ctypes.data, 64))
    assert r == 0 and np.signbit(r)


# fz_2621_1231 (seed 2621, kernel 1231), minimized: sh[t] = v; __syncthreads();
# u = sh[(t * 3) % nt] with nt = blockDim.x * blockDim.y * blockDim.z.  In the code specialized
# for 64-thread blocks (the second launch) nt is 64, `% 64` is `& 63`, and LLVM's loop
# vectorizer read sh[3 * t] as an interleaved group, as if the index never wrapped: threads
# 22, 23, 43-47 read past the array.  The same LLVM miscompile as fz_300_16, reached through a
# coefficient instead of an offset; codegen.helpers.masks_shifted_thread_index now hides such
# masks from LLVM too.
STRIDED_WRAP = r'''
extern "C" __global__ void strided_wrap(const unsigned *x, unsigned long long *out) {
    __shared__ unsigned sh[256];
    const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned nt = blockDim.x * blockDim.y * blockDim.z;
    const unsigned g = blockIdx.x * nt + t;
    unsigned v = x[(g * 9u + 29u) & 255u];
    __syncthreads();
    sh[t] = v;
    __syncthreads();
    v = sh[(t * 3u) % nt];
    // strided 64-bit stores: the run-time no-wrap check LLVM then wrongly extends to sh's index
    out[g * 3u] = v;
    out[g * 3u + 1u] = x[(g * 25u + 150u) & 255u];
    out[g * 3u + 2u] = g;
}'''


@pytest.mark.parametrize("block", [(64, 1, 1), (32, 2, 1), (128, 1, 1)])
def test_strided_thread_index_modulo_the_block(block: tuple[int, int, int]) -> None:
    nt = block[0] * block[1] * block[2]
    x = np.arange(256, dtype=np.uint32) * 7 + 5
    g = np.arange(2 * nt, dtype=np.uint64)
    t = g % nt
    v = x[(g * 9 + 29) & 255]
    want = np.stack([v[(g - t) + (t * 3) % nt], x[(g * 25 + 150) & 255], g], axis=1).ravel()
    want = want.astype(np.uint64)
    mod = cpuify.RawModule(code=STRIDED_WRAP)
    f = mod.get_function("strided_wrap")
    for _ in range(3):          # the generic code, then the code for the block shape
        out = np.zeros(6 * nt, np.uint64)
        f((2,), block, (x, out))
        np.testing.assert_array_equal(out, want)
    ref = np.zeros(6 * nt, np.uint64)
    interpret_kernel(mod.ptx, "strided_wrap", (2,), block, (x, ref))
    np.testing.assert_array_equal(ref, want)


# fz_2700_9167 (seed 2700, kernel 9167, the 10k run of 2026-11-27), minimized: u0, loaded
# before three barriers, is used only by the threads with threadIdx.y == 1 between the second
# and the third (an atomicMin), and stored widened to 64 bits after the third.  In code
# specialized for (10, 10) blocks, the threads with y != 1 stored another block's u0: min-cut
# fission kept u0 at the second barrier and its 64-bit conversion at the third (recomputed by
# the threads that ran the segment in between), and that segment's thread loop ran only the
# y == 1 threads (thread_ranges), so the others never filled the conversion's slot.  Fixed in
# codegen.thread_loop_plan.thread_ranges: a segment skips threads only when every value kept
# at its next sync point is kept at its resume point too.  Right in generic code, with
# --disable-pass=min-cut-fission and in the reference interpreter all along.
SKIPPED_THREADS = r'''
extern "C" __global__ void skipped(const unsigned *iu, unsigned long long *out) {
  const unsigned lt = threadIdx.x + blockDim.x * threadIdx.y;
  const unsigned gt = blockIdx.x * (blockDim.x * blockDim.y) + lt;
  __shared__ unsigned sat[4];
  unsigned u0 = iu[(gt * 7u + 59u) & 255u];
  unsigned u1 = iu[(gt * 29u + 16u) & 255u];
  unsigned long long w0 = ((unsigned long long)iu[(gt * 39u + 50u) & 255u] << 32) | iu[(gt * 23u + 63u) & 255u];
  long long l0 = (long long)(((unsigned long long)iu[(gt * 7u + 163u) & 255u] << 32) | iu[(gt * 13u + 66u) & 255u]);
  __syncthreads();
  if (lt == 0u) sat[1] = 3u;
  __syncthreads();
  if (threadIdx.y == 1u) { unsigned b = u0 + u0; atomicMin(&sat[1], b ? u0 % b : u0); }
  __syncthreads();
  out[gt * 5u + 0u] = (unsigned long long)u0; out[gt * 5u + 1u] = (unsigned long long)u1;
  out[gt * 5u + 2u] = (unsigned long long)sat[1]; out[gt * 5u + 3u] = w0;
  out[gt * 5u + 4u] = (unsigned long long)l0;
}'''


def _skipped_threads_case(blocks: int) -> tuple[np.ndarray, np.ndarray]:
    iu = (np.arange(256, dtype=np.uint64) * 2654435761 % 2**32).astype(np.uint32)
    gt = np.arange(blocks * 100, dtype=np.uint64)
    want = np.zeros((blocks * 100, 5), np.uint64)
    want[:, 0] = iu[(gt * 7 + 59) & 255]
    want[:, 1] = iu[(gt * 29 + 16) & 255]
    u0 = want[:, 0].reshape(blocks, 100)
    b = (2 * u0) & 0xFFFFFFFF
    rem = np.where(b != 0, u0 % np.where(b != 0, b, 1), u0)    # by hand: the atomicMin's operand
    want[:, 2] = np.minimum(3, rem[:, 10:20].min(axis=1)).repeat(100)
    want[:, 3] = (iu[(gt * 39 + 50) & 255].astype(np.uint64) << np.uint64(32)) | iu[(gt * 23 + 63) & 255]
    want[:, 4] = (iu[(gt * 7 + 163) & 255].astype(np.uint64) << np.uint64(32)) | iu[(gt * 13 + 66) & 255]
    return iu, want


@pytest.mark.parametrize("options", [(), ("--disable-pass=min-cut-fission",)])
def test_threads_skipped_by_a_segment_keep_their_values(options: tuple) -> None:
    iu, want = _skipped_threads_case(3)
    fn = cpuify.RawModule(code=SKIPPED_THREADS, options=options).get_function("skipped")
    for run in ("generic", "specialized"):
        out = np.zeros(300 * 5, np.uint64)
        fn((3,), (10, 10), (iu, out))
        np.testing.assert_array_equal(out.reshape(-1, 5), want, err_msg=run)
    out = np.zeros(300 * 5, np.uint64)
    interpret_kernel(cpuify.RawModule(code=SKIPPED_THREADS).ptx, "skipped", (3,), (10, 10), (iu, out))
    np.testing.assert_array_equal(out.reshape(-1, 5), want, err_msg="interpreter")


# fz_2800_4153 and fz_2800_3789 (seed 2800): a thread's local array, written and then read at
# a run-time index in the segment before a barrier.  The thread loop's accesses carry the
# access group that tells LLVM its iterations (threads) are independent; LLVM's vectorizer
# then took the accesses as free of any dependence, also within one thread, and formed an
# interleaved store group of the array's initialization that sank below the loads of the
# array: each thread read what the previous launch had left in its local memory (right when
# the launch before had the same input, so a second launch hid it).  A segment that writes
# its local memory and accesses it again is now left to LLVM's own dependence analysis.
LOCAL_ARRAY = r'''
extern "C" __global__ void local_array(const unsigned *iu, unsigned *out, unsigned p) {
  unsigned lt = threadIdx.x + blockDim.x * threadIdx.y, gt = blockIdx.x * blockDim.x * blockDim.y + lt;
  unsigned u0 = iu[(gt * 11u + 3u) & 255u];
  unsigned la[8];
  for (unsigned q = 0u; q < 8u; q++) la[q] = iu[(gt + q * 11u) & 255u];
  for (unsigned i = 0u; i < (lt & 3u); i++) u0 = la[(u0 + i) & 7u];
  if (p & 3u) la[0] = u0 * 3u;
  __syncthreads();
  out[gt] = u0;
}'''


def _local_array_expected(iu: np.ndarray, blocks: int, nt: int) -> np.ndarray:
    want = np.zeros(blocks * nt, np.uint32)
    for gt in range(blocks * nt):
        lt = gt % nt
        u0 = int(iu[(gt * 11 + 3) & 255])
        la = [int(iu[(gt + q * 11) & 255]) for q in range(8)]
        for i in range(lt & 3):
            u0 = la[(u0 + i) & 7]
        want[gt] = u0
    return want


@pytest.mark.parametrize("options", [(), ("--passes=",)])
def test_local_array_written_and_read_before_a_barrier(options: tuple) -> None:
    fn = cpuify.RawModule(code=LOCAL_ARRAY, options=options).get_function("local_array")
    rng = np.random.default_rng(2800)
    for run in ("generic", "specialized", "specialized again"):
        iu = rng.integers(0, 2**32, 256, dtype=np.uint32)    # new input: no stale local memory
        for block in ((64, 1, 1), (8, 4, 1)):
            nt = block[0] * block[1]
            out = np.zeros(3 * nt, np.uint32)
            fn((3,), block, (iu, out, np.uint32(2)))
            np.testing.assert_array_equal(out, _local_array_expected(iu, 3, nt), err_msg=f"{run} {block}")
    out = np.zeros(3 * 64, np.uint32)
    interpret_kernel(cpuify.RawModule(code=LOCAL_ARRAY).ptx, "local_array", (3,), (64,),
                     (iu, out, np.uint32(2)))
    np.testing.assert_array_equal(out, _local_array_expected(iu, 3, 64), err_msg="interpreter")


# The fuzzer's same-thread reuse mode (tools/fuzz.py --reuse): a thread writes several words it
# owns in shared or global memory (`s[t * K + j]`, strided; `s[j * nt + t]`, interleaved; through
# a generic pointer to either) and reads or rewrites them before the next barrier, at constant
# and run-time j.  Thread loops carry `llvm.loop.parallel_accesses`, which LLVM reads as "no
# dependence at all", also within one thread: its vectorizer formed an interleaved store group
# of `s[t*4 + 1..3]` (made at the last member's place) past the load `s[t*4 + k]` between them,
# and the load read what the block before had left (KERNEL reuse_shared_strided: 280 of 512
# words wrong, in generic, specialized and --passes= code alike).  codegen.thread_order leaves
# a store and a later access of the same thread that may reach its bytes out of the group.
REUSE = r'''
extern "C" __global__ void reuse_shared_strided(const unsigned *in, unsigned *out) {
  __shared__ unsigned s[128 * 4];
  const unsigned t = threadIdx.x, g = blockIdx.x * blockDim.x + t;
  const unsigned x = in[g & 255u], k = in[(g * 7u + 3u) & 255u];
  s[t * 4u + 0u] = x;
  s[t * 4u + 1u] = x + 1u;
  const unsigned a = s[t * 4u + (k & 1u)];
  s[t * 4u + 1u] = x * 3u + a;
  s[t * 4u + 2u] = x ^ 0x55u;
  s[t * 4u + 3u] = a + 7u;
  const unsigned b = s[t * 4u + ((k >> 1) & 3u)];
  out[g * 2u] = a;
  out[g * 2u + 1u] = b;
}
extern "C" __global__ void reuse_global_strided(const unsigned *in, unsigned *buf, unsigned *out) {
  const unsigned g = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned x = in[g & 255u], k = in[(g * 7u + 3u) & 255u] & 3u;
  buf[g * 4u + 0u] = x;
  const unsigned a = buf[g * 4u + k];            // k > 0: what the host left there
  buf[g * 4u + 1u] = x * 3u + a;
  buf[g * 4u + 2u] = x ^ 0x55u;
  buf[g * 4u + 3u] = x + 7u;
  out[g * 2u] = a;
  out[g * 2u + 1u] = buf[g * 4u + ((k + 1u) & 3u)];
}
extern "C" __global__ void reuse_interleaved(const unsigned *in, unsigned *out, unsigned n) {
  __shared__ unsigned s[5 * 128];
  const unsigned t = threadIdx.x, nt = blockDim.x, g = blockIdx.x * nt + t;
  const unsigned x = in[g & 255u];
  for (unsigned j = 0u; j < 5u; j++) s[j * nt + t] = x + j * 0x9E3779B9u;
  for (unsigned j = 0u; j < 5u; j++) s[(4u - j) * nt + t] = s[j * nt + t] * 3u + s[(4u - j) * nt + t];
  unsigned h = 0u;
  for (unsigned j = 0u; j < n; j++) h = h * 33u + s[((j * 3u + x) % 5u) * nt + t];
  out[g] = h;
}
extern "C" __global__ void reuse_global_interleaved(const unsigned *in, unsigned *buf, unsigned *out) {
  const unsigned nt = gridDim.x * blockDim.x, g = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned x = in[g & 255u], k = in[(g * 11u + 2u) & 255u];
  buf[0u * nt + g] = x;
  buf[2u * nt + g] = x ^ k;
  const unsigned a = buf[(k & 3u) * nt + g];
  buf[1u * nt + g] = a + x;
  buf[3u * nt + g] = buf[((k >> 2) & 3u) * nt + g] * 5u;
  out[g] = buf[((k >> 4) & 3u) * nt + g];
}
extern "C" __global__ void reuse_generic(const unsigned *in, unsigned *buf, unsigned *out, unsigned sel) {
  __shared__ unsigned s[128 * 3];
  const unsigned t = threadIdx.x, g = blockIdx.x * blockDim.x + t;
  unsigned *p = ((t ^ sel) & 1u) ? &s[t * 3u] : &buf[g * 3u];
  const unsigned x = in[g & 255u], k = in[(g * 5u + 1u) % 256u] % 3u;
  p[0] = x; p[1] = x * 7u; p[2] = x + 11u;
  p[k] = p[(k + 1u) % 3u] ^ p[k];
  const unsigned a = p[(k + 2u) % 3u];
  p[2] = a + p[k];
  out[g * 2u] = a;
  out[g * 2u + 1u] = p[2] + p[0];
}'''

_M32 = 0xFFFFFFFF


def _reuse_expected(name: str, x: np.ndarray, buf: np.ndarray, nthreads: int, block: int,
                    n: int = 0, sel: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Each thread's statements in order, in Python: (out, buf after the kernel)."""
    buf = buf.astype(np.int64) & _M32
    words = 2 if name in ("reuse_shared_strided", "reuse_global_strided", "reuse_generic") else 1
    out = np.zeros(nthreads * words, np.int64)
    for g in range(nthreads):
        t = g % block
        xv = int(x[g & 255])
        if name == "reuse_shared_strided":
            k = int(x[(g * 7 + 3) & 255])
            s = [xv, (xv + 1) & _M32, 0, 0]
            a = s[k & 1]
            s[1], s[2], s[3] = (xv * 3 + a) & _M32, xv ^ 0x55, (a + 7) & _M32
            out[2 * g:2 * g + 2] = a, s[(k >> 1) & 3]
        elif name == "reuse_global_strided":
            k = int(x[(g * 7 + 3) & 255]) & 3
            w = buf[g * 4:g * 4 + 4]
            w[0] = xv
            a = int(w[k])
            w[1], w[2], w[3] = (xv * 3 + a) & _M32, xv ^ 0x55, (xv + 7) & _M32
            out[2 * g:2 * g + 2] = a, w[(k + 1) & 3]
        elif name == "reuse_interleaved":
            s = [(xv + j * 0x9E3779B9) & _M32 for j in range(5)]
            for j in range(5):
                s[4 - j] = (s[j] * 3 + s[4 - j]) & _M32
            h = 0
            for j in range(n):
                h = (h * 33 + s[(j * 3 + xv) % 5]) & _M32
            out[g] = h
        elif name == "reuse_global_interleaved":
            k = int(x[(g * 11 + 2) & 255])
            at = lambda j: j * nthreads + g  # noqa: E731
            buf[at(0)], buf[at(2)] = xv, xv ^ k
            a = int(buf[at(k & 3)])
            buf[at(1)] = (a + xv) & _M32
            buf[at(3)] = (int(buf[at((k >> 2) & 3)]) * 5) & _M32
            out[g] = buf[at((k >> 4) & 3)]
        else:
            k = int(x[(g * 5 + 1) % 256]) % 3
            p = [xv, (xv * 7) & _M32, (xv + 11) & _M32]
            p[k] = p[(k + 1) % 3] ^ p[k]
            a = p[(k + 2) % 3]
            p[2] = (a + p[k]) & _M32
            out[2 * g:2 * g + 2] = a, (p[2] + p[0]) & _M32
            if not (t ^ sel) & 1:
                buf[g * 3:g * 3 + 3] = p
    return out.astype(np.uint32), buf.astype(np.uint32)


@pytest.fixture(scope="module")
def reuse_module() -> cpuify.RawModule:
    return cpuify.RawModule(code=REUSE)


@pytest.mark.parametrize("name", ["reuse_shared_strided", "reuse_global_strided", "reuse_interleaved",
                                  "reuse_global_interleaved", "reuse_generic"])
def test_same_thread_reuse_before_a_barrier(reuse_module: cpuify.RawModule, name: str) -> None:
    grid, block = 2, 128
    total = grid * block
    words = {"reuse_shared_strided": 2, "reuse_global_strided": 2, "reuse_generic": 2}.get(name, 1)
    buf_words = {"reuse_global_strided": 4 * total, "reuse_global_interleaved": 4 * total,
                 "reuse_generic": 3 * total}.get(name, 1)
    rng = np.random.default_rng(17)
    fn = reuse_module.get_function(name)
    for run in ("generic", "specialized", "specialized again", "interpreter"):
        x = rng.integers(0, 2**32, 256, dtype=np.uint32)    # new inputs: no stale memory helps
        buf = rng.integers(0, 2**32, buf_words, dtype=np.uint32)
        out = np.zeros(total * words, np.uint32)
        args: tuple = (x, out)
        n, sel = int(rng.integers(3, 12)), int(rng.integers(0, 2))
        if name == "reuse_interleaved":
            args = (x, out, np.uint32(n))
        elif name == "reuse_generic":
            args = (x, buf, out, np.uint32(sel))
        elif name != "reuse_shared_strided":
            args = (x, buf, out)
        want_out, want_buf = _reuse_expected(name, x, buf, total, block, n, sel)
        if run == "interpreter":
            interpret_kernel(reuse_module.ptx, name, (grid,), (block,), args)
        else:
            fn((grid,), (block,), args)
        np.testing.assert_array_equal(out, want_out, err_msg=run)
        if buf_words > 1:
            np.testing.assert_array_equal(buf, want_buf, err_msg=run)


SOUND_REUSE = r'''
extern "C" __global__ void consecutive(const float *x, float *a, float *b, unsigned *s_out) {
  __shared__ float s[256];
  const unsigned t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  a[i] = x[i] * 2.0f;            // consecutive stores through parameters that may overlap,
  b[i] = x[i] + a[i];            // read back: no interleaved group can move them
  s[t] = b[i];
  __syncthreads();
  s_out[i] = __float_as_uint(s[(t + 1u) % blockDim.x]);
}'''


def _raw_segments(src: str, name: str) -> dict[str, str]:
    """The raw LLVM IR (before LLVM's optimization) of each segment function of `name`."""
    from cpuify.codegen import jit
    from cpuify.codegen.llvm_gen import ModuleCodegen
    from cpuify.compiler import lift_and_optimize
    from cpuify.frontend.nvrtc import compile_to_ptx
    from cpuify.frontend.ptx_parser import parse_ptx
    from cpuify.transforms.pass_manager import PipelineOptions
    module = parse_ptx(compile_to_ptx(src, filename="k.cu").ptx)
    entry = next(e for e in module.entries if e.name == name)
    lifted, _ = lift_and_optimize(module, entry, PipelineOptions(), None)
    gen = ModuleCodegen(module, *jit.triple_and_layout())
    gen.add_kernel(lifted, None)
    text = gen.llvm_text()
    return {m.group(1): m.group(2) for m in re.finditer(
        r'define internal i32 @"(cpuify_seg_\w+)"\(.*?\n\{\n(.*?)\n\}', text, re.DOTALL)}


def test_reuse_keeps_the_access_group_where_no_access_can_move() -> None:
    """Consecutive accesses never join an interleaved group: a thread loop that writes a[i],
    reads it back and writes b[i] and s[t] stays parallel (every shared/global access in
    the group); the strided kernel's reused words leave it."""
    seg = _raw_segments(SOUND_REUSE, "consecutive")["cpuify_seg_consecutive_0"]
    accesses = [ln for ln in seg.splitlines() if re.search(r"= load float|store float", ln)
                and '%"v.' not in ln]              # (the segment's own allocas: no memory)
    assert len(accesses) >= 5
    assert all("!llvm.access.group" in ln for ln in accesses), accesses
    seg = _raw_segments(REUSE, "reuse_shared_strided")["cpuify_seg_reuse_shared_strided_0"]
    shared = [ln for ln in seg.splitlines() if re.search(r"(= load|store) i32 .*align 4", ln)]
    assert any("!llvm.access.group" not in ln for ln in shared), shared


# The fuzzer's fz_2805_92 (its reuse mode): a generic pointer into shared (or local) memory,
# made before a barrier and used after it, where the thread stores through it and loads the
# array again by name.  Segment functions took shared memory, and the scratch area that holds
# local memory, as noalias arguments; the pointer kept across the barrier comes back from the
# slots, not based on those arguments, so LLVM took the load as independent of the store and
# 4-11 of 64 threads read stale words (generic, specialized and --passes= code alike).  Those
# areas are now noalias only where the kernel makes none of their addresses generic.
GENERIC_ACROSS = r'''
extern "C" __global__ void shared_across(const unsigned *in, unsigned *out, unsigned *scr) {
  __shared__ unsigned s[128];
  const unsigned lt = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned nt = blockDim.x * blockDim.y * blockDim.z;
  const unsigned g = blockIdx.x * nt + lt;
  unsigned u = in[(g * 3u + 163u) & 255u];
  for (unsigned q = 0u; q < 4u; q++) s[lt * 4u + q] = in[(g * 25u + q) & 255u];
  unsigned *rp = (lt & 1u) ? &s[lt * 4u] : &scr[g * 4u];
  __syncthreads();
  for (unsigned i = 0u; i < 2u; i++) {
    u = (u * 31u) ^ s[lt * 4u + (u % 4u)];
    rp[2u] = u;
  }
  out[g] = u;
}
extern "C" __global__ void local_across(const unsigned *in, unsigned *out, unsigned *scr) {
  __shared__ unsigned s[32];
  unsigned la[4];
  const unsigned lt = threadIdx.x, g = blockIdx.x * blockDim.x + lt;
  unsigned u = in[(g * 3u + 163u) & 255u];
  for (unsigned q = 0u; q < 4u; q++) la[q] = in[(g * 25u + q) & 255u];
  unsigned *rp = (lt & 1u) ? la : &scr[g * 4u];
  s[lt] = u;
  __syncthreads();
  u ^= s[lt ^ 1u];
  for (unsigned i = 0u; i < 2u; i++) {
    u = (u * 31u) ^ la[u % 4u];
    rp[2u] = u;
  }
  out[g] = u;
}
'''


def _generic_across_expected(iu: np.ndarray, blocks: int, nt: int, local: bool) -> np.ndarray:
    out = np.zeros(blocks * nt, np.uint32)
    start = [int(iu[(g * 3 + 163) & 255]) for g in range(blocks * nt)]
    for g in range(blocks * nt):
        lt = g % nt
        words = [int(iu[(g * 25 + q) & 255]) for q in range(4)]
        u = start[g] ^ start[g - lt + (lt ^ 1)] if local else start[g]
        for _ in range(2):
            u = ((u * 31) % 2**32) ^ words[u % 4]
            if lt & 1:
                words[2] = u
        out[g] = u
    return out


@pytest.mark.parametrize("options", [(), ("--passes=",)], ids=["passes", "no-passes"])
@pytest.mark.filterwarnings("error::cpuify.errors.SpecializationWarning")
def test_generic_pointer_into_shared_or_local_memory_kept_across_a_barrier(options: tuple) -> None:
    """Also: the rows split at a cache line (speculation.aligned_split) rematerialize the
    values kept across the barrier for threads 0 and 1, `rp` among them; a cvta of a local
    address there had no thread's local memory and the specialization failed."""
    mod = cpuify.RawModule(code=GENERIC_ACROSS, options=options)
    rng = np.random.default_rng(2805)
    for name, local, blocks in (("shared_across", False, ((2, 2, 8), (32, 1, 1))),
                                ("local_across", True, ((32, 1, 1),))):
        fn = mod.get_function(name)
        for run in ("generic", "specialized", "specialized again"):
            iu = rng.integers(0, 2**32, 256, dtype=np.uint32)
            for block in blocks:
                nt = int(np.prod(block))
                out, scr = np.zeros(2 * nt, np.uint32), np.zeros(8 * nt, np.uint32)
                fn((2,), block, (iu, out, scr))
                np.testing.assert_array_equal(out, _generic_across_expected(iu, 2, nt, local),
                                              err_msg=f"{name} {run} {block}")
        out, scr = np.zeros(64, np.uint32), np.zeros(256, np.uint32)
        interpret_kernel(mod.ptx, name, (2,), blocks[0], (iu, out, scr))
        np.testing.assert_array_equal(out, _generic_across_expected(iu, 2, 32, local), err_msg=f"{name} interpreter")


# The fuzzer's fz_2807_2107: codegen/thread_order's steps per thread are modulo 2^32 for
# 32-bit values.  NVRTC computes `gt * 4` here as `gt * 37 + gt * -33`; the -33 read as the
# unsigned 4294967263 made the stores' step 16 + 2^34 bytes, no interleaved group, so the
# store of 1000 kept the access group while LLVM's group of the four stores could sink below
# the thread's load of one of them.
WRAPPED_STRIDE = r'''
extern "C" __global__ void wrapped_stride(const unsigned *iu, unsigned *scr, unsigned *out) {
  const unsigned lt = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned nt = blockDim.x * blockDim.y * blockDim.z;
  const unsigned gt = (blockIdx.x + gridDim.x * blockIdx.y) * nt + lt;
  __shared__ unsigned s[256];
  unsigned u0 = iu[(gt * 7u + 183u) & 255u];
  unsigned u1 = iu[(gt * 21u + 12u) & 255u];
  for (unsigned q = 0u; q < 4u; q++) s[q * nt + lt] = iu[(gt * 37u + q) & 255u];
  scr[gt * 4u + 3u] = 1000u;
  u0 = (u0 * 33u) ^ scr[gt * 4u + (u0 % 4u)];
  scr[gt * 4u + 2u] = u0 >> 3;
  scr[gt * 4u + 1u] = threadIdx.x;
  scr[gt * 4u + 0u] = u1;
  s[lt] = s[lt] * 3u + u1;
  u1 = (unsigned)__syncthreads_or(u0 == 7u);
  out[gt] = u0 + u1 + s[lt];
}'''


def test_thread_steps_wrap_modulo_the_integer_width() -> None:
    seg = _raw_segments(WRAPPED_STRIDE, "wrapped_stride")["cpuify_seg_wrapped_stride_0"]
    lines = seg.splitlines()
    store = next(ln for ln in lines if re.search(r"store i32 1000, .*align 4", ln))
    assert "!llvm.access.group" not in store, store
    rng = np.random.default_rng(11)
    iu = rng.integers(0, 2**32, 256, dtype=np.uint64).astype(np.uint32)
    scr0 = rng.integers(0, 2**32, 64 * 4, dtype=np.uint64).astype(np.uint32)
    want_scr, want, u0s = scr0.copy(), np.zeros(64, np.uint32), []
    for g in range(64):
        lt = g % 32
        u0, u1 = int(iu[(g * 7 + 183) & 255]), int(iu[(g * 21 + 12) & 255])
        want_scr[g * 4 + 3] = 1000
        u0 = ((u0 * 33) & 0xFFFFFFFF) ^ int(want_scr[g * 4 + u0 % 4])
        want_scr[g * 4 + 2], want_scr[g * 4 + 1], want_scr[g * 4] = u0 >> 3, lt % 8, u1
        s = (int(iu[(g * 37) & 255]) * 3 + u1) & 0xFFFFFFFF
        want[g] = (u0 + s) & 0xFFFFFFFF                 # __syncthreads_or: 0 (below)
        u0s.append(u0)
    assert 7 not in u0s
    for shape in ((8, 4, 1), (8, 4, 1)):               # the generic code, then specialized
        scr, out = scr0.copy(), np.zeros(64, np.uint32)
        cpuify.RawKernel(WRAPPED_STRIDE, "wrapped_stride")((2,), shape, (iu, scr, out))
        np.testing.assert_array_equal(scr, want_scr)
        np.testing.assert_array_equal(out, want)


# fz_4243_69 (seed 4243, kernel 69, the half-precision mode's first run): `cond ? __high2half(q)
# : h`.  cuda_fp16.h's __high2half is `mov.b32 {low,high}, q; mov.b16 r, high`: the unpacking
# mov has one operand and two results.  select-if-phis took it for a copy of its operand and
# selected the packed 32-bit q itself (a `selp.b16` of an i32, truncated to its low half): the
# low half where the high one was meant, in every native variant with passes.  Analyses that
# see through moves (thread indices, access forms and maps, loop order, warp masks) read
# through it the same way; none of them does now.
HIGH_HALF = r'''
#include <cuda_fp16.h>
extern "C" __global__ void high_half(const unsigned *in, unsigned short *out) {
    int i = threadIdx.x;
    unsigned u = in[2 * i];
    __half h = __ushort_as_half((unsigned short)in[2 * i + 1]);
    __half2 q = __halves2half2(__ushort_as_half((unsigned short)u), __ushort_as_half((unsigned short)(u >> 16)));
    __half b = h != __low2half(q) ? __high2half(q) : h;
    out[i] = __half_as_ushort(b);
}'''


@pytest.mark.parametrize("run", ["compiled", "interpreter"])
def test_high_half_selected_in_an_if(run: str) -> None:
    rng = np.random.default_rng(0)
    n = 256
    inp = rng.integers(0, 2**32, 2 * n, dtype=np.uint64).astype(np.uint32)
    h, lo, hi = inp[1::2] & 0xFFFF, inp[0::2] & 0xFFFF, inp[0::2] >> 16
    equal = h.astype(np.uint16).view(np.float16) == lo.astype(np.uint16).view(np.float16)
    want = np.where(equal, h, hi).astype(np.uint16)
    out = np.zeros(n, np.uint16)
    if run == "compiled":
        cpuify.RawModule(code=HIGH_HALF).get_function("high_half")((1,), (n,), (inp, out))
    else:
        from cpuify.frontend.nvrtc import compile_to_ptx
        interpret_kernel(compile_to_ptx(HIGH_HALF).ptx, "high_half", (1,), (n,), (inp, out))
    np.testing.assert_array_equal(out, want)


def test_select_if_phis_keeps_an_unpacked_half() -> None:
    """No selp select-if-phis makes reads the packed value (an i32) for the high half."""
    from cpuify.frontend.nvrtc import compile_to_ptx
    from cpuify.frontend.ptx_parser import parse_ptx
    from cpuify.lifting.lift import lift_kernel
    from cpuify.transforms.pass_manager import PipelineOptions, run_pipeline
    module = parse_ptx(compile_to_ptx(HIGH_HALF).ptx)
    kernel = lift_kernel(module, module.functions["high_half"]).op
    run_pipeline(kernel, PipelineOptions(passes=("raise-structured-cf", "select-if-phis")))
    for sel in (op for op in kernel.walk() if op.name == "ptx.selp"):
        assert all(v.type == sel.results[0].type for v in sel.operands[:2]), \
            [v.type for v in sel.operands]


def test_verifier_rejects_a_select_of_another_type() -> None:
    """What caught nothing then: the verifier (run after lifting, and after each pass with
    --verify-each) now rejects a selp whose chosen values differ in type from its result."""
    from cpuify.errors import IRError
    from cpuify.ir.core import Operation
    from cpuify.ir.dialects import verify_op
    a, b, p = (Operation("upir.const", [], [t], {"value": 0}) for t in ("i16", "i32", "i1"))
    bad = Operation("ptx.selp", [a.result, b.result, p.result], ["i16"], {"mods": ["b16"]})
    with pytest.raises(IRError, match="selects between i16 and i32"):
        verify_op(bad)
    verify_op(Operation("ptx.selp", [a.result, a.result, p.result], ["i16"], {"mods": ["b16"]}))


# fz_4243_574 (the half mode again): `__hmin_nan(sNaN, x)` gave x.  LLVM 22 lowers
# llvm.minimum/maximum on x86, where it knows one operand is no NaN (here the other is an
# integer converted to float), as a vfpclass test of the first for the *quiet* NaN class,
# a swap and the CPU's min, which returns its second operand for any NaN: a signaling NaN
# (bits 0x7cd0 from integer arithmetic) went unnoticed.  min/max.NaN now quiet their operands
# first (llvm.canonicalize).
SNAN_MIN = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 pin, .param .u64 pout)
{
	.reg .b16 %rs<8>; .reg .b32 %r<8>; .reg .b64 %rd<8>; .reg .f32 %f<8>;
	ld.param.u64 %rd1, [pin]; ld.param.u64 %rd2, [pout];
	mov.u32 %r0, %tid.x;
	mul.wide.u32 %rd3, %r0, 4; add.s64 %rd4, %rd1, %rd3;
	add.s64 %rd6, %rd2, %rd3;
	ld.global.u32 %r1, [%rd4];
BODY
	ret;
}
"""
#: op -> (PTX computing a NaN-or-not result from u, stored; the first operand as NumPy makes it)
SNAN_OPS = {
    "min.NaN.f16": ("\tcvt.u16.u32 %rs1, %r1;\n\tneg.s16 %rs2, %rs1;\n\tcvt.rn.f16.u32 %rs3, %r1;\n"
                    "\tmin.NaN.f16 %rs4, %rs2, %rs3;\n\tcvt.u32.u16 %r3, %rs4;\n\tst.global.u32 [%rd6], %r3;", 16),
    "max.NaN.f16": ("\tcvt.u16.u32 %rs1, %r1;\n\tneg.s16 %rs2, %rs1;\n\tcvt.rn.f16.u32 %rs3, %r1;\n"
                    "\tmax.NaN.f16 %rs4, %rs2, %rs3;\n\tcvt.u32.u16 %r3, %rs4;\n\tst.global.u32 [%rd6], %r3;", 16),
    "min.NaN.f32": ("\tneg.s32 %r2, %r1;\n\tmov.b32 %f1, %r2;\n\tcvt.rn.f32.u32 %f2, %r1;\n"
                    "\tmin.NaN.f32 %f3, %f1, %f2;\n\tst.global.f32 [%rd6], %f3;", 32),
    "max.NaN.f32": ("\tneg.s32 %r2, %r1;\n\tmov.b32 %f1, %r2;\n\tcvt.rn.f32.u32 %f2, %r1;\n"
                    "\tmax.NaN.f32 %f3, %f1, %f2;\n\tst.global.f32 [%rd6], %f3;", 32),
}


@pytest.mark.parametrize("run", ["compiled", "interpreter"])
@pytest.mark.parametrize("op", sorted(SNAN_OPS))
def test_min_max_nan_of_a_signaling_nan(op: str, run: str) -> None:
    body, bits = SNAN_OPS[op]
    ptx = SNAN_MIN.replace("BODY", body)
    # -u is a signaling NaN: f16 0x7cd0, 0x7ccf; f32 0xff8000d0, 0xff800001
    u = np.array([0x0E408331, 0x8330, 0x007FFF30, 0x007FFFFF, 0x12345678, 5, 77], np.uint32)
    out = np.zeros(u.size, np.uint32)
    if run == "compiled":
        cpuify.RawModule(ptx=ptx).get_function("k")((1,), (u.size,), (u, out))
    else:
        interpret_kernel(ptx, "k", (1,), (u.size,), (u, out))
    neg = (-u.astype(np.int64)) & ((1 << bits) - 1)
    if bits == 16:
        a, got = neg.astype(np.uint16).view(np.float16), out.astype(np.uint16).view(np.float16)
    else:
        a, got = neg.astype(np.uint32).view(np.float32), out.view(np.float32)
    nan = np.isnan(a)
    assert nan.sum() >= 2 and np.isnan(got[nan]).all(), (got, a)


# fz_4244_266 (seed 4244 --half, kernel 266): `a * a + __uint2half_rd(u)` with u built from
# `__brev(threadIdx.z)`, in code specialized for 4 z threads, gave inf for u = 2^31 instead of
# 65504 + a * a rounded: LLVM (22.1) folds `fpext(fptrunc(uitofp x))` to `uitofp x` where x's
# known bits fit f16's significand (2^31 is one bit wide), so the directed rounding saw no
# error; an overflow's error is now taken from the value (ptx_spec_convert._half_error).
HALF_OF_BREV = r'''
#include <cuda_fp16.h>
extern "C" __global__ void half_of_brev(const unsigned short *in, unsigned short *out) {
    const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned u = (2147483648u & threadIdx.z) ^ __brev(threadIdx.z);
    const __half a = __ushort_as_half(in[t]);
    out[2 * t] = __half_as_ushort(a * a + __uint2half_rd(u));
    out[2 * t + 1] = __half_as_ushort(a * a + __int2half_ru(-(int)(u >> 1)));
}'''


@pytest.mark.parametrize("run", ["generic", "specialized"])
def test_integer_to_half_directed_overflow(run: str) -> None:
    fn = cpuify.RawModule(code=HALF_OF_BREV).get_function("half_of_brev")
    a = np.full(64, 0.5, np.float16)
    for _ in range(1 if run == "generic" else 2):       # the second launch: specialized code
        out = np.zeros(128, np.uint16)
        fn((1,), (4, 4, 4), (a.view(np.uint16), out))
    # z = 0: u = 0, 0.5 * 0.5 in both; z > 0: u >= 2^30, which rounds down (rd) to f16's
    # largest finite value 65504 (+0.25 rounds back to it), and -(u >> 1) <= -2^29 up (ru)
    # to -65504 (-65503.75 rounds to it); to nearest both would be infinities
    want = np.array([[0x3400, 0x3400]] * 16 + [[0x7BFF, 0xFBFF]] * 48, np.uint16).ravel()
    np.testing.assert_array_equal(out, want)
