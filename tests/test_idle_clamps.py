"""Clamped indices (`min(x, n - 1)`, `max(x - 1, 0)`) in code specialized for a block shape:
where no clamp of a segment changes anything for any thread of the block, the segment runs
a copy of its thread loop without them (SegmentEmitter.idle_clamp), where the loads are
contiguous.  Guards next to clamps must keep working.  Checked against NumPy with sizes that are not multiples of the block, so that
edge blocks take the clamping copy and interior blocks the other; each kernel runs twice
(generic code, then the specialized code)."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify

SRC = r'''
// clamp-to-edge 3-point blur along rows, 2-D blocks (16, 4)
extern "C" __global__ void blur_rows(const float *in, float *out, int nx, int ny) {
    int x = blockIdx.x * 16 + threadIdx.x, y = blockIdx.y * 4 + threadIdx.y;
    int xc = min(x, nx - 1), yc = min(y, ny - 1);
    const float *row = in + (size_t)yc * nx;
    float v = row[max(xc - 1, 0)] + 2.0f * row[xc] + row[min(xc + 1, nx - 1)];
    if (x < nx && y < ny) out[(size_t)y * nx + x] = v;
}
// a decreasing index: read the row backwards, clamped at 0
extern "C" __global__ void reverse_clamped(const int *in, int *out, int n, int shift) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int j = max(n - 1 - i - shift, 0);
    if (i < n) out[i] = in[j];
}
// guards in both forms nvcc emits, and one on a shrinking index
extern "C" __global__ void guarded(const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int j = n - 1 - i;
    float v = 2.0f * x[i];
    if (j >= 8) v += x[i + 8];
    if (i < n - 3) v += 1.0f;
    y[i] = v;
}
// an index that wraps around inside a block: the clamp must stay
extern "C" __global__ void wrapping(const int *in, int *out, int n, int base) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int k = base + threadIdx.x * 0x1000000;          // wraps past INT_MAX for large base
    out[i] = in[min(max(k, 0), n - 1) % n];
}
'''


@pytest.fixture(scope="module")
def mod():
    return cpuify.RawModule(code=SRC)


def _twice(f, grid, block, args, out):
    got = []
    for _ in range(2):
        out[:] = -7
        f(grid, block, args)
        got.append(out.copy())
    return got


@pytest.mark.parametrize("nx, ny", [(64, 16), (70, 13), (5, 3)])
def test_blur_rows(mod, nx, ny):
    rng = np.random.default_rng(nx * ny)
    a = rng.standard_normal((ny, nx)).astype(np.float32)
    out = np.zeros_like(a)
    left = np.concatenate([a[:, :1], a[:, :-1]], 1)
    right = np.concatenate([a[:, 1:], a[:, -1:]], 1)
    want = left + 2 * a + right
    grid = ((nx + 15) // 16, (ny + 3) // 4)
    for got in _twice(mod.get_function("blur_rows"), grid, (16, 4),
                      (a, out, np.int32(nx), np.int32(ny)), out):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shift", [0, 5, 300])
def test_decreasing_index(mod, shift):
    n = 1000
    a = np.arange(n, dtype=np.int32) * 3
    out = np.zeros_like(a)
    i = np.arange(n)
    want = a[np.maximum(n - 1 - i - shift, 0)]
    for got in _twice(mod.get_function("reverse_clamped"), ((n + 127) // 128,), (128,),
                      (a, out, np.int32(n), np.int32(shift)), out):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("base", [0, 2**31 - 2**26])
def test_wrapping_index_keeps_its_clamp(mod, base):
    n = 97
    a = np.arange(n, dtype=np.int32)
    out = np.zeros(256, np.int32)
    t = np.arange(256) % 128
    k = ((base + t * 0x1000000 + 2**31) % 2**32 - 2**31).astype(np.int64)   # int32 wrap
    want = a[np.minimum(np.maximum(k, 0), n - 1) % n]
    for got in _twice(mod.get_function("wrapping"), (2,), (128,),
                      (a, out, np.int32(n), np.int32(base)), out):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [512, 500, 7])
def test_guards(mod, n):
    x = np.arange(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    i = np.arange(n)
    want = 2 * x + np.where(n - 1 - i >= 8, x[np.minimum(i + 8, n - 1)], 0) + (i < n - 3)
    for got in _twice(mod.get_function("guarded"), ((n + 127) // 128,), (128,),
                      (x, y, np.int32(n)), y):
        np.testing.assert_array_equal(got, want.astype(np.float32))
