"""Divergence analysis (analysis/uniformity.py): which values are the same in every thread of a
block.  A thread-dependent branch makes values divergent only until the threads meet again
(its immediate post-dominator); a loop with a thread-dependent exit makes its counters
divergent.  Results of kernels whose values the analysis keeps once per block are checked
against NumPy and the reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.analysis.cfg import immediate_post_dominators
from cpuify.analysis.uniformity import uniform_values
from cpuify.ir.structure import block_body as _block_body
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp import interpret_kernel
from cpuify.lifting import lift_kernel

SRC = r'''
// a block-uniform loop around a thread-dependent `if`, barriers in the loop (Rodinia
// pathfinder's shape): the loop counter stays uniform, the flag set in the `if` does not
extern "C" __global__ void relax(int *data, int iters) {
    __shared__ int cur[128];
    __shared__ int nxt[128];
    int t = threadIdx.x;
    cur[t] = data[blockIdx.x * blockDim.x + t];
    __syncthreads();
    bool wrote = false;
    for (int i = 0; i < iters; i++) {
        wrote = false;
        if (t > i && t < (int)blockDim.x - 1) {
            nxt[t] = min(cur[t - 1], cur[t + 1]) + i;
            wrote = true;
        }
        __syncthreads();
        if (wrote) cur[t] = nxt[t];
        __syncthreads();
    }
    data[blockIdx.x * blockDim.x + t] = cur[t] + (wrote ? 1000 : 0);
}
// a loop whose exit depends on the thread: its counter differs between threads
extern "C" __global__ void count_up(int *out) {
    int i = 0;
    while (i * i < (int)threadIdx.x) i++;
    out[threadIdx.x] = i;
}
'''


@pytest.fixture(scope="module")
def ptx():
    return compile_to_ptx(SRC).ptx


def _region(ptx, name):
    module = parse_ptx(ptx)
    return _block_body(lift_kernel(module, module.functions[name]).op)


def _loop_headers(region):
    """Blocks with arguments that a later block branches back to."""
    order = {b: i for i, b in enumerate(region.blocks)}
    return [s for b in region.blocks for s in b.successors if order[s] <= order[b] and s.args]


def test_uniform_loop_counter_around_divergent_if(ptx):
    region = _region(ptx, "relax")
    uniform = uniform_values(region)
    headers = _loop_headers(region)
    assert headers
    # the loop counter (some header argument) is uniform ...
    assert any(a in uniform for h in headers for a in h.args)
    # ... and the `wrote` flag, merged after the thread-dependent `if`, is not
    merges = [a for b in region.blocks for a in b.args if a.type in ("i1", "i16")]
    assert merges and not any(a in uniform for a in merges)


def test_thread_dependent_loop_exit_is_divergent(ptx):
    region = _region(ptx, "count_up")
    uniform = uniform_values(region)
    headers = _loop_headers(region)
    assert headers and not any(a in uniform for h in headers for a in h.args)


def test_post_dominators_of_if_and_loop(ptx):
    region = _region(ptx, "relax")
    ipdom = immediate_post_dominators(region)
    for b in region.blocks:
        term = b.terminator
        if term is not None and term.name == "cf.cond_br":
            # every two-way branch of this kernel is followed by a meeting point
            assert b in ipdom
            join = ipdom[b]
            assert join is not b


def _relax_ref(data, block, iters):
    out = data.copy().reshape(-1, block)
    res = np.empty_like(out)
    for r, row in enumerate(out):
        cur = row.copy()
        wrote = np.zeros(block, bool)
        for i in range(iters):
            t = np.arange(block)
            wrote = (t > i) & (t < block - 1)
            nxt = cur.copy()
            left, right = np.roll(cur, 1), np.roll(cur, -1)
            nxt[wrote] = np.minimum(left, right)[wrote] + i
            cur = np.where(wrote, nxt, cur)
        res[r] = cur + np.where(wrote, 1000, 0)
    return res.reshape(-1)


@pytest.mark.parametrize("iters", [0, 1, 5, 40])
def test_relax_matches_numpy_and_interpreter(ptx, iters):
    rng = np.random.default_rng(iters)
    block, grid = 128, 3
    data = rng.integers(0, 1000, grid * block, dtype=np.int32)
    got = data.copy()
    f = cpuify.RawModule(ptx=ptx).get_function("relax")
    for _ in range(3):                       # generic code, then the specialized block shape
        got = data.copy()
        f((grid,), (block,), (got, np.int32(iters)))
        np.testing.assert_array_equal(got, _relax_ref(data, block, iters))
    small = data[:block].copy()
    interpret_kernel(ptx, "relax", (1,), (block,), (small, np.int32(min(iters, 5))))
    np.testing.assert_array_equal(small, _relax_ref(data[:block], block, min(iters, 5)))


def test_count_up():
    ptx = compile_to_ptx(SRC).ptx
    out = np.zeros(200, np.int32)
    cpuify.RawModule(ptx=ptx).get_function("count_up")((1,), (200,), (out,))
    t = np.arange(200)
    np.testing.assert_array_equal(out, np.ceil(np.sqrt(t)).astype(np.int32))


EXIT_SRC = r'''
// a block-uniform value (a division: kept, not recomputed) crosses barriers after thread 0
// has exited: the copy the next segment reads must come from a thread that is still there
extern "C" __global__ void after_exit(const int *in, int *out, int scale) {
    __shared__ int buf[256];
    int s = scale / 7 + 1;
    float f = (float)scale / 3.0f;
    if (threadIdx.x == 0) return;
    buf[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x] * s;
    __syncthreads();
    int v = buf[threadIdx.x % (blockDim.x - 1) + 1];
    __syncthreads();
    buf[threadIdx.x] = v + s;
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = buf[threadIdx.x] + s + (int)f;
}
'''


@pytest.mark.parametrize("block", [32, 256])
def test_uniform_values_after_thread_zero_exits(block):
    ptx = compile_to_ptx(EXIT_SRC).ptx
    f = cpuify.RawModule(ptx=ptx).get_function("after_exit")
    grid, scale = 3, 1000
    x = np.random.default_rng(block).integers(-50, 50, grid * block, dtype=np.int32)
    s = scale // 7 + 1
    fs = int(np.float32(scale) / np.float32(3.0))
    ref = np.zeros(grid * block, np.int32)
    for b in range(grid):
        t = np.arange(1, block)
        buf = x[b * block + t] * s
        v = buf[(t % (block - 1) + 1) - 1]
        ref[b * block + t] = v + s + s + fs
    for _ in range(3):
        out = np.zeros(grid * block, np.int32)
        f((grid,), (block,), (x, out, np.int32(scale)))
        np.testing.assert_array_equal(out, ref)


SPIN_SRC = r'''
// an endless loop that one thread may enter: its blocks post-dominate nothing and have no
// post-dominator (only analysed here, never launched with the spinning flag)
extern "C" __global__ void spin_or_store(int *x, int flag) {
    if (threadIdx.x == 0 && flag == 12345) {
        while (1) { x[0] += 1; }
    }
    x[threadIdx.x + 1] = threadIdx.x;
}
'''


def test_endless_loop_has_no_post_dominator():
    ptx = compile_to_ptx(SPIN_SRC).ptx
    region = _region(ptx, "spin_or_store")
    ipdom = immediate_post_dominators(region)
    spinning = [b for b in region.blocks if b in b.successors]
    assert spinning and not any(b in ipdom for b in spinning)
    assert not any(v in spinning for v in ipdom.values())
    out = np.zeros(65, np.int32)
    cpuify.RawModule(ptx=ptx).get_function("spin_or_store")((1,), (64,), (out, np.int32(0)))
    np.testing.assert_array_equal(out[1:], np.arange(64))


TAIL_SRC = r'''
// 2D blocks whose later rows exit early; the first rows go on through shuffles and
// barriers (masked segment runs stop after the last live thread)
extern "C" __global__ void first_rows_sum(const int *x, int *out, int rows_live) {
    int t = threadIdx.y * blockDim.x + threadIdx.x;
    int v = x[blockIdx.x * blockDim.x * blockDim.y + t];
    if ((int)threadIdx.y >= rows_live) return;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    __shared__ int warp_sums[32];
    if ((threadIdx.x & 31) == 0) warp_sums[t >> 5] = v;
    __syncthreads();
    if (t == 0) {
        int s = 0;
        for (int w = 0; w < rows_live * (int)blockDim.x / 32; w++) s += warp_sums[w];
        out[blockIdx.x] = s;
    }
}
'''


@pytest.mark.parametrize("block,rows_live", [((32, 8), 1), ((32, 8), 3), ((64, 4), 2), ((32, 4), 4)])
def test_masked_runs_after_later_rows_exit(block, rows_live):
    ptx = compile_to_ptx(TAIL_SRC).ptx
    f = cpuify.RawModule(ptx=ptx).get_function("first_rows_sum")
    nb = 3
    x = np.random.default_rng(rows_live).integers(-1000, 1000, nb * block[0] * block[1], dtype=np.int32)
    ref = x.reshape(nb, block[1], block[0])[:, :rows_live, :].sum(axis=(1, 2))
    for _ in range(3):
        out = np.zeros(nb, np.int32)
        f((nb,), block, (x, out, np.int32(rows_live)))
        np.testing.assert_array_equal(out, ref)


GUARDED = r'''
// a block-uniform loop inside a thread-dependent `if` (a clustering cost kernel's shape:
// `if (i < num) for (d < dim) ...`), a barrier after it; and a loop inside an `if` whose
// exit depends on the thread
extern "C" __global__ void guarded(const float *x, const float *c, float *out, float *part,
                                   int n, int dim) {
    __shared__ float s[128];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.0f;
    if (i < n) {
        for (int d = 0; d < dim; d++) { float v = x[d * n + i] - c[d]; acc = fmaf(v, v, acc); }
        out[i] = acc;
    }
    s[threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int k = 0; k < (int)blockDim.x; k++) t += s[k];
        part[blockIdx.x] = t;
    }
}
extern "C" __global__ void guarded_divergent(int *out, int n) {
    int i = threadIdx.x, k = 0;
    if (i < n) {
        while (k * k < i) k++;
    }
    out[i] = k;
}
'''


def test_loop_inside_one_way_of_a_divergent_if_is_uniform():
    ptx = compile_to_ptx(GUARDED).ptx
    region = _region(ptx, "guarded")
    uniform = uniform_values(region)
    headers = _loop_headers(region)
    assert len(headers) >= 2
    # every loop's counter is uniform in the threads that run it (the `d` loop's, inside
    # the `if`, too); its pointer induction variables (x + d * n + i) are not
    assert all(any(a in uniform for a in h.args if a.type in ("i32", "i64")) for h in headers)
    # so are the loops' exit conditions
    exits = [b.terminator.operands[0] for h in headers for b in region.blocks
             if b.terminator is not None and b.terminator.name == "cf.cond_br" and h in b.successors]
    assert exits and all(c in uniform for c in exits)
    # the accumulator merged after the `if` (acc or 0) is not
    joins = [a for b in region.blocks for a in b.args if a.type == "f32" and b not in headers]
    assert joins and not any(a in uniform for a in joins)
    region = _region(ptx, "guarded_divergent")
    uniform = uniform_values(region)
    headers = _loop_headers(region)
    assert headers and not any(a in uniform for h in headers for a in h.args)


@pytest.mark.parametrize("n", [1000, 1024, 77])
def test_guarded_loop_matches_numpy_and_interpreter(n):
    ptx = compile_to_ptx(GUARDED).ptx
    rng = np.random.default_rng(n)
    dim, block = 12, 128
    grid = (n + block - 1) // block
    x = rng.random((dim, n), dtype=np.float32)
    c = rng.random(dim, dtype=np.float32)
    ref = ((x.astype(np.float64) - c[:, None]) ** 2).sum(0)
    padded = np.zeros(grid * block)
    padded[:n] = ref
    f = cpuify.RawModule(ptx=ptx).get_function("guarded")
    for _ in range(3):                       # generic code, then the specialized block shape
        out = np.zeros(n, np.float32)
        part = np.zeros(grid, np.float32)
        f((grid,), (block,), (x, c, out, part, np.int32(n), np.int32(dim)))
        np.testing.assert_allclose(out, ref, rtol=1e-5)
        np.testing.assert_allclose(part, padded.reshape(grid, block).sum(1), rtol=1e-5)
    small_n = min(n, block)
    out = np.zeros(small_n, np.float32)
    part = np.zeros(1, np.float32)
    xs = np.ascontiguousarray(x[:, :small_n])
    interpret_kernel(ptx, "guarded", (1,), (block,), (xs, c, out, part, np.int32(small_n), np.int32(dim)))
    np.testing.assert_allclose(out, ref[:small_n] if small_n == n else
                               ((xs.astype(np.float64) - c[:, None]) ** 2).sum(0), rtol=1e-5)
    out = np.zeros(block, np.int32)
    cpuify.RawModule(ptx=ptx).get_function("guarded_divergent")((1,), (block,), (out, np.int32(100)))
    k = np.array([int(np.ceil(np.sqrt(i))) if i < 100 else 0 for i in range(block)])
    np.testing.assert_array_equal(out, k)


def test_divergent_blocks_and_warp_syncs(ptx):
    """divergent_blocks: a loop with a thread-dependent exit runs divergently (its blocks),
    the entry does not; uniform_across_warp_syncs keeps every uniform value of a kernel
    without warp-level sync points (relax: barriers only)."""
    from cpuify.analysis.uniformity import divergent_blocks, uniform_across_warp_syncs
    region = _region(ptx, "count_up")
    divergent = divergent_blocks(region, uniform_values(region))
    assert divergent and region.blocks[0] not in divergent
    assert any(b.args for b in divergent)            # the loop's header
    region = _region(ptx, "relax")
    uniform = uniform_values(region)
    assert uniform_across_warp_syncs(region, uniform) == uniform
