"""tiles-in-place: `__shared__` tiles that only stage global data are read in place behind a
per-block check that no store of the block writes that data (transforms/tiles_in_place.py).
The IR it makes (two versions of the block body under `upir.if`, the first without the
tiles' stores), where it declines, and results against NumPy on both sides of the check:
tiles next to the data a block writes (the in-place version runs) and tiles the block
overwrites itself (the check fails: the staged copy is what the kernel must read)."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.compiler import lift_and_optimize
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.transforms.pass_manager import PipelineOptions

SOURCE = r'''
#define TILE 16
// the benchmark suite's lu_tile step: two tiles staged, one barrier, a 16-term product
extern "C" __global__ void lu_step(float *a, int n, int offset) {
    __shared__ float left[TILE][TILE];
    __shared__ float top[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = offset + TILE + blockIdx.y * TILE;
    const int col0 = offset + TILE + blockIdx.x * TILE;
    left[ty][tx] = a[(row0 + ty) * n + offset + tx];
    top[ty][tx] = a[(offset + ty) * n + col0 + tx];
    __syncthreads();
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < TILE; k++)
        sum += left[ty][k] * top[k][tx];
    a[(row0 + ty) * n + col0 + tx] -= sum;
}
// a tile staged from (r, c) and written back transposed at (r2, c2) of the same matrix
extern "C" __global__ void transpose_to(float *a, int n, int r, int c, int r2, int c2) {
    __shared__ float t[16][16];
    const int tx = threadIdx.x, ty = threadIdx.y;
    t[ty][tx] = a[(r + ty) * n + c + tx];
    __syncthreads();
    a[(r2 + ty) * n + c2 + tx] = 2.0f * t[tx][ty];
}
// 1-D: a block's 64 elements reversed, written `shift` elements further on
extern "C" __global__ void reverse_to(float *x, int shift) {
    __shared__ float s[64];
    const int t = threadIdx.x;
    s[t] = x[blockIdx.x * 64 + t];
    __syncthreads();
    x[blockIdx.x * 64 + t + shift] = s[63 - t] + 1.0f;
}
// the tile is staged in a loop (matmul's shape): read in place it would be read again
// for every row of threads; left alone
extern "C" __global__ void tiles_in_loop(const float *a, float *out, int n) {
    __shared__ float s[16][16];
    const int tx = threadIdx.x, ty = threadIdx.y;
    float acc = 0.0f;
    for (int k = 0; k < n; k += 16) {
        s[ty][tx] = a[ty * n + k + tx];
        __syncthreads();
        acc += s[tx][ty];
        __syncthreads();
    }
    out[ty * 16 + tx] = acc;
}
// half the tile's loads read elements no thread stored
extern "C" __global__ void unstaged(const float *x, float *y) {
    __shared__ float s[128];
    const int t = threadIdx.x;
    s[t] = x[t];
    __syncthreads();
    y[t] = s[t + 64];
}
// an atomic in the block: left alone
extern "C" __global__ void with_atomic(float *x, float *total) {
    __shared__ float s[64];
    const int t = threadIdx.x;
    s[t] = x[t];
    __syncthreads();
    atomicAdd(total, s[63 - t]);
}
'''


@pytest.fixture(scope="module")
def module():
    return parse_ptx(compile_to_ptx(SOURCE, filename="tiles.cu").ptx)


def _lift(module, name, dims, options=()):  # type: ignore[no-untyped-def]
    pipeline = PipelineOptions.parse(list(options))[0]
    lifted, result = lift_and_optimize(module, module.functions[name], pipeline, dims, ())
    return lifted, result.counts


def test_lu_step_reads_both_tiles_in_place(module):
    lifted, counts = _lift(module, "lu_step", (16, 16, 1))
    assert counts["tiles-in-place"] == 32            # 16 loads of each tile
    (branch,) = [op for op in lifted.op.walk() if op.name == "upir.if"]
    assert branch.attributes["in_place"] == sorted(
        op.attributes["sym_name"] for op in lifted.op.walk() if op.name == "upir.global")
    fast = [op for blk in branch.regions[0].blocks for o in blk.ops for op in o.walk()]
    slow = [op for blk in branch.regions[1].blocks for o in blk.ops for op in o.walk()]
    shared = [op for op in fast if op.name in ("ptx.ld", "ptx.st") and "shared" in op.attributes["mods"]]
    assert shared == []                              # no copy, no reads of it
    in_place = [op for op in fast if op.name == "ptx.ld" and op.attributes.get("in_place")]
    assert len(in_place) == 32 and all("global" in op.attributes["mods"] for op in in_place)
    # left[ty][k] is a[(row0 + ty) * n + offset + k]: the 16 loads differ by their offsets
    assert {op.attributes["offset"] for op in in_place} >= {4 * k for k in range(16)}
    assert not any(op.name == "upir.barrier" for op in fast)   # barrier-elimination's
    assert sum(op.name == "upir.barrier" for op in slow) == 1
    assert sum(op.name == "ptx.st" for op in slow) == 3          # the tiles and the update


def test_needs_the_block_shape(module):
    _, counts = _lift(module, "lu_step", None)
    assert counts["tiles-in-place"] == 0


@pytest.mark.parametrize("name,dims", [("tiles_in_loop", (16, 16, 1)), ("unstaged", (128, 1, 1)),
                                       ("with_atomic", (64, 1, 1))])
def test_declines(module, name, dims):
    assert_declines(module, name, dims)


def assert_declines(module, name, dims):  # type: ignore[no-untyped-def]
    lifted, counts = _lift(module, name, dims)
    assert counts["tiles-in-place"] == 0
    assert not any(op.name == "ptx.ld" and op.attributes.get("in_place") for op in lifted.op.walk())


def test_disabled(module):
    _, counts = _lift(module, "lu_step", (16, 16, 1), ("--disable-pass=tiles-in-place",))
    assert "tiles-in-place" not in counts


@pytest.fixture(scope="module")
def kernels():
    mod = cpuify.RawModule(code=SOURCE)
    return {name: mod.get_function(name) for name in ("lu_step", "transpose_to", "reverse_to")}


def _twice(fn, grid, block, args_of):  # type: ignore[no-untyped-def]
    # the first launch runs the generic code, the second the code for the block shape
    outs = []
    for _ in range(2):
        args, out = args_of()
        fn(grid, block, args)
        outs.append(out)
    return outs


def lu_updates(n):  # type: ignore[no-untyped-def]
    """A random n x n float32 matrix and its 16-wide trailing updates in float64."""
    rng = np.random.default_rng(n)
    a0 = (rng.uniform(-1, 1, (n, n)) / np.sqrt(n)).astype(np.float32)
    ref = a0.astype(np.float64)
    for o in range(0, n - 16, 16):
        e = o + 16
        ref[e:, e:] -= ref[e:, o:e] @ ref[o:e, e:]
    return a0, ref


@pytest.mark.parametrize("n", [48, 64, 80])
def test_lu_steps_against_numpy(kernels, n):
    a0, ref = lu_updates(n)

    def args_of():
        a = a0.copy()
        return a, a

    for _ in range(2):
        a = a0.copy()
        for o in range(0, n - 16, 16):
            t = (n - o) // 16 - 1
            kernels["lu_step"]((t, t), (16, 16), (a, np.int32(n), np.int32(o)))
        np.testing.assert_allclose(a, ref, atol=1e-5)


@pytest.mark.parametrize("r2,c2", [(0, 16), (16, 0), (16, 16), (0, 0), (0, 8), (5, 3), (15, 17)])
def test_transpose_overlapping_or_not(kernels, r2, c2):
    # (0, 16), (16, 0), (16, 16): beside the staged tile, the in-place version runs; the
    # others overwrite part of it, and the kernel must read the staged values
    n = 48
    a0 = np.arange(n * n, dtype=np.float32).reshape(n, n)
    ref = a0.copy()
    ref[r2:r2 + 16, c2:c2 + 16] = 2.0 * a0[0:16, 0:16].T

    def args_of():
        a = a0.copy()
        return (a, np.int32(n), np.int32(0), np.int32(0), np.int32(r2), np.int32(c2)), a

    for out in _twice(kernels["transpose_to"], (1, 1), (16, 16), args_of):
        np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("shift", [64 * 4, 128, 0, 1, 63, 32])
def test_reverse_overlapping_or_not(kernels, shift):
    # 128 or more: two blocks, each writing past what both staged (the in-place version);
    # less: one block writing over part of its own staged elements (the staged values)
    blocks = 2 if shift >= 128 else 1
    x0 = np.arange(64 * 8, dtype=np.float32)
    ref = x0.copy()
    for b in range(blocks):
        ref[b * 64 + shift:(b + 1) * 64 + shift] = x0[b * 64:(b + 1) * 64][::-1] + 1.0

    def args_of():
        x = x0.copy()
        return (x, np.int32(shift)), x

    for out in _twice(kernels["reverse_to"], (blocks, 1), (64, 1), args_of):
        np.testing.assert_array_equal(out, ref)


def _interpret_one_version(module, name, dims, version, grid, args):  # type: ignore[no-untyped-def]
    """The kernel's IR for `dims` with the other version of the block body emptied, run by
    the reference interpreter: the result is right only where the check picks `version`
    (0: in place, 1: as it was)."""
    from cpuify.interp.machine import InterpModule
    from cpuify.ir.core import Block, Operation
    from cpuify.ir.printer import print_op
    lifted, _ = _lift(module, name, dims)
    (branch,) = [op for op in lifted.op.walk() if op.name == "upir.if" and op.attributes.get("in_place")]
    empty = Block()
    empty.append(Operation("upir.yield", [], [], {}))
    branch.regions[1 - version].blocks = []
    branch.regions[1 - version].add_block(empty)
    InterpModule.from_ir(print_op(lifted.op)).launch(name, grid, dims, args)


@pytest.mark.parametrize("r2,c2,version", [(0, 16, 0), (16, 0, 0), (32, 32, 0), (0, 0, 1), (0, 8, 1), (15, 15, 1),
                                           (15, 17, 0), (16, 15, 0), (15, 16, 0)])
def test_the_check_picks_the_version(module, r2, c2, version):
    # beside the staged tile (rows or columns apart): in place; overlapping it: as it was.
    # (16, 15): the written rows start below the staged ones, apart though the columns meet;
    # (15, 16), (15, 17): one row shared, the columns apart
    n = 48
    a0 = np.arange(n * n, dtype=np.float32).reshape(n, n)
    ref = a0.copy()
    ref[r2:r2 + 16, c2:c2 + 16] = 2.0 * a0[0:16, 0:16].T
    a = a0.copy()
    _interpret_one_version(module, "transpose_to", (16, 16, 1), version, (1, 1, 1),
                           (a, np.int32(n), np.int32(0), np.int32(0), np.int32(r2), np.int32(c2)))
    np.testing.assert_array_equal(a, ref)


@pytest.mark.parametrize("n,offset", [(48, 0), (64, 16), (80, 32)])
def test_the_lu_step_runs_in_place(module, n, offset):
    # every block of every step of the factorization reads its panels in place
    rng = np.random.default_rng(n)
    a0 = (rng.uniform(-1, 1, (n, n)) / np.sqrt(n)).astype(np.float32)
    ref = a0.astype(np.float64)
    e = offset + 16
    ref[e:, e:] -= ref[e:, offset:e] @ ref[offset:e, e:]
    a = a0.copy()
    t = (n - offset) // 16 - 1
    _interpret_one_version(module, "lu_step", (16, 16, 1), 0, (t, t, 1), (a, np.int32(n), np.int32(offset)))
    np.testing.assert_allclose(a, ref, atol=1e-5)


def test_the_versions_print_as_mlir_and_parse_back(module):
    pytest.importorskip("xdsl.parser")
    from cpuify.ir.parser import parse_module
    from cpuify.ir.printer import print_module
    from test_mlir_export import xdsl_parse
    lifted, _ = _lift(module, "lu_step", (16, 16, 1))
    text = print_module([lifted.op])
    xdsl_parse(text)
    assert print_module(parse_module(text)) == text
