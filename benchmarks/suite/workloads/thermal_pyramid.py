"""2D heat diffusion, several time steps per launch in shared memory ("pyramid" temporal
blocking), K steps in all, ping-ponging two buffers (kind: other).

One explicit time step on an ny x nx float32 temperature grid t with a constant float32
power grid p (edges clamped: a neighbour outside the grid reads as the cell itself):

    t' = t + cx (t_W + t_E - 2t) + cy (t_N + t_S - 2t) + cz (amb - t) + cp p

* CUDA: block (16, 16), `steps` (T = 3 by default) time steps per launch.  Each thread
  loads one cell of a 16x16 `__shared__` tile (load coordinates clamped to the grid) and
  its power value into a register; the tile's outer ring of width T is a halo, so a block
  outputs the inner (16 - 2T) x (16 - 2T) cells and blocks overlap by 2T cells.  The time
  loop is inside the kernel: at step s the cells at least s + 1 from the tile's edge (and
  inside the grid) compute into a second shared tile, `__syncthreads()`, the two tile
  pointers are swapped, `__syncthreads()`.  Neighbour indices are clamped in tile space
  where the grid ends (a cell at x = 0 is its own west neighbour), which implements the
  boundary condition at every step.  The host makes ceil(K / T) launches (the last one
  with K mod T steps when T does not divide K, hence a different block grid), launch 0
  reading the input grid and the last one writing the output.  Any nx, ny >= 2.
  (Choosing the neighbour's *index* per thread, `cur[ty][w]`, is the common GPU idiom; it
  makes the shared-memory reads gathers on a CPU.  Selecting the neighbour's *value*,
  `gx > 0 ? cur[ty][tx - 1] : c`, once ran ~3x faster under cpuify; the benchmark keeps
  the idiom, which now loads both neighbours contiguously and selects the value
  (`speculate-selected-loads`): both forms 34 ms on one thread, 2026-11-28, AMD EPYC VM.)
* OpenMP: one parallel region around the K steps; rows distributed with `omp for`
  (its implicit barrier separates the steps), each row's interior an `omp simd` loop on
  unit-stride row pointers (north / centre / south), the two edge columns apart.  No
  temporal blocking: a CPU's caches hold a few rows, and the per-step sweep streams.
* OpenCL: the same kernel as CUDA (`__local` tiles, pointers to `__local` rows swapped),
  local size (16, 16).

Constants cx = cy = 0.2, cz = 0.02, cp = 0.5, amb = 300 (1 - 2cx - 2cy - cz > 0: every
step is a convex combination plus a source, stable); temperatures uniform in [320, 340),
power in [0, 1).

Tolerance: reference in float64; |out - ref| <= 2e-3 + 1e-6 |ref|.  Temperatures are ~330,
where a float32 ulp is 3e-5; each step adds a few ulp of rounding (FMA contraction choices
differ between implementations) that the averaging does not amplify, so K = 20 steps stay
below ~5e-4, while a wrong neighbour, a stale halo cell or a missed step moves a cell by
~0.1 or more.
"""

from __future__ import annotations

import ctypes

import numpy as np

from benchmarks.suite.workload import Workload

CUDA_SRC = r"""
#define TILE 16
// `steps` heat steps on one 16x16 tile; the block writes the inner (16 - 2 steps)^2 cells.
// grid (ceil(nx / (16 - 2 steps)), ceil(ny / (16 - 2 steps))), block (16, 16), steps < 8.
extern "C" __global__ void heat_pyramid(const float *tin, const float *power, float *tout,
                                        int nx, int ny, int steps, float cx, float cy,
                                        float cz, float cp, float amb) {
    __shared__ float tile_a[TILE][TILE];
    __shared__ float tile_b[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int span = TILE - 2 * steps;                 // output cells per block and axis
    const int gx = blockIdx.x * span - steps + tx;     // this thread's cell
    const int gy = blockIdx.y * span - steps + ty;
    const bool in_grid = gx >= 0 && gx < nx && gy >= 0 && gy < ny;

    const int lx = min(max(gx, 0), nx - 1);            // clamped load coordinates
    const int ly = min(max(gy, 0), ny - 1);
    const size_t at = (size_t)ly * nx + lx;
    tile_a[ty][tx] = tin[at];
    const float src_term = cp * power[at];

    // neighbours in tile coordinates; at the grid's edge a cell is its own neighbour
    const int w = gx > 0 ? tx - 1 : tx;
    const int e = gx < nx - 1 ? tx + 1 : tx;
    const int n = gy > 0 ? ty - 1 : ty;
    const int s = gy < ny - 1 ? ty + 1 : ty;

    float (*cur)[TILE] = tile_a;
    float (*nxt)[TILE] = tile_b;
    __syncthreads();
    for (int step = 0; step < steps; step++) {
        // cells at distance > step from the tile's edge still have valid neighbours
        const bool live = in_grid && tx > step && tx < TILE - 1 - step
                                  && ty > step && ty < TILE - 1 - step;
        if (live) {
            float c = cur[ty][tx];
            nxt[ty][tx] = c + cx * (cur[ty][w] + cur[ty][e] - 2.0f * c)
                            + cy * (cur[n][tx] + cur[s][tx] - 2.0f * c)
                            + cz * (amb - c) + src_term;
        }
        __syncthreads();
        float (*t)[TILE] = cur;
        cur = nxt;
        nxt = t;
        __syncthreads();
    }
    if (in_grid && tx >= steps && tx < TILE - steps && ty >= steps && ty < TILE - steps)
        tout[(size_t)gy * nx + gx] = cur[ty][tx];
}
"""

OMP_SRC = r"""
/* K heat steps, edges clamped.  Step k reads src(k) and writes dst(k); dst alternates
 * between out and tmp, arranged so that the last step writes out (step 0 reads tin). */
#include <stddef.h>

void heat(const float *restrict tin, const float *restrict power, float *out, float *tmp,
          int nx, int ny, int iters, float cx, float cy, float cz, float cp, float amb)
{
    const float cc = 1.0f - 2.0f * cx - 2.0f * cy - cz;     /* weight of the centre */
    const float k0 = cz * amb;
#pragma omp parallel
    {
        const float *src = tin;
        for (int k = 0; k < iters; k++) {
            float *dst = ((iters - 1 - k) & 1) ? tmp : out;
#pragma omp for schedule(static)
            for (int y = 0; y < ny; y++) {
                const float *restrict c = src + (size_t)y * nx;
                const float *restrict no = src + (size_t)(y > 0 ? y - 1 : y) * nx;
                const float *restrict so = src + (size_t)(y < ny - 1 ? y + 1 : y) * nx;
                const float *restrict p = power + (size_t)y * nx;
                float *restrict o = dst + (size_t)y * nx;
                o[0] = cc * c[0] + cx * (c[0] + c[1]) + cy * (no[0] + so[0]) + k0 + cp * p[0];
#pragma omp simd
                for (int x = 1; x < nx - 1; x++)
                    o[x] = cc * c[x] + cx * (c[x - 1] + c[x + 1]) + cy * (no[x] + so[x])
                           + k0 + cp * p[x];
                const int l = nx - 1;
                o[l] = cc * c[l] + cx * (c[l - 1] + c[l]) + cy * (no[l] + so[l]) + k0 + cp * p[l];
            }   /* implicit barrier: step k is complete before step k + 1 reads it */
            src = dst;
        }
    }
}
"""

OPENCL_SRC = r"""
#define TILE 16
// `steps` heat steps on one 16x16 tile; global size = groups * (16, 16), local (16, 16).
__kernel void heat_pyramid(__global const float *tin, __global const float *power,
                           __global float *tout, int nx, int ny, int steps, float cx,
                           float cy, float cz, float cp, float amb) {
    __local float tile_a[TILE][TILE];
    __local float tile_b[TILE][TILE];
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int span = TILE - 2 * steps;
    const int gx = get_group_id(0) * span - steps + tx;
    const int gy = get_group_id(1) * span - steps + ty;
    const bool in_grid = gx >= 0 && gx < nx && gy >= 0 && gy < ny;

    const int lx = min(max(gx, 0), nx - 1);
    const int ly = min(max(gy, 0), ny - 1);
    const size_t at = (size_t)ly * nx + lx;
    tile_a[ty][tx] = tin[at];
    const float src_term = cp * power[at];

    const int w = gx > 0 ? tx - 1 : tx;
    const int e = gx < nx - 1 ? tx + 1 : tx;
    const int n = gy > 0 ? ty - 1 : ty;
    const int s = gy < ny - 1 ? ty + 1 : ty;

    __local float (*cur)[TILE] = tile_a;
    __local float (*nxt)[TILE] = tile_b;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = 0; step < steps; step++) {
        const bool live = in_grid && tx > step && tx < TILE - 1 - step
                                  && ty > step && ty < TILE - 1 - step;
        if (live) {
            float c = cur[ty][tx];
            nxt[ty][tx] = c + cx * (cur[ty][w] + cur[ty][e] - 2.0f * c)
                            + cy * (cur[n][tx] + cur[s][tx] - 2.0f * c)
                            + cz * (amb - c) + src_term;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        __local float (*t)[TILE] = cur;
        cur = nxt;
        nxt = t;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (in_grid && tx >= steps && tx < TILE - steps && ty >= steps && ty < TILE - steps)
        tout[(size_t)gy * nx + gx] = cur[ty][tx];
}
"""

CONSTS = {"cx": 0.2, "cy": 0.2, "cz": 0.02, "cp": 0.5, "amb": 300.0}
TILE = 16


class ThermalPyramid(Workload):
    name = "thermal_pyramid"
    kind = "other"
    description = ("2D heat stencil, 3 time steps per launch in 16x16 shared tiles "
                   "(pyramid with a 3-cell halo)")
    sizes = {
        # small: nx, ny not multiples of the 10-cell output span, K not a multiple of T
        "small": {"nx": 517, "ny": 333, "iters": 20, "steps": 3},
        "default": {"nx": 1024, "ny": 1024, "iters": 21, "steps": 3},
        "large": {"nx": 4096, "ny": 4096, "iters": 21, "steps": 3},
    }
    cuda_source = CUDA_SRC
    omp_source = OMP_SRC
    opencl_source = OPENCL_SRC
    opencl_reason = ""
    numba_reason = "no Python port"

    def make_inputs(self, p, rng):
        shape = (p["ny"], p["nx"])
        assert p["nx"] >= 2 and p["ny"] >= 2 and 1 <= p["steps"] < TILE // 2
        return {
            "temp": rng.uniform(320.0, 340.0, shape).astype(np.float32),
            "power": rng.uniform(0.0, 1.0, shape).astype(np.float32),
        }

    def reference(self, p, inp):
        c = CONSTS
        t = inp["temp"].astype(np.float64)
        src = c["cp"] * inp["power"].astype(np.float64)
        for _ in range(p["iters"]):
            tp = np.pad(t, 1, mode="edge")
            t = (t + c["cx"] * (tp[1:-1, :-2] + tp[1:-1, 2:] - 2.0 * t)
                 + c["cy"] * (tp[:-2, 1:-1] + tp[2:, 1:-1] - 2.0 * t)
                 + c["cz"] * (c["amb"] - t) + src)
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

    @staticmethod
    def _launches(p):
        """Steps of each launch: T, T, ..., then K mod T if T does not divide K."""
        k, t = p["iters"], p["steps"]
        return [min(t, k - i) for i in range(0, k, t)]

    @staticmethod
    def _schedule(launches, tin, out, tmp):
        """(steps, src, dst) per launch: launch 0 reads tin, the last one writes out."""
        res = []
        src = tin
        n = len(launches)
        for i, st in enumerate(launches):
            dst = out if (n - 1 - i) % 2 == 0 else tmp
            res.append((st, src, dst))
            src = dst
        return res

    @staticmethod
    def _groups(p, st):
        span = TILE - 2 * st
        return (-(-p["nx"] // span), -(-p["ny"] // span))

    def _consts(self):
        c = CONSTS
        return tuple(np.float32(c[k]) for k in ("cx", "cy", "cz", "cp", "amb"))

    def run_cpuify(self, p, inp, mod):
        nx, ny = p["nx"], p["ny"]
        bufs = inp.setdefault("_cpuify_bufs", {})
        if "out" not in bufs:
            bufs["out"] = np.empty((ny, nx), np.float32)
            bufs["tmp"] = np.empty((ny, nx), np.float32)
            bufs["fn"] = mod.get_function("heat_pyramid")
        fn, out = bufs["fn"], bufs["out"]
        consts = self._consts()
        power = inp["power"]
        for st, src, dst in self._schedule(self._launches(p), inp["temp"], out, bufs["tmp"]):
            fn(self._groups(p, st), (TILE, TILE),
               (src, power, dst, np.int32(nx), np.int32(ny), np.int32(st)) + consts)
        return {"temp": out}

    def run_omp(self, p, inp, lib):
        nx, ny = p["nx"], p["ny"]
        bufs = inp.setdefault("_omp_bufs", {})
        if "out" not in bufs:
            bufs["out"] = np.empty((ny, nx), np.float32)
            bufs["tmp"] = np.empty((ny, nx), np.float32)
            lib.heat.restype = None
            lib.heat.argtypes = ([ctypes.c_void_p] * 4 + [ctypes.c_int] * 3
                                 + [ctypes.c_float] * 5)
        out = bufs["out"]
        c = CONSTS
        lib.heat(inp["temp"].ctypes.data, inp["power"].ctypes.data, out.ctypes.data,
                 bufs["tmp"].ctypes.data, nx, ny, p["iters"],
                 c["cx"], c["cy"], c["cz"], c["cp"], c["amb"])
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
                "k": cl.Kernel(prg, "heat_pyramid"),
            }
        k = bufs["k"]
        consts = self._consts()
        for st, src, dst in self._schedule(self._launches(p), bufs["temp"], bufs["out"],
                                           bufs["tmp"]):
            gx, gy = self._groups(p, st)
            k.set_args(src, bufs["power"], dst, np.int32(nx), np.int32(ny), np.int32(st),
                       *consts)
            cl.enqueue_nd_range_kernel(queue, k, (gx * TILE, gy * TILE), (TILE, TILE))
        cl.enqueue_copy(queue, bufs["hout"], bufs["out"])
        queue.finish()
        return {"temp": bufs["hout"]}

    def bytes_moved(self, p):
        # per launch: read temp and power, write temp (what must move; the blocks' halo
        # overlap re-reads (16 / (16 - 2T))^2 times as much, mostly from cache)
        return 3.0 * 4 * p["nx"] * p["ny"] * len(self._launches(p))

    def flops(self, p):
        return 16.0 * p["nx"] * p["ny"] * p["iters"]   # ~16 flops per cell update


WORKLOAD = ThermalPyramid()
