"""Sparse matrix-vector product y = A x, A in CSR, float32 (kind: bandwidth).

A: n x n (n = 2^20 by default), row lengths uniform in [0, 32] (mean 16 nonzeros per row),
column indices uniform over [0, n) and sorted within each row, values uniform in [-1, 1);
x uniform in [-1, 1).  Generated with NumPy alone (sorted columns per row from normalized
cumulative sums of exponential gaps, no sort).

* CUDA: `spmv_csr_scalar`, one thread per row (Bell & Garland's CSR-scalar kernel, 256
  threads per block), `__ldg` for the gathered x.  The source also holds `spmv_csr_vector`,
  a warp per row (lanes stride the row, `__shfl_down_sync` reduction, lane 0 writes); the
  suite times the scalar kernel (`WORKLOAD`); `SpMV(variant="vector")` times the warp
  kernel instead (its OpenCL twin reduces the 32 partial sums in `__local` memory).
* OpenMP: rows over threads with `schedule(dynamic, 512)` (row lengths vary), the row's
  dot product an `omp simd reduction` (AVX-512 gathers of x).
* OpenCL: the same kernel(s), one work-item per row.

Tolerance: |y - y_ref| <= 1e-5 + 1e-4 |y_ref| (the default check), reference in float64.
A row's float32 sum of <= 32 products (|a x| < 1) is off by at most ~32 * 6e-8 = 2e-6,
whatever the summation order; a missing or doubled product is off by ~0.25 on average.
"""

from __future__ import annotations

import ctypes

import numpy as np

from benchmarks.suite.workload import Workload, FLOAT_P as _fp, INT_P as _ip

CUDA_SRC = r"""
// CSR-scalar: one thread per row.
extern "C" __global__ void spmv_csr_scalar(int n, const int *__restrict__ row_ptr,
                                           const int *__restrict__ col,
                                           const float *__restrict__ val,
                                           const float *__restrict__ x,
                                           float *__restrict__ y) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < n) {
        const int start = row_ptr[row], end = row_ptr[row + 1];
        float dot = 0.0f;
        for (int jj = start; jj < end; jj++)
            dot += val[jj] * __ldg(&x[col[jj]]);
        y[row] = dot;
    }
}

// CSR-vector: one warp per row, lanes stride the row, shuffle reduction.
extern "C" __global__ void spmv_csr_vector(int n, const int *__restrict__ row_ptr,
                                           const int *__restrict__ col,
                                           const float *__restrict__ val,
                                           const float *__restrict__ x,
                                           float *__restrict__ y) {
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;   // warp-uniform
    const int lane = threadIdx.x & 31;
    if (row < n) {
        const int start = row_ptr[row], end = row_ptr[row + 1];
        float dot = 0.0f;
        for (int jj = start + lane; jj < end; jj += 32)
            dot += val[jj] * __ldg(&x[col[jj]]);
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1)
            dot += __shfl_down_sync(0xffffffffu, dot, offset);
        if (lane == 0)
            y[row] = dot;
    }
}
"""

OMP_SRC = r"""
#include <stddef.h>

void spmv_csr(long n, const int *restrict row_ptr, const int *restrict col,
              const float *restrict val, const float *restrict x, float *restrict y)
{
#pragma omp parallel for schedule(dynamic, 512)
    for (long r = 0; r < n; r++) {
        const int start = row_ptr[r], end = row_ptr[r + 1];
        float dot = 0.0f;
#pragma omp simd reduction(+:dot)
        for (int j = start; j < end; j++)
            dot += val[j] * x[col[j]];
        y[r] = dot;
    }
}
"""

OPENCL_SRC = r"""
__kernel void spmv_csr_scalar(int n, __global const int *restrict row_ptr,
                              __global const int *restrict col,
                              __global const float *restrict val,
                              __global const float *restrict x,
                              __global float *restrict y) {
    int row = get_global_id(0);
    if (row < n) {
        const int start = row_ptr[row], end = row_ptr[row + 1];
        float dot = 0.0f;
        for (int jj = start; jj < end; jj++)
            dot += val[jj] * x[col[jj]];
        y[row] = dot;
    }
}

// 32 work-items per row; local size 256 (8 rows per group); __local tree per row.
__kernel void spmv_csr_vector(int n, __global const int *restrict row_ptr,
                              __global const int *restrict col,
                              __global const float *restrict val,
                              __global const float *restrict x,
                              __global float *restrict y) {
    __local float partial[256];
    const int lid = get_local_id(0);
    const int row = get_global_id(0) >> 5;
    const int lane = lid & 31;
    float dot = 0.0f;
    if (row < n) {
        const int start = row_ptr[row], end = row_ptr[row + 1];
        for (int jj = start + lane; jj < end; jj += 32)
            dot += val[jj] * x[col[jj]];
    }
    partial[lid] = dot;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int offset = 16; offset > 0; offset >>= 1) {
        if (lane < offset) partial[lid] += partial[lid + offset];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lane == 0 && row < n)
        y[row] = partial[lid];
}
"""


def random_csr(n: int, max_row_len: int, rng: np.random.Generator):
    """CSR arrays (row_ptr int32[n+1], col int32[nnz] sorted per row, val float32[nnz])."""
    lens = rng.integers(0, max_row_len + 1, n)
    nnz = int(lens.sum())
    row_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=row_ptr[1:])
    # Sorted uniform columns per row: row r takes lens[r] + 1 exponential gaps; the running
    # sums of its first lens[r] gaps, divided by the sum of all of them, are sorted uniforms.
    gaps = rng.standard_exponential(nnz + n, dtype=np.float32)
    cs = np.cumsum(gaps, dtype=np.float64)
    del gaps
    seg_end = row_ptr[1:] + np.arange(n)               # index of row r's last gap
    seg_start = seg_end - lens
    base = np.where(seg_start > 0, cs[np.maximum(seg_start - 1, 0)], 0.0)
    scale = n / (cs[seg_end] - base)
    rows = np.repeat(np.arange(n, dtype=np.int32), lens)
    idx = np.arange(nnz, dtype=np.int64)
    idx += rows                                        # skip each earlier row's last gap
    frac = cs[idx]
    del cs, idx
    frac -= base[rows]
    frac *= scale[rows]                                # in [0, n)
    col = np.minimum(frac, n - 1).astype(np.int32)
    del frac, rows
    val = rng.random(nnz, dtype=np.float32)
    val *= 2
    val -= 1                                           # uniform in [-1, 1)
    return row_ptr.astype(np.int32), col, val


class SpMV(Workload):
    kind = "bandwidth"
    sizes = {
        "small": {"n": 1 << 16, "max_row_len": 32},
        "default": {"n": 1 << 20, "max_row_len": 32},
        "large": {"n": 1 << 22, "max_row_len": 32},
    }
    cuda_source = CUDA_SRC
    omp_source = OMP_SRC
    opencl_source = OPENCL_SRC
    opencl_reason = ""
    numba_reason = "no Python port"

    BLOCK = 256

    def __init__(self, variant: str = "scalar"):
        assert variant in ("scalar", "vector")
        self.variant = variant
        self.name = "spmv" if variant == "scalar" else "spmv_vector"
        self.kernel = "spmv_csr_" + variant
        self.description = ("CSR SpMV, ~16 nnz/row, " +
                            ("one thread per row" if variant == "scalar" else "one warp per row"))

    def _grid(self, n):
        threads = n if self.variant == "scalar" else 32 * n
        return (threads + self.BLOCK - 1) // self.BLOCK

    def make_inputs(self, p, rng):
        n = p["n"]
        row_ptr, col, val = random_csr(n, p["max_row_len"], rng)
        x = rng.random(n, dtype=np.float32) * np.float32(2) - np.float32(1)
        return {"row_ptr": row_ptr, "col": col, "val": val, "x": x}

    def reference(self, p, inp):
        n = p["n"]
        rp = inp["row_ptr"]
        rows = np.repeat(np.arange(n), np.diff(rp))
        prod = inp["val"].astype(np.float64) * inp["x"].astype(np.float64)[inp["col"]]
        return {"y": np.bincount(rows, weights=prod, minlength=n)}

    def run_cpuify(self, p, inp, mod):
        n = p["n"]
        bufs = inp.setdefault("_cpuify_bufs", {})
        if self.kernel not in bufs:
            bufs["y"] = np.empty(n, np.float32)
            bufs[self.kernel] = mod.get_function(self.kernel)
        y = bufs["y"]
        bufs[self.kernel]((self._grid(n),), (self.BLOCK,),
                          (np.int32(n), inp["row_ptr"], inp["col"], inp["val"], inp["x"], y))
        return {"y": y}

    def run_omp(self, p, inp, lib):
        n = p["n"]
        bufs = inp.setdefault("_omp_bufs", {})
        if "y" not in bufs:
            bufs["y"] = np.empty(n, np.float32)
            lib.spmv_csr.restype = None
            lib.spmv_csr.argtypes = [ctypes.c_long, _ip, _ip, _fp, _fp, _fp]
        y = bufs["y"]
        lib.spmv_csr(n, inp["row_ptr"].ctypes.data_as(_ip), inp["col"].ctypes.data_as(_ip),
                     inp["val"].ctypes.data_as(_fp), inp["x"].ctypes.data_as(_fp),
                     y.ctypes.data_as(_fp))
        return {"y": y}

    def run_opencl(self, p, inp, cl, ctx, queue, prg):
        n = p["n"]
        bufs = inp.get("_cl_bufs")
        if bufs is None:
            mf = cl.mem_flags
            ro = mf.READ_ONLY | mf.COPY_HOST_PTR
            bufs = inp["_cl_bufs"] = {
                k: cl.Buffer(ctx, ro, hostbuf=inp[k]) for k in ("row_ptr", "col", "val", "x")}
            bufs["y"] = cl.Buffer(ctx, mf.WRITE_ONLY, size=n * 4)
            bufs["hy"] = np.empty(n, np.float32)
        key = "k_" + self.kernel
        if key not in bufs:
            bufs[key] = cl.Kernel(prg, self.kernel)
        k = bufs[key]
        k.set_args(np.int32(n), bufs["row_ptr"], bufs["col"], bufs["val"], bufs["x"], bufs["y"])
        cl.enqueue_nd_range_kernel(queue, k, (self._grid(n) * self.BLOCK,), (self.BLOCK,))
        cl.enqueue_copy(queue, bufs["hy"], bufs["y"])
        queue.finish()
        return {"y": bufs["hy"]}

    def bytes_moved(self, p):
        n = p["n"]
        nnz = n * p["max_row_len"] / 2.0
        # row_ptr, y, and per nonzero: value, column index and the gathered x element
        return 4.0 * (n + 1) + 4.0 * n + 12.0 * nnz

    def flops(self, p):
        return 2.0 * p["n"] * p["max_row_len"] / 2.0


WORKLOAD = SpMV()
