"""fuse-block-runs (transforms/block_runs.py, api/block_runs.py): a run of adjacent blocks of
a barrier-free kernel runs as one wider block in code specialized for the block shape.
Checked: results against NumPy at sizes that leave partial blocks and partial runs (nx not
a multiple of 32 or of the run's width, grids smaller than the run asked for), kernels that
read blockIdx/threadIdx apart (the T % B, run * R + T / B path) and the global index path;
the rewrite in the IR; the runs the launcher asks for; must-not-fire kernels (barrier,
shared memory, atomics, shuffles, volatile) keep one block per call and stay right."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import cpuify
from cpuify.api.block_runs import choose_block_run, run_grid
from cpuify.compiler import compile_specialized, lift_and_optimize
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.ir.core import OpResult
from cpuify.ir.printer import print_ops
from cpuify.transforms.pass_manager import PipelineOptions

MARCH = r'''
// laplace3d's shape: 2D blocks, each thread marches up its z column
extern "C" __global__ void march(const float *u, float *v, int nx, int ny, int nz) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= nx || j >= ny) return;
    const size_t plane = (size_t)nx * ny;
    size_t at = (size_t)j * nx + i;
    float below = u[at];
    v[at] = below;
    for (int k = 1; k < nz; k++) {
        at += plane;
        const float here = u[at];
        const float west = i > 0 ? u[at - 1] : 0.0f;
        v[at] = here + 0.5f * below + 0.25f * west;
        below = here;
    }
}
'''

IDS = r'''
// blockIdx and threadIdx read apart; blockDim and gridDim as launched (bw, gw)
extern "C" __global__ void ids(int *out, const int *add, int w, unsigned bw, unsigned gw,
                               int reps) {
    int x = threadIdx.x + blockIdx.x * blockDim.x;
    int y = threadIdx.y + blockIdx.y * blockDim.y;
    if (x >= w) return;
    int wrong = (blockDim.x != bw) * (1 << 30) + (gridDim.x != gw) * (1 << 29);
    int v = blockIdx.x * 100000 + blockIdx.y * 1000 + threadIdx.x * 10 + threadIdx.y + wrong;
    for (int k = 0; k < reps; k++)
        v += add[k * w + x];
    out[y * w + x] = v;
}
'''

REFUSED = {
    "barrier": r'''
extern "C" __global__ void k(float *a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? a[i] : 0.0f;
    __syncthreads();
    for (int r = 0; r < 2; r++) if (i < n) a[i] = v + r;
}''',
    "shared memory": r'''
extern "C" __global__ void k(float *a, int n) {
    __shared__ float s[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (int r = 0; r < 2; r++) { s[threadIdx.x] = i; if (i < n) a[i] += s[threadIdx.x]; }
}''',
    "atom": r'''
extern "C" __global__ void k(float *a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (int r = 0; r < 2; r++) if (i < n) atomicAdd(&a[i % 7], 1.0f);
}''',
    "warp": r'''
extern "C" __global__ void k(float *a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? a[i] : 0.0f;
    for (int r = 0; r < 2; r++) v += __shfl_down_sync(0xffffffffu, v, 1);
    if (i < n) a[i] = v;
}''',
    "volatile": r'''
extern "C" __global__ void k(float *a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (int r = 0; r < 2; r++) if (i < n) ((volatile float *)a)[i] += 1.0f;
}''',
}


def _march_reference(u: np.ndarray) -> np.ndarray:
    v = np.empty_like(u)
    v[0] = u[0]
    west = np.zeros_like(u)
    west[:, :, 1:] = u[:, :, :-1]
    v[1:] = u[1:] + np.float32(0.5) * u[:-1] + np.float32(0.25) * west[1:]
    return v


@pytest.fixture
def fresh_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv("CPUIFY_BLOCK_RUNS", raising=False)
    monkeypatch.delenv("CPUIFY_SPECIALIZE", raising=False)
    return monkeypatch


@pytest.mark.parametrize("nx,ny,nz", [(200, 200, 5), (100, 70, 4), (40, 9, 3), (33, 1, 2),
                                      (300, 20, 3)])
def test_march_matches_numpy_with_runs(fresh_env: pytest.MonkeyPatch, nx: int, ny: int,
                                       nz: int) -> None:
    """Partial blocks (nx % 32), partial runs, grids smaller than the run asked for (40 x 9:
    2 x 2 blocks), one row of blocks, a grid row longer than one run (300: 10 blocks)."""
    fn = cpuify.RawModule(code=MARCH).get_function("march")
    u = np.random.default_rng(nx).random((nz, ny, nx), dtype=np.float32)
    grid, block = (-(-nx // 32), -(-ny // 8)), (32, 8)
    for _ in range(3):      # the second launch of a shape runs specialized (fused) code
        v = np.full_like(u, np.nan)
        fn(grid, block, (u, v, np.int32(nx), np.int32(ny), np.int32(nz)))
        np.testing.assert_allclose(v, _march_reference(u), rtol=1e-6)
    assert fn.block_run_launches == 2
    assert fn.last_block_run == choose_block_run((32, 8, 1), grid + (1,), cpuify.num_threads())
    assert fn.last_block_run != (1, 1)


@pytest.mark.parametrize("block,nx", [((16, 4), 77), ((64, 2), 77), ((8, 8), 77), ((128, 1), 300)])
def test_march_block_shapes(fresh_env: pytest.MonkeyPatch, block: tuple[int, int], nx: int) -> None:
    """Other block shapes (narrow and wide rows, 1D), sizes that are multiples of none."""
    ny, nz = 13, 3
    fn = cpuify.RawModule(code=MARCH).get_function("march")
    u = np.random.default_rng(block[0]).random((nz, ny, nx), dtype=np.float32)
    grid = (-(-nx // block[0]), -(-ny // block[1]))
    for _ in range(2):
        v = np.full_like(u, np.nan)
        fn(grid, block, (u, v, np.int32(nx), np.int32(ny), np.int32(nz)))
    np.testing.assert_allclose(v, _march_reference(u), rtol=1e-6)
    assert fn.block_run_launches == 1 and fn.last_block_run != (1, 1)


def test_generic_and_unfused_code_agree(fresh_env: pytest.MonkeyPatch) -> None:
    """The same launches with runs off (CPUIFY_BLOCK_RUNS=0) and with generic code only
    (CPUIFY_SPECIALIZE=0): no run is fused, the results are the same."""
    nx, ny, nz = 100, 30, 4
    u = np.random.default_rng(3).random((nz, ny, nx), dtype=np.float32)
    outs = []
    for env in ({}, {"CPUIFY_BLOCK_RUNS": "0"}, {"CPUIFY_SPECIALIZE": "0"}):
        for k, val in env.items():
            fresh_env.setenv(k, val)
        fn = cpuify.RawModule(code=MARCH).get_function("march")
        for _ in range(2):
            v = np.zeros_like(u)
            fn((4, 4), (32, 8), (u, v, np.int32(nx), np.int32(ny), np.int32(nz)))
        outs.append(v)
        assert fn.block_run_launches == (1 if not env else 0)
        for k in env:
            fresh_env.delenv(k)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])
    np.testing.assert_allclose(outs[0], _march_reference(u), rtol=1e-6)


@pytest.mark.parametrize("w,h,block", [(70, 20, (32, 4)), (13, 7, (8, 2)), (600, 3, (64, 1)),
                                     (70, 8, (24, 3))])
def test_block_and_thread_indices_in_a_run(fresh_env: pytest.MonkeyPatch, w: int, h: int,
                                           block: tuple[int, int]) -> None:
    """blockIdx/threadIdx read apart in a fused run are the unfused block's, blockDim and
    gridDim the launch's (small blocks, 1D blocks, a block of 24 x 3: not powers of two)."""
    fn = cpuify.RawModule(code=IDS).get_function("ids")
    grid = (-(-w // block[0]), -(-h // block[1]))
    rows = grid[1] * block[1]
    for _ in range(2):
        out = np.full((rows, w), -1, np.int32)
        fn(grid, block, (out, np.ones((3, w), np.int32), np.int32(w), np.uint32(block[0]),
                         np.uint32(grid[0]), np.int32(3)))
    y, x = np.mgrid[0:rows, 0:w]
    want = (x // block[0]) * 100000 + (y // block[1]) * 1000 + (x % block[0]) * 10 + y % block[1] + 3
    np.testing.assert_array_equal(out, want)
    assert fn.block_run_launches == 1 and fn.last_block_run != (1, 1)


WIDE = r'''
// the global index in 64 bits: mul.wide(blockIdx, blockDim) + cvt(threadIdx)
extern "C" __global__ void wide(const float *a, float *b, int n, int reps) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    for (int r = 0; r < reps; r++) b[i + (size_t)r * n] = a[i + (size_t)r * n] * 2.0f + r;
}
'''


def test_64_bit_global_index(fresh_env: pytest.MonkeyPatch) -> None:
    """`(size_t)blockIdx.x * blockDim.x + threadIdx.x` becomes run * R * B + T in 64 bits:
    the loop's accesses stay consecutive, the run is fused (a grid of 40 blocks: one run)."""
    fn = cpuify.RawModule(code=WIDE).get_function("wide")
    n, reps = 1250, 3
    a = np.random.default_rng(5).random(n * reps, dtype=np.float32)
    for _ in range(2):
        b = np.zeros_like(a)
        fn((-(-n // 32),), (32,), (a, b, np.int32(n), np.int32(reps)))
    want = a * 2 + np.repeat(np.arange(reps, dtype=np.float32), n)
    np.testing.assert_array_equal(b, want)
    assert fn.block_run_launches == 1 and fn.last_block_run[0] > 1


LOCAL = r'''
// a per-thread local array indexed at run time (local memory): each fused thread its own
extern "C" __global__ void local_rows(const int *a, int *b, int n, int reps, int pick) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int j = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= n) return;
    int keep[8];
    for (int r = 0; r < 8; r++) keep[r] = a[j * n + i] * r + i;
    int s = 0;
    for (int r = 0; r < reps; r++) s += a[(j + r) * n + i] + keep[(pick + r) & 7];
    b[j * n + i] = s;
}
'''


def test_local_memory_per_fused_thread(fresh_env: pytest.MonkeyPatch) -> None:
    """Local memory: every thread of a fused run has its own (the scratch is sized for the
    fused block), results as NumPy computes them."""
    fn = cpuify.RawModule(code=LOCAL).get_function("local_rows")
    n, rows, reps, pick = 70, 12, 3, 5
    a = np.random.default_rng(7).integers(0, 100, (rows + reps, n)).astype(np.int32)
    for _ in range(2):
        b = np.zeros((rows, n), np.int32)
        fn((-(-n // 32), rows // 4), (32, 4), (a, b, np.int32(n), np.int32(reps), np.int32(pick)))
    i = np.arange(n)[None, :]
    want = sum(a[r:r + rows] + a[:rows] * ((pick + r) & 7) + i for r in range(reps))
    np.testing.assert_array_equal(b, want)
    assert fn.block_run_launches == 1 and fn.last_block_run != (1, 1)


def test_rewrite_in_the_ir() -> None:
    """The pass's IR: the fused thread index split by the block size, the guard of threads
    past the grid, the global index as run * R * B + T, the fused shape recorded."""
    module = parse_ptx(compile_to_ptx(MARCH).ptx)
    lifted, result = lift_and_optimize(module, module.functions["march"],
                                       PipelineOptions(passes=("fuse-block-runs",)),
                                       (32, 8, 1), (), (7, 4))
    assert result.counts["fuse-block-runs"] == 28
    assert lifted.op.attributes["block_run"] == [7, 4]
    assert lifted.op.attributes["block_dims"] == [224, 32, 1]
    text = print_ops([lifted.op])
    assert text.count('"ptx.rem"') == 2 and text.count('"ptx.div"') == 2
    assert '"%ntid.x"' not in text and text.count('"%nctaid.') == 2
    # i = ctaid.x * 32 + tid.x and j = ctaid.y * 8 + tid.y became run * R * B + T
    sums = [op for op in lifted.op.walk() if op.name == "ptx.add" and any(
        isinstance(v, OpResult) and v.op.name == "upir.special" and
        str(v.op.attributes["reg"]).startswith("%tid") for v in op.operands)]
    assert len(sums) == 2
    specials = [line for line in text.splitlines() if '"upir.special"' in line]
    assert len(specials) == 6          # tid.x/y, ctaid.x/y, nctaid.x/y, once each
    # asked for nothing: nothing changes
    lifted, result = lift_and_optimize(module, module.functions["march"],
                                       PipelineOptions(passes=("fuse-block-runs",)), (32, 8, 1))
    assert result.counts["fuse-block-runs"] == 0 and "block_run" not in lifted.op.attributes
    assert lifted.op.attributes["block_runs_possible"]


@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_must_not_fire(fresh_env: pytest.MonkeyPatch, kind: str) -> None:
    """Barriers, shared memory, atomics, warp shuffles, volatile accesses: one block per call
    (the code's block_run stays (1, 1), with the reason), and launches stay right."""
    src = REFUSED[kind]
    ptx = compile_to_ptx(src).ptx
    spec = compile_specialized(ptx, "k", (32, 1, 1), block_run=(8, 1))
    assert spec.block_run == (1, 1)
    # the code for the shape says so already: the launcher asks for no variant
    assert not compile_specialized(ptx, "k", (32, 1, 1)).block_runs_possible
    assert kind.split()[0] in spec.block_run_refused.lower() or \
        (kind == "barrier" and "barrier" in spec.block_run_refused), spec.block_run_refused
    fn = cpuify.RawModule(code=src).get_function("k")
    n = 1000
    a = np.arange(n, dtype=np.float32)
    for _ in range(2):
        fn((-(-n // 32),), (32,), (a, np.int32(n)))
    assert fn.block_run_launches == 0


UNPROFITABLE = {
    # a row per thread (the row softmax): threads `cols` elements apart
    "strided": r'''
extern "C" __global__ void k(const float *x, float *y, int rows, int cols) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    float s = 0.0f;
    for (int c = 0; c < cols; c++) s += x[(size_t)row * cols + c];
    y[row] = s;
}''',
    # the index built as (base + r * n) + threadIdx.x: fused, its pieces T % B and
    # run * R + T / B would hide that the access stays consecutive
    "hidden index": r'''
extern "C" __global__ void k(const float *x, float *y, int rows, int cols) {
    int base = blockIdx.x * blockDim.x;
    for (int r = 0; r < cols; r++) {
        int i = (base + r * rows) + threadIdx.x;
        if (threadIdx.x + base < rows) y[i] = x[i] + 1.0f;
    }
}''',
    # no loop: nothing to gain
    "no loop": r'''
extern "C" __global__ void k(const float *x, float *y, int rows, int cols) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows) y[i] = 2.0f * x[i] + cols;
}''',
}


@pytest.mark.parametrize("kind", sorted(UNPROFITABLE))
def test_not_where_it_does_not_pay(kind: str) -> None:
    """Kernels whose loops walk memory apart from the neighbouring threads', or that have no
    loop, are not fused (the row softmax ran 28% slower fused)."""
    ptx = compile_to_ptx(UNPROFITABLE[kind]).ptx
    spec = compile_specialized(ptx, "k", (128, 1, 1), block_run=(2, 1))
    assert spec.block_run == (1, 1)
    assert not compile_specialized(ptx, "k", (128, 1, 1)).block_runs_possible
    assert {"strided": "strided across threadIdx.x", "no loop": "no loop with accesses consecutive",
            "hidden index": "consecutive across threadIdx.x would not be"}[kind] in \
        spec.block_run_refused, spec.block_run_refused


def test_runs_asked_for() -> None:
    """Whole grid rows when the fused block stays within 8192 threads, else the fewest runs
    of equal length; block rows up to 8192 threads; nothing for one block."""
    assert choose_block_run((32, 8, 1), (7, 25, 1)) == (7, 4)
    assert choose_block_run((32, 8, 1), (13, 50, 1)) == (13, 2)
    assert choose_block_run((32, 8, 1), (40, 50, 1)) == (20, 1)      # 2 runs of 20
    assert choose_block_run((256, 1, 1), (4000, 1, 1)) == (32, 1)
    assert choose_block_run((32, 8, 1), (200, 9, 1)) == (29, 1)    # 7 runs, 3 blocks idle
    assert choose_block_run((32, 8, 1), (4, 9, 1)) == (4, 5)
    assert choose_block_run((1024, 1, 1), (3, 5, 1)) == (3, 2)
    assert choose_block_run((32, 1, 1), (1, 1, 1)) == (1, 1)
    assert choose_block_run((16, 16, 1), (2, 3, 1)) == (2, 3)
    assert run_grid((13, 50, 2), (7, 4)) == (2, 13, 2)
    # at least 6 runs per worker thread where the y run can leave them
    assert choose_block_run((32, 8, 1), (7, 25, 1), workers=2) == (7, 2)
    assert choose_block_run((32, 8, 1), (7, 25, 1), workers=16) == (7, 1)
    assert choose_block_run((32, 8, 1), (13, 50, 1), workers=2) == (13, 2)
    # at most 1 MB of scratch (laplace3d: 128 bytes a thread, 8192 threads)
    assert choose_block_run((32, 8, 1), (7, 25, 1), per_thread=128) == (7, 4)
    assert choose_block_run((32, 8, 1), (7, 25, 1), per_thread=1024) == (4, 1)


def test_explain_shows_the_run(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "march.cu"
    src.write_text(MARCH)
    out = subprocess.run([sys.executable, "-m", "cpuify.cli.main", "explain", "--block", "32,8",
                          "--grid", "7,25", str(src)], capture_output=True, text=True, check=True)
    assert "blocks fused for the grid (7, 25, 1): runs of 7 x 4 blocks as one block of " \
           "224 x 32 x 1 threads, 1 x 7 x 1 runs" in out.stdout
    out = subprocess.run([sys.executable, "-m", "cpuify.cli.main", "explain", "--block", "32,8",
                          "--grid", "7,25", "--disable-pass", "fuse-block-runs", str(src)],
                         capture_output=True, text=True, check=True)
    assert "blocks not fused (runs of 7 x 4 asked for): fuse-block-runs is off" in out.stdout
    out = subprocess.run([sys.executable, "-m", "cpuify.cli.main", "explain", "--block", "32,8",
                          str(src)], capture_output=True, text=True, check=True)
    assert "blocks may run fused" in out.stdout


def test_fault_names_the_run(fresh_env: pytest.MonkeyPatch) -> None:
    """A fault in a fused run names the blocks of the run (the runtime knows the run only)."""
    src = r'''
extern "C" __global__ void k(float *a, float *bad, int n, int reps) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (int r = 0; r < reps; r++) {
        if (i == n - 1 && r == 1) bad[0] = 1.0f;
        if (i < n) a[i] += 1.0f;
    }
}'''
    fn = cpuify.RawModule(code=src).get_function("k")
    n = 320
    a = np.zeros(n, np.float32)
    fn((10,), (32,), (a, a, np.int32(n), np.int32(2)))
    fn((10,), (32,), (a, a, np.int32(n), np.int32(2)))
    assert fn.block_run_launches == 1
    with pytest.raises(cpuify.errors.IllegalAddressError, match=r"block \(0\.\.9, 0, 0\)"):
        fn((10,), (32,), (a, np.uint64(0), np.int32(n), np.int32(2)))
