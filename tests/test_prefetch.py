"""Interchanged loops prefetch ahead (KernelCodegen.iteration_prefetches): in code
specialized for a block shape, each pass of a grid-stride loop prefetches the lines its
global accesses will touch a few iterations later, since the block's next chunk of a
grid-stride loop sits a whole grid's worth of elements further on, a new page in each
iteration.  Loops with barriers whose counter crosses a barrier do the same for the tiles
or rows their next iterations load (matrixMul's tiles, pathfinder's rows), and interchanged
block-uniform loops whose rows are short (laplace3d's planes).  Checked: which
accesses are prefetched, and that kernels whose prefetches run past the arrays' ends (the
last iterations, tiny arrays, huge strides) still match NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.codegen.llvm_gen import KernelCodegen, ModuleCodegen
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.compiler import lift_and_optimize, lift_optimized
from cpuify.transforms.pass_manager import PipelineOptions

SRC = r'''
extern "C" __global__ void axpy_gs(int n, float a, const float *x, float *y) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = a * x[i] + y[i];
}
// a sum carried across iterations, then a block reduction and an atomic
extern "C" __global__ void sum_gs(const float *x, float *out, int n) {
    __shared__ float part[256];
    float s = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        s += x[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, part[0]);
}
// a gather through an index array: only the index load's address follows the counter
extern "C" __global__ void gather_gs(const int *idx, const float *src, float *dst, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        dst[i] = src[idx[i]];
}
// tiles of A and B through shared memory, the CUDA samples' matrixMul: the loop's counter
// and the tile pointers cross the barriers
extern "C" __global__ void tiled_mm(float *C, const float *A, const float *B, int wA, int wB) {
    __shared__ float As[16][16];
    __shared__ float Bs[16][16];
    int tx = threadIdx.x, ty = threadIdx.y;
    int aBegin = wA * 16 * blockIdx.y, aEnd = aBegin + wA - 1, bBegin = 16 * blockIdx.x;
    float c = 0.0f;
    for (int a = aBegin, b = bBegin; a <= aEnd; a += 16, b += 16 * wB) {
        As[ty][tx] = A[a + wA * ty + tx];
        Bs[ty][tx] = B[b + wB * ty + tx];
        __syncthreads();
        for (int k = 0; k < 16; ++k)
            c += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    C[wB * 16 * blockIdx.y + 16 * blockIdx.x + wB * ty + tx] = c;
}
// one row per iteration, rows a whole width apart: a row of `rows` iterations, each
// reading the row below its result
extern "C" __global__ void rows_down(const float *w, float *out, int cols, int rows) {
    __shared__ float cur[256];
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    cur[threadIdx.x] = x < cols ? w[x] : 0.0f;
    __syncthreads();
    for (int r = 1; r < rows; r++) {
        float left = cur[threadIdx.x > 0 ? threadIdx.x - 1 : 0];
        float v = x < cols ? w[r * cols + x] + 0.5f * (cur[threadIdx.x] + left) : 0.0f;
        __syncthreads();
        cur[threadIdx.x] = v;
        __syncthreads();
    }
    if (x < cols) out[x] = cur[threadIdx.x];
}
// a 2D block marching up z columns (the laplace3d workload's shape): the z loop is
// block-uniform (interchange-uniform-loops), each iteration a plane (nx * ny floats) on
extern "C" __global__ void march_z(const float *u, float *v, int nx, int ny, int nz) {
    int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= nx || j >= ny) return;
    size_t plane = (size_t)nx * ny, at = (size_t)j * nx + i;
    float below = u[at], here = u[at + plane];
    v[at] = below;
    for (int k = 1; k < nz - 1; k++) {
        at += plane;
        float above = u[at + plane];
        float side = (i > 0 && i < nx - 1) ? u[at - 1] + u[at + 1] : 2.0f * here;
        float updown = (j > 0 && j < ny - 1) ? u[at - nx] + u[at + nx] : 2.0f * here;
        v[at] = (below + above + side + updown) * (1.0f / 6.0f);
        below = here;
        here = above;
    }
    v[at + plane] = here;
}
// no loop: nothing to prefetch
extern "C" __global__ void scale(float *y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] *= a;
}
'''


@pytest.fixture(scope="module")
def ptx():
    return parse_ptx(compile_to_ptx(SRC).ptx)


@pytest.fixture(scope="module")
def mod():
    return cpuify.RawModule(code=SRC)


def _prefetched(ptx, kernel, block, merge=True, by_row=False):
    """{resume: [(op name, number of probe threads, for writing)]} of the kernel
    specialized for `block` (merge: with merge-duplicate-threads): the prefetches issued
    after the thread loop, or (by_row) those each row of threads issues."""
    options = PipelineOptions(disabled=frozenset() if merge else frozenset({"merge-duplicate-threads"}))
    lifted = lift_and_optimize(ptx, ptx.functions[kernel], options)[0]
    kc = KernelCodegen(ModuleCodegen(ptx), lifted, block)
    return {r: [(op.name, len(probes), write) for op, probes, write in ops]
            for r, ops in (kc.row_prefetches if by_row else kc.prefetches).items()}


def test_which_accesses_are_prefetched(ptx):
    # x and y: 256 floats are 16 lines, probed at every 16th thread and the last; y is
    # loaded and stored at the same address: prefetched once, for writing
    assert _prefetched(ptx, "axpy_gs", (256, 1, 1)) == {
        1: [("ptx.ld", 17, False), ("ptx.ld", 17, True)]}
    assert _prefetched(ptx, "sum_gs", (256, 1, 1)) == {1: [("ptx.ld", 17, False)]}
    # idx[i] and dst[i] follow the counter; src[idx[i]] is an address read from memory
    assert _prefetched(ptx, "gather_gs", (128, 1, 1)) == {
        1: [("ptx.ld", 9, False), ("ptx.st", 9, True)]}
    # 2D blocks: every row of the block, two lines each (16 floats 4 bytes off a line);
    # axpy_gs never reads threadIdx.y, so by default its rows are duplicates that run once
    # (merge-duplicate-threads): one row is probed
    assert _prefetched(ptx, "axpy_gs", (16, 16, 1), merge=False) == {
        1: [("ptx.ld", 32, False), ("ptx.ld", 32, True)]}
    assert _prefetched(ptx, "axpy_gs", (16, 16, 1)) == {
        1: [("ptx.ld", 2, False), ("ptx.ld", 2, True)]}
    # at most MAX_PREFETCHES per pass: the first lines of wider rows
    assert KernelCodegen.MAX_PREFETCHES == 64
    assert _prefetched(ptx, "axpy_gs", (1024, 1, 1)) == {1: [("ptx.ld", 64, False)]}
    assert not _prefetched(ptx, "scale", (256, 1, 1))


def test_loops_with_barriers_prefetch_their_next_loads(ptx):
    kc = KernelCodegen(ModuleCodegen(ptx), lift_optimized(ptx, ptx.functions["tiled_mm"], (16, 16, 1)),
                       (16, 16, 1))
    # the segment after the second barrier loads the next tiles (the counter and the tile
    # pointers cross it); every row of both tiles, two probes per row (a 64-byte row may
    # straddle a line); the segment after the first barrier loads nothing global
    assert {r: [(op.name, len(p), w) for op, p, w in ops] for r, ops in kc.prefetches.items()} \
        == {2: [("ptx.ld", 32, False), ("ptx.ld", 32, False)]}
    assert kc.prefetch_advance(2) == KernelCodegen.LOOP_PREFETCH_AHEAD
    assert all(kc.syncs[r].steps for r in range(2))
    # the row loop (unrolled by NVRTC: one load per copy of the body): the load of
    # w[r * cols + x], 16 lines of a 256-thread row (probed at every 16th thread and the last)
    found = _prefetched(ptx, "rows_down", (256, 1, 1))
    assert found and all(v == [("ptx.ld", 17, False)] for v in found.values())


def test_uniform_loops_prefetch_short_rows(ptx):
    """An interchanged block-uniform loop (march_z: 32 x 8 threads, one plane per
    iteration, 128-byte rows a page apart) prefetches its accesses' rows some iterations
    ahead, all of them (over MAX_PREFETCHES), neighbours at +-4 bytes with their row; a
    block 256 threads wide, whose rows the hardware prefetcher follows, prefetches
    nothing."""
    found = _prefetched(ptx, "march_z", (32, 8, 1), by_row=True)
    assert found
    probes = sum(n for ops in found.values() for _, n, _ in ops)
    assert KernelCodegen.MAX_PREFETCHES < probes <= KernelCodegen.UNIFORM_LOOP_MAX_PREFETCHES
    # each access: 3 probes (the lines of 32 floats, and the last thread) in each of the 8
    # rows of threads; u[at + 1] goes with u[at - 1] (8 bytes apart, one row of lines);
    # the stores to v for writing
    for ops in found.values():
        assert all(n == 24 for _, n, _ in ops)
        assert ("ptx.st", 24, True) in ops
    assert not _prefetched(ptx, "march_z", (256, 1, 1))
    assert not _prefetched(ptx, "march_z", (256, 1, 1), by_row=True)


def test_uniform_loop_passes_prefetch_by_rows_one_pass_ahead(ptx):
    """A pass of an interchanged block-uniform loop prefetches hundreds of lines (march_z:
    8 rows x 3 lines per access): each row of threads issues its own rows' lines after it
    ran, one pass ahead (at the pass's end, all together, they stalled it on the L1's fill
    buffers).  Not for the passes of a grid-stride loop (one long row, 17 lines: after
    the thread loop, 4 passes ahead) or a loop with barriers (its distance kept)."""
    def kc_for(kernel, block):
        lifted = lift_and_optimize(ptx, ptx.functions[kernel], PipelineOptions())[0]
        return KernelCodegen(ModuleCodegen(ptx), lifted, block)
    march = kc_for("march_z", (32, 8, 1))
    assert march.row_prefetches and not march.prefetches
    assert {march.prefetch_advance(r) for r in march.row_prefetches} == \
        {KernelCodegen.UNIFORM_LOOP_PREFETCH_AHEAD} == {1}
    axpy = kc_for("axpy_gs", (256, 1, 1))
    assert axpy.prefetches and not axpy.row_prefetches
    assert {axpy.prefetch_advance(r) for r in axpy.prefetches} == \
        {KernelCodegen.PREFETCH_AHEAD} == {4}
    for kernel, block in (("tiled_mm", (16, 16, 1)), ("rows_down", (256, 1, 1))):
        kc = kc_for(kernel, block)
        assert kc.prefetches and not kc.row_prefetches, kernel
        assert {kc.prefetch_advance(r) for r in kc.prefetches} == \
            {KernelCodegen.LOOP_PREFETCH_AHEAD}, kernel


def _raw_llvm(tmp_path, capsys, kernel, block):
    from cpuify.cli.main import main
    src = tmp_path / "k.cu"
    src.write_text(SRC)
    assert main(["llvm", "--raw", "--block", block, "--kernel", kernel, str(src)]) == 0
    return capsys.readouterr().out


def _prefetch_blocks(llvm_text):
    """The names of the LLVM basic blocks that call llvm.prefetch (raw IR)."""
    found, block = [], None
    for line in llvm_text.splitlines():
        if line and not line.startswith((" ", "\t", ";", "define", "}", "declare")) and \
                line.rstrip().endswith(":"):
            block = line.rstrip()[:-1].strip('"')
        elif "call" in line and "llvm.prefetch" in line:
            found.append(block)
    return found


def test_row_prefetches_sit_in_the_row_loop(tmp_path, capsys):
    """In the LLVM IR (before optimization): march_z's prefetches are in the latch of the
    loop over rows of threads, one call per line of its row (3 per access), none after
    the thread loop; the grid-stride loop's are all after its thread loop."""
    march = _prefetch_blocks(_raw_llvm(tmp_path, capsys, "march_z", "32,8"))
    assert march and all(b.startswith("ty.latch") for b in march), set(march)
    assert len(march) % 3 == 0
    axpy = _prefetch_blocks(_raw_llvm(tmp_path, capsys, "axpy_gs", "256"))
    assert axpy and not any(b.startswith("ty.latch") for b in axpy), set(axpy)


@pytest.mark.parametrize("nx,ny,nz,block", [(100, 70, 45, (32, 8)), (33, 9, 2, (32, 8)),
                                            (40, 17, 3, (32, 8)), (300, 5, 20, (256, 1))])
def test_march_z_matches_numpy(mod, nx, ny, nz, block):
    u = np.random.default_rng(nx).random((nz, ny, nx), dtype=np.float32)
    ref = u.astype(np.float64).copy()
    c = u.astype(np.float64)
    side = np.empty_like(c[1:-1])
    side[:] = 2.0 * c[1:-1]
    side[:, :, 1:-1] = c[1:-1, :, :-2] + c[1:-1, :, 2:]
    updown = np.empty_like(c[1:-1])
    updown[:] = 2.0 * c[1:-1]
    updown[:, 1:-1, :] = c[1:-1, :-2, :] + c[1:-1, 2:, :]
    ref[1:-1] = (c[:-2] + c[2:] + side + updown) / 6.0
    f = mod.get_function("march_z")
    grid = (-(-nx // block[0]), -(-ny // block[1]))
    for _ in range(3):              # generic code, then the specialized block shape
        v = np.zeros_like(u)
        f(grid, block, (u, v, np.int32(nx), np.int32(ny), np.int32(nz)))
        np.testing.assert_allclose(v, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [16, 48, 256])
def test_tiled_mm_matches_numpy(mod, n):
    rng = np.random.default_rng(n)
    A = rng.random((n, n), dtype=np.float32)
    B = rng.random((n, n), dtype=np.float32)
    f = mod.get_function("tiled_mm")
    for _ in range(2):
        C = np.zeros((n, n), np.float32)
        f((n // 16, n // 16), (16, 16), (C, A, B, np.int32(n), np.int32(n)))
        np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-4)


@pytest.mark.parametrize("cols,rows,block", [(1000, 7, 256), (300, 2, 128), (5000, 40, 256)])
def test_rows_down_matches_numpy(mod, cols, rows, block):
    w = np.random.default_rng(cols).random((rows, cols), dtype=np.float32)
    ref = w[0].astype(np.float64)
    for r in range(1, rows):
        left = np.concatenate([ref[:1], ref[:-1]])
        starts = np.arange(0, cols, block)
        left[starts] = ref[starts]              # thread 0 of each block reads itself
        ref = w[r] + 0.5 * (ref + left)
    f = mod.get_function("rows_down")
    for _ in range(2):
        out = np.zeros(cols, np.float32)
        f(((cols + block - 1) // block,), (block,), (w, out, np.int32(cols), np.int32(rows)))
        np.testing.assert_allclose(out, ref, rtol=1e-5)


def test_generic_code_prefetches_nothing(ptx):
    kc = KernelCodegen(ModuleCodegen(ptx), lift_optimized(ptx, ptx.functions["axpy_gs"]), None)
    assert kc.prefetches == {}


@pytest.mark.parametrize("n,grid,block", [(1, 1, 256), (1000, 2, 256), (70_001, 8, 128),
                                          (4096, 1, 32), (1 << 18, 64, 256)])
def test_axpy_matches_numpy(mod, n, grid, block):
    rng = np.random.default_rng(n)
    x = rng.random(n, dtype=np.float32)
    y0 = rng.random(n, dtype=np.float32)
    f = mod.get_function("axpy_gs")
    for _ in range(3):              # generic code, then the specialized block shape
        y = y0.copy()
        f((grid,), (block,), (np.int32(n), np.float32(2.5), x, y))
        np.testing.assert_allclose(y, 2.5 * x + y0, rtol=1e-6)


@pytest.mark.parametrize("n,grid", [(5, 3), (100_000, 16), (1 << 20, 64)])
def test_sum_matches_numpy(mod, n, grid):
    x = np.random.default_rng(7).random(n, dtype=np.float32)
    f = mod.get_function("sum_gs")
    out = np.zeros(1, np.float32)
    for _ in range(3):
        out[0] = 0
        f((grid,), (256,), (x, out, np.int32(n)))
        assert out[0] == pytest.approx(float(x.astype(np.float64).sum()), rel=1e-4)


def test_gather_matches_numpy(mod):
    n = 50_000
    rng = np.random.default_rng(3)
    idx = rng.integers(0, n, n).astype(np.int32)
    src = rng.random(n, dtype=np.float32)
    f = mod.get_function("gather_gs")
    for _ in range(3):
        dst = np.zeros(n, np.float32)
        f((4,), (128,), (idx, src, dst, np.int32(n)))
        np.testing.assert_array_equal(dst, src[idx])


def test_explain_reports_prefetches(tmp_path, capsys):
    from cpuify.cli.main import main
    src = tmp_path / "k.cu"
    src.write_text(SRC)
    assert main(["explain", "--block", "256", "--kernel", "axpy_gs", str(src)]) == 0
    out = capsys.readouterr().out
    assert "each pass prefetches 34 line(s)" in out and "4 iterations ahead" in out
    assert main(["explain", "--kernel", "axpy_gs", str(src)]) == 0
    assert "prefetches" not in capsys.readouterr().out      # generic code: none
