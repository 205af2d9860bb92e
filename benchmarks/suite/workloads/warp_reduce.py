"""Sum of n float32 values with warp shuffles (kind: bandwidth).

* CUDA: the "Faster Parallel Reductions on Kepler" pattern: every thread sums a grid-stride
  slice of x in a register, the block reduces with `__shfl_down_sync` (warp), one partial
  per warp in `__shared__`, `__syncthreads()`, a second shuffle reduction in warp 0, and
  one `atomicAdd(float)` per block into the result.  Grid 1024 blocks x 256 threads (a
  fixed grid that fills any GPU; each thread reads n / 262144 elements, coalesced).
* OpenMP: `parallel for reduction(+:double)` over 4096-element chunks, each chunk summed
  with an `omp simd reduction(+:float)` (vector partial sums in registers, and a float
  accumulator that never grows large: accurate and at memory speed).
* OpenCL: the same kernel; the two warp stages use `sub_group_reduce_add` when the device
  compiler defines `cl_khr_subgroups`, otherwise a `__local` tree reduction over the
  work-group (barriers); the per-group partial is added with an `atomic_cmpxchg` loop on
  the float's bits (OpenCL 1.2 has no float atomic add).  PoCL 3.1 (Debian 12) does not
  offer cl_khr_subgroups on the CPU device, so there the `__local` tree runs.

Inputs uniform in [0, 1), so the sum (~n/2) is not a small difference of large terms.

Tolerance: |s - s_ref| <= 1e-5 * s_ref with s_ref computed in float64.  The CUDA order
(64-element per-thread sums, trees, then 1024 float atomic adds of ~8192 into ~8e6) has an
error of about 1e-6 relative; losing one block (1/1024 of the sum) or one warp is ~1e-3.
"""

from __future__ import annotations

import ctypes

import numpy as np

from benchmarks.suite.workload import Workload, FLOAT_P as _fp

CUDA_SRC = r"""
__device__ __forceinline__ float warp_reduce_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

// Block-wide sum: warp shuffles, one partial per warp in shared memory, warp 0 finishes.
__device__ __forceinline__ float block_reduce_sum(float v) {
    __shared__ float warp_sums[32];
    const int lane = threadIdx.x & 31;
    const int wid = threadIdx.x >> 5;
    v = warp_reduce_sum(v);
    if (lane == 0) warp_sums[wid] = v;
    __syncthreads();
    v = (threadIdx.x < (blockDim.x + 31) / 32) ? warp_sums[lane] : 0.0f;
    if (wid == 0) v = warp_reduce_sum(v);
    return v;
}

// *out must be zero before the launch.
extern "C" __global__ void reduce_sum(const float *__restrict__ x, float *out, int n) {
    float sum = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        sum += x[i];
    sum = block_reduce_sum(sum);
    if (threadIdx.x == 0) atomicAdd(out, sum);
}
"""

OMP_SRC = r"""
#include <stddef.h>

#define CHUNK 4096

/* Sum of x[0..n): chunks over threads, a vectorized float sum per chunk, chunk sums in a
 * double per thread, combined by the OpenMP reduction. */
float reduce_sum(const float *restrict x, long n)
{
    double total = 0.0;
    const long nchunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) reduction(+:total)
    for (long c = 0; c < nchunks; c++) {
        const long lo = c * CHUNK;
        const long hi = lo + CHUNK < n ? lo + CHUNK : n;
        float s = 0.0f;
#pragma omp simd reduction(+:s)
        for (long i = lo; i < hi; i++)
            s += x[i];
        total += s;
    }
    return (float)total;
}
"""

OPENCL_SRC = r"""
// Same as the CUDA kernel: grid-stride sums, block reduction, one atomic add per group.
// Sub-group functions for the warp stages where the compiler offers them, else a __local
// tree (local size must be a power of two, <= 1024).

inline void atomic_add_float(volatile __global float *p, float v) {
    union { unsigned int u; float f; } oldv, newv;
    do {
        oldv.f = *p;
        newv.f = oldv.f + v;
    } while (atomic_cmpxchg((volatile __global unsigned int *)p, oldv.u, newv.u) != oldv.u);
}

__kernel void reduce_sum(__global const float *restrict x, __global float *out, int n) {
    const int lid = get_local_id(0);
    const int lsize = get_local_size(0);
    float sum = 0.0f;
    for (int i = get_global_id(0); i < n; i += get_global_size(0))
        sum += x[i];
#ifdef cl_khr_subgroups
    __local float sg_sums[1024];
    sum = sub_group_reduce_add(sum);
    if (get_sub_group_local_id() == 0) sg_sums[get_sub_group_id()] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (get_sub_group_id() == 0) {
        const uint nsg = get_num_sub_groups();
        float v = 0.0f;
        for (uint k = get_sub_group_local_id(); k < nsg; k += get_sub_group_size())
            v += sg_sums[k];
        v = sub_group_reduce_add(v);
        if (lid == 0) atomic_add_float(out, v);
    }
#else
    __local float partial[1024];
    partial[lid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = lsize >> 1; s > 0; s >>= 1) {
        if (lid < s) partial[lid] += partial[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) atomic_add_float(out, partial[0]);
#endif
}

"""


class WarpReduce(Workload):
    name = "warp_reduce"
    kind = "bandwidth"
    sizes = {
        "small": {"n": 1 << 20},
        "default": {"n": 1 << 24},
        "large": {"n": 1 << 26},
    }
    cuda_source = CUDA_SRC
    omp_source = OMP_SRC
    opencl_source = OPENCL_SRC
    opencl_reason = ""
    numba_reason = "no Python port"

    GRID = 1024
    BLOCK = 256

    def make_inputs(self, p, rng):
        return {"x": rng.random(p["n"], dtype=np.float32)}

    def reference(self, p, inp):
        return {"sum": np.array([inp["x"].sum(dtype=np.float64)])}

    def check(self, p, out, ref):
        s = float(np.asarray(out["sum"]).reshape(-1)[0])
        r = float(ref["sum"][0])
        err = abs(s - r)
        if not np.isfinite(s) or err > 1e-5 * abs(r):
            return False, f"sum {s!r} vs {r!r} (rel err {err / abs(r):.2e})"
        return True, f"rel err {err / abs(r):.2e}"

    def run_cpuify(self, p, inp, mod):
        bufs = inp.setdefault("_cpuify_bufs", {})
        if "out" not in bufs:
            bufs["out"] = np.zeros(1, np.float32)
            bufs["fn"] = mod.get_function("reduce_sum")
        out = bufs["out"]
        out[0] = 0.0
        bufs["fn"]((self.GRID,), (self.BLOCK,), (inp["x"], out, np.int32(p["n"])))
        return {"sum": out.copy()}

    def run_omp(self, p, inp, lib):
        lib.reduce_sum.restype = ctypes.c_float
        lib.reduce_sum.argtypes = [_fp, ctypes.c_long]
        s = lib.reduce_sum(inp["x"].ctypes.data_as(_fp), p["n"])
        return {"sum": np.array([s], np.float32)}

    def run_opencl(self, p, inp, cl, ctx, queue, prg):
        bufs = inp.get("_cl_bufs")
        if bufs is None:
            mf = cl.mem_flags
            bufs = inp["_cl_bufs"] = {
                "x": cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=inp["x"]),
                "out": cl.Buffer(ctx, mf.READ_WRITE, size=4),
                "zero": np.zeros(1, np.float32),
                "h": np.empty(1, np.float32),
                "k": cl.Kernel(prg, "reduce_sum"),
            }
        cl.enqueue_copy(queue, bufs["out"], bufs["zero"])
        k = bufs["k"]
        k.set_args(bufs["x"], bufs["out"], np.int32(p["n"]))
        cl.enqueue_nd_range_kernel(queue, k, (self.GRID * self.BLOCK,), (self.BLOCK,))
        cl.enqueue_copy(queue, bufs["h"], bufs["out"])
        queue.finish()
        return {"sum": bufs["h"].copy()}

    def bytes_moved(self, p):
        return 4.0 * p["n"]

    def flops(self, p):
        return float(p["n"])


WORKLOAD = WarpReduce()
