"""Elementwise kernels: every scalar type, __half, grid-stride loops, 2D/3D launch geometry,
extreme block sizes, large grids and kernels with many parameters."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify

SRC = r'''
// Integer arithmetic on T, written so every result is well defined in C++.
// out has 8 results per element.
template <typename T>
__global__ void int_ops(const T *a, const T *b, const int *s, T *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    T x = a[i], y = b[i];
    T *o = out + 8 * i;
    o[0] = (T)(x + y);
    o[1] = (T)(x - y);
    o[2] = (T)(x * y);
    o[3] = (T)(x / y);          // y != 0, never MIN / -1
    o[4] = (T)(x % y);
    o[5] = (T)(x ^ y) | (T)(x & (T)7);
    o[6] = (T)(x >> s[i]);      // 0 <= s < bit width of T
    o[7] = x < y ? x : y;
}

template <typename T>
__global__ void float_ops(const T *a, const T *b, T *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    T x = a[i], y = b[i];
    T *o = out + 6 * i;
    o[0] = x + y;
    o[1] = x - y;
    o[2] = x * y;
    o[3] = x / y;
    o[4] = x < y ? x : y;
    o[5] = -x;
}


extern "C" __global__ void grid_stride(const float *x, float *y, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = 2.0f * x[i] + (float)i;
}

// out has one int4-like record (5 ints) per thread of the whole 3-D launch
extern "C" __global__ void geometry(int *out) {
    int tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z;
    int bx = blockIdx.x, by = blockIdx.y, bz = blockIdx.z;
    int gx = bx * blockDim.x + tx;
    int gy = by * blockDim.y + ty;
    int gz = bz * blockDim.z + tz;
    int W = gridDim.x * blockDim.x, H = gridDim.y * blockDim.y;
    int idx = (gz * H + gy) * W + gx;
    int *o = out + 5 * idx;
    o[0] = gx; o[1] = gy; o[2] = gz;
    o[3] = (tz * blockDim.y + ty) * blockDim.x + tx;          // linear thread id in block
    o[4] = (bz * gridDim.y + by) * gridDim.x + bx;            // linear block id
}

extern "C" __global__ void add2d(const float *a, const float *b, float *c, int rows, int cols) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols)
        c[row * cols + col] = __fmul_rn(a[row * cols + col], (float)(row + 1)) + b[row * cols + col];
}

extern "C" __global__ void fill_index(unsigned int *out, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i * 2654435761u;     // Knuth multiplicative hash, wraps mod 2^32
}

extern "C" __global__ void many_params(
        const float *a, const double *b, int *out_i, double *out_d,
        char c, unsigned char uc, short s, unsigned short us,
        int i32, unsigned int u32, long long i64, unsigned long long u64,
        float f, double d, bool flag, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out_i[4 * i + 0] = (int)c + (int)uc + (int)s + (int)us;
    out_i[4 * i + 1] = i32 + (int)(u32 >> 16);
    out_i[4 * i + 2] = (int)(i64 >> 33) + (int)(u64 >> 60);
    out_i[4 * i + 3] = flag ? i : -i;
    out_d[i] = __dmul_rn((double)a[i], (double)f) + __dmul_rn(b[i], d);
}
'''

HALF_SRC = r'''
#include <cuda_fp16.h>
extern "C" __global__ void half_ops(const __half *a, __half *out_h, float *out_f, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = __half2float(a[i]);
        out_f[i] = v * 3.0f;
        out_h[i] = __float2half(v * 0.5f + 1.0f);
    }
}
'''

INT_TYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
CTYPE = {np.int8: "signed char", np.int16: "short", np.int32: "int", np.int64: "long long",
         np.uint8: "unsigned char", np.uint16: "unsigned short", np.uint32: "unsigned int",
         np.uint64: "unsigned long long", np.float32: "float", np.float64: "double"}


@pytest.fixture(scope="module")
def mod():
    names = [f"int_ops<{CTYPE[t]}>" for t in INT_TYPES]
    names += ["float_ops<float>", "float_ops<double>"]
    return cpuify.RawModule(code=SRC, name_expressions=tuple(names))


def _wrap(vals, dtype):
    """Python ints -> dtype with two's complement wrap-around."""
    bits = np.dtype(dtype).itemsize * 8
    u = np.array([v % (1 << bits) for v in vals], dtype=np.dtype(f"u{bits // 8}"))
    return u.view(dtype)


def _int_expected(a, b, s, dtype):
    exp = []
    for x, y, sh in zip(a.tolist(), b.tolist(), s.tolist()):
        q = abs(x) // abs(y)
        if (x < 0) != (y < 0):
            q = -q
        r = x - y * q
        lo = min(x, y)
        # In C++, types narrower than int are promoted; the cast back truncates.  The
        # results below are computed exactly, then wrapped to the type's width.
        exp += [x + y, x - y, x * y, q, r, (x ^ y) | (x & 7), x >> sh, lo]
    return _wrap(exp, dtype)


@pytest.mark.parametrize("dtype", INT_TYPES, ids=lambda t: np.dtype(t).name)
def test_integer_elementwise_all_types(mod, rng, dtype):
    info = np.iinfo(dtype)
    n = 300
    if info.bits >= 32:
        # keep x*y within range for signed types (signed overflow is UB in C++)
        lim = 1 << (info.bits // 2 - 1)
        lo, hi = (-lim if info.min < 0 else 0), lim
    else:
        lo, hi = info.min, info.max + 1
    a = rng.integers(lo, hi, n, dtype=np.int64 if info.min < 0 or info.bits < 64 else np.uint64)
    b = rng.integers(lo, hi, n, dtype=np.int64 if info.min < 0 or info.bits < 64 else np.uint64)
    b[b == 0] = 3
    if info.min < 0:
        b[(a == info.min) & (b == -1)] = 5
    # some extreme values too
    a[:4] = [info.max, info.min, info.max // 3, info.min // 5 if info.min else 1]
    b[:4] = [7, 3, -2 if info.min < 0 else 2, -9 if info.min < 0 else 9]
    a = a.astype(dtype)
    b = b.astype(dtype)
    s = rng.integers(0, info.bits, n).astype(np.int32)
    out = np.zeros(8 * n, dtype)
    f = mod.get_function(f"int_ops<{CTYPE[dtype]}>")
    f(((n + 127) // 128,), (128,), (a, b, s, out, np.int32(n)))
    exp = _int_expected(a, b, s, dtype)
    np.testing.assert_array_equal(out.reshape(n, 8), exp.reshape(n, 8))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_float_elementwise_exact_ieee(mod, rng, dtype):
    n = 1000
    a = (rng.standard_normal(n) * 100).astype(dtype)
    b = (rng.standard_normal(n) * 10).astype(dtype)
    b[b == 0] = 1
    out = np.zeros(6 * n, dtype)
    f = mod.get_function(f"float_ops<{CTYPE[dtype]}>")
    f((8,), (128,), (a, b, out, n))
    exp = np.stack([a + b, a - b, a * b, a / b, np.minimum(a, b), -a], axis=1)
    # one IEEE rounding per operation: results must be bit-exact
    np.testing.assert_array_equal(out.reshape(n, 6), exp)


def test_half_load_store(rng):
    n = 513
    a = (rng.standard_normal(n) * 50).astype(np.float16)
    a[:3] = [np.float16(65504), np.float16(-0.0), np.float16(6e-5)]
    out_h = np.zeros(n, np.float16)
    out_f = np.zeros(n, np.float32)
    cpuify.RawKernel(HALF_SRC, "half_ops")((5,), (128,), (a, out_h, out_f, np.int32(n)))
    np.testing.assert_array_equal(out_f, a.astype(np.float32) * np.float32(3))
    exp_h = (a.astype(np.float32) * np.float32(0.5) + np.float32(1)).astype(np.float16)
    np.testing.assert_array_equal(out_h, exp_h)


def test_grid_stride_loop(mod, rng):
    n = 100_003
    x = rng.standard_normal(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    mod.get_function("grid_stride")((7,), (96,), (x, y, np.int32(n)))
    np.testing.assert_array_equal(y, np.float32(2) * x + np.arange(n, dtype=np.float32))


@pytest.mark.parametrize("grid,block", [((3, 2, 2), (4, 3, 2)), ((2, 3, 1), (8, 1, 4)),
                                        ((1, 1, 5), (1, 16, 2)), ((5, 1, 1), (7, 1, 1))])
def test_3d_grid_and_block_indices(mod, grid, block):
    W, H, D = (grid[k] * block[k] for k in range(3))
    out = np.full(5 * W * H * D, -1, np.int32)
    mod.get_function("geometry")(grid, block, (out,))
    out = out.reshape(D, H, W, 5)
    z, y, x = np.meshgrid(np.arange(D), np.arange(H), np.arange(W), indexing="ij")
    np.testing.assert_array_equal(out[..., 0], x)
    np.testing.assert_array_equal(out[..., 1], y)
    np.testing.assert_array_equal(out[..., 2], z)
    tx, ty, tz = x % block[0], y % block[1], z % block[2]
    bx, by, bz = x // block[0], y // block[1], z // block[2]
    np.testing.assert_array_equal(out[..., 3], (tz * block[1] + ty) * block[0] + tx)
    np.testing.assert_array_equal(out[..., 4], (bz * grid[1] + by) * grid[0] + bx)


def test_2d_matrix_add_partial_tiles(mod, rng):
    rows, cols = 45, 70
    a = rng.standard_normal((rows, cols)).astype(np.float32)
    b = rng.standard_normal((rows, cols)).astype(np.float32)
    c = np.full((rows, cols), np.nan, np.float32)
    mod.get_function("add2d")(((cols + 15) // 16, (rows + 7) // 8), (16, 8),
                              (a, b, c, np.int32(rows), np.int32(cols)))
    scale = np.arange(1, rows + 1, dtype=np.float32)[:, None]
    np.testing.assert_array_equal(c, a * scale + b)


def test_one_thread_blocks(mod):
    n = 37
    out = np.zeros(n, np.uint32)
    mod.get_function("fill_index")((n,), (1,), (out, np.uint32(n)))
    np.testing.assert_array_equal(out, np.arange(n, dtype=np.uint32) * np.uint32(2654435761))


def test_1024_thread_blocks(mod):
    n = 3 * 1024 - 5
    out = np.zeros(n, np.uint32)
    mod.get_function("fill_index")((3,), (1024,), (out, np.uint32(n)))
    np.testing.assert_array_equal(out, np.arange(n, dtype=np.uint32) * np.uint32(2654435761))


def test_large_grid_2_pow_20(mod):
    n = 1 << 20
    out = np.zeros(n + 16, np.uint32)
    mod.get_function("fill_index")((n // 256,), (256,), (out, np.uint32(n)))
    np.testing.assert_array_equal(out[:n], np.arange(n, dtype=np.uint32) * np.uint32(2654435761))
    assert not out[n:].any(), "kernel wrote past n"


def test_many_params_of_mixed_types(mod, rng):
    n = 100
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n)
    out_i = np.zeros(4 * n, np.int32)
    out_d = np.zeros(n, np.float64)
    i64 = -(1 << 40) - 12345
    u64 = (1 << 63) + (1 << 61) + 5
    f = mod.get_function("many_params")
    args = (a, b, out_i, out_d, -5, 250, -30000, 65000, -123456, 0xDEADBEEF, i64, u64,
            np.float32(1.5), 2.25, True, np.int32(n))
    f((1,), (128,), args)
    o = out_i.reshape(n, 4)
    assert (o[:, 0] == -5 + 250 - 30000 + 65000).all()
    assert (o[:, 1] == -123456 + (0xDEADBEEF >> 16)).all()
    assert (o[:, 2] == (i64 >> 33) + (u64 >> 60)).all()
    np.testing.assert_array_equal(o[:, 3], np.arange(n))
    np.testing.assert_array_equal(out_d, a.astype(np.float64) * 1.5 + b * 2.25)
    # flag false flips the sign
    args = args[:14] + (False, np.int32(n))
    f((1,), (128,), args)
    np.testing.assert_array_equal(out_i.reshape(n, 4)[:, 3], -np.arange(n))


def test_negative_scalar_args_for_signed_params():
    """NVRTC declares `int`, `short`, `signed char` parameters as .u32/.u16/.u8 in PTX, but
    a user passes negative values for them as in CuPy."""
    k = cpuify.RawKernel(r'''
    extern "C" __global__ void neg(signed char c, short s, int i, long long l, long long *o) {
        o[0] = c; o[1] = s; o[2] = i; o[3] = l;
    }''', "neg")
    o = np.zeros(4, np.int64)
    k((1,), (1,), (np.int8(-5), np.int16(-300), np.int32(-70000), np.int64(-(1 << 40)), o))
    np.testing.assert_array_equal(o, [-5, -300, -70000, -(1 << 40)])
    k((1,), (1,), (-128, -32768, -2**31, -2**63, o))
    np.testing.assert_array_equal(o, [-128, -32768, -2**31, -2**63])
