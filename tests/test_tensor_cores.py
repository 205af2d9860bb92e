"""Tensor-core instructions (wmma.*, mma.sync, ldmatrix): compiled kernels against NumPy with
the rounding the types imply, the reference interpreter against the same, and the fragment
layouts against what an H100 showed (tests/data/wmma_layouts_h100.txt: each wmma fragment
loaded from a matrix whose elements are their own indices, per lane and register element;
and three wmma products on fixed inputs)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from cpuify import RawModule
from cpuify.errors import CpuifyError
from cpuify.interp import interpret_kernel
from cpuify.lifting.tensor_cores import lane_elements, layout

DATA = Path(__file__).parent / "data" / "wmma_layouts_h100.txt"


# ---- layouts against the H100 readout ----

def _readout() -> tuple[dict, dict]:
    loads: dict[tuple[str, int], dict[int, list[int]]] = {}
    products: dict[str, np.ndarray] = {}
    for line in DATA.read_text().splitlines():
        head, vals = line.split(":")
        if head.startswith("mm."):
            products[head] = np.array(vals.split(), dtype=np.float64)
            continue
        name, shift, lane, _ = head.split()
        loads.setdefault((name, int(shift)), {})[int(lane)] = [int(float(v)) for v in vals.split()]
    return loads, products


def test_wmma_layouts_match_h100():
    loads, _ = _readout()
    checked = 0
    for (name, shift), lanes in loads.items():
        if shift:
            continue
        high = loads.get((name, 8))
        parts = name.split(".")
        m, n, k = (int(x) for x in re.match(r"m(\d+)n(\d+)k(\d+)", parts[0]).groups())  # type: ignore[union-attr]
        if parts[1] == "c":
            matrix, ptx_type, order, rows, cols = "c", parts[2], "row", m, n
        else:
            ptx_type, matrix, order = parts[1], parts[2], parts[3]
            rows, cols = (m, k) if matrix == "a" else (k, n)
        lay = layout("wmma", parts[0], ptx_type, matrix)
        assert lay is not None, name
        for lane, values in lanes.items():
            got = []
            for i, v in enumerate(values):
                index = v + (256 * high[lane][i] if high else 0)
                got.append(divmod(index, cols) if order == "row" else divmod(index, rows)[::-1])
            assert lane_elements(lay, lane) == got, (name, lane)
            checked += 1
    assert checked == 32 * 55        # every fragment the readout has


# ---- kernels ----

WMMA_SRC = r"""
#include <mma.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
using namespace nvcuda;
typedef __nv_bfloat16 bf16;

template <int M, int N, int K, class TI, class TA, class LA, class LB, class TC, bool SCALE>
__device__ void tile(const TI* a, const TI* b, const TC* c, TC* d, int lda, int ldb, int ldc,
                     wmma::layout_t cl) {
    wmma::fragment<wmma::matrix_a, M, N, K, TA, LA> fa;
    wmma::fragment<wmma::matrix_b, M, N, K, TA, LB> fb;
    wmma::fragment<wmma::accumulator, M, N, K, TC> fc;
    wmma::load_matrix_sync(fa, a, lda);
    wmma::load_matrix_sync(fb, b, ldb);
    wmma::load_matrix_sync(fc, c, ldc, cl);
    if (SCALE) {
        for (int i = 0; i < fc.num_elements; i++) fc.x[i] = fc.x[i] * (TC)2;   // element-wise
    }
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(d, fc, ldc, cl);
}

#define K_(name, M, N, K, TI, TA, LA, LB, TC, CL) \
extern "C" __global__ void name(const TI* a, const TI* b, const TC* c, TC* d, int lda, int ldb, \
                                int ldc) { \
    int w = threadIdx.x / 32; \
    tile<M, N, K, TI, TA, LA, LB, TC, true>(a + w * M * K, b, c + w * M * N, d + w * M * N, \
                                          lda, ldb, ldc, CL); }

using wmma::row_major; using wmma::col_major;
K_(f16_rr_f32, 16, 16, 16, half, half, row_major, row_major, float, wmma::mem_row_major)
K_(f16_rc_f32, 16, 16, 16, half, half, row_major, col_major, float, wmma::mem_col_major)
K_(f16_m32_f32, 32, 8, 16, half, half, row_major, col_major, float, wmma::mem_row_major)
K_(f16_m8_f16, 8, 32, 16, half, half, col_major, row_major, half, wmma::mem_row_major)
K_(f16_rr_f16, 16, 16, 16, half, half, row_major, row_major, half, wmma::mem_row_major)
K_(bf16_rr, 16, 16, 16, bf16, bf16, row_major, row_major, float, wmma::mem_row_major)
K_(bf16_m32, 32, 8, 16, bf16, bf16, row_major, col_major, float, wmma::mem_col_major)
K_(s8_rr, 16, 16, 16, signed char, signed char, row_major, row_major, int, wmma::mem_row_major)
K_(u8_m8, 8, 32, 16, unsigned char, unsigned char, row_major, col_major, int, wmma::mem_row_major)
K_(tf32_rr, 16, 16, 8, float, wmma::precision::tf32, row_major, row_major, float, wmma::mem_row_major)
K_(f64_rc, 8, 8, 4, double, double, row_major, col_major, double, wmma::mem_row_major)
"""

#: kernel -> (M, N, K, input dtype, A order, B order, acc dtype, C/D order)
CASES = {
    "f16_rr_f32": (16, 16, 16, np.float16, "row", "row", np.float32, "row"),
    "f16_rc_f32": (16, 16, 16, np.float16, "row", "col", np.float32, "col"),
    "f16_m32_f32": (32, 8, 16, np.float16, "row", "col", np.float32, "row"),
    "f16_m8_f16": (8, 32, 16, np.float16, "col", "row", np.float16, "row"),
    "f16_rr_f16": (16, 16, 16, np.float16, "row", "row", np.float16, "row"),
    "bf16_rr": (16, 16, 16, "bf16", "row", "row", np.float32, "row"),
    "bf16_m32": (32, 8, 16, "bf16", "row", "col", np.float32, "col"),
    "s8_rr": (16, 16, 16, np.int8, "row", "row", np.int32, "row"),
    "u8_m8": (8, 32, 16, np.uint8, "row", "col", np.int32, "row"),
    "tf32_rr": (16, 16, 8, "tf32", "row", "row", np.float32, "row"),
    "f64_rc": (8, 8, 4, np.float64, "row", "col", np.float64, "row"),
}


@pytest.fixture(scope="module")
def wmma_module():
    return RawModule(code=WMMA_SRC, options=("-arch=sm_80",))


def _bf16(x: np.ndarray) -> np.ndarray:
    """bf16 values (as float32) and their bits (uint16), round to nearest even."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return u


def _inputs(case, warps, rng):
    m, n, k, tin, a_order, b_order, tacc, c_order = case
    if tin in (np.int8, np.uint8):
        lo, hi = (-128, 128) if tin == np.int8 else (0, 256)
        a_val = rng.integers(lo, hi, (warps * m, k)).astype(np.int64)
        b_val = rng.integers(lo, hi, (k, n)).astype(np.int64)
        a_mem, b_mem = a_val.astype(tin), b_val.astype(tin)
    else:
        a_val = rng.standard_normal((warps * m, k))
        b_val = rng.standard_normal((k, n))
        if tin == "bf16":
            a_bits, b_bits = _bf16(a_val), _bf16(b_val)
            a_val = (a_bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
            b_val = (b_bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
            a_mem, b_mem = a_bits, b_bits
        elif tin == "tf32":
            # values already in tf32 (as __float_to_tf32 leaves them): 10-bit mantissas
            a_mem = (a_val.astype(np.float32).view(np.uint32) & 0xFFFFE000).view(np.float32)
            b_mem = (b_val.astype(np.float32).view(np.uint32) & 0xFFFFE000).view(np.float32)
            a_val, b_val = a_mem.astype(np.float64), b_mem.astype(np.float64)
        else:
            a_mem, b_mem = a_val.astype(tin), b_val.astype(tin)
            a_val, b_val = a_mem.astype(np.float64), b_mem.astype(np.float64)
    c_val = (rng.integers(-1000, 1000, (warps * m, n)) if tacc == np.int32
             else rng.standard_normal((warps * m, n))).astype(tacc)
    return a_val, b_val, c_val, a_mem, b_mem


def _reference(case, a_val, b_val, c_val):
    """D = 2C + AB with the documented order: C first, then k = 0, 1, ... each addition
    rounded to the accumulator's working precision (f32; f64 for f64; exact integers)."""
    m, n, k, tin, *_ , tacc, _c = case
    if tacc == np.int32:
        d = 2 * c_val.astype(np.int64) + a_val @ b_val
        return ((d.reshape(c_val.shape) + 2**31) % 2**32 - 2**31).astype(np.int32)
    if tacc == np.float64:
        return 2 * c_val + a_val @ b_val    # (NumPy's sum order: compared with a tolerance)
    d = (c_val.astype(np.float32) * np.float32(2)).astype(tacc).astype(np.float32)
    a32, b32 = a_val.astype(np.float32), b_val.astype(np.float32)
    for kk in range(k):
        d = (d + np.outer(a32[:, kk], b32[kk, :]).astype(np.float32)).astype(np.float32)
    return d.astype(tacc)


def _arrays(case, a_mem, b_mem, c_val):
    m, n, k, tin, a_order, b_order, tacc, c_order = case
    warps = a_mem.shape[0] // m
    # every warp's tile is a row block of A, C and D; memory order per the layouts
    if a_order == "col":
        a_arr = np.concatenate([a_mem[w * m:(w + 1) * m].T.reshape(-1) for w in range(warps)])
        lda = m
    else:
        a_arr, lda = a_mem.reshape(-1), k
    b_arr, ldb = (b_mem.T.reshape(-1), k) if b_order == "col" else (b_mem.reshape(-1), n)
    if c_order == "col":
        c_arr = np.concatenate([c_val[w * m:(w + 1) * m].T.reshape(-1) for w in range(warps)])
        ldc = m
    else:
        c_arr, ldc = c_val.reshape(-1), n
    return a_arr.copy(), b_arr.copy(), c_arr.copy(), lda, ldb, ldc


def _unpack(case, d_arr, warps):
    m, n, k, tin, a_order, b_order, tacc, c_order = case
    if c_order == "col":
        return np.concatenate([d_arr[w * m * n:(w + 1) * m * n].reshape(n, m).T for w in range(warps)])
    return d_arr.reshape(warps * m, n)


def _check(case, got, want):
    tacc = case[6]
    if tacc == np.int32 or case[3] != np.float64 and tacc == np.float32:
        np.testing.assert_array_equal(got, want)
    elif tacc == np.float16:
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    else:
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("name", list(CASES))
def test_wmma_kernels_match_numpy_and_interpreter(wmma_module, name):
    case = CASES[name]
    warps = 2
    rng = np.random.default_rng(len(name))
    a_val, b_val, c_val, a_mem, b_mem = _inputs(case, warps, rng)
    want = _reference(case, a_val, b_val, c_val)
    a, b, c, lda, ldb, ldc = _arrays(case, a_mem, b_mem, c_val)
    d = np.zeros_like(c)
    wmma_module.get_function(name)((1,), (32 * warps,), (a, b, c, d, np.int32(lda),
                                                         np.int32(ldb), np.int32(ldc)))
    _check(case, _unpack(case, d, warps), want)
    d_interp = np.zeros_like(c)
    interpret_kernel(wmma_module.ptx, name, (1, 1, 1), (32 * warps, 1, 1),
                     (a.copy(), b.copy(), c.copy(), d_interp, np.int32(lda), np.int32(ldb),
                      np.int32(ldc)))
    _check(case, _unpack(case, d_interp, warps), want)


def test_wmma_products_close_to_h100():
    """The three products the H100 computed (A 16xK row-major, B col-major, C = 0.25): the
    GPU's own accumulation order differs in the last bits, so within a few f32 ulps."""
    _, products = _readout()
    src = r"""
    #include <mma.h>
    #include <cuda_bf16.h>
    using namespace nvcuda;
    template <class T, class S, int K> __device__ void mm(const S* a, const S* b, float* d) {
        wmma::fragment<wmma::matrix_a, 16, 16, K, T, wmma::row_major> x;
        wmma::fragment<wmma::matrix_b, 16, 16, K, T, wmma::col_major> y;
        wmma::fragment<wmma::accumulator, 16, 16, K, float> z;
        wmma::fill_fragment(z, 0.25f);
        wmma::load_matrix_sync(x, a, K);
        wmma::load_matrix_sync(y, b, K);
        wmma::mma_sync(z, x, y, z);
        wmma::store_matrix_sync(d, z, 16, wmma::mem_row_major);
    }
    extern "C" __global__ void f16(const half* a, const half* b, float* d) { mm<half, half, 16>(a, b, d); }
    extern "C" __global__ void bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, float* d) {
        mm<__nv_bfloat16, __nv_bfloat16, 16>(a, b, d); }
    extern "C" __global__ void tf32(const float* a, const float* b, float* d) {
        mm<wmma::precision::tf32, float, 8>(a, b, d); }
    """
    mod = RawModule(code=src, options=("-arch=sm_80",))
    for name, k in (("f16", 16), ("bf16", 16), ("tf32", 8)):
        x = products[f"mm.{name}.in"].astype(np.float32)
        if name == "f16":
            mem = x.astype(np.float16)
        elif name == "bf16":
            mem = _bf16(x)
        else:
            mem = x                # raw f32: the GPU ignores the low 13 bits
        a, b = mem[:16 * k].copy(), mem[16 * k:32 * k].copy()
        d = np.zeros(256, np.float32)
        mod.get_function(name)((1,), (32,), (a, b, d))
        gpu = products[f"mm.{name}.d"].astype(np.float32)
        np.testing.assert_allclose(d, gpu, rtol=0, atol=4e-6 * np.abs(gpu).max(), err_msg=name)


# ---- mma.sync and ldmatrix through inline PTX ----

MMA_SRC = r"""
#include <cuda_fp16.h>
// D (16x8, f32) = A (16x16 f16, row-major in global) * B (16x8, stored as 8 rows of 16: B^T) + C;
// A and B^T go through shared memory and ldmatrix (.x4 for A, .x2 for B)
extern "C" __global__ void m16n8k16_ldmatrix(const half* a, const half* bt, const float* c, float* d) {
    __shared__ __align__(16) half sa[16 * 16];
    __shared__ __align__(16) half sb[8 * 16];
    int lane = threadIdx.x;
    for (int i = lane; i < 256; i += 32) sa[i] = a[i];
    for (int i = lane; i < 128; i += 32) sb[i] = bt[i];
    __syncwarp();
    unsigned a0, a1, a2, a3, b0, b1;
    // matrices 0..3 of A: rows 0-7/8-15 x cols 0-7, then the same rows x cols 8-15
    unsigned pa = (unsigned)__cvta_generic_to_shared(&sa[(lane % 16) * 16 + (lane / 16) * 8]);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3) : "r"(pa));
    unsigned pb = (unsigned)__cvta_generic_to_shared(&sb[(lane % 8) * 16 + ((lane / 8) % 2) * 8]);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
                 : "=r"(b0), "=r"(b1) : "r"(pb));
    int g = lane / 4, t = lane % 4;
    float c0 = c[g * 8 + 2 * t], c1 = c[g * 8 + 2 * t + 1];
    float c2 = c[(g + 8) * 8 + 2 * t], c3 = c[(g + 8) * 8 + 2 * t + 1];
    float d0, d1, d2, d3;
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%10,%11,%12,%13};"
                 : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1),
                   "f"(c0), "f"(c1), "f"(c2), "f"(c3));
    d[g * 8 + 2 * t] = d0; d[g * 8 + 2 * t + 1] = d1;
    d[(g + 8) * 8 + 2 * t] = d2; d[(g + 8) * 8 + 2 * t + 1] = d3;
}

// ldmatrix .trans: B given row-major (16 rows of k, 8 columns of n) in shared memory
extern "C" __global__ void m16n8k16_trans(const half* a, const half* b, float* d) {
    __shared__ __align__(16) half sa[16 * 16];
    __shared__ __align__(16) half sb[16 * 8];
    int lane = threadIdx.x;
    for (int i = lane; i < 256; i += 32) sa[i] = a[i];
    for (int i = lane; i < 128; i += 32) sb[i] = b[i];
    __syncwarp();
    unsigned a0, a1, a2, a3, b0, b1;
    unsigned pa = (unsigned)__cvta_generic_to_shared(&sa[(lane % 16) * 16 + (lane / 16) * 8]);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3) : "r"(pa));
    unsigned pb = (unsigned)__cvta_generic_to_shared(&sb[(lane % 16) * 8]);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
                 : "=r"(b0), "=r"(b1) : "r"(pb));
    int g = lane / 4, t = lane % 4;
    float d0, d1, d2, d3, z = 0.f;
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%10,%10,%10,%10};"
                 : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(z));
    d[g * 8 + 2 * t] = d0; d[g * 8 + 2 * t + 1] = d1;
    d[(g + 8) * 8 + 2 * t] = d2; d[(g + 8) * 8 + 2 * t + 1] = d3;
}

// m16n8k8 tf32 from registers per the PTX ISA layout (A 16x8 row-major, B 8x8 with B[k][n])
extern "C" __global__ void m16n8k8_tf32(const float* a, const float* b, float* d) {
    int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    unsigned a0 = __float_as_uint(a[g * 8 + t]), a1 = __float_as_uint(a[(g + 8) * 8 + t]);
    unsigned a2 = __float_as_uint(a[g * 8 + t + 4]), a3 = __float_as_uint(a[(g + 8) * 8 + t + 4]);
    unsigned b0 = __float_as_uint(b[t * 8 + g]), b1 = __float_as_uint(b[(t + 4) * 8 + g]);
    float d0, d1, d2, d3, z = 0.f;
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%10,%10,%10,%10};"
                 : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(z));
    d[g * 8 + 2 * t] = d0; d[g * 8 + 2 * t + 1] = d1;
    d[(g + 8) * 8 + 2 * t] = d2; d[(g + 8) * 8 + 2 * t + 1] = d3;
}

// m8n8k4 f64
extern "C" __global__ void m8n8k4_f64(const double* a, const double* b, double* d) {
    int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    double d0, d1, z = 1.0;
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%4,%4};"
                 : "=d"(d0), "=d"(d1) : "d"(a[g * 4 + t]), "d"(b[t * 8 + g]), "d"(z));
    d[g * 8 + 2 * t] = d0; d[g * 8 + 2 * t + 1] = d1;
}

// m16n8k32 s8 with .satfinite (A 16x32, B 32x8 given as B^T rows of 32)
extern "C" __global__ void m16n8k32_s8(const int* a, const int* bt, const int* c, int* d) {
    int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    // a: 16 rows of 8 words (4 bytes each); bt: 8 rows of 8 words
    unsigned a0 = a[g * 8 + t], a1 = a[(g + 8) * 8 + t], a2 = a[g * 8 + t + 4], a3 = a[(g + 8) * 8 + t + 4];
    unsigned b0 = bt[g * 8 + t], b1 = bt[g * 8 + t + 4];
    int c0 = c[g * 8 + 2 * t], c1 = c[g * 8 + 2 * t + 1], c2 = c[(g + 8) * 8 + 2 * t], c3 = c[(g + 8) * 8 + 2 * t + 1];
    int d0, d1, d2, d3;
    asm volatile("mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
                 : "=r"(d0), "=r"(d1), "=r"(d2), "=r"(d3)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1),
                   "r"(c0), "r"(c1), "r"(c2), "r"(c3));
    d[g * 8 + 2 * t] = d0; d[g * 8 + 2 * t + 1] = d1;
    d[(g + 8) * 8 + 2 * t] = d2; d[(g + 8) * 8 + 2 * t + 1] = d3;
}
"""


@pytest.fixture(scope="module")
def mma_module():
    return RawModule(code=MMA_SRC, options=("-arch=sm_80",))


def _seq_f32(a, b, c):
    d = c.astype(np.float32)
    for kk in range(a.shape[1]):
        d = (d + np.outer(a[:, kk], b[kk, :]).astype(np.float32)).astype(np.float32)
    return d


def _both(mod, name, args):
    """Run kernel `name` compiled and interpreted on copies; returns both argument lists."""
    comp = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
    mod.get_function(name)((1,), (32,), tuple(comp))
    interp = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
    interpret_kernel(mod.ptx, name, (1, 1, 1), (32, 1, 1), tuple(interp))
    return comp, interp


def test_mma_m16n8k16_with_ldmatrix(mma_module):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 8)).astype(np.float16)
    c = rng.standard_normal((16, 8)).astype(np.float32)
    want = _seq_f32(a.astype(np.float32), b.astype(np.float32), c)
    args = (a.reshape(-1), b.T.copy().reshape(-1), c.reshape(-1), np.zeros(128, np.float32))
    for got in _both(mma_module, "m16n8k16_ldmatrix", args):
        np.testing.assert_array_equal(got[3].reshape(16, 8), want)


def test_mma_ldmatrix_trans(mma_module):
    rng = np.random.default_rng(8)
    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 8)).astype(np.float16)
    want = _seq_f32(a.astype(np.float32), b.astype(np.float32), np.zeros((16, 8), np.float32))
    args = (a.reshape(-1), b.reshape(-1), np.zeros(128, np.float32))
    for got in _both(mma_module, "m16n8k16_trans", args):
        np.testing.assert_array_equal(got[2].reshape(16, 8), want)


def test_mma_tf32_ignores_low_bits(mma_module):
    rng = np.random.default_rng(9)
    a = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal((8, 8)).astype(np.float32)
    cut = lambda x: (x.view(np.uint32) & 0xFFFFE000).view(np.float32)  # noqa: E731
    want = _seq_f32(cut(a), cut(b), np.zeros((16, 8), np.float32))
    for got in _both(mma_module, "m16n8k8_tf32", (a.reshape(-1), b.reshape(-1),
                                                  np.zeros(128, np.float32))):
        np.testing.assert_array_equal(got[2].reshape(16, 8), want)


def test_mma_f64(mma_module):
    rng = np.random.default_rng(10)
    a, b = rng.standard_normal((8, 4)), rng.standard_normal((4, 8))
    want = np.ones((8, 8))
    for kk in range(4):
        want = want + np.outer(a[:, kk], b[kk, :])
    for got in _both(mma_module, "m8n8k4_f64", (a.reshape(-1), b.reshape(-1), np.zeros(64))):
        np.testing.assert_allclose(got[2].reshape(8, 8), want, rtol=1e-15, atol=1e-15)


def test_mma_s8_satfinite(mma_module):
    rng = np.random.default_rng(11)
    a = rng.integers(-128, 128, (16, 32)).astype(np.int8)
    bt = rng.integers(-128, 128, (8, 32)).astype(np.int8)
    c = rng.integers(-1000, 1000, (16, 8)).astype(np.int32)
    c[0, 0], c[1, 1] = 2**31 - 10, -2**31 + 10          # these saturate
    exact = c.astype(np.int64) + a.astype(np.int64) @ bt.T.astype(np.int64)
    want = np.clip(exact, -2**31, 2**31 - 1).astype(np.int32)
    assert (exact != want).any()
    args = (a.view(np.int32).reshape(-1).copy(), bt.view(np.int32).reshape(-1).copy(),
            c.reshape(-1), np.zeros(128, np.int32))
    for got in _both(mma_module, "m16n8k32_s8", args):
        np.testing.assert_array_equal(got[3].reshape(16, 8), want)


# ---- refusals ----

def test_unsupported_shape_is_refused_with_the_line():
    ptx = """
.version 7.8
.target sm_80
.address_size 64
.visible .entry k(.param .u64 p)
{
    .reg .b32 %r<20>;
    .reg .f32 %f<10>;
    mma.sync.aligned.m16n8k64.row.col.s32.s4.s4.s32 {%r1,%r2,%r3,%r4}, {%r5,%r6,%r7,%r8}, {%r9,%r10}, {%r1,%r2,%r3,%r4};
    ret;
}
"""
    with pytest.raises(CpuifyError, match=r"m16n8k64.*not supported"):
        _compile_ptx(ptx)


def _compile_ptx(ptx: str) -> None:
    from cpuify.compiler import compile_ptx
    compile_ptx(ptx)


# ---- more mma.sync shapes, registers filled per the PTX ISA's fragment figures ----

MMA2_SRC = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
__device__ unsigned pack16(unsigned short lo, unsigned short hi) { return lo | ((unsigned)hi << 16); }

// m16n8k8 f16 x f16 -> f16 (A 16x8, B 8x8 as B[k][n], C/D 16x8 f16)
extern "C" __global__ void m16n8k8_f16(const unsigned short* a, const unsigned short* b,
                                       const unsigned short* c, unsigned short* d) {
    int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    unsigned a0 = pack16(a[g * 8 + 2 * t], a[g * 8 + 2 * t + 1]);
    unsigned a1 = pack16(a[(g + 8) * 8 + 2 * t], a[(g + 8) * 8 + 2 * t + 1]);
    unsigned b0 = pack16(b[(2 * t) * 8 + g], b[(2 * t + 1) * 8 + g]);
    unsigned c0 = pack16(c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1]);
    unsigned c1 = pack16(c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]);
    unsigned d0, d1;
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3}, {%4}, {%5,%6};"
                 : "=r"(d0), "=r"(d1) : "r"(a0), "r"(a1), "r"(b0), "r"(c0), "r"(c1));
    d[g * 8 + 2 * t] = d0 & 0xFFFF; d[g * 8 + 2 * t + 1] = d0 >> 16;
    d[(g + 8) * 8 + 2 * t] = d1 & 0xFFFF; d[(g + 8) * 8 + 2 * t + 1] = d1 >> 16;
}

// m16n8k16 bf16 -> f32 (A 16x16, B 16x8 as B[k][n])
extern "C" __global__ void m16n8k16_bf16(const unsigned short* a, const unsigned short* b, float* d) {
    int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    unsigned ar[4], br[2];
    for (int i = 0; i < 4; i++) {
        int row = g + 8 * (i % 2), col = 2 * t + 8 * (i / 2);
        ar[i] = pack16(a[row * 16 + col], a[row * 16 + col + 1]);
    }
    for (int i = 0; i < 2; i++) {
        int k = 2 * t + 8 * i;
        br[i] = pack16(b[k * 8 + g], b[(k + 1) * 8 + g]);
    }
    float d0, d1, d2, d3, z = 0.f;
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%10,%10,%10,%10};"
                 : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
                 : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]), "f"(z));
    d[g * 8 + 2 * t] = d0; d[g * 8 + 2 * t + 1] = d1;
    d[(g + 8) * 8 + 2 * t] = d2; d[(g + 8) * 8 + 2 * t + 1] = d3;
}

// m16n8k4 tf32 -> f32, inputs rounded with cvt.rna.tf32.f32 (A 16x4, B 4x8)
extern "C" __global__ void m16n8k4_tf32(const float* a, const float* b, float* d) {
    int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    unsigned a0, a1, b0;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(a0) : "f"(a[g * 4 + t]));
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(a1) : "f"(a[(g + 8) * 4 + t]));
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(b0) : "f"(b[t * 8 + g]));
    float d0, d1, d2, d3, z = 0.f;
    asm volatile("mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
                 "{%7,%7,%7,%7};"
                 : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3) : "r"(a0), "r"(a1), "r"(b0), "f"(z));
    d[g * 8 + 2 * t] = d0; d[g * 8 + 2 * t + 1] = d1;
    d[(g + 8) * 8 + 2 * t] = d2; d[(g + 8) * 8 + 2 * t + 1] = d3;
}

// m16n8k16 u8 x s8 -> s32 (A 16x16 bytes, B 16x8 as B^T rows of 16 bytes)
extern "C" __global__ void m16n8k16_u8s8(const unsigned* a, const unsigned* bt, int* d) {
    int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    unsigned a0 = a[g * 4 + t], a1 = a[(g + 8) * 4 + t], b0 = bt[g * 4 + t];
    int d0, d1, d2, d3, z = 0;
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
                 "{%7,%7,%7,%7};"
                 : "=r"(d0), "=r"(d1), "=r"(d2), "=r"(d3) : "r"(a0), "r"(a1), "r"(b0), "r"(z));
    d[g * 8 + 2 * t] = d0; d[g * 8 + 2 * t + 1] = d1;
    d[(g + 8) * 8 + 2 * t] = d2; d[(g + 8) * 8 + 2 * t + 1] = d3;
}
"""


@pytest.fixture(scope="module")
def mma2_module():
    return RawModule(code=MMA2_SRC, options=("-arch=sm_80",))


def test_mma_m16n8k8_f16_accumulator(mma2_module):
    rng = np.random.default_rng(12)
    a = rng.standard_normal((16, 8)).astype(np.float16)
    b = rng.standard_normal((8, 8)).astype(np.float16)
    c = rng.standard_normal((16, 8)).astype(np.float16)
    want = _seq_f32(a.astype(np.float32), b.astype(np.float32), c.astype(np.float32)).astype(np.float16)
    args = (a.view(np.uint16).reshape(-1), b.view(np.uint16).reshape(-1),
            c.view(np.uint16).reshape(-1), np.zeros(128, np.uint16))
    for got in _both(mma2_module, "m16n8k8_f16", args):
        np.testing.assert_array_equal(got[3].reshape(16, 8), want.view(np.uint16))


def test_mma_m16n8k16_bf16(mma2_module):
    rng = np.random.default_rng(13)
    a_bits, b_bits = _bf16(rng.standard_normal((16, 16))), _bf16(rng.standard_normal((16, 8)))
    a = (a_bits.astype(np.uint32) << 16).view(np.float32)
    b = (b_bits.astype(np.uint32) << 16).view(np.float32)
    want = _seq_f32(a, b, np.zeros((16, 8), np.float32))
    for got in _both(mma2_module, "m16n8k16_bf16", (a_bits.reshape(-1), b_bits.reshape(-1),
                                                    np.zeros(128, np.float32))):
        np.testing.assert_array_equal(got[2].reshape(16, 8), want)


def _tf32_rna(x: np.ndarray) -> np.ndarray:
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32)


def test_mma_m16n8k4_tf32_with_cvt_rna(mma2_module):
    rng = np.random.default_rng(14)
    a = rng.standard_normal((16, 4)).astype(np.float32)
    b = rng.standard_normal((4, 8)).astype(np.float32)
    a[0, 0] = np.uint32(0x3F801000).view(np.float32)   # a tie: rounds away from zero
    want = _seq_f32(_tf32_rna(a), _tf32_rna(b), np.zeros((16, 8), np.float32))
    assert (_tf32_rna(a) != (a.view(np.uint32) & 0xFFFFE000).view(np.float32)).any()
    for got in _both(mma2_module, "m16n8k4_tf32", (a.reshape(-1), b.reshape(-1),
                                                   np.zeros(128, np.float32))):
        np.testing.assert_array_equal(got[2].reshape(16, 8), want)


def test_mma_m16n8k16_mixed_u8_s8(mma2_module):
    rng = np.random.default_rng(15)
    a = rng.integers(0, 256, (16, 16)).astype(np.uint8)
    bt = rng.integers(-128, 128, (8, 16)).astype(np.int8)
    want = (a.astype(np.int64) @ bt.T.astype(np.int64)).astype(np.int32)
    args = (a.view(np.uint32).reshape(-1).copy(), bt.view(np.uint32).reshape(-1).copy(),
            np.zeros(128, np.int32))
    for got in _both(mma2_module, "m16n8k16_u8s8", args):
        np.testing.assert_array_equal(got[2].reshape(16, 8), want)


# ---- which warps take part ----

PARTIAL_SRC = r"""
#include <mma.h>
using namespace nvcuda;
// only warp `which` multiplies (a warp-uniform branch: the other warps skip it, as a GPU allows)
extern "C" __global__ void one_warp(const half* a, const half* b, float* d, int which) {
    if (threadIdx.x / 32 != which) return;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::fill_fragment(fc, 1.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(d, fc, 16, wmma::mem_row_major);
}
"""


def test_wmma_in_one_warp_of_three():
    mod = RawModule(code=PARTIAL_SRC, options=("-arch=sm_80",))
    rng = np.random.default_rng(16)
    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 16)).astype(np.float16)
    want = _seq_f32(a.astype(np.float32), b.astype(np.float32), np.ones((16, 16), np.float32))
    d = np.zeros((16, 16), np.float32)
    mod.get_function("one_warp")((2,), (96,), (a, b, d, np.int32(1)))
    np.testing.assert_array_equal(d, want)


def test_wmma_in_a_warp_cut_short_is_an_error():
    """A block of 48 threads: its second warp has 16 lanes, and wmma needs 32."""
    mod = RawModule(code=PARTIAL_SRC, options=("-arch=sm_80",))
    a = np.zeros((16, 16), np.float16)
    d = np.zeros((16, 16), np.float32)
    with pytest.raises(CpuifyError, match="warp"):
        mod.get_function("one_warp")((1,), (48,), (a, a, d, np.int32(1)))
    with pytest.raises(CpuifyError, match="all 32"):
        interpret_kernel(mod.ptx, "one_warp", (1, 1, 1), (48, 1, 1), (a, a, d, np.int32(1)))


SHARED_SRC = r"""
#include <mma.h>
using namespace nvcuda;
// C (n x n) = A B + bias, tiles of A and B staged in shared memory (wmma.load/store .shared),
// the product stored to shared memory and read back by every thread
extern "C" __global__ void shared_gemm(const half* a, const half* b, const float* bias, float* c,
                                       int n) {
    __shared__ __align__(32) half sa[16 * 16];
    __shared__ __align__(32) half sb[16 * 16];
    __shared__ __align__(32) float sc[16 * 16];
    int row = blockIdx.y * 16, col = blockIdx.x * 16, lane = threadIdx.x;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < n; k += 16) {
        for (int i = lane; i < 256; i += 32) {
            sa[i] = a[(row + i / 16) * n + k + i % 16];
            sb[i] = b[(k + i % 16) * n + col + i / 16];      // column-major tile of B
        }
        __syncthreads();
        wmma::load_matrix_sync(fa, sa, 16);
        wmma::load_matrix_sync(fb, sb, 16);
        wmma::mma_sync(acc, fa, fb, acc);
        __syncthreads();
    }
    wmma::store_matrix_sync(sc, acc, 16, wmma::mem_row_major);
    __syncthreads();
    for (int i = lane; i < 256; i += 32)
        c[(row + i / 16) * n + col + i % 16] = sc[i] + bias[col + i % 16];
}
"""


def test_wmma_through_shared_memory():
    mod = RawModule(code=SHARED_SRC, options=("-arch=sm_80",))
    assert "wmma.load.a.sync.aligned.row.m16n16k16.shared.f16" in mod.ptx
    n = 48
    rng = np.random.default_rng(17)
    a = rng.standard_normal((n, n)).astype(np.float16)
    b = rng.standard_normal((n, n)).astype(np.float16)
    bias = rng.standard_normal(n).astype(np.float32)
    want = np.zeros((n, n), np.float32)
    for k0 in range(0, n, 16):
        want = _seq_f32(a[:, k0:k0 + 16].astype(np.float32), b[k0:k0 + 16].astype(np.float32), want)
    want = (want + bias).astype(np.float32)
    c = np.zeros((n, n), np.float32)
    mod.get_function("shared_gemm")((n // 16, n // 16), (32,), (a, b, bias, c, np.int32(n)))
    np.testing.assert_array_equal(c, want)
    ci = np.zeros((n, n), np.float32)
    interpret_kernel(mod.ptx, "shared_gemm", (2, 2, 1), (32, 1, 1), (a, b, bias, ci, np.int32(n)))
    np.testing.assert_array_equal(ci[:32, :32], want[:32, :32])


# ---- mma.sync and ldmatrix against an H100, register for register ----
# tests/data/mma_sync_h100.npz (recorded by the lead with /work/lead/gpu/probe_mma.py, CUDA
# 13.0): for each instruction, each lane's a, b, c registers (raw words, lane-major) of an
# `exact` case (every product and sum exact in the accumulator) and a `rand` case (normal
# values), and the d registers the GPU computed from them.

H100 = Path(__file__).parent / "data" / "mma_sync_h100.npz"

#: name -> (instruction, registers of a, b, c, d, register class of a/b, of c/d)
MMA_H100 = {
    "m16n8k8_f32_f16": ("m16n8k8.row.col.f32.f16.f16.f32", 2, 1, 4, 4, "r", "f"),
    "m16n8k16_f32_f16": ("m16n8k16.row.col.f32.f16.f16.f32", 4, 2, 4, 4, "r", "f"),
    "m16n8k16_f16_f16": ("m16n8k16.row.col.f16.f16.f16.f16", 4, 2, 2, 2, "r", "r"),
    "m16n8k8_f16_f16": ("m16n8k8.row.col.f16.f16.f16.f16", 2, 1, 2, 2, "r", "r"),
    "m16n8k16_f32_bf16": ("m16n8k16.row.col.f32.bf16.bf16.f32", 4, 2, 4, 4, "r", "f"),
    "m16n8k8_f32_bf16": ("m16n8k8.row.col.f32.bf16.bf16.f32", 2, 1, 4, 4, "r", "f"),
    "m16n8k4_f32_tf32": ("m16n8k4.row.col.f32.tf32.tf32.f32", 2, 1, 4, 4, "r", "f"),
    "m16n8k8_f32_tf32": ("m16n8k8.row.col.f32.tf32.tf32.f32", 4, 2, 4, 4, "r", "f"),
    "m8n8k4_f64": ("m8n8k4.row.col.f64.f64.f64.f64", 1, 1, 2, 2, "d", "d"),
    "m16n8k16_s32_s8": ("m16n8k16.row.col.s32.s8.s8.s32", 2, 1, 4, 4, "r", "r"),
    "m16n8k32_s32_s8": ("m16n8k32.row.col.s32.s8.s8.s32", 4, 2, 4, 4, "r", "r"),
    "m16n8k32_s32_u8": ("m16n8k32.row.col.s32.u8.u8.s32", 4, 2, 4, 4, "r", "r"),
    "m16n8k32_s32_s8_u8": ("m16n8k32.row.col.s32.s8.u8.s32", 4, 2, 4, 4, "r", "r"),
    "m16n8k32_s32_s8_sat": ("m16n8k32.row.col.satfinite.s32.s8.s8.s32", 4, 2, 4, 4, "r", "r"),
    "m8n8k16_s32_s8": ("m8n8k16.row.col.s32.s8.s8.s32", 1, 1, 2, 2, "r", "r"),
    "m8n8k4_f32_f16": ("m8n8k4.row.col.f32.f16.f16.f32", 2, 2, 8, 8, "r", "f"),
    "m8n8k4_f32_f16_rr": ("m8n8k4.row.row.f32.f16.f16.f32", 2, 2, 8, 8, "r", "f"),
}


def _register_kernel(name: str) -> str:
    instr, na, nb, nc, nd, ab, cd = MMA_H100[name]
    word = {"r": "unsigned", "d": "unsigned long long", "f": "unsigned"}
    value = {"r": "{}", "f": "__uint_as_float({})", "d": "__longlong_as_double((long long)({}))"}
    ctype = {"r": "unsigned", "f": "float", "d": "double"}
    lines = [f'extern "C" __global__ void {name}(const {word[ab]}* a, const {word[ab]}* b, '
             f'const {word[cd]}* c, {word[cd]}* d) {{', "  int l = threadIdx.x;"]
    regs = []
    for m, n, kind in (("a", na, ab), ("b", nb, ab), ("c", nc, cd)):
        for i in range(n):
            lines.append(f"  {ctype[kind]} {m}{i} = " + value[kind].format(f"{m}[l * {n} + {i}]") + ";")
            regs.append((m, i, kind))
    lines.append(f"  {ctype[cd]} " + ", ".join(f"d{i}" for i in range(nd)) + ";")
    pos = iter(range(100))
    groups = ["{" + ",".join(f"%{next(pos)}" for _ in range(n)) + "}" for n in (nd, na, nb, nc)]
    outs = ", ".join(f'"={cd}"(d{i})' for i in range(nd))
    ins = ", ".join(f'"{kind}"({m}{i})' for m, i, kind in regs)
    lines.append(f'  asm volatile("mma.sync.aligned.{instr} {", ".join(groups)};" : {outs} : {ins});')
    for i in range(nd):
        out = {"f": f"__float_as_uint(d{i})", "d": f"(unsigned long long)__double_as_longlong(d{i})",
               "r": f"d{i}"}[cd]
        lines.append(f"  d[l * {nd} + {i}] = {out};")
    return "\n".join(lines) + "\n}\n"


@pytest.fixture(scope="module")
def h100_module():
    return RawModule(code="".join(_register_kernel(n) for n in MMA_H100), options=("-arch=sm_80",))


def _close(name: str, got: np.ndarray, gpu: np.ndarray, exact: bool) -> None:
    cd = MMA_H100[name][6]
    if cd == "r" and "f16" in name:                  # two f16 per word
        g, h = got.view(np.float16).astype(np.float64), gpu.view(np.float16).astype(np.float64)
        tol = 0 if exact else 2.0 ** -10 * np.abs(h).max()   # one f16 ulp of the largest
    elif cd == "f":
        g, h = got.view(np.float32).astype(np.float64), gpu.view(np.float32).astype(np.float64)
        tol = 0 if exact else 2.0 ** -22 * np.abs(h).max()
    elif cd == "d":
        g, h = got.view(np.float64), gpu.view(np.float64)
        tol = 0 if exact else 2.0 ** -51 * np.abs(h).max()
    else:
        np.testing.assert_array_equal(got, gpu, err_msg=name)
        return
    np.testing.assert_allclose(g, h, rtol=0, atol=tol, err_msg=name)


@pytest.mark.parametrize("case", ["exact", "rand"])
@pytest.mark.parametrize("name", list(MMA_H100))
def test_mma_sync_registers_match_h100(h100_module, name, case):
    data = np.load(H100)
    key = f"{name}_{case}"
    a, b, c, gpu = (data[f"{key}_{x}"] for x in "abcd")
    for got in _both(h100_module, name, (a.copy(), b.copy(), c.copy(), np.zeros_like(gpu))):
        _close(name, got[3], gpu, case == "exact")


LDMATRIX_SRC = r"""
extern "C" __global__ void ldmatrix_all(unsigned* out) {
    __shared__ __align__(16) unsigned short m[256];
    int l = threadIdx.x;
    for (int i = l; i < 256; i += 32) m[i] = i;
    __syncwarp();
    // lane l: row l % 8 of matrix l / 8 (8 b16 a row, 64 a matrix)
    unsigned addr = (unsigned)__cvta_generic_to_shared(&m[(l / 8) * 64 + (l % 8) * 8]);
    unsigned r0, r1, r2, r3, *o = out + l * 16;
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r0) : "r"(addr));
    o[0] = r0;
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r0), "=r"(r1) : "r"(addr));
    o[1] = r0; o[2] = r1;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
    o[3] = r0; o[4] = r1; o[5] = r2; o[6] = r3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(r0) : "r"(addr));
    o[7] = r0;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
    o[8] = r0; o[9] = r1; o[10] = r2; o[11] = r3;
}

// the same rows through generic addresses (no .shared): x4 and x4.trans
extern "C" __global__ void ldmatrix_generic(unsigned* out) {
    __shared__ __align__(16) unsigned short m[256];
    int l = threadIdx.x;
    for (int i = l; i < 256; i += 32) m[i] = i;
    __syncwarp();
    const unsigned short* row = &m[(l / 8) * 64 + (l % 8) * 8];
    unsigned r0, r1, r2, r3, *o = out + l * 16;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "l"(row));
    o[3] = r0; o[4] = r1; o[5] = r2; o[6] = r3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "l"(row));
    o[8] = r0; o[9] = r1; o[10] = r2; o[11] = r3;
}
"""


def test_ldmatrix_matches_h100():
    gpu = np.load(H100)["ldmatrix"]
    mod = RawModule(code=LDMATRIX_SRC, options=("-arch=sm_80",))
    for got in _both(mod, "ldmatrix_all", (np.zeros(32 * 16, np.uint32),)):
        np.testing.assert_array_equal(got[0].reshape(32, 16)[:, :12], gpu[:, :12])
    cols = [3, 4, 5, 6, 8, 9, 10, 11]
    for got in _both(mod, "ldmatrix_generic", (np.zeros(32 * 16, np.uint32),)):
        np.testing.assert_array_equal(got[0].reshape(32, 16)[:, cols], gpu[:, cols])


def test_volta_mma_forms_without_readout_are_refused():
    """m8n8k4 with f16 inputs: the f32-accumulator .row.col and .row.row forms are checked
    against the H100 above; f16 accumulators and a column-major A are refused."""
    with pytest.raises(CpuifyError, match=".f32 accumulators only"):
        _compile_ptx(HEADER_PTX + "mma.sync.aligned.m8n8k4.row.col.f16.f16.f16.f16 "
                     "{%r1,%r2,%r3,%r4}, {%r5,%r6}, {%r7,%r8}, {%r1,%r2,%r3,%r4};\n    ret;\n}\n")
    with pytest.raises(CpuifyError, match="row.col layouts"):
        _compile_ptx(HEADER_PTX + "mma.sync.aligned.m8n8k4.col.col.f32.f16.f16.f32 "
                     "{%f1,%f2,%f3,%f4,%f5,%f6,%f7,%f8}, {%r1,%r2}, {%r3,%r4}, "
                     "{%f1,%f2,%f3,%f4,%f5,%f6,%f7,%f8};\n    ret;\n}\n")


HEADER_PTX = """
.version 7.8
.target sm_80
.address_size 64
.visible .entry k(.param .u64 p)
{
    .reg .b32 %r<20>;
    .reg .f32 %f<10>;
    """


STMATRIX_SRC = r"""
// stmatrix (x4, and x2.trans) of registers holding (lane, m): the rows go to shared memory,
// lane l naming row l % 8 of matrix l / 8; then movmatrix of register 0
extern "C" __global__ void st_and_mov(unsigned short* out, unsigned* moved) {
    __shared__ __align__(16) unsigned short m[512];
    int l = threadIdx.x;
    unsigned r[4];
    for (int i = 0; i < 4; i++) r[i] = (unsigned)(l * 8 + i * 2) | ((unsigned)(l * 8 + i * 2 + 1) << 16);
    unsigned addr = (unsigned)__cvta_generic_to_shared(&m[(l / 8) * 64 + (l % 8) * 8]);
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};"
                 :: "r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]));
    unsigned addr2 = (unsigned)__cvta_generic_to_shared(&m[256 + ((l / 8) % 2) * 64 + (l % 8) * 8]);
    asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1,%2};"
                 :: "r"(addr2), "r"(r[0]), "r"(r[1]));
    __syncwarp();
    for (int i = l; i < 512; i += 32) out[i] = m[i];
    unsigned d;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(d) : "r"(r[0]));
    moved[l] = d;
}
"""


def test_stmatrix_and_movmatrix_follow_the_ptx_isa():
    """Per the PTX ISA: lane l holds row l / 4, columns 2 (l % 4) and +1 of matrix m in its
    register m; .trans stores the transposed matrix; movmatrix transposes one matrix."""
    mod = RawModule(code=STMATRIX_SRC, options=("-arch=sm_90",))
    reg = np.zeros((32, 4, 2), np.uint16)          # [lane, m, half]
    for lane in range(32):
        for i in range(4):
            reg[lane, i] = (lane * 8 + i * 2, lane * 8 + i * 2 + 1)
    frag = np.zeros((4, 8, 8), np.uint16)          # matrix m as the registers hold it
    for lane in range(32):
        for i in range(4):
            frag[i, lane // 4, 2 * (lane % 4):2 * (lane % 4) + 2] = reg[lane, i]
    want = np.zeros(512, np.uint16)
    want[:256] = frag.reshape(-1)
    want[256:384] = np.stack([frag[0].T, frag[1].T]).reshape(-1)
    moved = frag[0].T                               # the transposed matrix, as fragments
    want_moved = np.array([moved[l // 4, 2 * (l % 4)] | moved[l // 4, 2 * (l % 4) + 1].astype(np.uint32) << 16
                           for l in range(32)], np.uint32)
    for got in _both(mod, "st_and_mov", (np.zeros(512, np.uint16), np.zeros(32, np.uint32))):
        np.testing.assert_array_equal(got[0][:384], want[:384])     # (the rest: not written)
        np.testing.assert_array_equal(got[1], want_moved)


SHUFFLE_SRC = r"""
#include <mma.h>
using namespace nvcuda;
// a warp reduction by shuffles feeds the accumulator of a wmma product in every warp
extern "C" __global__ void shuffle_then_mma(const half* a, const half* b, float* d, float* s) {
    int w = threadIdx.x / 32, l = threadIdx.x % 32;
    float v = l + w;
    for (int o = 16; o; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::fill_fragment(fc, __shfl_sync(0xffffffff, v, 0));
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(d + w * 256, fc, 16, wmma::mem_row_major);
    if (l == 0) s[w] = v;
}
"""


def test_shuffles_and_wmma_in_one_kernel():
    mod = RawModule(code=SHUFFLE_SRC, options=("-arch=sm_80",))
    rng = np.random.default_rng(18)
    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 16)).astype(np.float16)
    warps = 4
    sums = np.array([496 + 32 * w for w in range(warps)], np.float32)
    args = (a, b, np.zeros(warps * 256, np.float32), np.zeros(warps, np.float32))
    comp = [x.copy() for x in args]
    mod.get_function("shuffle_then_mma")((2,), (32 * warps,), tuple(comp))
    interp = [x.copy() for x in args]
    interpret_kernel(mod.ptx, "shuffle_then_mma", (1, 1, 1), (32 * warps, 1, 1), tuple(interp))
    for got in (comp, interp):
        np.testing.assert_array_equal(got[3], sums)
        for w in range(warps):
            want = _seq_f32(a.astype(np.float32), b.astype(np.float32),
                            np.full((16, 16), sums[w], np.float32))
            np.testing.assert_array_equal(got[2][w * 256:(w + 1) * 256].reshape(16, 16), want)
