"""Rodinia pathfinder: minimum-cost path from the top row to each cell of the bottom row of a
rows x cols grid of weights in 0..9, moving down, down-left or down-right (kind: other).

dst[x] = wall[r][x] + min(src[x-1], src[x], src[x+1]) (neighbours clamped at the edges),
row by row; 100000 columns x 100 rows by default, int32 throughout.

* CUDA: Rodinia's `dynproc_kernel` unchanged but for formatting: blocks of 256 threads,
  each advances `pyramid_height` (20) rows per launch inside `__shared__` memory (`prev`,
  `result`), computing a pyramid that shrinks by one halo column per side and row;
  `__syncthreads()` twice per row inside the loop, which ends with a block-uniform `break`.
  Blocks overlap by 2 * pyramid_height columns; ceil((rows - 1) / 20) launches, ping-ponging
  between two result rows.
* OpenMP: one parallel region; per row an `omp for simd` over the interior columns
  (branch-free three-way min), the two edge columns by an `omp single nowait`, ping-pong
  buffers, the implicit barrier of the worksharing loop between rows (Rodinia's OpenMP version does the same
  with a parallel loop per row).
* OpenCL: Rodinia's OpenCL kernel (the same as CUDA with `__local` arrays).

Reference: NumPy row-by-row DP with np.minimum on shifted views.  Check: exact.
"""

from __future__ import annotations

import ctypes

import numpy as np

from benchmarks.suite.workload import Workload, INT_P as _ip

CUDA_SRC = r"""
#define BLOCK_SIZE 256
#define HALO 1
#define IN_RANGE(x, min, max) ((x) >= (min) && (x) <= (max))
#define MIN(a, b) ((a) <= (b) ? (a) : (b))

// Rodinia pathfinder dynproc_kernel: advances `iteration` rows; gpuWall points at row 1.
extern "C" __global__ void dynproc_kernel(int iteration, const int *gpuWall, const int *gpuSrc,
                                          int *gpuResults, int cols, int rows,
                                          int startStep, int border) {
    __shared__ int prev[BLOCK_SIZE];
    __shared__ int result[BLOCK_SIZE];

    int bx = blockIdx.x;
    int tx = threadIdx.x;

    // each block finally computes the result for a small block after N iterations;
    // the small blocks are non-overlapping and cover all the input data
    int small_block_cols = BLOCK_SIZE - iteration * HALO * 2;
    int blkX = small_block_cols * bx - border;
    int blkXmax = blkX + BLOCK_SIZE - 1;
    int xidx = blkX + tx;

    // the valid range of this block (columns inside the grid)
    int validXmin = (blkX < 0) ? -blkX : 0;
    int validXmax = (blkXmax > cols - 1) ? BLOCK_SIZE - 1 - (blkXmax - cols + 1) : BLOCK_SIZE - 1;

    int W = tx - 1;
    int E = tx + 1;
    W = (W < validXmin) ? validXmin : W;
    E = (E > validXmax) ? validXmax : E;

    bool isValid = IN_RANGE(tx, validXmin, validXmax);

    if (IN_RANGE(xidx, 0, cols - 1))
        prev[tx] = gpuSrc[xidx];
    __syncthreads();

    bool computed;
    for (int i = 0; i < iteration; i++) {
        computed = false;
        if (IN_RANGE(tx, i + 1, BLOCK_SIZE - i - 2) && isValid) {
            computed = true;
            int left = prev[W];
            int up = prev[tx];
            int right = prev[E];
            int shortest = MIN(left, up);
            shortest = MIN(shortest, right);
            int index = cols * (startStep + i) + xidx;
            result[tx] = shortest + gpuWall[index];
        }
        __syncthreads();
        if (i == iteration - 1)
            break;
        if (computed)          // assign the computation range
            prev[tx] = result[tx];
        __syncthreads();
    }

    // after the last iteration, only threads within the small block hold a result
    if (computed)
        gpuResults[xidx] = result[tx];
}
"""

OMP_SRC = r"""
#include <stddef.h>

static inline int min3(int a, int b, int c)
{
    int m = a < b ? a : b;
    return m < c ? m : c;
}

/* wall: rows x cols; returns the bottom row of costs in out (cols ints);
 * tmp: workspace of cols ints.  The rows alternate between out and tmp so that the last
 * one lands in out. */
void pathfinder(const int *restrict wall, int *restrict out, int *restrict tmp,
                int rows, int cols)
{
    int *bufs[2];
    /* row r (r = 0 .. rows-1) is written to bufs[r & 1]; make row rows-1 be `out` */
    bufs[(rows - 1) & 1] = out;
    bufs[rows & 1] = tmp;
#pragma omp parallel
    {
#pragma omp for simd schedule(static)
        for (int x = 0; x < cols; x++)
            bufs[0][x] = wall[x];
        for (int r = 1; r < rows; r++) {
            const int *restrict src = bufs[(r - 1) & 1];
            int *restrict dst = bufs[r & 1];
            const int *restrict w = wall + (size_t)r * cols;
            /* the edge columns, by one thread while the others start on the interior; the
             * barrier at the end of the loop below completes the row */
#pragma omp single nowait
            {
                if (cols == 1) {
                    dst[0] = w[0] + src[0];
                } else {
                    dst[0] = w[0] + (src[0] < src[1] ? src[0] : src[1]);
                    dst[cols - 1] = w[cols - 1] +
                        (src[cols - 1] < src[cols - 2] ? src[cols - 1] : src[cols - 2]);
                }
            }
#pragma omp for simd schedule(static)
            for (int x = 1; x < cols - 1; x++)
                dst[x] = w[x] + min3(src[x - 1], src[x], src[x + 1]);
        }
    }
}
"""

OPENCL_SRC = r"""
#define BLOCK_SIZE 256
#define HALO 1
#define IN_RANGE(x, min, max) ((x) >= (min) && (x) <= (max))
#define MIN(a, b) ((a) <= (b) ? (a) : (b))

__kernel void dynproc_kernel(int iteration, __global const int *gpuWall,
                             __global const int *gpuSrc, __global int *gpuResults,
                             int cols, int rows, int startStep, int border) {
    __local int prev[BLOCK_SIZE];
    __local int result[BLOCK_SIZE];

    int bx = get_group_id(0);
    int tx = get_local_id(0);

    int small_block_cols = BLOCK_SIZE - iteration * HALO * 2;
    int blkX = small_block_cols * bx - border;
    int blkXmax = blkX + BLOCK_SIZE - 1;
    int xidx = blkX + tx;

    int validXmin = (blkX < 0) ? -blkX : 0;
    int validXmax = (blkXmax > cols - 1) ? BLOCK_SIZE - 1 - (blkXmax - cols + 1) : BLOCK_SIZE - 1;

    int W = tx - 1;
    int E = tx + 1;
    W = (W < validXmin) ? validXmin : W;
    E = (E > validXmax) ? validXmax : E;

    bool isValid = IN_RANGE(tx, validXmin, validXmax);

    if (IN_RANGE(xidx, 0, cols - 1))
        prev[tx] = gpuSrc[xidx];
    barrier(CLK_LOCAL_MEM_FENCE);

    bool computed;
    for (int i = 0; i < iteration; i++) {
        computed = false;
        if (IN_RANGE(tx, i + 1, BLOCK_SIZE - i - 2) && isValid) {
            computed = true;
            int left = prev[W];
            int up = prev[tx];
            int right = prev[E];
            int shortest = MIN(left, up);
            shortest = MIN(shortest, right);
            int index = cols * (startStep + i) + xidx;
            result[tx] = shortest + gpuWall[index];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (i == iteration - 1)
            break;
        if (computed)
            prev[tx] = result[tx];
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    if (computed)
        gpuResults[xidx] = result[tx];
}
"""


BLOCK_SIZE = 256
HALO = 1


def _launches(rows: int, pyramid_height: int):
    """(iteration, startStep) of each launch, as Rodinia's calc_path."""
    return [(min(pyramid_height, rows - t - 1), t) for t in range(0, rows - 1, pyramid_height)]


class Pathfinder(Workload):
    name = "pathfinder"
    kind = "other"
    description = "Rodinia pathfinder: DP over rows, shared-memory pyramid of height 20"
    sizes = {
        "small": {"cols": 10000, "rows": 100, "pyramid_height": 20},
        "default": {"cols": 100000, "rows": 100, "pyramid_height": 20},
        "large": {"cols": 1000000, "rows": 100, "pyramid_height": 20},
    }
    cuda_source = CUDA_SRC
    omp_source = OMP_SRC
    opencl_source = OPENCL_SRC
    opencl_reason = ""
    numba_reason = "no Python port"

    def _geometry(self, p):
        cols, ph = p["cols"], p["pyramid_height"]
        border = ph * HALO
        small = BLOCK_SIZE - ph * HALO * 2
        block_cols = cols // small + (0 if cols % small == 0 else 1)
        return border, block_cols

    def make_inputs(self, p, rng):
        wall = rng.integers(0, 10, (p["rows"], p["cols"]), dtype=np.int32)
        return {"wall": wall}

    def reference(self, p, inp):
        wall = inp["wall"]
        src = wall[0].copy()
        for r in range(1, p["rows"]):
            best = src.copy()
            np.minimum(best[1:], src[:-1], out=best[1:])
            np.minimum(best[:-1], src[1:], out=best[:-1])
            src = best + wall[r]
        return {"result": src}

    def run_cpuify(self, p, inp, mod):
        cols, rows, ph = p["cols"], p["rows"], p["pyramid_height"]
        border, block_cols = self._geometry(p)
        bufs = inp.setdefault("_cpuify_bufs", {})
        if "res" not in bufs:
            bufs["res"] = [np.empty(cols, np.int32), np.empty(cols, np.int32)]
            bufs["fn"] = mod.get_function("dynproc_kernel")
        wall = inp["wall"]
        res, fn = bufs["res"], bufs["fn"]
        np.copyto(res[0], wall[0])             # Rodinia: gpuResult[0] <- data row 0
        wall1 = wall[1:]                       # gpuWall = data + cols
        src, dst = 1, 0
        for it, t in _launches(rows, ph):
            src, dst = dst, src
            fn((block_cols,), (BLOCK_SIZE,),
               (np.int32(it), wall1, res[src], res[dst], np.int32(cols), np.int32(rows),
                np.int32(t), np.int32(border)))
        return {"result": res[dst]}

    def run_omp(self, p, inp, lib):
        cols, rows = p["cols"], p["rows"]
        bufs = inp.setdefault("_omp_bufs", {})
        if "out" not in bufs:
            bufs["out"] = np.empty(cols, np.int32)
            bufs["tmp"] = np.empty(cols, np.int32)
            lib.pathfinder.restype = None
            lib.pathfinder.argtypes = [_ip, _ip, _ip, ctypes.c_int, ctypes.c_int]
        out = bufs["out"]
        lib.pathfinder(inp["wall"].ctypes.data_as(_ip), out.ctypes.data_as(_ip),
                       bufs["tmp"].ctypes.data_as(_ip), rows, cols)
        return {"result": out}

    def run_opencl(self, p, inp, cl, ctx, queue, prg):
        cols, rows, ph = p["cols"], p["rows"], p["pyramid_height"]
        border, block_cols = self._geometry(p)
        bufs = inp.get("_cl_bufs")
        if bufs is None:
            mf = cl.mem_flags
            wall = inp["wall"]
            bufs = inp["_cl_bufs"] = {
                "row0": cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=wall[0]),
                "wall": cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR,
                                  hostbuf=np.ascontiguousarray(wall[1:])),
                "res": [cl.Buffer(ctx, mf.READ_WRITE, size=cols * 4) for _ in range(2)],
                "h": np.empty(cols, np.int32),
                "k": cl.Kernel(prg, "dynproc_kernel"),
            }
        res, k = bufs["res"], bufs["k"]
        cl.enqueue_copy(queue, res[0], bufs["row0"])
        src, dst = 1, 0
        for it, t in _launches(rows, ph):
            src, dst = dst, src
            k.set_args(np.int32(it), bufs["wall"], res[src], res[dst], np.int32(cols),
                       np.int32(rows), np.int32(t), np.int32(border))
            cl.enqueue_nd_range_kernel(queue, k, (block_cols * BLOCK_SIZE,), (BLOCK_SIZE,))
        cl.enqueue_copy(queue, bufs["h"], res[dst])
        queue.finish()
        return {"result": bufs["h"]}

    def bytes_moved(self, p):
        # every wall cell read once, plus one row read and written per launch
        cols, rows, ph = p["cols"], p["rows"], p["pyramid_height"]
        return 4.0 * cols * rows + 8.0 * cols * len(_launches(rows, ph))

    def flops(self, p):
        return None


WORKLOAD = Pathfinder()
