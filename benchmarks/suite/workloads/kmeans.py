"""k-means assignment step: index of the nearest of k centroids for n points in d dimensions
(kind: compute).

n = 2^20 points by default, d = 16 features, k = 32 centroids (d and k are compile-time
constants of all three sources).  Points are stored feature-major, `features[f * n + i]`
(Rodinia's `feature_flipped_d` layout, coalesced on a GPU, unit-stride SIMD on a CPU).
Points and centroids uniform in [0, 1).

* CUDA: Rodinia-style `kmeans_assign`: one thread per point, the point's 16 features in
  registers, centroids in `__constant__` memory (written through `get_global` before the
  launch, as `cudaMemcpyToSymbol` would), squared distances with `fmaf`, strict `<` so the
  lowest index wins ties.
* OpenMP: tiles of 64 points over threads; per centroid, the 64 distances are computed with
  `omp simd` over the points (feature loop inside), kept in a stack array, and the running
  minimum updated with a second `omp simd` loop: vectors of points, as on the GPU.
* OpenCL: the same kernel, centroids in a `__constant` buffer argument.

Reference: squared distances in float64 (BLAS) in chunks of 2^16 points, `argmin`.

Check: an assigned index may differ from the reference only where two centroids are
(nearly) equidistant: for every point, dist64(point, assigned) <= dist64(point, ref) *
(1 + 1e-5) + 1e-6.  float32 distances (~16 terms of size <= 1) are off by ~1e-6 relative,
so near-ties within that margin may legitimately resolve either way; a real mistake costs
a distance difference of ~0.1.
"""

from __future__ import annotations

import ctypes

import numpy as np

from benchmarks.suite.workload import Workload, FLOAT_P as _fp, INT_P as _ip

D = 16
K = 32

CUDA_SRC = r"""
#define D 16
#define K 32

__constant__ float c_centroids[K * D];

// features: D x n (feature-major); membership[i] = argmin_c |x_i - centroid_c|^2.
extern "C" __global__ void kmeans_assign(const float *__restrict__ features,
                                         int *__restrict__ membership, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x[D];
#pragma unroll
    for (int f = 0; f < D; f++)
        x[f] = features[f * n + i];
    float best = 3.402823466e38f;
    int best_index = 0;
    for (int c = 0; c < K; c++) {
        float dist = 0.0f;
#pragma unroll
        for (int f = 0; f < D; f++) {
            const float diff = x[f] - c_centroids[c * D + f];
            dist = fmaf(diff, diff, dist);
        }
        if (dist < best) {
            best = dist;
            best_index = c;
        }
    }
    membership[i] = best_index;
}
"""

OMP_SRC = r"""
#include <float.h>
#include <stddef.h>

#define D 16
#define K 32
#define TILE 64

/* features: D x n (feature-major); centroids: K x D. */
void kmeans_assign(const float *restrict features, const float *restrict centroids,
                   int *restrict membership, long n)
{
    const long ntiles = (n + TILE - 1) / TILE;
#pragma omp parallel for schedule(static)
    for (long t = 0; t < ntiles; t++) {
        const long i0 = t * TILE;
        const int len = (int)(n - i0 < TILE ? n - i0 : TILE);
        float best[TILE] __attribute__((aligned(64)));
        int best_index[TILE] __attribute__((aligned(64)));
        float dist[TILE] __attribute__((aligned(64)));
        for (int p = 0; p < TILE; p++) { best[p] = FLT_MAX; best_index[p] = 0; }
        for (int c = 0; c < K; c++) {
            const float *restrict cen = centroids + c * D;
#pragma omp simd
            for (int p = 0; p < len; p++) {
                float s = 0.0f;
                for (int f = 0; f < D; f++) {
                    const float diff = features[(size_t)f * n + i0 + p] - cen[f];
                    s += diff * diff;
                }
                dist[p] = s;
            }
#pragma omp simd
            for (int p = 0; p < len; p++) {
                const int closer = dist[p] < best[p];
                best[p] = closer ? dist[p] : best[p];
                best_index[p] = closer ? c : best_index[p];
            }
        }
        for (int p = 0; p < len; p++)
            membership[i0 + p] = best_index[p];
    }
}
"""

OPENCL_SRC = r"""
#define D 16
#define K 32

__kernel void kmeans_assign(__global const float *restrict features,
                            __constant float *centroids,
                            __global int *restrict membership, int n) {
    const int i = get_global_id(0);
    if (i >= n) return;
    float x[D];
    for (int f = 0; f < D; f++)
        x[f] = features[f * n + i];
    float best = FLT_MAX;
    int best_index = 0;
    for (int c = 0; c < K; c++) {
        float dist = 0.0f;
        for (int f = 0; f < D; f++) {
            const float diff = x[f] - centroids[c * D + f];
            dist = fma(diff, diff, dist);
        }
        if (dist < best) {
            best = dist;
            best_index = c;
        }
    }
    membership[i] = best_index;
}
"""


BLOCK = 256
CHUNK = 1 << 16


def _sqdist(features_t, lo, hi, centroids64):
    """Squared distances (hi - lo) x K in float64 for points lo..hi (|x|^2 - 2 x.c + |c|^2:
    cancellation errors ~1e-15, far below the check's tolerance)."""
    x = features_t[:, lo:hi].T.astype(np.float64)            # (m, D)
    d = x @ (-2.0 * centroids64.T)
    d += (x * x).sum(axis=1)[:, None]
    d += (centroids64 * centroids64).sum(axis=1)[None, :]
    return d


class KMeans(Workload):
    name = "kmeans"
    kind = "compute"
    description = "k-means assignment, d=16, k=32, centroids in __constant__"
    sizes = {
        "small": {"n": 1 << 16, "d": D, "k": K},
        "default": {"n": 1 << 20, "d": D, "k": K},
        "large": {"n": 1 << 22, "d": D, "k": K},
    }
    cuda_source = CUDA_SRC
    omp_source = OMP_SRC
    opencl_source = OPENCL_SRC
    opencl_reason = ""
    numba_reason = "no Python port"

    def make_inputs(self, p, rng):
        assert p["d"] == D and p["k"] == K, "d and k are fixed by the kernels"
        n = p["n"]
        features = rng.random((D, n), dtype=np.float32)
        centroids = rng.random((K, D), dtype=np.float32)
        return {"features": features, "centroids": centroids}

    def reference(self, p, inp):
        n = p["n"]
        c64 = inp["centroids"].astype(np.float64)
        out = np.empty(n, np.int32)
        for lo in range(0, n, CHUNK):
            hi = min(n, lo + CHUNK)
            out[lo:hi] = np.argmin(_sqdist(inp["features"], lo, hi, c64), axis=1)
        # the inputs ride along ("_" keys, not outputs) so that check() can judge ties
        return {"membership": out, "_features": inp["features"],
                "_centroids": inp["centroids"]}

    def check(self, p, out, ref):
        got = np.asarray(out["membership"]).reshape(-1)
        want = ref["membership"]
        if got.shape != want.shape:
            return False, f"shape {got.shape} != {want.shape}"
        if ((got < 0) | (got >= K)).any():
            return False, "centroid index out of range"
        diff = np.nonzero(got != want)[0]
        if diff.size == 0:
            return True, "exact"
        # distances of the differing points to both centroids, in float64
        c64 = ref["_centroids"].astype(np.float64)
        x = ref["_features"][:, diff].T.astype(np.float64)
        d_got = ((x - c64[got[diff]]) ** 2).sum(axis=1)
        d_want = ((x - c64[want[diff]]) ** 2).sum(axis=1)
        bad = d_got > d_want * (1 + 1e-5) + 1e-6
        if bad.any():
            j = diff[np.argmax(bad)]
            return False, (f"{int(bad.sum())} points not assigned to a nearest centroid "
                           f"(first {j}: {got[j]} vs {want[j]})")
        return True, f"{diff.size} near-ties resolved differently (within tolerance)"

    def run_cpuify(self, p, inp, mod):
        n = p["n"]
        bufs = inp.setdefault("_cpuify_bufs", {})
        if "membership" not in bufs:
            bufs["membership"] = np.empty(n, np.int32)
            bufs["fn"] = mod.get_function("kmeans_assign")
            bufs["const"] = mod.get_global("c_centroids", dtype=np.float32)
        bufs["const"][:] = inp["centroids"].reshape(-1)      # cudaMemcpyToSymbol
        m = bufs["membership"]
        bufs["fn"](((n + BLOCK - 1) // BLOCK,), (BLOCK,), (inp["features"], m, np.int32(n)))
        return {"membership": m}

    def run_omp(self, p, inp, lib):
        n = p["n"]
        bufs = inp.setdefault("_omp_bufs", {})
        if "membership" not in bufs:
            bufs["membership"] = np.empty(n, np.int32)
            lib.kmeans_assign.restype = None
            lib.kmeans_assign.argtypes = [_fp, _fp, _ip, ctypes.c_long]
        m = bufs["membership"]
        lib.kmeans_assign(inp["features"].ctypes.data_as(_fp),
                          inp["centroids"].ctypes.data_as(_fp), m.ctypes.data_as(_ip), n)
        return {"membership": m}

    def run_opencl(self, p, inp, cl, ctx, queue, prg):
        n = p["n"]
        bufs = inp.get("_cl_bufs")
        if bufs is None:
            mf = cl.mem_flags
            bufs = inp["_cl_bufs"] = {
                "features": cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR,
                                      hostbuf=inp["features"]),
                "centroids": cl.Buffer(ctx, mf.READ_ONLY, size=K * D * 4),
                "membership": cl.Buffer(ctx, mf.WRITE_ONLY, size=n * 4),
                "h": np.empty(n, np.int32),
                "k": cl.Kernel(prg, "kmeans_assign"),
            }
        cl.enqueue_copy(queue, bufs["centroids"], inp["centroids"])
        k = bufs["k"]
        k.set_args(bufs["features"], bufs["centroids"], bufs["membership"], np.int32(n))
        cl.enqueue_nd_range_kernel(queue, k, (((n + BLOCK - 1) // BLOCK) * BLOCK,), (BLOCK,))
        cl.enqueue_copy(queue, bufs["h"], bufs["membership"])
        queue.finish()
        return {"membership": bufs["h"]}

    def bytes_moved(self, p):
        return 4.0 * p["n"] * (D + 1)

    def flops(self, p):
        return 3.0 * p["n"] * K * D          # sub + fma per feature and centroid


WORKLOAD = KMeans()
