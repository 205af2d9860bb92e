"""Interchange of thread-strided (grid-stride) loops with the thread loop: which loops are
transformed, and that results stay exact (checked against NumPy and the interpreter)."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp import interpret_kernel
from cpuify.lifting import lift_kernel
from cpuify.ir.structure import block_body as _block_body
from cpuify.transforms.interchange import interchange_thread_strided_loops

SRC = r'''
extern "C" __global__ void axpy_gs(float a, const float *x, float *y, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = a * x[i] + y[i];
}
// a per-thread accumulator lives across iterations
extern "C" __global__ void partial_sums(const int *x, long long *out, int n) {
    long long acc = 0;
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    for (int i = tid; i < n; i += blockDim.x * gridDim.x) acc += x[i] * (long long)(i % 7);
    out[tid] = acc;
}
// 64-bit index, 2-D grid, early return before the loop
extern "C" __global__ void scale_2d(double *v, long long n, double s) {
    if (threadIdx.x == 5) return;
    long long stride = (long long)blockDim.x * gridDim.x * gridDim.y;
    long long start = ((long long)blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
    for (long long i = start; i < n; i += stride) v[i] *= s;
}
// two strided loops one after the other: one is interchanged (two could meet out of step)
extern "C" __global__ void two_loops(int *a, int *b, int n) {
    int s = blockDim.x * gridDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += s) a[i] += 1;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += s) b[i] += 2;
}
// the stride computed once before the loop: nvcc splits it into a remainder loop and a main
// loop unrolled 4 times, whose index advances by s + s + s + s (recognized by what it adds)
extern "C" __global__ void pre_stride(const float *a, float *b, int n) {
    int s = blockDim.x * gridDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += s) b[i] = 2.0f * a[i] + 1.0f;
}
// a grid-stride sum, then a shared-memory tree across barriers
extern "C" __global__ void gs_then_tree(const float *x, float *out, int n) {
    __shared__ float s[128];
    float acc = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        acc += x[i];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}
// a grid-stride sum, then warp shuffles: threads leaving the loop stop at a soft barrier
// after it, in whatever iteration they leave
extern "C" __global__ void gs_then_shuffles(const float *x, float *out, int n) {
    float acc = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        acc += x[i];
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) out[(blockIdx.x * blockDim.x + threadIdx.x) / 32] = acc;
}
// block-strided loops around a grid-stride loop: only the grid-stride one is interchanged
extern "C" __global__ void hist_gs(const unsigned char *d, unsigned *hist, int n) {
    __shared__ unsigned s[64];
    for (int b = threadIdx.x; b < 64; b += blockDim.x) s[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&s[d[i] & 63], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < 64; b += blockDim.x) atomicAdd(&hist[b], s[b]);
}
// a loop whose counter is the same in all threads: vectorized inside the thread loop instead
extern "C" __global__ void row_sums(const float *m, float *out, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0;
    for (int c = 0; c < cols; ++c) acc += m[r * cols + c];
    out[r] = acc;
}
'''


@pytest.fixture(scope="module")
def ptx():
    return compile_to_ptx(SRC).ptx


@pytest.fixture(scope="module")
def mod(ptx):
    return cpuify.RawModule(ptx=ptx)


@pytest.mark.parametrize("kernel,expected", [("axpy_gs", 1), ("partial_sums", 1), ("scale_2d", 1),
                                             ("two_loops", 1), ("row_sums", 0),
                                             ("gs_then_tree", 1), ("gs_then_shuffles", 1),
                                             ("hist_gs", 1), ("pre_stride", 1)])
def test_which_loops_are_interchanged(ptx, kernel, expected):
    module = parse_ptx(ptx)
    region = _block_body(lift_kernel(module, module.functions[kernel]).op)
    assert len(interchange_thread_strided_loops(region)) == expected


@pytest.mark.parametrize("n", [1, 255, 4096, 100_003])
@pytest.mark.parametrize("grid", [1, 3, 64])
def test_grid_stride_axpy(mod, n, grid):
    rng = np.random.default_rng(n + grid)
    x = rng.random(n, dtype=np.float32)
    y = rng.random(n, dtype=np.float32)
    ref = np.float32(1.5) * x + y
    f = mod.get_function("axpy_gs")
    for _ in range(3):           # the third launch runs the specialized code
        y2 = y.copy()
        f((grid,), (128,), (np.float32(1.5), x, y2, np.int32(n)))
        np.testing.assert_allclose(y2, ref, rtol=1e-6)


def test_accumulator_across_iterations_matches_interpreter(ptx, mod):
    n, grid, block = 5000, 3, 64
    x = np.random.default_rng(1).integers(-100, 100, n, dtype=np.int32)
    out = np.zeros(grid * block, np.int64)
    mod.get_function("partial_sums")((grid,), (block,), (x, out, np.int32(n)))
    i = np.arange(n)
    ref = np.zeros(grid * block, np.int64)
    np.add.at(ref, i % (grid * block), x.astype(np.int64) * (i % 7))
    np.testing.assert_array_equal(out, ref)
    small = np.zeros(2 * 32, np.int64)
    interpret_kernel(ptx, "partial_sums", (2,), (32,), (x[:300], small, np.int32(300)))
    compiled = np.zeros_like(small)
    mod.get_function("partial_sums")((2,), (32,), (x[:300], compiled, np.int32(300)))
    np.testing.assert_array_equal(compiled, small)


def test_early_return_and_64_bit_index(mod):
    n = 10_007
    v = np.arange(n, dtype=np.float64)
    mod.get_function("scale_2d")((3, 2), (32,), (v, np.int64(n), 2.0))
    ref = np.arange(n, dtype=np.float64)
    idx = np.arange(n)
    skipped = (idx % 32) == 5      # thread 5 of every block returned early
    ref[~skipped] *= 2.0
    np.testing.assert_array_equal(v, ref)


def test_untouched_kernels_still_run(mod):
    n = 1000
    a = np.zeros(n, np.int32)
    b = np.zeros(n, np.int32)
    mod.get_function("two_loops")((2,), (64,), (a, b, np.int32(n)))
    assert (a == 1).all() and (b == 2).all()
    m = np.arange(64 * 10, dtype=np.float32).reshape(64, 10)
    out = np.zeros(64, np.float32)
    mod.get_function("row_sums")((2,), (32,), (m, out, np.int32(10)))
    np.testing.assert_allclose(out, m.sum(axis=1))


# --- block-uniform loops carrying a per-thread float (interchange_uniform_loops) -----------

UNIFORM_SRC = r'''
// n-body's shape: a shared tile, then a uniform loop summing into per-thread accumulators
extern "C" __global__ void tile_forces(const float4 *pos, float4 *acc_out, int n) {
    __shared__ float4 sh[64];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float4 me = pos[i];
    float ax = 0, ay = 0, az = 0;
    for (int tile = 0; tile < n; tile += blockDim.x) {
        sh[threadIdx.x] = pos[tile + threadIdx.x];
        __syncthreads();
        for (int k = 0; k < blockDim.x; k++) {
            float dx = sh[k].x - me.x, dy = sh[k].y - me.y, dz = sh[k].z - me.z;
            float d2 = dx * dx + dy * dy + dz * dz + 0.01f;
            float inv = 1.0f / sqrtf(d2);
            float s = sh[k].w * inv * inv * inv;
            ax += dx * s; ay += dy * s; az += dz * s;
        }
        __syncthreads();
    }
    acc_out[i] = make_float4(ax, ay, az, 0.0f);
}
// the same loop only in some threads: its counter is the same in the threads that run
// it, so it is interchanged too (the others never stop at its soft barrier)
extern "C" __global__ void some_threads(const float *x, float *out, int m) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0;
    if (threadIdx.x % 3 == 0) {
        for (int k = 0; k < m; k++) {
            float d = x[k] - i;
            acc += d * d / (1.0f + d * d) + sqrtf(d * d + 1.0f) * 0.5f - d / (2.0f + d * d);
        }
    }
    out[i] = acc;
}
'''


@pytest.fixture(scope="module")
def uniform_ptx():
    return compile_to_ptx(UNIFORM_SRC).ptx


@pytest.mark.parametrize("kernel,expected", [("tile_forces", 1), ("some_threads", 1)])
def test_which_uniform_loops_are_interchanged(uniform_ptx, kernel, expected):
    from cpuify.transforms.interchange import interchange_uniform_loops
    module = parse_ptx(uniform_ptx)
    region = _block_body(lift_kernel(module, module.functions[kernel]).op)
    assert len(interchange_uniform_loops(region)) == expected


def test_loop_in_some_threads_matches_numpy_and_interpreter(uniform_ptx):
    n, m = 512, 37
    x = np.random.default_rng(3).random(m, dtype=np.float32)
    i = np.arange(n)
    d = x[None, :].astype(np.float64) - i[:, None]
    terms = d * d / (1 + d * d) + np.sqrt(d * d + 1) * 0.5 - d / (2 + d * d)
    ref = np.where((i % 128) % 3 == 0, terms.sum(1), 0.0)
    f = cpuify.RawModule(ptx=uniform_ptx).get_function("some_threads")
    for _ in range(3):              # generic code, then the specialized block shape
        out = np.full(n, -1.0, np.float32)
        f((n // 128,), (128,), (x, out, np.int32(m)))
        np.testing.assert_allclose(out, ref, rtol=1e-5)
    small = np.full(128, -1.0, np.float32)
    interpret_kernel(uniform_ptx, "some_threads", (1,), (128,), (x, small, np.int32(m)))
    np.testing.assert_allclose(small, ref[:128], rtol=1e-5)


def _forces_ref(pos):
    d = pos[None, :, :3].astype(np.float64) - pos[:, None, :3]
    d2 = (d ** 2).sum(-1) + 0.01
    s = pos[None, :, 3] / d2 ** 1.5
    return (d * s[..., None]).sum(1)


@pytest.mark.parametrize("n", [64, 256])
def test_uniform_loop_interchange_matches_numpy_and_interpreter(uniform_ptx, n):
    rng = np.random.default_rng(n)
    pos = rng.random((n, 4), dtype=np.float32)
    f = cpuify.RawModule(ptx=uniform_ptx).get_function("tile_forces")
    for _ in range(3):              # generic code, then the specialized block shape
        out = np.zeros((n, 4), np.float32)
        f((n // 64,), (64,), (pos, out, np.int32(n)))
        np.testing.assert_allclose(out[:, :3], _forces_ref(pos), rtol=1e-4, atol=1e-4)
    small = np.zeros((64, 4), np.float32)
    interpret_kernel(uniform_ptx, "tile_forces", (1,), (64,), (pos[:64], small, np.int32(64)))
    compiled = np.zeros_like(small)
    f((1,), (64,), (pos[:64], compiled, np.int32(64)))
    np.testing.assert_allclose(compiled, small, rtol=1e-6, atol=1e-6)


def test_threads_leaving_a_grid_stride_loop_stop_after_it(ptx):
    """A soft barrier at the loop's exit when code with effects follows it (gs_then_shuffles,
    gs_then_tree); none where the threads only exit (axpy_gs)."""
    module = parse_ptx(ptx)
    for kernel, soft in (("axpy_gs", 1), ("gs_then_shuffles", 2), ("gs_then_tree", 2)):
        region = _block_body(lift_kernel(module, module.functions[kernel]).op)
        interchange_thread_strided_loops(region)
        found = sum(op.name == "upir.barrier" and bool(op.attributes.get("soft"))
                    for b in region.blocks for op in b.ops)
        assert found == soft, kernel


# (kernel, grid, block, output bucket of element i): a grid-stride sum, then a shared-memory
# tree across barriers (one sum per block) or warp shuffles (one sum per warp)
GRID_STRIDE_SUMS = [
    ("gs_then_tree", 7, 128, lambda i, g, b: (i // b) % g),
    ("gs_then_shuffles", 3, 96, lambda i, g, b: (i % (g * b)) // 32),
]


@pytest.mark.parametrize("kernel,grid,block,bucket", GRID_STRIDE_SUMS)
@pytest.mark.parametrize("n", [5, 100, 4096, 10_007, 100_003])
def test_grid_stride_then_sync_points_match_numpy_and_interpreter(ptx, mod, kernel, grid, block,
                                                                   bucket, n):
    x = np.random.default_rng(n).random(n, dtype=np.float32)
    f = mod.get_function(kernel)
    buckets = bucket(np.arange(n), grid, block)
    ref = np.zeros(max(bucket(np.arange(grid * block), grid, block)) + 1, np.float64)
    np.add.at(ref, buckets, x.astype(np.float64))
    for _ in range(3):              # generic code, then the specialized block shape
        out = np.zeros_like(ref, dtype=np.float32)
        f((grid,), (block,), (x, out, np.int32(n)))
        np.testing.assert_allclose(out, ref, rtol=1e-5)
    m = min(n, 500)
    small = np.zeros(2 * block // 32, np.float32)
    interpret_kernel(ptx, kernel, (2,), (block,), (x[:m], small, np.int32(m)))
    compiled = np.zeros_like(small)
    f((2,), (block,), (x[:m], compiled, np.int32(m)))
    np.testing.assert_array_equal(compiled, small)


@pytest.mark.parametrize("n,block", [(1, 32), (1000, 32), (70_001, 48)])
def test_grid_stride_histogram_matches_numpy_and_interpreter(ptx, mod, n, block):
    d = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    f = mod.get_function("hist_gs")
    ref = np.bincount(d & 63, minlength=64)
    for _ in range(3):
        hist = np.zeros(64, np.uint32)
        f((5,), (block,), (d, hist, np.int32(n)))
        np.testing.assert_array_equal(hist, ref)
    m = min(n, 300)
    small = np.zeros(64, np.uint32)
    interpret_kernel(ptx, "hist_gs", (2,), (block,), (d[:m], small, np.int32(m)))
    np.testing.assert_array_equal(small, np.bincount(d[:m] & 63, minlength=64))


ARGMIN_SRC = r'''
// k-means assignment (the early return and the `if` that keeps the best are thread-dependent;
// the loop over centroids is the same in every thread)
__constant__ float cent[8 * 4];
extern "C" __global__ void assign(const float *x, int *label, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float p[4];
    for (int f = 0; f < 4; f++) p[f] = x[f * n + i];
    float best = 3.4e38f;
    int arg = 0;
    for (int c = 0; c < k; c++) {
        float d = 0;
        for (int f = 0; f < 4; f++) { float t = p[f] - cent[c * 4 + f]; d = fmaf(t, t, d); }
        if (d < best) { best = d; arg = c; }
    }
    label[i] = arg;
}
'''


def test_loop_with_rejoining_if_after_early_return_is_interchanged():
    from cpuify.analysis.uniformity import uniform_values
    from cpuify.transforms.interchange import interchange_uniform_loops
    ptx = compile_to_ptx(ARGMIN_SRC).ptx
    module = parse_ptx(ptx)
    region = _block_body(lift_kernel(module, module.functions["assign"]).op)
    uniform = uniform_values(region)
    # the centroid counter (an argument of a loop header) is uniform despite the early return
    order = {b: k for k, b in enumerate(region.blocks)}
    headers = [s for b in region.blocks for s in b.successors if order[s] <= order[b] and s.args]
    assert any(a in uniform for h in headers for a in h.args)
    assert len(interchange_uniform_loops(region)) == 1


@pytest.mark.parametrize("n", [1, 300, 5000])
def test_argmin_matches_numpy(n):
    rng = np.random.default_rng(n)
    x = rng.random((4, n), dtype=np.float32)
    cent = rng.random((8, 4), dtype=np.float32)
    mod = cpuify.RawModule(code=ARGMIN_SRC)
    mod.get_global("cent", np.float32)[:] = cent.reshape(-1)
    f = mod.get_function("assign")
    d = ((x.T[:, None, :].astype(np.float64) - cent[None, :, :]) ** 2).sum(-1)
    ref = d.argmin(1)
    for _ in range(3):
        label = np.full(n, -1, np.int32)
        f(((n + 127) // 128,), (128,), (x, label, np.int32(n), np.int32(8)))
        close = np.sort(d, 1)[:, 1] - np.sort(d, 1)[:, 0] < 1e-5     # ties within rounding
        np.testing.assert_array_equal(label[~close], ref[~close])


def test_unrolled_grid_stride_loop(ptx, mod):
    """The loop interchanged is nvcc's unrolled main loop (four loads per iteration), not
    its remainder loop; results as NumPy's."""
    module = parse_ptx(ptx)
    region = _block_body(lift_kernel(module, module.functions["pre_stride"]).op)
    (counter,) = interchange_thread_strided_loops(region)
    header = counter.block
    loads = [op for b in region.blocks for op in b.ops if op.name == "ptx.ld"]
    assert len(loads) >= 5          # 4 in the main loop, 1 in the remainder loop
    from cpuify.ir.core import dominates, dominators
    idom = dominators(region)
    in_loop = [op for op in loads if dominates(idom, header, op.parent)]
    assert len(in_loop) >= 4
    f = mod.get_function("pre_stride")
    rng = np.random.default_rng(3)
    for n, grid in ((1, 1), (1000, 3), (100_003, 16)):
        a = rng.random(n, dtype=np.float32)
        b = np.zeros(n, np.float32)
        for _ in range(2):
            f((grid,), (64,), (a, b, np.int32(n)))
            np.testing.assert_array_equal(b, np.float32(2) * a + np.float32(1))
