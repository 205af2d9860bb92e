"""tiles-in-place on tiles staged under bound guards (transforms/tiles_guarded.py): the IR it
makes for `if (row < n && col < n) t[ty][tx] = a[..]; else t[ty][tx] = 0;` (and the no-else
and negated forms, guarded final stores, tile loads under a guard), the guards it declines
(a disjunction, `!=`, a tile written twice), and results against NumPy where the blocks at
the matrix's edge take the body as it was and those inside read in place."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from test_tiles_in_place import _lift, assert_declines, lu_updates

SOURCE = r'''
#define TILE 16
// a blocked-LU trailing update for any n: tiles staged under bound guards (0 outside),
// the update guarded
extern "C" __global__ void lu_guarded(float *a, int n, int offset) {
    __shared__ float left[TILE][TILE];
    __shared__ float top[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = offset + TILE + blockIdx.y * TILE + ty;
    const int col = offset + TILE + blockIdx.x * TILE + tx;
    if (row < n && offset + tx < n) left[ty][tx] = a[row * n + offset + tx];
    else left[ty][tx] = 0.0f;
    if (offset + ty < n && col < n) top[ty][tx] = a[(offset + ty) * n + col];
    else top[ty][tx] = 0.0f;
    __syncthreads();
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < TILE; k++)
        sum += left[ty][k] * top[k][tx];
    if (row < n && col < n) a[row * n + col] -= sum;
}
// a transposed copy of a w x h matrix (no else: the tile is read only where it was staged)
extern "C" __global__ void transpose_guarded(const float *in, float *out, int w, int h) {
    __shared__ float t[16][17];
    int x = blockIdx.x * 16 + threadIdx.x, y = blockIdx.y * 16 + threadIdx.y;
    if (x < w && y < h) t[threadIdx.y][threadIdx.x] = in[y * w + x];
    __syncthreads();
    int x2 = blockIdx.y * 16 + threadIdx.x, y2 = blockIdx.x * 16 + threadIdx.y;
    if (x2 < h && y2 < w) out[y2 * h + x2] = t[threadIdx.x][threadIdx.y];
}
// staged under `i < n` (else -1), read under `i < m`: past n the staged -1 is what is read
extern "C" __global__ void reverse_guarded(const float *in, float *out, int n, int m) {
    __shared__ float s[64];
    int t = threadIdx.x, i = blockIdx.x * 64 + t;
    if (i >= n) s[t] = -1.0f; else s[t] = in[i];
    __syncthreads();
    if (i < m) out[i] = 2.0f * s[63 - t];
}
// work guarded by `threadIdx.x == 0` (convex, but no block passes it at every corner: the
// in-place version keeps it) and by a disjunction (not convex: kept)
extern "C" __global__ void first_column(const float *in, float *out, int n) {
    __shared__ float s[16][16];
    int y = blockIdx.x * 16 + threadIdx.y;
    s[threadIdx.y][threadIdx.x] = in[y * 16 + threadIdx.x];
    __syncthreads();
    if (threadIdx.x == 0) out[y] = s[threadIdx.y][15] + s[0][threadIdx.y];
    if (y < n || threadIdx.x > 7) out[4096 + y * 16 + threadIdx.x] = s[threadIdx.x][threadIdx.y];
}
// declined: the guard holds on a set of threads with holes
extern "C" __global__ void either_bound(const float *in, float *out, int n) {
    __shared__ float s[16][16];
    int x = blockIdx.x * 16 + threadIdx.x, y = blockIdx.y * 16 + threadIdx.y;
    if (x < n || y < n) s[threadIdx.y][threadIdx.x] = in[y * 64 + x]; else s[threadIdx.y][threadIdx.x] = 0.0f;
    __syncthreads();
    out[y * 64 + x] = s[threadIdx.x][threadIdx.y];
}
extern "C" __global__ void not_equal(const float *in, float *out, int k) {
    __shared__ float s[64];
    int t = threadIdx.x, i = blockIdx.x * 64 + t;
    if (i != k) s[t] = in[i]; else s[t] = 0.0f;
    __syncthreads();
    out[i] = s[63 - t];
}
// declined: the tile is written twice on one path
extern "C" __global__ void written_twice(const float *in, const float *b, float *out, int n) {
    __shared__ float s[64];
    int t = threadIdx.x, i = blockIdx.x * 64 + t;
    s[t] = in[i];
    if (i < n) s[t] = b[i];
    __syncthreads();
    out[i] = s[63 - t];
}
'''


@pytest.fixture(scope="module")
def module():
    return parse_ptx(compile_to_ptx(SOURCE, filename="guarded.cu").ptx)


def _versions(lifted):  # type: ignore[no-untyped-def]
    branch = [op for op in lifted.op.walk() if op.name == "upir.if" and "in_place" in op.attributes]
    assert len(branch) == 1
    (b,) = branch
    return b, [op for blk in b.regions[0].blocks for o in blk.ops for op in o.walk()], \
        [op for blk in b.regions[1].blocks for o in blk.ops for op in o.walk()]


def _shared(ops):  # type: ignore[no-untyped-def]
    return [op for op in ops if op.name in ("ptx.ld", "ptx.st") and "shared" in op.attributes["mods"]]


def test_guarded_lu_reads_both_tiles_in_place(module):
    lifted, counts = _lift(module, "lu_guarded", (16, 16, 1))
    assert counts["tiles-in-place"] == 32
    _, fast, slow = _versions(lifted)
    assert _shared(fast) == []                      # no staging, no copies read
    # two copies of the in-place version: without the update's guard (blocks inside the
    # matrix: every thread passes it) and with it (blocks at the edge whose tiles pass)
    (inner,) = [op for op in fast if op.name == "upir.if" and len(op.regions[0].blocks[0].ops) > 20]
    unguarded, guarded = ([op for blk in r.blocks for o in blk.ops for op in o.walk()] for r in inner.regions)
    for version in (unguarded, guarded):
        assert len([op for op in version if op.name == "ptx.ld" and op.attributes.get("in_place")]) == 32
        assert sum(op.name == "ptx.st" and "global" in op.attributes["mods"] for op in version) == 1
    (store,) = [op for op in unguarded if op.name == "ptx.st"]
    assert store.parent in inner.regions[0].blocks     # not under an if
    (store,) = [op for op in guarded if op.name == "ptx.st"]
    assert store.parent not in inner.regions[1].blocks
    assert len([op for op in slow if op.name == "ptx.st" and "shared" in op.attributes["mods"]]) == 4
    assert sum(op.name == "upir.barrier" for op in slow) == 1


def test_the_check_evaluates_the_staging_guards_at_the_block_corners(module):
    lifted, _ = _lift(module, "lu_guarded", (16, 16, 1), ("--passes=raise-structured-cf,tiles-in-place",))
    branch, _, _ = _versions(lifted)
    check = branch.parent.ops[:branch.parent.ops.index(branch)]
    corner_tids = {op.attributes["value"] for op in check if op.name == "upir.const" and op.results[0].type == "i32"}
    assert {0, 15} <= corner_tids                   # threads 0 and 15 of each extent
    # two guards of two comparisons each, at 4 corners
    assert sum(op.name == "ptx.setp" and op.attributes["mods"] == ["lt", "s32"] for op in check) == 16


@pytest.mark.parametrize("name,dims,count", [("transpose_guarded", (16, 16, 1), 1),
                                             ("reverse_guarded", (64, 1, 1), 1)])
def test_no_else_and_negated_guards(module, name, dims, count):
    lifted, counts = _lift(module, name, dims)
    assert counts["tiles-in-place"] == count
    _, fast, _ = _versions(lifted)
    assert _shared(fast) == []


@pytest.mark.parametrize("name,dims", [("either_bound", (16, 16, 1)), ("not_equal", (64, 1, 1)),
                                       ("written_twice", (64, 1, 1))])
def test_declines(module, name, dims):
    assert_declines(module, name, dims)


def test_work_guards_kept_where_blocks_cannot_pass_them_all(module):
    lifted, counts = _lift(module, "first_column", (16, 16, 1))
    assert counts["tiles-in-place"] == 3
    _, fast, _ = _versions(lifted)
    # the `threadIdx.x == 0` guard gets a copy without it (no block will run it: the check
    # at the corners fails), the disjunction none
    guards = [op for op in fast if op.name == "upir.if"]
    assert len(guards) == 1 + 2 + 1                # the choice; the guarded copy's two; the other's one
    choice = guards[0]
    unguarded, guarded = ([op for b in r.blocks for o in b.ops for op in o.walk()] for r in choice.regions)
    assert sum(op.name == "upir.if" for op in unguarded) == 1
    assert sum(op.name == "upir.if" for op in guarded) == 2


@pytest.fixture(scope="module")
def kernels():
    mod = cpuify.RawModule(code=SOURCE)
    return {name: mod.get_function(name) for name in
            ("lu_guarded", "transpose_guarded", "reverse_guarded", "either_bound", "first_column")}


@pytest.mark.parametrize("n", [40, 45, 64, 71])
def test_guarded_lu_against_numpy(kernels, n):
    a0, ref = lu_updates(n)
    for _ in range(2):                  # the generic code, then the code for the block shape
        a = a0.copy()
        for o in range(0, n - 16, 16):
            t = -(-(n - o - 16) // 16)
            kernels["lu_guarded"]((t, t), (16, 16), (a, np.int32(n), np.int32(o)))
        np.testing.assert_allclose(a, ref, atol=1e-5)


@pytest.mark.parametrize("w,h", [(48, 32), (37, 21), (16, 16), (5, 70)])
def test_transpose_against_numpy(kernels, w, h):
    x = np.arange(w * h, dtype=np.float32).reshape(h, w)
    for _ in range(2):
        out = np.full((w, h), -5.0, np.float32)
        kernels["transpose_guarded"]((-(-w // 16), -(-h // 16)), (16, 16), (x, out, np.int32(w), np.int32(h)))
        np.testing.assert_array_equal(out, x.T)


@pytest.mark.parametrize("w", [16, 13])
def test_transpose_onto_its_input(kernels, w):
    # one block transposing its own tile in place: what it writes is what it staged, the
    # check fails and the staged values are read
    x0 = np.arange(w * w, dtype=np.float32).reshape(w, w)
    for _ in range(2):
        x = x0.copy()
        kernels["transpose_guarded"]((1, 1), (16, 16), (x, x, np.int32(w), np.int32(w)))
        np.testing.assert_array_equal(x, x0.T)


@pytest.mark.parametrize("n,m", [(256, 256), (200, 256), (130, 192), (256, 100)])
def test_reverse_against_numpy(kernels, n, m):
    x = np.arange(256, dtype=np.float32) + 1.0
    padded = np.where(np.arange(256) < n, x, -1.0).astype(np.float32)
    ref = np.full(256, 7.0, np.float32)
    for b in range(4):
        seg = 2.0 * padded[b * 64:(b + 1) * 64][::-1]
        ref[b * 64:(b + 1) * 64] = np.where(np.arange(b * 64, (b + 1) * 64) < m, seg,
                                            ref[b * 64:(b + 1) * 64])
    for _ in range(2):
        out = np.full(256, 7.0, np.float32)
        kernels["reverse_guarded"]((4,), (64,), (x, out, np.int32(n), np.int32(m)))
        np.testing.assert_array_equal(out, ref)


def test_declined_kernel_still_right(kernels):
    x = np.arange(64 * 64, dtype=np.float32)
    n = 20
    ref = np.zeros((64, 64), np.float32)
    xs = x.reshape(64, 64)
    for by in range(4):
        for bx in range(4):
            s = np.zeros((16, 16), np.float32)
            for ty in range(16):
                for tx in range(16):
                    X, Y = bx * 16 + tx, by * 16 + ty
                    s[ty, tx] = xs[Y, X] if (X < n or Y < n) else 0.0
            ref[by * 16:(by + 1) * 16, bx * 16:(bx + 1) * 16] = s.T
    for _ in range(2):
        out = np.zeros(64 * 64, np.float32)
        kernels["either_bound"]((4, 4), (16, 16), (x, out, np.int32(n)))
        np.testing.assert_array_equal(out.reshape(64, 64), ref)


@pytest.mark.parametrize("n", [0, 20, 64])
def test_work_guards_against_numpy(kernels, n):
    x = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
    ref = np.full(4096 + 64 * 16, -3.0, np.float32)
    for b in range(4):
        s = x[b * 16:(b + 1) * 16]
        for ty in range(16):
            y = b * 16 + ty
            ref[y] = s[ty, 15] + s[0, ty]
            for tx in range(16):
                if y < n or tx > 7:
                    ref[4096 + y * 16 + tx] = s[tx, ty]
    for _ in range(2):
        out = np.full(4096 + 64 * 16, -3.0, np.float32)
        kernels["first_column"]((4,), (16, 16), (x, out, np.int32(n)))
        np.testing.assert_array_equal(out, ref)
