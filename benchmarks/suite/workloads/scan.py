"""Inclusive prefix sum (scan) of n int32 values (kind: bandwidth).

* CUDA: the classic multi-pass scan.  `scan_tiles`: a block of 256 threads scans a tile of
  1024 elements (coalesced loads into shared memory, each thread scans 4 consecutive
  elements sequentially, a Hillis-Steele scan of the 256 thread totals in shared memory, the
  offsets added back, coalesced stores) and writes the tile total to `tile_sums`; the tile
  sums are scanned by the same kernel, recursively, until one tile is left; `add_offsets`
  adds the scanned sum of the previous tiles to every element of a tile.  For n = 2^24:
  scan (16384 tiles), scan (16 tiles), scan (1 tile), add, add: five launches.
* OpenMP: a cache-blocked two-pass scan.  The array is processed in rounds of
  threads x 16384 elements; in a round each thread sums its 64 KiB chunk (`omp simd
  reduction`), one barrier, each thread derives its offset from the chunk sums and scans its
  chunk (now in L2) into the output.  One pass over DRAM, one barrier per round (the chunk
  sums are double-buffered).
* OpenCL: the same kernels as CUDA, same recursion.

int32 values in [0, 8), so every implementation must match NumPy's np.cumsum exactly
(integer addition is associative).  Traffic counted as 8 bytes per element (read the input,
write the output once: the minimum; the multi-pass GPU algorithm moves about twice that).
"""

from __future__ import annotations

import ctypes

import numpy as np

from benchmarks.suite.workload import Workload

THREADS = 256
ITEMS = 4
TILE = THREADS * ITEMS

CUDA_SRC = r"""
#define THREADS 256
#define ITEMS 4
#define TILE (THREADS * ITEMS)
// Inclusive scan of one tile of TILE elements per block; tile total to tile_sums[blockIdx.x].
extern "C" __global__ void scan_tiles(const int *__restrict__ in, int *__restrict__ out,
                                      int *__restrict__ tile_sums, int n) {
    __shared__ int s[TILE];
    __shared__ int t[THREADS];
    const int tid = threadIdx.x;
    const int base = blockIdx.x * TILE;
#pragma unroll
    for (int k = 0; k < ITEMS; k++) {              // coalesced loads
        int i = base + k * THREADS + tid;
        s[k * THREADS + tid] = i < n ? in[i] : 0;
    }
    __syncthreads();
    int acc = 0;                                   // sequential scan of 4 consecutive items
#pragma unroll
    for (int k = 0; k < ITEMS; k++) {
        acc += s[tid * ITEMS + k];
        s[tid * ITEMS + k] = acc;
    }
    t[tid] = acc;
    __syncthreads();
    for (int off = 1; off < THREADS; off <<= 1) {  // Hillis-Steele scan of the thread totals
        int v = tid >= off ? t[tid - off] : 0;
        __syncthreads();
        t[tid] += v;
        __syncthreads();
    }
    const int excl = tid > 0 ? t[tid - 1] : 0;
#pragma unroll
    for (int k = 0; k < ITEMS; k++)
        s[tid * ITEMS + k] += excl;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < ITEMS; k++) {              // coalesced stores
        int i = base + k * THREADS + tid;
        if (i < n) out[i] = s[k * THREADS + tid];
    }
    if (tid == THREADS - 1) tile_sums[blockIdx.x] = t[THREADS - 1];
}
// Adds the scanned total of tiles 0..b-1 to every element of tile b (b >= 1).
extern "C" __global__ void add_offsets(int *__restrict__ out,
                                       const int *__restrict__ scanned_sums, int n) {
    const int b = blockIdx.x + 1;
    const int off = scanned_sums[b - 1];
#pragma unroll
    for (int k = 0; k < ITEMS; k++) {
        int i = b * TILE + k * THREADS + threadIdx.x;
        if (i < n) out[i] += off;
    }
}
"""

OMP_SRC = r"""
#include <omp.h>
#define CH 16384                 /* elements per thread and round: 64 KiB, stays in L2 */
#define MAXT 1024
void inclusive_scan(const int *restrict in, int *restrict out, long n)
{
    static int sums[2][MAXT];
    int carry = 0;               /* total of all previous rounds (each thread's own copy) */
#pragma omp parallel firstprivate(carry)
    {
        const int t = omp_get_thread_num(), T = omp_get_num_threads();
        int r = 0;
        for (long base = 0; base < n; base += (long)T * CH, r ^= 1) {
            const long lo = base + (long)t * CH < n ? base + (long)t * CH : n;
            const long hi = lo + CH < n ? lo + CH : n;
            int s = 0;
#pragma omp simd reduction(+:s)
            for (long i = lo; i < hi; i++)           /* pass 1: chunk sum */
                s += in[i];
            sums[r][t] = s;
#pragma omp barrier
            int acc = carry, tot = carry;
            for (int k = 0; k < T; k++) {
                if (k < t) acc += sums[r][k];
                tot += sums[r][k];
            }
            carry = tot;
            for (long i = lo; i < hi; i++) {         /* pass 2: scan the chunk (in L2) */
                acc += in[i];
                out[i] = acc;
            }
            /* sums[r] is rewritten two rounds later, after everyone passed the next barrier */
        }
    }
}
"""

OPENCL_SRC = r"""
#define THREADS 256
#define ITEMS 4
#define TILE (THREADS * ITEMS)
__kernel void scan_tiles(__global const int *restrict in, __global int *restrict out,
                         __global int *restrict tile_sums, int n) {
    __local int s[TILE];
    __local int t[THREADS];
    const int tid = get_local_id(0);
    const int base = get_group_id(0) * TILE;
    for (int k = 0; k < ITEMS; k++) {
        int i = base + k * THREADS + tid;
        s[k * THREADS + tid] = i < n ? in[i] : 0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    int acc = 0;
    for (int k = 0; k < ITEMS; k++) {
        acc += s[tid * ITEMS + k];
        s[tid * ITEMS + k] = acc;
    }
    t[tid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int off = 1; off < THREADS; off <<= 1) {
        int v = tid >= off ? t[tid - off] : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        t[tid] += v;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const int excl = tid > 0 ? t[tid - 1] : 0;
    for (int k = 0; k < ITEMS; k++)
        s[tid * ITEMS + k] += excl;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = 0; k < ITEMS; k++) {
        int i = base + k * THREADS + tid;
        if (i < n) out[i] = s[k * THREADS + tid];
    }
    if (tid == THREADS - 1) tile_sums[get_group_id(0)] = t[THREADS - 1];
}
__kernel void add_offsets(__global int *restrict out, __global const int *restrict scanned_sums,
                          int n) {
    const int b = get_group_id(0) + 1;
    const int off = scanned_sums[b - 1];
    for (int k = 0; k < ITEMS; k++) {
        int i = b * TILE + k * THREADS + get_local_id(0);
        if (i < n) out[i] += off;
    }
}
"""


def _levels(n: int) -> list[int]:
    """Element counts of the recursion levels: n, tiles(n), tiles(tiles(n)), ... down to a
    level that fits one tile."""
    lv = [n]
    while lv[-1] > TILE:
        lv.append((lv[-1] + TILE - 1) // TILE)
    return lv


class Scan(Workload):
    name = "scan"
    kind = "bandwidth"
    description = "inclusive prefix sum of int32: tile scan + scan of tile sums + add"
    sizes = {
        "small": {"n": 1 << 20},
        "default": {"n": 1 << 24},
        "large": {"n": 1 << 26},
    }
    cuda_source = CUDA_SRC
    omp_source = OMP_SRC
    opencl_source = OPENCL_SRC
    numba_reason = "no Python port"

    def make_inputs(self, p, rng):
        return {"x": rng.integers(0, 8, p["n"], dtype=np.int32)}

    def reference(self, p, inp):
        return {"y": np.cumsum(inp["x"], dtype=np.int32)}

    # -- cpuify: recursion over levels, buffers per level allocated once ------------------
    def run_cpuify(self, p, inp, mod):
        n = p["n"]
        b = inp.get("_cpuify_bufs")
        if b is None:
            lv = _levels(n)
            b = inp["_cpuify_bufs"] = {
                "lv": lv,
                "out": [np.empty(m, np.int32) for m in lv],     # scanned values per level
                "sums": [np.empty((m + TILE - 1) // TILE, np.int32) for m in lv],
                "scan": mod.get_function("scan_tiles"), "add": mod.get_function("add_offsets"),
            }
        lv, outs, sums = b["lv"], b["out"], b["sums"]
        src = inp["x"]
        for j, m in enumerate(lv):                  # down: scan tiles, collect tile sums
            b["scan"](((m + TILE - 1) // TILE,), (THREADS,), (src, outs[j], sums[j], np.int32(m)))
            src = sums[j]
        for j in range(len(lv) - 2, -1, -1):        # up: add the scanned sums of the level below
            tiles = (lv[j] + TILE - 1) // TILE
            b["add"]((tiles - 1,), (THREADS,), (outs[j], outs[j + 1], np.int32(lv[j])))
        return {"y": outs[0]}

    def run_omp(self, p, inp, lib):
        n = p["n"]
        b = inp.get("_omp_bufs")
        if b is None:
            lib.inclusive_scan.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]
            lib.inclusive_scan.restype = None
            b = inp["_omp_bufs"] = {"y": np.empty(n, np.int32)}
        lib.inclusive_scan(inp["x"].ctypes.data, b["y"].ctypes.data, n)
        return {"y": b["y"]}

    def run_opencl(self, p, inp, cl, ctx, queue, prg):
        # timed: all launches of the recursion and the blocking read of the result
        n = p["n"]
        b = inp.get("_cl_bufs")
        if b is None:
            mf = cl.mem_flags
            lv = _levels(n)
            b = inp["_cl_bufs"] = {
                "lv": lv,
                "x": cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=inp["x"]),
                "out": [cl.Buffer(ctx, mf.READ_WRITE, size=4 * m) for m in lv],
                "sums": [cl.Buffer(ctx, mf.READ_WRITE, size=4 * ((m + TILE - 1) // TILE))
                         for m in lv],
                "scan": cl.Kernel(prg, "scan_tiles"), "add": cl.Kernel(prg, "add_offsets"),
                "hy": np.empty(n, np.int32),
            }
        lv, outs, sums = b["lv"], b["out"], b["sums"]
        src = b["x"]
        for j, m in enumerate(lv):
            tiles = (m + TILE - 1) // TILE
            b["scan"].set_args(src, outs[j], sums[j], np.int32(m))
            cl.enqueue_nd_range_kernel(queue, b["scan"], (tiles * THREADS,), (THREADS,))
            src = sums[j]
        for j in range(len(lv) - 2, -1, -1):
            tiles = (lv[j] + TILE - 1) // TILE
            b["add"].set_args(outs[j], outs[j + 1], np.int32(lv[j]))
            cl.enqueue_nd_range_kernel(queue, b["add"], ((tiles - 1) * THREADS,), (THREADS,))
        cl.enqueue_copy(queue, b["hy"], outs[0], is_blocking=True)
        return {"y": b["hy"]}

    def bytes_moved(self, p):
        return 8.0 * p["n"]


WORKLOAD = Scan()
