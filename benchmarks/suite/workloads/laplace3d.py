"""3D 7-point Jacobi (Laplace) iteration on an nz x ny x nx float32 grid, K iterations
ping-ponging two buffers (kind: bandwidth).

One iteration: every interior cell becomes the mean of its six face neighbours,

    v'[k][j][i] = (v[k][j][i-1] + v[k][j][i+1] + v[k][j-1][i] + v[k][j+1][i]
                   + v[k-1][j][i] + v[k+1][j][i]) / 6,

and every boundary cell (i, j or k on a face of the box) is copied unchanged (Dirichlet
boundary).  Iteration 0 reads the input grid, which is never written; the iterations then
alternate between the output and a scratch buffer, arranged so that the last writes the
output.

* CUDA: 2D blocks of 32 x 8 threads cover the x-y plane (any nx, ny: threads past the edge
  return at once); each thread marches up the z column with a loop over k, keeping the
  k-1, k and k+1 values of its own column in registers (one new global load per step) and
  reading its four x-y neighbours from global memory; boundary columns and the k = 0 and
  k = nz-1 planes copy their input.  One launch per iteration.
* OpenMP: one parallel region around the K iterations; `omp for collapse(2)` over the
  (k, j) rows (the implicit barrier separates iterations), each boundary row a `memcpy`,
  each interior row an `omp simd` loop over i on unit-stride row pointers (centre, north,
  south, below, above) with the two end cells copied.
* OpenCL: the same kernel as CUDA, local size (32, 8).

Input: uniform in [0, 1).  Tolerance: the default check (rtol 1e-4, atol 1e-5) against a
float64 NumPy reference.  Each iteration is an average (no growth of rounding error), so K
iterations stay within a few K float32 ulps of 0.5 (~1e-6), while a wrong neighbour or a
missed cell moves a value by ~0.1.
"""

from __future__ import annotations

import ctypes

import numpy as np

from benchmarks.suite.workload import Workload

CUDA_SRC = r"""
#define BX 32
#define BY 8
// One Jacobi iteration: u2 = 7-point average of u1 inside, u1 on the boundary.
// grid (ceil(nx / 32), ceil(ny / 8)), block (32, 8); each thread walks one z column.
extern "C" __global__ void laplace3d(const float *u1, float *u2, int nx, int ny, int nz) {
    const int i = blockIdx.x * BX + threadIdx.x;
    const int j = blockIdx.y * BY + threadIdx.y;
    if (i >= nx || j >= ny)
        return;
    const size_t plane = (size_t)nx * ny;
    const bool side = i == 0 || i == nx - 1 || j == 0 || j == ny - 1;
    const float sixth = 1.0f / 6.0f;

    size_t at = (size_t)j * nx + i;          // (i, j, k) with k = 0
    float below = u1[at];                     // v[k-1]
    float here = u1[at + plane];              // v[k]
    u2[at] = below;                           // the k = 0 face
    for (int k = 1; k < nz - 1; k++) {
        at += plane;
        const float above = u1[at + plane];   // v[k+1]
        float v;
        if (side)
            v = here;
        else
            v = sixth * ((u1[at - 1] + u1[at + 1]) + (u1[at - nx] + u1[at + nx])
                         + (below + above));
        u2[at] = v;
        below = here;
        here = above;
    }
    u2[at + plane] = here;                    // the k = nz - 1 face
}
"""

OMP_SRC = r"""
/* K Jacobi iterations of the 7-point Laplace stencil, boundary cells fixed.  Iteration it
 * reads src(it) and writes dst(it); dst alternates between out and tmp so that the last
 * iteration writes out (iteration 0 reads u0).  Requires nx, ny, nz >= 2. */
#include <stddef.h>
#include <string.h>

void laplace3d(const float *restrict u0, float *out, float *tmp,
               int nx, int ny, int nz, int iters)
{
    const size_t plane = (size_t)nx * ny;
    const float sixth = 1.0f / 6.0f;
#pragma omp parallel
    {
        const float *src = u0;
        for (int it = 0; it < iters; it++) {
            float *dst = ((iters - 1 - it) & 1) ? tmp : out;
#pragma omp for collapse(2) schedule(static)
            for (int k = 0; k < nz; k++)
                for (int j = 0; j < ny; j++) {
                    const size_t row = k * plane + (size_t)j * nx;
                    const float *restrict c = src + row;
                    float *restrict d = dst + row;
                    if (k == 0 || k == nz - 1 || j == 0 || j == ny - 1) {
                        memcpy(d, c, (size_t)nx * sizeof(float));
                        continue;
                    }
                    const float *restrict no = c - nx, *restrict so = c + nx;
                    const float *restrict lo = c - plane, *restrict hi = c + plane;
                    d[0] = c[0];
#pragma omp simd
                    for (int i = 1; i < nx - 1; i++)
                        d[i] = sixth * ((c[i - 1] + c[i + 1]) + (no[i] + so[i])
                                        + (lo[i] + hi[i]));
                    d[nx - 1] = c[nx - 1];
                }   /* implicit barrier: iteration it is complete before it + 1 reads it */
            src = dst;
        }
    }
}
"""

OPENCL_SRC = r"""
#define BX 32
#define BY 8
// One Jacobi iteration; global size rounded up to multiples of (32, 8), local size (32, 8).
__kernel void laplace3d(__global const float *u1, __global float *u2, int nx, int ny,
                        int nz) {
    const int i = get_group_id(0) * BX + get_local_id(0);
    const int j = get_group_id(1) * BY + get_local_id(1);
    if (i >= nx || j >= ny)
        return;
    const size_t plane = (size_t)nx * ny;
    const bool side = i == 0 || i == nx - 1 || j == 0 || j == ny - 1;
    const float sixth = 1.0f / 6.0f;

    size_t at = (size_t)j * nx + i;
    float below = u1[at];
    float here = u1[at + plane];
    u2[at] = below;
    for (int k = 1; k < nz - 1; k++) {
        at += plane;
        const float above = u1[at + plane];
        float v;
        if (side)
            v = here;
        else
            v = sixth * ((u1[at - 1] + u1[at + 1]) + (u1[at - nx] + u1[at + nx])
                         + (below + above));
        u2[at] = v;
        below = here;
        here = above;
    }
    u2[at + plane] = here;
}
"""

BX, BY = 32, 8


class Laplace3D(Workload):
    name = "laplace3d"
    kind = "bandwidth"
    description = "3D 7-point Jacobi, 32x8 thread blocks marching in z with register reuse"
    sizes = {
        # small: nx, ny not multiples of 32, 8 (partial edge blocks)
        "small": {"nx": 100, "ny": 70, "nz": 45, "iters": 4},
        "default": {"nx": 200, "ny": 200, "nz": 200, "iters": 4},
        "large": {"nx": 400, "ny": 400, "nz": 400, "iters": 4},
    }
    cuda_source = CUDA_SRC
    omp_source = OMP_SRC
    opencl_source = OPENCL_SRC
    opencl_reason = ""
    numba_reason = "no Python port"

    def _shape(self, p):
        return (p["nz"], p["ny"], p["nx"])

    def make_inputs(self, p, rng):
        assert min(p["nx"], p["ny"], p["nz"]) >= 2
        return {"u": rng.random(self._shape(p), dtype=np.float32)}

    def reference(self, p, inp):
        u = inp["u"].astype(np.float64)
        for _ in range(p["iters"]):
            v = u.copy()
            v[1:-1, 1:-1, 1:-1] = (u[1:-1, 1:-1, :-2] + u[1:-1, 1:-1, 2:]
                                   + u[1:-1, :-2, 1:-1] + u[1:-1, 2:, 1:-1]
                                   + u[:-2, 1:-1, 1:-1] + u[2:, 1:-1, 1:-1]) / 6.0
            u = v
        return {"u": u}

    @staticmethod
    def _schedule(iters, u0, out, tmp):
        """(src, dst) per iteration: iteration 0 reads u0, the last writes out."""
        steps = []
        src = u0
        for k in range(iters):
            dst = out if (iters - 1 - k) % 2 == 0 else tmp
            steps.append((src, dst))
            src = dst
        return steps

    def _dims(self, p):
        return np.int32(p["nx"]), np.int32(p["ny"]), np.int32(p["nz"])

    def run_cpuify(self, p, inp, mod):
        bufs = inp.setdefault("_cpuify_bufs", {})
        if "out" not in bufs:
            bufs["out"] = np.empty(self._shape(p), np.float32)
            bufs["tmp"] = np.empty(self._shape(p), np.float32)
            bufs["fn"] = mod.get_function("laplace3d")
        fn, out = bufs["fn"], bufs["out"]
        grid = (-(-p["nx"] // BX), -(-p["ny"] // BY))
        dims = self._dims(p)
        for src, dst in self._schedule(p["iters"], inp["u"], out, bufs["tmp"]):
            fn(grid, (BX, BY), (src, dst) + dims)
        return {"u": out}

    def run_omp(self, p, inp, lib):
        bufs = inp.setdefault("_omp_bufs", {})
        if "out" not in bufs:
            bufs["out"] = np.empty(self._shape(p), np.float32)
            bufs["tmp"] = np.empty(self._shape(p), np.float32)
            lib.laplace3d.restype = None
            lib.laplace3d.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 4
        out = bufs["out"]
        lib.laplace3d(inp["u"].ctypes.data, out.ctypes.data, bufs["tmp"].ctypes.data,
                      p["nx"], p["ny"], p["nz"], p["iters"])
        return {"u": out}

    def run_opencl(self, p, inp, cl, ctx, queue, prg):
        bufs = inp.get("_cl_bufs")
        if bufs is None:
            mf = cl.mem_flags
            nbytes = inp["u"].nbytes
            bufs = inp["_cl_bufs"] = {
                "u": cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=inp["u"]),
                "out": cl.Buffer(ctx, mf.READ_WRITE, size=nbytes),
                "tmp": cl.Buffer(ctx, mf.READ_WRITE, size=nbytes),
                "hout": np.empty(self._shape(p), np.float32),
                "k": cl.Kernel(prg, "laplace3d"),
            }
        k = bufs["k"]
        gsize = (-(-p["nx"] // BX) * BX, -(-p["ny"] // BY) * BY)
        dims = self._dims(p)
        for src, dst in self._schedule(p["iters"], bufs["u"], bufs["out"], bufs["tmp"]):
            k.set_args(src, dst, *dims)
            cl.enqueue_nd_range_kernel(queue, k, gsize, (BX, BY))
        cl.enqueue_copy(queue, bufs["hout"], bufs["out"])
        queue.finish()
        return {"u": bufs["hout"]}

    def bytes_moved(self, p):
        # per iteration: read the grid once, write it once (neighbour re-reads hit cache)
        return 8.0 * p["nx"] * p["ny"] * p["nz"] * p["iters"]

    def flops(self, p):
        # 5 adds + 1 multiply per interior cell
        return 6.0 * (p["nx"] - 2) * (p["ny"] - 2) * (p["nz"] - 2) * p["iters"]


WORKLOAD = Laplace3D()
