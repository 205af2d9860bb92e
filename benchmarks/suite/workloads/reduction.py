"""Sum of n float32 values (kind: bandwidth).

* CUDA: two kernels.  `block_sum`: 256 threads per block, each thread adds two elements
  while loading (NVIDIA's "first add during global load"), a tree in shared memory
  (`__syncthreads()` per level) writes one partial sum per block of 512 elements;
  `final_sum`: one block of 1024 threads, each thread sums a strided slice of the partial
  sums, then the same shared-memory tree, one float out.
* OpenMP: `parallel for reduction(+:total)` over chunks of 4096 elements, each chunk summed
  by an `omp simd reduction(+:s)` loop in float (16 AVX-512 lanes), the chunk sums added in
  double (accurate and still one pass over the data at full bandwidth).
* OpenCL: the same two kernels with `__local` memory and `barrier()`.
* numba simulator: the same two kernels with numba.cuda at n = 4096.

Inputs uniform in [0, 1) (no cancellation); the reference is the float64 sum.  Check:
relative error <= 1e-5 (float32 trees of depth ~25 and float32 chunk sums are ~1e-6 off).

Traffic: 4 bytes per element (read once).
"""

from __future__ import annotations

import ctypes

import numpy as np

from benchmarks.suite.workload import Workload

BLOCK = 256            # threads of block_sum; a block covers 2*BLOCK elements
FINAL = 1024           # threads of the single final block

CUDA_SRC = r"""
#define BLOCK 256
#define FINAL 1024
// Pass 1: per block, sum of in[2*BLOCK*blockIdx.x ...] (2 elements per thread), tree in
// shared memory; grid = ceil(n / (2*BLOCK)), block = BLOCK.
extern "C" __global__ void block_sum(const float *__restrict__ in, float *__restrict__ partial,
                                     int n) {
    __shared__ float s[BLOCK];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * (2 * BLOCK) + tid;
    float v = 0.0f;
    if (i < n) v = in[i];
    if (i + BLOCK < n) v += in[i + BLOCK];
    s[tid] = v;
    __syncthreads();
    for (unsigned int k = BLOCK / 2; k > 0; k >>= 1) {
        if (tid < k) s[tid] += s[tid + k];
        __syncthreads();
    }
    if (tid == 0) partial[blockIdx.x] = s[0];
}
// Pass 2: one block of FINAL threads reduces the m partial sums to out[0].
extern "C" __global__ void final_sum(const float *__restrict__ partial, float *__restrict__ out,
                                     int m) {
    __shared__ float s[FINAL];
    unsigned int tid = threadIdx.x;
    float v = 0.0f;
    for (int i = tid; i < m; i += FINAL) v += partial[i];
    s[tid] = v;
    __syncthreads();
    for (unsigned int k = FINAL / 2; k > 0; k >>= 1) {
        if (tid < k) s[tid] += s[tid + k];
        __syncthreads();
    }
    if (tid == 0) out[0] = s[0];
}
"""

OMP_SRC = r"""
#define CHUNK 4096
/* float lanes within a 16 KiB chunk, double across chunks: one pass, accurate */
double reduce_sum(const float *restrict x, long n)
{
    double total = 0.0;
#pragma omp parallel for reduction(+:total) schedule(static)
    for (long c = 0; c < n; c += CHUNK) {
        long end = c + CHUNK < n ? c + CHUNK : n;
        float s = 0.0f;
#pragma omp simd reduction(+:s)
        for (long i = c; i < end; i++)
            s += x[i];
        total += s;
    }
    return total;
}
"""

OPENCL_SRC = r"""
#define BLOCK 256
#define FINAL 1024
__kernel void block_sum(__global const float *restrict in, __global float *restrict partial,
                        int n) {
    __local float s[BLOCK];
    uint tid = get_local_id(0);
    uint i = get_group_id(0) * (2 * BLOCK) + tid;
    float v = 0.0f;
    if (i < n) v = in[i];
    if (i + BLOCK < n) v += in[i + BLOCK];
    s[tid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint k = BLOCK / 2; k > 0; k >>= 1) {
        if (tid < k) s[tid] += s[tid + k];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (tid == 0) partial[get_group_id(0)] = s[0];
}
__kernel void final_sum(__global const float *restrict partial, __global float *restrict out,
                        int m) {
    __local float s[FINAL];
    uint tid = get_local_id(0);
    float v = 0.0f;
    for (int i = tid; i < m; i += FINAL) v += partial[i];
    s[tid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint k = FINAL / 2; k > 0; k >>= 1) {
        if (tid < k) s[tid] += s[tid + k];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (tid == 0) out[0] = s[0];
}
"""

_numba_kernels = None


def _numba_reduce():
    global _numba_kernels
    if _numba_kernels is None:
        import numba
        import numba.cuda
        globals()["cuda"] = numba.cuda    # the simulator swaps the kernels' global `cuda`
        globals()["float32"] = numba.float32

        @cuda.jit
        def block_sum(inp, partial, n):
            s = cuda.shared.array(BLOCK, float32)
            tid = cuda.threadIdx.x
            i = cuda.blockIdx.x * (2 * BLOCK) + tid
            v = float32(0.0)
            if i < n:
                v = inp[i]
            if i + BLOCK < n:
                v += inp[i + BLOCK]
            s[tid] = v
            cuda.syncthreads()
            k = BLOCK // 2
            while k > 0:
                if tid < k:
                    s[tid] += s[tid + k]
                cuda.syncthreads()
                k >>= 1
            if tid == 0:
                partial[cuda.blockIdx.x] = s[0]

        @cuda.jit
        def final_sum(partial, out, m):
            s = cuda.shared.array(FINAL, float32)
            tid = cuda.threadIdx.x
            v = float32(0.0)
            for i in range(tid, m, FINAL):
                v += partial[i]
            s[tid] = v
            cuda.syncthreads()
            k = FINAL // 2
            while k > 0:
                if tid < k:
                    s[tid] += s[tid + k]
                cuda.syncthreads()
                k >>= 1
            if tid == 0:
                out[0] = s[0]

        _numba_kernels = (block_sum, final_sum)
    return _numba_kernels


def _blocks(n: int) -> int:
    return (n + 2 * BLOCK - 1) // (2 * BLOCK)


class Reduction(Workload):
    name = "reduction"
    kind = "bandwidth"
    description = "sum of n float32: shared-memory block tree + a final one-block pass"
    sizes = {
        "small": {"n": 1 << 20},
        "default": {"n": 1 << 26},
        "large": {"n": 1 << 28},
    }
    cuda_source = CUDA_SRC
    omp_source = OMP_SRC
    opencl_source = OPENCL_SRC
    numba_reason = ""
    numba_size = {"n": 4096}

    def make_inputs(self, p, rng):
        return {"x": rng.random(p["n"], dtype=np.float32)}

    def reference(self, p, inp):
        return {"sum": float(np.sum(inp["x"], dtype=np.float64))}

    def check(self, p, out, ref):
        if "sum" not in out:
            return False, "missing output 'sum'"
        got, exp = float(out["sum"]), ref["sum"]
        rel = abs(got - exp) / max(abs(exp), 1e-30)
        return rel <= 1e-5, f"sum {got!r} vs {exp!r} (rel err {rel:.1e}, limit 1e-5)"

    def run_cpuify(self, p, inp, mod):
        n = p["n"]
        m = _blocks(n)
        b = inp.get("_cpuify_bufs")
        if b is None:
            b = inp["_cpuify_bufs"] = {"partial": np.empty(m, np.float32),
                                       "out": np.empty(1, np.float32),
                                       "k1": mod.get_function("block_sum"),
                                       "k2": mod.get_function("final_sum")}
        b["k1"]((m,), (BLOCK,), (inp["x"], b["partial"], np.int32(n)))
        b["k2"]((1,), (FINAL,), (b["partial"], b["out"], np.int32(m)))
        return {"sum": float(b["out"][0])}

    def run_omp(self, p, inp, lib):
        if not getattr(lib, "_reduce_ready", False):
            lib.reduce_sum.argtypes = [ctypes.c_void_p, ctypes.c_long]
            lib.reduce_sum.restype = ctypes.c_double
            lib._reduce_ready = True
        return {"sum": lib.reduce_sum(inp["x"].ctypes.data, p["n"])}

    def run_opencl(self, p, inp, cl, ctx, queue, prg):
        # timed: both kernels and the blocking read of the one-float result
        n = p["n"]
        m = _blocks(n)
        b = inp.get("_cl_bufs")
        if b is None:
            mf = cl.mem_flags
            b = inp["_cl_bufs"] = {
                "x": cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=inp["x"]),
                "partial": cl.Buffer(ctx, mf.READ_WRITE, size=4 * m),
                "out": cl.Buffer(ctx, mf.WRITE_ONLY, size=4),
                "hout": np.empty(1, np.float32),
                "k1": cl.Kernel(prg, "block_sum"), "k2": cl.Kernel(prg, "final_sum"),
            }
            b["k1"].set_args(b["x"], b["partial"], np.int32(n))
            b["k2"].set_args(b["partial"], b["out"], np.int32(m))
        cl.enqueue_nd_range_kernel(queue, b["k1"], (m * BLOCK,), (BLOCK,))
        cl.enqueue_nd_range_kernel(queue, b["k2"], (FINAL,), (FINAL,))
        cl.enqueue_copy(queue, b["hout"], b["out"], is_blocking=True)
        return {"sum": float(b["hout"][0])}

    def run_numba(self, p, inp):
        n = p["n"]
        m = _blocks(n)
        k1, k2 = _numba_reduce()
        partial = np.empty(m, np.float32)
        out = np.empty(1, np.float32)
        k1[m, BLOCK](inp["x"], partial, n)
        k2[1, FINAL](partial, out, m)
        return {"sum": float(out[0])}

    def bytes_moved(self, p):
        return 4.0 * p["n"]


WORKLOAD = Reduction()
