"""Matrix transpose, out = in.T, n x n float32 (kind: bandwidth).

* CUDA: the CUDA samples' / "An Efficient Matrix Transpose in CUDA C/C++" kernel
  `transposeNoBankConflicts`: 32x32 tiles staged in `__shared__ float tile[32][33]` (the +1
  column of padding avoids shared-memory bank conflicts), block (32, 8), each thread moving
  4 elements in and 4 out, grid (n/32, n/32).
* OpenMP: cache-blocked transpose written for the CPU: 32x32 tiles distributed over threads
  with `collapse(2)`; inside a tile an `omp simd` loop writes output rows with unit stride
  and gathers the input column (the tile's 32 input lines stay in L1).
* OpenCL: the same kernel as CUDA with a `__local float tile[32][33]`, local size (32, 8).
* numba simulator: the same kernel in numba.cuda, at n = 64.

n must be a multiple of 32 (as in the CUDA sample).

Tolerance: exact (a transpose moves bits; out must equal in.T bit for bit).
"""

from __future__ import annotations

import ctypes

import numpy as np

from benchmarks.suite.workload import Workload, FLOAT_P as _fp, float_ptr as _ptr

CUDA_SRC = r"""
#define TILE_DIM 32
#define BLOCK_ROWS 8
// out = in^T for an n x n row-major matrix, n a multiple of TILE_DIM;
// grid (n/32, n/32), block (32, 8): each thread copies TILE_DIM/BLOCK_ROWS = 4 elements.
extern "C" __global__ void transposeNoBankConflicts(float *odata, const float *idata, int n) {
    __shared__ float tile[TILE_DIM][TILE_DIM + 1];
    int x = blockIdx.x * TILE_DIM + threadIdx.x;
    int y = blockIdx.y * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        tile[threadIdx.y + j][threadIdx.x] = idata[(size_t)(y + j) * n + x];
    __syncthreads();
    x = blockIdx.y * TILE_DIM + threadIdx.x;   // transposed block offset
    y = blockIdx.x * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        odata[(size_t)(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j];
}
"""

OMP_SRC = r"""
/* Cache-blocked transpose: 32x32 tiles over threads.  Within a tile the inner loop runs
 * along a row of the output (unit-stride stores, whole cache lines written) and reads a
 * column of the input (strided loads, gathered by `omp simd`); the 32 input rows of a tile,
 * 32 cache lines, stay in L1 while the tile is done.  (Staging the tile in a stack buffer, as
 * the GPU does in shared memory, measured 2x slower here.) */
#include <stddef.h>

#define T 32

void transpose(const float *restrict in, float *restrict out, int n)
{
#pragma omp parallel for collapse(2) schedule(static)
    for (int bi = 0; bi < n; bi += T)
        for (int bj = 0; bj < n; bj += T)
            for (int j = bj; j < bj + T; j++)
#pragma omp simd
                for (int i = bi; i < bi + T; i++)
                    out[(size_t)j * n + i] = in[(size_t)i * n + j];
}
"""

OPENCL_SRC = r"""
#define TILE_DIM 32
#define BLOCK_ROWS 8
// out = in^T, n a multiple of 32; global size (n, n/4), local size (32, 8).
__kernel void transposeNoBankConflicts(__global float *odata, __global const float *idata,
                                       int n) {
    __local float tile[TILE_DIM][TILE_DIM + 1];
    int lx = get_local_id(0), ly = get_local_id(1);
    int bx = get_group_id(0), by = get_group_id(1);
    int x = bx * TILE_DIM + lx;
    int y = by * TILE_DIM + ly;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        tile[ly + j][lx] = idata[(size_t)(y + j) * n + x];
    barrier(CLK_LOCAL_MEM_FENCE);
    x = by * TILE_DIM + lx;
    y = bx * TILE_DIM + ly;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        odata[(size_t)(y + j) * n + x] = tile[lx][ly + j];
}
"""

_numba_kernel = None


def _numba_transpose():
    """The CUDA kernel ported to numba.cuda (run by the simulator)."""
    global _numba_kernel
    if _numba_kernel is None:
        import numba
        from numba import cuda as _cuda
        # the kernel must see `cuda` as a module global: the simulator swaps it for its fake
        globals()["cuda"] = _cuda
        globals()["float32"] = numba.float32
        TILE_DIM, BLOCK_ROWS = 32, 8

        @_cuda.jit
        def transposeNoBankConflicts(odata, idata):
            tile = cuda.shared.array((TILE_DIM, TILE_DIM + 1), float32)
            tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
            x = cuda.blockIdx.x * TILE_DIM + tx
            y = cuda.blockIdx.y * TILE_DIM + ty
            for j in range(0, TILE_DIM, BLOCK_ROWS):
                tile[ty + j, tx] = idata[y + j, x]
            cuda.syncthreads()
            x = cuda.blockIdx.y * TILE_DIM + tx
            y = cuda.blockIdx.x * TILE_DIM + ty
            for j in range(0, TILE_DIM, BLOCK_ROWS):
                odata[y + j, x] = tile[tx, ty + j]

        _numba_kernel = transposeNoBankConflicts
    return _numba_kernel


class Transpose(Workload):
    name = "transpose"
    kind = "bandwidth"
    sizes = {
        "small": {"n": 1024},
        "default": {"n": 4096},
        "large": {"n": 8192},
    }
    cuda_source = CUDA_SRC
    omp_source = OMP_SRC
    opencl_source = OPENCL_SRC
    opencl_reason = ""
    numba_reason = ""
    numba_size = {"n": 64}
    description = "32x32 shared-memory tiled transpose (+1 padding), block 32x8"

    TILE = 32
    ROWS = 8

    def make_inputs(self, p, rng):
        n = p["n"]
        assert n % self.TILE == 0, "n must be a multiple of 32"
        return {"a": rng.standard_normal((n, n), dtype=np.float32)}

    def reference(self, p, inp):
        return {"out": np.ascontiguousarray(inp["a"].T)}

    def check(self, p, out, ref):
        o = np.asarray(out["out"])
        r = ref["out"]
        if o.shape != r.shape:
            return False, f"shape {o.shape} != {r.shape}"
        if np.array_equal(o.view(np.uint32), r.view(np.uint32)):
            return True, "exact"
        bad = np.argwhere(o.view(np.uint32) != r.view(np.uint32))
        i, j = bad[0]
        return False, f"{len(bad)} elements differ, first at ({i}, {j}): {o[i, j]} vs {r[i, j]}"

    def run_cpuify(self, p, inp, mod):
        n = p["n"]
        bufs = inp.setdefault("_cpuify_bufs", {})
        if "out" not in bufs:
            bufs["out"] = np.empty((n, n), np.float32)
            bufs["fn"] = mod.get_function("transposeNoBankConflicts")
        out = bufs["out"]
        g = n // self.TILE
        bufs["fn"]((g, g), (self.TILE, self.ROWS), (out, inp["a"], np.int32(n)))
        return {"out": out}

    def run_omp(self, p, inp, lib):
        n = p["n"]
        bufs = inp.setdefault("_omp_bufs", {})
        if "out" not in bufs:
            bufs["out"] = np.empty((n, n), np.float32)
            lib.transpose.restype = None
            lib.transpose.argtypes = [_fp, _fp, ctypes.c_int]
        out = bufs["out"]
        lib.transpose(_ptr(inp["a"]), _ptr(out), n)
        return {"out": out}

    def run_opencl(self, p, inp, cl, ctx, queue, prg):
        n = p["n"]
        bufs = inp.get("_cl_bufs")
        if bufs is None:
            mf = cl.mem_flags
            bufs = inp["_cl_bufs"] = {
                "a": cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=inp["a"]),
                "out": cl.Buffer(ctx, mf.WRITE_ONLY, size=n * n * 4),
                "hout": np.empty((n, n), np.float32),
                "k": cl.Kernel(prg, "transposeNoBankConflicts"),
            }
        k = bufs["k"]
        k.set_args(bufs["out"], bufs["a"], np.int32(n))
        cl.enqueue_nd_range_kernel(queue, k, (n, n * self.ROWS // self.TILE),
                                   (self.TILE, self.ROWS))
        cl.enqueue_copy(queue, bufs["hout"], bufs["out"])
        queue.finish()
        return {"out": bufs["hout"]}

    def run_numba(self, p, inp):
        n = p["n"]
        out = np.empty((n, n), np.float32)
        g = n // self.TILE
        _numba_transpose()[(g, g), (self.TILE, self.ROWS)](out, inp["a"])
        return {"out": out}

    def bytes_moved(self, p):
        return 2.0 * 4 * p["n"] ** 2      # read n^2 floats, write n^2 floats

    def flops(self, p):
        return None


WORKLOAD = Transpose()
