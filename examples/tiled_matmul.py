"""A shared-memory tiled matrix multiply with __syncthreads in a loop, checked against NumPy."""
import time

import numpy as np

import cpuify

source = r"""
#define TILE 16
extern "C" __global__ void matmul(const float *A, const float *B, float *C, int n) {
    __shared__ float As[TILE][TILE], Bs[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float sum = 0.0f;
    for (int t = 0; t < n / TILE; ++t) {
        As[ty][tx] = A[row * n + t * TILE + tx];
        Bs[ty][tx] = B[(t * TILE + ty) * n + col];
        __syncthreads();
        for (int k = 0; k < TILE; ++k) sum += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    C[row * n + col] = sum;
}
"""

n = 512
rng = np.random.default_rng(0)
A = rng.random((n, n), dtype=np.float32)
B = rng.random((n, n), dtype=np.float32)
C = np.zeros((n, n), np.float32)

matmul = cpuify.RawModule(code=source).get_function("matmul")
for _ in range(3):                       # the second launch compiles a version for 16x16 blocks
    start = time.perf_counter()
    matmul((n // 16, n // 16), (16, 16), (A, B, C, np.int32(n)))
    elapsed = time.perf_counter() - start
print(f"{2 * n**3 / elapsed / 1e9:.1f} GFLOP/s on {cpuify.num_threads()} threads")
np.testing.assert_allclose(C, A @ B, rtol=1e-4)
print("tiled matmul: OK")
