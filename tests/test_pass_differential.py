"""Issue #15's differential test of the pass pipeline: every kernel below runs

  * in the reference interpreter on the IR as lifted (the reference result),
  * in the interpreter on the printed IR after each pass of the default pipeline
    (`--print-ir-after=all`, parsed back), for the generic code, the code specialized for
    the launch's block shape and, where barrier-elimination names candidates, the variant for
    non-overlapping pointer arguments,
  * in the interpreter on the final IR with each pass left out,
  * natively with all passes, and natively with each pass left out (`--disable-pass=`),
    each launched three times (the generic code, the code for the block shape, the
    non-overlapping-pointer variant where there is one),

and every result equals the reference bit for bit (integers and floats alike: no pass
reassociates floating-point arithmetic; integer atomics only, whose sums do not depend on
the order).

Identical IR is run once: a printed IR equal to one already run (a pass that changed
nothing) gives the same results, and a pass that leaves the IR as it found it in the full
pipeline is the same pipeline when left out, so only the passes that changed something are
left out in turn (`_variants`); the native code of a pipeline whose IR (all variants) equals
the full pipeline's is the same code.  test_every_pass_is_exercised checks that each pass of
the default pipeline changes at least one of these kernels.

Kernels: reductions (a shared-memory tree, a grid-stride sum then a tree, warp shuffles
with an atomic per warp, a legacy warp-synchronous volatile reduction), stencils with shared
tiles and barriers (1-D with a halo, 2-D Jacobi with clamped halo reads, a transpose),
grid-stride loops interchanged (alone, re-rolled from nvcc's unrolled form, inside a time loop
with barriers, cooperative groups' 64-bit form), block-uniform loops (with barriers, carrying
a float: interchanged), warp collectives (shuffles, votes, `__syncthreads_count`), atomics
(a shared-memory histogram), and one kernel per pattern of the other passes (launch-invariant
and block-invariant loops, compare-exchanges, flags set in ifs, staging ifs before
barriers, duplicate threads, a running fmaxf under -ftz, a spin-wait on a flag, a row per
thread with a max loop kept in each thread and a sum loop interchanged, a row loop with
barriers streaming its own rows)."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

import cpuify
from cpuify.errors import LaunchError
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp.machine import InterpModule
from cpuify.ir.parser import parse_op
from cpuify.ir.printer import print_op
from cpuify.ir.structure import block_body
from cpuify.lifting import lift_kernel
from cpuify.transforms.pass_manager import (
    PipelineOptions,
    default_pipeline,
    run_pipeline,
)

# (each kernel is compiled to PTX on its own, so that a native compile builds only it)
SOURCES = {
    # parallel-licm: every thread calls the same launch-invariant loop
    "normalize": r'''
__device__ float total(const float *d, int n) { float t = 0; for (int i = 0; i < n; i++) t += d[i]; return t; }
extern "C" __global__ void normalize(float *out, const float *in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float s = total(in, n);
    if (i < n) out[i] = in[i] / s;
}''',
    # selects-to-min-max: nvcc's max(i - 3, 0) as a select when the compare is reused (PTX)
    "clamp_select": r'''
.version 8.0
.target sm_75
.address_size 64
.visible .entry clamp_select(.param .u64 in_p, .param .u64 out_p, .param .u32 n) {
    .reg .pred %p<4>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<10>;
    ld.param.u64 %rd1, [in_p];
    ld.param.u64 %rd2, [out_p];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    add.s32 %r6, %r5, -3;
    setp.gt.s32 %p1, %r6, 0;
    selp.b32 %r7, %r6, 0, %p1;
    add.s32 %r8, %r1, -1;
    setp.lt.s32 %p2, %r7, %r8;
    selp.b32 %r9, %r7, %r8, %p2;
    cvta.to.global.u64 %rd3, %rd1;
    mul.wide.s32 %rd4, %r9, 4;
    add.s64 %rd5, %rd3, %rd4;
    ld.global.u32 %r10, [%rd5];
    selp.u32 %r11, 1, 0, %p1;
    add.s32 %r12, %r10, %r11;
    cvta.to.global.u64 %rd6, %rd2;
    mul.wide.s32 %rd7, %r5, 4;
    add.s64 %rd8, %rd6, %rd7;
    st.global.u32 [%rd8], %r12;
    ret;
}''',
    # if-convert-swaps: a bitonic sort's compare-exchange between barriers
    "swaps": r'''
extern "C" __global__ void swaps(int *data) {
    __shared__ int s[32];
    int t = threadIdx.x;
    s[t] = data[blockIdx.x * 32 + t];
    __syncthreads();
    for (int k = 2; k <= 32; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            int p = t ^ j;
            if (p > t) {
                int a = s[t], b = s[p];
                if ((a > b) == ((t & k) == 0)) { s[t] = b; s[p] = a; }
            }
            __syncthreads();
        }
    data[blockIdx.x * 32 + t] = s[t];
}''',
    # select-if-phis: a flag set in an if, read after a barrier
    "flags": r'''
extern "C" __global__ void flags(const int *x, int *out, int lo, int hi) {
    __shared__ int s[64];
    int t = threadIdx.x;
    bool done = false;
    int v = 7;
    if (t >= lo && t <= hi) { s[t] = x[t] * 2; done = true; v = x[t]; }
    __syncthreads();
    out[t] = done ? s[t] + v : -1;
}''',
    # reroll-loops, then interchange-thread-strided-loops: the stride computed before the loop
    "grid_stride": r'''
extern "C" __global__ void grid_stride(const float *a, float *b, int n) {
    int step = blockDim.x * gridDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) b[i] = 2.0f * a[i] + 1.0f;
}''',
    # interchange-uniform-loops: n-body's tile loop (barriers around a uniform inner loop)
    "uniform_loop": r'''
extern "C" __global__ void uniform_loop(const float4 *pos, float *acc, int n) {
    __shared__ float4 tile[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float4 me = pos[i];
    float a = 0.0f;
    for (int base = 0; base < n; base += 32) {
        tile[threadIdx.x] = pos[base + threadIdx.x];
        __syncthreads();
        for (int k = 0; k < 32; k++) {
            float dx = tile[k].x - me.x, dy = tile[k].y - me.y, dz = tile[k].z - me.z;
            float r2 = dx * dx + dy * dy + dz * dz + 0.01f;
            a += tile[k].w * dx / (r2 * sqrtf(r2)) + dy * 0.5f - dz * 0.25f;
        }
        __syncthreads();
    }
    acc[i] = a;
}''',
    # barrier-elimination: barriers between same-thread accesses
    "two_phases": r'''
extern "C" __global__ void two_phases(const float *__restrict__ x, const float *y, float *out) {
    __shared__ float s1[64], s2[64], s3[64];
    int t = threadIdx.x;
    s1[t] = x[t];
    __syncthreads();
    s2[t] = y[t] * 2.0f;
    __syncthreads();
    s3[t] = s1[63 - t] + s2[63 - t];
    __syncthreads();
    out[t] = s3[t] * 0.5f;
}''',
    # store-forwarding: a same-thread round trip through shared memory across a barrier
    "round_trip": r'''
extern "C" __global__ void round_trip(const float *x, float *out) {
    __shared__ float s[64];
    int t = threadIdx.x;
    s[t] = x[blockIdx.x * 64 + t];
    __syncthreads();
    s[t] = s[t] * 2.0f;
    __syncthreads();
    out[blockIdx.x * 64 + t] = s[63 - t];
}''',
    # parallel-licm, block level: a block-invariant row sum
    "row_normalize": r'''
extern "C" __global__ void row_normalize(const float *x, float *y, int cols) {
    const float *row = x + (size_t)blockIdx.x * cols;
    float s = 0.0f;
    for (int j = 0; j < cols; j++) s += row[j];
    for (int j = threadIdx.x; j < cols; j += blockDim.x) y[(size_t)blockIdx.x * cols + j] = row[j] / s;
}''',
    # barrier-motion: a staging `if (tx == 0)` before a barrier (the paper's Fig. 9)
    "staged": r'''
extern "C" __global__ void staged(const float *x, const float *w, float *out) {
    __shared__ float node[8], tile[8][8];
    int tx = threadIdx.x, ty = threadIdx.y, row = blockIdx.x * 8 + ty;
    if (tx == 0) node[ty] = x[row];
    __syncthreads();
    tile[ty][tx] = w[row * 8 + tx];
    __syncthreads();
    out[row * 8 + tx] = tile[ty][7 - tx] * node[ty];
}''',
    # a shared-memory tree reduction
    "tree_sum": r'''
extern "C" __global__ void tree_sum(const float *x, float *out) {
    __shared__ float s[64];
    int t = threadIdx.x;
    s[t] = x[blockIdx.x * 64 + t];
    __syncthreads();
    for (int k = 32; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}''',
    # a grid-stride sum (interchanged; threads leave it at different iterations and stop
    # after it: its exit does work), then a shared-memory tree
    "gs_tree": r'''
extern "C" __global__ void gs_tree(const float *x, float *out, int n) {
    __shared__ float s[64];
    float acc = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        acc += x[i] * 0.5f;
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}''',
    # a grid-stride sum, a warp-shuffle reduction, an atomic per warp (simd-collectives)
    "gs_shuffle": r'''
extern "C" __global__ void gs_shuffle(const int *x, int *out, int n) {
    int acc = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        acc += x[i] * (i & 7);
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, acc);
}''',
    # xor shuffles of floats and votes, one result per warp
    "warp_max": r'''
extern "C" __global__ void warp_max(const float *x, float *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[i];
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    unsigned b = __ballot_sync(0xffffffffu, x[i] > 0.5f);
    int all = __all_sync(0xffffffffu, x[i] >= 0.0f);
    if ((threadIdx.x & 31) == 0) out[i >> 5] = v + __popc(b) + 100.0f * all;
}''',
    # warp-lockstep: a legacy warp-synchronous reduction through volatile shared memory
    "legacy_reduce": r'''
extern "C" __global__ void legacy_reduce(const int *x, int *out) {
    __shared__ int s[64];
    unsigned t = threadIdx.x;
    s[t] = x[blockIdx.x * 64 + t];
    __syncthreads();
    if (t < 32) {
        volatile int *v = s;
        v[t] += v[t + 32]; v[t] += v[t + 16]; v[t] += v[t + 8];
        v[t] += v[t + 4]; v[t] += v[t + 2]; v[t] += v[t + 1];
    }
    if (t == 0) out[blockIdx.x] = s[0];
}''',
    # a 1-D stencil with a halo in a shared tile
    "stencil1d": r'''
extern "C" __global__ void stencil1d(const float *in, float *out, int n) {
    __shared__ float tile[64 + 6];
    int g = blockIdx.x * blockDim.x + threadIdx.x, l = threadIdx.x + 3;
    tile[l] = g < n ? in[g] : 0.0f;
    if (threadIdx.x < 3) {
        tile[l - 3] = g >= 3 && g - 3 < n ? in[g - 3] : 0.0f;
        tile[l + blockDim.x] = g + blockDim.x < n ? in[g + blockDim.x] : 0.0f;
    }
    __syncthreads();
    if (g < n) {
        float r = 0.0f;
        for (int k = -3; k <= 3; k++) r += tile[l + k] * (float)(k + 4);
        out[g] = r;
    }
}''',
    # a 2-D Jacobi step on an 8x8 shared tile, halo read with clamped coordinates
    "jacobi2d": r'''
extern "C" __global__ void jacobi2d(const float *a, float *b, int w, int h) {
    __shared__ float t[10][10];
    int tx = threadIdx.x, ty = threadIdx.y;
    int x = blockIdx.x * 8 + tx, y = blockIdx.y * 8 + ty;
    for (int k = ty * 8 + tx; k < 100; k += 64) {
        int gx = min(max((int)blockIdx.x * 8 + k % 10 - 1, 0), w - 1);
        int gy = min(max((int)blockIdx.y * 8 + k / 10 - 1, 0), h - 1);
        t[k / 10][k % 10] = a[gy * w + gx];
    }
    __syncthreads();
    if (x < w && y < h)
        b[y * w + x] = 0.2f * (t[ty + 1][tx + 1] + t[ty][tx + 1] + t[ty + 2][tx + 1] +
                               t[ty + 1][tx] + t[ty + 1][tx + 2]);
}''',
    # a tiled transpose through shared memory
    "transpose": r'''
extern "C" __global__ void transpose(const int *a, int *b, int n) {
    __shared__ int t[8][9];
    int x = blockIdx.x * 8 + threadIdx.x, y = blockIdx.y * 8 + threadIdx.y;
    if (x < n && y < n) t[threadIdx.y][threadIdx.x] = a[y * n + x];
    __syncthreads();
    x = blockIdx.y * 8 + threadIdx.x; y = blockIdx.x * 8 + threadIdx.y;
    if (x < n && y < n) b[y * n + x] = t[threadIdx.x][threadIdx.y];
}''',
    # shared-memory atomics in a grid-stride loop; bins zeroed and flushed by strided loops
    "histogram": r'''
extern "C" __global__ void histogram(const unsigned char *d, unsigned *hist, int n) {
    __shared__ unsigned bins[16];
    for (int b = threadIdx.x; b < 16; b += blockDim.x) bins[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&bins[d[i] & 15], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < 16; b += blockDim.x) atomicAdd(&hist[b], bins[b]);
}''',
    # a block-uniform time loop with barriers, then __syncthreads_count
    "time_steps": r'''
extern "C" __global__ void time_steps(float *u, int *count, int steps) {
    __shared__ float s[2][64];
    int t = threadIdx.x;
    s[0][t] = u[blockIdx.x * 64 + t];
    __syncthreads();
    for (int k = 0; k < steps; k++) {
        int c = k & 1;
        float l = s[c][(t + 63) & 63], r = s[c][(t + 1) & 63];
        s[c ^ 1][t] = 0.5f * s[c][t] + 0.25f * (l + r);
        __syncthreads();
    }
    float v = s[steps & 1][t];
    int above = __syncthreads_count(v > 0.5f);
    u[blockIdx.x * 64 + t] = v;
    if (t == 0) count[blockIdx.x] = above;
}''',
    # a grid-stride loop in each step of a time loop with a barrier between steps
    "gs_in_steps": r'''
extern "C" __global__ void gs_in_steps(float *u, int n, int steps) {
    for (int k = 0; k < steps; k++) {
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
            u[i] = u[i] * 0.75f + (float)k;
        __syncthreads();
    }
}''',
    # merge-duplicate-threads: a 1-D kernel launched with 2-D blocks
    "dup_axpy": r'''
extern "C" __global__ void dup_axpy(const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 3.0f * x[i] + 1.0f;
}''',
    # narrow-induction-variables: cooperative groups' grid-stride loop (64-bit rank, size)
    "cg_stride": r'''
#include <cooperative_groups.h>
extern "C" __global__ void cg_stride(const int *x, int *y, int n) {
    cooperative_groups::grid_group g = cooperative_groups::this_grid();
    for (int i = g.thread_rank(); i < n; i += g.size()) y[i] = x[i] * 3 + 1;
}''',
    # flush-min-max-at-uses: a running fmaxf read only by .ftz arithmetic (-ftz=true)
    "row_max": r'''
extern "C" __global__ void row_max(const float *x, float *out, int cols) {
    float m = -3.0e38f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, x[blockIdx.x * cols + j] * 2.0f);
    out[blockIdx.x * blockDim.x + threadIdx.x] = m * 0.5f;
}''',
    # interchange-uniform-loops' loop order from the access analysis: a row per thread, a
    # running max only (kept in each thread), then an in-order sum (interchanged)
    "rows_per_thread": r'''
extern "C" __global__ void rows_per_thread(const float *__restrict__ x, const float *__restrict__ w,
                                           float *__restrict__ out, int rows, int cols) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float *in = x + (size_t)row * cols;
    float m = -3.0e38f;
    for (int c = 0; c < cols; c++) { const float v = in[c]; m = fmaxf(m, fabsf(v) * w[c] + v * v); }
    float t = 0.0f;
    for (int c = 0; c < cols; c++) { const float v = in[c] - m; t += v * w[c] + v * v * 0.5f; }
    out[row] = t * m;
}''',
    # split-in-order-sums: a row per thread whose in-order sum adds the values it stores
    # (the naive row softmax's shape): the terms read back in an interchanged loop
    "row_stored_sum": r'''
extern "C" __global__ void row_stored_sum(const float *__restrict__ x, float *__restrict__ y,
                                          float *__restrict__ sums, int rows, int cols) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float *in = x + (size_t)row * cols;
    float *out = y + (size_t)row * cols;
    float t = 0.0f;
    for (int c = 0; c < cols; c++) { const float e = in[c] * in[c] + 0.25f; out[c] = e; t += e; }
    sums[row] = t;
}''',
    # stream-prefetch-distance: pathfinder's rows, each block its own columns of each row
    "row_walk": r'''
extern "C" __global__ void row_walk(const int *wall, int *out, int cols, int rows) {
    __shared__ int prev[64];
    int x = blockIdx.x * 64 + threadIdx.x, t = threadIdx.x;
    prev[t] = x < cols ? wall[x] : 0;
    __syncthreads();
    for (int r = 1; r < rows; r++) {
        int m = min(prev[t], prev[t > 0 ? t - 1 : t]);
        int v = x < cols ? wall[r * cols + x] + m : 0;
        __syncthreads();
        prev[t] = v;
        __syncthreads();
    }
    if (x < cols) out[x] = prev[t];
}''',
    # tiles-in-place: a blocked-LU trailing update (8 x 8 tiles staged from the panels beside
    # and above the tile each block updates, one barrier)
    "tile_update": r'''
extern "C" __global__ void tile_update(float *a, int n, int offset) {
    __shared__ float left[8][8], top[8][8];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row0 = offset + 8 + blockIdx.y * 8, col0 = offset + 8 + blockIdx.x * 8;
    left[ty][tx] = a[(row0 + ty) * n + offset + tx];
    top[ty][tx] = a[(offset + ty) * n + col0 + tx];
    __syncthreads();
    float sum = 0.0f;
    for (int k = 0; k < 8; k++)
        sum += left[ty][k] * top[k][tx];
    a[(row0 + ty) * n + col0 + tx] -= sum;
}''',
    # tiles-in-place, guarded: the same update for any n, staged under bound guards (0
    # outside) and stored under one; n = 21 leaves blocks at the edge (the body as it was)
    # beside the inner one (read in place)
    "guarded_tile_update": r'''
extern "C" __global__ void guarded_tile_update(float *a, int n, int offset) {
    __shared__ float left[8][8], top[8][8];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = offset + 8 + blockIdx.y * 8 + ty, col = offset + 8 + blockIdx.x * 8 + tx;
    left[ty][tx] = row < n ? a[row * n + offset + tx] : 0.0f;
    if (col < n) top[ty][tx] = a[(offset + ty) * n + col]; else top[ty][tx] = 0.0f;
    __syncthreads();
    float sum = 0.0f;
    for (int k = 0; k < 8; k++)
        sum += left[ty][k] * top[k][tx];
    if (row < n && col < n) a[row * n + col] -= sum;
}''',
    # split-row-streams: two rows of x per block, read in two passes; a partial last block
    "two_rows": r'''
extern "C" __global__ void two_rows(const float *x, float *out, int n) {
    __shared__ float s[64];
    unsigned int t = threadIdx.x, i = blockIdx.x * 128 + t;
    float v = 0.0f;
    if (i < n) v = x[i];
    if (i + 64 < n) v += x[i + 64] * 2.0f;
    s[t] = v;
    __syncthreads();
    for (int k = 32; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}''',
    # spin-wait-yields: the last thread publishes a value the others wait for
    "flag_wait": r'''
extern "C" __global__ void flag_wait(const int *data, int *out) {
    __shared__ volatile int ready;
    __shared__ int value;
    if (threadIdx.x == 0) ready = 0;
    __syncthreads();
    if (threadIdx.x == blockDim.x - 1) { value = data[blockIdx.x] * 5; __threadfence_block(); ready = 1; }
    else while (ready == 0) { }
    out[blockIdx.x * blockDim.x + threadIdx.x] = value + threadIdx.x;
}''',
}


@dataclass(frozen=True)
class Case:
    grid: tuple[int, ...]
    block: tuple[int, ...]
    args: Callable[[np.random.Generator], list]


def _f32(rng: np.random.Generator, n: int, scale: float = 1.0, shift: float = 0.0) -> np.ndarray:
    return (rng.random(n, dtype=np.float32) * np.float32(scale) + np.float32(shift)).astype(np.float32)


def _i32(rng: np.random.Generator, n: int, hi: int = 1000) -> np.ndarray:
    return rng.integers(-hi, hi, n).astype(np.int32)


# launch shapes and arguments; grid-stride lengths leave threads with different trip counts
CASES = {
    "normalize": Case((4,), (32,), lambda r: [np.zeros(100, np.float32), _f32(r, 100, 1, 1), np.int32(100)]),
    "clamp_select": Case((2,), (32,), lambda r: [_i32(r, 50), np.zeros(64, np.int32), np.int32(50)]),
    "swaps": Case((2,), (32,), lambda r: [_i32(r, 64)]),
    "flags": Case((1,), (64,), lambda r: [_i32(r, 64, 20), np.zeros(64, np.int32), np.int32(5), np.int32(40)]),
    "grid_stride": Case((2,), (16,), lambda r: [_f32(r, 100), np.zeros(100, np.float32), np.int32(100)]),
    "uniform_loop": Case((1,), (32,), lambda r: [r.random((32, 4), dtype=np.float32), np.zeros(32, np.float32),
                                                 np.int32(32)]),
    "two_phases": Case((1,), (64,), lambda r: [_f32(r, 64), _f32(r, 64), np.zeros(64, np.float32)]),
    "round_trip": Case((2,), (64,), lambda r: [_f32(r, 128), np.zeros(128, np.float32)]),
    "row_normalize": Case((3,), (16,), lambda r: [_f32(r, 120), np.zeros(120, np.float32), np.int32(40)]),
    "staged": Case((2,), (8, 8), lambda r: [_f32(r, 16), _f32(r, 128), np.zeros(128, np.float32)]),
    "tree_sum": Case((2,), (64,), lambda r: [_f32(r, 128), np.zeros(2, np.float32)]),
    "gs_tree": Case((3,), (64,), lambda r: [_f32(r, 1000), np.zeros(3, np.float32), np.int32(1000)]),
    "gs_shuffle": Case((2,), (64,), lambda r: [_i32(r, 700), np.zeros(1, np.int32), np.int32(700)]),
    "warp_max": Case((2,), (64,), lambda r: [_f32(r, 128, 2, -0.5), np.zeros(4, np.float32)]),
    "legacy_reduce": Case((2,), (64,), lambda r: [_i32(r, 128), np.zeros(2, np.int32)]),
    "stencil1d": Case((3,), (64,), lambda r: [_f32(r, 150), np.zeros(150, np.float32), np.int32(150)]),
    "jacobi2d": Case((3, 2), (8, 8), lambda r: [_f32(r, 20 * 13), np.zeros(20 * 13, np.float32), np.int32(20),
                                                np.int32(13)]),
    "transpose": Case((2, 2), (8, 8), lambda r: [_i32(r, 13 * 13), np.zeros(13 * 13, np.int32), np.int32(13)]),
    "histogram": Case((2,), (32,), lambda r: [r.integers(0, 256, 500).astype(np.uint8), np.zeros(16, np.uint32),
                                              np.int32(500)]),
    "time_steps": Case((2,), (64,), lambda r: [_f32(r, 128), np.zeros(2, np.int32), np.int32(5)]),
    "gs_in_steps": Case((2,), (32,), lambda r: [_f32(r, 150), np.int32(150), np.int32(3)]),
    "dup_axpy": Case((2,), (16, 4), lambda r: [_f32(r, 30), np.zeros(30, np.float32), np.int32(30)]),
    "cg_stride": Case((2,), (32,), lambda r: [_i32(r, 150), np.zeros(150, np.int32), np.int32(150)]),
    "row_max": Case((3,), (16,), lambda r: [_f32(r, 3 * 50, 4, -2), np.zeros(48, np.float32), np.int32(50)]),
    "flag_wait": Case((2,), (32,), lambda r: [_i32(r, 2), np.zeros(64, np.int32)]),
    "row_stored_sum": Case((3,), (16,), lambda r: [_f32(r, 40 * 37, 4, -2), np.zeros(40 * 37, np.float32),
                                                   np.zeros(40, np.float32), np.int32(40), np.int32(37)]),
    "rows_per_thread": Case((2,), (16,), lambda r: [_f32(r, 30 * 37, 4, -2), _f32(r, 37),
                                                    np.zeros(30, np.float32), np.int32(30), np.int32(37)]),
    "row_walk": Case((3,), (64,), lambda r: [_i32(r, 150 * 6), np.zeros(150, np.int32), np.int32(150),
                                             np.int32(6)]),
    "tile_update": Case((2, 2), (8, 8), lambda r: [_f32(r, 24 * 24, 1, -0.5), np.int32(24), np.int32(0)]),
    "two_rows": Case((3,), (64,), lambda r: [_f32(r, 300), np.zeros(3, np.float32), np.int32(300)]),
    "guarded_tile_update": Case((2, 2), (8, 8), lambda r: [_f32(r, 21 * 21, 1, -0.5), np.int32(21),
                                                           np.int32(0)]),
}

_HEADER = re.compile(r"^// -----// IR of kernel '[^']*' after ([\w-]+) //----- //\n", re.MULTILINE)


@pytest.fixture(scope="module")
def ptx_of() -> Callable[[str], str]:
    cache: dict[str, str] = {}

    def get(name: str) -> str:
        if name not in cache:
            # -ftz=true: as every CuPy-style compile (flush-min-max-at-uses needs it)
            source = SOURCES[name]
            cache[name] = source if source.lstrip().startswith(".version") else \
                compile_to_ptx(source, filename=f"{name}.cu", options=("-ftz=true",)).ptx
        return cache[name]
    return get


def _block3(block: tuple[int, ...]) -> tuple[int, int, int]:
    return tuple((tuple(block) + (1, 1))[:3])  # type: ignore[return-value]


def _pipeline_texts(ptx: str, name: str, pipeline: list[str], block_dims: tuple[int, int, int] | None,
                    noalias: tuple[int, ...] = ()) -> tuple[str, list[tuple[str, str]]]:
    """The printed IR as lifted, and (pass, printed IR after it) for each pass of
    `pipeline` (`--print-ir-after=all`), for the generic code (block_dims None), the code for
    a block shape, or the variant for non-overlapping pointers `noalias` (as the compiler
    makes them: cpuify.compiler.optimize_kernel)."""
    module = parse_ptx(ptx)
    op = lift_kernel(module, module.functions[name]).op
    if block_dims is not None:
        op.attributes["block_dims"] = list(block_dims)
    if noalias:
        op.attributes["noalias_params"] = sorted(noalias)
    lifted = print_op(op)
    out = io.StringIO()
    run_pipeline(op, PipelineOptions(passes=tuple(pipeline), verify_each=True,
                                     print_after=frozenset({"all"})), out=out)
    parts = _HEADER.split(out.getvalue())
    assert parts[0] == "" and len(parts) == 1 + 2 * len(pipeline)
    return lifted, [(parts[i], parts[i + 1]) for i in range(1, len(parts), 2)]


@dataclass
class _Variant:
    """One compiled form of a kernel (generic, for the block shape, non-overlapping
    pointers): the IR after each pass of the default pipeline, and the final IR with each
    pass that changes it left out."""
    label: str
    lifted: str
    after: list[tuple[str, str]]
    without: dict[str, str]

    @property
    def final(self) -> str:
        return self.after[-1][1]


def _variants(ptx: str, name: str, block: tuple[int, int, int]) -> list[_Variant]:
    passes = default_pipeline()
    out: list[_Variant] = []
    forms: list[tuple[str, tuple[int, int, int] | None, tuple[int, ...]]] = [("generic", None, ()),
                                                                          ("block shape", block, ())]
    k = 0
    while k < len(forms):
        label, dims, noalias = forms[k]
        k += 1
        lifted, after = _pipeline_texts(ptx, name, passes, dims, noalias)
        before = [lifted] + [text for _, text in after[:-1]]
        without = {}
        for (p, text), prev in zip(after, before):
            if text != prev:        # (a pass that changed nothing: the same pipeline without it)
                without[p] = _pipeline_texts(ptx, name, [q for q in passes if q != p], dims,
                                             noalias)[1][-1][1]
        out.append(_Variant(label, lifted, after, without))
        if label == "block shape":
            cands = parse_op(after[-1][1]).attributes.get("noalias_candidates")
            if cands:
                forms.append(("non-overlapping pointers", dims, tuple(int(c) for c in cands)))
    return out


def _outputs(args: list) -> list[np.ndarray]:
    return [a for a in args if isinstance(a, np.ndarray)]


def _interpret(ptx: str, name: str, text: str | None, case: Case) -> list[np.ndarray]:
    interp = InterpModule(ptx)
    if text is not None:
        interp.use_ir(name, parse_op(text))
    args = case.args(np.random.default_rng(7))
    interp.launch(name, case.grid, case.block, args)
    return _outputs(args)


def _native(ptx: str, name: str, options: tuple[str, ...], case: Case) -> list[list[np.ndarray]]:
    """Three launches: the generic code, then the code for the block shape (and the variant
    for non-overlapping pointers, where there is one)."""
    fn = cpuify.RawModule(ptx=ptx, options=options).get_function(name)
    results = []
    for _ in range(3):
        args = case.args(np.random.default_rng(7))
        fn(case.grid, case.block, tuple(args))
        results.append(_outputs(args))
    return results


def _same(reference: list[np.ndarray], got: list[np.ndarray], what: str) -> None:
    for a, b in zip(reference, got, strict=True):
        np.testing.assert_array_equal(a, b, err_msg=what)


#: the passes some kernels cannot do without natively (not optimizations there; the
#: interpreter has rules of its own for both): without yield points a thread spinning on a
#: flag that a later thread of its block sets holds the worker for ever; without lockstep
#: steps a legacy warp-synchronous reduction (racy under CUDA's rules since Volta) runs its
#: lanes one after another, not as the pre-Volta warp it was written for (4513 for 54)
REQUIRED_NATIVELY = {"flag_wait": {"spin-wait-yields"}, "legacy_reduce": {"warp-lockstep"}}

#: the native builds without one pass that the default suite runs (the rest: --runslow):
#: each pass of the default pipeline left out once, in a small kernel whose IR it changes
FAST_WITHOUT = {
    "dup_axpy": {"merge-duplicate-threads"},
    "cg_stride": {"narrow-induction-variables"},
    "clamp_select": {"selects-to-min-max"},
    "stencil1d": {"thread-index-outermost"},
    "swaps": {"if-convert-swaps"},
    "flags": {"select-if-phis"},
    "grid_stride": {"reroll-loops"},
    "normalize": {"parallel-licm", "raise-structured-cf"},
    "two_phases": {"barrier-elimination"},
    "staged": {"barrier-motion"},
    "histogram": {"interchange-thread-strided-loops"},
    "row_stored_sum": {"split-in-order-sums"},
    "uniform_loop": {"interchange-uniform-loops"},
    "tree_sum": {"min-cut-fission", "thread-index-ranges"},
    "round_trip": {"store-forwarding"},
    "warp_max": {"simd-collectives"},
    "row_max": {"flush-min-max-at-uses"},
    "row_walk": {"stream-prefetch-distance", "speculate-selected-loads"},
    "legacy_reduce": {"flat-thread-loops"},
    "tile_update": {"tiles-in-place"},
    "guarded_tile_update": {"tiles-in-place"},
    "two_rows": {"split-row-streams"},
}


@pytest.fixture(scope="module")
def prepared(ptx_of) -> Callable[[str], tuple[str, Case, list[np.ndarray], list[_Variant]]]:
    """name -> (PTX, launch, the interpreter's results on the IR as lifted, the variants)."""
    cache: dict[str, tuple[str, Case, list[np.ndarray], list[_Variant]]] = {}

    def get(name: str) -> tuple[str, Case, list[np.ndarray], list[_Variant]]:
        if name not in cache:
            ptx, case = ptx_of(name), CASES[name]
            cache[name] = (ptx, case, _interpret(ptx, name, None, case),
                           _variants(ptx, name, _block3(case.block)))
        return cache[name]
    return get


def _native_pipelines(name: str, variants: list[_Variant]) -> dict[str | None, tuple[str, ...]]:
    """None (all passes) and each pass whose absence changes the IR of some variant, one per
    distinct IR (the native code of equal IR is the same) -> the final IRs."""
    by_ir: dict[tuple[str, ...], str | None] = {tuple(v.final for v in variants): None}
    for p in default_pipeline():
        if p not in REQUIRED_NATIVELY.get(name, ()):
            by_ir.setdefault(tuple(v.without.get(p, v.final) for v in variants), p)
    return {p: ir for ir, p in by_ir.items()}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_interpreter_after_each_pass_and_without_each_pass(prepared, name: str) -> None:
    ptx, case, reference, variants = prepared(name)
    # (the interpreter does not read `block_dims` but to check the launch's shape: IR equal
    # but for it runs alike)
    seen: set[str] = {variants[0].lifted}
    for v in variants:
        runs = [(f"after {p}", text) for p, text in v.after]
        runs += [(f"without {p}", text) for p, text in v.without.items()]
        for what, text in runs:
            key = re.sub(r"block_dims = \[[^\]]*\], ?", "", text)
            if key in seen:
                continue
            seen.add(key)
            _same(reference, _interpret(ptx, name, text, case),
                  f"{name}: the interpreter on the IR ({v.label}) {what}")


def _native_equals_interpreter(prepared, name: str, fast: bool) -> None:
    ptx, case, reference, variants = prepared(name)
    offs = [p for p in _native_pipelines(name, variants)
            if (p is None or p in FAST_WITHOUT.get(name, ())) == fast]
    for off in offs:
        options = () if off is None else (f"--disable-pass={off}",)
        for k, got in enumerate(_native(ptx, name, options, case)):
            _same(reference, got, f"{name}: native, launch {k + 1}, "
                                  f"{'all passes' if off is None else 'without ' + off}")


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_native_with_all_passes(prepared, name: str) -> None:
    """Natively with all passes (and without the pass FAST_WITHOUT names for the kernel):
    the interpreter's results on the IR as lifted."""
    _native_equals_interpreter(prepared, name, fast=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_native_without_each_pass(prepared, name: str) -> None:
    """Natively without each pass that changes the kernel's IR (FAST_WITHOUT's are run by
    test_native_with_all_passes)."""
    _native_equals_interpreter(prepared, name, fast=False)


#: other launch shapes (partial warps, blocks not a multiple of 32, other trip counts)
OTHER_SHAPES = {
    "gs_shuffle": Case((3,), (48,), lambda r: [_i32(r, 1001), np.zeros(1, np.int32), np.int32(1001)]),
    "histogram": Case((3,), (40,), lambda r: [r.integers(0, 256, 777).astype(np.uint8),
                                              np.zeros(16, np.uint32), np.int32(777)]),
    "gs_in_steps": Case((3,), (24,), lambda r: [_f32(r, 301), np.int32(301), np.int32(4)]),
    "row_max": Case((2,), (24,), lambda r: [_f32(r, 2 * 71, 4, -2), np.zeros(48, np.float32), np.int32(71)]),
    "cg_stride": Case((3,), (20,), lambda r: [_i32(r, 211), np.zeros(211, np.int32), np.int32(211)]),
    "grid_stride": Case((3,), (40,), lambda r: [_f32(r, 1001), np.zeros(1001, np.float32), np.int32(1001)]),
    "row_normalize": Case((2,), (24,), lambda r: [_f32(r, 2 * 77), np.zeros(2 * 77, np.float32), np.int32(77)]),
    "normalize": Case((3,), (40,), lambda r: [np.zeros(100, np.float32), _f32(r, 100, 1, 1), np.int32(100)]),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(OTHER_SHAPES))
def test_other_launch_shapes(ptx_of, name: str) -> None:
    """The same checks for other launch shapes of the kernels with loops the passes rewrite."""
    ptx, case = ptx_of(name), OTHER_SHAPES[name]
    reference = _interpret(ptx, name, None, case)
    variants = _variants(ptx, name, _block3(case.block))
    seen: set[str] = set()
    for v in variants:
        for what, text in [(f"after {p}", t) for p, t in v.after] + \
                [(f"without {p}", t) for p, t in v.without.items()]:
            if text not in seen:
                seen.add(text)
                _same(reference, _interpret(ptx, name, text, case),
                      f"{name} {case.block}: the interpreter on the IR ({v.label}) {what}")
    for off in _native_pipelines(name, variants):
        options = () if off is None else (f"--disable-pass={off}",)
        for k, got in enumerate(_native(ptx, name, options, case)):
            _same(reference, got, f"{name} {case.block}: native, launch {k + 1}, without {off}")


def test_the_fast_builds_leave_out_every_pass(prepared) -> None:
    """The default suite builds each pass of the default pipeline left out at least once, in
    a kernel whose IR it changes (but the two that no kernel they change runs without)."""
    for name, passes in FAST_WITHOUT.items():
        assert passes <= set(_native_pipelines(name, prepared(name)[3])), name
    left_out = set().union(*FAST_WITHOUT.values())
    # (and fuse-block-runs, which changes nothing unless a launch asks for a run of blocks:
    # tests/test_block_runs.py)
    assert set(default_pipeline()) - left_out == {"spin-wait-yields", "warp-lockstep",
                                                  "fuse-block-runs"}


def test_every_pass_is_exercised(prepared) -> None:
    """Each pass of the default pipeline changes the IR of at least one kernel above (else
    the differential test would not test it)."""
    changed: set[str] = set()
    for name in CASES:
        for v in prepared(name)[3]:
            before = [v.lifted] + [t for _, t in v.after[:-1]]
            changed.update(p for (p, t), prev in zip(v.after, before) if t != prev)
    # (fuse-block-runs fuses only for a launch that asks, as above; in code for a block
    # shape it records whether it would: an attribute)
    assert set(default_pipeline()) - changed <= {"fuse-block-runs"}


def test_soft_barriers_let_threads_leave_at_different_iterations(ptx_of) -> None:
    """After interchange-thread-strided-loops, threads whose trip counts differ stop at the
    loop's soft barrier and at the one after the loop at the same time: the interpreter runs
    each group on (it once treated soft barriers as block barriers and reported a barrier
    divergence here); the iteration counter the IR says is the same in all threads waiting
    at the loop's soft barrier is."""
    ptx = ptx_of("gs_tree")
    module = parse_ptx(ptx)
    op = lift_kernel(module, module.functions["gs_tree"]).op
    run_pipeline(op, PipelineOptions(passes=("interchange-thread-strided-loops",)))
    softs = [o for b in block_body(op).blocks for o in b.ops
             if o.name == "upir.barrier" and o.attributes.get("soft")]
    assert len(softs) == 2 and softs[0].attributes.get("lockstep")
    case = CASES["gs_tree"]
    x = np.random.default_rng(3).random(1000, dtype=np.float32)
    out = np.zeros(3, np.float32)
    interp = InterpModule(ptx)
    interp.use_ir("gs_tree", parse_op(print_op(op)))
    interp.launch("gs_tree", case.grid, case.block, [x, out, np.int32(1000)])
    # (each thread's sum in iteration order, then the tree, all in float32)
    ref = np.zeros(3, np.float32)
    for b in range(3):
        s = np.zeros(64, np.float32)
        for t in range(64):
            for i in range(b * 64 + t, 1000, 192):
                s[t] = np.float32(s[t] + x[i] * np.float32(0.5))
        k = 32
        while k:
            s[:k] = s[:k] + s[k:2 * k]
            k >>= 1
        ref[b] = s[0]
    np.testing.assert_array_equal(out, ref)


def test_a_broken_lockstep_promise_is_reported(ptx_of) -> None:
    """A soft barrier whose `lockstep` counter is not the same in the threads waiting there
    (here: started at the thread index instead of 0) is a compiler bug the interpreter
    names, rather than running on with per-thread counters the compiled code does not
    have."""
    ptx = ptx_of("gs_tree")
    module = parse_ptx(ptx)
    op = lift_kernel(module, module.functions["gs_tree"]).op
    run_pipeline(op, PipelineOptions(passes=("interchange-thread-strided-loops",)))
    text = print_op(op)
    # the counter enters the loop as the constant 0 inserted at the top of the body; start it
    # at %tid.x instead
    zero = re.search(r'(%\d+) = "upir.const"\(\) \{value = 0 : i64\} : \(\) -> i32', text)
    assert zero is not None
    text = text.replace(zero.group(0), f'{zero.group(1)} = "upir.special"() {{reg = "%tid.x"}} : () -> i32')
    interp = InterpModule(ptx)
    interp.use_ir("gs_tree", parse_op(text))
    with pytest.raises(LaunchError, match="lockstep argument"):
        interp.launch("gs_tree", (3,), (64,), [np.ones(1000, np.float32), np.zeros(3, np.float32),
                                                np.int32(1000)])


MODULE_VARIABLES = r'''
__constant__ float weights[4] = {0.5f, -1.0f, 2.0f, 0.25f};
__device__ int calls;
extern "C" __global__ void weighted(const float *x, float *y, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = weights[i & 3] * x[i];
    if (threadIdx.x == 0) atomicAdd(&calls, 1);
}'''


def test_the_interpreter_runs_an_mlir_file(tmp_path, capsys) -> None:
    """`InterpModule.from_ir`: the file `cpuify ir --mlir` writes (module-scope variables with
    their initializers, the kernel after the default pipeline: an interchanged grid-stride
    loop) runs without the PTX; results as NumPy computes them."""
    from cpuify.cli.main import main
    source = tmp_path / "weighted.cu"
    source.write_text(MODULE_VARIABLES)
    assert main(["ir", "--mlir", str(source)]) == 0
    text = capsys.readouterr().out
    assert '"upir.global"' in text and "soft = true" in text
    interp = InterpModule.from_ir(text)
    assert interp.kernel_names == ["weighted"]
    x = np.random.default_rng(2).random(300, dtype=np.float32)
    y = np.zeros(300, np.float32)
    interp.launch("weighted", (3,), (32,), [x, y, np.int32(300)])
    w = np.array([0.5, -1.0, 2.0, 0.25], np.float32)
    np.testing.assert_array_equal(y, w[np.arange(300) & 3] * x)
    assert interp.get_global("calls", np.int32)[0] == 3
    with pytest.raises(LookupError, match="kernels: weighted"):
        interp.launch("other", 1, 1, [])


def test_ir_for_a_block_shape_or_disjoint_pointers_refuses_other_launches(ptx_of) -> None:
    """IR compiled for one block shape (`block_dims`) or for pointer arguments that overlap
    no other (`noalias_params`) runs only launches that fit it in the interpreter."""
    ptx = ptx_of("two_phases")
    module = parse_ptx(ptx)
    op = lift_kernel(module, module.functions["two_phases"]).op
    op.attributes["block_dims"] = [64, 1, 1]
    op.attributes["noalias_params"] = [16]          # `out`, the third pointer
    interp = InterpModule(ptx)
    interp.use_ir("two_phases", parse_op(print_op(op)))
    x, y = np.ones(64, np.float32), np.ones(64, np.float32)
    with pytest.raises(ValueError, match=r"code for blocks of \(64, 1, 1\), launched with blocks of \(32, 1, 1\)"):
        interp.launch("two_phases", 1, 32, [x, y, np.zeros(64, np.float32)])
    buf = np.zeros(128, np.float32)
    with pytest.raises(ValueError, match="that overlaps no other, but it overlaps argument 1"):
        interp.launch("two_phases", 1, 64, [x, buf[:64], buf[32:96]])
    out = np.zeros(64, np.float32)
    interp.launch("two_phases", 1, 64, [x, y, out])
    np.testing.assert_array_equal(out, np.full(64, 1.5, np.float32))
