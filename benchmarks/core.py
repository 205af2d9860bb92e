#!/usr/bin/env python3
"""cpuify core benchmarks: memory bandwidth, a tiled matrix multiply, launch overhead and
compile time, each against a reference measured in the same process.

    python benchmarks/core.py [--size small|default|large] [--json out.json] [--quick]

Run from a source checkout (src/ is put first on sys.path) or with cpuify installed.  Prints
a table per section and PASS/FAIL per target at the end; a missed target never makes the
exit status nonzero (this is a measurement tool).  See benchmarks/README.md for what each
figure means."""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if (ROOT / "src" / "cpuify").is_dir():      # measure this checkout, not some installed copy
    sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402

import cpuify  # noqa: E402

SIZES = {
    #            vector length   matmul n  launches  repeats
    "small":   dict(vec_n=1 << 20, mm_n=256, launches=500, repeats=5),
    "default": dict(vec_n=1 << 24, mm_n=1024, launches=2000, repeats=10),
    "large":   dict(vec_n=1 << 26, mm_n=2048, launches=5000, repeats=10),
}

TARGETS = {
    "bandwidth_ratio": 0.80,        # cpuify / NumPy bandwidth
    "matmul_ratio": 1.00,           # cpuify / OpenMP GFLOP/s
    "launch_us": 20.0,              # per empty launch, median
    "first_compile_s": 1.5,         # cold process, no cache
    "cached_load_s": 0.050,         # RawModule constructor, cache hit
}


# ----------------------------------------------------------------------------------------
# timing helpers

def _stats(samples: list[float]) -> dict[str, float]:
    return {"best": min(samples), "median": statistics.median(samples), "n": len(samples)}


def bench(fns: dict[str, Callable[[], Any]], repeats: int, warmup: int = 2,
          min_sample_s: float = 0.005, rounds: int = 3, gap_s: float = 0.15,
          warmup_s: float = 0.06) -> dict[str, dict[str, float]]:
    """Times each callable `repeats` times; returns best/median seconds per call.

    Contenders run in blocks, round-robin over `rounds` rounds (A A A B B B C C C, A A A ...),
    so that slow drifts of a noisy machine hit all of them alike, while each block runs
    undisturbed: before a block we sleep `gap_s` so that idle threads of the previous
    contender's pool (libgomp and OpenBLAS spin for milliseconds after a parallel region)
    have gone to sleep and do not steal cores.  The warm-up calls that start a block go on
    until they have run for `warmup_s`: after the pause this VM needs 20-30 ms of load before
    its cores run at full speed again.  A sample runs the callable `inner` times, inner
    chosen so that a sample lasts at least min_sample_s."""
    multi = len(fns) > 1
    rounds = max(1, min(rounds, repeats)) if multi else 1
    per_round = [repeats // rounds + (1 if r < repeats % rounds else 0) for r in range(rounds)]
    inner: dict[str, int] = {}
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(rounds):
        for name, fn in fns.items():
            if multi:
                time.sleep(gap_s)
            warm_t0 = time.perf_counter()
            calls = 0
            while calls < (warmup if r == 0 else 1) or time.perf_counter() - warm_t0 < warmup_s:
                fn()
                calls += 1
            if name not in inner:
                t0 = time.perf_counter()
                fn()
                dt = time.perf_counter() - t0
                inner[name] = max(1, math.ceil(min_sample_s / max(dt, 1e-9)))
            k = inner[name]
            for _ in range(per_round[r]):
                t0 = time.perf_counter()
                for _ in range(k):
                    fn()
                samples[name].append((time.perf_counter() - t0) / k)
    return {k: _stats(v) for k, v in samples.items()}


def _fmt_time(s: float) -> str:
    if s >= 1:
        return f"{s:8.3f} s "
    if s >= 1e-3:
        return f"{s * 1e3:8.2f} ms"
    return f"{s * 1e6:8.1f} us"


def _table(title: str, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    print(f"\n== {title} ==")
    print("  ".join(str(h).ljust(w) if i == 0 else str(h).rjust(w)
                    for i, (h, w) in enumerate(zip(header, widths))))
    print(line)
    for r in rows:
        print("  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                        for i, (c, w) in enumerate(zip(r, widths))))


# ----------------------------------------------------------------------------------------
# a. bandwidth: vector add and STREAM triad

STREAM_SRC = r"""
// one thread per element: grid = ceil(n / 256) blocks of 256 threads
extern "C" __global__ void vadd(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
extern "C" __global__ void triad(float *a, const float *b, const float *c, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = b[i] + s * c[i];
}
// grid-stride loops: any grid size covers all n elements
extern "C" __global__ void vadd_gs(const float *a, const float *b, float *c, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        c[i] = a[i] + b[i];
}
extern "C" __global__ void triad_gs(float *a, const float *b, const float *c, float s, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        a[i] = b[i] + s * c[i];
}
"""


def bench_stream(n: int, repeats: int, quick: bool) -> dict[str, Any]:
    mod = cpuify.RawModule(code=STREAM_SRC)
    vadd, triad = mod.get_function("vadd"), mod.get_function("triad")
    vadd_gs, triad_gs = mod.get_function("vadd_gs"), mod.get_function("triad_gs")
    workers = cpuify.num_threads()
    rng = np.random.default_rng(0)
    a = rng.random(n, dtype=np.float32)
    b = rng.random(n, dtype=np.float32)
    c = np.empty(n, np.float32)
    tmp = np.empty(n, np.float32)
    s = np.float32(3.0)
    N = np.int32(n)
    block = 256
    grid = (n + block - 1) // block
    # grid-stride launch: the idiom of NVIDIA's "grid-stride loops" post, 32 blocks per SM;
    # a CPU worker thread plays the SM.
    gs_grid = 32 * workers
    nbytes = 3 * 4 * n           # 2 arrays read + 1 written, 4 bytes each (STREAM convention)

    # correctness first
    ref_add = a + b
    vadd((grid,), (block,), (a, b, c, N))
    ok_vadd = bool(np.array_equal(c, ref_add))
    c[:] = 0
    vadd_gs((gs_grid,), (block,), (a, b, c, N))
    ok_vadd_gs = bool(np.array_equal(c, ref_add))
    # triad: a = b + s*c, with c as input; keep `a` as the output array
    cin = rng.random(n, dtype=np.float32)
    out = np.empty(n, np.float32)
    ref_triad = b + s * cin
    triad((grid,), (block,), (out, b, cin, s, N))
    ok_triad = bool(np.allclose(out, ref_triad, rtol=1e-6, atol=0))
    out[:] = 0
    triad_gs((gs_grid,), (block,), (out, b, cin, s, N))
    ok_triad_gs = bool(np.allclose(out, ref_triad, rtol=1e-6, atol=0))

    fns = {
        "numpy add": lambda: np.add(a, b, out=c),
        "cpuify vadd 1/elem": lambda: vadd((grid,), (block,), (a, b, c, N)),
        "cpuify vadd grid-stride": lambda: vadd_gs((gs_grid,), (block,), (a, b, c, N)),
        "numpy triad (2 passes)": lambda: (np.multiply(cin, s, out=tmp), np.add(b, tmp, out=out)),
        "numpy add (1-pass ref)": lambda: np.add(b, cin, out=out),
        "cpuify triad 1/elem": lambda: triad((grid,), (block,), (out, b, cin, s, N)),
        "cpuify triad grid-stride": lambda: triad_gs((gs_grid,), (block,), (out, b, cin, s, N)),
    }
    res = bench(fns, repeats)
    for v in res.values():
        v["GB/s"] = nbytes / v["best"] / 1e9
        v["GB/s_median"] = nbytes / v["median"] / 1e9

    # single-worker cpuify, to show how the pool scales (informational)
    cpuify.set_num_threads(1)
    try:
        one = bench({"cpuify vadd 1/elem, 1 worker":
                     lambda: vadd((grid,), (block,), (a, b, c, N))}, max(3, repeats // 2))
    finally:
        cpuify.set_num_threads(0)
    for v in one.values():
        v["GB/s"] = nbytes / v["best"] / 1e9
        v["GB/s_median"] = nbytes / v["median"] / 1e9
    res.update(one)

    # grid-size sweep of the grid-stride kernel (informational; few repeats: some are slow)
    sweep: dict[str, Any] = {}
    grids = [workers, 32 * workers, 1024, max(1, n // (block * 16)), grid]
    if quick:
        grids = [32 * workers, grid]
    for g in dict.fromkeys(grids):
        t = bench({"g": lambda g=g: vadd_gs((g,), (block,), (a, b, c, N))}, 3, warmup=1)["g"]
        t["GB/s"] = nbytes / t["best"] / 1e9
        t["elems_per_thread"] = n / (g * block)
        sweep[str(g)] = t

    ratios = {
        "vadd 1/elem": res["cpuify vadd 1/elem"]["GB/s"] / res["numpy add"]["GB/s"],
        "vadd grid-stride": res["cpuify vadd grid-stride"]["GB/s"] / res["numpy add"]["GB/s"],
        "triad 1/elem": res["cpuify triad 1/elem"]["GB/s"] / res["numpy add (1-pass ref)"]["GB/s"],
        "triad grid-stride": (res["cpuify triad grid-stride"]["GB/s"]
                              / res["numpy add (1-pass ref)"]["GB/s"]),
        "triad 1/elem vs numpy 2-pass triad": (res["cpuify triad 1/elem"]["GB/s"]
                                               / res["numpy triad (2 passes)"]["GB/s"]),
    }
    correct = {"vadd": ok_vadd, "vadd_gs": ok_vadd_gs, "triad": ok_triad, "triad_gs": ok_triad_gs}

    ref_of = {"cpuify vadd 1/elem": "numpy add", "cpuify vadd grid-stride": "numpy add",
              "cpuify vadd 1/elem, 1 worker": "numpy add",
              "cpuify triad 1/elem": "numpy add (1-pass ref)",
              "cpuify triad grid-stride": "numpy add (1-pass ref)"}
    launch_of = {"cpuify vadd 1/elem": f"{grid}x{block}", "cpuify triad 1/elem": f"{grid}x{block}",
                 "cpuify vadd grid-stride": f"{gs_grid}x{block}",
                 "cpuify triad grid-stride": f"{gs_grid}x{block}",
                 "cpuify vadd 1/elem, 1 worker": f"{grid}x{block}"}
    order = ["numpy add", "cpuify vadd 1/elem", "cpuify vadd grid-stride",
             "cpuify vadd 1/elem, 1 worker", "numpy add (1-pass ref)", "numpy triad (2 passes)",
             "cpuify triad 1/elem", "cpuify triad grid-stride"]
    rows = []
    for k in order:
        v = res[k]
        ratio = f"{v['GB/s'] / res[ref_of[k]]['GB/s']:.2f}" if k in ref_of else ""
        rows.append([k, launch_of.get(k, ""), _fmt_time(v["best"]), _fmt_time(v["median"]),
                     f"{v['GB/s']:.1f}", ratio])
    _table(f"a. bandwidth, n = 2^{int(math.log2(n))} float32 ({nbytes / 2**20:.0f} MiB moved per "
           f"call), cpuify on {workers} worker(s), NumPy on 1 thread",
           ["", "launch", "best", "median", "GB/s", "vs NumPy"], rows)
    print("  (GB/s from the best time, 12 bytes/element; triad ratios are against the one-pass "
          "NumPy add reference)")
    print("  correct: " + ", ".join(f"{k} {'ok' if v else 'WRONG'}" for k, v in correct.items()))
    _table("a'. grid-stride vadd vs grid size (256-thread blocks)",
           ["grid", "elems/thread", "best", "GB/s"],
           [[g, f"{v['elems_per_thread']:.0f}", _fmt_time(v["best"]), f"{v['GB/s']:.2f}"]
            for g, v in sweep.items()])
    return {"n": n, "bytes_per_call": nbytes, "workers": workers, "grid_1_per_elem": grid,
            "grid_stride_grid": gs_grid, "block": block, "results": res, "ratios": ratios,
            "grid_stride_sweep": sweep, "correct": correct}


# ----------------------------------------------------------------------------------------
# b. tiled shared-memory matrix multiply vs the same algorithm in C + OpenMP

MATMUL_SRC = r"""
#define BLOCK_SIZE 16
// The CUDA samples' matrixMul kernel: C = A * B, A is hA x wA, B is wA x wB, row-major,
// dimensions multiples of BLOCK_SIZE; grid (wB/16, hA/16), block (16, 16).
extern "C" __global__ void matrixMul(float *C, const float *A, const float *B, int wA, int wB) {
    int bx = blockIdx.x, by = blockIdx.y;
    int tx = threadIdx.x, ty = threadIdx.y;
    int aBegin = wA * BLOCK_SIZE * by;
    int aEnd = aBegin + wA - 1;
    int aStep = BLOCK_SIZE;
    int bBegin = BLOCK_SIZE * bx;
    int bStep = BLOCK_SIZE * wB;
    float Csub = 0;
    for (int a = aBegin, b = bBegin; a <= aEnd; a += aStep, b += bStep) {
        __shared__ float As[BLOCK_SIZE][BLOCK_SIZE];
        __shared__ float Bs[BLOCK_SIZE][BLOCK_SIZE];
        As[ty][tx] = A[a + wA * ty + tx];
        Bs[ty][tx] = B[b + wB * ty + tx];
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BLOCK_SIZE; ++k)
            Csub += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    int c = wB * BLOCK_SIZE * by + BLOCK_SIZE * bx;
    C[c + wB * ty + tx] = Csub;
}
"""

OMP_SRC = HERE / "matmul_tiled_omp.c"
BIN_DIR = HERE / "bin"
OMP_CFLAGS = ["-O3", "-march=native", "-fopenmp", "-shared", "-fPIC"]


def build_omp() -> Path:
    """Compiles matmul_tiled_omp.c into benchmarks/bin/ (rebuilt when the source or flags
    change)."""
    cc = os.environ.get("CC", "gcc")
    BIN_DIR.mkdir(exist_ok=True)
    lib = BIN_DIR / "matmul_tiled_omp.so"
    stamp = BIN_DIR / "matmul_tiled_omp.cmd"
    cmd = [cc, *OMP_CFLAGS, "-o", str(lib), str(OMP_SRC)]
    if (lib.is_file() and stamp.is_file() and stamp.read_text() == " ".join(cmd)
            and lib.stat().st_mtime >= OMP_SRC.stat().st_mtime):
        return lib
    subprocess.run(cmd, check=True)
    stamp.write_text(" ".join(cmd))
    return lib


def bench_matmul(n: int, repeats: int) -> dict[str, Any]:
    assert n % 16 == 0, "the tiled kernels need n to be a multiple of 16"
    workers = cpuify.num_threads()
    # libgomp reads OMP_NUM_THREADS when it is loaded: give OpenMP as many threads as cpuify
    os.environ.setdefault("OMP_NUM_THREADS", str(workers))
    omp = ctypes.CDLL(str(build_omp()))
    for fn in (omp.matmul_tiled, omp.matmul_tiled_plain):
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        fn.restype = None
    omp.matmul_num_threads.restype = ctypes.c_int
    omp_threads = omp.matmul_num_threads()

    k = cpuify.RawKernel(MATMUL_SRC, "matrixMul")
    rng = np.random.default_rng(1)
    A = rng.random((n, n), dtype=np.float32)
    B = rng.random((n, n), dtype=np.float32)
    C_cp = np.zeros((n, n), np.float32)
    C_omp = np.zeros((n, n), np.float32)
    C_plain = np.zeros((n, n), np.float32)
    C_np = np.empty((n, n), np.float32)
    grid, block = (n // 16, n // 16), (16, 16)
    wA = wB = np.int32(n)
    pa, pb, pc, pp = (x.ctypes.data for x in (A, B, C_omp, C_plain))

    def run_cpuify() -> None:
        k(grid, block, (C_cp, A, B, wA, wB))

    def run_omp() -> None:
        omp.matmul_tiled(pa, pb, pc, n)

    def run_plain() -> None:
        omp.matmul_tiled_plain(pa, pb, pp, n)

    run_cpuify()
    run_omp()
    run_plain()
    ref = A.astype(np.float64) @ B.astype(np.float64)

    def check(C: np.ndarray) -> dict[str, Any]:
        rel = float(np.max(np.abs(C - ref) / np.abs(ref)))
        return {"ok": bool(np.allclose(C, ref, rtol=1e-3, atol=0)), "max_rel_err": rel}

    correct = {"cpuify": check(C_cp), "openmp": check(C_omp), "openmp_plain": check(C_plain)}
    res = bench({"cpuify (CUDA tiled kernel)": run_cpuify,
                 "C+OpenMP (same tiled algorithm)": run_omp,
                 "C+OpenMP, plain loops (no omp simd)": run_plain},
                repeats, warmup=1)
    # BLAS on its own (OpenBLAS threads spin ~0.1 s after each call)
    time.sleep(0.3)
    res.update(bench({"NumPy A@B (OpenBLAS, another algorithm)":
                      lambda: np.matmul(A, B, out=C_np)}, repeats, warmup=1))
    time.sleep(0.3)
    flops = 2.0 * n ** 3
    for v in res.values():
        v["GFLOP/s"] = flops / v["best"] / 1e9
        v["GFLOP/s_median"] = flops / v["median"] / 1e9
    cp, om = res["cpuify (CUDA tiled kernel)"], res["C+OpenMP (same tiled algorithm)"]
    ratio = cp["GFLOP/s"] / om["GFLOP/s"]
    rows = []
    for name, v in res.items():
        r = f"{v['GFLOP/s'] / om['GFLOP/s']:.2f}"
        rows.append([name, _fmt_time(v["best"]), _fmt_time(v["median"]), f"{v['GFLOP/s']:.1f}", r])
    _table(f"b. tiled 16x16 matmul, n = {n} float32, cpuify {workers} worker(s), "
           f"OpenMP {omp_threads} thread(s)",
           ["", "best", "median", "GFLOP/s", "vs OpenMP"], rows)
    print("  check vs NumPy (rtol 1e-3): " + ", ".join(
        f"{k2} {'ok' if v['ok'] else 'WRONG'} (max rel err {v['max_rel_err']:.1e})"
        for k2, v in correct.items()))
    return {"n": n, "workers": workers, "omp_threads": omp_threads, "flops": flops,
            "omp_cflags": OMP_CFLAGS, "results": res, "ratio": ratio, "correct": correct}


# ----------------------------------------------------------------------------------------
# c. launch overhead

EMPTY_SRC = r"""
extern "C" __global__ void empty() {}
extern "C" __global__ void empty_args(const float *a, const float *b, float *c, int n) {}
"""


def bench_launch(count: int) -> dict[str, Any]:
    mod = cpuify.RawModule(code=EMPTY_SRC)
    empty, empty_args = mod.get_function("empty"), mod.get_function("empty_args")
    x = np.zeros(16, np.float32)
    n16 = np.int32(16)
    cases = {
        "empty, 1 block x 1 thread": lambda: empty((1,), (1,), ()),
        "empty, 64 blocks x 256 threads": lambda: empty((64,), (256,), ()),
        "empty + 4 args (3 arrays, int), 1x1": lambda: empty_args((1,), (1,), (x, x, x, n16)),
    }
    out: dict[str, Any] = {}
    pc = time.perf_counter_ns
    for name, fn in cases.items():
        time.sleep(0.3)      # let other thread pools (OpenBLAS, libgomp) stop spinning
        for _ in range(min(200, count)):
            fn()
        samples = []
        for _ in range(count):
            t0 = pc()
            fn()
            samples.append(pc() - t0)
        t0 = pc()
        for _ in range(count):
            fn()
        loop_us = (pc() - t0) / count / 1e3
        samples.sort()
        out[name] = {"median_us": statistics.median(samples) / 1e3, "min_us": samples[0] / 1e3,
                     "p90_us": samples[int(0.9 * len(samples))] / 1e3,
                     "mean_us": sum(samples) / len(samples) / 1e3, "loop_mean_us": loop_us,
                     "n": count}
    _table(f"c. launch overhead from Python ({count} launches each)",
           ["", "median", "min", "p90", "mean", "mean (tight loop)"],
           [[k, f"{v['median_us']:.1f} us", f"{v['min_us']:.1f} us", f"{v['p90_us']:.1f} us",
             f"{v['mean_us']:.1f} us", f"{v['loop_mean_us']:.1f} us"] for k, v in out.items()])
    return out


# ----------------------------------------------------------------------------------------
# d. compile time

REDUCE_SRC = r"""
#define BLOCK 256
// Sum of in[0..n) per block (two elements per thread, tree in shared memory, last warp
// with shuffles); out[blockIdx.x] = partial sum.  Launch with BLOCK threads per block.
extern "C" __global__ void block_sum(const float *__restrict__ in, float *__restrict__ out,
                                     int n) {
    __shared__ float sdata[BLOCK];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * (blockDim.x * 2) + threadIdx.x;
    float v = 0.0f;
    if (i < n) v = in[i];
    if (i + blockDim.x < n) v += in[i + blockDim.x];
    sdata[tid] = v;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 32; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid < 32) {
        float x = sdata[tid] + sdata[tid + 32];
        for (int offset = 16; offset > 0; offset >>= 1)
            x += __shfl_down_sync(0xffffffffu, x, offset);
        if (tid == 0) out[blockIdx.x] = x;
    }
}
"""

# Run in a fresh interpreter: prints one JSON line.  mode "first": cold process, empty cache
# directory (first compile), then more compiles with the cache off (warm process).  mode
# "cached": cold process, cache already holding the module, then more cached loads.
_CHILD = r"""
import json, os, sys, time
t0 = time.perf_counter()
import numpy as np
import cpuify
cpuify.RawModule            # the lazy import of the API module
t_import = time.perf_counter() - t0
mode, src_path, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
src = open(src_path).read()
def load():
    t = time.perf_counter()
    m = cpuify.RawModule(code=src)
    m.get_function("block_sum")
    return time.perf_counter() - t, m
dt, m = load()
out = {"import_s": t_import, "cold_s": dt, "cold_timings": dict(m._compiled.timings),
       "cold_from_cache": m._compiled.from_cache, "warm": []}
if mode == "first":
    os.environ["CPUIFY_NO_CACHE"] = "1"
for _ in range(reps):
    dt, m = load()
    out["warm"].append({"s": dt, "timings": dict(m._compiled.timings),
                        "from_cache": m._compiled.from_cache})
# check the kernel works
n = 100000
x = np.random.default_rng(0).random(n, dtype=np.float32)
blocks = (n + 511) // 512
y = np.zeros(blocks, np.float32)
m.get_function("block_sum")((blocks,), (256,), (x, y, np.int32(n)))
out["correct"] = bool(abs(float(y.sum(dtype=np.float64)) - float(x.sum(dtype=np.float64)))
                      < 1e-4 * n)
print(json.dumps(out))
"""


def _run_child(mode: str, src_path: str, cache_dir: str, reps: int) -> dict[str, Any]:
    from cpuify.runtime import native
    env = dict(os.environ)
    env.pop("CPUIFY_NO_CACHE", None)
    env["CPUIFY_CACHE_DIR"] = cache_dir
    # reuse the runtime library this process loaded, so that a fresh cache directory does not
    # also mean building the native runtime with the C compiler
    env["CPUIFY_RUNTIME_LIB"] = native.runtime_path()
    pp = [str(ROOT / "src")] if (ROOT / "src" / "cpuify").is_dir() else []
    env["PYTHONPATH"] = os.pathsep.join(pp + [p for p in [env.get("PYTHONPATH")] if p])
    proc = subprocess.run([sys.executable, "-c", _CHILD, mode, src_path, str(reps)],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"compile-time child ({mode}) failed:\n{proc.stdout}{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_compile(procs: int) -> dict[str, Any]:
    tmp = tempfile.mkdtemp(prefix="cpuify-bench-")
    try:
        src_path = os.path.join(tmp, "reduce.cu")
        with open(src_path, "w") as f:
            f.write(REDUCE_SRC)
        firsts, cacheds = [], []
        for i in range(procs):
            cache = os.path.join(tmp, f"cache{i}")       # fresh, empty cache directory
            firsts.append(_run_child("first", src_path, cache, 3))
            cacheds.append(_run_child("cached", src_path, cache, 5))

        # in this process (warm: LLVM, NVRTC and the runtime already loaded)
        saved = {k: os.environ.get(k) for k in ("CPUIFY_NO_CACHE", "CPUIFY_CACHE_DIR")}
        try:
            os.environ["CPUIFY_CACHE_DIR"] = os.path.join(tmp, "cache0")
            os.environ.pop("CPUIFY_NO_CACHE", None)
            # one load first: if src/ changed since this process started, its cache key
            # differs from the children's and this compiles and stores the entry
            cpuify.RawModule(code=REDUCE_SRC).compile()       # (compilation is lazy)
            inproc_cached, inproc_hits = [], []
            for _ in range(10):
                t = time.perf_counter()
                m = cpuify.RawModule(code=REDUCE_SRC)
                m.get_function("block_sum")
                inproc_cached.append(time.perf_counter() - t)
                inproc_hits.append(m._compiled.from_cache)
            os.environ["CPUIFY_NO_CACHE"] = "1"
            inproc_first = []
            for _ in range(3):
                t = time.perf_counter()
                m = cpuify.RawModule(code=REDUCE_SRC)
                m.get_function("block_sum")
                inproc_first.append((time.perf_counter() - t, dict(m._compiled.timings)))
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def med(xs: list[float]) -> float:
        return statistics.median(xs)

    def phases(timing_dicts: list[dict[str, float]]) -> dict[str, float]:
        keys = ["nvrtc", "parse", "lift+codegen", "llvm"]
        return {k: med([t.get(k, 0.0) for t in timing_dicts]) for k in keys}

    cold_first = [f["cold_s"] for f in firsts]
    warm_first = [w["s"] for f in firsts for w in f["warm"]]
    cold_cached = [c["cold_s"] for c in cacheds]
    warm_cached = [w["s"] for c in cacheds for w in c["warm"]]
    res = {
        "first_cold_process": {"median_s": med(cold_first), "best_s": min(cold_first),
                               "timings": phases([f["cold_timings"] for f in firsts]),
                               "from_cache": any(f["cold_from_cache"] for f in firsts)},
        "first_warm_process": {"median_s": med(warm_first), "best_s": min(warm_first),
                               "timings": phases([w["timings"] for f in firsts for w in f["warm"]])},
        "first_in_process": {"median_s": med([t for t, _ in inproc_first]),
                             "best_s": min(t for t, _ in inproc_first),
                             "timings": phases([d for _, d in inproc_first])},
        "cached_cold_process": {"median_s": med(cold_cached), "best_s": min(cold_cached),
                                "from_cache": all(c["cold_from_cache"] for c in cacheds)},
        "cached_warm_process": {"median_s": med(warm_cached), "best_s": min(warm_cached)},
        "cached_in_process": {"median_s": med(inproc_cached), "best_s": min(inproc_cached),
                              "from_cache": all(inproc_hits)},
        "import_s": med([f["import_s"] for f in firsts + cacheds]),
        "child_processes": procs,
        "kernel_correct": all(x["correct"] for x in firsts + cacheds),
    }
    rows = []
    labels = [("first_cold_process", "first compile, fresh process, empty cache"),
              ("first_warm_process", "compile again in that process, cache off"),
              ("first_in_process", "compile in this process, cache off"),
              ("cached_cold_process", "cached load, fresh process"),
              ("cached_warm_process", "cached load again in that process"),
              ("cached_in_process", "cached load in this process")]
    for key, label in labels:
        v = res[key]
        t = v.get("timings")
        rows.append([label, _fmt_time(v["median_s"]), _fmt_time(v["best_s"])]
                    + ([_fmt_time(t[p]) for p in ("nvrtc", "parse", "lift+codegen", "llvm")]
                       if t else ["", "", "", ""]))
    _table(f"d. compile time of a {REDUCE_SRC.count(chr(10))}-line shared-memory reduction "
           f"kernel (RawModule constructor + get_function; {procs} fresh processes each)",
           ["", "median", "best", "nvrtc", "parse", "lift+codegen", "llvm"], rows)
    print(f"  `import numpy, cpuify` in a fresh process (not included above): "
          f"{res['import_s'] * 1e3:.0f} ms;  kernel result "
          f"{'ok' if res['kernel_correct'] else 'WRONG'};  cold first compile from cache: "
          f"{res['first_cold_process']['from_cache']} (must be False); cached loads from cache: "
          f"{res['cached_cold_process']['from_cache'] and res['cached_in_process']['from_cache']}")
    return res


# ----------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="default")
    ap.add_argument("--json", metavar="OUT", help="write all numbers to this JSON file")
    ap.add_argument("--repeats", type=int, help="timed repeats per measurement (default by size)")
    ap.add_argument("--only", choices=["stream", "matmul", "launch", "compile"], action="append",
                    help="run only these sections (repeatable)")
    ap.add_argument("--quick", action="store_true",
                    help="fewer repeats, a shorter grid-stride sweep, one compile process")
    args = ap.parse_args(argv)
    cfg = dict(SIZES[args.size])
    repeats = args.repeats or (3 if args.quick else cfg["repeats"])
    sections = args.only or ["stream", "matmul", "launch", "compile"]

    workers = cpuify.num_threads()
    info = {"size": args.size, "repeats": repeats, "python": platform.python_version(),
            "numpy": np.__version__, "cpuify": cpuify.__version__, "machine": platform.machine(),
            "cpu": cpu_name(), "cores": os.cpu_count(), "cpuify_workers": workers,
            "loadavg_start": _loadavg()}
    print(f"cpuify {cpuify.__version__} benchmarks, size={args.size}: {info['cpu']}, "
          f"{os.cpu_count()} cores, cpuify workers {workers}, NumPy {np.__version__}, "
          f"load average {info['loadavg_start']}")
    try:
        if os.getloadavg()[0] > 0.7:
            print("  warning: the machine is busy (1-minute load average > 0.7); other processes "
                  "compete for the cores and the numbers below will be noisy")
    except OSError:
        pass

    results: dict[str, Any] = {"info": info}
    if "stream" in sections:
        results["stream"] = bench_stream(cfg["vec_n"], repeats, args.quick)
    if "matmul" in sections:
        results["matmul"] = bench_matmul(cfg["mm_n"], max(3, repeats // 2))
    if "launch" in sections:
        results["launch"] = bench_launch(cfg["launches"])
    if "compile" in sections:
        results["compile"] = bench_compile(1 if args.quick else 3)
    info["loadavg_end"] = _loadavg()

    checks = _targets(results)
    results["targets"] = checks
    print("\n== targets ==")
    for c in checks:
        print(f"  {'PASS' if c['pass'] else 'FAIL'}  {c['name']}: {c['value']} "
              f"(target {c['target']})")
    n_fail = sum(not c["pass"] for c in checks)
    print(f"  {len(checks) - n_fail}/{len(checks)} targets met")

    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2, default=float)
        print(f"  numbers written to {args.json}")
    return 0     # a missed target is a measurement, not an error


def _targets(r: dict[str, Any]) -> list[dict[str, Any]]:
    out = []

    def add(name: str, ok: bool, value: str, target: str) -> None:
        out.append({"name": name, "pass": bool(ok), "value": value, "target": target})

    t = TARGETS
    if "stream" in r:
        s = r["stream"]
        for key in ("vadd 1/elem", "vadd grid-stride", "triad 1/elem", "triad grid-stride"):
            v = s["ratios"][key]
            add(f"bandwidth {key} / NumPy", v >= t["bandwidth_ratio"], f"{v:.2f}",
                f">= {t['bandwidth_ratio']:.2f}")
        add("stream kernels correct", all(s["correct"].values()),
            ", ".join(k for k, v in s["correct"].items() if not v) or "all", "all")
    if "matmul" in r:
        m = r["matmul"]
        add("matmul cpuify / OpenMP", m["ratio"] >= t["matmul_ratio"], f"{m['ratio']:.2f}",
            f">= {t['matmul_ratio']:.2f}")
        add("matmul results match NumPy", m["correct"]["cpuify"]["ok"] and m["correct"]["openmp"]["ok"],
            f"cpuify {m['correct']['cpuify']['ok']}, openmp {m['correct']['openmp']['ok']}", "both")
    if "launch" in r:
        for key in ("empty, 1 block x 1 thread", "empty, 64 blocks x 256 threads"):
            v = r["launch"][key]["median_us"]
            add(f"launch {key}", v < t["launch_us"], f"{v:.1f} us", f"< {t['launch_us']:.0f} us")
    if "compile" in r:
        c = r["compile"]
        v = c["first_cold_process"]["median_s"]
        add("first compile (fresh process, no cache)", v < t["first_compile_s"], f"{v:.3f} s",
            f"< {t['first_compile_s']} s")
        v = c["cached_cold_process"]["median_s"]
        add("cached load (fresh process)", v < t["cached_load_s"], f"{v * 1e3:.1f} ms",
            f"< {t['cached_load_s'] * 1e3:.0f} ms")
        v = c["cached_in_process"]["median_s"]
        add("cached load (in process)", v < t["cached_load_s"], f"{v * 1e3:.1f} ms",
            f"< {t['cached_load_s'] * 1e3:.0f} ms")
    return out


def cpu_name() -> str:
    """The CPU's model name (for the report header)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


if __name__ == "__main__":
    sys.exit(main())
