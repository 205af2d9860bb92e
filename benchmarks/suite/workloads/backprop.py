"""Rodinia backprop, forward pass of the input layer: hidden = sigmoid(x @ W + b)
(kind: bandwidth).

Layout as in Rodinia: `input` has n_in + 1 entries (entry 0 is the bias unit, unused here),
`weights` is (n_in + 1) x (hid + 1) row-major float32, row 0 holds the hidden biases, column
0 is unused; hid = 16.

* CUDA: Rodinia's `bpnn_layerforward_CUDA` (block 16 x 16, n_in / 16 blocks, along grid x
  here as grid y is limited to 65535): one input unit
  per thread row `ty`, one hidden unit per column `tx`; the block's 16 inputs and 16 x 16
  weights are staged in `__shared__`, multiplied, and summed over `ty` with Rodinia's
  interleaved log-step reduction (`if (ty % power_two == 0)`, `__syncthreads()` in the
  loop); one partial sum per (block, hidden unit).  Cleaned up: integer powers instead of
  `__powf`/`__log2f`, and the products are not written back over the weights (Rodinia does,
  which would make repeated runs differ).  Rodinia sums the partials on the host; here
  two more kernels do it on the device, as a CUDA programmer would write them: (a)
  `bpnn_hidden_sum`, block (hid, 16), one block per chunk of partial rows, thread (j, r)
  reads rows r, r + 16, ... of the chunk, so a block's loads are whole consecutive rows
  (coalesced), then a shared-memory tree over r; (b) `bpnn_hidden_out`, one block of hid
  threads, adds the chunk sums and the bias and applies the sigmoid.  (An earlier version
  had one block per hidden unit read a column of the partials, 64 bytes apart per thread:
  uncoalesced on a GPU, and 16 passes over the partials on a CPU.)
* OpenMP: one pass over the weight rows (row-major, unit stride), each thread keeping the
  16 hidden sums in a local array updated with `omp simd`, combined by an array-section
  reduction `reduction(+:acc[:HID])`; then bias + sigmoid.
* OpenCL: the same two kernels with `__local` arrays (Rodinia's OpenCL port is the same
  kernel).

Inputs: x uniform in [0, 1), weights uniform in [-1, 1) / sqrt(n_in), so that the
pre-activations are O(1) and the sigmoid is not saturated.

Tolerance: |h - h_ref| <= 1e-5 + 1e-4 |h_ref|, reference in float64.  The float32 sums
of n_in products (~5e-4 each) carry rounding errors of ~1e-6 (tree) to ~1e-5 (a long
sequential float sum); the sigmoid's slope is <= 1/4.  A missing block changes a sum by
~1e-2.
"""

from __future__ import annotations

import ctypes

import numpy as np

from benchmarks.suite.workload import Workload, FLOAT_P as _fp, float_ptr as _ptr

CUDA_SRC = r"""
#define HEIGHT 16        // input units per block (threadIdx.y)
#define WIDTH 16         // hidden units (threadIdx.x); hid must equal WIDTH
#define SUM_ROWS 16      // row lanes of bpnn_hidden_sum (threadIdx.y)

// Rodinia bpnn_layerforward_CUDA: block (WIDTH, HEIGHT); the blocks run along grid x,
// grid (n_in / HEIGHT, 1), since 2^16 blocks exceed the 65535 limit of Rodinia's grid y.
extern "C" __global__ void bpnn_layerforward(const float *input_cuda,
                                             const float *input_hidden_cuda,
                                             float *hidden_partial_sum, int in, int hid) {
    int by = blockIdx.x;
    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int index = (hid + 1) * HEIGHT * by + (hid + 1) * ty + tx + 1 + (hid + 1);
    int index_in = HEIGHT * by + ty + 1;

    __shared__ float input_node[HEIGHT];
    __shared__ float weight_matrix[HEIGHT][WIDTH];

    if (tx == 0)
        input_node[ty] = input_cuda[index_in];
    __syncthreads();
    weight_matrix[ty][tx] = input_hidden_cuda[index];
    __syncthreads();
    weight_matrix[ty][tx] = weight_matrix[ty][tx] * input_node[ty];
    __syncthreads();

    for (int power_two = 2; power_two <= HEIGHT; power_two *= 2) {
        if (ty % power_two == 0)
            weight_matrix[ty][tx] = weight_matrix[ty][tx] + weight_matrix[ty + power_two / 2][tx];
        __syncthreads();
    }
    if (tx == 0)
        hidden_partial_sum[by * hid + ty] = weight_matrix[tx][ty];
}

// chunk_sum[c * hid + j] = sum of partial[b * hid + j] over the rows b of chunk c:
// grid (num_chunks), block (hid, SUM_ROWS); rows [c * rows_per_chunk, ...) of the partials.
extern "C" __global__ void bpnn_hidden_sum(const float *hidden_partial_sum, float *chunk_sum,
                                           int num_blocks, int rows_per_chunk, int hid) {
    __shared__ float s[SUM_ROWS][WIDTH];
    const int j = threadIdx.x, r = threadIdx.y;
    const int lo = blockIdx.x * rows_per_chunk;
    const int hi = min(lo + rows_per_chunk, num_blocks);
    float sum = 0.0f;
    for (int b = lo + r; b < hi; b += blockDim.y)
        sum += hidden_partial_sum[b * hid + j];
    s[r][j] = sum;
    __syncthreads();
    for (int stride = SUM_ROWS / 2; stride > 0; stride >>= 1) {
        if (r < stride) s[r][j] += s[r + stride][j];
        __syncthreads();
    }
    if (r == 0) chunk_sum[blockIdx.x * hid + j] = s[0][j];
}

// hidden[j] = sigmoid(bias[j] + sum over chunks of chunk_sum[c * hid + j]);
// grid (1), block (hid).
extern "C" __global__ void bpnn_hidden_out(const float *chunk_sum,
                                           const float *input_hidden_cuda,
                                           float *hidden, int num_chunks, int hid) {
    const int j = threadIdx.x;
    float x = input_hidden_cuda[j + 1];               // row 0: bias weights
    for (int c = 0; c < num_chunks; c++)
        x += chunk_sum[c * hid + j];
    hidden[j] = 1.0f / (1.0f + expf(-x));
}
"""

OMP_SRC = r"""
#include <math.h>
#include <stddef.h>

#define MAXHID 64

/* hidden[j] = sigmoid(w[0][j+1] + sum_i input[i] * w[i][j+1]), i = 1..n_in, j < hid;
 * w is (n_in + 1) x (hid + 1), row-major. */
void layerforward(const float *restrict input, const float *restrict w,
                  float *restrict hidden, long n_in, int hid)
{
    const long ld = hid + 1;
    float acc[MAXHID] = {0};
#pragma omp parallel for schedule(static) reduction(+:acc[:hid])
    for (long i = 1; i <= n_in; i++) {
        const float xi = input[i];
        const float *restrict row = w + i * ld + 1;
#pragma omp simd
        for (int j = 0; j < hid; j++)
            acc[j] += xi * row[j];
    }
    for (int j = 0; j < hid; j++)
        hidden[j] = 1.0f / (1.0f + expf(-(acc[j] + w[j + 1])));
}
"""

OPENCL_SRC = r"""
#define HEIGHT 16
#define WIDTH 16
#define SUM_ROWS 16

// Rodinia bpnn_layerforward_ocl: local (WIDTH, HEIGHT), groups along dimension 0:
// global (WIDTH * n_in / HEIGHT, HEIGHT).
__kernel void bpnn_layerforward(__global const float *input_cuda,
                                __global const float *input_hidden_cuda,
                                __global float *hidden_partial_sum, int in, int hid) {
    int by = get_group_id(0);
    int tx = get_local_id(0);
    int ty = get_local_id(1);
    int index = (hid + 1) * HEIGHT * by + (hid + 1) * ty + tx + 1 + (hid + 1);
    int index_in = HEIGHT * by + ty + 1;

    __local float input_node[HEIGHT];
    __local float weight_matrix[HEIGHT][WIDTH];

    if (tx == 0)
        input_node[ty] = input_cuda[index_in];
    barrier(CLK_LOCAL_MEM_FENCE);
    weight_matrix[ty][tx] = input_hidden_cuda[index];
    barrier(CLK_LOCAL_MEM_FENCE);
    weight_matrix[ty][tx] = weight_matrix[ty][tx] * input_node[ty];
    barrier(CLK_LOCAL_MEM_FENCE);

    for (int power_two = 2; power_two <= HEIGHT; power_two *= 2) {
        if (ty % power_two == 0)
            weight_matrix[ty][tx] = weight_matrix[ty][tx] + weight_matrix[ty + power_two / 2][tx];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (tx == 0)
        hidden_partial_sum[by * hid + ty] = weight_matrix[tx][ty];
}

// global (num_chunks * hid, SUM_ROWS), local (hid, SUM_ROWS).
__kernel void bpnn_hidden_sum(__global const float *hidden_partial_sum,
                              __global float *chunk_sum,
                              int num_blocks, int rows_per_chunk, int hid) {
    __local float s[SUM_ROWS][WIDTH];
    const int j = get_local_id(0), r = get_local_id(1);
    const int c = get_group_id(0);
    const int lo = c * rows_per_chunk;
    const int hi = min(lo + rows_per_chunk, num_blocks);
    float sum = 0.0f;
    for (int b = lo + r; b < hi; b += get_local_size(1))
        sum += hidden_partial_sum[b * hid + j];
    s[r][j] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int stride = SUM_ROWS / 2; stride > 0; stride >>= 1) {
        if (r < stride) s[r][j] += s[r + stride][j];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (r == 0) chunk_sum[c * hid + j] = s[0][j];
}

// global (hid), local (hid).
__kernel void bpnn_hidden_out(__global const float *chunk_sum,
                              __global const float *input_hidden_cuda,
                              __global float *hidden, int num_chunks, int hid) {
    const int j = get_local_id(0);
    float x = input_hidden_cuda[j + 1];
    for (int c = 0; c < num_chunks; c++)
        x += chunk_sum[c * hid + j];
    hidden[j] = 1.0f / (1.0f + exp(-x));
}
"""


class Backprop(Workload):
    name = "backprop"
    kind = "bandwidth"
    sizes = {
        "small": {"n_in": 1 << 16, "hid": 16},
        "default": {"n_in": 1 << 20, "hid": 16},
        "large": {"n_in": 1 << 22, "hid": 16},
    }
    cuda_source = CUDA_SRC
    omp_source = OMP_SRC
    opencl_source = OPENCL_SRC
    opencl_reason = ""
    numba_reason = "no Python port"

    HEIGHT = 16
    SUM_ROWS = 16
    CHUNKS = 64        # blocks of bpnn_hidden_sum

    def _chunks(self, nb):
        per = -(-nb // self.CHUNKS)
        return -(-nb // per), per

    def make_inputs(self, p, rng):
        n, hid = p["n_in"], p["hid"]
        assert hid == 16 and n % self.HEIGHT == 0
        x = rng.random(n + 1, dtype=np.float32)
        x[0] = 1.0
        w = rng.uniform(-1.0, 1.0, (n + 1, hid + 1)).astype(np.float32)
        w *= np.float32(1.0 / np.sqrt(n))
        return {"input": x, "weights": w}

    def reference(self, p, inp):
        x = inp["input"][1:].astype(np.float64)
        w = inp["weights"].astype(np.float64)
        s = x @ w[1:, 1:] + w[0, 1:]
        return {"hidden": 1.0 / (1.0 + np.exp(-s))}

    def check(self, p, out, ref):
        h = np.asarray(out["hidden"], dtype=np.float64)
        r = ref["hidden"]
        if h.shape != r.shape:
            return False, f"shape {h.shape} != {r.shape}"
        err = np.abs(h - r)
        bad = ~(err <= 1e-5 + 1e-4 * np.abs(r))
        if bad.any():
            j = int(np.argmax(err))
            return False, f"{int(bad.sum())} hidden units off, worst {j}: {h[j]} vs {r[j]}"
        return True, f"max abs err {float(err.max()):.1e}"

    def run_cpuify(self, p, inp, mod):
        n, hid = p["n_in"], p["hid"]
        nb = n // self.HEIGHT
        chunks, per = self._chunks(nb)
        bufs = inp.setdefault("_cpuify_bufs", {})
        if "hidden" not in bufs:
            bufs["partial"] = np.empty(nb * hid, np.float32)
            bufs["chunk"] = np.empty(chunks * hid, np.float32)
            bufs["hidden"] = np.empty(hid, np.float32)
            bufs["fwd"] = mod.get_function("bpnn_layerforward")
            bufs["sum"] = mod.get_function("bpnn_hidden_sum")
            bufs["out"] = mod.get_function("bpnn_hidden_out")
        partial, chunk, hidden = bufs["partial"], bufs["chunk"], bufs["hidden"]
        bufs["fwd"]((nb, 1), (hid, self.HEIGHT),
                    (inp["input"], inp["weights"], partial, np.int32(n), np.int32(hid)))
        bufs["sum"]((chunks,), (hid, self.SUM_ROWS),
                    (partial, chunk, np.int32(nb), np.int32(per), np.int32(hid)))
        bufs["out"]((1,), (hid,),
                    (chunk, inp["weights"], hidden, np.int32(chunks), np.int32(hid)))
        return {"hidden": hidden}

    def run_omp(self, p, inp, lib):
        n, hid = p["n_in"], p["hid"]
        bufs = inp.setdefault("_omp_bufs", {})
        if "hidden" not in bufs:
            bufs["hidden"] = np.empty(hid, np.float32)
            lib.layerforward.restype = None
            lib.layerforward.argtypes = [_fp, _fp, _fp, ctypes.c_long, ctypes.c_int]
        hidden = bufs["hidden"]
        lib.layerforward(_ptr(inp["input"]), _ptr(inp["weights"]), _ptr(hidden), n, hid)
        return {"hidden": hidden}

    def run_opencl(self, p, inp, cl, ctx, queue, prg):
        n, hid = p["n_in"], p["hid"]
        nb = n // self.HEIGHT
        chunks, per = self._chunks(nb)
        bufs = inp.get("_cl_bufs")
        if bufs is None:
            mf = cl.mem_flags
            bufs = inp["_cl_bufs"] = {
                "input": cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=inp["input"]),
                "weights": cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR,
                                     hostbuf=inp["weights"]),
                "partial": cl.Buffer(ctx, mf.READ_WRITE, size=nb * hid * 4),
                "chunk": cl.Buffer(ctx, mf.READ_WRITE, size=chunks * hid * 4),
                "hidden": cl.Buffer(ctx, mf.WRITE_ONLY, size=hid * 4),
                "h": np.empty(hid, np.float32),
                "fwd": cl.Kernel(prg, "bpnn_layerforward"),
                "sum": cl.Kernel(prg, "bpnn_hidden_sum"),
                "out": cl.Kernel(prg, "bpnn_hidden_out"),
            }
        fwd, sm, out = bufs["fwd"], bufs["sum"], bufs["out"]
        fwd.set_args(bufs["input"], bufs["weights"], bufs["partial"], np.int32(n), np.int32(hid))
        cl.enqueue_nd_range_kernel(queue, fwd, (hid * nb, self.HEIGHT), (hid, self.HEIGHT))
        sm.set_args(bufs["partial"], bufs["chunk"], np.int32(nb), np.int32(per), np.int32(hid))
        cl.enqueue_nd_range_kernel(queue, sm, (chunks * hid, self.SUM_ROWS), (hid, self.SUM_ROWS))
        out.set_args(bufs["chunk"], bufs["weights"], bufs["hidden"], np.int32(chunks),
                     np.int32(hid))
        cl.enqueue_nd_range_kernel(queue, out, (hid,), (hid,))
        cl.enqueue_copy(queue, bufs["h"], bufs["hidden"])
        queue.finish()
        return {"hidden": bufs["h"]}

    def bytes_moved(self, p):
        n, hid = p["n_in"], p["hid"]
        # weights + inputs read once; partial sums written and read back once
        return 4.0 * ((n + 1) * (hid + 1) + (n + 1) + 2 * (n // self.HEIGHT) * hid)

    def flops(self, p):
        return 2.0 * p["n_in"] * p["hid"]


WORKLOAD = Backprop()
