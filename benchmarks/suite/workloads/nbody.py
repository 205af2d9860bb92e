"""All-pairs gravitational n-body accelerations with softening (kind: compute).

For every body i:  a_i = sum_j m_j * r_ij / (|r_ij|^2 + eps^2)^(3/2),  r_ij = p_j - p_i
(G = 1; the j = i term is zero because r_ii = 0).  One evaluation of all n^2 interactions,
counted as 20 flops each (the GPU Gems 3 convention).

* CUDA: GPU Gems 3, ch. 31: one thread per body, bodies as float4 (x, y, z, m); the block
  (256 threads) walks the bodies in tiles of 256 staged in `__shared__ float4[256]`,
  `__syncthreads()` around each tile, `rsqrtf` for 1/sqrt, inner loop `#pragma unroll 4`.
  Bodies past n are padded with mass 0 (no contribution).  Output float4 (ax, ay, az, 0).
* OpenMP: structure of arrays (x, y, z, m as separate float arrays: make_inputs provides them
  alongside the float4 array, the layout conversion is not timed), bodies i over threads,
  the j loop an `omp simd reduction` over unit-stride arrays, 1.0f / sqrtf.  Built with the
  extra flag -fno-math-errno (omp_cflags): without it GCC keeps sqrtf a libm call that may
  set errno and does not vectorize the loop (~7x slower); with it the loop is vectorized
  (8-wide: GCC 12 prefers 256-bit vectors for -march=native on AVX-512 machines).
* OpenCL: the same kernel as CUDA (`__local float4[256]`, `rsqrt`), local size 256.
* numba simulator: the same kernel in numba.cuda (float4 as rows of 4 floats), at n = 384
  (two blocks, the second partial).

Positions uniform in [-1, 1)^3, masses uniform in [0.5, 1.5), eps^2 = 1e-3.

Reference: float64 NumPy, for all bodies when n <= 4096 (small) and for a fixed sample of
1024 bodies (every n/1024-th) at larger sizes, so that it stays under a few seconds; the
other rows of the reference are NaN and are not compared.  Column 3 of the reference holds, per sampled
body, the scale S_i = sum_j |m_j r_ij| / (|r_ij|^2 + eps^2)^(3/2) (the sum of the magnitudes
of the terms).

Tolerance: |a_i - a_ref_i| <= 5e-5 * S_i per component.  Measured at n = 16384: 2.6e-6 S_i
for the CUDA/OpenCL kernels (one sequential float32 sum of n terms per thread), 5e-7 for the
OpenMP twin (16 partial sums per SIMD lane); the error grows about like sqrt(n).  A tile
missed or counted twice moves a_i by ~1e-3 S_i or more.
"""

from __future__ import annotations

import numpy as np

from benchmarks.suite.workload import Workload

CUDA_SRC = r"""
#define BLOCK 256
__device__ __forceinline__ float3 bodyBodyInteraction(float4 bi, float4 bj, float3 ai,
                                                      float eps2) {
    float3 r;
    r.x = bj.x - bi.x;                                    // 3 flops
    r.y = bj.y - bi.y;
    r.z = bj.z - bi.z;
    float distSqr = r.x * r.x + r.y * r.y + r.z * r.z + eps2;   // 6 flops
    float invDist = rsqrtf(distSqr);                      // 2 flops
    float invDistCube = invDist * invDist * invDist;      // 2 flops
    float s = bj.w * invDistCube;                         // 1 flop
    ai.x += r.x * s;                                      // 6 flops
    ai.y += r.y * s;
    ai.z += r.z * s;
    return ai;
}

// accel[i] = sum_j interaction(pos[i], pos[j]); grid ceil(n/256), block 256.
extern "C" __global__ void nbody_accel(const float4 *pos, float4 *accel, int n, float eps2) {
    __shared__ float4 shPos[BLOCK];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float4 myPos = i < n ? pos[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float3 acc = make_float3(0.0f, 0.0f, 0.0f);
    for (int tile = 0; tile < n; tile += blockDim.x) {
        int j = tile + threadIdx.x;
        shPos[threadIdx.x] = j < n ? pos[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        __syncthreads();
#pragma unroll 4
        for (int k = 0; k < blockDim.x; k++)
            acc = bodyBodyInteraction(myPos, shPos[k], acc, eps2);
        __syncthreads();
    }
    if (i < n)
        accel[i] = make_float4(acc.x, acc.y, acc.z, 0.0f);
}
"""

OMP_SRC = r"""
/* All-pairs n-body accelerations, structure-of-arrays layout: bodies i over threads, the
 * interaction loop over j vectorized with `omp simd` (needs -fno-math-errno for sqrtf). */
#include <math.h>

void nbody_accel(const float *restrict x, const float *restrict y, const float *restrict z,
                 const float *restrict m, float *restrict accel, int n, float eps2)
{
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        const float xi = x[i], yi = y[i], zi = z[i];
        float ax = 0.0f, ay = 0.0f, az = 0.0f;
#pragma omp simd reduction(+:ax, ay, az)
        for (int j = 0; j < n; j++) {
            const float dx = x[j] - xi, dy = y[j] - yi, dz = z[j] - zi;
            const float d2 = dx * dx + dy * dy + dz * dz + eps2;
            const float inv = 1.0f / sqrtf(d2);
            const float s = m[j] * inv * inv * inv;
            ax += dx * s;
            ay += dy * s;
            az += dz * s;
        }
        accel[4 * i + 0] = ax;
        accel[4 * i + 1] = ay;
        accel[4 * i + 2] = az;
        accel[4 * i + 3] = 0.0f;
    }
}
"""

OPENCL_SRC = r"""
#define BLOCK 256
float3 bodyBodyInteraction(float4 bi, float4 bj, float3 ai, float eps2) {
    float3 r;
    r.x = bj.x - bi.x;
    r.y = bj.y - bi.y;
    r.z = bj.z - bi.z;
    float distSqr = r.x * r.x + r.y * r.y + r.z * r.z + eps2;
    float invDist = rsqrt(distSqr);
    float invDistCube = invDist * invDist * invDist;
    float s = bj.w * invDistCube;
    ai.x += r.x * s;
    ai.y += r.y * s;
    ai.z += r.z * s;
    return ai;
}

// global size ceil(n/256)*256, local size 256.
__kernel void nbody_accel(__global const float4 *pos, __global float4 *accel, int n,
                          float eps2) {
    __local float4 shPos[BLOCK];
    int i = get_global_id(0);
    int lid = get_local_id(0), lsz = get_local_size(0);
    float4 myPos = i < n ? pos[i] : (float4)(0.0f);
    float3 acc = (float3)(0.0f);
    for (int tile = 0; tile < n; tile += lsz) {
        int j = tile + lid;
        shPos[lid] = j < n ? pos[j] : (float4)(0.0f);
        barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll 4
        for (int k = 0; k < lsz; k++)
            acc = bodyBodyInteraction(myPos, shPos[k], acc, eps2);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (i < n)
        accel[i] = (float4)(acc.x, acc.y, acc.z, 0.0f);
}
"""

_numba_kernel = None


def _numba_nbody():
    """The CUDA kernel ported to numba.cuda (run by the simulator); float4 -> rows of 4."""
    global _numba_kernel
    if _numba_kernel is None:
        import math

        import numba
        from numba import cuda as _cuda
        # the kernel must see `cuda` as a module global: the simulator swaps it for its fake
        globals()["cuda"] = _cuda
        globals()["float32"] = numba.float32
        globals()["math"] = math
        BLOCK = 256

        @_cuda.jit
        def nbody_accel(pos, accel, n, eps2):
            sh = cuda.shared.array((BLOCK, 4), float32)
            tid = cuda.threadIdx.x
            i = cuda.blockIdx.x * cuda.blockDim.x + tid
            px = py = pz = float32(0.0)
            if i < n:
                px, py, pz = pos[i, 0], pos[i, 1], pos[i, 2]
            ax = ay = az = float32(0.0)
            for tile in range(0, n, cuda.blockDim.x):
                j = tile + tid
                for c in range(4):
                    sh[tid, c] = pos[j, c] if j < n else float32(0.0)
                cuda.syncthreads()
                for k in range(cuda.blockDim.x):
                    rx, ry, rz = sh[k, 0] - px, sh[k, 1] - py, sh[k, 2] - pz
                    d2 = rx * rx + ry * ry + rz * rz + eps2
                    inv = float32(1.0) / math.sqrt(d2)
                    s = sh[k, 3] * inv * inv * inv
                    ax += rx * s
                    ay += ry * s
                    az += rz * s
                cuda.syncthreads()
            if i < n:
                accel[i, 0], accel[i, 1], accel[i, 2], accel[i, 3] = ax, ay, az, 0.0

        _numba_kernel = nbody_accel
    return _numba_kernel


EPS2 = 1e-3
REF_SAMPLE = 1024       # bodies checked when n > REF_ALL
REF_ALL = 4096
TOL = 5e-5


class NBody(Workload):
    name = "nbody"
    kind = "compute"
    description = "all-pairs n-body accelerations, shared-memory tiles of 256 bodies"
    sizes = {
        "small": {"n": 2048},
        "default": {"n": 16384},
        "large": {"n": 32768},
    }
    cuda_source = CUDA_SRC
    omp_source = OMP_SRC
    omp_cflags = ("-fno-math-errno",)
    opencl_source = OPENCL_SRC
    opencl_reason = ""
    numba_reason = ""
    numba_size = {"n": 384}

    BLOCK = 256

    def make_inputs(self, p, rng):
        n = p["n"]
        pos = np.empty((n, 4), np.float32)
        pos[:, :3] = rng.uniform(-1.0, 1.0, (n, 3))
        pos[:, 3] = rng.uniform(0.5, 1.5, n)
        # SoA copies for the OpenMP twin (same values)
        return {"pos": pos,
                "x": np.ascontiguousarray(pos[:, 0]), "y": np.ascontiguousarray(pos[:, 1]),
                "z": np.ascontiguousarray(pos[:, 2]), "m": np.ascontiguousarray(pos[:, 3])}

    def reference(self, p, inp):
        n = p["n"]
        pos = inp["pos"].astype(np.float64)
        if n <= REF_ALL:
            rows = np.arange(n)
        else:
            rows = np.arange(REF_SAMPLE) * (n // REF_SAMPLE)
        ref = np.full((n, 4), np.nan)
        P, M = pos[:, :3], pos[:, 3]
        chunk = max(1, (1 << 21) // n)
        for c0 in range(0, len(rows), chunk):
            r = rows[c0:c0 + chunk]
            d = P[None, :, :] - P[r, None, :]                   # (k, n, 3)
            d2 = np.einsum("knc,knc->kn", d, d) + EPS2
            w = M[None, :] / (d2 * np.sqrt(d2))                 # m_j / (d2)^(3/2)
            ref[r, :3] = np.einsum("kn,knc->kc", w, d)
            ref[r, 3] = (w * np.sqrt(d2 - EPS2)).sum(axis=1)    # S_i = sum |term|
        return {"accel": ref}

    def check(self, p, out, ref):
        a = np.asarray(out["accel"], dtype=np.float64)
        r = ref["accel"]
        if a.shape != r.shape:
            return False, f"shape {a.shape} != {r.shape}"
        rows = np.flatnonzero(np.isfinite(r[:, 0]))
        if not np.isfinite(a[:, :3]).all():
            return False, "non-finite values"
        scale = np.maximum(r[rows, 3:4], 1e-30)      # S_i = 0 only for a lone body
        err = np.abs(a[rows, :3] - r[rows, :3]) / scale
        worst = float(err.max())
        if worst > TOL:
            k = int(np.argmax(err.max(axis=1)))
            i = int(rows[k])
            return False, (f"{int((err > TOL).any(axis=1).sum())}/{len(rows)} sampled bodies "
                           f"off, worst body {i}: {a[i, :3]} vs {r[i, :3]} "
                           f"(err/scale {worst:.1e} > {TOL:.0e})")
        return True, f"max err/scale {worst:.1e} over {len(rows)} bodies (tol {TOL:.0e})"

    def run_cpuify(self, p, inp, mod):
        n = p["n"]
        bufs = inp.setdefault("_cpuify_bufs", {})
        if "accel" not in bufs:
            bufs["accel"] = np.empty((n, 4), np.float32)
            bufs["fn"] = mod.get_function("nbody_accel")
        acc = bufs["accel"]
        bufs["fn"](((n + self.BLOCK - 1) // self.BLOCK,), (self.BLOCK,),
                   (inp["pos"], acc, np.int32(n), np.float32(EPS2)))
        return {"accel": acc}

    def run_omp(self, p, inp, lib):
        import ctypes
        n = p["n"]
        bufs = inp.setdefault("_omp_bufs", {})
        if "accel" not in bufs:
            bufs["accel"] = np.empty((n, 4), np.float32)
            lib.nbody_accel.restype = None
            lib.nbody_accel.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int, ctypes.c_float]
        acc = bufs["accel"]
        lib.nbody_accel(inp["x"].ctypes.data, inp["y"].ctypes.data, inp["z"].ctypes.data,
                        inp["m"].ctypes.data, acc.ctypes.data, n, EPS2)
        return {"accel": acc}

    def run_opencl(self, p, inp, cl, ctx, queue, prg):
        n = p["n"]
        bufs = inp.get("_cl_bufs")
        if bufs is None:
            mf = cl.mem_flags
            bufs = inp["_cl_bufs"] = {
                "pos": cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=inp["pos"]),
                "accel": cl.Buffer(ctx, mf.WRITE_ONLY, size=n * 16),
                "haccel": np.empty((n, 4), np.float32),
                "k": cl.Kernel(prg, "nbody_accel"),
            }
        k = bufs["k"]
        k.set_args(bufs["pos"], bufs["accel"], np.int32(n), np.float32(EPS2))
        gsize = -(-n // self.BLOCK) * self.BLOCK
        cl.enqueue_nd_range_kernel(queue, k, (gsize,), (self.BLOCK,))
        cl.enqueue_copy(queue, bufs["haccel"], bufs["accel"])
        queue.finish()
        return {"accel": bufs["haccel"]}

    def run_numba(self, p, inp):
        n = p["n"]
        acc = np.empty((n, 4), np.float32)
        _numba_nbody()[(n + self.BLOCK - 1) // self.BLOCK, self.BLOCK](
            inp["pos"], acc, n, np.float32(EPS2))
        return {"accel": acc}

    def bytes_moved(self, p):
        return None          # compute-bound: 16n bytes in, 16n out

    def flops(self, p):
        return 20.0 * p["n"] ** 2


WORKLOAD = NBody()
