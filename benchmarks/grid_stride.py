"""Grid-stride loops by spelling, and grid-synchronized Jacobi against one launch per sweep
(issue #15's grid-stride item, #18's grid-sync solver figure).

    python benchmarks/grid_stride.py [workers]      # default: 1 worker

Grid-stride `b[i] = 2 a[i] + 1` over 2^22 floats, 64 x 256 threads, spelled three ways:
  gs_inline  `i += blockDim.x * gridDim.x`
  gs_pre     `int s = blockDim.x * gridDim.x; ... i += s` (nvcc splits off a remainder loop
             and unrolls the rest 4x; reroll-loops turns the pair back into the simple loop:
             compare with `--disable-pass=reroll-loops` through RawModule options)
  gs_cg      `i = g.thread_rank(); ... i += g.size()` (64-bit, truncated to int each round)
Jacobi (1-D Poisson), 262144 points x 100 sweeps and 4096 x 200, 8 x 256 threads:
`grid.sync()` between sweeps (indexed by blockIdx / by cooperative groups) against the
step kernel launched once per sweep.  Every result is checked (NumPy / the per-launch run);
the variants run in turns and the best time of each is printed, with ratios.  To compare
with another checkout, run this file with PYTHONPATH pointing at each in turn.""" 
import sys
import time

import numpy as np

import cpuify

SRC = r'''
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void gs_inline(const float *a, float *b, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        b[i] = 2.0f * a[i] + 1.0f;
}
extern "C" __global__ void gs_pre(const float *a, float *b, int n) {
    int s = blockDim.x * gridDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += s)
        b[i] = 2.0f * a[i] + 1.0f;
}
extern "C" __global__ void gs_cg(const float *a, float *b, int n) {
    cg::grid_group g = cg::this_grid();
    for (int i = g.thread_rank(); i < n; i += g.size())
        b[i] = 2.0f * a[i] + 1.0f;
}
extern "C" __global__ void jacobi_sync(const float *b, float *x0, float *x1, int n, int iters) {
    cg::grid_group g = cg::this_grid();
    float *src = x0, *dst = x1;
    for (int it = 0; it < iters; it++) {
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
            float l = i > 0 ? src[i - 1] : 0.0f, r = i < n - 1 ? src[i + 1] : 0.0f;
            dst[i] = 0.5f * (b[i] + l + r);
        }
        g.sync();
        float *t = src; src = dst; dst = t;
    }
}
extern "C" __global__ void jacobi_sync_cg(const float *b, float *x0, float *x1, int n, int iters) {
    cg::grid_group g = cg::this_grid();
    float *src = x0, *dst = x1;
    for (int it = 0; it < iters; it++) {
        for (int i = g.thread_rank(); i < n; i += g.size()) {
            float l = i > 0 ? src[i - 1] : 0.0f, r = i < n - 1 ? src[i + 1] : 0.0f;
            dst[i] = 0.5f * (b[i] + l + r);
        }
        g.sync();
        float *t = src; src = dst; dst = t;
    }
}
extern "C" __global__ void jacobi_step_cg(const float *b, const float *src, float *dst, int n) {
    cg::grid_group g = cg::this_grid();
    for (int i = g.thread_rank(); i < n; i += g.size()) {
        float l = i > 0 ? src[i - 1] : 0.0f, r = i < n - 1 ? src[i + 1] : 0.0f;
        dst[i] = 0.5f * (b[i] + l + r);
    }
}
extern "C" __global__ void jacobi_step(const float *b, const float *src, float *dst, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        float l = i > 0 ? src[i - 1] : 0.0f, r = i < n - 1 ? src[i + 1] : 0.0f;
        dst[i] = 0.5f * (b[i] + l + r);
    }
}
'''

def interleaved(fns, reps=9):
    """min time (ms) of each function, run in turns so that load changes hit all alike"""
    ts = {k: [] for k in fns}
    for _ in range(reps):
        for k, f in fns.items():
            t = time.perf_counter(); f(); ts[k].append(time.perf_counter() - t)
    return {k: min(v) * 1e3 for k, v in ts.items()}

def main():
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    cpuify.set_num_threads(workers)
    mod = cpuify.RawModule(code=SRC)
    coop = cpuify.RawModule(code=SRC, enable_cooperative_groups=True)
    n = 1 << 22
    a = np.random.default_rng(0).random(n, dtype=np.float32)
    b = np.zeros(n, np.float32)
    fns = {}
    for name in ("gs_inline", "gs_pre", "gs_cg"):
        f = mod.get_function(name)
        b[:] = 0
        for _ in range(3): f((64,), (256,), (a, b, np.int32(n)))
        assert np.allclose(b, 2 * a + 1), name
        fns[name] = (lambda f=f: f((64,), (256,), (a, b, np.int32(n))))
    res = interleaved(fns, 15)
    print(f"workers={workers} grid-stride 2^22 floats, 64x256: " +
          ", ".join(f"{k} {v:.2f} ms" for k, v in res.items()) +
          f"; pre/inline {res['gs_pre']/res['gs_inline']:.2f}x, cg/inline {res['gs_cg']/res['gs_inline']:.2f}x")
    for n, iters, blocks in ((262144, 100, 8), (4096, 200, 8)):
        jacobi(mod, coop, workers, n, iters, blocks)


def jacobi(mod, coop, workers, n, iters, blocks):
    rhs = np.random.default_rng(1).random(n).astype(np.float32)
    x0 = np.zeros(n, np.float32); x1 = np.zeros(n, np.float32)
    step = mod.get_function("jacobi_step")
    def per_launch(g):
        x0[:] = 0; x1[:] = 0
        s, d = x0, x1
        for _ in range(iters):
            step((g,), (256,), (rhs, s, d, np.int32(n))); s, d = d, s
    step_cg = mod.get_function("jacobi_step_cg")
    def per_launch_cg(g):
        x0[:] = 0; x1[:] = 0
        s, d = x0, x1
        for _ in range(iters):
            step_cg((g,), (256,), (rhs, s, d, np.int32(n))); s, d = d, s
    per_launch(blocks); per_launch(blocks); ref = x0.copy()
    per_launch_cg(blocks); per_launch_cg(blocks)
    np.testing.assert_allclose(x0, ref, rtol=1e-5)
    fns = {"per-launch (same grid)": lambda: per_launch(blocks),
           "per-launch (one thread per point)": lambda: per_launch((n + 255) // 256),
           "per-launch cg-indexed (same grid)": lambda: per_launch_cg(blocks)}
    for kname in ("jacobi_sync", "jacobi_sync_cg"):
        k = coop.get_function(kname)
        def run(k=k):
            x0[:] = 0; x1[:] = 0
            k((blocks,), (256,), (rhs, x0, x1, np.int32(n), np.int32(iters)))
        run(); run()
        np.testing.assert_allclose(x0, ref, rtol=1e-5)
        fns[kname] = run
    res = interleaved(fns, 5)
    base = res["per-launch (same grid)"]
    print(f"workers={workers} jacobi n={n} iters={iters} blocks={blocks}x256: " +
          ", ".join(f"{k} {v:.2f} ms ({v / base:.2f}x)" for k, v in res.items()))


if __name__ == "__main__":
    main()
