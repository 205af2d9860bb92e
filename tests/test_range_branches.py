"""Range branches (KernelCodegen.range_branch): in code specialized for a one-dimensional
block shape, a branch whose condition keeps one value on an interval of threadIdx.x (`if
(i < n)`, a grid-stride loop's test, Rodinia pathfinder's `IN_RANGE(tx, ...)`) gets a copy of
its segment's thread loop with the branch decided, run when the comparisons hold for the first
and the last thread of the block and tx + u does not wrap in between
(SegmentEmitter.emit_agreeing_copy).  Checked: which branches qualify, and kernels against
NumPy at sizes where some blocks take the copy and others the usual loop, including indices
that wrap around in 32 bits, unsigned comparisons and barriers after the branch, and clamped
shared loads that only the threads inside the interval run (SegmentEmitter.interval_clamps).
Each kernel runs twice (generic code, then the code specialized for its block shape)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cpuify
from cpuify.codegen.llvm_gen import KernelCodegen, ModuleCodegen
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.compiler import lift_and_optimize, lift_optimized
from cpuify.transforms.pass_manager import PipelineOptions

SRC = r'''
extern "C" __global__ void guard(int n, float a, const float *x, float *y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void early_exit(int n, const float *x, float *y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    y[i] = 2.0f * x[i] + 1.0f;
}
// unsigned: base + tid wraps past 2^32 - 1 in some blocks (a load under the condition
// keeps it a branch)
extern "C" __global__ void unsigned_guard(unsigned base, unsigned n, const int *src, int *out) {
    unsigned i = base + blockIdx.x * blockDim.x + threadIdx.x;
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[k] = src[k];
}
// signed: base + tid wraps past INT_MAX in some blocks
extern "C" __global__ void signed_wrap(int base, int n, const int *src, int *out) {
    int i = base + (int)(blockIdx.x * blockDim.x + threadIdx.x);
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[k] = src[k];
}
// a grid-stride loop: all threads go on in every pass but the last
extern "C" __global__ void grid_stride_sum(const float *x, float *partial, int n) {
    __shared__ float s[128];
    float sum = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        sum += x[i];
    s[threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int k = 0; k < 128; k++) t += s[k];
        partial[blockIdx.x] = t;
    }
}
// an interval with both ends and a block-uniform loop counter (pathfinder's shape)
extern "C" __global__ void window(const int *in, const int *add, int *out, int lo, int hi,
                                  int steps) {
    __shared__ int a[128];
    __shared__ int b[128];
    int tx = threadIdx.x;
    a[tx] = in[blockIdx.x * 128 + tx];
    __syncthreads();
#pragma unroll 1
    for (int s = 0; s < steps; s++) {
        int v = a[tx];
        if (tx >= lo + s && tx <= hi - s && tx > 2 * s) v += add[s * 128 + tx];
        b[tx] = v;
        __syncthreads();
        a[tx] = b[tx];
        __syncthreads();
    }
    out[blockIdx.x * 128 + tx] = a[tx];
}
// pathfinder's neighbours: indices clamped to a block-uniform valid range, read only by
// the threads inside the range branch's interval (SegmentEmitter.interval_clamps)
extern "C" __global__ void neighbours(const int *in, const int *add, int *out, int lo, int hi,
                                      int steps) {
    __shared__ int a[128];
    __shared__ int b[128];
    int tx = threadIdx.x;
    int vmin = lo - (int)blockIdx.x > 0 ? lo - (int)blockIdx.x : 0;
    int vmax = hi < 127 ? hi : 127;
    int W = max(tx - 1, vmin), E = min(tx + 1, vmax);
    a[tx] = in[blockIdx.x * 128 + tx];
    __syncthreads();
#pragma unroll 1
    for (int s = 0; s < steps; s++) {
        int v = a[tx];
        if (tx >= vmin && tx <= vmax && tx > s && tx < 127 - s)
            v = min(a[W], a[E]) + add[s * 128 + tx];
        b[tx] = v;
        __syncthreads();
        a[tx] = b[tx];
        __syncthreads();
    }
    out[blockIdx.x * 128 + tx] = a[tx];
}
// two guards in one segment (the reduction's "first add during global load"): both decided
// in the copy; base + ... wraps past 2^32 - 1 in some blocks, for one guard or both
extern "C" __global__ void two_guards(unsigned base, const float *in, float *partial,
                                      unsigned n) {
    __shared__ float s[128];
    unsigned int tid = threadIdx.x;
    unsigned int i = base + blockIdx.x * 256 + tid;
    float v = 0.0f;
    if (i < n) v = in[i - base];
    if (i + 128 < n) v += in[i + 128 - base];
    s[tid] = v;
    __syncthreads();
    if (tid == 0) {
        float t = 0.0f;
        for (int k = 0; k < 128; k++) t += s[k];
        partial[blockIdx.x] = t;
    }
}
// signed, the second guard after a store the first one guards
extern "C" __global__ void two_signed_guards(int base, int n, const int *src, int *out) {
    int i = base + (int)(blockIdx.x * blockDim.x + threadIdx.x);
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[k] = src[k];
    if (i - 64 >= -n) out[k] += 1000;
}
// a guard on a strength-reduced induction variable (ka += 32 per iteration), checked by the
// segment that resumes at the barrier ending an iteration: the check must see the next
// iteration's ka, not the one before the back edge
extern "C" __global__ void tile_sums(const float *A, float *out, int K, float pad) {
    __shared__ float s[32];
    float acc = 0.0f;
#pragma unroll 1
    for (int t = 0; t < (K + 31) / 32; ++t) {
        int ka = t * 32 + threadIdx.x;
        float v = pad;
        if (ka < K) v = A[ka];
        s[threadIdx.x] = v;
        __syncthreads();
        acc += s[(threadIdx.x + 1) & 31];
        __syncthreads();
    }
    out[blockIdx.x * 32 + threadIdx.x] = acc;
}
'''


@pytest.fixture(scope="module")
def mod():
    return cpuify.RawModule(code=SRC)


@pytest.fixture(scope="module")
def ptx():
    return parse_ptx(compile_to_ptx(SRC).ptx)


def _branches(ptx, kernel, block):
    """{resume: (comparisons, inside, how the decided copy's threads stop)}."""
    kc = KernelCodegen(ModuleCodegen(ptx), lift_optimized(ptx, ptx.functions[kernel], block), block)
    return {r: ([cmp for _, _, cmp, _ in rb.terms], rb.inside,
                None if not rb.decided_convergent else
                "exit" if rb.decided_exit else
                rb.decided_next.index if rb.decided_next else "same")
            for r, rb in kc.range_branches.items()}


def test_which_branches(ptx):
    # `if (i < n)` and `if (i >= n) return;` (nvcc branches around the work when i >= n):
    # the copy for blocks whose threads all have i < n; no sync points to stop at
    for k in ("guard", "early_exit", "unsigned_guard", "signed_wrap"):
        assert _branches(ptx, k, (256, 1, 1)) == {0: (["lt"], False, None)}, k
    # the grid-stride loop's test, from its header: every thread goes on to the next pass
    # (sync 1, the loop's soft barrier), with no state per thread
    assert _branches(ptx, "grid_stride_sum", (128, 1, 1))[1] == (["lt"], True, 1)
    # a conjunction of three comparisons with the loop counter, after each barrier that
    # starts an iteration (which sync points those are depends on the barriers
    # barrier-elimination leaves: 1 and 2 with its default rule)
    got = _branches(ptx, "window", (128, 1, 1))
    assert 1 in got and len(got) == 2 and \
        all(v == (["gt", "le", "ge"], False, "same") for v in got.values()), got
    # pathfinder's clamped neighbours, read inside the interval: a copy without the clamps
    gen = ModuleCodegen(ptx)
    gen.add_kernel(lift_optimized(ptx, ptx.functions["neighbours"], (128, 1, 1)), (128, 1, 1))
    assert "clamp.idle" in gen.llvm_text()
    # generic code, 2-D blocks: none
    kc = KernelCodegen(ModuleCodegen(ptx), lift_optimized(ptx, ptx.functions["guard"]), None)
    assert kc.range_branches == {}
    # a second guard in the same segment is decided in the same copy; none for one guard
    # (split-row-streams off: it reads the two rows, so the two guards, in passes of their own)
    assert _further(ptx, "two_guards", (128, 1, 1), frozenset({"split-row-streams"})) == \
        [(["lt"], False)]   # @p bra skips
    assert _further(ptx, "two_guards", (128, 1, 1)) == []
    assert _further(ptx, "two_signed_guards", (256, 1, 1)) == [(["lt"], True)]  # (i - 64 < -n)
    assert _further(ptx, "guard", (256, 1, 1)) == []
    # guard never reads threadIdx.y: its 16 rows are duplicates that run once
    # (merge-duplicate-threads), a one-dimensional thread loop that gets the copy
    assert _branches(ptx, "guard", (16, 16, 1)) == {0: (["lt"], False, None)}


def _further(ptx, kernel, block, disabled=frozenset()):
    """The further branches the copy of the first segment decides: (comparisons, inside)."""
    lifted = lift_and_optimize(ptx, ptx.functions[kernel], PipelineOptions(disabled=disabled), block)[0]
    kc = KernelCodegen(ModuleCodegen(ptx), lifted, block)
    return [([cmp for _, _, cmp, _ in terms], inside)
            for _, terms, inside in kc.range_branches[0].also]


def _twice(launch, out):
    got = []
    for _ in range(2):
        out[:] = -7
        launch()
        got.append(out.copy())
    return got


@pytest.mark.parametrize("n", [1, 255, 256, 1000, 4096])
def test_guard(mod, n):
    rng = np.random.default_rng(n)
    x = rng.random(n + 300, dtype=np.float32)
    y0 = rng.random(n + 300, dtype=np.float32)
    f = mod.get_function("guard")
    for _ in range(2):
        y = y0.copy()
        f(((n + 255) // 256,), (256,), (np.int32(n), np.float32(3), x, y))
        want = y0.copy()
        want[:n] = 3 * x[:n] + y0[:n]
        np.testing.assert_allclose(y, want, rtol=1e-6)


@pytest.mark.parametrize("n", [100, 512, 777])
def test_early_exit(mod, n):
    x = np.arange(1024, dtype=np.float32)
    y = np.empty(1024, np.float32)
    f = mod.get_function("early_exit")
    for got in _twice(lambda: f((4,), (256,), (np.int32(n), x, y)), y):
        want = np.full(1024, -7, np.float32)
        want[:n] = 2 * x[:n] + 1
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("base,n", [(0xFFFFFF00, 0xFFFFFFF0), (0xFFFFFFC0, 0x20), (5, 300),
                                    (0x7FFFFFC0, 0x80000010)])
def test_unsigned_wrap(mod, base, n):
    src = np.arange(1024, dtype=np.int32) + 100
    out = np.empty(1024, np.int32)
    f = mod.get_function("unsigned_guard")
    i = (np.uint64(base) + np.arange(1024, dtype=np.uint64)) % np.uint64(1 << 32)
    want = np.where(i < np.uint64(n), src, -7).astype(np.int32)
    for got in _twice(lambda: f((4,), (256,), (np.uint32(base), np.uint32(n), src, out)), out):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("base,n", [(0x7FFFFF00, 0x7FFFFFF0), (0x7FFFFFC0, -5), (-300, 200),
                                    (-(1 << 31), -(1 << 31) + 700)])
def test_signed_wrap(mod, base, n):
    src = np.arange(1024, dtype=np.int32) + 100
    out = np.empty(1024, np.int32)
    f = mod.get_function("signed_wrap")
    i = ((np.int64(base) + np.arange(1024) + (1 << 31)) % (1 << 32) - (1 << 31))
    want = np.where(i < n, src, -7).astype(np.int32)
    for got in _twice(lambda: f((4,), (256,), (np.int32(base), np.int32(n), src, out)), out):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n,grid", [(128 * 6 * 5, 6), (128 * 6 * 5 + 77, 6), (100, 3),
                                    (5000, 7)])
def test_grid_stride_sum(mod, n, grid):
    x = np.arange(n, dtype=np.float32) % 7
    part = np.empty(grid, np.float32)
    f = mod.get_function("grid_stride_sum")
    idx = np.arange(n)
    want = np.array([x[(idx // 128) % grid == b].sum() for b in range(grid)], np.float32)
    for got in _twice(lambda: f((grid,), (128,), (x, part, np.int32(n))), part):
        np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("lo,hi,steps", [(0, 127, 3), (5, 120, 4), (-10, 200, 2), (0, 127, 0),
                                         (60, 50, 2)])
def test_window(mod, lo, hi, steps):
    x = np.arange(3 * 128, dtype=np.int32)
    add = (np.arange(max(steps, 1) * 128, dtype=np.int32) * 7) % 1000
    out = np.empty_like(x)
    f = mod.get_function("window")
    want = x.reshape(3, 128).copy()
    tx = np.arange(128)
    for s in range(steps):
        inside = (tx >= lo + s) & (tx <= hi - s) & (tx > 2 * s)
        want[:, inside] += add[s * 128:(s + 1) * 128][inside]
    for got in _twice(lambda: f((3,), (128,), (x, add, out, np.int32(lo), np.int32(hi),
                                              np.int32(steps))), out):
        np.testing.assert_array_equal(got.reshape(3, 128), want)


def test_explain_reports_range_branches(tmp_path, capsys):
    from cpuify.cli.main import main
    src = tmp_path / "k.cu"
    src.write_text(SRC)
    assert main(["explain", "--block", "128", "--kernel", "grid_stride_sum", str(src)]) == 0
    out = capsys.readouterr().out
    assert "segment from sync 1: blocks whose threads all agree on the branch" in out
    assert "where every thread stops at sync 1 (no states stored)" in out
    assert main(["explain", "--kernel", "grid_stride_sum", str(src)]) == 0
    assert "agree" not in capsys.readouterr().out      # generic code: none


@pytest.mark.parametrize("lo,hi,steps", [(0, 127, 5), (2, 127, 4), (0, 100, 3), (5, 60, 6),
                                         (0, 127, 0), (200, 300, 2)])
def test_neighbours_clamped_inside_the_interval(mod, lo, hi, steps):
    nb = 4
    x = (np.arange(nb * 128, dtype=np.int32) * 37) % 101
    add = (np.arange(max(steps, 1) * 128, dtype=np.int32) * 7) % 13
    out = np.empty_like(x)
    f = mod.get_function("neighbours")
    want = x.reshape(nb, 128).copy()
    tx = np.arange(128)
    for blk in range(nb):
        vmin, vmax = max(lo - blk, 0), min(hi, 127)
        # (clipped for NumPy: no thread inside the interval reads past the array)
        w, e = np.minimum(np.maximum(tx - 1, vmin), 127), np.minimum(tx + 1, vmax)
        a = want[blk]
        for s in range(steps):
            inside = (tx >= vmin) & (tx <= vmax) & (tx > s) & (tx < 127 - s)
            nxt = a.copy()
            nxt[inside] = np.minimum(a[w], a[e])[inside] + add[s * 128:(s + 1) * 128][inside]
            a = nxt
        want[blk] = a
    for got in _twice(lambda: f((nb,), (128,), (x, add, out, np.int32(lo), np.int32(hi),
                                                np.int32(steps))), out):
        np.testing.assert_array_equal(got.reshape(nb, 128), want)


# base, n: all guards hold in every block; the second fails in the last blocks; the sums
# wrap past 2^32 - 1 (for the second guard only, then for both) in some blocks
@pytest.mark.parametrize("base,n", [(0, 4 * 256), (0, 4 * 256 - 100), (0, 3 * 256 + 50),
                                    (0xFFFFFF00 - 3 * 256, 0xFFFFFFFF),
                                    (0xFFFFFFC0 - 2 * 256, 0xFFFFFFF0), (100, 0x400)])
def test_two_guards(mod, base, n):
    nb = 4
    x = (np.arange(nb * 256 + 128, dtype=np.float32) % 17) + 1
    part = np.empty(nb, np.float32)
    f = mod.get_function("two_guards")
    tid = np.arange(128, dtype=np.uint64)
    want = np.zeros(nb, np.float32)
    for blk in range(nb):
        i = (np.uint64(base) + np.uint64(blk * 256) + tid) % np.uint64(1 << 32)
        j = (i + np.uint64(128)) % np.uint64(1 << 32)
        k = blk * 256 + tid.astype(np.int64)
        v = np.where(i < np.uint64(n), x[k], 0) + np.where(j < np.uint64(n), x[k + 128], 0)
        want[blk] = v.sum()
    for got in _twice(lambda: f((nb,), (128,), (np.uint32(base), x, part, np.uint32(n))), part):
        np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("base,n", [(0, 5000), (0, 700), (-300, 200), (0x7FFFFF00, 0x7FFFFFF0),
                                    (-(1 << 31) + 10, (1 << 31) - 1)])
def test_two_signed_guards(mod, base, n):
    src = np.arange(1024, dtype=np.int32) + 100
    out = np.empty(1024, np.int32)
    f = mod.get_function("two_signed_guards")
    i = (np.int64(base) + np.arange(1024) + (1 << 31)) % (1 << 32) - (1 << 31)
    j = (i - 64 + (1 << 31)) % (1 << 32) - (1 << 31)
    want = np.where(i < n, src, -7).astype(np.int64)
    want = np.where(j >= -np.int64(n), want + 1000, want)
    want = ((want + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)
    for got in _twice(lambda: f((4,), (256,), (np.int32(base), np.int32(n), src, out)), out):
        np.testing.assert_array_equal(got, want)


def test_two_guards_copy_loads_without_masks(ptx):
    # the copy of the reduction's first phase: both loads plain vector loads (a masked load
    # for the second guard, or a gather for its address, made it 2x slower)
    from cpuify.codegen import jit
    gen = ModuleCodegen(ptx, *jit.triple_and_layout())
    gen.add_kernel(lift_optimized(ptx, ptx.functions["two_guards"], (128, 1, 1)), (128, 1, 1))
    text = str(jit.optimize(gen.llvm_text()))
    assert not re.search(r"call <[0-9]+ x float> @llvm\.masked\.gather", text)
    loops = [blk for blk in text.split("\n\n") if re.match(r"vector\.body[0-9]*:", blk)]
    assert any(len(re.findall(r"= load <[0-9]+ x float>", blk)) >= 2 and "llvm.masked" not in blk
               for blk in loops), text


@pytest.mark.parametrize("K", [70, 100, 64, 33, 1])
def test_guard_on_induction_variable_across_the_back_edge(mod, K):
    # (the copy was taken for the last partial tile when the check used the previous
    # iteration's ka: the loads past K read A instead of the pad)
    A = np.arange(1, 257, dtype=np.float32)
    want = np.zeros(32)
    for t in range((K + 31) // 32):
        ka = t * 32 + np.arange(32)
        v = np.where(ka < K, A[np.minimum(ka, 255)], -1000.0)
        want += v[(np.arange(32) + 1) & 31]
    out = np.empty(64, np.float32)
    f = mod.get_function("tile_sums")
    for got in _twice(lambda: f((2,), (32,), (A, out, np.int32(K), np.float32(-1000))), out):
        np.testing.assert_allclose(got, np.tile(want, 2), rtol=1e-6)
