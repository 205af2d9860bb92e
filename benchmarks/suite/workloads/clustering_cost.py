"""Cost kernel of an online clustering (streamcluster-like): the gain of opening a candidate
center x, for `num` points with `dim` float32 features (kind: bandwidth).

Points are stored feature-major, `coord[d * num + i]` (coalesced on a GPU: thread i reads
its point's features at stride num).  Each point has a weight and a current cost (weighted
squared distance to its current center).  For the candidate x (an index into the points),
point i would switch to x if its weighted squared distance to x is below its current cost:

    d = |coord_i - coord_x|^2 * weight[i]
    switch[i] = d < cost[i];  gain[i] = switch[i] ? cost[i] - d : 0
    total_gain = sum_i gain[i]

* CUDA: `clustering_cost`, 256 threads per block, one thread per point: the block first
  copies the candidate's dim coordinates (stride num) into `__shared__` memory, one
  `__syncthreads()`, each thread accumulates its squared distance with `fmaf` over the
  features (stride num, runtime `dim` <= 256), writes its switch flag and gain, then the
  block sums the gains with a shared-memory tree (`__syncthreads()` per level) into one
  partial per block; the host sums the num/256 partials (in float64, inside the timed call).
* OpenMP: `parallel for reduction(+:total)` over chunks of 1024 points; a chunk keeps the
  features' layout: loop d outer, points inner with `omp simd` over 1024 contiguous floats
  of each feature row, the chunk's distances in a 4 KiB stack array, then one `omp simd`
  pass over the chunk writes flags and gains and sums the gains (float per chunk, double
  across chunks).
* OpenCL: the same kernel as CUDA with `__local` memory and `barrier()`.

Inputs: coordinates uniform in [0, 1), weights uniform in [0.5, 2), costs weight * uniform
[0, dim/3) (the expected squared distance of two points is dim/6, so about half the points
switch), x drawn uniformly.

Reference: distances in float64.  Check: a switch flag may differ from the reference only
at a near-tie, |cost - d64| <= 1e-5 * cost; gains within 1e-5 * cost + 1e-6 of the
reference (a float32 distance of <= 256 terms is ~1e-6 relative off, so is the gain, in
units of the cost; a flipped near-tie changes the gain by <= 1e-5 * cost); total gain
within 1e-5 relative (all terms >= 0, block sums in float32 of 256 terms).

Traffic: dim + 4 floats per point (features, weight, cost read; flag, gain written).
"""

from __future__ import annotations

import ctypes

import numpy as np

from benchmarks.suite.workload import Workload, FLOAT_P as _fp, INT_P as _ip

BLOCK = 256
MAX_DIM = 256

CUDA_SRC = r"""
#define BLOCK 256
#define MAX_DIM 256

// Gain of opening point x as a center.  coord: dim x num (feature-major).  One thread per
// point, grid ceil(num / BLOCK), block BLOCK; block_gain[blockIdx.x] = the block's sum of
// gains.  dim <= MAX_DIM.
extern "C" __global__ void clustering_cost(const float *__restrict__ coord,
                                           const float *__restrict__ weight,
                                           const float *__restrict__ cost,
                                           int *__restrict__ switch_flag,
                                           float *__restrict__ gain,
                                           float *__restrict__ block_gain,
                                           int num, int dim, int x) {
    __shared__ float s_center[MAX_DIM];
    __shared__ float s_gain[BLOCK];
    const int tid = threadIdx.x;
    const int i = blockIdx.x * BLOCK + tid;

    for (int d = tid; d < dim; d += BLOCK)
        s_center[d] = coord[d * num + x];
    __syncthreads();

    float g = 0.0f;
    if (i < num) {
        float dist = 0.0f;
        for (int d = 0; d < dim; d++) {
            const float diff = coord[d * num + i] - s_center[d];
            dist = fmaf(diff, diff, dist);
        }
        const float dw = dist * weight[i];
        const float c = cost[i];
        if (dw < c) {
            switch_flag[i] = 1;
            g = c - dw;
        } else {
            switch_flag[i] = 0;
        }
        gain[i] = g;
    }

    s_gain[tid] = g;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s)
            s_gain[tid] += s_gain[tid + s];
        __syncthreads();
    }
    if (tid == 0)
        block_gain[blockIdx.x] = s_gain[0];
}
"""

OMP_SRC = r"""
/* Gain of opening point x as a center, coord feature-major (dim x num).  Chunks of CHUNK
 * points over threads; within a chunk, feature rows outer and points inner, so every inner
 * loop streams CHUNK contiguous floats of one feature. */
#include <stddef.h>

#define CHUNK 1024

double clustering_cost(const float *restrict coord, const float *restrict weight,
                       const float *restrict cost, int *restrict switch_flag,
                       float *restrict gain, long num, int dim, long x)
{
    float center[dim];
    for (int d = 0; d < dim; d++)
        center[d] = coord[(size_t)d * num + x];

    double total = 0.0;
#pragma omp parallel for reduction(+:total) schedule(static)
    for (long i0 = 0; i0 < num; i0 += CHUNK) {
        const int len = (int)(num - i0 < CHUNK ? num - i0 : CHUNK);
        float dist[CHUNK] __attribute__((aligned(64)));
#pragma omp simd
        for (int p = 0; p < len; p++)
            dist[p] = 0.0f;
        for (int d = 0; d < dim; d++) {
            const float *restrict row = coord + (size_t)d * num + i0;
            const float c = center[d];
#pragma omp simd
            for (int p = 0; p < len; p++) {
                const float diff = row[p] - c;
                dist[p] += diff * diff;
            }
        }
        float s = 0.0f;
#pragma omp simd reduction(+:s)
        for (int p = 0; p < len; p++) {
            const long i = i0 + p;
            const float dw = dist[p] * weight[i];
            const float c = cost[i];
            const int sw = dw < c;
            const float g = sw ? c - dw : 0.0f;
            switch_flag[i] = sw;
            gain[i] = g;
            s += g;
        }
        total += s;
    }
    return total;
}
"""

OPENCL_SRC = r"""
#define BLOCK 256
#define MAX_DIM 256

__kernel void clustering_cost(__global const float *restrict coord,
                              __global const float *restrict weight,
                              __global const float *restrict cost,
                              __global int *restrict switch_flag,
                              __global float *restrict gain,
                              __global float *restrict block_gain,
                              int num, int dim, int x) {
    __local float s_center[MAX_DIM];
    __local float s_gain[BLOCK];
    const int tid = get_local_id(0);
    const int i = get_group_id(0) * BLOCK + tid;

    for (int d = tid; d < dim; d += BLOCK)
        s_center[d] = coord[d * num + x];
    barrier(CLK_LOCAL_MEM_FENCE);

    float g = 0.0f;
    if (i < num) {
        float dist = 0.0f;
        for (int d = 0; d < dim; d++) {
            const float diff = coord[d * num + i] - s_center[d];
            dist = fma(diff, diff, dist);
        }
        const float dw = dist * weight[i];
        const float c = cost[i];
        if (dw < c) {
            switch_flag[i] = 1;
            g = c - dw;
        } else {
            switch_flag[i] = 0;
        }
        gain[i] = g;
    }

    s_gain[tid] = g;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s)
            s_gain[tid] += s_gain[tid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (tid == 0)
        block_gain[get_group_id(0)] = s_gain[0];
}
"""

CHUNK = 1 << 16        # points per chunk of the float64 reference


class ClusteringCost(Workload):
    name = "clustering_cost"
    kind = "bandwidth"
    description = "streamcluster-like gain of a candidate center, feature-major, block sums"
    sizes = {
        "small": {"num": 1 << 16, "dim": 32},
        "default": {"num": 1 << 19, "dim": 64},
        "large": {"num": 1 << 21, "dim": 64},
    }
    cuda_source = CUDA_SRC
    omp_source = OMP_SRC
    opencl_source = OPENCL_SRC
    opencl_reason = ""
    numba_reason = "no Python port"

    def make_inputs(self, p, rng):
        num, dim = p["num"], p["dim"]
        assert 1 <= dim <= MAX_DIM, f"dim must be in 1..{MAX_DIM}"
        assert num * dim < 2 ** 31, "int indices in the kernels"
        coord = rng.random((dim, num), dtype=np.float32)
        weight = rng.uniform(0.5, 2.0, num).astype(np.float32)
        cost = (weight * rng.uniform(0.0, dim / 3.0, num)).astype(np.float32)
        x = int(rng.integers(num))
        return {"coord": coord, "weight": weight, "cost": cost, "x": x}

    def reference(self, p, inp):
        num = p["num"]
        coord, x = inp["coord"], inp["x"]
        center = coord[:, x].astype(np.float64)[:, None]
        dw = np.empty(num, np.float64)
        for lo in range(0, num, CHUNK):
            hi = min(num, lo + CHUNK)
            dw[lo:hi] = ((coord[:, lo:hi] - center) ** 2).sum(axis=0)
        dw *= inp["weight"]
        cost = inp["cost"].astype(np.float64)
        sw = dw < cost
        gain = np.where(sw, cost - dw, 0.0)
        # "_" keys ride along for check() (near-ties), they are not outputs
        return {"switch": sw.astype(np.int32), "gain": gain, "total_gain": float(gain.sum()),
                "_dw": dw, "_cost": cost}

    def check(self, p, out, ref):
        num = p["num"]
        for key in ("switch", "gain", "total_gain"):
            if key not in out:
                return False, f"missing output {key!r}"
        sw = np.asarray(out["switch"]).reshape(-1)
        g = np.asarray(out["gain"], dtype=np.float64).reshape(-1)
        if sw.shape != (num,) or g.shape != (num,):
            return False, f"shapes {sw.shape}, {g.shape}, expected ({num},)"
        cost, dw = ref["_cost"], ref["_dw"]
        if not ((sw == 0) | (sw == 1)).all():
            return False, "switch flags not 0/1"
        diff = np.nonzero(sw != ref["switch"])[0]
        tie = np.abs(cost[diff] - dw[diff]) <= 1e-5 * cost[diff]
        if not tie.all():
            j = diff[np.argmin(tie)]
            return False, (f"{int((~tie).sum())} switch flags wrong (first {j}: {sw[j]}, "
                           f"d = {dw[j]!r}, cost = {cost[j]!r})")
        err = np.abs(g - ref["gain"])
        tol = 1e-5 * cost + 1e-6
        bad = err > tol
        if bad.any():
            j = int(np.argmax(err - tol))
            return False, f"{int(bad.sum())} gains off, worst {j}: {g[j]!r} vs {ref['gain'][j]!r}"
        t, tr = float(out["total_gain"]), ref["total_gain"]
        if not abs(t - tr) <= 1e-5 * abs(tr):
            return False, f"total gain {t!r} vs {tr!r}"
        return True, (f"{diff.size} near-ties flipped; gain max err {float(err.max()):.1e}; "
                      f"total rel err {abs(t - tr) / abs(tr):.1e}")

    # -- cpuify ---------------------------------------------------------------------------
    def run_cpuify(self, p, inp, mod):
        num, dim = p["num"], p["dim"]
        nblocks = (num + BLOCK - 1) // BLOCK
        bufs = inp.setdefault("_cpuify_bufs", {})
        if "gain" not in bufs:
            bufs["switch"] = np.empty(num, np.int32)
            bufs["gain"] = np.empty(num, np.float32)
            bufs["block_gain"] = np.empty(nblocks, np.float32)
            bufs["fn"] = mod.get_function("clustering_cost")
        sw, g, bg = bufs["switch"], bufs["gain"], bufs["block_gain"]
        bufs["fn"]((nblocks,), (BLOCK,),
                   (inp["coord"], inp["weight"], inp["cost"], sw, g, bg,
                    np.int32(num), np.int32(dim), np.int32(inp["x"])))
        total = float(bg.sum(dtype=np.float64))          # the host sums the block partials
        return {"switch": sw, "gain": g, "total_gain": total}

    # -- OpenMP ---------------------------------------------------------------------------
    def run_omp(self, p, inp, lib):
        num, dim = p["num"], p["dim"]
        bufs = inp.setdefault("_omp_bufs", {})
        if "gain" not in bufs:
            bufs["switch"] = np.empty(num, np.int32)
            bufs["gain"] = np.empty(num, np.float32)
            lib.clustering_cost.restype = ctypes.c_double
            lib.clustering_cost.argtypes = [_fp, _fp, _fp, _ip, _fp, ctypes.c_long,
                                            ctypes.c_int, ctypes.c_long]
        sw, g = bufs["switch"], bufs["gain"]
        total = lib.clustering_cost(inp["coord"].ctypes.data_as(_fp),
                                    inp["weight"].ctypes.data_as(_fp),
                                    inp["cost"].ctypes.data_as(_fp), sw.ctypes.data_as(_ip),
                                    g.ctypes.data_as(_fp), num, dim, inp["x"])
        return {"switch": sw, "gain": g, "total_gain": float(total)}

    # -- OpenCL ---------------------------------------------------------------------------
    def run_opencl(self, p, inp, cl, ctx, queue, prg):
        num, dim = p["num"], p["dim"]
        nblocks = (num + BLOCK - 1) // BLOCK
        bufs = inp.get("_cl_bufs")
        if bufs is None:
            mf = cl.mem_flags
            ro = mf.READ_ONLY | mf.COPY_HOST_PTR
            bufs = inp["_cl_bufs"] = {
                "coord": cl.Buffer(ctx, ro, hostbuf=inp["coord"]),
                "weight": cl.Buffer(ctx, ro, hostbuf=inp["weight"]),
                "cost": cl.Buffer(ctx, ro, hostbuf=inp["cost"]),
                "switch": cl.Buffer(ctx, mf.WRITE_ONLY, size=num * 4),
                "gain": cl.Buffer(ctx, mf.WRITE_ONLY, size=num * 4),
                "block_gain": cl.Buffer(ctx, mf.WRITE_ONLY, size=nblocks * 4),
                "hswitch": np.empty(num, np.int32),
                "hgain": np.empty(num, np.float32),
                "hblock": np.empty(nblocks, np.float32),
                "k": cl.Kernel(prg, "clustering_cost"),
            }
        k = bufs["k"]
        k.set_args(bufs["coord"], bufs["weight"], bufs["cost"], bufs["switch"], bufs["gain"],
                   bufs["block_gain"], np.int32(num), np.int32(dim), np.int32(inp["x"]))
        cl.enqueue_nd_range_kernel(queue, k, (nblocks * BLOCK,), (BLOCK,))
        cl.enqueue_copy(queue, bufs["hswitch"], bufs["switch"])
        cl.enqueue_copy(queue, bufs["hgain"], bufs["gain"])
        cl.enqueue_copy(queue, bufs["hblock"], bufs["block_gain"])
        queue.finish()
        total = float(bufs["hblock"].sum(dtype=np.float64))
        return {"switch": bufs["hswitch"], "gain": bufs["hgain"], "total_gain": total}

    def bytes_moved(self, p):
        num, dim = p["num"], p["dim"]
        return 4.0 * num * (dim + 4) + 4.0 * ((num + BLOCK - 1) // BLOCK)

    def flops(self, p):
        return 3.0 * p["num"] * p["dim"]        # sub + fma per feature


WORKLOAD = ClusteringCost()
