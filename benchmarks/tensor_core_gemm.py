"""A tensor-core GEMM (nvcuda::wmma, f16 inputs, f32 accumulation) run by cpuify against
NumPy's matmul at the same precision (float32 inputs holding the f16 values).

    PYTHONPATH=src python benchmarks/tensor_core_gemm.py [--n 512] [--repeats 3]

Each warp computes a 16x16 tile of C, stepping through K 16 at a time with
load_matrix_sync / mma_sync; a block of 4 warps covers a 32x32 tile.  The result is checked
against NumPy (f32 sums in another order: a tolerance)."""

from __future__ import annotations

import argparse
import time

import numpy as np

from cpuify import RawModule

SRC = r"""
#include <mma.h>
using namespace nvcuda;
extern "C" __global__ void gemm(const half* a, const half* b, float* c, int n) {
    int warp = threadIdx.x / 32;
    int row = blockIdx.y * 32 + (warp / 2) * 16, col = blockIdx.x * 32 + (warp % 2) * 16;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < n; k += 16) {
        wmma::load_matrix_sync(fa, a + row * n + k, n);
        wmma::load_matrix_sync(fb, b + k * n + col, n);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c + row * n + col, acc, n, wmma::mem_row_major);
}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    n = args.n
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float16)
    b = rng.standard_normal((n, n)).astype(np.float16)
    c = np.zeros((n, n), np.float32)
    kernel = RawModule(code=SRC, options=("-arch=sm_80",)).get_function("gemm")
    grid, block = (n // 32, n // 32), (128,)
    kernel(grid, block, (a, b, c, np.int32(n)))           # compile and warm up
    best = float("inf")
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        kernel(grid, block, (a, b, c, np.int32(n)))
        best = min(best, time.perf_counter() - t0)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    want = a32 @ b32
    np_best = float("inf")
    for _ in range(max(args.repeats, 5)):
        t0 = time.perf_counter()
        a32 @ b32
        np_best = min(np_best, time.perf_counter() - t0)
    err = float(np.abs(c - want).max() / np.abs(want).max())
    flops = 2.0 * n ** 3
    print(f"wmma GEMM {n}x{n}x{n} f16->f32: cpuify {best * 1e3:.1f} ms "
          f"({flops / best / 1e9:.2f} GFLOP/s), NumPy float32 matmul {np_best * 1e3:.2f} ms "
          f"({flops / np_best / 1e9:.1f} GFLOP/s); cpuify/NumPy time ratio {best / np_best:.1f}; "
          f"max relative error {err:.1e}")
    assert err < 1e-5


if __name__ == "__main__":
    main()
