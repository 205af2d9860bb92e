"""Warp-collective throughput: SIMD collectives (the `simd-collectives` pass: each warp's
exchange as vector instructions in the generated code) against the scalar lowering (the
pass disabled: the runtime scheduler exchanges lane by lane, then a masked segment).

    python benchmarks/warp_collectives.py [--n 4194304] [--repeats 7]

Kernels (each thread one element of a large array, every result checked against NumPy):
  reduce_loop   `__shfl_down_sync` sum over the warp, offsets a run-time loop (16, 8, .. 1)
  xor_loop      `__shfl_xor_sync` all-reduce max, offsets a run-time loop
  ballot        `__ballot_sync` + `__any_sync` per element
  reduce_const  the unrolled sum (constant offsets: static shuffles either way, a control)
Prints the best time of each lowering and their ratio (scalar / SIMD: > 1, SIMD faster)."""

from __future__ import annotations

import argparse
import time

import numpy as np

import cpuify

SRC = r'''
#define FULL 0xffffffffu
extern "C" __global__ void reduce_loop(const float *x, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[i];
    #pragma unroll 1
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL, v, o);
    if ((threadIdx.x & 31) == 0) out[i >> 5] = v;
}
extern "C" __global__ void xor_loop(const float *x, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[i];
    #pragma unroll 1
    for (int o = 1; o < 32; o <<= 1) v = fmaxf(v, __shfl_xor_sync(FULL, v, o));
    if ((threadIdx.x & 31) == 0) out[i >> 5] = v;
}
extern "C" __global__ void ballot(const float *x, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned b = __ballot_sync(FULL, x[i] > 0.5f);
    int any = __any_sync(FULL, x[i] > 0.99f);
    if ((threadIdx.x & 31) == 0) out[i >> 5] = (float)(__popc(b) + 100 * any);
}
extern "C" __global__ void reduce_const(const float *x, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[i];
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL, v, o);
    if ((threadIdx.x & 31) == 0) out[i >> 5] = v;
}
'''


def reference(name: str, x: np.ndarray) -> np.ndarray:
    w = x.reshape(-1, 32)
    if name in ("reduce_loop", "reduce_const"):
        return w.sum(axis=1, dtype=np.float64)
    if name == "xor_loop":
        return w.max(axis=1).astype(np.float64)
    return ((w > 0.5).sum(axis=1) + 100 * (w > 0.99).any(axis=1)).astype(np.float64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1 << 22)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    n = args.n
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    out = np.zeros(n // 32, np.float32)
    mods = {"simd": cpuify.RawModule(code=SRC),
            "scalar": cpuify.RawModule(code=SRC, options=("--disable-pass=simd-collectives",))}
    block = 256
    grid = (n // block,)
    print(f"n = {n}, {grid[0]} blocks of {block} threads; best of {args.repeats}")
    print(f"{'kernel':14} {'SIMD ms':>9} {'scalar ms':>10} {'scalar/SIMD':>12}")
    for name in ("reduce_loop", "xor_loop", "ballot", "reduce_const"):
        want = reference(name, x)
        best = {}
        fns = {k: m.get_function(name) for k, m in mods.items()}
        for k, f in fns.items():           # compile, specialize, check
            for _ in range(2):
                out[:] = -1
                f(grid, (block,), (x, out, np.int32(n)))
            assert np.allclose(out, want, rtol=1e-5), (name, k)
            best[k] = float("inf")
        for _ in range(args.repeats):      # round robin
            for k, f in fns.items():
                t0 = time.perf_counter()
                f(grid, (block,), (x, out, np.int32(n)))
                best[k] = min(best[k], time.perf_counter() - t0)
        print(f"{name:14} {best['simd'] * 1e3:9.2f} {best['scalar'] * 1e3:10.2f} "
              f"{best['scalar'] / best['simd']:12.2f}")


if __name__ == "__main__":
    main()
