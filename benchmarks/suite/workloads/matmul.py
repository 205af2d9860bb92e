"""Tiled 16x16 shared-memory matrix multiply, C = A @ B, n x n float32 (kind: compute).

* CUDA: the CUDA samples' `matrixMul` kernel (As/Bs `__shared__` 16x16 tiles, two
  `__syncthreads()` per tile, unrolled k loop), grid (n/16, n/16), block (16, 16).
* OpenMP: the same tiled algorithm written for the CPU (benchmarks/matmul_tiled_omp.c):
  output tiles spread over threads with `collapse(2)`, tiles copied to stack arrays, loop
  order ty, k, tx with `omp simd` on the unit-stride tx loops and the row of C in a local
  accumulator.
* OpenCL: the same kernel as CUDA with `__local` tiles, local size (16, 16).
* numba simulator: the same kernel in numba.cuda, at n = 32.

n must be a multiple of 16 (as in the CUDA sample).  Inputs uniform in [-1, 1).

Tolerance: the reference is computed in float64; every element must satisfy
|C - C_ref| <= 1e-6 * n + 1e-5 * |C_ref|.  A float32 dot product of n terms in [-1, 1)
accumulates a rounding error of about n * 1e-8 (random walk of n roundings of a partial
sum of size ~sqrt(n/9)); 1e-6 * n leaves a 100x margin, while dropping a single product
(|a*b| ~ 0.25 on average) or a tile fails.
"""

from __future__ import annotations

import ctypes

import numpy as np

from benchmarks.core import MATMUL_SRC
from benchmarks.suite.workload import Workload, FLOAT_P as _fp, float_ptr as _ptr

# the CUDA samples' matrixMul kernel, the same text core.py measures
CUDA_SRC = MATMUL_SRC

OMP_SRC = r"""
/* Tiled 16x16 matrix multiply, the algorithm of the CUDA samples' matrixMul written for the
 * CPU (same as benchmarks/matmul_tiled_omp.c): output tiles over threads, tiles of A and B
 * copied into L1-resident stack arrays, loop order ty, k, tx with unit-stride `omp simd`
 * inner loops (one AVX-512 vector per row of 16), the row of C being summed in acc[]. */
#include <stddef.h>

#define TILE 16

void matmul(const float *restrict A, const float *restrict B, float *restrict C, int n)
{
    const int tiles = n / TILE;
#pragma omp parallel for collapse(2) schedule(static)
    for (int by = 0; by < tiles; by++) {
        for (int bx = 0; bx < tiles; bx++) {
            float Csub[TILE][TILE] __attribute__((aligned(64))) = {{0}};
            for (int t = 0; t < tiles; t++) {
                float As[TILE][TILE] __attribute__((aligned(64)));
                float Bs[TILE][TILE] __attribute__((aligned(64)));
                const float *restrict a = A + (size_t)(by * TILE) * n + (size_t)t * TILE;
                const float *restrict b = B + (size_t)(t * TILE) * n + (size_t)bx * TILE;
                for (int ty = 0; ty < TILE; ty++) {
#pragma omp simd
                    for (int tx = 0; tx < TILE; tx++) {
                        As[ty][tx] = a[(size_t)ty * n + tx];
                        Bs[ty][tx] = b[(size_t)ty * n + tx];
                    }
                }
                for (int ty = 0; ty < TILE; ty++) {
                    float acc[TILE] __attribute__((aligned(64)));
#pragma omp simd
                    for (int tx = 0; tx < TILE; tx++)
                        acc[tx] = Csub[ty][tx];
                    for (int k = 0; k < TILE; k++) {
                        const float av = As[ty][k];
#pragma omp simd
                        for (int tx = 0; tx < TILE; tx++)
                            acc[tx] += av * Bs[k][tx];
                    }
#pragma omp simd
                    for (int tx = 0; tx < TILE; tx++)
                        Csub[ty][tx] = acc[tx];
                }
            }
            float *restrict c = C + (size_t)(by * TILE) * n + (size_t)bx * TILE;
            for (int ty = 0; ty < TILE; ty++)
#pragma omp simd
                for (int tx = 0; tx < TILE; tx++)
                    c[(size_t)ty * n + tx] = Csub[ty][tx];
        }
    }
}
"""

OPENCL_SRC = r"""
#define BLOCK_SIZE 16
// The CUDA samples' matrixMul with __local tiles; global size (n, n), local size (16, 16).
__kernel void matrixMul(__global float *C, __global const float *A, __global const float *B,
                        int wA, int wB) {
    int bx = get_group_id(0), by = get_group_id(1);
    int tx = get_local_id(0), ty = get_local_id(1);
    int aBegin = wA * BLOCK_SIZE * by;
    int aEnd = aBegin + wA - 1;
    int aStep = BLOCK_SIZE;
    int bBegin = BLOCK_SIZE * bx;
    int bStep = BLOCK_SIZE * wB;
    __local float As[BLOCK_SIZE][BLOCK_SIZE];
    __local float Bs[BLOCK_SIZE][BLOCK_SIZE];
    float Csub = 0.0f;
    for (int a = aBegin, b = bBegin; a <= aEnd; a += aStep, b += bStep) {
        As[ty][tx] = A[a + wA * ty + tx];
        Bs[ty][tx] = B[b + wB * ty + tx];
        barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
        for (int k = 0; k < BLOCK_SIZE; ++k)
            Csub += As[ty][k] * Bs[k][tx];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    int c = wB * BLOCK_SIZE * by + BLOCK_SIZE * bx;
    C[c + wB * ty + tx] = Csub;
}
"""

_numba_kernel = None


def _numba_matmul():
    """The CUDA kernel ported to numba.cuda (run by the simulator)."""
    global _numba_kernel
    if _numba_kernel is None:
        import numba
        from numba import cuda as _cuda
        # the kernel must see `cuda` as a module global: the simulator swaps it for its fake
        globals()["cuda"] = _cuda
        globals()["float32"] = numba.float32
        BS = 16

        @_cuda.jit
        def matrixMul(C, A, B, wA, wB):
            bx, by = cuda.blockIdx.x, cuda.blockIdx.y
            tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
            As = cuda.shared.array((BS, BS), float32)
            Bs = cuda.shared.array((BS, BS), float32)
            csub = float32(0.0)
            for t in range(wA // BS):
                As[ty, tx] = A[by * BS + ty, t * BS + tx]
                Bs[ty, tx] = B[t * BS + ty, bx * BS + tx]
                cuda.syncthreads()
                for k in range(BS):
                    csub += As[ty, k] * Bs[k, tx]
                cuda.syncthreads()
            C[by * BS + ty, bx * BS + tx] = csub

        _numba_kernel = matrixMul
    return _numba_kernel


class Matmul(Workload):
    name = "matmul"
    kind = "compute"
    sizes = {
        "small": {"n": 256},
        "default": {"n": 1024},
        "large": {"n": 2048},
    }
    cuda_source = CUDA_SRC
    omp_source = OMP_SRC
    opencl_source = OPENCL_SRC
    opencl_reason = ""
    numba_reason = ""
    numba_size = {"n": 32}
    description = "CUDA samples' tiled 16x16 shared-memory matrix multiply"

    BS = 16

    def make_inputs(self, p, rng):
        n = p["n"]
        assert n % self.BS == 0, "n must be a multiple of 16"
        A = rng.uniform(-1.0, 1.0, (n, n)).astype(np.float32)
        B = rng.uniform(-1.0, 1.0, (n, n)).astype(np.float32)
        return {"A": A, "B": B}

    def reference(self, p, inp):
        A = inp["A"].astype(np.float64)
        B = inp["B"].astype(np.float64)
        return {"C": A @ B}

    def check(self, p, out, ref):
        n = p["n"]
        C = np.asarray(out["C"], dtype=np.float64)
        R = ref["C"]
        if C.shape != R.shape:
            return False, f"shape {C.shape} != {R.shape}"
        if not np.isfinite(C).all():
            return False, "non-finite values"
        atol = 1e-6 * n
        err = np.abs(C - R)
        tol = atol + 1e-5 * np.abs(R)
        bad = err > tol
        if bad.any():
            i = np.unravel_index(np.argmax(err - tol), err.shape)
            return False, f"{int(bad.sum())} elements off, worst at {i}: {C[i]} vs {R[i]}"
        return True, f"max abs err {float(err.max()):.2e} (atol {atol:.1e})"

    # -- cpuify ---------------------------------------------------------------------------
    def run_cpuify(self, p, inp, mod):
        n = p["n"]
        bufs = inp.setdefault("_cpuify_bufs", {})
        if "C" not in bufs:
            bufs["C"] = np.empty((n, n), np.float32)
            bufs["fn"] = mod.get_function("matrixMul")
        C = bufs["C"]
        bufs["fn"]((n // self.BS, n // self.BS), (self.BS, self.BS),
                   (C, inp["A"], inp["B"], np.int32(n), np.int32(n)))
        return {"C": C}

    # -- OpenMP ---------------------------------------------------------------------------
    def run_omp(self, p, inp, lib):
        n = p["n"]
        bufs = inp.setdefault("_omp_bufs", {})
        if "C" not in bufs:
            bufs["C"] = np.empty((n, n), np.float32)
            lib.matmul.restype = None
            lib.matmul.argtypes = [_fp, _fp, _fp, ctypes.c_int]
        C = bufs["C"]
        lib.matmul(_ptr(inp["A"]), _ptr(inp["B"]), _ptr(C), n)
        return {"C": C}

    # -- OpenCL ---------------------------------------------------------------------------
    def run_opencl(self, p, inp, cl, ctx, queue, prg):
        n = p["n"]
        bufs = inp.get("_cl_bufs")
        if bufs is None:
            mf = cl.mem_flags
            bufs = inp["_cl_bufs"] = {
                "A": cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=inp["A"]),
                "B": cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=inp["B"]),
                "C": cl.Buffer(ctx, mf.WRITE_ONLY, size=n * n * 4),
                "hC": np.empty((n, n), np.float32),
                "k": cl.Kernel(prg, "matrixMul"),
            }
        k = bufs["k"]
        k.set_args(bufs["C"], bufs["A"], bufs["B"], np.int32(n), np.int32(n))
        cl.enqueue_nd_range_kernel(queue, k, (n, n), (self.BS, self.BS))
        cl.enqueue_copy(queue, bufs["hC"], bufs["C"])
        queue.finish()
        return {"C": bufs["hC"]}

    # -- numba simulator ----------------------------------------------------------------
    def run_numba(self, p, inp):
        n = p["n"]
        C = np.empty((n, n), np.float32)
        _numba_matmul()[(n // self.BS, n // self.BS), (self.BS, self.BS)](
            C, inp["A"], inp["B"], n, n)
        return {"C": C}

    def bytes_moved(self, p):
        n = p["n"]
        return 3.0 * 4 * n * n          # compulsory traffic: read A and B, write C

    def flops(self, p):
        return 2.0 * p["n"] ** 3


WORKLOAD = Matmul()
