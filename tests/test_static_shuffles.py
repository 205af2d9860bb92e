"""Shuffles whose lane operand, width and member mask are constants ("static shuffles"): when
every thread of the block waits at one, the next segment reads the source lanes from the
shuffle's own buffer, without an exchange pass (KernelCodegen.plan_static_shuffles).  Each
kernel runs twice (generic code, then the code specialized for its block shape) and is
checked against NumPy: all four modes, chains that alternate between the two buffers, a
shuffle in a loop, exits before a shuffle, partial warps and a mix with a run-time
offset."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify

SRC = r'''
#define FULL 0xffffffffu
extern "C" __global__ void down_chain(const float *x, float *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[i];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL, v, o);
    out[i] = v;
}
extern "C" __global__ void up_chain(const int *x, int *out) {   // inclusive warp scan
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31;
    int v = x[i];
    for (int o = 1; o < 32; o <<= 1) {
        int u = __shfl_up_sync(FULL, v, o);
        if (lane >= o) v += u;
    }
    out[i] = v;
}
extern "C" __global__ void xor_chain(const int *x, int *out) {  // all-reduce max
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = x[i];
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(FULL, v, o));
    out[i] = v;
}
extern "C" __global__ void idx_bcast(const int *x, int *out) {  // lane 5 of each 8-lane group
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = __shfl_sync(FULL, x[i], 5, 8);
}
extern "C" __global__ void width8_down(const int *x, int *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = __shfl_down_sync(FULL, x[i], 3, 8);
}
// warps 1.. leave before the shuffles: warp 0 reduces alone
extern "C" __global__ void first_warp_only(const int *x, int *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (threadIdx.x >= 32) return;
    int v = x[i];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL, v, o);
    out[i] = v;
}
// the same shuffle reached again in every iteration of a loop
extern "C" __global__ void loop_shuffle(const int *x, int *out, int rounds) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = x[i];
    for (int r = 0; r < rounds; r++) v += __shfl_down_sync(FULL, v, 1);
    out[i] = v;
}
// a constant shuffle after one with a run-time offset
extern "C" __global__ void mixed(const int *x, int *out, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = x[i];
    v += __shfl_down_sync(FULL, v, k);
    v += __shfl_down_sync(FULL, v, 2);
    v += __shfl_up_sync(FULL, v, 4);
    out[i] = v;
}
'''


@pytest.fixture(scope="module")
def mod():
    return cpuify.RawModule(code=SRC)


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def _lanes(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1, 32)


def _shfl_down(v: np.ndarray, o: int, width: int = 32) -> np.ndarray:
    w = v.reshape(-1, width)
    out = w.copy()
    out[:, :width - o] = w[:, o:]
    return out.reshape(v.shape)


def _shfl_up(v: np.ndarray, o: int) -> np.ndarray:
    w = _lanes(v)
    out = w.copy()
    out[:, o:] = w[:, :-o]
    return out.reshape(v.shape)


@pytest.mark.parametrize("block", [64, 256])
def test_down_chain(mod, rng, block, run_twice):
    x = rng.integers(-100, 100, 4 * block).astype(np.float32)
    out = np.zeros_like(x)
    want = x.copy()
    for o in (16, 8, 4, 2, 1):
        want = want + _shfl_down(want, o)
    for got in run_twice(mod, "down_chain", (4,), (block,), (x, out), out):
        np.testing.assert_array_equal(got, want)


def test_up_chain_is_a_warp_scan(mod, rng, run_twice):
    x = rng.integers(-100, 100, 512).astype(np.int32)
    out = np.zeros_like(x)
    want = np.cumsum(_lanes(x), axis=1).ravel()
    for got in run_twice(mod, "up_chain", (2,), (256,), (x, out), out):
        np.testing.assert_array_equal(got, want)


def test_xor_chain_is_an_allreduce(mod, rng, run_twice):
    x = rng.integers(-1000, 1000, 512).astype(np.int32)
    out = np.zeros_like(x)
    want = np.repeat(_lanes(x).max(axis=1), 32)
    for got in run_twice(mod, "xor_chain", (2,), (256,), (x, out), out):
        np.testing.assert_array_equal(got, want)


def test_idx_with_width(mod, rng, run_twice):
    x = rng.integers(-1000, 1000, 256).astype(np.int32)
    out = np.zeros_like(x)
    want = np.repeat(x.reshape(-1, 8)[:, 5], 8)
    for got in run_twice(mod, "idx_bcast", (2,), (128,), (x, out), out):
        np.testing.assert_array_equal(got, want)


def test_down_with_width(mod, rng, run_twice):
    x = rng.integers(-1000, 1000, 256).astype(np.int32)
    out = np.zeros_like(x)
    want = _shfl_down(x, 3, 8)
    for got in run_twice(mod, "width8_down", (2,), (128,), (x, out), out):
        np.testing.assert_array_equal(got, want)


def test_partial_last_warp(mod, rng, run_twice):
    # 48 threads: the second warp has 16 lanes; a lane whose source lane does not exist gets
    # 0 (what an H100 returns: the sum of the 16 lanes in lane 0), not its own value (which
    # it gets when the source is past the shuffle's width)
    x = rng.integers(-100, 100, 96).astype(np.float32)
    out = np.zeros_like(x)
    padded = np.zeros(128, np.float32)
    for b in range(2):
        padded[b * 64:b * 64 + 48] = x[b * 48:(b + 1) * 48]
    got_all = run_twice(mod, "down_chain", (2,), (48,), (x, out), out)
    want = padded.copy()
    for o in (16, 8, 4, 2, 1):
        sh = _shfl_down(want, o)
        # a source lane past the block's last thread: 0
        for b in range(2):
            for lane in range(16):
                if lane + o >= 16 and lane + o < 32:
                    sh[b * 64 + 32 + lane] = 0
        want = want + sh
    want = np.concatenate([want[b * 64:b * 64 + 48] for b in range(2)])
    for got in got_all:
        np.testing.assert_array_equal(got, want)


def test_warps_after_the_others_exited(mod, rng, run_twice):
    x = rng.integers(-100, 100, 256).astype(np.int32)
    out = np.zeros_like(x)
    want = np.full_like(x, -1)
    first = x[:32].copy()
    for o in (16, 8, 4, 2, 1):
        first = first + _shfl_down(first, o)
    want[:32] = first
    for got in run_twice(mod, "first_warp_only", (1,), (256,), (x, out), out):
        np.testing.assert_array_equal(got, want)


def test_shuffle_in_a_loop(mod, rng, run_twice):
    x = rng.integers(-100, 100, 256).astype(np.int32)
    out = np.zeros_like(x)
    want = x.copy()
    for _ in range(5):
        want = want + _shfl_down(want, 1)
    for got in run_twice(mod, "loop_shuffle", (2,), (128,), (x, out, np.int32(5)), out):
        np.testing.assert_array_equal(got, want)


def test_mixed_with_a_runtime_offset(mod, rng, run_twice):
    x = rng.integers(-100, 100, 256).astype(np.int32)
    out = np.zeros_like(x)
    want = x + _shfl_down(x, 3)
    want = want + _shfl_down(want, 2)
    want = want + _shfl_up(want, 4)
    for got in run_twice(mod, "mixed", (2,), (128,), (x, out, np.int32(3)), out):
        np.testing.assert_array_equal(got, want)
