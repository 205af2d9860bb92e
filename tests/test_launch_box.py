"""Launching a box of blocks of a grid from Python (`Function._launch_box`, `_launch_packed`,
`_packed_params`): what the distributed engine runs on each rank.  The kernel sees the whole
grid; only the blocks of the box run; boxes that tile the grid do what one launch does."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import cpuify
from cpuify.errors import ArgumentError, ArgumentValueError, IllegalAddressError, KernelFailure

SRC = r'''
// per block: blockIdx + 1 and gridDim (thread 0 writes them); every thread counts itself
extern "C" __global__ void where(unsigned *idx, unsigned *dim, unsigned *threads) {
    unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        idx[3 * b] = blockIdx.x + 1; idx[3 * b + 1] = blockIdx.y + 1; idx[3 * b + 2] = blockIdx.z + 1;
        dim[3 * b] = gridDim.x; dim[3 * b + 1] = gridDim.y; dim[3 * b + 2] = gridDim.z;
    }
    atomicAdd(&threads[b], 1u);
}

// 5-point stencil over a row-major h x w image, 2-D blocks, a shared tile with a halo
#define T 8
extern "C" __global__ void stencil(const float *in, float *out, int w, int h, float c) {
    __shared__ float tile[T + 2][T + 2];
    int x = blockIdx.x * T + threadIdx.x, y = blockIdx.y * T + threadIdx.y;
    int tx = threadIdx.x + 1, ty = threadIdx.y + 1;
    float v = (x < w && y < h) ? in[y * w + x] : 0.0f;
    tile[ty][tx] = v;
    if (threadIdx.x == 0) tile[ty][0] = (x > 0 && y < h) ? in[y * w + x - 1] : 0.0f;
    if (threadIdx.x == T - 1) tile[ty][T + 1] = (x + 1 < w && y < h) ? in[y * w + x + 1] : 0.0f;
    if (threadIdx.y == 0) tile[0][tx] = (y > 0 && x < w) ? in[(y - 1) * w + x] : 0.0f;
    if (threadIdx.y == T - 1) tile[T + 1][tx] = (y + 1 < h && x < w) ? in[(y + 1) * w + x] : 0.0f;
    __syncthreads();
    if (x < w && y < h)
        out[y * w + x] = c * v + 0.25f * (tile[ty][tx - 1] + tile[ty][tx + 1]
                                          + tile[ty - 1][tx] + tile[ty + 1][tx]);
}

// faults (a write through NULL) in block (3, 2) only
extern "C" __global__ void fault_at(int *out, int *null_ptr) {
    if (blockIdx.x == 3 && blockIdx.y == 2) null_ptr[threadIdx.x] = 1;
    else out[blockIdx.y * gridDim.x + blockIdx.x] = 1;
}

// traps in block (1, 4)
extern "C" __global__ void trap_at(int *out) {
    if (blockIdx.x == 1 && blockIdx.y == 4) __trap();
    out[blockIdx.y * gridDim.x + blockIdx.x] = 1;
}

// each block waits for the block before it (a chained sum): blocks as fibers
extern "C" __global__ void chain(const int *in, volatile int *out, volatile int *flags) {
    int b = blockIdx.x;
    if (threadIdx.x == 0) {
        int prev = 0;
        if (b > 0) {
            while (flags[b - 1] == 0) { }
            prev = out[b - 1];
        }
        out[b] = prev + in[b];
        __threadfence();
        flags[b] = 1;
    }
}
'''


@pytest.fixture(scope="module")
def mod() -> cpuify.RawModule:
    return cpuify.RawModule(code=SRC)


def fn(mod: cpuify.RawModule, name: str):  # type: ignore[no-untyped-def]
    return mod.get_function(name).kernel


GRID = (5, 4, 3)
BLOCK = (4, 2, 1)


def run_where(mod: cpuify.RawModule, box) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    n = GRID[0] * GRID[1] * GRID[2]
    idx = np.zeros(3 * n, np.uint32)
    dim = np.zeros(3 * n, np.uint32)
    threads = np.zeros(n, np.uint32)
    fn(mod, "where")._launch_box(GRID, BLOCK, (idx, dim, threads), 0, box)
    return idx.reshape(GRID[2], GRID[1], GRID[0], 3), dim.reshape(GRID[2], GRID[1], GRID[0], 3), \
        threads.reshape(GRID[2], GRID[1], GRID[0])


@pytest.mark.parametrize("box", [((1, 4), (2, 4), (0, 2)), ((0, 5), (0, 4), (2, 3)),
                                 ((4, 5), (0, 1), (1, 2)), ((0, 5), (0, 4), (0, 3))])
@pytest.mark.parametrize("workers", [1, 0])
def test_only_the_box_runs_and_sees_the_whole_grid(mod: cpuify.RawModule, box, workers: int) -> None:  # type: ignore[no-untyped-def]
    cpuify.set_num_threads(workers)
    try:
        for _ in range(2):          # the generic code, then the code specialized for the block
            idx, dim, threads = run_where(mod, box)
            (x0, x1), (y0, y1), (z0, z1) = box
            inside = np.zeros(threads.shape, bool)
            inside[z0:z1, y0:y1, x0:x1] = True
            z, y, x = np.indices(threads.shape)
            np.testing.assert_array_equal(threads, np.where(inside, BLOCK[0] * BLOCK[1], 0))
            np.testing.assert_array_equal(idx[..., 0], np.where(inside, x + 1, 0))
            np.testing.assert_array_equal(idx[..., 1], np.where(inside, y + 1, 0))
            np.testing.assert_array_equal(idx[..., 2], np.where(inside, z + 1, 0))
            for k in range(3):
                np.testing.assert_array_equal(dim[..., k], np.where(inside, GRID[k], 0))
    finally:
        cpuify.set_num_threads(0)


def test_empty_box_runs_nothing_and_none_is_the_grid(mod: cpuify.RawModule) -> None:
    idx, _, threads = run_where(mod, ((2, 2), (0, 4), (0, 3)))
    assert not idx.any() and not threads.any()
    idx, _, threads = run_where(mod, None)
    assert (threads == BLOCK[0] * BLOCK[1]).all()


def stencil_reference(a: np.ndarray, c: float) -> np.ndarray:
    p = np.pad(a, 1)
    return (np.float32(c) * a + np.float32(0.25) * (p[1:-1, :-2] + p[1:-1, 2:] + p[:-2, 1:-1]
                                                    + p[2:, 1:-1])).astype(np.float32)


def tilings(gx: int, gy: int) -> list[list[tuple[tuple[int, int], tuple[int, int], tuple[int, int]]]]:
    """Some ways of cutting a gx x gy grid into boxes: slabs along y, slabs along x, an
    irregular 2-D tiling with boxes of one block and empty boxes."""
    rows = [((0, gx), (a, b), (0, 1)) for a, b in [(0, 1), (1, 4), (4, gy)]]
    cols = [((a, b), (0, gy), (0, 1)) for a, b in [(0, 2), (2, 2), (2, gx)]]
    xs, ys = [0, 1, 3, gx], [0, 2, 3, gy]
    tiles = [((x0, x1), (y0, y1), (0, 1)) for (x0, x1), (y0, y1)
             in itertools.product(itertools.pairwise(xs), itertools.pairwise(ys))]
    return [rows, cols, tiles]


@pytest.mark.parametrize("tiling", range(3))
def test_boxes_that_tile_the_grid_equal_one_launch_bit_for_bit(mod: cpuify.RawModule,
                                                                tiling: int) -> None:
    w, h, c = 45, 53, 0.3
    gx, gy = (w + 7) // 8, (h + 7) // 8
    rng = np.random.default_rng(7)
    a = rng.standard_normal((h, w)).astype(np.float32)
    k = fn(mod, "stencil")
    args = lambda out: (a, out, np.int32(w), np.int32(h), np.float32(c))  # noqa: E731
    whole = np.full((h, w), np.nan, np.float32)
    k((gx, gy), (8, 8), args(whole))
    np.testing.assert_allclose(whole, stencil_reference(a, c), rtol=1e-6, atol=1e-6)
    parts = np.full((h, w), np.nan, np.float32)
    for box in tilings(gx, gy)[tiling]:
        k._launch_box((gx, gy), (8, 8), args(parts), 0, box)
    assert parts.tobytes() == whole.tobytes()


def test_packed_parameters_with_a_pointer_rewritten(mod: cpuify.RawModule) -> None:
    """The engine packs on one rank, rewrites pointers to another rank's copies and launches
    from the bytes: here the output pointer is swapped for another array's."""
    w, h, c = 24, 16, 1.5
    rng = np.random.default_rng(3)
    a = rng.standard_normal((h, w)).astype(np.float32)
    decoy = np.zeros((h, w), np.float32)
    real = np.zeros((h, w), np.float32)
    k = fn(mod, "stencil")
    packed = bytearray(k._packed_params((a, decoy, np.int32(w), np.int32(h), np.float32(c))))
    assert len(packed) == k.info.param_size
    _, _, out_offset, _ = k.info.params[1]
    assert int.from_bytes(packed[out_offset:out_offset + 8], "little") == decoy.ctypes.data
    packed[out_offset:out_offset + 8] = real.ctypes.data.to_bytes(8, "little")
    k._launch_packed((3, 2), (8, 8), bytes(packed), 0, ((0, 3), (1, 2), (0, 1)))
    want = stencil_reference(a, c)
    assert not decoy.any()
    np.testing.assert_allclose(real[8:], want[8:], rtol=1e-6, atol=1e-6)
    assert not real[:8].any()
    k._launch_packed((3, 2), (8, 8), packed, 0)          # no box: the whole grid
    np.testing.assert_allclose(real, want, rtol=1e-6, atol=1e-6)


def test_packed_parameters_are_checked(mod: cpuify.RawModule) -> None:
    k = fn(mod, "stencil")
    with pytest.raises(ArgumentValueError, match=r"kernel 'stencil': its parameters are \d+ bytes"):
        k._launch_packed((1,), (8, 8), b"\0" * 3)
    with pytest.raises(ArgumentError, match="packed parameters must be bytes"):
        k._launch_packed((1,), (8, 8), [0] * k.info.param_size)  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="takes 5 argument"):
        k._packed_params((1, 2))


@pytest.mark.parametrize("box,message", [
    (((0, 6), (0, 4), (0, 3)), r"blockIdx.x range \[0, 6\) is not within the grid's 0..5"),
    (((2, 1), (0, 4), (0, 3)), r"blockIdx.x range \[2, 1\)"),
    (((0, 5), (0, 4), (-1, 3)), r"blockIdx.z range \[-1, 3\)"),
])
def test_a_box_outside_the_grid_is_refused(mod: cpuify.RawModule, box, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ArgumentValueError, match=message):
        run_where(mod, box)


@pytest.mark.parametrize("box", [((0, 5), (0, 4)), "xyz", ((0, 1, 2), (0, 4), (0, 3)), 7])
def test_a_malformed_box_is_refused(mod: cpuify.RawModule, box) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ArgumentError, match=r"a box of blocks is \(\(x0, x1\), \(y0, y1\), \(z0, z1\)\)"):
        run_where(mod, box)


def test_fault_in_a_box_names_the_absolute_block(mod: cpuify.RawModule) -> None:
    out = np.zeros(6 * 5, np.int32)
    null = np.zeros(0, np.int32)
    k = fn(mod, "fault_at")
    with pytest.raises(IllegalAddressError, match=r"block \(3, 2, 0\)"):
        k._launch_box((6, 5), (32,), (out, None), 0, ((2, 5), (1, 4), (0, 1)))
    out[:] = 0
    k._launch_box((6, 5), (32,), (out, null), 0, ((0, 6), (3, 5), (0, 1)))   # without it
    assert out.reshape(5, 6)[3:].all() and not out.reshape(5, 6)[:3].any()


def test_trap_in_a_box_names_the_absolute_block(mod: cpuify.RawModule) -> None:
    out = np.zeros(3 * 6, np.int32)
    k = fn(mod, "trap_at")
    with pytest.raises(KernelFailure, match=r"failed in block \(1, 4, 0\)"):
        k._launch_box((3, 6), (32,), (out,), 0, ((1, 3), (3, 6), (0, 1)))


@pytest.mark.parametrize("workers", [1, 0])
def test_spin_waiting_kernel_in_two_boxes(mod: cpuify.RawModule, workers: int) -> None:
    """A kernel with spin-wait loops runs its box as fibers: the second box's first block
    waits for the last block of the first box, which an earlier launch ran."""
    cpuify.set_num_threads(workers)
    try:
        nb = 200
        rng = np.random.default_rng(5)
        inp = rng.integers(0, 100, nb).astype(np.int32)
        out = np.zeros(nb, np.int32)
        flags = np.zeros(nb, np.int32)
        k = fn(mod, "chain")
        assert k.info.spin_waits
        k._launch_box((nb,), (32,), (inp, out, flags), 0, ((0, 77), (0, 1), (0, 1)))
        assert flags[:77].all() and not flags[77:].any()
        k._launch_box((nb,), (32,), (inp, out, flags), 0, ((77, nb), (0, 1), (0, 1)))
        np.testing.assert_array_equal(out, np.cumsum(inp))
    finally:
        cpuify.set_num_threads(0)
