"""Row-wise softmax of a rows x cols float32 matrix, y[r, :] = exp(x[r, :] - max) / sum
(kind: other -- streaming, with an exponential per element).

cols = 784 (the width of an MNIST layer); rows = 2^13 / 2^16 / 2^18 (small / default /
large).  Row-major, row r at x[r * cols].  Inputs: standard normal logits times 3 (row
maxima ~9, smallest outputs ~1e-13: no overflow, no subnormals).

* CUDA: `softmax_rows` (the variant timed), written the naive GPU way: ONE THREAD PER ROW,
  grid ceil(rows / 128) blocks of 128 threads; the thread walks its row three times: the
  maximum (`fmaxf`), the sum of `expf(x - max)` (the exponentials are stored to y), then
  `y /= sum`.  Consecutive threads of a warp read addresses 784 floats apart (uncoalesced
  on a GPU; on a CPU the 128 threads of a block, run as SIMD lanes, are 3136 bytes apart).
  The source also holds `softmax_row_per_block`, the usual GPU fix (not timed here): one
  block of 256 threads per row, the threads stride over the columns, max and sum combined by
  a shared-memory tree (`__syncthreads()` per level).
* OpenMP: `parallel for schedule(static)` over rows; per row the same three loops, each an
  `omp simd` loop over the columns (`reduction(max:m)`, `reduction(+:s)`, then a multiply by
  1/sum).  `expf` is declared `omp declare simd notinbranch`, as glibc's <math.h> does
  itself under -ffast-math, so GCC calls libmvec's vector expf (`_ZGVeN16v_expf` with
  AVX-512, `_ZGVdN8v_expf` with AVX2; libm.so links libmvec as needed).  No -ffast-math:
  the declaration is the only thing an experienced programmer has to add to get the
  exponential vectorized (without it, GCC 12 leaves the expf loop scalar: ~8x slower on
  one thread here).
* OpenCL: the same one-work-item-per-row kernel (`fmax`, `exp`), local size 128.

Reference: NumPy in float64 (x - max, exp, divide by the row sum), in chunks of rows.

Tolerance: |y - y_ref| <= 2e-5 |y_ref| + 1e-12 (default_check with rtol=2e-5,
atol=1e-12).  float32 errors: `x - max` is rounded (|x - max| <= ~35: <= ~2e-6 relative in
the exponential), expf <= 2 ulp (CUDA's bound; libmvec's <= 4 ulp), the division 0.5 ulp,
and the row sum: the CUDA kernel adds its 784 positive terms one after the other (bound
783 u = 4.7e-5, ~3e-6 in practice), the OpenMP twin in 16 partial sums.  Measured at
2^18 rows: max relative error 5.6e-6 for the one-thread-per-row kernel on cpuify, 1.4e-6
for the row-per-block kernel, 1.9e-6 for OpenMP; 2e-5 leaves a margin of 3.5 and still
catches any real mistake (an element off by one column or a wrong row sum errs by 1e-3
or more).  The atol only matters below 1e-7.

Traffic: 8 bytes per element (read x, write y once; a 3 KiB row stays in L1 between the
three passes, so the second read of x and the read-modify-write of y are not counted).
Flops: ~5 per element (max, subtract, exp counted as 1, add, divide).
"""

from __future__ import annotations

import ctypes

import numpy as np

from benchmarks.suite.workload import Workload, default_check

COLS = 784
BLOCK = 128            # threads per block of softmax_rows (one thread per row)
CHUNK = 4096           # rows per chunk of the float64 reference

CUDA_SRC = r"""
// One thread per row: grid = ceil(rows / 128) blocks of 128 threads.
// y[r][c] = exp(x[r][c] - max_c x[r][c]) / sum_c exp(x[r][c] - max_c x[r][c])
extern "C" __global__ void softmax_rows(const float *__restrict__ x, float *__restrict__ y,
                                        int rows, int cols) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float *in = x + (size_t)row * cols;
    float *out = y + (size_t)row * cols;

    float row_max = -3.402823466e38f;
    for (int c = 0; c < cols; c++)
        row_max = fmaxf(row_max, in[c]);

    float total = 0.0f;
    for (int c = 0; c < cols; c++) {
        const float e = expf(in[c] - row_max);
        out[c] = e;
        total += e;
    }

    for (int c = 0; c < cols; c++)
        out[c] = out[c] / total;
}

// One block per row (not timed): grid = rows blocks of ROW_BLOCK threads (a power of 2);
// the threads stride over the columns, then combine max and sum in shared memory.
#define ROW_BLOCK 256
extern "C" __global__ void softmax_row_per_block(const float *__restrict__ x,
                                                 float *__restrict__ y, int cols) {
    __shared__ float part[ROW_BLOCK];
    const int t = threadIdx.x;
    const float *in = x + (size_t)blockIdx.x * cols;
    float *out = y + (size_t)blockIdx.x * cols;

    float m = -3.402823466e38f;
    for (int c = t; c < cols; c += ROW_BLOCK)
        m = fmaxf(m, in[c]);
    part[t] = m;
    __syncthreads();
    for (int k = ROW_BLOCK / 2; k > 0; k >>= 1) {
        if (t < k) part[t] = fmaxf(part[t], part[t + k]);
        __syncthreads();
    }
    const float row_max = part[0];
    __syncthreads();                      // everyone has read part[0] before it is reused

    float s = 0.0f;
    for (int c = t; c < cols; c += ROW_BLOCK) {
        const float e = expf(in[c] - row_max);
        out[c] = e;
        s += e;
    }
    part[t] = s;
    __syncthreads();
    for (int k = ROW_BLOCK / 2; k > 0; k >>= 1) {
        if (t < k) part[t] += part[t + k];
        __syncthreads();
    }
    const float total = part[0];

    for (int c = t; c < cols; c += ROW_BLOCK)
        out[c] = out[c] / total;
}
"""

OMP_SRC = r"""
#include <math.h>
#include <stddef.h>

/* glibc's <math.h> declares this only under -ffast-math: it lets GCC call libmvec's
   vector expf in the omp simd loop below (4 ulp instead of 1, no errno). */
#pragma omp declare simd notinbranch
extern float expf(float);

void softmax_rows(const float *restrict x, float *restrict y, long rows, long cols)
{
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        const float *restrict in = x + (size_t)r * cols;
        float *restrict out = y + (size_t)r * cols;
        float m = -INFINITY;
#pragma omp simd reduction(max:m)
        for (long c = 0; c < cols; c++)
            m = in[c] > m ? in[c] : m;
        float s = 0.0f;
#pragma omp simd reduction(+:s)
        for (long c = 0; c < cols; c++) {
            const float e = expf(in[c] - m);
            out[c] = e;
            s += e;
        }
        const float inv = 1.0f / s;
#pragma omp simd
        for (long c = 0; c < cols; c++)
            out[c] *= inv;
    }
}
"""

OPENCL_SRC = r"""
// One work-item per row, local size 128.
__kernel void softmax_rows(__global const float *restrict x, __global float *restrict y,
                           int rows, int cols) {
    const int row = get_global_id(0);
    if (row >= rows) return;
    __global const float *in = x + (size_t)row * cols;
    __global float *out = y + (size_t)row * cols;

    float row_max = -FLT_MAX;
    for (int c = 0; c < cols; c++)
        row_max = fmax(row_max, in[c]);

    float total = 0.0f;
    for (int c = 0; c < cols; c++) {
        const float e = exp(in[c] - row_max);
        out[c] = e;
        total += e;
    }

    for (int c = 0; c < cols; c++)
        out[c] = out[c] / total;
}
"""

_vp = ctypes.c_void_p


class RowSoftmax(Workload):
    name = "row_softmax"
    kind = "other"
    description = "row-wise softmax, 784 columns, one thread per row (three serial loops)"
    sizes = {
        "small": {"rows": 1 << 13, "cols": COLS},
        "default": {"rows": 1 << 16, "cols": COLS},
        "large": {"rows": 1 << 18, "cols": COLS},
    }
    cuda_source = CUDA_SRC
    omp_source = OMP_SRC
    opencl_source = OPENCL_SRC
    opencl_reason = ""
    numba_reason = "no Python port"

    def make_inputs(self, p, rng):
        x = rng.standard_normal((p["rows"], p["cols"]), dtype=np.float32)
        x *= np.float32(3.0)
        return {"x": x}

    def reference(self, p, inp):
        x = inp["x"]
        out = np.empty(x.shape, np.float64)
        for lo in range(0, x.shape[0], CHUNK):
            z = x[lo:lo + CHUNK].astype(np.float64)
            z -= z.max(axis=1, keepdims=True)
            np.exp(z, out=z)
            z /= z.sum(axis=1, keepdims=True)
            out[lo:lo + CHUNK] = z
        return {"y": out}

    def check(self, p, out, ref):
        return default_check(out, ref, rtol=2e-5, atol=1e-12)

    def run_cpuify(self, p, inp, mod):
        rows, cols = p["rows"], p["cols"]
        bufs = inp.setdefault("_cpuify_bufs", {})
        if "y" not in bufs:
            bufs["y"] = np.empty((rows, cols), np.float32)
            bufs["fn"] = mod.get_function("softmax_rows")
        y = bufs["y"]
        bufs["fn"](((rows + BLOCK - 1) // BLOCK,), (BLOCK,),
                   (inp["x"], y, np.int32(rows), np.int32(cols)))
        return {"y": y}

    def run_omp(self, p, inp, lib):
        rows, cols = p["rows"], p["cols"]
        bufs = inp.setdefault("_omp_bufs", {})
        if "y" not in bufs:
            bufs["y"] = np.empty((rows, cols), np.float32)
            lib.softmax_rows.argtypes = [_vp, _vp, ctypes.c_long, ctypes.c_long]
            lib.softmax_rows.restype = None
        y = bufs["y"]
        lib.softmax_rows(inp["x"].ctypes.data, y.ctypes.data, rows, cols)
        return {"y": y}

    def run_opencl(self, p, inp, cl, ctx, queue, prg):
        rows, cols = p["rows"], p["cols"]
        bufs = inp.get("_cl_bufs")
        if bufs is None:
            mf = cl.mem_flags
            bufs = inp["_cl_bufs"] = {
                "x": cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=inp["x"]),
                "y": cl.Buffer(ctx, mf.WRITE_ONLY, size=rows * cols * 4),
                "h": np.empty((rows, cols), np.float32),
                "k": cl.Kernel(prg, "softmax_rows"),
            }
            bufs["k"].set_args(bufs["x"], bufs["y"], np.int32(rows), np.int32(cols))
        gsize = (rows + BLOCK - 1) // BLOCK * BLOCK
        cl.enqueue_nd_range_kernel(queue, bufs["k"], (gsize,), (BLOCK,))
        cl.enqueue_copy(queue, bufs["h"], bufs["y"], is_blocking=True)
        return {"y": bufs["h"]}

    def bytes_moved(self, p):
        return 8.0 * p["rows"] * p["cols"]

    def flops(self, p):
        return 5.0 * p["rows"] * p["cols"]


WORKLOAD = RowSoftmax()
