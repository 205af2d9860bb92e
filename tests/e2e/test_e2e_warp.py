"""Warp-level primitives: shuffles (down/xor/idx/up, with width), votes, block-wide
__syncthreads_count/_or/_and, warp-0-only reductions, match/redux and cooperative groups."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify

FULL = 0xFFFFFFFF

SRC = r'''
#define FULL 0xffffffffu

extern "C" __global__ void warp_sum_down(const int *x, int *warp_sums) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = x[i];
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_down_sync(FULL, v, off);
    if ((threadIdx.x & 31) == 0) warp_sums[i / 32] = v;
}

// butterfly: every lane ends with the warp's sum and max
extern "C" __global__ void warp_allreduce_xor(const float *x, float *sum, float *mx) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float s = x[i], m = x[i];
    #pragma unroll
    for (int mask = 1; mask < 32; mask <<= 1) {
        s += __shfl_xor_sync(FULL, s, mask);
        m = fmaxf(m, __shfl_xor_sync(FULL, m, mask));
    }
    sum[i] = s; mx[i] = m;
}

// out[0]: gather from lane (7*lane+3)%32; out[1]: broadcast lane 5;
// out[2]: broadcast lane 0 within 8-lane segments (width 8); out[3]: 64-bit value from lane^1
extern "C" __global__ void warp_shfl_idx(const int *x, const long long *X, int *out, long long *out64) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31;
    out[3 * i + 0] = __shfl_sync(FULL, x[i], (7 * lane + 3) % 32);
    out[3 * i + 1] = __shfl_sync(FULL, x[i], 5);
    out[3 * i + 2] = __shfl_sync(FULL, x[i], 0, 8);
    out64[i] = __shfl_xor_sync(FULL, X[i], 1);
}

// inclusive scan within each warp, and within 16-lane halves (width 16)
extern "C" __global__ void warp_scan_up(const int *x, int *scan32, int *scan16) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31;
    int v = x[i], w = x[i];
    for (int off = 1; off < 32; off <<= 1) {
        int t = __shfl_up_sync(FULL, v, off);
        if (lane >= off) v += t;
    }
    for (int off = 1; off < 16; off <<= 1) {
        int t = __shfl_up_sync(FULL, w, off, 16);
        if ((lane & 15) >= off) w += t;
    }
    scan32[i] = v; scan16[i] = w;
}

extern "C" __global__ void warp_votes(const int *x, unsigned int *ballot, int *any, int *all,
                                      int *popc) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int p = x[i] > 0;
    unsigned int b = __ballot_sync(FULL, p);
    int w = i / 32;
    if ((threadIdx.x & 31) == 0) {
        ballot[w] = b;
        popc[w] = __popc(b);
    }
    any[i] = __any_sync(FULL, p);
    all[i] = __all_sync(FULL, p);
}

// votes in a block whose last warp is partial: only the existing lanes take part
extern "C" __global__ void partial_warp_ballot(const int *x, unsigned int *ballot, unsigned int *active) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int m = __activemask();
    unsigned int b = __ballot_sync(m, x[i] != 0);
    if ((threadIdx.x & 31) == 0) { ballot[i / 32] = b; active[i / 32] = m; }
}

extern "C" __global__ void block_votes(const int *x, int *cnt, int *any, int *all) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int p = x[i] != 0;
    int c = __syncthreads_count(p);
    int o = __syncthreads_or(p);
    int a = __syncthreads_and(p);
    // every thread got the same answer
    if (threadIdx.x == blockDim.x - 1) { cnt[blockIdx.x] = c; any[blockIdx.x] = o; all[blockIdx.x] = a; }
    if (c != __syncthreads_count(p)) cnt[blockIdx.x] = -1;
}

// warp-level partials, then warp 0 alone reduces them with shuffles
extern "C" __global__ void block_sum_warp0(const float *x, float *out, int n) {
    __shared__ float warp_sums[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float v = i < n ? x[i] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(FULL, v, off);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        int nwarps = (blockDim.x + 31) / 32;
        float s = lane < nwarps ? warp_sums[lane] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(FULL, s, off);
        if (lane == 0) out[blockIdx.x] = s;
    }
}

// collectives inside a branch taken by half of each warp, with the matching member mask,
// and __syncwarp between shared-memory phases of a warp
extern "C" __global__ void half_warp_branch(const int *x, int *out) {
    __shared__ int s[256];
    int t = threadIdx.x, lane = t & 31;
    int i = blockIdx.x * blockDim.x + t;
    int v = x[i];
    if (lane < 16) {
        for (int off = 8; off > 0; off >>= 1)
            v += __shfl_down_sync(0x0000ffffu, v, off, 16);
        v = __shfl_sync(0x0000ffffu, v, 0, 16);
    } else {
        v = -v;
    }
    s[t] = v;
    __syncwarp();
    out[i] = s[t ^ 31] + (int)__ballot_sync(0xffffffffu, v > 0) % 1000;
}

// shuffles in a loop whose trip count differs from warp to warp (uniform inside a warp)
extern "C" __global__ void warp_varying_rounds(const int *x, int *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int warp = threadIdx.x >> 5;
    int v = x[i];
    for (int r = 0; r < warp + 1; ++r)
        v = __shfl_sync(FULL, v, (threadIdx.x + 1) & 31) + 1;   // rotate left by one lane
    out[i] = v;
}
'''

SM80_SRC = r'''
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

extern "C" __global__ void match_and_redux(const int *key, unsigned int *match, int *rsum,
                                           unsigned int *rmax) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    match[i] = __match_any_sync(0xffffffffu, key[i]);
    rsum[i] = __reduce_add_sync(0xffffffffu, key[i]);
    rmax[i] = __reduce_max_sync(0xffffffffu, (unsigned int)key[i]);
}

// each half-warp reduces on its own: the member mask differs between the halves
extern "C" __global__ void redux_halves(const int *x, int *out) {
    unsigned int m = (threadIdx.x & 16) ? 0xffff0000u : 0x0000ffffu;
    out[threadIdx.x] = __reduce_add_sync(m, x[threadIdx.x]);
}

extern "C" __global__ void cg_tile_sum(const int *x, int *out) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<16> tile = cg::tiled_partition<16>(block);
    int v = x[block.group_index().x * block.size() + block.thread_rank()];
    for (int off = tile.size() / 2; off > 0; off /= 2) v += tile.shfl_down(v, off);
    int total = cg::reduce(tile, x[block.group_index().x * block.size() + block.thread_rank()],
                           cg::plus<int>());
    if (tile.thread_rank() == 0)
        out[(block.group_index().x * block.size() + block.thread_rank()) / 16] = v * 1000 + (total == v);
    block.sync();
}
'''


@pytest.fixture(scope="module")
def mod():
    return cpuify.RawModule(code=SRC)


@pytest.fixture(scope="module")
def sm80():
    return cpuify.RawModule(code=SM80_SRC, options=("--gpu-architecture=compute_80",))


def test_shfl_down_warp_reduction(mod, rng):
    x = rng.integers(-1000, 1000, 4 * 256, dtype=np.int32)
    out = np.zeros(x.size // 32, np.int32)
    mod.get_function("warp_sum_down")((4,), (256,), (x, out))
    np.testing.assert_array_equal(out, x.reshape(-1, 32).sum(axis=1))


def test_shfl_xor_butterfly(mod, rng):
    x = rng.integers(-50, 50, 2 * 128).astype(np.float32)
    s = np.zeros_like(x)
    m = np.zeros_like(x)
    mod.get_function("warp_allreduce_xor")((2,), (128,), (x, s, m))
    xs = x.reshape(-1, 32)
    np.testing.assert_array_equal(s.reshape(-1, 32), np.repeat(xs.sum(axis=1, keepdims=True), 32, 1))
    np.testing.assert_array_equal(m.reshape(-1, 32), np.repeat(xs.max(axis=1, keepdims=True), 32, 1))


def test_shfl_idx_broadcast_gather_width(mod, rng):
    nb, bs = 2, 64
    x = rng.integers(-10**6, 10**6, nb * bs, dtype=np.int32)
    X = rng.integers(-2**62, 2**62, nb * bs, dtype=np.int64)
    out = np.zeros(3 * nb * bs, np.int32)
    o64 = np.zeros(nb * bs, np.int64)
    mod.get_function("warp_shfl_idx")((nb,), (bs,), (x, X, out, o64))
    out = out.reshape(-1, 32, 3)
    xw = x.reshape(-1, 32)
    lane = np.arange(32)
    np.testing.assert_array_equal(out[:, :, 0], xw[:, (7 * lane + 3) % 32])
    np.testing.assert_array_equal(out[:, :, 1], np.repeat(xw[:, 5:6], 32, 1))
    np.testing.assert_array_equal(out[:, :, 2], xw[:, (lane // 8) * 8])
    np.testing.assert_array_equal(o64, X.reshape(-1, 2)[:, ::-1].ravel())


def test_shfl_up_inclusive_scan(mod, rng):
    x = rng.integers(0, 100, 3 * 96, dtype=np.int32)
    s32 = np.zeros_like(x)
    s16 = np.zeros_like(x)
    mod.get_function("warp_scan_up")((3,), (96,), (x, s32, s16))
    np.testing.assert_array_equal(s32.reshape(-1, 32), np.cumsum(x.reshape(-1, 32), axis=1))
    np.testing.assert_array_equal(s16.reshape(-1, 16), np.cumsum(x.reshape(-1, 16), axis=1))


def test_ballot_any_all(mod, rng):
    nb, bs = 2, 128
    x = rng.integers(-5, 5, nb * bs, dtype=np.int32)
    x[:32] = 1            # warp 0: all true
    x[32:64] = -1         # warp 1: all false
    x[64:96] = -1
    x[64 + 17] = 3        # warp 2: exactly lane 17
    nw = nb * bs // 32
    ballot = np.zeros(nw, np.uint32)
    popc = np.zeros(nw, np.int32)
    anyv = np.zeros(nb * bs, np.int32)
    allv = np.zeros(nb * bs, np.int32)
    mod.get_function("warp_votes")((nb,), (bs,), (x, ballot, anyv, allv, popc))
    p = (x > 0).reshape(nw, 32)
    exp_ballot = (p.astype(np.uint64) << np.arange(32, dtype=np.uint64)).sum(axis=1).astype(np.uint32)
    np.testing.assert_array_equal(ballot, exp_ballot)
    assert ballot[0] == FULL and ballot[1] == 0 and ballot[2] == 1 << 17
    np.testing.assert_array_equal(popc, p.sum(axis=1))
    np.testing.assert_array_equal(anyv.reshape(nw, 32), np.repeat(p.any(axis=1, keepdims=True), 32, 1))
    np.testing.assert_array_equal(allv.reshape(nw, 32), np.repeat(p.all(axis=1, keepdims=True), 32, 1))


def test_ballot_with_partial_last_warp(mod):
    bs = 40                                   # warp 1 has only 8 lanes
    x = np.ones(bs, np.int32)
    x[3] = 0
    ballot = np.zeros(2, np.uint32)
    active = np.zeros(2, np.uint32)
    mod.get_function("partial_warp_ballot")((1,), (bs,), (x, ballot, active))
    assert active[0] == FULL and active[1] == 0xFF
    assert ballot[0] == FULL & ~(1 << 3) and ballot[1] == 0xFF


def test_syncthreads_count_or_and(mod, rng):
    nb, bs = 4, 200
    x = (rng.random(nb * bs) < 0.3).astype(np.int32)
    x[bs:2 * bs] = 0              # block 1: none
    x[2 * bs:3 * bs] = 1          # block 2: all
    cnt = np.zeros(nb, np.int32)
    anyv = np.zeros(nb, np.int32)
    allv = np.zeros(nb, np.int32)
    mod.get_function("block_votes")((nb,), (bs,), (x, cnt, anyv, allv))
    xs = x.reshape(nb, bs)
    np.testing.assert_array_equal(cnt, xs.sum(axis=1))
    np.testing.assert_array_equal(anyv != 0, xs.any(axis=1))
    np.testing.assert_array_equal(allv != 0, xs.all(axis=1))


@pytest.mark.parametrize("bs", [32, 256, 1024, 96])
def test_block_reduce_warp0_only(mod, rng, bs):
    n = 5 * bs - 7
    x = rng.integers(-100, 100, n).astype(np.float32)
    out = np.zeros(5, np.float32)
    mod.get_function("block_sum_warp0")((5,), (bs,), (x, out, np.int32(n)))
    padded = np.zeros(5 * bs, np.float32)
    padded[:n] = x
    np.testing.assert_array_equal(out, padded.reshape(5, bs).sum(axis=1))


def test_shuffle_in_loop_with_per_warp_trip_count(mod, rng):
    bs = 128
    x = rng.integers(0, 10**6, bs, dtype=np.int32)
    out = np.zeros_like(x)
    mod.get_function("warp_varying_rounds")((1,), (bs,), (x, out))
    for w in range(bs // 32):
        xw = x[32 * w:32 * w + 32]
        r = w + 1
        np.testing.assert_array_equal(out[32 * w:32 * w + 32], np.roll(xw, -r) + r)


def test_collectives_in_half_warp_branch_and_syncwarp(mod, rng):
    nb, bs = 2, 64
    x = rng.integers(-100, 100, nb * bs, dtype=np.int32)
    out = np.zeros_like(x)
    mod.get_function("half_warp_branch")((nb,), (bs,), (x, out))
    xw = x.reshape(-1, 32).astype(np.int64)
    v = np.where(np.arange(32) < 16, xw[:, :16].sum(axis=1, keepdims=True), -xw)
    ballot = ((v > 0).astype(np.int64) << np.arange(32)).sum(axis=1, keepdims=True)
    ballot = np.fmod(ballot.astype(np.uint32).view(np.int32).astype(np.int64), 1000)  # (int)b % 1000
    exp = v[:, np.arange(32) ^ 31] + ballot
    np.testing.assert_array_equal(out.reshape(-1, 32), exp)


def test_match_any_redux_sm80(sm80):
    m = sm80
    key = np.array([i % 3 for i in range(32)] + [7] * 16 + [i for i in range(16)], np.int32)
    n = key.size
    match = np.zeros(n, np.uint32)
    rsum = np.zeros(n, np.int32)
    rmax = np.zeros(n, np.uint32)
    m.get_function("match_and_redux")((1,), (n,), (key, match, rsum, rmax))
    for w in range(2):
        kw = key[32 * w:32 * w + 32]
        for lane in range(32):
            exp = sum(1 << j for j in range(32) if kw[j] == kw[lane])
            assert match[32 * w + lane] == exp
        assert (rsum[32 * w:32 * w + 32] == kw.sum()).all()
        assert (rmax[32 * w:32 * w + 32] == kw.max()).all()


def test_redux_with_half_warp_member_masks(sm80, rng):
    m = sm80
    x = rng.integers(-1000, 1000, 64, dtype=np.int32)
    out = np.zeros_like(x)
    m.get_function("redux_halves")((1,), (64,), (x, out))
    np.testing.assert_array_equal(out, np.repeat(x.reshape(4, 16).sum(axis=1), 16))


def test_cooperative_groups_tile_reduction(sm80, rng):
    m = sm80
    nb, bs = 3, 64
    x = rng.integers(-100, 100, nb * bs, dtype=np.int32)
    out = np.zeros(nb * bs // 16, np.int32)
    m.get_function("cg_tile_sum")((nb,), (bs,), (x, out))
    sums = x.reshape(-1, 16).sum(axis=1)
    np.testing.assert_array_equal(out, sums * 1000 + 1)
