"""STREAM triad a = b + s*c on float32 vectors (kind: bandwidth).

* CUDA: one thread per element, grid ceil(n/256) blocks of 256 threads (the main variant,
  timed).  The source also holds `triad_gs`, the grid-stride alternative
  (`for (i = gid; i < n; i += blockDim.x*gridDim.x)`, launched with a fixed grid of
  32 blocks per worker): it is not timed here, benchmarks/core.py compares the two.
* OpenMP: `#pragma omp parallel for simd schedule(static)` over the elements.
* OpenCL: the same one-work-item-per-element kernel, local size 256.
* numba simulator: the same kernel written with numba.cuda, at n = 4096 (every CUDA thread is
  a Python thread in the simulator).

Traffic: 12 bytes per element (read b and c, write a; STREAM convention, no write-allocate).
Check: |a - a_ref| <= 1e-6 |a_ref| + 1e-7, a_ref computed in float64 (one float32 multiply
and add, or one FMA, round to within an ulp or two).
"""

from __future__ import annotations

import ctypes

import numpy as np

from benchmarks.suite.workload import Workload, default_check

BLOCK = 256

CUDA_SRC = r"""
// one thread per element: grid = ceil(n / 256) blocks of 256 threads
extern "C" __global__ void triad(float *__restrict__ a, const float *__restrict__ b,
                                 const float *__restrict__ c, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = b[i] + s * c[i];
}
// the grid-stride alternative: any grid size covers all n elements (not timed here)
extern "C" __global__ void triad_gs(float *__restrict__ a, const float *__restrict__ b,
                                    const float *__restrict__ c, float s, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        a[i] = b[i] + s * c[i];
}
"""

OMP_SRC = r"""
/* STREAM triad: static schedule (each thread one contiguous chunk), vectorized body. */
void triad(float *restrict a, const float *restrict b, const float *restrict c, float s, long n)
{
#pragma omp parallel for simd schedule(static)
    for (long i = 0; i < n; i++)
        a[i] = b[i] + s * c[i];
}
"""

OPENCL_SRC = r"""
__kernel void triad(__global float *restrict a, __global const float *restrict b,
                    __global const float *restrict c, float s, int n) {
    int i = get_global_id(0);
    if (i < n) a[i] = b[i] + s * c[i];
}
"""

_vp = ctypes.c_void_p
_numba_kernel = None


def _numba_triad():
    global _numba_kernel
    if _numba_kernel is None:
        import numba.cuda
        # the simulator swaps the kernel's *global* `cuda` for its fake module (so `cuda`
        # must be a module global here, not a local of this function)
        globals()["cuda"] = numba.cuda

        @cuda.jit
        def triad(a, b, c, s, n):
            i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
            if i < n:
                a[i] = b[i] + s * c[i]

        _numba_kernel = triad
    return _numba_kernel


class Triad(Workload):
    name = "triad"
    kind = "bandwidth"
    description = "STREAM triad a = b + s*c, float32, one thread per element"
    sizes = {
        "small": {"n": 1 << 20},
        "default": {"n": 1 << 25},
        "large": {"n": 1 << 27},
    }
    cuda_source = CUDA_SRC
    omp_source = OMP_SRC
    opencl_source = OPENCL_SRC
    numba_reason = ""
    numba_size = {"n": 4096}

    S = 3.0

    def make_inputs(self, p, rng):
        n = p["n"]
        return {"b": rng.random(n, dtype=np.float32), "c": rng.random(n, dtype=np.float32),
                "s": np.float32(self.S)}

    def reference(self, p, inp):
        return {"a": inp["b"].astype(np.float64) + float(inp["s"]) * inp["c"].astype(np.float64)}

    def check(self, p, out, ref):
        return default_check(out, ref, rtol=1e-6, atol=1e-7)

    def run_cpuify(self, p, inp, mod):
        n = p["n"]
        bufs = inp.get("_cpuify_bufs")
        if bufs is None:
            bufs = inp["_cpuify_bufs"] = {"a": np.empty(n, np.float32),
                                          "f": mod.get_function("triad")}
        bufs["f"](((n + BLOCK - 1) // BLOCK,), (BLOCK,),
                  (bufs["a"], inp["b"], inp["c"], inp["s"], np.int32(n)))
        return {"a": bufs["a"]}

    def run_omp(self, p, inp, lib):
        n = p["n"]
        bufs = inp.get("_omp_bufs")
        if bufs is None:
            lib.triad.argtypes = [_vp, _vp, _vp, ctypes.c_float, ctypes.c_long]
            lib.triad.restype = None
            bufs = inp["_omp_bufs"] = {"a": np.empty(n, np.float32)}
        a = bufs["a"]
        lib.triad(a.ctypes.data, inp["b"].ctypes.data, inp["c"].ctypes.data, float(inp["s"]), n)
        return {"a": a}

    def run_opencl(self, p, inp, cl, ctx, queue, prg):
        # timed: the kernel and the blocking read of `a` into a host array
        n = p["n"]
        bufs = inp.get("_cl_bufs")
        if bufs is None:
            mf = cl.mem_flags
            bufs = inp["_cl_bufs"] = {
                "b": cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=inp["b"]),
                "c": cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=inp["c"]),
                "a": cl.Buffer(ctx, mf.WRITE_ONLY, size=4 * n),
                "ha": np.empty(n, np.float32),
                "k": cl.Kernel(prg, "triad"),
            }
            bufs["k"].set_args(bufs["a"], bufs["b"], bufs["c"], inp["s"], np.int32(n))
        gsize = (n + BLOCK - 1) // BLOCK * BLOCK
        cl.enqueue_nd_range_kernel(queue, bufs["k"], (gsize,), (BLOCK,))
        cl.enqueue_copy(queue, bufs["ha"], bufs["a"], is_blocking=True)
        return {"a": bufs["ha"]}

    def run_numba(self, p, inp):
        n = p["n"]
        a = np.empty(n, np.float32)
        _numba_triad()[(n + BLOCK - 1) // BLOCK, BLOCK](a, inp["b"], inp["c"], inp["s"], n)
        return {"a": a}

    def bytes_moved(self, p):
        return 12.0 * p["n"]


WORKLOAD = Triad()
