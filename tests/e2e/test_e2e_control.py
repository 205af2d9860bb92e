"""Control flow and per-thread state: early returns (also before barriers), loops with
break/continue, switch statements, barriers under block-uniform conditions and loops with
runtime trip counts, per-thread local arrays (also live across __syncthreads), printf."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify

SRC = r'''
// threads past n leave immediately; the rest do barrier-free work
extern "C" __global__ void early_return(const int *x, int *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (x[i] < 0) { y[i] = -1; return; }
    int acc = 0;
    for (int k = 0; k <= x[i] % 17; ++k) acc += k * k;
    y[i] = acc;
}

// threads that exited are not waited for at the barrier (Volta semantics)
extern "C" __global__ void exit_before_barrier(const float *x, float *y, int active) {
    __shared__ float s[256];
    if (threadIdx.x >= active) return;
    s[threadIdx.x] = x[blockIdx.x * blockDim.x + threadIdx.x];
    __syncthreads();
    y[blockIdx.x * blockDim.x + threadIdx.x] = s[active - 1 - threadIdx.x];
}

// Collatz: data-dependent while loop with break; skipped values via continue
extern "C" __global__ void loops(const unsigned int *x, int *steps, int *firstbig, int *oddsum, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned long long v = x[i];
    int s = 0;
    while (true) {
        if (v == 1) break;
        v = (v & 1) ? 3 * v + 1 : v / 2;
        ++s;
        if (s > 1000) { s = -1; break; }
    }
    steps[i] = s;
    // index of the first k in [0, 64) where (x*k) % 97 > 90, or -1
    int fb = -1;
    for (int k = 0; k < 64; ++k) {
        if ((x[i] * (unsigned)k) % 97u <= 90u) continue;
        fb = k;
        break;
    }
    firstbig[i] = fb;
    // nested loops, continue in the inner loop, break out of the inner one
    int os = 0;
    for (int a = 0; a < 8; ++a) {
        for (int b = 0; b < 8; ++b) {
            if ((a + b) % 2 == 0) continue;
            if (b > a + (int)(x[i] % 4)) break;
            os += a * b;
        }
    }
    oddsum[i] = os;
}

__device__ int classify(int v) {
    switch (v & 15) {
    case 0: return 100;
    case 1: return v * 2;
    case 2: return v - 7;
    case 3: case 4: return 33;
    case 5: return v ^ 0x55;
    case 6: return -v;
    case 7: return v / 3;
    case 8: return v % 5;
    case 9: return 9;
    case 10: return v << 2;
    case 11: return 1;
    default: return v + 1000;
    }
}

extern "C" __global__ void switches(const int *x, int *y, int *z, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    y[i] = classify(x[i]);
    int r = 0;
    switch (x[i] % 4) {          // fallthrough
    case 0: r += 1;
    case 1: r += 10;
        break;
    case 2: r += 100;
    default: r += 1000;
    }
    z[i] = r;
}

// per-thread local arrays indexed dynamically: histogram of digits and a sorted window
extern "C" __global__ void local_arrays(const unsigned int *x, int *digit_hist, float *median,
                                        const float *w, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int h[10];
    for (int k = 0; k < 10; ++k) h[k] = 0;
    unsigned int v = x[i];
    do { h[v % 10]++; v /= 10; } while (v);
    for (int k = 0; k < 10; ++k) digit_hist[10 * i + k] = h[k];
    float win[9];
    for (int k = 0; k < 9; ++k) win[k] = w[i + k];
    for (int a = 1; a < 9; ++a) {            // insertion sort
        float key = win[a];
        int b = a - 1;
        while (b >= 0 && win[b] > key) { win[b + 1] = win[b]; --b; }
        win[b + 1] = key;
    }
    median[i] = win[4];
}

// a local array that stays live across barriers, mixed with shared memory
extern "C" __global__ void local_across_barrier(const int *x, int *y) {
    __shared__ int s[128];
    int t = threadIdx.x, nt = blockDim.x;
    int mine[6];
    for (int k = 0; k < 6; ++k) mine[k] = x[blockIdx.x * nt + t] * (k + 1) + t;
    int acc = 0;
    for (int r = 0; r < 6; ++r) {
        s[t] = mine[(r + t) % 6];
        __syncthreads();
        acc += s[(t + r + 1) % nt];
        __syncthreads();
        mine[r] += acc;
    }
    int out = 0;
    for (int k = 0; k < 6; ++k) out ^= mine[k] * (k + 3);
    y[blockIdx.x * nt + t] = out + acc;
}

// barrier inside a block-uniform branch and a loop with a runtime, per-block trip count
extern "C" __global__ void uniform_barriers(const int *iters, int *out) {
    __shared__ int s[64];
    int t = threadIdx.x;
    int v = t;
    int it = iters[blockIdx.x];
    for (int r = 0; r < it; ++r) {
        s[t] = v;
        __syncthreads();
        v = s[(t + 1) % blockDim.x] + 1;
        __syncthreads();
    }
    if (blockIdx.x % 2 == 0) {
        s[t] = v * 2;
        __syncthreads();
        v = s[blockDim.x - 1 - t];
    }
    out[blockIdx.x * blockDim.x + t] = v;
}

// values loaded before a barrier must keep the loaded value even though the memory they came
// from changes before their use (they cannot be recomputed by reloading)
extern "C" __global__ void keep_loaded_values(int *x, int *y) {
    __shared__ int s[256];
    int t = threadIdx.x, nt = blockDim.x;
    int i = blockIdx.x * nt + t;
    int v = x[i];
    s[t] = v * 3;
    __syncthreads();
    int w = s[t];
    int u = s[(t + 1) % nt];
    __syncthreads();
    x[blockIdx.x * nt + (t + 1) % nt] = -1;      // overwrite a neighbour's input
    s[(t + 5) % nt] = 0;                          // and a neighbour's shared slot
    __syncthreads();
    y[i] = v + w * 10 + u * 100 + s[t];
}

// per-thread values that look uniform but are not (warp index, lane), a uniform value that
// changes every iteration, and a conditionally updated accumulator, all across barriers
extern "C" __global__ void mixed_uniformity(const int *x, int *out, int rounds) {
    __shared__ int s[512];
    int t = threadIdx.x;
    int warp = t / 32, lane = t % 32;
    int bu = blockIdx.x * 1000;                   // the same in the whole block
    int acc = 0;
    for (int r = 0; r < rounds; ++r) {
        int step = r * r + bu;                    // uniform, new every iteration
        s[t] = x[blockIdx.x * blockDim.x + t] + step;
        __syncthreads();
        int nb = s[(t + 33 * (r + 1)) % blockDim.x];
        if ((nb + lane) % 3 == 0) acc += nb - warp;
        else acc ^= lane << r;
        __syncthreads();
    }
    out[blockIdx.x * blockDim.x + t] = acc * 7 + warp * 100000 + lane * 3 + bu;
}

extern "C" __global__ void say_hello(const float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        printf("block %d thread %d value %.3f tag %s\n", blockIdx.x, threadIdx.x, x[i],
               i % 2 ? "odd" : "even");
}

extern "C" __global__ void print_sequence(int count) {
    for (int k = 0; k < count; ++k)
        printf("seq b=%d t=%d k=%d\n", blockIdx.x, threadIdx.x, k);
}

extern "C" __global__ void print_types(long long a, unsigned int b, double c, char ch) {
    printf("ll=%lld u=%u x=%x e=%.2e c=%c pct=%%\n", a, b, b, c, ch);
}
'''


@pytest.fixture(scope="module")
def mod():
    return cpuify.RawModule(code=SRC)


def test_early_return(mod, rng):
    n = 1000
    x = rng.integers(-50, 500, n, dtype=np.int32)
    y = np.full(n + 24, -99, np.int32)
    mod.get_function("early_return")((4,), (256,), (x, y, np.int32(n)))
    ref = np.array([-1 if v < 0 else sum(k * k for k in range(v % 17 + 1)) for v in x])
    np.testing.assert_array_equal(y[:n], ref)
    assert (y[n:] == -99).all()


@pytest.mark.parametrize("active", [1, 100, 255])
def test_exited_threads_not_waited_for_at_barrier(mod, rng, active):
    nb, bs = 3, 256
    x = rng.standard_normal(nb * bs).astype(np.float32)
    y = np.full(nb * bs, np.nan, np.float32)
    mod.get_function("exit_before_barrier")((nb,), (bs,), (x, y, np.int32(active)))
    xs, ys = x.reshape(nb, bs), y.reshape(nb, bs)
    np.testing.assert_array_equal(ys[:, :active], xs[:, :active][:, ::-1])
    assert np.isnan(ys[:, active:]).all()


def _collatz(v):
    s = 0
    while v != 1:
        v = 3 * v + 1 if v & 1 else v // 2
        s += 1
        if s > 1000:
            return -1
    return s


def test_loops_break_continue(mod, rng):
    n = 300
    x = rng.integers(1, 100_000, n, dtype=np.uint32)
    x[:3] = [1, 27, 97]
    steps = np.zeros(n, np.int32)
    fb = np.zeros(n, np.int32)
    os_ = np.zeros(n, np.int32)
    mod.get_function("loops")((3,), (128,), (x, steps, fb, os_, np.int32(n)))
    for i, v in enumerate(x.tolist()):
        assert steps[i] == _collatz(v), v
        ks = [k for k in range(64) if (v * k) % 2**32 % 97 > 90]
        assert fb[i] == (ks[0] if ks else -1), v
        exp = 0
        for a in range(8):
            for b in range(8):
                if (a + b) % 2 == 0:
                    continue
                if b > a + v % 4:
                    break
                exp += a * b
        assert os_[i] == exp
    assert steps[1] == 111 and fb[2] == -1


def _classify(v):
    c = v & 15
    q = abs(v) // 3 * (1 if v >= 0 else -1)
    r = v - 5 * (abs(v) // 5 * (1 if v >= 0 else -1))
    return {0: 100, 1: v * 2, 2: v - 7, 3: 33, 4: 33, 5: v ^ 0x55, 6: -v, 7: q, 8: r, 9: 9,
            10: v << 2, 11: 1}.get(c, v + 1000)


def test_switch_dense_and_fallthrough(mod, rng):
    n = 400
    x = rng.integers(-10**6, 10**6, n, dtype=np.int32)
    y = np.zeros(n, np.int32)
    z = np.zeros(n, np.int32)
    mod.get_function("switches")((4,), (128,), (x, y, z, np.int32(n)))
    np.testing.assert_array_equal(y, [_classify(int(v)) for v in x])
    # C remainder has the sign of the dividend: negative cases hit `default`
    zr = {0: 11, 1: 10, 2: 1100}
    np.testing.assert_array_equal(z, [zr.get(int(np.fmod(v, 4)), 1000) for v in x])


def test_local_arrays_dynamic_indexing(mod, rng):
    n = 250
    x = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    x[0] = 0
    w = rng.standard_normal(n + 8).astype(np.float32)
    hist = np.zeros(10 * n, np.int32)
    med = np.zeros(n, np.float32)
    mod.get_function("local_arrays")((2,), (128,), (x, hist, med, w, np.int32(n)))
    for i, v in enumerate(x.tolist()):
        exp = np.bincount([int(d) for d in str(v)], minlength=10)
        np.testing.assert_array_equal(hist[10 * i:10 * i + 10], exp, err_msg=str(v))
    np.testing.assert_array_equal(med, np.median(np.lib.stride_tricks.sliding_window_view(w, 9), axis=1))


def test_local_array_live_across_barriers(mod, rng):
    nb, bs = 3, 128
    x = rng.integers(-1000, 1000, nb * bs, dtype=np.int32)
    y = np.zeros_like(x)
    mod.get_function("local_across_barrier")((nb,), (bs,), (x, y))
    for b in range(nb):
        xb = x[b * bs:(b + 1) * bs].astype(np.int64)
        mine = np.array([[xb[t] * (k + 1) + t for k in range(6)] for t in range(bs)])
        acc = np.zeros(bs, np.int64)
        for r in range(6):
            s = mine[np.arange(bs), (r + np.arange(bs)) % 6].copy()
            acc += s[(np.arange(bs) + r + 1) % bs]
            mine[:, r] += acc
        out = np.zeros(bs, np.int64)
        for k in range(6):
            out ^= mine[:, k] * (k + 3)
        np.testing.assert_array_equal(y[b * bs:(b + 1) * bs], (out + acc).astype(np.int32))


def test_barriers_in_uniform_branch_and_runtime_trip_count(mod):
    iters = np.array([0, 1, 5, 2, 7], np.int32)
    bs = 64
    out = np.zeros(iters.size * bs, np.int32)
    mod.get_function("uniform_barriers")((iters.size,), (bs,), (iters, out))
    for b, it in enumerate(iters):
        v = np.arange(bs)
        for _ in range(it):
            v = np.roll(v, -1) + 1
        if b % 2 == 0:
            v = (v * 2)[::-1]
        np.testing.assert_array_equal(out[b * bs:(b + 1) * bs], v, err_msg=f"block {b}")


def test_printf_from_kernel(mod, capfd):
    x = np.array([0.5, -1.25, 3.14159, 2.0, 10.0, -0.001], np.float32)
    capfd.readouterr()
    mod.get_function("say_hello")((2,), (4,), (x, np.int32(x.size)))
    out = capfd.readouterr().out
    lines = sorted(l for l in out.splitlines() if l.startswith("block"))
    exp = sorted(f"block {i // 4} thread {i % 4} value {v:.3f} tag {'odd' if i % 2 else 'even'}"
                 for i, v in enumerate(x.tolist()))
    assert lines == exp


def test_printf_format_conversions(mod, capfd):
    capfd.readouterr()
    mod.get_function("print_types")((1,), (2,), (np.int64(-(1 << 40)), np.uint32(3735928559),
                                                 12345.678, np.int8(ord("Q"))))
    out = capfd.readouterr().out.splitlines()
    assert out == ["ll=-1099511627776 u=3735928559 x=deadbeef e=1.23e+04 c=Q pct=%"] * 2


def test_loaded_values_survive_barriers(mod, rng):
    nb, bs = 3, 256
    x = rng.integers(-1000, 1000, nb * bs, dtype=np.int32)
    x0 = x.copy()
    y = np.zeros_like(x)
    mod.get_function("keep_loaded_values")((nb,), (bs,), (x, y))
    assert (x == -1).all()
    xs = x0.reshape(nb, bs).astype(np.int64)
    t = np.arange(bs)
    s_final = 3 * xs
    s_final[:, (t + 5) % bs] = 0
    exp = xs + 30 * xs + 300 * xs[:, (t + 1) % bs] + s_final
    np.testing.assert_array_equal(y.reshape(nb, bs), exp)


@pytest.mark.parametrize("bs,rounds", [(64, 3), (512, 6), (96, 0)])
def test_non_uniform_and_uniform_values_across_barriers(mod, rng, bs, rounds):
    nb = 3
    x = rng.integers(0, 1000, nb * bs, dtype=np.int32)
    out = np.zeros_like(x)
    mod.get_function("mixed_uniformity")((nb,), (bs,), (x, out, np.int32(rounds)))
    t = np.arange(bs)
    warp, lane = t // 32, t % 32
    for b in range(nb):
        bu = b * 1000
        acc = np.zeros(bs, np.int64)
        for r in range(rounds):
            s = x[b * bs:(b + 1) * bs].astype(np.int64) + r * r + bu
            nbv = s[(t + 33 * (r + 1)) % bs]
            cond = (nbv + lane) % 3 == 0
            acc = np.where(cond, acc + nbv - warp, acc ^ (lane << r))
        np.testing.assert_array_equal(out[b * bs:(b + 1) * bs],
                                      acc * 7 + warp * 100000 + lane * 3 + bu, err_msg=f"block {b}")


def test_printf_keeps_each_threads_order(mod, capfd):
    capfd.readouterr()
    mod.get_function("print_sequence")((3,), (5,), (np.int32(4),))
    lines = [l for l in capfd.readouterr().out.splitlines() if l.startswith("seq")]
    assert len(lines) == 3 * 5 * 4
    seen = {}
    for l in lines:
        _, b, t, k = l.split()
        seen.setdefault((b, t), []).append(int(k[2:]))
    assert len(seen) == 15
    assert all(ks == [0, 1, 2, 3] for ks in seen.values())
