"""Atomics on shared and global memory: histograms, int/float/double adds, min/max, exch,
inc/dec, bitwise ops, CAS loops and atomic-ticket stream compaction."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify

SRC = r'''
// 256-bin histogram: per-block privatized histogram in shared memory, merged globally
extern "C" __global__ void hist_shared(const unsigned char *data, int n, unsigned int *hist) {
    __shared__ unsigned int h[256];
    for (int b = threadIdx.x; b < 256; b += blockDim.x) h[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&h[data[i]], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += blockDim.x)
        if (h[b]) atomicAdd(&hist[b], h[b]);
}

extern "C" __global__ void hist_global(const int *data, int n, int *hist, int nbins) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&hist[((data[i] % nbins) + nbins) % nbins], 1);
}

extern "C" __global__ void sum_float(const float *x, int n, float *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(out, x[i]);
}

extern "C" __global__ void sum_double_native(const double *x, int n, double *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(out, x[i]);
}

// double add implemented with a 64-bit CAS loop (the classic pre-sm_60 recipe)
__device__ double atomic_add_cas(double *addr, double val) {
    unsigned long long *a = (unsigned long long *)addr;
    unsigned long long old = *a, assumed;
    do {
        assumed = old;
        old = atomicCAS(a, assumed, __double_as_longlong(val + __longlong_as_double(assumed)));
    } while (assumed != old);
    return __longlong_as_double(old);
}

// float max implemented with a 32-bit CAS loop
__device__ float atomic_max_float(float *addr, float val) {
    int *a = (int *)addr;
    int old = *a, assumed;
    while (val > __int_as_float(old)) {
        assumed = old;
        old = atomicCAS(a, assumed, __float_as_int(val));
        if (old == assumed) break;
    }
    return __int_as_float(old);
}

extern "C" __global__ void cas_loops(const double *x, const float *y, int n,
                                     double *dsum, float *fmax) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomic_add_cas(dsum, x[i]);
        atomic_max_float(fmax, y[i]);
    }
}

// out: [max, min] for int, [max, min] for unsigned, and the same in shared memory
extern "C" __global__ void minmax(const int *x, const unsigned int *u, int n,
                                  int *imm, unsigned int *umm, int *block_mm) {
    __shared__ int smax, smin;
    if (threadIdx.x == 0) { smax = -2147483647 - 1; smin = 2147483647; }
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicMax(&imm[0], x[i]);
        atomicMin(&imm[1], x[i]);
        atomicMax(&umm[0], u[i]);
        atomicMin(&umm[1], u[i]);
        atomicMax(&smax, x[i]);
        atomicMin(&smin, x[i]);
    }
    __syncthreads();
    if (threadIdx.x == 0) { block_mm[2 * blockIdx.x] = smax; block_mm[2 * blockIdx.x + 1] = smin; }
}

// every thread swaps its id into one slot; the old values + final value are a permutation
extern "C" __global__ void exch(int *slot, int *olds, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) olds[i] = atomicExch(slot, i);
}

extern "C" __global__ void inc_dec(unsigned int *ctr, unsigned int *olds_inc,
                                   unsigned int *olds_dec, unsigned int limit, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        olds_inc[i] = atomicInc(&ctr[0], limit);
        olds_dec[i] = atomicDec(&ctr[1], limit);
    }
}

extern "C" __global__ void bitwise(const unsigned int *x, int n, unsigned int *out,
                                   int *sub, unsigned long long *ull) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAnd(&out[0], x[i]);
        atomicOr(&out[1], x[i]);
        atomicXor(&out[2], x[i]);
        atomicSub(sub, i);
        atomicAdd(ull, (unsigned long long)x[i] << 20);
    }
}

// keep the positive elements, in any order, using atomicAdd tickets
extern "C" __global__ void compact(const float *x, int n, float *out, int *count) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && x[i] > 0.0f) {
        int slot = atomicAdd(count, 1);
        out[slot] = x[i];
    }
}

// shared-memory float atomics and the value atomicAdd returns
extern "C" __global__ void shared_float_add(const float *x, float *block_sums, int *ticket_ok) {
    __shared__ float acc;
    __shared__ int seen[1024];
    if (threadIdx.x == 0) acc = 0.0f;
    seen[threadIdx.x] = 0;
    __syncthreads();
    atomicAdd(&acc, x[blockIdx.x * blockDim.x + threadIdx.x]);
    __shared__ unsigned int ctr;
    if (threadIdx.x == 0) ctr = 0;
    __syncthreads();
    unsigned int t = atomicAdd(&ctr, 1u);
    atomicAdd(&seen[t], 1);
    __syncthreads();
    if (threadIdx.x == 0) block_sums[blockIdx.x] = acc;
    if (seen[threadIdx.x] != 1) atomicAdd(ticket_ok, 1);
}
'''


@pytest.fixture(scope="module")
def mod():
    return cpuify.RawModule(code=SRC)


def test_histogram_shared_atomics(mod, rng):
    n = 100_000
    data = rng.integers(0, 256, n, dtype=np.uint8)
    data[:5000] = 7                                         # a hot bin: heavy contention
    hist = np.zeros(256, np.uint32)
    mod.get_function("hist_shared")((16,), (256,), (data, np.int32(n), hist))
    np.testing.assert_array_equal(hist, np.bincount(data, minlength=256))


def test_histogram_global_atomics(mod, rng):
    n = 20_000
    data = rng.integers(-1000, 1000, n, dtype=np.int32)
    nb = 13
    hist = np.zeros(nb, np.int32)
    mod.get_function("hist_global")(((n + 255) // 256,), (256,), (data, np.int32(n), hist, np.int32(nb)))
    np.testing.assert_array_equal(hist, np.bincount(np.mod(data, nb), minlength=nb))


def test_atomic_add_float(mod, rng):
    n = 10_000
    # small integers: the float sum is exact in any order
    x = rng.integers(-20, 21, n).astype(np.float32)
    out = np.zeros(1, np.float32)
    mod.get_function("sum_float")(((n + 127) // 128,), (128,), (x, np.int32(n), out))
    assert out[0] == x.astype(np.float64).sum()
    y = rng.random(n).astype(np.float32)
    out[0] = 0
    mod.get_function("sum_float")(((n + 127) // 128,), (128,), (y, np.int32(n), out))
    np.testing.assert_allclose(out[0], y.astype(np.float64).sum(), rtol=1e-4)


def test_atomic_add_double_native(mod, rng):
    n = 5000
    x = rng.standard_normal(n)
    out = np.array([1.0])
    mod.get_function("sum_double_native")(((n + 255) // 256,), (256,), (x, np.int32(n), out))
    np.testing.assert_allclose(out[0], 1.0 + x.sum(), rtol=1e-12, atol=1e-10)


def test_atomic_cas_loops_double_add_and_float_max(mod, rng):
    n = 3000
    x = rng.integers(-1000, 1000, n).astype(np.float64) * 0.25     # exact in any order
    y = rng.standard_normal(n).astype(np.float32)
    dsum = np.array([0.5])
    fmax = np.array([-1e30], np.float32)
    mod.get_function("cas_loops")(((n + 127) // 128,), (128,), (x, y, np.int32(n), dsum, fmax))
    assert dsum[0] == 0.5 + x.sum()
    assert fmax[0] == y.max()


def test_atomic_min_max(mod, rng):
    n = 4000
    x = rng.integers(-2**31, 2**31 - 1, n, dtype=np.int64).astype(np.int32)
    u = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    imm = np.array([np.iinfo(np.int32).min, np.iinfo(np.int32).max], np.int32)
    umm = np.array([0, 0xFFFFFFFF], np.uint32)
    nb = (n + 255) // 256
    bmm = np.zeros(2 * nb, np.int32)
    mod.get_function("minmax")((nb,), (256,), (x, u, np.int32(n), imm, umm, bmm))
    assert imm[0] == x.max() and imm[1] == x.min()
    assert umm[0] == u.max() and umm[1] == u.min()
    xs = np.concatenate([x, np.full(nb * 256 - n, x[0])]).reshape(nb, 256)
    np.testing.assert_array_equal(bmm.reshape(nb, 2)[:, 0], xs.max(axis=1))
    np.testing.assert_array_equal(bmm.reshape(nb, 2)[:, 1], xs.min(axis=1))


def test_atomic_exch(mod):
    n = 1000
    slot = np.array([-1], np.int32)
    olds = np.full(n, -7, np.int32)
    mod.get_function("exch")((4,), (256,), (slot, olds, np.int32(n)))
    seen = np.sort(np.concatenate([olds, slot]))
    np.testing.assert_array_equal(seen, np.arange(-1, n))


def test_atomic_inc_dec_wraparound(mod):
    n = 25
    limit = 9
    ctr = np.array([0, 3], np.uint32)
    oi = np.zeros(n, np.uint32)
    od = np.zeros(n, np.uint32)
    mod.get_function("inc_dec")((1,), (32,), (ctr, oi, od, np.uint32(limit), np.int32(n)))
    # atomicInc: old >= limit ? 0 : old + 1 ; atomicDec: (old == 0 || old > limit) ? limit : old - 1
    v, inc_seq = 0, []
    w, dec_seq = 3, []
    for _ in range(n):
        inc_seq.append(v)
        v = 0 if v >= limit else v + 1
        dec_seq.append(w)
        w = limit if (w == 0 or w > limit) else w - 1
    assert ctr[0] == v and ctr[1] == w
    np.testing.assert_array_equal(np.sort(oi), np.sort(inc_seq))
    np.testing.assert_array_equal(np.sort(od), np.sort(dec_seq))


def test_atomic_bitwise_sub_and_u64_add(mod, rng):
    n = 777
    x = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    out = np.array([0xFFFFFFFF, 0, 0x12345678], np.uint32)
    sub = np.array([1_000_000], np.int32)
    ull = np.array([5], np.uint64)
    mod.get_function("bitwise")((4,), (256,), (x, np.int32(n), out, sub, ull))
    assert out[0] == np.bitwise_and.reduce(x)
    assert out[1] == np.bitwise_or.reduce(x)
    assert out[2] == np.bitwise_xor.reduce(x) ^ 0x12345678
    assert sub[0] == 1_000_000 - n * (n - 1) // 2
    assert int(ull[0]) == (5 + sum(int(v) << 20 for v in x)) % 2**64


def test_stream_compaction_with_atomic_tickets(mod, rng):
    n = 50_000
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    cnt = np.zeros(1, np.int32)
    mod.get_function("compact")(((n + 255) // 256,), (256,), (x, np.int32(n), out, cnt))
    keep = x[x > 0]
    assert cnt[0] == keep.size
    np.testing.assert_array_equal(np.sort(out[:cnt[0]]), np.sort(keep))


def test_shared_atomics_float_and_tickets(mod, rng):
    nb, bs = 6, 512
    x = rng.integers(-8, 8, nb * bs).astype(np.float32)
    sums = np.zeros(nb, np.float32)
    bad = np.zeros(1, np.int32)
    mod.get_function("shared_float_add")((nb,), (bs,), (x, sums, bad))
    np.testing.assert_array_equal(sums, x.reshape(nb, bs).sum(axis=1))
    assert bad[0] == 0, "atomicAdd on a shared counter handed out a ticket twice"
