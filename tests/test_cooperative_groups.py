"""Cooperative groups, partial-mask __syncwarp, named barriers and cp.async: real CUDA kernels
compiled by cpuify, each checked against NumPy (or a hand computation), against the
reference interpreter (cpuify.interp) on the same PTX, and against the outputs an NVIDIA H100
gave on recorded inputs (tests/data/cg_h100.npz, test_same_bits_as_an_h100).

Multi-warp tiles (thread_block_tile<64..512>) synchronize through spin-waits on shared
memory in NVIDIA's headers: their tests run when cpuify has spin-wait yield points (the
forward-progress work of issue #18) and are skipped otherwise."""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

import cpuify
from cpuify.codegen.layout import SYNC_KINDS
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.interp import interpret_kernel

HEADERS = r'''
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cooperative_groups/scan.h>
#include <cooperative_groups/memcpy_async.h>
namespace cg = cooperative_groups;
'''


@functools.lru_cache(maxsize=None)
def _ptx(src: str, arch: str | None) -> str:
    return compile_to_ptx(HEADERS + src, arch=arch).ptx


@functools.lru_cache(maxsize=None)
def _module(src: str, arch: str | None) -> cpuify.RawModule:
    return cpuify.RawModule(ptx=_ptx(src, arch))


def run_both(src: str, name: str, grid, block, args: tuple, arch: str | None = None,
             interp: bool = True) -> list[np.ndarray]:
    """Runs kernel `name` compiled and (with `interp`) interpreted on copies of the arrays;
    asserts both give the same bits and returns the compiled arrays (all array arguments,
    in order)."""
    def copies() -> list:
        return [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    compiled = copies()
    _module(src, arch).get_function(name)(grid, block, tuple(compiled))
    arrays = [k for k, a in enumerate(args) if isinstance(a, np.ndarray)]
    if interp:
        interpreted = copies()
        interpret_kernel(_ptx(src, arch), name, grid, block, tuple(interpreted))
        for k in arrays:
            np.testing.assert_array_equal(compiled[k].view(np.uint8), interpreted[k].view(np.uint8),
                                          err_msg=f"{name}: compiled and interpreted differ")
    return [compiled[k] for k in arrays]


def _u32(v: int) -> int:
    return int(np.uint32(v & 0xFFFFFFFF).astype(np.int32))


@pytest.fixture
def rng():
    return np.random.default_rng(2026)


# --- tiles of up to a warp ------------------------------------------------------------------

TILES = r'''
template <int N>
__device__ void tile_ops(const int *x, int *out) {
    cg::thread_block b = cg::this_thread_block();
    cg::thread_block_tile<N> t = cg::tiled_partition<N>(b);
    int r = b.thread_rank();
    int v = x[blockIdx.x * blockDim.x + r];
    int *o = out + (blockIdx.x * blockDim.x + r) * 17;
    o[0] = t.thread_rank();
    o[1] = t.num_threads();
    o[2] = t.meta_group_rank();
    o[3] = t.meta_group_size();
    t.sync();
    o[4] = t.shfl(v, (t.thread_rank() * 3 + 1) % N);
    o[5] = t.shfl_up(v, 1);
    o[6] = t.shfl_down(v, 1);
    o[7] = t.shfl_xor(v, N > 1 ? 1 : 0);
    o[8] = t.any(v > 50);
    o[9] = t.all(v > -90);
    o[10] = t.ballot(v > 0);
    o[11] = t.match_any(v & 3);
    int pred;
    o[12] = t.match_all(v & 1, pred);
    o[13] = pred;
    o[14] = cg::reduce(t, v, cg::plus<int>());
    o[15] = cg::inclusive_scan(t, v);
    // the dynamic form: a thread_group of the same shape
    cg::thread_group d = cg::tiled_partition(b, N);
    d.sync();
    o[16] = d.thread_rank() * 1000 + d.size();
}
#define K(N) extern "C" __global__ void tile##N(const int *x, int *out) { tile_ops<N>(x, out); }
K(1) K(2) K(4) K(8) K(16) K(32)
'''


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 32])
def test_thread_block_tile_up_to_a_warp(n, rng):
    blocks, bs = 2, 64
    x = rng.integers(-100, 100, blocks * bs, dtype=np.int32)
    _, out = run_both(TILES, f"tile{n}", (blocks,), (bs,), (x, np.zeros(blocks * bs * 17, np.int32)))
    got = out.reshape(-1, 17)
    for g in range(blocks * bs // n):
        xs = x[g * n:(g + 1) * n]
        same_parity = len(set((xs & 1).tolist())) == 1
        for r in range(n):
            i = g * n + r
            want = [r, n, (i % bs) // n, bs // n, xs[(r * 3 + 1) % n],
                    xs[r - 1] if r >= 1 else xs[r], xs[r + 1] if r + 1 < n else xs[r],
                    xs[r ^ 1] if n > 1 else xs[r], int((xs > 50).any()), int((xs > -90).all()),
                    _u32(sum(1 << k for k in range(n) if xs[k] > 0)),
                    _u32(sum(1 << k for k in range(n) if xs[k] & 3 == xs[r] & 3)),
                    _u32((1 << n) - 1 if same_parity else 0), int(same_parity),
                    xs.sum(), xs[:r + 1].sum(), r * 1000 + n]
            assert got[i].tolist() == want, (n, i)


BLOCK = r'''
extern "C" __global__ void block_group(int *out) {
    cg::thread_block b = cg::this_thread_block();
    int *o = out + 8 * (blockIdx.x * blockDim.x * blockDim.y + b.thread_rank());
    __shared__ int s[64];
    s[b.thread_rank()] = b.thread_rank();
    b.sync();
    o[0] = b.thread_rank(); o[1] = b.size(); o[2] = b.num_threads();
    o[3] = b.group_index().x; o[4] = b.thread_index().x + 100 * b.thread_index().y;
    o[5] = b.dim_threads().x * 100 + b.group_dim().y;
    o[6] = s[b.size() - 1 - b.thread_rank()];
    // a tile of a tile: 8-thread pieces of a warp
    cg::thread_block_tile<8> t = cg::tiled_partition<8>(cg::tiled_partition<32>(b));
    o[7] = t.meta_group_rank() * 100 + t.meta_group_size();
}
'''


def test_thread_block_group():
    _, = run_both(BLOCK, "block_group", (2,), (16, 4), (np.zeros(2 * 64 * 8, np.int32),))
    got = _.reshape(2, 64, 8)
    for blk in range(2):
        for r in range(64):
            x, y = r % 16, r // 16
            assert got[blk, r].tolist() == [r, 64, 64, blk, x + 100 * y, 1604, 63 - r,
                                            (r % 32) // 8 * 100 + 4]


# --- reductions and scans -------------------------------------------------------------------

REDUCE = r'''
template <int N, typename T>
__device__ void red(const T *x, T *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    cg::thread_block_tile<N> t = cg::tiled_partition<N>(cg::this_thread_block());
    T v = x[i];
    T *o = out + i * 8;
    o[0] = cg::reduce(t, v, cg::plus<T>());
    o[1] = cg::reduce(t, v, cg::less<T>());
    o[2] = cg::reduce(t, v, cg::greater<T>());
    o[3] = cg::inclusive_scan(t, v, cg::plus<T>());
    o[4] = cg::exclusive_scan(t, v, cg::greater<T>());
    o[5] = cg::inclusive_scan(t, v, cg::less<T>());
    o[6] = cg::exclusive_scan(t, v);
    o[7] = cg::reduce(t, v, [](T a, T b) { return a > b ? a : b; });   // a lambda
}
template <int N>
__device__ void redbits(const unsigned *x, unsigned *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    cg::thread_block_tile<N> t = cg::tiled_partition<N>(cg::this_thread_block());
    unsigned v = x[i];
    out[3 * i] = cg::reduce(t, v, cg::bit_and<unsigned>());
    out[3 * i + 1] = cg::reduce(t, v, cg::bit_or<unsigned>());
    out[3 * i + 2] = cg::reduce(t, v, cg::bit_xor<unsigned>());
}
#define K(N) \
extern "C" __global__ void redi##N(const int *x, int *o) { red<N, int>(x, o); } \
extern "C" __global__ void redf##N(const float *x, float *o) { red<N, float>(x, o); } \
extern "C" __global__ void redd##N(const double *x, double *o) { red<N, double>(x, o); } \
extern "C" __global__ void redb##N(const unsigned *x, unsigned *o) { redbits<N>(x, o); }
K(8) K(32)
'''


@pytest.mark.parametrize("n", [8, 32])
@pytest.mark.parametrize("tag, dtype", [("i", np.int32), ("f", np.float32), ("d", np.float64)])
def test_reduce_and_scan(n, tag, dtype, rng):
    bs = 64
    if dtype == np.int32:
        x = rng.integers(-50, 50, bs).astype(dtype)
    else:
        x = (rng.standard_normal(bs) * 10).astype(dtype)
    _, out = run_both(REDUCE, f"red{tag}{n}", (1,), (bs,), (x, np.zeros(bs * 8, dtype)))
    got = out.reshape(-1, 8)
    # the tree order of cg::reduce and the scans: floats agree with NumPy to rounding (and
    # bit for bit with the interpreter, checked by run_both)
    tol = 0 if dtype == np.int32 else 1e-5 * float(np.abs(x).sum())
    for g in range(bs // n):
        xs = x[g * n:(g + 1) * n]
        for r in range(n):
            row = got[g * n + r]
            assert abs(row[0] - xs.sum()) <= tol
            assert row[1] == xs.min() and row[2] == xs.max()
            assert abs(row[3] - xs[:r + 1].sum()) <= tol
            if r:                            # the exclusive scan's first value is unspecified
                assert row[4] == xs[:r].max()
            assert row[5] == xs[:r + 1].min()
            assert abs(row[6] - (xs[:r].sum() if r else 0)) <= tol
            assert row[7] == xs.max()


@pytest.mark.parametrize("n", [8, 32])
def test_reduce_bitwise(n, rng):
    bs = 64
    x = rng.integers(0, 2**32, bs, dtype=np.uint64).astype(np.uint32)
    _, out = run_both(REDUCE, f"redb{n}", (1,), (bs,), (x, np.zeros(3 * bs, np.uint32)))
    for g in range(bs // n):
        xs = x[g * n:(g + 1) * n]
        want = [np.bitwise_and.reduce(xs), np.bitwise_or.reduce(xs), np.bitwise_xor.reduce(xs)]
        assert (out.reshape(-1, 3)[g * n:(g + 1) * n] == want).all()


# --- coalesced groups, partitions, invoke_one -----------------------------------------------

COALESCED = r'''
// lanes with x > 0 take part (divergent code)
extern "C" __global__ void coalesced(const int *x, int *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = x[i];
    int *o = out + i * 12;
    for (int k = 0; k < 12; k++) o[k] = -7;
    if (v > 0) {
        cg::coalesced_group g = cg::coalesced_threads();
        o[0] = g.size();
        o[1] = g.thread_rank();
        o[2] = g.shfl(v, 0);
        o[3] = g.shfl(v, g.size() - 1 - g.thread_rank());
        o[4] = g.ballot(v > 50);
        o[5] = g.any(v > 90);
        o[6] = g.all(v > 5);
        o[7] = cg::reduce(g, v, cg::plus<int>());
        o[8] = cg::inclusive_scan(g, v);
        o[9] = cg::exclusive_scan(g, v);
        o[10] = g.shfl_down(v, 1);
        o[11] = g.shfl_up(v, 2);
    }
}

extern "C" __global__ void partitions(const int *x, int *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = x[i];
    int *o = out + i * 8;
    cg::thread_block_tile<32> w = cg::tiled_partition<32>(cg::this_thread_block());
    cg::coalesced_group lp = cg::labeled_partition(w, v & 3);
    o[0] = lp.size(); o[1] = lp.thread_rank(); o[2] = cg::reduce(lp, v, cg::plus<int>());
    o[3] = lp.shfl(v, 0);
    cg::coalesced_group bp = cg::binary_partition(w, v > 0);
    o[4] = bp.size(); o[5] = bp.thread_rank(); o[6] = cg::reduce(bp, v, cg::greater<int>());
    o[7] = cg::exclusive_scan(bp, v);
}

extern "C" __global__ void invoke(const int *x, int *out, int *counter) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    cg::thread_block_tile<16> t = cg::tiled_partition<16>(cg::this_thread_block());
    cg::invoke_one(t, [&] { atomicAdd(counter, 1); });
    int r = cg::invoke_one_broadcast(t, [&] { return x[i] * 10 + (int)t.thread_rank(); });
    out[i] = r;
    if (x[i] > 0) {
        cg::coalesced_group g = cg::coalesced_threads();
        int s = cg::invoke_one_broadcast(g, [&] { return (int)g.thread_rank() + 100 * x[i]; });
        out[i] += s * 1000;
    }
}
'''


def test_coalesced_threads_in_divergent_code(rng):
    n = 128
    x = rng.integers(-100, 100, n, dtype=np.int32)
    _, out = run_both(COALESCED, "coalesced", (2,), (64,), (x, np.zeros(n * 12, np.int32)))
    got = out.reshape(-1, 12)
    for w in range(n // 32):
        xs = x[32 * w:32 * w + 32]
        active = [lane for lane in range(32) if xs[lane] > 0]
        vals = xs[active]
        k = len(vals)
        for lane in range(32):
            i = 32 * w + lane
            if lane not in active:
                assert (got[i] == -7).all()
                continue
            r = active.index(lane)
            want = [k, r, vals[0], vals[k - 1 - r],
                    _u32(sum(1 << j for j in range(k) if vals[j] > 50)),
                    int((vals > 90).any()), int((vals > 5).all()), vals.sum(),
                    vals[:r + 1].sum(), vals[:r].sum(),
                    vals[r + 1] if r + 1 < k else xs[lane], vals[r - 2] if r >= 2 else xs[lane]]
            assert got[i].tolist() == want, i


def test_labeled_and_binary_partition(rng):
    n = 128
    x = rng.integers(-100, 100, n, dtype=np.int32)
    _, out = run_both(COALESCED, "partitions", (2,), (64,), (x, np.zeros(n * 8, np.int32)))
    got = out.reshape(-1, 8)
    for i in range(n):
        w, v = i // 32, x[i]
        xs = x[32 * w:32 * w + 32]
        same_label = [k for k in range(32) if xs[k] & 3 == v & 3]
        same_side = [k for k in range(32) if (xs[k] > 0) == (v > 0)]
        r = same_side.index(i % 32)
        want = [len(same_label), same_label.index(i % 32), xs[same_label].sum(), xs[same_label[0]],
                len(same_side), r, xs[same_side].max(), xs[same_side[:r]].sum()]
        assert got[i].tolist() == want, i


def test_invoke_one_and_broadcast(rng):
    n = 128
    x = rng.integers(-100, 100, n, dtype=np.int32)
    _, out, counter = run_both(COALESCED, "invoke", (2,), (64,),
                            (x, np.zeros(n, np.int32), np.zeros(1, np.int32)))
    assert counter[0] == n // 16                     # once per tile
    want = np.array([x[16 * (i // 16)] * 10 for i in range(n)], np.int64)
    for i in range(n):
        if x[i] > 0:
            w = i // 32
            first = next(32 * w + k for k in range(32) if x[32 * w + k] > 0)
            want[i] += 100 * x[first] * 1000         # rank 0 of the coalesced group
    np.testing.assert_array_equal(out, want)


MORE = r'''
// 64-bit shuffles; partitions of a coalesced group
extern "C" __global__ void more(const double *x, double *out, long long *o64, int *oi) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    double v = x[i];
    cg::thread_block_tile<32> w = cg::tiled_partition<32>(cg::this_thread_block());
    out[2 * i] = w.shfl(v, 31 - w.thread_rank());
    o64[i] = w.shfl_down((long long)(v * 1000) << 20, 3);
    for (int k = 0; k < 4; k++) oi[4 * i + k] = -1;
    out[2 * i + 1] = -1;
    if (v > 0) {
        cg::coalesced_group g = cg::coalesced_threads();
        cg::thread_group sub = cg::tiled_partition(g, 4);
        oi[4 * i] = sub.thread_rank() * 100 + sub.size();
        cg::coalesced_group lp = cg::labeled_partition(g, (int)(v * 10) & 1);
        oi[4 * i + 1] = lp.thread_rank() * 100 + lp.size();
        oi[4 * i + 2] = g.meta_group_rank() * 100 + g.meta_group_size();
        out[2 * i + 1] = cg::reduce(g, v, cg::plus<double>());
        oi[4 * i + 3] = cg::exclusive_scan(g, 1);
    }
}
'''


def test_64bit_shuffles_and_partitions_of_coalesced_groups(rng):
    x = rng.standard_normal(64)
    _, out, o64, oi = run_both(MORE, "more", (1,), (64,),
                               (x, np.zeros(128), np.zeros(64, np.int64), np.zeros(256, np.int32)))
    oi = oi.reshape(-1, 4)
    for w in range(2):
        xs = x[32 * w:32 * w + 32]
        active = [lane for lane in range(32) if xs[lane] > 0]
        for lane in range(32):
            i = 32 * w + lane
            assert out[2 * i] == xs[31 - lane]
            assert o64[i] == int(xs[lane + 3 if lane + 3 < 32 else lane] * 1000) << 20
            if lane not in active:
                assert (oi[i] == -1).all() and out[2 * i + 1] == -1
                continue
            r, n = active.index(lane), len(active)
            parity = [k for k in active if int(xs[k] * 10) & 1 == int(xs[lane] * 10) & 1]
            assert oi[i].tolist() == [r % 4 * 100 + min(4, n - r // 4 * 4),
                                      parity.index(lane) * 100 + len(parity), 1, r]
            assert abs(out[2 * i + 1] - xs[active].sum()) < 1e-12


# --- __syncwarp with partial masks ----------------------------------------------------------

SYNCWARP = r'''
// each half of a warp synchronizes on its own mask, exchanging through shared memory
extern "C" __global__ void halves(const int *x, int *out) {
    __shared__ int s[64];
    int t = threadIdx.x, lane = t & 31, w = t >> 5;
    s[t] = x[t];
    if (lane < 16) {
        __syncwarp(0x0000ffffu);
        int a = s[w * 32 + 15 - lane];
        __syncwarp(0x0000ffffu);
        s[t] = a * 2;
        __syncwarp(0x0000ffffu);
        out[t] = s[w * 32 + (lane + 1) % 16];
    } else {
        __syncwarp(0xffff0000u);
        int a = s[w * 32 + 16 + (31 - lane)];
        __syncwarp(0xffff0000u);
        s[t] = a + 1000;
        __syncwarp(0xffff0000u);
        out[t] = s[w * 32 + 16 + (lane + 3) % 16];
    }
}
// a full-mask __syncwarp reached at two call sites by the odd and the even lanes
extern "C" __global__ void two_sites(const int *x, int *out) {
    __shared__ int s[64];
    int t = threadIdx.x, lane = t & 31, w = t >> 5;
    if (lane & 1) { s[t] = x[t] * 3; __syncwarp(); }
    else          { s[t] = x[t] - 7; __syncwarp(); }
    out[t] = s[w * 32 + (lane ^ 1)];
}
// only the lanes of the mask meet; the others go on without waiting
extern "C" __global__ void subset(const int *x, int *out) {
    __shared__ int s[64];
    int t = threadIdx.x, lane = t & 31, w = t >> 5;
    out[t] = -1;
    if (lane % 4 == 0) {
        s[t] = x[t];
        __syncwarp(0x11111111u);
        out[t] = s[w * 32 + (lane + 4) % 32];
    }
}
'''


def test_syncwarp_half_masks(rng):
    x = rng.integers(-100, 100, 64).astype(np.int32)
    _, out = run_both(SYNCWARP, "halves", (1,), (64,), (x, np.zeros(64, np.int32)))
    want = np.zeros(64, np.int64)
    for w in range(2):
        s = x[32 * w:32 * w + 32].astype(np.int64)
        after = np.concatenate([s[15::-1] * 2, s[31:15:-1] + 1000])
        for lane in range(32):
            want[32 * w + lane] = after[(lane + 1) % 16] if lane < 16 else after[16 + (lane + 3) % 16]
    np.testing.assert_array_equal(out, want)


def test_syncwarp_at_two_call_sites(rng):
    x = rng.integers(-100, 100, 64).astype(np.int32)
    ptx = _ptx(SYNCWARP, None)
    body = ptx[ptx.index(".entry two_sites"):]
    assert body[:body.index("ret;")].count("bar.warp.sync") == 2   # really two sites
    _, out = run_both(SYNCWARP, "two_sites", (1,), (64,), (x, np.zeros(64, np.int32)))
    partner = np.arange(64) ^ 1
    np.testing.assert_array_equal(out, np.where(partner & 1, x[partner] * 3, x[partner] - 7))


def test_syncwarp_subset_of_lanes(rng):
    x = rng.integers(-100, 100, 64).astype(np.int32)
    _, out = run_both(SYNCWARP, "subset", (1,), (64,), (x, np.zeros(64, np.int32)))
    t = np.arange(64)
    want = np.where(t % 4 == 0, x[(t // 32) * 32 + (t % 32 + 4) % 32], -1)
    np.testing.assert_array_equal(out, want)


# --- named barriers -------------------------------------------------------------------------

NAMED = r'''
// producer warps (0, 2) and consumer warps (1, 3) hand over a buffer through named barriers
extern "C" __global__ void producer_consumer(const int *x, int *out, int rounds) {
    __shared__ int buf[2][32];
    int t = threadIdx.x, lane = t & 31, w = t >> 5, pair = w >> 1;
    int acc = 0;
    for (int r = 0; r < rounds; r++) {
        if ((w & 1) == 0) {
            buf[pair][lane] = x[(r * 2 + pair) * 32 + lane];
            asm volatile("bar.arrive %0, 64;" :: "r"(1 + pair) : "memory");   // full
            asm volatile("bar.sync %0, 64;" :: "r"(3 + pair) : "memory");     // wait: empty
        } else {
            asm volatile("bar.sync %0, 64;" :: "r"(1 + pair) : "memory");     // wait: full
            acc += buf[pair][31 - lane];
            asm volatile("bar.arrive %0, 64;" :: "r"(3 + pair) : "memory");   // empty
        }
    }
    out[t] = acc;
}
// each half of the block synchronizes on its own barrier; then half 0 alone again
extern "C" __global__ void halves(const int *x, int *out) {
    __shared__ int s[128];
    int t = threadIdx.x, h = t / 64;
    s[t] = x[t] * 2;
    asm volatile("bar.sync %0, 64;" :: "r"(h + 1) : "memory");
    out[t] = s[h * 64 + (t + 17) % 64];
    if (h == 0) {
        asm volatile("barrier.sync 5, 64;" ::: "memory");
        out[t] += s[(t + 1) % 64];
    }
}
// waits for 128 threads: with 64 it cannot complete
extern "C" __global__ void stuck(int *out) {
    asm volatile("bar.sync 1, 128;" ::: "memory");
    out[threadIdx.x] = 1;
}
'''


def test_named_barriers_producer_consumer(rng):
    rounds = 3
    x = rng.integers(-100, 100, rounds * 64).astype(np.int32)
    _, out = run_both(NAMED, "producer_consumer", (1,), (128,),
                      (x, np.zeros(128, np.int32), np.int32(rounds)))
    want = np.zeros(128, np.int64)
    for t in range(128):
        w, lane = t >> 5, t & 31
        if w & 1:
            want[t] = sum(x[(r * 2 + (w >> 1)) * 32 + 31 - lane] for r in range(rounds))
    np.testing.assert_array_equal(out, want)


def test_named_barriers_of_block_halves(rng):
    x = rng.integers(-100, 100, 128).astype(np.int32)
    _, out = run_both(NAMED, "halves", (1,), (128,), (x, np.zeros(128, np.int32)))
    s = x.astype(np.int64) * 2
    t = np.arange(128)
    want = s[(t // 64) * 64 + (t + 17) % 64] + np.where(t < 64, s[(t + 1) % 64], 0)
    np.testing.assert_array_equal(out, want)


def test_named_barrier_that_cannot_complete_is_an_error():
    with pytest.raises(cpuify.KernelFailure, match="stuck.*named barrier"):
        _module(NAMED, None).get_function("stuck")((1,), (64,), (np.zeros(64, np.int32),))
    with pytest.raises(cpuify.LaunchError, match="stuck.*named barriers"):
        interpret_kernel(_ptx(NAMED, None), "stuck", (1,), (64,), (np.zeros(64, np.int32),))


# --- cp.async and memcpy_async --------------------------------------------------------------

CP_ASYNC = r'''
#include <cuda_pipeline.h>
// every copy size, with src-size (the bytes after it are zero-filled)
extern "C" __global__ void sizes(const unsigned char *x, unsigned char *out, const int *srcsz) {
    __shared__ __align__(16) unsigned char s[3 * 16 * 64];
    int t = threadIdx.x;
    unsigned d4 = (unsigned)__cvta_generic_to_shared(&s[t * 4]);
    unsigned d8 = (unsigned)__cvta_generic_to_shared(&s[256 + t * 8]);
    unsigned d16 = (unsigned)__cvta_generic_to_shared(&s[768 + t * 16]);
    for (int k = 0; k < 3 * 16 * 64; k += 64) s[k + t] = 0xAB;
    __syncthreads();
    int n = srcsz[t];
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" :: "r"(d4), "l"(x + t * 4), "r"(n < 4 ? n : 4));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" :: "r"(d8), "l"(x + 256 + t * 8), "r"(n < 8 ? n : 8));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(d16), "l"(x + 768 + t * 16), "r"(n));
    asm volatile("cp.async.commit_group;");
    asm volatile("cp.async.wait_group 0;");
    __syncthreads();
    for (int k = 0; k < 3 * 16 * 64; k += 64) out[k + t] = s[k + t];
}
// ignore-src (a true predicate reads nothing and writes zeros), a prefetch-size hint
extern "C" __global__ void ignore_src(const int4 *x, int4 *out) {
    __shared__ int4 s[64];
    int t = threadIdx.x;
    unsigned d = (unsigned)__cvta_generic_to_shared(&s[t]);
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %2, 0;\n"
                 "  cp.async.cg.shared.global.L2::128B [%0], [%1], 16, p; }"
                 :: "r"(d), "l"(x + t), "r"((int)(t % 3 == 0)));
    asm volatile("cp.async.wait_all;");
    __syncthreads();
    out[t] = s[63 - t];
}
// double buffering: stage k+1 is copied while stage k is summed
extern "C" __global__ void pipeline(const float *x, float *out, int nstages) {
    __shared__ float buf[2][128];
    int t = threadIdx.x;
    float acc = 0;
    __pipeline_memcpy_async(&buf[0][t], &x[t], 4);
    __pipeline_commit();
    for (int k = 0; k < nstages; k++) {
        if (k + 1 < nstages) __pipeline_memcpy_async(&buf[(k + 1) & 1][t], &x[(k + 1) * 128 + t], 4);
        __pipeline_commit();
        __pipeline_wait_prior(1);
        __syncthreads();
        acc += buf[k & 1][127 - t];
        __syncthreads();
    }
    out[t] = acc;
}
// cg::memcpy_async on the block (wait_prior, wait) and on warps (an unaligned length)
extern "C" __global__ void cg_copy(const float *x, float *out) {
    __shared__ float s[512];
    cg::thread_block b = cg::this_thread_block();
    cg::memcpy_async(b, s, x + blockIdx.x * 512, sizeof(float) * 256);
    cg::memcpy_async(b, s + 256, x + blockIdx.x * 512 + 256, sizeof(float) * 256);
    cg::wait_prior<1>(b);
    cg::wait(b);
    float v = s[511 - b.thread_rank()] + s[b.thread_rank()];
    cg::thread_block_tile<32> w = cg::tiled_partition<32>(b);
    __shared__ float t[8][40];
    cg::memcpy_async(w, t[w.meta_group_rank()], x + w.meta_group_rank() * 40 + 3, sizeof(float) * 37);
    cg::wait(w);
    int k = w.thread_rank() + 5;
    out[blockIdx.x * 256 + b.thread_rank()] = v + (k < 37 ? t[w.meta_group_rank()][k] : 0.0f);
}
'''


def test_cp_async_sizes_and_zero_fill(rng):
    x = rng.integers(0, 256, 3 * 16 * 64, dtype=np.uint8)
    srcsz = rng.integers(0, 17, 64).astype(np.int32)
    srcsz[:3] = (0, 16, 5)
    ptx = _ptx(CP_ASYNC, "sm_80")
    assert "cp.async.ca.shared.global" in ptx and "cp.async.cg.shared.global" in ptx
    _, out, _ = run_both(CP_ASYNC, "sizes", (1,), (64,), (x, np.zeros_like(x), srcsz), arch="sm_80")
    want = np.full_like(x, 0xAB)
    for t in range(64):
        for base, size in ((0, 4), (256, 8), (768, 16)):
            seg = x[base + t * size:base + (t + 1) * size].copy()
            seg[min(srcsz[t], size):] = 0
            want[base + t * size:base + (t + 1) * size] = seg
    np.testing.assert_array_equal(out, want)


def test_cp_async_ignore_src(rng):
    x = rng.integers(-2**31, 2**31, (64, 4), dtype=np.int64).astype(np.int32)
    _, out = run_both(CP_ASYNC, "ignore_src", (1,), (64,), (x, np.zeros_like(x)), arch="sm_80")
    want = x.copy()
    want[np.arange(64) % 3 == 0] = 0
    np.testing.assert_array_equal(out, want[::-1])


def test_pipeline_double_buffering(rng):
    stages = 5
    x = rng.standard_normal(stages * 128).astype(np.float32)
    _, out = run_both(CP_ASYNC, "pipeline", (1,), (128,),
                      (x, np.zeros(128, np.float32), np.int32(stages)), arch="sm_80")
    want = np.zeros(128, np.float32)
    for k in range(stages):                   # the kernel's order of additions
        want += x.reshape(stages, 128)[k, ::-1]
    np.testing.assert_array_equal(out, want)


PIPELINE = r'''
#include <cuda/pipeline>
// a pipeline of one thread (cp.async with commit and wait groups, no mbarrier)
extern "C" __global__ void thread_pipeline(const float *x, float *out, int nstages) {
    __shared__ float buf[2][128];
    int t = threadIdx.x;
    cuda::pipeline<cuda::thread_scope_thread> pipe = cuda::make_pipeline();
    float acc = 0;
    pipe.producer_acquire();
    cuda::memcpy_async(&buf[0][t], &x[t], sizeof(float), pipe);
    pipe.producer_commit();
    for (int k = 0; k < nstages; k++) {
        pipe.producer_acquire();
        if (k + 1 < nstages)
            cuda::memcpy_async(&buf[(k + 1) & 1][t], &x[(k + 1) * 128 + t], sizeof(float), pipe);
        pipe.producer_commit();
        cuda::pipeline_consumer_wait_prior<1>(pipe);
        __syncthreads();
        acc += buf[k & 1][127 - t];
        __syncthreads();
        pipe.consumer_release();
    }
    out[t] = acc;
}
'''


def test_cuda_pipeline_of_one_thread(rng):
    stages = 4
    x = rng.standard_normal(stages * 128).astype(np.float32)
    assert "cp.async.wait_group" in _ptx(PIPELINE, "sm_80")
    _, out = run_both(PIPELINE, "thread_pipeline", (1,), (128,),
                      (x, np.zeros(128, np.float32), np.int32(stages)), arch="sm_80")
    want = np.zeros(128, np.float32)
    for k in range(stages):
        want += x.reshape(stages, 128)[k, ::-1]
    np.testing.assert_array_equal(out, want)


BLOCK_PIPELINE = r'''
#include <cuda/pipeline>
// a pipeline of the whole block: mbarriers, and cp.async.mbarrier.arrive
extern "C" __global__ void block_pipeline(const float *x, float *out, int nstages) {
    __shared__ float buf[2][128];
    __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, 2> state;
    auto block = cg::this_thread_block();
    auto pipe = cuda::make_pipeline(block, &state);
    int t = threadIdx.x;
    float acc = 0;
    for (int k = 0; k < nstages; k++) {
        pipe.producer_acquire();
        cuda::memcpy_async(block, buf[k & 1], x + k * 128, sizeof(float) * 128, pipe);
        pipe.producer_commit();
        pipe.consumer_wait();
        acc += buf[k & 1][127 - t];
        pipe.consumer_release();
    }
    out[t] = acc;
}
'''


def test_block_scope_pipeline(rng):
    from cpuify.lifting.semantics import ALLOWED
    assert "cp.async.mbarrier.arrive" in _ptx(BLOCK_PIPELINE, "sm_80")
    stages = 4
    x = rng.standard_normal(stages * 128).astype(np.float32)
    args = (x, np.zeros(128, np.float32), np.int32(stages))
    if "mbarrier" not in ALLOWED:
        with pytest.raises(cpuify.UnsupportedError, match="block_pipeline.*mbarrier"):
            _module(BLOCK_PIPELINE, "sm_80").get_function("block_pipeline")
        return
    # with mbarrier objects (issue #18's asynchronous barriers) the pipeline runs
    _, out = run_both(BLOCK_PIPELINE, "block_pipeline", (1,), (128,), args, arch="sm_80")
    want = np.zeros(128, np.float32)
    for k in range(stages):
        want += x.reshape(stages, 128)[k, ::-1]
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("arch", ["sm_80", None])      # cp.async, or a synchronous copy
def test_cg_memcpy_async(arch, rng):
    x = rng.standard_normal(1024).astype(np.float32)
    _, out = run_both(CP_ASYNC, "cg_copy", (2,), (256,), (x, np.zeros(512, np.float32)), arch=arch)
    want = np.zeros(512, np.float32)
    for blk in range(2):
        s = x[blk * 512:(blk + 1) * 512]
        for r in range(256):
            w, lane = divmod(r, 32)
            tail = x[w * 40 + 3 + lane + 5] if lane + 5 < 37 else np.float32(0)
            want[blk * 256 + r] = (s[511 - r] + s[r]) + tail
    np.testing.assert_array_equal(out, want)


# --- fns (the n-th set bit), behind coalesced groups ------------------------------------------

FNS = r'''
extern "C" __global__ void fns(const unsigned *m, const unsigned *base, const int *off,
                               unsigned *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned d;
        asm("fns.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(m[i]), "r"(base[i]), "r"(off[i]));
        out[i] = d;
    }
}
'''


def _fns(mask: int, base: int, offset: int) -> int:
    """The PTX ISA's pseudocode of fns.b32."""
    if offset == 0:
        return base if base < 32 and mask >> base & 1 else 0xFFFFFFFF
    pos, count, step = base, abs(offset) - 1, 1 if offset > 0 else -1
    while 0 <= pos < 32:
        if mask >> pos & 1:
            if count == 0:
                return pos
            count -= 1
        pos += step
    return 0xFFFFFFFF


def test_fns(rng):
    n = 512
    m = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    m[:32], m[32:64], m[64:96] = 0xAAAAAAAA, 0, 0xFFFFFFFF
    m[96:256] &= rng.integers(0, 2**32, 160, dtype=np.uint64).astype(np.uint32)
    base = rng.integers(0, 32, n).astype(np.uint32)
    base[-16:] = rng.integers(32, 100, 16)
    off = rng.integers(-34, 35, n).astype(np.int32)
    *_, out = run_both(FNS, "fns", (4,), (128,), (m, base, off, np.zeros(n, np.uint32), np.int32(n)))
    want = [_fns(int(a), int(b), int(c)) for a, b, c in zip(m, base, off)]
    np.testing.assert_array_equal(out, np.array(want, np.uint32))


# --- tiles of several warps -----------------------------------------------------------------

MULTI_WARP = r'''
template <int N>
__device__ void mw(const int *x, int *out) {
    cg::thread_block b = cg::this_thread_block();
    cg::thread_block_tile<N> t = cg::tiled_partition<N>(b);
    __shared__ int s[1024];
    int r = b.thread_rank();
    int v = x[blockIdx.x * blockDim.x + r];
    int *o = out + (blockIdx.x * blockDim.x + r) * 10;
    o[0] = t.thread_rank(); o[1] = t.num_threads(); o[2] = t.meta_group_rank();
    o[3] = t.meta_group_size();
    s[r] = v;
    t.sync();
    o[4] = s[t.meta_group_rank() * N + (t.thread_rank() + 1) % N];
    o[5] = t.shfl(v, N / 2 + 3);     // tiles of several warps: one source rank per tile
    o[6] = t.any(v > 95);
    o[7] = t.all(v > -99);
    o[8] = cg::reduce(t, v, cg::plus<int>());
    o[9] = cg::reduce(t, v, cg::greater<int>());
}
#define K(N) extern "C" __global__ void mw##N(const int *x, int *out) { mw<N>(x, out); }
K(64) K(128) K(256) K(512)

// before sm_80 the tile barriers live in memory the program provides
extern "C" __global__ void user_memory(const int *x, int *out) {
    __shared__ cg::block_tile_memory<256> scratch;
    cg::thread_block b = cg::this_thread_block(scratch);
    cg::thread_block_tile<128> t = cg::tiled_partition<128>(b);
    int v = x[b.thread_rank()];
    out[b.thread_rank()] = cg::reduce(t, v, cg::plus<int>()) * 1000 + t.meta_group_rank();
}
'''

needs_spin_waits = pytest.mark.skipif(
    "yield" not in SYNC_KINDS,
    reason="tiles of several warps synchronize by spin-waits on shared memory: they need the "
           "spin-wait yield points of issue #18 (forward progress)")


@needs_spin_waits
@pytest.mark.parametrize("n", [64, 128, 256, 512])
def test_multi_warp_tiles(n, rng):
    bs = 512
    x = rng.integers(-100, 100, 2 * bs).astype(np.int32)
    _, out = run_both(MULTI_WARP, f"mw{n}", (2,), (bs,), (x, np.zeros(2 * bs * 10, np.int32)),
                      arch="sm_80")
    got = out.reshape(-1, 10)
    for g in range(2 * bs // n):
        xs = x[g * n:(g + 1) * n]
        for r in range(n):
            i = g * n + r
            want = [r, n, (i % bs) // n, bs // n, xs[(r + 1) % n], xs[n // 2 + 3],
                    int((xs > 95).any()), int((xs > -99).all()), xs.sum(), xs.max()]
            assert got[i].tolist() == want, (n, i)


@needs_spin_waits
def test_multi_warp_tile_with_block_tile_memory():
    x = np.arange(256, dtype=np.int32)
    _, out = run_both(MULTI_WARP, "user_memory", (1,), (256,), (x, np.zeros(256, np.int32)))
    want = np.repeat(x.reshape(2, 128).sum(axis=1), 128) * 1000 + np.repeat([0, 1], 128)
    np.testing.assert_array_equal(out, want)


def test_reserved_shared_memory_is_part_of_the_kernel():
    # %reserved_smem_offset_1 points into 1 KB of the block's shared memory
    k = _module(MULTI_WARP, "sm_80").get_function("mw64")
    assert k.attributes["shared_size_bytes"] >= 1024 + 4096


# --- the same bits as a GPU -----------------------------------------------------------------

H100 = Path(__file__).parent / "data" / "cg_h100.npz"


def _h100_cases() -> list[str]:
    with np.load(H100) as d:
        return sorted(k[:-len("_meta")] for k in d.files if k.endswith("_meta"))


@pytest.mark.parametrize("case", _h100_cases())
def test_same_bits_as_an_h100(case):
    """The kernels above on inputs an NVIDIA H100 ran them on (tools/gpu_cg/probe_cg.py,
    CUDA 13.0, CuPy): cpuify gives the GPU's outputs bit for bit."""
    with np.load(H100) as d:
        meta = json.loads(str(d[f"{case}_meta"]))
        src = globals()[meta["src"]]
        if hashlib.sha256((HEADERS + src).encode()).hexdigest()[:16] != meta["sha"]:
            pytest.fail(f"{meta['src']} changed since the GPU ran it: record it again with "
                        "tools/gpu_cg/probe_cg.py on a GPU")
        if meta["src"] == "MULTI_WARP" and "yield" not in SYNC_KINDS:
            pytest.skip("tiles of several warps need spin-wait yield points (issue #18)")
        args = [d[f"{case}_in{k}"].copy() if f"{case}_in{k}" in d.files
                else np.int32(meta["scalars"][str(k)]) for k in range(meta["nargs"])]
        gpu = {k: d[f"{case}_out{k}"] for k in range(meta["nargs"]) if f"{case}_out{k}" in d.files}
    _module(src, meta["arch"]).get_function(meta["kernel"])(tuple(meta["grid"]), tuple(meta["block"]),
                                                           tuple(args))
    for k, want in gpu.items():
        np.testing.assert_array_equal(args[k].view(np.uint8), want.view(np.uint8),
                                      err_msg=f"{case}: argument {k} differs from the GPU's")
