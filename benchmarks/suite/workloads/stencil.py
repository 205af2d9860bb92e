"""Hotspot-like 2D 5-point stencil, K iterations ping-ponging two buffers (kind: bandwidth).

One step (Rodinia hotspot's update, edges clamped: a cell outside the grid reads as its
nearest edge cell):

    out = t + sdc * (power + (t_N + t_S - 2t) * ry + (t_E + t_W - 2t) * rx + (amb - t) * rz)

on an ny x nx float32 temperature grid with a constant float32 power grid; K steps, each
reading the previous step's output (the input grid itself is never written: step 0 reads
it, the steps then alternate between the output and a scratch buffer, arranged so that the
last step writes the output).

* CUDA: one launch per step, block (16, 16), each block stages its 16x16 tile plus a
  one-cell halo on each side in `__shared__ float t[18][18]` (edge threads load the halo;
  load coordinates are clamped to the grid, which also implements the boundary condition),
  `__syncthreads()`, then computes from shared memory.  Any nx, ny (partial edge blocks).
* OpenMP: one parallel region around the K steps; rows distributed with `omp for`
  (implicit barrier between steps), the interior of each row an `omp simd` loop on
  unit-stride row pointers (up/centre/down), the two edge columns done separately.
* OpenCL: the same kernel as CUDA (`__local float t[18][18]`), local size (16, 16).
* numba simulator: the same kernel in numba.cuda, on a 24 x 40 grid (partial edge blocks),
  2 steps.

The grids and the work buffers are 256-byte aligned for every peer (`aligned_empty`, as
cudaMalloc's memory is): NumPy places a large array 16 bytes past a page start, where each
16-float row of a block's tile straddles two cache lines (one thread, 2048^2, per step:
cpuify ~6.5 ms with NumPy's placement, 4.9-5.1 with aligned arrays; the twin 2.6-2.9 ms
with either, 2026-11-28).

Constants sdc = 0.2, rx = ry = 1, rz = 0.1, amb = 300 (the update is a convex combination,
stable); temperatures uniform in [320, 340), power in [0, 1).

Tolerance: reference in float64; |out - ref| <= 2e-3 + 1e-6 |ref|.  Temperatures are ~330,
where a float32 ulp is 3e-5; a step's rounding (and FMA contraction choices) changes a cell
by a few ulp, and the averaging steps do not amplify it, so K = 20 steps stay below ~3e-4;
an error in the stencil (a wrong neighbour, a missed halo) moves a cell by ~0.1 or more.
"""

from __future__ import annotations

import ctypes

import numpy as np

from benchmarks.suite.workload import Workload, aligned_empty

CUDA_SRC = r"""
#define BX 16
#define BY 16
// One hotspot step: tout = f(tin, power), 5-point stencil with clamped edges.
// grid (ceil(nx/16), ceil(ny/16)), block (16, 16).
extern "C" __global__ void hotspot_step(const float *tin, const float *power, float *tout,
                                        int nx, int ny, float sdc, float rx, float ry,
                                        float rz, float amb) {
    __shared__ float t[BY + 2][BX + 2];
    int tx = threadIdx.x, ty = threadIdx.y;
    int x = blockIdx.x * BX + tx;
    int y = blockIdx.y * BY + ty;
    int xc = min(x, nx - 1), yc = min(y, ny - 1);     // clamped load coordinates
    const float *row = tin + (size_t)yc * nx;
    t[ty + 1][tx + 1] = row[xc];
    if (tx == 0)      t[ty + 1][0]      = row[max(xc - 1, 0)];
    if (tx == BX - 1) t[ty + 1][BX + 1] = row[min(xc + 1, nx - 1)];
    if (ty == 0)      t[0][tx + 1]      = tin[(size_t)max(yc - 1, 0) * nx + xc];
    if (ty == BY - 1) t[BY + 1][tx + 1] = tin[(size_t)min(yc + 1, ny - 1) * nx + xc];
    __syncthreads();
    if (x < nx && y < ny) {
        float c = t[ty + 1][tx + 1];
        float n = t[ty][tx + 1], s = t[ty + 2][tx + 1];
        float w = t[ty + 1][tx], e = t[ty + 1][tx + 2];
        size_t i = (size_t)y * nx + x;
        tout[i] = c + sdc * (power[i] + (n + s - 2.0f * c) * ry + (e + w - 2.0f * c) * rx
                             + (amb - c) * rz);
    }
}
"""

OMP_SRC = r"""
/* K hotspot steps: rows over threads, `omp simd` along each row, edges clamped.
 * Step k writes dst(k) and reads dst(k-1) (step 0 reads tin); dst alternates between tmp and
 * out so that the last step writes out.  Requires nx >= 2. */
#include <stddef.h>

static inline float cell(float c, float n, float s, float w, float e, float p,
                         float sdc, float rx, float ry, float rz, float amb)
{
    return c + sdc * (p + (n + s - 2.0f * c) * ry + (e + w - 2.0f * c) * rx + (amb - c) * rz);
}

void hotspot(const float *restrict tin, const float *restrict power, float *out, float *tmp,
             int nx, int ny, int iters, float sdc, float rx, float ry, float rz, float amb)
{
#pragma omp parallel
    for (int k = 0; k < iters; k++) {
        float *dst = ((iters - 1 - k) % 2 == 0) ? out : tmp;
        const float *src = k == 0 ? tin : (dst == out ? tmp : out);
#pragma omp for schedule(static)
        for (int y = 0; y < ny; y++) {
            const float *restrict r = src + (size_t)y * nx;
            const float *restrict up = src + (size_t)(y > 0 ? y - 1 : 0) * nx;
            const float *restrict dn = src + (size_t)(y < ny - 1 ? y + 1 : ny - 1) * nx;
            const float *restrict p = power + (size_t)y * nx;
            float *restrict o = dst + (size_t)y * nx;
            o[0] = cell(r[0], up[0], dn[0], r[0], r[1], p[0], sdc, rx, ry, rz, amb);
#pragma omp simd
            for (int x = 1; x < nx - 1; x++)
                o[x] = cell(r[x], up[x], dn[x], r[x - 1], r[x + 1], p[x], sdc, rx, ry, rz, amb);
            o[nx - 1] = cell(r[nx - 1], up[nx - 1], dn[nx - 1], r[nx - 2], r[nx - 1], p[nx - 1],
                             sdc, rx, ry, rz, amb);
        }   /* implicit barrier: step k complete before step k+1 reads it */
    }
}
"""

OPENCL_SRC = r"""
#define BX 16
#define BY 16
// One hotspot step; global size rounded up to multiples of (16, 16), local size (16, 16).
__kernel void hotspot_step(__global const float *tin, __global const float *power,
                           __global float *tout, int nx, int ny, float sdc, float rx,
                           float ry, float rz, float amb) {
    __local float t[BY + 2][BX + 2];
    int tx = get_local_id(0), ty = get_local_id(1);
    int x = get_group_id(0) * BX + tx;
    int y = get_group_id(1) * BY + ty;
    int xc = min(x, nx - 1), yc = min(y, ny - 1);
    __global const float *row = tin + (size_t)yc * nx;
    t[ty + 1][tx + 1] = row[xc];
    if (tx == 0)      t[ty + 1][0]      = row[max(xc - 1, 0)];
    if (tx == BX - 1) t[ty + 1][BX + 1] = row[min(xc + 1, nx - 1)];
    if (ty == 0)      t[0][tx + 1]      = tin[(size_t)max(yc - 1, 0) * nx + xc];
    if (ty == BY - 1) t[BY + 1][tx + 1] = tin[(size_t)min(yc + 1, ny - 1) * nx + xc];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (x < nx && y < ny) {
        float c = t[ty + 1][tx + 1];
        float n = t[ty][tx + 1], s = t[ty + 2][tx + 1];
        float w = t[ty + 1][tx], e = t[ty + 1][tx + 2];
        size_t i = (size_t)y * nx + x;
        tout[i] = c + sdc * (power[i] + (n + s - 2.0f * c) * ry + (e + w - 2.0f * c) * rx
                             + (amb - c) * rz);
    }
}
"""

_numba_kernel = None


def _numba_stencil():
    """The CUDA kernel ported to numba.cuda (run by the simulator)."""
    global _numba_kernel
    if _numba_kernel is None:
        import numba
        from numba import cuda as _cuda
        # the kernel must see `cuda` as a module global: the simulator swaps it for its fake
        globals()["cuda"] = _cuda
        globals()["float32"] = numba.float32
        BX = BY = 16

        @_cuda.jit
        def hotspot_step(tin, power, tout, nx, ny, sdc, rx, ry, rz, amb):
            t = cuda.shared.array((BY + 2, BX + 2), float32)
            tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
            x = cuda.blockIdx.x * BX + tx
            y = cuda.blockIdx.y * BY + ty
            xc, yc = min(x, nx - 1), min(y, ny - 1)
            t[ty + 1, tx + 1] = tin[yc, xc]
            if tx == 0:
                t[ty + 1, 0] = tin[yc, max(xc - 1, 0)]
            if tx == BX - 1:
                t[ty + 1, BX + 1] = tin[yc, min(xc + 1, nx - 1)]
            if ty == 0:
                t[0, tx + 1] = tin[max(yc - 1, 0), xc]
            if ty == BY - 1:
                t[BY + 1, tx + 1] = tin[min(yc + 1, ny - 1), xc]
            cuda.syncthreads()
            if x < nx and y < ny:
                c = t[ty + 1, tx + 1]
                n, s = t[ty, tx + 1], t[ty + 2, tx + 1]
                w, e = t[ty + 1, tx], t[ty + 1, tx + 2]
                tout[y, x] = c + sdc * (power[y, x] + (n + s - float32(2.0) * c) * ry
                                        + (e + w - float32(2.0) * c) * rx + (amb - c) * rz)

        _numba_kernel = hotspot_step
    return _numba_kernel


CONSTS = {"sdc": 0.2, "rx": 1.0, "ry": 1.0, "rz": 0.1, "amb": 300.0}


class Stencil(Workload):
    name = "stencil"
    kind = "bandwidth"
    sizes = {
        "small": {"nx": 512, "ny": 512, "iters": 20},
        "default": {"nx": 2048, "ny": 2048, "iters": 20},
        "large": {"nx": 4096, "ny": 4096, "iters": 20},
    }
    cuda_source = CUDA_SRC
    omp_source = OMP_SRC
    opencl_source = OPENCL_SRC
    opencl_reason = ""
    numba_reason = ""
    numba_size = {"nx": 40, "ny": 24, "iters": 2}
    description = "hotspot-like 5-point stencil, 16x16 shared-memory tiles with halos"

    BX = 16
    BY = 16

    def make_inputs(self, p, rng):
        shape = (p["ny"], p["nx"])
        assert p["nx"] >= 2
        inputs = {}
        for name, lo, hi in (("temp", 320.0, 340.0), ("power", 0.0, 1.0)):
            inputs[name] = aligned_empty(shape, np.float32)
            inputs[name][...] = rng.uniform(lo, hi, shape)
        return inputs

    def reference(self, p, inp):
        c = CONSTS
        t = inp["temp"].astype(np.float64)
        pw = inp["power"].astype(np.float64)
        for _ in range(p["iters"]):
            tp = np.pad(t, 1, mode="edge")
            n, s = tp[:-2, 1:-1], tp[2:, 1:-1]
            w, e = tp[1:-1, :-2], tp[1:-1, 2:]
            t = t + c["sdc"] * (pw + (n + s - 2.0 * t) * c["ry"] + (e + w - 2.0 * t) * c["rx"]
                                + (c["amb"] - t) * c["rz"])
        return {"temp": t}

    def check(self, p, out, ref):
        o = np.asarray(out["temp"], dtype=np.float64)
        r = ref["temp"]
        if o.shape != r.shape:
            return False, f"shape {o.shape} != {r.shape}"
        if not np.isfinite(o).all():
            return False, "non-finite values"
        err = np.abs(o - r)
        tol = 2e-3 + 1e-6 * np.abs(r)
        bad = err > tol
        if bad.any():
            i = np.unravel_index(np.argmax(err - tol), err.shape)
            return False, f"{int(bad.sum())} cells off, worst at {i}: {o[i]} vs {r[i]}"
        return True, f"max abs err {float(err.max()):.1e} (atol 2e-3)"

    def _args(self, p):
        c = CONSTS
        return (np.int32(p["nx"]), np.int32(p["ny"]), np.float32(c["sdc"]), np.float32(c["rx"]),
                np.float32(c["ry"]), np.float32(c["rz"]), np.float32(c["amb"]))

    @staticmethod
    def _schedule(iters, tin, out, tmp):
        """(src, dst) per step: step 0 reads tin, the last step writes out."""
        steps = []
        src = tin
        for k in range(iters):
            dst = out if (iters - 1 - k) % 2 == 0 else tmp
            steps.append((src, dst))
            src = dst
        return steps

    def run_cpuify(self, p, inp, mod):
        nx, ny = p["nx"], p["ny"]
        bufs = inp.setdefault("_cpuify_bufs", {})
        if "out" not in bufs:
            bufs["out"] = aligned_empty((ny, nx), np.float32)
            bufs["tmp"] = aligned_empty((ny, nx), np.float32)
            bufs["fn"] = mod.get_function("hotspot_step")
        fn, out = bufs["fn"], bufs["out"]
        grid = ((nx + self.BX - 1) // self.BX, (ny + self.BY - 1) // self.BY)
        args = self._args(p)
        power = inp["power"]
        for src, dst in self._schedule(p["iters"], inp["temp"], out, bufs["tmp"]):
            fn(grid, (self.BX, self.BY), (src, power, dst) + args)
        return {"temp": out}

    def run_omp(self, p, inp, lib):
        nx, ny = p["nx"], p["ny"]
        bufs = inp.setdefault("_omp_bufs", {})
        if "out" not in bufs:
            bufs["out"] = aligned_empty((ny, nx), np.float32)
            bufs["tmp"] = aligned_empty((ny, nx), np.float32)
            f = ctypes.c_float
            lib.hotspot.restype = None
            lib.hotspot.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int] * 3 + [f] * 5
        out = bufs["out"]
        c = CONSTS
        lib.hotspot(inp["temp"].ctypes.data, inp["power"].ctypes.data, out.ctypes.data,
                    bufs["tmp"].ctypes.data, nx, ny, p["iters"],
                    c["sdc"], c["rx"], c["ry"], c["rz"], c["amb"])
        return {"temp": out}

    def run_opencl(self, p, inp, cl, ctx, queue, prg):
        nx, ny = p["nx"], p["ny"]
        bufs = inp.get("_cl_bufs")
        if bufs is None:
            mf = cl.mem_flags
            nbytes = nx * ny * 4
            bufs = inp["_cl_bufs"] = {
                "temp": cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=inp["temp"]),
                "power": cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=inp["power"]),
                "out": cl.Buffer(ctx, mf.READ_WRITE, size=nbytes),
                "tmp": cl.Buffer(ctx, mf.READ_WRITE, size=nbytes),
                "hout": np.empty((ny, nx), np.float32),
                "k": cl.Kernel(prg, "hotspot_step"),
            }
        k = bufs["k"]
        gsize = (-(-nx // self.BX) * self.BX, -(-ny // self.BY) * self.BY)
        args = self._args(p)
        for src, dst in self._schedule(p["iters"], bufs["temp"], bufs["out"], bufs["tmp"]):
            k.set_args(src, bufs["power"], dst, *args)
            cl.enqueue_nd_range_kernel(queue, k, gsize, (self.BX, self.BY))
        cl.enqueue_copy(queue, bufs["hout"], bufs["out"])
        queue.finish()
        return {"temp": bufs["hout"]}

    def run_numba(self, p, inp):
        nx, ny = p["nx"], p["ny"]
        out = np.empty((ny, nx), np.float32)
        tmp = np.empty((ny, nx), np.float32)
        grid = ((nx + self.BX - 1) // self.BX, (ny + self.BY - 1) // self.BY)
        k = _numba_stencil()
        args = self._args(p)
        for src, dst in self._schedule(p["iters"], inp["temp"], out, tmp):
            k[grid, (self.BX, self.BY)](src, inp["power"], dst, *args)
        return {"temp": out}

    def bytes_moved(self, p):
        # per step: read temp and power, write the new temp (halo re-reads hit cache)
        return 3.0 * 4 * p["nx"] * p["ny"] * p["iters"]

    def flops(self, p):
        return 15.0 * p["nx"] * p["ny"] * p["iters"]   # 15 flops per cell update


WORKLOAD = Stencil()
