"""Trailing-submatrix updates of a blocked right-looking LU factorization, n x n float32,
block size 16 (kind: compute).

A run copies the input matrix into a work buffer and applies the trailing update of every
step offset = 0, 16, 32, ..., n - 32 in sequence:

    A[o+16:, o+16:] -= A[o+16:, o:o+16] @ A[o:o+16, o+16:]

i.e. every 16x16 tile of the trailing submatrix loses the product of its piece of the column
panel (the 16 columns to its left, same rows) and its piece of the row panel (the 16 rows
above it, same columns).  The panels themselves are not factorized (no pivot division, no
triangular solves): only the update kernel is measured, n/16 - 1 launches per run.  The
step `o` reads panels that step `o` does not write, so the launches are race-free, and
later steps read panels that earlier steps updated.

* CUDA: `lu_trailing_update`, grid ((n-o)/16 - 1)^2 blocks of 16x16 threads; each block
  loads its left tile a[row0+ty][o+tx] and top tile a[o+ty][col0+tx] into two `__shared__`
  16x16 arrays, one `__syncthreads()`, then each thread subtracts the 16-term inner product
  left[ty][k] * top[k][tx] from its element.  The input is copied into the work buffer with
  `np.copyto` inside the timed call (a device-to-device cudaMemcpy on a GPU).
* OpenMP: one parallel region; the copy and every step are `omp for` loops (their implicit
  barriers order the steps); a step spreads the trailing tiles over threads with
  `collapse(2)`, and a tile is updated row by row: the row's 16 sums in a local `acc[16]`,
  loop order k, tx with `omp simd` over the tile's 16 columns (one AVX-512 vector); the
  row-panel tile is copied into a 1 KiB stack array first (read in place, its rows, n
  floats apart, shared L1 sets with the rows being updated: 2-5x slower at n = 1024), the
  column-panel row (16 contiguous floats) is read in place.
* OpenCL: the same kernel as CUDA with `__local` tiles, local size (16, 16).

The work buffer (and the input) are 256-byte aligned for every peer (`aligned_empty`, as
cudaMalloc's are): with NumPy's own placement the rows, 4 KiB apart at n = 1024, were whole
cache lines in some processes and split across two in others, and each peer ran 2x slower
when its buffer was split (one thread, CPU time, 2026-11-28: cpuify 12.7 ms aligned vs
16.3-17.9 ms at 16 or 32 bytes past a line, the OpenMP twin 9.3 vs 18.7-19.7 ms), so the
ratio was 0.45-1.2 by chance.

n must be a multiple of 16 and >= 32.  Inputs uniform in [-c, c) with c = 1/sqrt(n): a
rank-16 update of unnormalized panels multiplies the variance s^2 of the entries by ~(1 +
16 s^2), so with entries of size 1 the n/16 steps would overflow; with variance 1/(3n) the
entries end at most ~2.5x their initial size (measured for n = 256 .. 2048).

Reference: the same n/16 - 1 updates in float64 (NumPy/BLAS).  Tolerance: |A - A_ref| <=
1e-4 * c + 1e-5 * |A_ref|.  The float32 result is off by <= ~1.5e-6 * c (measured with
NumPy float32 at n = 256 .. 2048, errors propagating through the later steps included),
while one dropped product (|l * t| ~ c^2/4 = c / (4 sqrt n), >= 5e-3 * c at n <= 2048) or
a skipped tile is >= 50x above the tolerance.
"""

from __future__ import annotations

import ctypes

import numpy as np

from benchmarks.suite.workload import Workload, FLOAT_P as _fp, aligned_empty, float_ptr as _ptr

TILE = 16

CUDA_SRC = r"""
#define TILE 16

// One step of the trailing update of a blocked LU at `offset`: block (bx, by) owns the tile
// whose top-left element is a[(offset + 16 + 16*by) * n + offset + 16 + 16*bx] and subtracts
// from it  left @ top, left = the column-panel tile beside it, top = the row-panel tile
// above it.  Grid ((n - offset)/16 - 1)^2, block (16, 16).
extern "C" __global__ void lu_trailing_update(float *a, int n, int offset) {
    __shared__ float left[TILE][TILE];      // a[row0 + ty][offset + k]
    __shared__ float top[TILE][TILE];       // a[offset + k][col0 + tx]
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = offset + TILE + blockIdx.y * TILE;
    const int col0 = offset + TILE + blockIdx.x * TILE;

    left[ty][tx] = a[(row0 + ty) * n + offset + tx];
    top[ty][tx] = a[(offset + ty) * n + col0 + tx];
    __syncthreads();

    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < TILE; k++)
        sum += left[ty][k] * top[k][tx];
    a[(row0 + ty) * n + col0 + tx] -= sum;
}
"""

OMP_SRC = r"""
/* Trailing updates of a blocked LU (block 16) for offsets 0, 16, ..., n - 32, on a copy of
 * the input: one parallel region, the steps are `omp for` loops over the trailing tiles
 * (their implicit barriers order the steps), each tile updated row by row with the row's
 * 16 inner products in a local accumulator, vectorized over the tile's 16 columns; the
 * row-panel tile is copied to the stack once per tile. */
#include <stddef.h>
#include <string.h>

#define TILE 16

void lu_tile_updates(const float *restrict in, float *restrict a, int n)
{
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int r = 0; r < n; r++)
            memcpy(a + (size_t)r * n, in + (size_t)r * n, (size_t)n * sizeof(float));

        for (int offset = 0; offset + 2 * TILE <= n; offset += TILE) {
            const int tiles = (n - offset) / TILE - 1;
#pragma omp for collapse(2) schedule(static)
            for (int by = 0; by < tiles; by++) {
                for (int bx = 0; bx < tiles; bx++) {
                    const size_t row0 = (size_t)offset + TILE + (size_t)by * TILE;
                    const size_t col0 = (size_t)offset + TILE + (size_t)bx * TILE;
                    /* the row-panel tile, copied: its 16 rows are n floats apart and
                     * would share L1 sets with the rows being updated (4 KiB aliasing
                     * when n is a multiple of 1024: 2-5x slower) */
                    float top[TILE][TILE] __attribute__((aligned(64)));
                    for (int k = 0; k < TILE; k++)
#pragma omp simd
                        for (int tx = 0; tx < TILE; tx++)
                            top[k][tx] = a[((size_t)offset + k) * n + col0 + tx];
                    for (int ty = 0; ty < TILE; ty++) {
                        const float *restrict left = a + (row0 + ty) * n + offset;
                        float *restrict c = a + (row0 + ty) * n + col0;
                        float acc[TILE] __attribute__((aligned(64)));
#pragma omp simd
                        for (int tx = 0; tx < TILE; tx++)
                            acc[tx] = 0.0f;
                        for (int k = 0; k < TILE; k++) {
                            const float l = left[k];
#pragma omp simd
                            for (int tx = 0; tx < TILE; tx++)
                                acc[tx] += l * top[k][tx];
                        }
#pragma omp simd
                        for (int tx = 0; tx < TILE; tx++)
                            c[tx] -= acc[tx];
                    }
                }
            }
        }
    }
}
"""

OPENCL_SRC = r"""
#define TILE 16

__kernel void lu_trailing_update(__global float *a, int n, int offset) {
    __local float left[TILE][TILE];
    __local float top[TILE][TILE];
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int row0 = offset + TILE + get_group_id(1) * TILE;
    const int col0 = offset + TILE + get_group_id(0) * TILE;

    left[ty][tx] = a[(row0 + ty) * n + offset + tx];
    top[ty][tx] = a[(offset + ty) * n + col0 + tx];
    barrier(CLK_LOCAL_MEM_FENCE);

    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < TILE; k++)
        sum += left[ty][k] * top[k][tx];
    a[(row0 + ty) * n + col0 + tx] -= sum;
}
"""


def offsets(n: int) -> range:
    """The step offsets of one run: 0, 16, ..., n - 32 (each leaves >= 1 trailing tile)."""
    return range(0, n - TILE, TILE)


class LUTile(Workload):
    name = "lu_tile"
    kind = "compute"
    description = "blocked-LU trailing updates, 16x16 shared tiles, n/16-1 launches"
    sizes = {
        "small": {"n": 256},
        "default": {"n": 1024},
        "large": {"n": 2048},
    }
    cuda_source = CUDA_SRC
    omp_source = OMP_SRC
    opencl_source = OPENCL_SRC
    opencl_reason = ""
    numba_reason = "no Python port"

    def make_inputs(self, p, rng):
        n = p["n"]
        assert n % TILE == 0 and n >= 2 * TILE, "n must be a multiple of 16, >= 32"
        c = 1.0 / np.sqrt(n)
        a = aligned_empty((n, n), np.float32)
        a[...] = rng.uniform(-1.0, 1.0, (n, n)) * c
        return {"a": a}

    def reference(self, p, inp):
        a = inp["a"].astype(np.float64)
        for o in offsets(p["n"]):
            e = o + TILE
            a[e:, e:] -= a[e:, o:e] @ a[o:e, e:]
        return {"a": a}

    def check(self, p, out, ref):
        n = p["n"]
        A = np.asarray(out["a"], dtype=np.float64).reshape(n, n)
        R = ref["a"]
        if not np.isfinite(A).all():
            return False, "non-finite values"
        atol = 1e-4 / np.sqrt(n)
        err = np.abs(A - R)
        tol = atol + 1e-5 * np.abs(R)
        bad = err > tol
        if bad.any():
            i = np.unravel_index(np.argmax(err - tol), err.shape)
            return False, (f"{int(bad.sum())} elements off, worst at "
                           f"{tuple(int(j) for j in i)}: {A[i]!r} vs {R[i]!r}")
        return True, f"max abs err {float(err.max()):.2e} (atol {atol:.1e})"

    # -- cpuify ---------------------------------------------------------------------------
    def run_cpuify(self, p, inp, mod):
        n = p["n"]
        bufs = inp.setdefault("_cpuify_bufs", {})
        if "a" not in bufs:
            bufs["a"] = aligned_empty((n, n), np.float32)
            bufs["fn"] = mod.get_function("lu_trailing_update")
        a = bufs["a"]
        fn = bufs["fn"]
        np.copyto(a, inp["a"])                    # cudaMemcpy device to device
        nn = np.int32(n)
        for o in offsets(n):
            t = (n - o) // TILE - 1
            fn((t, t), (TILE, TILE), (a, nn, np.int32(o)))
        return {"a": a}

    # -- OpenMP ---------------------------------------------------------------------------
    def run_omp(self, p, inp, lib):
        n = p["n"]
        bufs = inp.setdefault("_omp_bufs", {})
        if "a" not in bufs:
            bufs["a"] = aligned_empty((n, n), np.float32)
            lib.lu_tile_updates.restype = None
            lib.lu_tile_updates.argtypes = [_fp, _fp, ctypes.c_int]
        a = bufs["a"]
        lib.lu_tile_updates(_ptr(inp["a"]), _ptr(a), n)
        return {"a": a}

    # -- OpenCL ---------------------------------------------------------------------------
    def run_opencl(self, p, inp, cl, ctx, queue, prg):
        n = p["n"]
        bufs = inp.get("_cl_bufs")
        if bufs is None:
            mf = cl.mem_flags
            bufs = inp["_cl_bufs"] = {
                "in": cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=inp["a"]),
                "a": cl.Buffer(ctx, mf.READ_WRITE, size=n * n * 4),
                "h": aligned_empty((n, n), np.float32),
                "k": cl.Kernel(prg, "lu_trailing_update"),
            }
        a = bufs["a"]
        k = bufs["k"]
        cl.enqueue_copy(queue, a, bufs["in"])      # device-side copy of the input
        for o in offsets(n):
            t = (n - o) // TILE - 1
            k.set_args(a, np.int32(n), np.int32(o))
            cl.enqueue_nd_range_kernel(queue, k, (t * TILE, t * TILE), (TILE, TILE))
        cl.enqueue_copy(queue, bufs["h"], a)
        queue.finish()
        return {"a": bufs["h"]}

    def bytes_moved(self, p):
        n = p["n"]
        # the copy (read + write n^2), then per step the trailing submatrix read and written
        return 8.0 * n * n + sum(8.0 * (n - o - TILE) ** 2 for o in offsets(n))

    def flops(self, p):
        n = p["n"]
        return sum(2.0 * TILE * (n - o - TILE) ** 2 for o in offsets(n))


WORKLOAD = LUTile()
