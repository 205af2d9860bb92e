"""Loop order from the access analysis: one thread per row, a running max over the row's
columns, against the same kernel with the loop interchanged with the thread loop, and
against hand-written OpenMP twins.

    python benchmarks/loop_order.py [--rows 65536] [--cols 784] [--repeats 7]

Kernels (128-thread blocks, -ftz=true as every RawModule compile; results checked):
  row_max         m = fmaxf(m, |x[r][c]| * w[c] + x[r][c]^2), out[r] = m * s: the loop
                  stays in each thread (interchange-uniform-loops' by_access decision)
                  against `interchange-uniform-loops{by_access=false}` (interchanged: every
                  column a gather across the block's rows)
  row_max_stored  m = fmaxf(m, x[r][c]), out[r] = m: the max stored as it is; a flush of its
                  own in front of the store keeps it a vector reduction under -ftz
                  (flush-min-max-at-uses) against the pass disabled (flushes on the
                  loop-carried value: a scalar loop)
The OpenMP twins (`parallel for` over rows, `omp simd reduction(max:m)` over columns, gcc
-O3 -march=native -fopenmp, 2 threads) run when gcc is found.  Prints the best time of
each and the ratios (> 1: cpuify faster)."""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import subprocess
import tempfile
import time

import numpy as np

import cpuify
from cpuify.transforms.pass_manager import default_pipeline

SRC = r'''
extern "C" __global__ void row_max(const float *__restrict__ x, const float *__restrict__ w,
                                   float *__restrict__ out, int rows, int cols, float s) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float *in = x + (size_t)row * cols;
    float m = -3.402823466e38f;
    for (int c = 0; c < cols; c++) {
        const float v = in[c];
        m = fmaxf(m, fabsf(v) * w[c] + v * v);
    }
    out[row] = m * s;
}
extern "C" __global__ void row_max_stored(const float *x, const float *w, float *out,
                                          int rows, int cols, float s) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float *in = x + (size_t)row * cols;
    float m = -3.402823466e38f;
    for (int c = 0; c < cols; c++) m = fmaxf(m, in[c]);
    out[row] = m;
}
'''

OMP_SRC = r'''
#include <math.h>
#include <stddef.h>
void row_max(const float *restrict x, const float *restrict w, float *restrict out,
             long rows, long cols, float s) {
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        const float *restrict in = x + (size_t)r * cols;
        float m = -3.402823466e38f;
#pragma omp simd reduction(max:m)
        for (long c = 0; c < cols; c++) {
            const float e = fabsf(in[c]) * w[c] + in[c] * in[c];
            m = e > m ? e : m;
        }
        out[r] = m * s;
    }
}
void row_max_stored(const float *restrict x, const float *restrict w, float *restrict out,
                    long rows, long cols, float s) {
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        const float *restrict in = x + (size_t)r * cols;
        float m = -3.402823466e38f;
#pragma omp simd reduction(max:m)
        for (long c = 0; c < cols; c++) m = in[c] > m ? in[c] : m;
        out[r] = m;
    }
}
'''


def _omp_library(tmp: str) -> ctypes.CDLL | None:
    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    src, lib = os.path.join(tmp, "twin.c"), os.path.join(tmp, "twin.so")
    with open(src, "w") as f:
        f.write(OMP_SRC)
    subprocess.run([gcc, "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", src, "-o", lib],
                   check=True)
    dll = ctypes.CDLL(lib)
    for name in ("row_max", "row_max_stored"):
        fn = getattr(dll, name)
        fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long, ctypes.c_long, ctypes.c_float]
        fn.restype = None
    return dll


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1 << 16)
    ap.add_argument("--cols", type=int, default=784)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    # (idle OpenMP threads must not spin on the cores the next cpuify launch runs on)
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    rows, cols = args.rows, args.cols
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((rows, cols), dtype=np.float32) * 3).astype(np.float32)
    w = rng.standard_normal(cols, dtype=np.float32)
    s = np.float32(0.5)
    want = {"row_max": (np.max(np.abs(x) * w + x * x, axis=1) * s).astype(np.float32),
            "row_max_stored": x.max(axis=1)}
    interchanged = ",".join(p + "{by_access=false}" if p == "interchange-uniform-loops" else p
                            for p in default_pipeline())
    variants = {
        "row_max": {"cpuify": (), "interchanged": (f"--passes={interchanged}",)},
        "row_max_stored": {"cpuify": (),
                           "no flush pass": ("--disable-pass=flush-min-max-at-uses",)},
    }
    grid, block = ((rows + 127) // 128,), (128,)
    with tempfile.TemporaryDirectory() as tmp:
        omp = _omp_library(tmp)
        print(f"{rows} rows x {cols} columns, {grid[0]} blocks of 128 threads; best of "
              f"{args.repeats}" + ("" if omp else "; no gcc: no OpenMP twin"))
        for name, opts in variants.items():
            out = np.zeros(rows, np.float32)
            runs = {}
            for label, options in opts.items():
                fn = cpuify.RawModule(code=SRC, options=options).get_function(name)
                runs[label] = (lambda fn=fn: fn(grid, block, (x, w, out, np.int32(rows),
                                                             np.int32(cols), s)))
            if omp is not None:
                twin = getattr(omp, name)
                runs["OpenMP"] = lambda twin=twin: twin(x.ctypes.data, w.ctypes.data,
                                                        out.ctypes.data, rows, cols, s)
            best = {}
            for label, run in runs.items():       # compile, specialize, check
                for _ in range(2):
                    out[:] = np.nan
                    run()
                np.testing.assert_allclose(out, want[name], rtol=1e-6, err_msg=label)
                best[label] = float("inf")
            for _ in range(args.repeats):          # round robin
                for label, run in runs.items():
                    t0 = time.perf_counter()
                    run()
                    best[label] = min(best[label], time.perf_counter() - t0)
            mine = best["cpuify"]
            print(f"{name:15} " + "  ".join(
                f"{label} {t * 1e3:.1f} ms" + ("" if label == "cpuify" else f" ({t / mine:.2f}x)")
                for label, t in best.items()))


if __name__ == "__main__":
    main()
