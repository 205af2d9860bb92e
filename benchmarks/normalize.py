"""The Polygeist paper's Fig. 1 (`normalize`: every thread calls `sum(in, n)`), through
cpuify with and without parallel-licm, against NumPy's `x / x.sum()` in the same process.

    python -m benchmarks.normalize [--max-log2 16] [--json out.json]

Without the pass every thread sums the whole input: O(n^2) work, time x4 per doubling of n.
With it the sum runs once per launch (launch prologue): O(n).  Times are the best of
several runs (this machine is noisy); ratios are cpuify / NumPy."""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import cpuify

SOURCE = r'''
__device__ float sum(const float *data, int n) {
    float total = 0;
    for (int i = 0; i < n; i++) total += data[i];
    return total;
}
extern "C" __global__ void normalize(float *out, const float *in, int n) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    float val = sum(in, n);
    if (tid < n) out[tid] = in[tid] / val;
}'''


def best_of(fn, budget: float = 0.5, most: int = 200) -> float:  # type: ignore[no-untyped-def]
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < most and (time.perf_counter() - start < budget or len(times) < 3):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-log2", type=int, default=16)
    ap.add_argument("--no-licm-max-log2", type=int, default=16,
                    help="largest n run without the pass (it is quadratic)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    with_licm = cpuify.RawKernel(SOURCE, "normalize")
    without = cpuify.RawKernel(SOURCE, "normalize", options=("--disable-pass=parallel-licm",))
    rng = np.random.default_rng(0)
    rows = []
    print(f"{'n':>8} {'numpy us':>10} {'licm us':>10} {'x numpy':>8} {'growth':>7} "
          f"{'no licm us':>12} {'growth':>7} {'licm speedup':>13}")
    prev = None
    for k in range(10, args.max_log2 + 1):
        n = 1 << k
        x = rng.random(n, dtype=np.float32) + np.float32(0.5)
        out = np.empty_like(x)
        grid, block = ((n + 31) // 32,), (32,)
        t_np = best_of(lambda: x / x.sum())
        t_on = best_of(lambda: with_licm(grid, block, (out, x, np.int32(n))))
        t_off = None
        if k <= args.no_licm_max_log2:
            t_off = best_of(lambda: without(grid, block, (out, x, np.int32(n))), budget=0.2, most=5)
        row = {"n": n, "numpy_s": t_np, "licm_s": t_on, "no_licm_s": t_off}
        g_on = t_on / prev["licm_s"] if prev else None
        g_off = t_off / prev["no_licm_s"] if prev and t_off and prev["no_licm_s"] else None
        print(f"{n:>8} {t_np * 1e6:>10.1f} {t_on * 1e6:>10.1f} {t_on / t_np:>8.2f} "
              f"{g_on if g_on else float('nan'):>7.2f} "
              f"{t_off * 1e6 if t_off else float('nan'):>12.1f} {g_off if g_off else float('nan'):>7.2f} "
              f"{t_off / t_on if t_off else float('nan'):>13.1f}")
        rows.append(row)
        prev = row
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
