"""Warp semantics real code relies on (issue 18, items 4 and 9).

* Lockstep mode for legacy warp-synchronous code (the `warp-lockstep` pass, a warp-level
  step at each volatile shared access): the classic reductions finished by the last warp
  through `volatile` shared memory (the unrolled `warpReduce` of reduction kernels #4 to #6),
  a warp scan and a block scan built from it, and a per-warp histogram with tagged
  updates; against NumPy, through the compiled code (generic and specialized) and the
  reference interpreter (which runs every volatile shared access as a warp step of its own,
  without the pass).  The opt-in switch (`--warp-lockstep`, CPUIFY_WARP_LOCKSTEP=1) for
  the same code without `volatile`.  IR checks: where the pass inserts steps, and that it
  inserts none in the benchmark suite's kernels.
* SIMD collectives (the `simd-collectives` pass): which collectives are marked, and the
  vector exchange's results against NumPy for shuffles with run-time offsets, votes, and
  partial warps and exits (where it must hand over to the scheduler).
* Partial-mask shuffles: what a lane whose source lane is outside the member mask gets.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cpuify
from cpuify.compiler import lift_and_optimize
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp import interpret_kernel
from cpuify.ir.core import natural_loops
from cpuify.ir.printer import print_op
from cpuify.ir.structure import block_body
from cpuify.transforms.pass_manager import PipelineOptions

ROOT = Path(__file__).resolve().parents[1]

LEGACY = r'''
// the last warp of a tree reduction, unrolled, through volatile shared memory
template <unsigned B>
__device__ void warp_reduce(volatile float *s, unsigned tid) {
    if (B >= 64) s[tid] += s[tid + 32];
    if (B >= 32) s[tid] += s[tid + 16];
    if (B >= 16) s[tid] += s[tid + 8];
    if (B >= 8) s[tid] += s[tid + 4];
    if (B >= 4) s[tid] += s[tid + 2];
    if (B >= 2) s[tid] += s[tid + 1];
}

// reduction #4 shape: first add during load, a loop of tree steps down to 64, the last
// warp unrolled
extern "C" __global__ void reduce4(const float *in, float *out, unsigned n) {
    extern __shared__ float sdata[];
    unsigned tid = threadIdx.x;
    unsigned i = blockIdx.x * (blockDim.x * 2) + tid;
    float v = i < n ? in[i] : 0.0f;
    if (i + blockDim.x < n) v += in[i + blockDim.x];
    sdata[tid] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 32; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid < 32) warp_reduce<64>(sdata, tid);
    if (tid == 0) out[blockIdx.x] = sdata[0];
}

// reduction #5/#6 shape: the block size a template parameter, everything unrolled, and
// (#6) a grid-stride loop adding many elements per thread
template <unsigned B>
__device__ void reduce6_body(const int *in, int *out, unsigned n) {
    __shared__ int sdata[B];
    unsigned tid = threadIdx.x;
    unsigned i = blockIdx.x * (B * 2) + tid;
    unsigned grid = B * 2 * gridDim.x;
    int sum = 0;
    while (i < n) {
        sum += in[i];
        if (i + B < n) sum += in[i + B];
        i += grid;
    }
    sdata[tid] = sum;
    __syncthreads();
    if (B >= 512) { if (tid < 256) sdata[tid] = sum = sum + sdata[tid + 256]; __syncthreads(); }
    if (B >= 256) { if (tid < 128) sdata[tid] = sum = sum + sdata[tid + 128]; __syncthreads(); }
    if (B >= 128) { if (tid < 64) sdata[tid] = sum = sum + sdata[tid + 64]; __syncthreads(); }
    if (tid < 32) {
        volatile int *s = sdata;
        if (B >= 64) s[tid] = sum = sum + s[tid + 32];
        if (B >= 32) s[tid] = sum = sum + s[tid + 16];
        if (B >= 16) s[tid] = sum = sum + s[tid + 8];
        if (B >= 8) s[tid] = sum = sum + s[tid + 4];
        if (B >= 4) s[tid] = sum = sum + s[tid + 2];
        if (B >= 2) s[tid] = sum = sum + s[tid + 1];
    }
    if (tid == 0) out[blockIdx.x] = sdata[0];
}
extern "C" __global__ void reduce6_512(const int *in, int *out, unsigned n) { reduce6_body<512>(in, out, n); }
extern "C" __global__ void reduce6_128(const int *in, int *out, unsigned n) { reduce6_body<128>(in, out, n); }
extern "C" __global__ void reduce6_32(const int *in, int *out, unsigned n) { reduce6_body<32>(in, out, n); }

// inclusive scan of each warp through volatile shared memory, no __syncwarp
__device__ int warp_scan(volatile int *s, unsigned idx) {
    unsigned lane = idx & 31;
    if (lane >= 1) s[idx] = s[idx - 1] + s[idx];
    if (lane >= 2) s[idx] = s[idx - 2] + s[idx];
    if (lane >= 4) s[idx] = s[idx - 4] + s[idx];
    if (lane >= 8) s[idx] = s[idx - 8] + s[idx];
    if (lane >= 16) s[idx] = s[idx - 16] + s[idx];
    return s[idx];
}
extern "C" __global__ void scan_warps(const int *in, int *out) {
    extern __shared__ int sh[];
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    sh[threadIdx.x] = in[i];
    out[i] = warp_scan(sh, threadIdx.x);
}
// inclusive scan of a block: warp scans, the warps' totals scanned by warp 0, added back
extern "C" __global__ void scan_block(const int *in, int *out) {
    __shared__ int sh[1024];
    __shared__ int totals[32];
    unsigned tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    unsigned i = blockIdx.x * blockDim.x + tid;
    sh[tid] = in[i];
    int v = warp_scan(sh, tid);
    __syncthreads();
    if (lane == 31) totals[warp] = v;
    __syncthreads();
    if (warp == 0) warp_scan(totals, tid);
    __syncthreads();
    if (warp > 0) v += totals[warp - 1];
    out[i] = v;
}

// a grid-stride loop over rows with barriers, each row finished by the last warp
extern "C" __global__ void row_sums(const float *a, float *out, int rows, int cols) {
    __shared__ float s[128];
    unsigned tid = threadIdx.x;
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        float v = 0;
        for (int c = tid; c < cols; c += 128) v += a[r * cols + c];
        s[tid] = v;
        __syncthreads();
        if (tid < 64) s[tid] += s[tid + 64];
        __syncthreads();
        if (tid < 32) warp_reduce<64>(s, tid);
        if (tid == 0) out[r] = s[0];
        __syncthreads();
    }
}

// sparse matrix-vector product, CSR, one warp per row: the lanes' partial sums reduced
// through volatile shared memory by halving lane ranges (`if (lane < 16) ...`)
extern "C" __global__ void spmv_csr_warp(const float *val, const int *cols, const int *rows,
                                         const float *x, float *y, int nrows) {
    __shared__ volatile float partial[256];
    int t = threadIdx.x, lane = t & 31;
    int row = (blockIdx.x * blockDim.x + t) / 32;
    if (row < nrows) {
        float sum = 0.0f;
        for (int j = rows[row] + lane; j < rows[row + 1]; j += 32) sum += val[j] * x[cols[j]];
        partial[t] = sum;
        if (lane < 16) partial[t] += partial[t + 16];
        if (lane < 8) partial[t] += partial[t + 8];
        if (lane < 4) partial[t] += partial[t + 4];
        if (lane < 2) partial[t] += partial[t + 2];
        if (lane < 1) partial[t] += partial[t + 1];
        if (lane == 0) y[row] = partial[t];
    }
}

// a histogram per warp in shared memory, each update tagged with the lane that made it
// (the pre-Fermi way without shared atomics: lanes that collide retry until their tag
// stays); the warps' histograms summed at the end
#define BINS 64
__device__ void add_tagged(volatile unsigned *hist, unsigned bin, unsigned tag) {
    unsigned count;
    do {
        count = hist[bin] & 0x07FFFFFFu;
        count = tag | (count + 1);
        hist[bin] = count;
    } while (hist[bin] != count);
}
extern "C" __global__ void histogram_warps(const unsigned *data, unsigned *out, unsigned n) {
    __shared__ unsigned hist[8 * BINS];        // blocks of up to 8 warps
    unsigned tid = threadIdx.x, warp = tid >> 5;
    unsigned tag = (tid & 31) << 27;
    for (unsigned b = tid; b < 8 * BINS; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    for (unsigned k = blockIdx.x * blockDim.x + tid; k < n; k += blockDim.x * gridDim.x)
        add_tagged(hist + warp * BINS, data[k] % BINS, tag);
    __syncthreads();
    for (unsigned b = tid; b < BINS; b += blockDim.x) {
        unsigned sum = 0;
        for (unsigned w = 0; w < blockDim.x / 32; w++) sum += hist[w * BINS + b] & 0x07FFFFFFu;
        atomicAdd(out + b, sum);
    }
}
'''

# the same last-warp reduction without `volatile` (legal only in lockstep): the opt-in mode
NO_VOLATILE = r'''
extern "C" __global__ void reduce_plain(const float *in, float *out) {
    __shared__ float s[64];
    unsigned tid = threadIdx.x;
    s[tid] = in[blockIdx.x * 64 + tid];
    __syncthreads();
    if (tid < 32) {
        float *p = s;
        // the asm barriers keep the compiler from keeping the values in registers; there
        // is no __syncwarp: the lanes' loads and stores interleave only in lockstep
        p[tid] += p[tid + 32]; asm volatile("" ::: "memory");
        p[tid] += p[tid + 16]; asm volatile("" ::: "memory");
        p[tid] += p[tid + 8]; asm volatile("" ::: "memory");
        p[tid] += p[tid + 4]; asm volatile("" ::: "memory");
        p[tid] += p[tid + 2]; asm volatile("" ::: "memory");
        p[tid] += p[tid + 1]; asm volatile("" ::: "memory");
    }
    if (tid == 0) out[blockIdx.x] = s[0];
}
'''


@pytest.fixture(scope="module")
def legacy():
    return cpuify.RawModule(code=LEGACY)


def _twice(mod, name, grid, block, args, out, shared_mem=0):
    """The kernel run twice (generic code, then code specialized for the block shape)."""
    f = mod.get_function(name)
    got = []
    for _ in range(2):
        out[:] = 0
        f(grid, block, args, shared_mem=shared_mem)
        got.append(out.copy())
    return got


@pytest.mark.parametrize("block", [64, 128, 256])
def test_reduce4_last_warp_volatile(legacy, block):
    blocks = 5
    n = blocks * block * 2 - 37
    x = np.random.default_rng(block).integers(0, 9, n).astype(np.float32)
    out = np.zeros(blocks, np.float32)
    padded = np.zeros(blocks * block * 2, np.float32)
    padded[:n] = x
    want = padded.reshape(blocks, -1).sum(axis=1)
    for got in _twice(legacy, "reduce4", (blocks,), (block,), (x, out, np.uint32(n)), out,
                      shared_mem=block * 4):
        np.testing.assert_array_equal(got, want)
    out[:] = 0
    interpret_kernel(legacy.ptx, "reduce4", (blocks,), (block,), [x, out, np.uint32(n)],
                     shared_mem=block * 4)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("block", [512, 128, 32])
def test_reduce6_unrolled_grid_stride(legacy, block):
    blocks = 3
    n = 20000 + block
    x = np.random.default_rng(block).integers(-50, 50, n).astype(np.int32)
    out = np.zeros(blocks, np.int32)
    # which elements each block sums: i = b * 2B + t + k * 2B * blocks, and i + B
    owner = (np.arange(n) // (2 * block)) % blocks
    want = np.array([x[owner == b].sum() for b in range(blocks)], np.int32)
    for got in _twice(legacy, f"reduce6_{block}", (blocks,), (block,), (x, out, np.uint32(n)), out):
        np.testing.assert_array_equal(got, want)
    if block == 128:
        out[:] = 0
        interpret_kernel(legacy.ptx, "reduce6_128", (blocks,), (block,), [x, out, np.uint32(n)])
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("block", [32, 96, 256])
def test_warp_scan_volatile(legacy, block):
    blocks = 4
    x = np.random.default_rng(block).integers(-9, 9, blocks * block).astype(np.int32)
    out = np.zeros_like(x)
    padded = x.reshape(-1, 32)
    want = np.cumsum(padded, axis=1, dtype=np.int32).reshape(-1)
    for got in _twice(legacy, "scan_warps", (blocks,), (block,), (x, out), out,
                      shared_mem=block * 4):
        np.testing.assert_array_equal(got, want)
    out[:] = 0
    interpret_kernel(legacy.ptx, "scan_warps", (blocks,), (block,), [x, out], shared_mem=block * 4)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("block", [64, 1024])
def test_block_scan_from_warp_scans(legacy, block):
    blocks = 3
    x = np.random.default_rng(7).integers(-9, 9, blocks * block).astype(np.int32)
    out = np.zeros_like(x)
    want = np.cumsum(x.reshape(blocks, block), axis=1, dtype=np.int32).reshape(-1)
    for got in _twice(legacy, "scan_block", (blocks,), (block,), (x, out), out):
        np.testing.assert_array_equal(got, want)


def test_last_warp_inside_a_loop_with_barriers(legacy):
    rows, cols = 37, 300
    a = np.random.default_rng(1).integers(-5, 5, (rows, cols)).astype(np.float32)
    out = np.zeros(rows, np.float32)
    args = (a, out, np.int32(rows), np.int32(cols))
    for got in _twice(legacy, "row_sums", (5,), (128,), args, out):
        np.testing.assert_array_equal(got, a.sum(axis=1))
    out[:] = 0
    interpret_kernel(legacy.ptx, "row_sums", (5,), (128,), list(args))
    np.testing.assert_array_equal(out, a.sum(axis=1))


@pytest.mark.parametrize("block", [64, 256])
def test_spmv_csr_one_warp_per_row(legacy, block):
    rng = np.random.default_rng(block)
    nrows, ncols = 300, 200
    lengths = rng.integers(0, 90, nrows)
    rows = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    cols = rng.integers(0, ncols, rows[-1]).astype(np.int32)
    val = rng.integers(-4, 5, rows[-1]).astype(np.float32)     # exact sums in any order
    x = rng.integers(-4, 5, ncols).astype(np.float32)
    want = np.array([(val[rows[r]:rows[r + 1]] * x[cols[rows[r]:rows[r + 1]]]).sum()
                     for r in range(nrows)], np.float32)
    y = np.zeros(nrows, np.float32)
    grid = ((nrows * 32 + block - 1) // block,)
    for got in _twice(legacy, "spmv_csr_warp", grid, (block,),
                      (val, cols, rows, x, y, np.int32(nrows)), y):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("block,skewed", [(32, False), (256, True), (128, True)])
def test_histogram_per_warp_tagged(legacy, block, skewed):
    rng = np.random.default_rng(block)
    n = 50000
    # skewed: most values in a few bins, so that the lanes of a warp collide often
    data = (rng.integers(0, 4, n) if skewed else rng.integers(0, 1 << 20, n)).astype(np.uint32)
    out = np.zeros(64, np.uint32)
    want = np.bincount(data % 64, minlength=64).astype(np.uint32)
    for got in _twice(legacy, "histogram_warps", (6,), (block,), (data, out, np.uint32(n)), out):
        np.testing.assert_array_equal(got, want)


def test_histogram_interpreter():
    data = np.random.default_rng(1).integers(0, 3, 700).astype(np.uint32)
    out = np.zeros(64, np.uint32)
    mod = cpuify.RawModule(code=LEGACY)
    interpret_kernel(mod.ptx, "histogram_warps", (2,), (64,), [data, out, np.uint32(data.size)])
    np.testing.assert_array_equal(out, np.bincount(data % 64, minlength=64))


def test_opt_in_lockstep_for_code_without_volatile():
    x = np.random.default_rng(2).integers(0, 9, 64 * 4).astype(np.float32)
    want = x.reshape(4, 64).sum(axis=1)
    out = np.zeros(4, np.float32)
    on = cpuify.RawModule(code=NO_VOLATILE, options=("--warp-lockstep",))
    assert on._compiled.pass_counts["reduce_plain"]["warp-lockstep"] > 0
    for got in _twice(on, "reduce_plain", (4,), (64,), (x, out), out):
        np.testing.assert_array_equal(got, want)
    # without the switch the detection of plain exchanges finds it (a store of p[tid], then
    # another lane's load of p[tid + 16], ... with no __syncwarp): thread after thread, lane 0
    # would finish every step before the other lanes wrote theirs
    # (tests/test_warp_lockstep_loops.py has the rule's own tests)
    off = cpuify.RawModule(code=NO_VOLATILE)
    assert off._compiled.pass_counts["reduce_plain"]["warp-lockstep"] > 0
    for got in _twice(off, "reduce_plain", (4,), (64,), (x, out), out):
        np.testing.assert_array_equal(got, want)


def test_opt_in_environment_variable_for_whole_programs(tmp_path):
    prog = tmp_path / "lockstep.cu"
    prog.write_text(NO_VOLATILE + r'''
#include <cstdio>
int main() {
    float h[128], r[2], *d_in, *d_out;
    for (int i = 0; i < 128; i++) h[i] = (float)(i % 5);
    cudaMalloc(&d_in, sizeof h); cudaMalloc(&d_out, sizeof r);
    cudaMemcpy(d_in, h, sizeof h, cudaMemcpyHostToDevice);
    reduce_plain<<<2, 64>>>(d_in, d_out);
    cudaMemcpy(r, d_out, sizeof r, cudaMemcpyDeviceToHost);
    printf("%g %g\n", r[0], r[1]);
    return 0;
}
''')
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), CPUIFY_WARP_LOCKSTEP="1")
    run = subprocess.run([sys.executable, "-m", "cpuify.cli.main", "run", str(prog)], check=False,
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr
    h = np.arange(128) % 5
    assert run.stdout.split() == [f"{h[:64].sum():g}", f"{h[64:].sum():g}"]


# --- IR checks --------------------------------------------------------------------------

def _optimized(src: str, kernel: str, options=()):
    module = parse_ptx(compile_to_ptx(src).ptx)
    entry = next(e for e in module.entries if e.name == kernel)
    # (left a CFG: the tests walk the blocks the passes leave, not raise-structured-cf's regions)
    opts, _ = PipelineOptions.parse(["--disable-pass=raise-structured-cf", *options])
    return lift_and_optimize(module, entry, opts)


def _steps(kernel_op) -> list:
    return [op for b in block_body(kernel_op).blocks for op in b.ops
            if op.name == "upir.warp_collective" and op.attributes.get("kind") == "lockstep"]


def test_steps_around_each_volatile_statement():
    lifted, result = _optimized(LEGACY, "reduce4")
    # six statements `s[tid] += s[tid + k]`: a step before the loads, before the store and
    # after it (the next statement's loads share it): 2 * 6 + 1
    assert result.counts["warp-lockstep"] == 13
    steps = _steps(lifted.op)
    assert len(steps) == 13
    text = print_op(lifted.op)
    assert text.count('kind = "lockstep"') == 13
    assert lifted.op.attributes["warp_lockstep"] == 13
    # each step comes right before a volatile access or right after a volatile store
    for st in steps:
        ops = st.parent.ops
        k = ops.index(st)
        near = ops[k + 1:k + 2] + ops[k - 1:k]
        assert any("volatile" in o.attributes.get("mods", ()) for o in near)


def test_no_steps_without_lane_communication():
    src = r'''
    extern "C" __global__ void flag_only(int *out) {     // one address for all threads
        __shared__ volatile int flag;
        if (threadIdx.x == 0) flag = 1;
        __syncthreads();
        out[threadIdx.x] = flag;
    }
    // a scan whose every exchange between threads is behind a __syncthreads(): between
    // barriers each thread touches only its own element (`s[i] += t`)
    extern "C" __global__ void synchronized_scan(const float *in, float *out) {
        __shared__ float sh[512];
        volatile float *s = sh;
        int i = threadIdx.x + 256;
        s[threadIdx.x] = 0.0f;
        s[i] = in[threadIdx.x];
        __syncthreads();
        for (int d = 1; d < 256; d *= 2) {
            float t = s[i - d]; __syncthreads();
            s[i] += t; __syncthreads();
        }
        out[threadIdx.x] = s[i];
    }
    extern "C" __global__ void loads_only(const int *in, int *out) {
        __shared__ int s[64];
        s[threadIdx.x] = in[threadIdx.x];
        __syncthreads();
        volatile int *v = s;
        out[threadIdx.x] = v[63 - threadIdx.x];
    }
    '''
    for k in ("flag_only", "loads_only", "synchronized_scan"):
        lifted, result = _optimized(src, k)
        assert result.counts["warp-lockstep"] == 0 and not _steps(lifted.op), k
    # the opt-in mode steps every shared access, volatile or not
    lifted, result = _optimized(src, "loads_only", ["--warp-lockstep"])
    assert result.counts["warp-lockstep"] >= 2


def test_benchmark_kernels_get_no_steps():
    """The benchmark suite's kernels (none warp-synchronous) keep their sync points."""
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.suite import workloads
        names = sorted(m.name for m in pkgutil.iter_modules(workloads.__path__))
        assert len(names) >= 14
        for name in names:
            w = importlib.import_module(f"benchmarks.suite.workloads.{name}").WORKLOAD
            module = parse_ptx(compile_to_ptx(w.cuda_source).ptx)
            for entry in module.entries:
                lifted, result = lift_and_optimize(module, entry, PipelineOptions())
                assert result.counts["warp-lockstep"] == 0, (name, entry.name)
                assert not _steps(lifted.op), (name, entry.name)
    finally:
        sys.path.remove(str(ROOT))


GLOBAL_WARP = r"""
// a block's segment summed in place in global memory, the last warp finishing it through a
// volatile *global* pointer with no __syncwarp (pre-Volta warp-synchronous code)
extern "C" __global__ void inplace_sum(int *data, int *sums) {
    unsigned t = threadIdx.x;
    int *seg = data + blockIdx.x * blockDim.x;
    for (unsigned half = blockDim.x / 2; half > 32; half /= 2) {
        if (t < half) seg[t] += seg[t + half];
        __syncthreads();
    }
    if (t < 32) {
        volatile int *w = seg;
        w[t] += w[t + 32]; w[t] += w[t + 16]; w[t] += w[t + 8];
        w[t] += w[t + 4];  w[t] += w[t + 2];  w[t] += w[t + 1];
    }
    if (t == 0) sums[blockIdx.x] = seg[0];
}
// a volatile global flag (one address for every thread) and each thread's own element:
// no lane reads what another wrote, no steps
extern "C" __global__ void flag_and_own(volatile int *flag, volatile int *own) {
    if (threadIdx.x == 0) *flag = 1;
    own[threadIdx.x] = own[threadIdx.x] + *flag;
}
"""


@pytest.mark.parametrize("block", [64, 128, 512])
def test_warp_reduction_through_volatile_global_memory(block):
    # (a textbook's reduceUnrollWarps8 shape: it summed wrongly before global volatile
    # accesses were stepped)
    f = cpuify.RawModule(code=GLOBAL_WARP).get_function("inplace_sum")
    blocks = 6
    x = np.random.default_rng(block).integers(-100, 100, blocks * block).astype(np.int32)
    want = x.reshape(blocks, -1).sum(axis=1)
    for _ in range(2):          # generic, then specialized for the block shape
        data, sums = x.copy(), np.zeros(blocks, np.int32)
        f((blocks,), (block,), (data, sums))
        np.testing.assert_array_equal(sums, want)


def test_volatile_global_steps_only_where_lanes_exchange():
    lifted, result = _optimized(GLOBAL_WARP, "inplace_sum")
    assert result.counts["warp-lockstep"] == 13 and len(_steps(lifted.op)) == 13
    lifted, result = _optimized(GLOBAL_WARP, "flag_and_own")
    assert result.counts["warp-lockstep"] == 0 and not _steps(lifted.op)


# --- partial-mask and divergent shuffles: what an H100 returns ----------------------------

SHUFFLES = r'''
extern "C" __global__ void shfl_cases(int *out, int which) {
    int lane = threadIdx.x & 31;
    int v = threadIdx.x * 10 + 100;
    int w = threadIdx.x * 1000 + 7;
    int r = -1;
    switch (which) {
    case 0:   // two halves, each with its own mask, read the other half
        r = lane < 16 ? __shfl_sync(0x0000ffffu, v, lane + 16) : __shfl_sync(0xffff0000u, w, lane - 16);
        break;
    case 1:   // the source lanes exited
        if (lane >= 16) return;
        r = __shfl_sync(0x0000ffffu, v, lane + 16);
        break;
    case 2:   // down 8 among lanes 0..15: 8..15 read exited lanes
        if (lane >= 16) return;
        r = __shfl_down_sync(0x0000ffffu, v, 8);
        break;
    case 3:   // up 4 among lanes 16..31: 16..19 read exited lanes
        if (lane < 16) return;
        r = __shfl_up_sync(0xffff0000u, v, 4);
        break;
    case 4:   // even lanes, xor 1: the odd ones exited
        if (lane & 1) return;
        r = __shfl_xor_sync(0x55555555u, v, 1);
        break;
    case 5:   // even and odd lanes in two ways of a branch, each with its mask, read the other way
        if (lane & 1) r = __shfl_sync(0xaaaaaaaau, w, lane - 1);
        else r = __shfl_sync(0x55555555u, v, lane + 1);
        break;
    case 6:   // width 8 among lanes 0..15
        if (lane >= 16) return;
        r = __shfl_sync(0x0000ffffu, v, 5, 8);
        break;
    case 7:   // width 16, down 4: 12..15 past the segment keep their own value
        if (lane >= 16) return;
        r = __shfl_down_sync(0x0000ffffu, v, 4, 16);
        break;
    case 8:   // lanes 0..7 (mask 0xff) read 8..15: active, but not in the mask
        if (lane < 8) r = __shfl_sync(0x000000ffu, v, lane + 8);
        else r = __shfl_sync(0xffffff00u, w, lane);
        break;
    case 9:   // lanes 0..19, idx 25 (exited)
        if (lane >= 20) return;
        r = __shfl_sync(0x000fffffu, v, 25);
        break;
    case 10:  // a ballot over lanes 0..15
        if (lane >= 16) return;
        r = (int)__ballot_sync(0x0000ffffu, lane & 1);
        break;
    case 11:  // the active mask in two ways of a branch
        if (lane % 3 == 0) r = (int)__activemask(); else r = (int)__activemask() + 1;
        break;
    case 12:  // full mask, lanes 20.. exited: down 8
        if (lane >= 20) return;
        r = __shfl_down_sync(0xffffffffu, v, 8);
        break;
    case 13:  // full mask, lanes 20.. exited: a ballot
        if (lane >= 20) return;
        r = (int)__ballot_sync(0xffffffffu, 1);
        break;
    case 14:  // full mask, lanes 20.. exited: xor 16
        if (lane >= 20) return;
        r = __shfl_xor_sync(0xffffffffu, v, 16);
        break;
    case 15:  // full mask in the two ways of a branch: the lanes meet across them
        if (lane < 16) r = __shfl_sync(0xffffffffu, v, lane + 16);
        else r = __shfl_sync(0xffffffffu, v + 5000, lane - 16);
        break;
    case 16:  // a block of 48 threads (run so): full-mask reduction in the partial warp
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        r = v;
        break;
    case 17:  // a block of 48: idx 20 does not exist in the partial warp
        r = __shfl_sync(0xffffffffu, v, 20);
        break;
    }
    out[threadIdx.x] = r;
}
'''


def _h100(which: int, n: int) -> np.ndarray:
    """out[] of shfl_cases as an H100 (sm_90, CUDA 13) wrote it (-1: the lane exited)."""
    lane = np.arange(n) % 32
    t = np.arange(n)
    v, w = t * 10 + 100, t * 1000 + 7
    x = np.full(n, -1)
    if which in (0, 5):
        x[:] = 0
    elif which == 1:
        x[:16] = 0
    elif which == 2:
        x[:8], x[8:16] = v[8:16], 0
    elif which == 3:
        x[16:20], x[20:] = 0, v[16:28]
    elif which == 4:
        x[::2] = 0
    elif which == 6:
        x[:8], x[8:16] = v[5], v[13]
    elif which == 7:
        x[:12], x[12:16] = v[4:16], v[12:16]
    elif which == 8:
        x[:8], x[8:] = 0, w[8:]
    elif which == 9:
        x[:20] = 0
    elif which == 10:
        x[:16] = 0xAAAA
    elif which == 11:
        x[:] = np.where(lane % 3 == 0, 0x49249249, np.int64(0xB6DB6DB6 + 1) - (1 << 32))
    elif which == 12:
        x[:12], x[12:20] = v[8:20], 0
    elif which == 13:
        x[:20] = 0xFFFFF
    elif which == 14:
        x[:4], x[4:16], x[16:20] = v[16:20], 0, v[0:4]
    elif which == 15:
        x[:16], x[16:] = v[16:] + 5000, v[:16]
    elif which == 16:
        x = v.copy()
        for o in (16, 8, 4, 2, 1):
            src = np.where(lane + o < 32, t + o, t)
            got = np.where(src < n, x[np.minimum(src, n - 1)], 0)
            x = x + got
    elif which == 17:
        x[:32], x[32:] = v[20], 0
    return x.astype(np.int32)


H100_CASES = [(k, 32) for k in range(16)] + [(16, 48), (17, 48)]


@pytest.mark.parametrize("which,n", H100_CASES)
def test_shuffles_as_on_the_h100(which, n):
    mod = cpuify.RawModule(code=SHUFFLES)
    out = np.full(64, -1, np.int32)
    want = _h100(which, n)
    f = mod.get_function("shfl_cases")
    for _ in range(2):      # generic code, then code specialized for the block
        out[:] = -1
        f((1,), (n,), (out, np.int32(which)))
        np.testing.assert_array_equal(out[:n], want)
    out[:] = -1
    interpret_kernel(mod.ptx, "shfl_cases", (1,), (n,), [out, np.int32(which)])
    np.testing.assert_array_equal(out[:n], want)


# --- SIMD collectives -----------------------------------------------------------------------

COLLECTIVES = r'''
#define FULL 0xffffffffu
extern "C" __global__ void loop_down(const float *x, float *out, int rounds) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[i];
    for (int r = 0; r < rounds; r++) {
        #pragma unroll 1
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL, v, o);
    }
    out[i] = v;
}
extern "C" __global__ void loop_up(const int *x, int *out) {       // warp scan
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31, v = x[i];
    #pragma unroll 1
    for (int o = 1; o < 32; o <<= 1) { int u = __shfl_up_sync(FULL, v, o); if (lane >= o) v += u; }
    out[i] = v;
}
extern "C" __global__ void xor_by(const int *x, int *out, int m) {  // a run-time lane mask
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = __shfl_xor_sync(FULL, x[i], m) * 1000 + __shfl_sync(FULL, x[i], m & 31);
}
extern "C" __global__ void width_down(const int *x, int *out, int d) {  // width 8, run-time d
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = __shfl_down_sync(FULL, x[i], d, 8);
}
extern "C" __global__ void votes(const int *x, unsigned *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned b = __ballot_sync(FULL, x[i] > 0);
    int a = __all_sync(FULL, x[i] > -40);
    int y = __any_sync(FULL, x[i] > 45);
    int u = __uni_sync(FULL, x[i] > -45);
    out[i] = b ^ (a << 1) ^ (y << 2) ^ (u << 3);
}
// exits before the collectives: the vector exchange hands over to the scalar one
extern "C" __global__ void votes_after_exit(const int *x, unsigned *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = __ballot_sync(__activemask(), x[i] > 0) ^ __shfl_down_sync(FULL, x[i], 1);
}
// a mask that is not the full warp, an offset that differs between threads: not marked
extern "C" __global__ void not_simd(const int *x, int *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = __shfl_down_sync(0x0000ffffu, x[i], 1);
    out[i] = v + __shfl_sync(FULL, x[i], threadIdx.x ^ 3);
}
'''

REDUX = r'''
extern "C" __global__ void redux(const int *x, int *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned u = (unsigned)x[i];
    out[4 * i] = __reduce_add_sync(0xffffffffu, x[i]);
    out[4 * i + 1] = __reduce_min_sync(0xffffffffu, x[i]);
    out[4 * i + 2] = (int)__reduce_max_sync(0xffffffffu, u);
    out[4 * i + 3] = (int)(__reduce_xor_sync(0xffffffffu, u) ^ __reduce_or_sync(0xffffffffu, u & 7u));
}
'''


@pytest.fixture(scope="module", params=["simd", "scalar"])
def collectives(request):
    opts = () if request.param == "simd" else ("--disable-pass=simd-collectives",)
    return request.param, cpuify.RawModule(code=COLLECTIVES, options=opts)


def _warps(a):
    return a.reshape(-1, 32)


def test_simd_marks(collectives):
    kind, mod = collectives
    counts = mod._compiled.pass_counts
    if kind == "scalar":
        assert all("simd-collectives" not in c for c in counts.values())
        return
    assert counts["loop_down"]["simd-collectives"] == 1
    assert counts["loop_up"]["simd-collectives"] == 1
    assert counts["xor_by"]["simd-collectives"] == 2
    assert counts["votes"]["simd-collectives"] == 4
    # the ballot's mask is __activemask(): not known to be the full warp
    assert counts["votes_after_exit"]["simd-collectives"] == 1
    assert counts["not_simd"]["simd-collectives"] == 0


@pytest.mark.parametrize("block", [64, 256])
def test_simd_shuffle_loops(collectives, block):
    _, mod = collectives
    rng = np.random.default_rng(block)
    x = rng.integers(-9, 9, 4 * block).astype(np.float32)
    out = np.zeros_like(x)
    want = x.copy()
    for _ in range(2):
        for o in (16, 8, 4, 2, 1):
            w = _warps(want)
            moved = w.copy()
            moved[:, :32 - o] = w[:, o:]
            want = (w + moved).reshape(-1)
    for got in _twice(mod, "loop_down", (4,), (block,), (x, out, np.int32(2)), out):
        np.testing.assert_array_equal(got, want)
    xi = rng.integers(-9, 9, 4 * block).astype(np.int32)
    oi = np.zeros_like(xi)
    for got in _twice(mod, "loop_up", (4,), (block,), (xi, oi), oi):
        np.testing.assert_array_equal(got, np.cumsum(_warps(xi), axis=1).reshape(-1))


@pytest.mark.parametrize("m", [0, 1, 6, 17, 31])
def test_simd_xor_and_idx_with_runtime_lane(collectives, m):
    _, mod = collectives
    x = np.random.default_rng(m).integers(-99, 99, 128).astype(np.int32)
    out = np.zeros_like(x)
    lane = np.arange(32)
    w = _warps(x)
    want = (w[:, lane ^ m] * 1000 + w[:, [m] * 32]).reshape(-1)
    for got in _twice(mod, "xor_by", (2,), (64,), (x, out, np.int32(m)), out):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("d", [0, 3, 7])
def test_simd_down_with_width(collectives, d):
    _, mod = collectives
    x = np.random.default_rng(d).integers(-99, 99, 128).astype(np.int32)
    out = np.zeros_like(x)
    seg = x.reshape(-1, 8)
    want = seg.copy()
    want[:, :8 - d] = seg[:, d:]
    for got in _twice(mod, "width_down", (2,), (64,), (x, out, np.int32(d)), out):
        np.testing.assert_array_equal(got, want.reshape(-1))


def test_simd_votes(collectives):
    _, mod = collectives
    x = np.random.default_rng(5).integers(-50, 50, 512).astype(np.int32)
    x[32:64] = 7            # a warp where all, any and uniform differ from the others
    out = np.zeros(x.size, np.uint32)
    w = _warps(x)
    ballot = ((w > 0) * (1 << np.arange(32, dtype=np.uint64))).sum(axis=1).astype(np.uint32)
    a = (w > -40).all(axis=1).astype(np.uint32)
    y = (w > 45).any(axis=1).astype(np.uint32)
    u = ((w > -45).all(axis=1) | ~(w > -45).any(axis=1)).astype(np.uint32)
    want = np.repeat(ballot ^ (a << 1) ^ (y << 2) ^ (u << 3), 32)
    for got in _twice(mod, "votes", (2,), (256,), (x, out), out):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [256, 200, 37])
def test_simd_hands_over_after_exits(collectives, n):
    _, mod = collectives
    x = np.random.default_rng(n).integers(-50, 50, 256).astype(np.int32)
    out = np.zeros(256, np.uint32)
    live = np.arange(256) < n
    w, lv = _warps(x), _warps(live)
    ballot = (((w > 0) & lv) * (1 << np.arange(32, dtype=np.uint64))).sum(axis=1).astype(np.uint32)
    moved = np.zeros_like(w)         # down 1: lane 31 its own value, an exited source 0
    moved[:, :31] = np.where(lv[:, 1:], w[:, 1:], 0)
    moved[:, 31] = w[:, 31]
    want = np.where(live, np.repeat(ballot, 32) ^ moved.reshape(-1).astype(np.uint32), 0)
    for got in _twice(mod, "votes_after_exit", (1,), (256,), (x, out, np.int32(n)), out):
        np.testing.assert_array_equal(got, want)


def test_simd_redux():
    x = np.random.default_rng(9).integers(-1000, 1000, 256).astype(np.int32)
    w = _warps(x)
    u = w.view(np.uint32)
    xor = np.bitwise_xor.reduce(u, axis=1) ^ np.bitwise_or.reduce(u & 7, axis=1)
    want = np.stack([w.sum(axis=1), w.min(axis=1), u.max(axis=1).view(np.int32),
                     xor.view(np.int32)], axis=1)
    want = np.repeat(want, 32, axis=0).reshape(-1)
    for opts in ((), ("--disable-pass=simd-collectives",)):
        mod = cpuify.RawModule(code=REDUX, options=("-arch=sm_80",) + opts)
        assert mod._compiled.pass_counts["redux"].get("simd-collectives", 0) == (5 if not opts else 0)
        out = np.zeros(4 * x.size, np.int32)
        for got in _twice(mod, "redux", (2,), (128,), (x, out), out):
            np.testing.assert_array_equal(got, want)


def test_printed_ir_round_trip_and_rerun():
    """The steps and the `simd` marks are plain IR: printed, parsed back, verified, and the
    passes run again on the parsed IR change nothing."""
    from cpuify.ir.parser import parse_op
    from cpuify.ir.verifier import verify
    from cpuify.transforms.pass_manager import run_pipeline
    lifted, _ = _optimized(LEGACY, "reduce4")
    text = print_op(lifted.op)
    again = parse_op(text)
    verify(again)
    assert print_op(again) == text
    result = run_pipeline(again, PipelineOptions(passes=("warp-lockstep", "simd-collectives")))
    assert result.counts == {"warp-lockstep": 0, "simd-collectives": 0}
    lifted, result = _optimized(COLLECTIVES, "votes")
    text = print_op(lifted.op)
    assert text.count("simd = true") == result.counts["simd-collectives"] == 4
    verify(parse_op(text))


# --- a slot handed over with no barrier (persistent task-queue kernels) ------------------
# Seen in Chai's TQ and TQH (CUDA-D/CUDA-U): thread 0 publishes the block's task in shared
# memory, every thread works on it, and thread 0 fetches the next task right after its own
# work, with no __syncthreads() between the other threads' reads of the task and its write.
# A race in CUDA terms that GPUs resolve as the program expects; one thread after another,
# thread 0 would publish the next task before thread 1 had read the current one.

TASK_QUEUE = r'''
struct Job { int id; int kind; };

extern "C" __global__ void drain_queue(const Job *jobs, int njobs, int *taken, int *out,
                                       int reps) {
    __shared__ int slot;
    __shared__ Job job;
    if (threadIdx.x == 0) { slot = atomicAdd(taken, 1); if (slot < njobs) job = jobs[slot]; }
    __syncthreads();
    while (slot < njobs) {
        if (job.kind == 1) {
            for (int r = 0; r < reps; r++) out[job.id * blockDim.x + threadIdx.x] += 3;
            out[job.id * blockDim.x + threadIdx.x] += job.id;
        }
        if (job.kind == 0) out[job.id * blockDim.x + threadIdx.x] += job.id + 1000;
        if (threadIdx.x == 0) {
            slot = atomicAdd(taken, 1);
            if (slot < njobs) job = jobs[slot];
        }
        __syncthreads();
    }
}

// Chai TRNS's shape: the threads branch on the slot, and thread 0 overwrites it in the branch
// before that branch's barrier; read one thread after another, the other threads would
// take the other branch and wait at another barrier
extern "C" __global__ void skip_some(const int *skip, int njobs, int *taken, int *out) {
    __shared__ int cur;
    if (threadIdx.x == 0) cur = atomicAdd(taken, 1);
    __syncthreads();
    while (cur < njobs) {
        if (skip[cur]) {
            if (threadIdx.x == 0) cur = atomicAdd(taken, 1);
            __syncthreads();
            continue;
        }
        out[cur * blockDim.x + threadIdx.x] = cur + threadIdx.x;
        if (threadIdx.x == 0) cur = atomicAdd(taken, 1);
        __syncthreads();
    }
}

// the writer is the only reader: thread 0 updates a slot no other thread reads here
extern "C" __global__ void owner_only(const int *in, int *out) {
    __shared__ int s[2];
    if (threadIdx.x < 2) s[threadIdx.x] = in[threadIdx.x];
    __syncthreads();
    if (threadIdx.x == 0) s[0] += s[1];
    __syncthreads();
    out[threadIdx.x] = s[0];
}

// the hand-over done right: a barrier between the reads and the write
extern "C" __global__ void synchronized_queue(const int *jobs, int njobs, int *taken, int *out) {
    __shared__ int slot;
    if (threadIdx.x == 0) slot = atomicAdd(taken, 1);
    __syncthreads();
    while (slot < njobs) {
        out[jobs[slot] * blockDim.x + threadIdx.x] += slot;
        __syncthreads();
        if (threadIdx.x == 0) slot = atomicAdd(taken, 1);
        __syncthreads();
    }
}
'''


def _jobs(n: int) -> np.ndarray:
    jobs = np.zeros((n, 2), np.int32)
    jobs[:, 0] = (np.arange(n) * 7) % n           # a permutation of the job ids
    jobs[:, 1] = np.arange(n) % 3 == 0
    return jobs


@pytest.mark.parametrize("block", [1, 32, 64, 256])
def test_task_queue_slot_handed_over_without_barrier(block):
    n, reps = 150, 5
    jobs = _jobs(n)
    per_job = np.where(jobs[:, 1] == 1, 3 * reps + jobs[:, 0], jobs[:, 0] + 1000)
    want = np.zeros((n, block), np.int32)
    want[jobs[:, 0]] = per_job[:, None]
    f = cpuify.RawModule(code=TASK_QUEUE).get_function("drain_queue")
    for _ in range(2):              # generic code, then code specialized for the block shape
        taken = np.zeros(1, np.int32)
        out = np.zeros((n, block), np.int32)
        f((4,), (block,), (jobs, np.int32(n), taken, out, np.int32(reps)))
        np.testing.assert_array_equal(out, want)
        assert taken[0] == n + 4    # every block's last fetch finds the queue empty


def test_slot_hand_over_steps():
    lifted, result = _optimized(TASK_QUEUE, "drain_queue")
    steps = _steps(lifted.op)
    assert result.counts["warp-lockstep"] == len(steps) > 0
    # the steps are at the shared accesses of the slot and the job, and at the end of the
    # loop's latch (the lanes finish a pass together: tests/test_warp_lockstep_loops.py)
    latches = {b for _, ls in natural_loops(block_body(lifted.op)).values() for b in ls}
    for st in steps:
        ops = st.parent.ops
        k = ops.index(st)
        near = ops[k + 1:k + 2] + ops[k - 1:k]
        assert any(o.name in ("ptx.ld", "ptx.st") and "shared" in o.attributes.get("mods", ())
                   for o in near) or (st.parent in latches and k == len(ops) - 2), \
            print_op(lifted.op)
    for k in ("owner_only", "synchronized_queue"):
        lifted, result = _optimized(TASK_QUEUE, k)
        assert result.counts["warp-lockstep"] == 0 and not _steps(lifted.op), k


def test_synchronized_queue_still_right():
    n, block = 90, 64
    jobs = ((np.arange(n) * 11) % n).astype(np.int32)
    want = np.zeros((n, block), np.int32)
    want[jobs] = np.arange(n, dtype=np.int32)[:, None]
    taken = np.zeros(1, np.int32)
    out = np.zeros((n, block), np.int32)
    cpuify.RawModule(code=TASK_QUEUE).get_function("synchronized_queue")(
        (3,), (block,), (jobs, np.int32(n), taken, out))
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("block", [32, 128])
def test_branch_on_a_slot_handed_over(block):
    n = 120
    skip = (np.arange(n) % 4 == 1).astype(np.int32)
    want = np.zeros((n, block), np.int32)
    keep = skip == 0
    want[keep] = np.arange(n)[keep][:, None] + np.arange(block)[None, :]
    f = cpuify.RawModule(code=TASK_QUEUE).get_function("skip_some")
    for _ in range(2):
        taken = np.zeros(1, np.int32)
        out = np.zeros((n, block), np.int32)
        f((3,), (block,), (skip, np.int32(n), taken, out))
        np.testing.assert_array_equal(out, want)
