"""256-bin histogram of n uint8 values (kind: other -- memory streaming plus atomics).

* CUDA: the classic shared-memory histogram: each block of 256 threads zeroes a
  `__shared__ unsigned int` histogram of 256 bins, walks the data with a grid-stride loop
  reading 4 bytes (one `uchar4`) per thread and iteration, counts with shared-memory
  `atomicAdd`, then adds its 256 bins into the global histogram with global `atomicAdd`.
  Launched with min(240, ceil(n / 1024)) blocks (240: enough to fill a GPU; n/4 need not
  be a multiple of the grid); the host zeroes the output histogram before each launch.
* OpenMP: per-thread private histograms merged at the end: each thread counts its
  static share of the data into 4 private sub-histograms (bytes i, i+1, i+2, i+3 of each
  32-bit word go to different sub-histograms, so that runs of equal bytes do not serialize
  on one counter's store-to-load dependency), sums them, and adds them to the shared
  result with `omp atomic`.
* OpenCL: the same kernel as CUDA (`__local` histogram, `atomic_inc` / `atomic_add`).
* numba simulator: the same kernel in numba.cuda (bytes read one by one), at n = 2^13.

n must be a multiple of 4.  Data: uniform random bytes.

Tolerance: exact (integer counts).
"""

from __future__ import annotations

import ctypes

import numpy as np

from benchmarks.suite.workload import Workload

CUDA_SRC = r"""
#define NUM_BINS 256
// hist must be zeroed before the launch; n must be a multiple of 4.
// block 256 threads, any grid (grid-stride loop over n/4 words).
extern "C" __global__ void histogram256(const unsigned char *data, unsigned int *hist, int n) {
    __shared__ unsigned int s_hist[NUM_BINS];
    for (int b = threadIdx.x; b < NUM_BINS; b += blockDim.x)
        s_hist[b] = 0;
    __syncthreads();
    const uchar4 *data4 = reinterpret_cast<const uchar4 *>(data);
    int n4 = n / 4;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += blockDim.x * gridDim.x) {
        uchar4 v = data4[i];
        atomicAdd(&s_hist[v.x], 1u);
        atomicAdd(&s_hist[v.y], 1u);
        atomicAdd(&s_hist[v.z], 1u);
        atomicAdd(&s_hist[v.w], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < NUM_BINS; b += blockDim.x) {
        unsigned int c = s_hist[b];
        if (c) atomicAdd(&hist[b], c);
    }
}
"""

OMP_SRC = r"""
/* Per-thread private histograms merged at the end.  Each thread counts its static share of
 * the data 4 bytes at a time into 4 sub-histograms (one per byte lane: consecutive equal
 * bytes do not wait on each other's increment), then adds them to the result atomically. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define NUM_BINS 256

void histogram256(const uint8_t *restrict data, uint32_t *restrict hist, long n)
{
    memset(hist, 0, NUM_BINS * sizeof(uint32_t));
#pragma omp parallel
    {
        uint32_t h[4][NUM_BINS];
        memset(h, 0, sizeof h);
        const long n4 = n / 4;
#pragma omp for schedule(static) nowait
        for (long i = 0; i < n4; i++) {
            uint32_t w;
            memcpy(&w, data + 4 * i, 4);
            h[0][w & 0xff]++;
            h[1][(w >> 8) & 0xff]++;
            h[2][(w >> 16) & 0xff]++;
            h[3][w >> 24]++;
        }
        for (int b = 0; b < NUM_BINS; b++) {
            uint32_t c = h[0][b] + h[1][b] + h[2][b] + h[3][b];
#pragma omp atomic
            hist[b] += c;
        }
    }
}
"""

OPENCL_SRC = r"""
#define NUM_BINS 256
// hist must be zeroed before the launch; n a multiple of 4; local size 256, any global size.
__kernel void histogram256(__global const uchar4 *data4, __global uint *hist, int n) {
    __local uint s_hist[NUM_BINS];
    int lid = get_local_id(0), lsz = get_local_size(0);
    for (int b = lid; b < NUM_BINS; b += lsz)
        s_hist[b] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    int n4 = n / 4;
    for (int i = get_global_id(0); i < n4; i += get_global_size(0)) {
        uchar4 v = data4[i];
        atomic_inc(&s_hist[v.x]);
        atomic_inc(&s_hist[v.y]);
        atomic_inc(&s_hist[v.z]);
        atomic_inc(&s_hist[v.w]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int b = lid; b < NUM_BINS; b += lsz) {
        uint c = s_hist[b];
        if (c) atomic_add(&hist[b], c);
    }
}
"""


_numba_kernel = None


def _numba_histogram():
    """The CUDA kernel ported to numba.cuda (run by the simulator)."""
    global _numba_kernel
    if _numba_kernel is None:
        import numba
        from numba import cuda as _cuda
        # the kernel must see `cuda` as a module global: the simulator swaps it for its fake
        globals()["cuda"] = _cuda
        globals()["uint32"] = numba.uint32
        NUM_BINS = 256

        @_cuda.jit
        def histogram256(data, hist, n):
            s_hist = cuda.shared.array(NUM_BINS, uint32)
            tid = cuda.threadIdx.x
            for b in range(tid, NUM_BINS, cuda.blockDim.x):
                s_hist[b] = 0
            cuda.syncthreads()
            n4 = n // 4
            stride = cuda.blockDim.x * cuda.gridDim.x
            for i in range(cuda.blockIdx.x * cuda.blockDim.x + tid, n4, stride):
                cuda.atomic.add(s_hist, data[4 * i], 1)
                cuda.atomic.add(s_hist, data[4 * i + 1], 1)
                cuda.atomic.add(s_hist, data[4 * i + 2], 1)
                cuda.atomic.add(s_hist, data[4 * i + 3], 1)
            cuda.syncthreads()
            for b in range(tid, NUM_BINS, cuda.blockDim.x):
                c = s_hist[b]
                if c:
                    cuda.atomic.add(hist, b, c)

        _numba_kernel = histogram256
    return _numba_kernel


class Histogram(Workload):
    name = "histogram"
    kind = "other"
    sizes = {
        "small": {"n": 1 << 20},
        "default": {"n": 1 << 25},
        "large": {"n": 1 << 27},
    }
    cuda_source = CUDA_SRC
    omp_source = OMP_SRC
    opencl_source = OPENCL_SRC
    opencl_reason = ""
    numba_reason = ""
    numba_size = {"n": 1 << 13}
    description = "256-bin histogram of bytes: shared-memory atomics per block, then global"

    BLOCK = 256
    GRID = 240
    BINS = 256

    def _grid(self, p):
        return min(self.GRID, -(-p["n"] // (4 * self.BLOCK)))

    def make_inputs(self, p, rng):
        n = p["n"]
        assert n % 4 == 0, "n must be a multiple of 4"
        return {"data": rng.integers(0, 256, n, dtype=np.uint8)}

    def reference(self, p, inp):
        return {"hist": np.bincount(inp["data"], minlength=self.BINS).astype(np.uint32)}

    def check(self, p, out, ref):
        h = np.asarray(out["hist"])
        r = ref["hist"]
        if h.shape != r.shape:
            return False, f"shape {h.shape} != {r.shape}"
        if np.array_equal(h.astype(np.int64), r.astype(np.int64)):
            return True, "exact"
        bad = np.flatnonzero(h.astype(np.int64) != r)
        return False, (f"{len(bad)} bins differ, first bin {bad[0]}: {h[bad[0]]} vs "
                       f"{r[bad[0]]}; total {int(h.sum())} vs {int(r.sum())}")

    def run_cpuify(self, p, inp, mod):
        bufs = inp.setdefault("_cpuify_bufs", {})
        if "hist" not in bufs:
            bufs["hist"] = np.zeros(self.BINS, np.uint32)
            bufs["fn"] = mod.get_function("histogram256")
        hist = bufs["hist"]
        hist[:] = 0                                     # cudaMemset
        bufs["fn"]((self._grid(p),), (self.BLOCK,), (inp["data"], hist, np.int32(p["n"])))
        return {"hist": hist}

    def run_omp(self, p, inp, lib):
        bufs = inp.setdefault("_omp_bufs", {})
        if "hist" not in bufs:
            bufs["hist"] = np.zeros(self.BINS, np.uint32)
            lib.histogram256.restype = None
            lib.histogram256.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]
        hist = bufs["hist"]
        lib.histogram256(inp["data"].ctypes.data, hist.ctypes.data, p["n"])
        return {"hist": hist}

    def run_opencl(self, p, inp, cl, ctx, queue, prg):
        bufs = inp.get("_cl_bufs")
        if bufs is None:
            mf = cl.mem_flags
            bufs = inp["_cl_bufs"] = {
                "data": cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=inp["data"]),
                "hist": cl.Buffer(ctx, mf.READ_WRITE, size=self.BINS * 4),
                "hhist": np.empty(self.BINS, np.uint32),
                "k": cl.Kernel(prg, "histogram256"),
            }
        k = bufs["k"]
        cl.enqueue_fill_buffer(queue, bufs["hist"], np.uint32(0), 0, self.BINS * 4)
        k.set_args(bufs["data"], bufs["hist"], np.int32(p["n"]))
        cl.enqueue_nd_range_kernel(queue, k, (self._grid(p) * self.BLOCK,), (self.BLOCK,))
        cl.enqueue_copy(queue, bufs["hhist"], bufs["hist"])
        queue.finish()
        return {"hist": bufs["hhist"]}

    def run_numba(self, p, inp):
        hist = np.zeros(self.BINS, np.uint32)
        _numba_histogram()[self._grid(p), self.BLOCK](inp["data"], hist, p["n"])
        return {"hist": hist}

    def bytes_moved(self, p):
        return float(p["n"])            # each byte read once (the 1 KiB histogram is noise)

    def flops(self, p):
        return None


WORKLOAD = Histogram()
