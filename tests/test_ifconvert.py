"""If-conversion of conditional swaps (transforms/ifconvert.py): which `if`s become
branch-free, and sorting networks that run through the rewritten code, checked against
NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.ir.structure import block_body as _block_body
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.lifting import lift_kernel
from cpuify.transforms.ifconvert import if_convert_swaps, select_if_phis

SRC = r'''
#define TILE 256
template <typename T>
__device__ __forceinline__ void compare_exchange(T &a, T &b, bool ascending) {
    if ((a > b) == ascending) { T t = a; a = b; b = t; }
}
// sorts each TILE of keys in shared memory (TILE / 2 threads), ascending
template <typename T>
__device__ void tile_sort(T *keys) {
    __shared__ T s[TILE];
    const unsigned base = blockIdx.x * TILE, t = threadIdx.x;
    s[t] = keys[base + t];
    s[t + TILE / 2] = keys[base + t + TILE / 2];
    for (unsigned k = 2; k <= TILE; k <<= 1)
        for (unsigned j = k >> 1; j > 0; j >>= 1) {
            __syncthreads();
            const unsigned pos = 2 * t - (t & (j - 1));
            compare_exchange(s[pos], s[pos + j], (pos & k) == 0);
        }
    __syncthreads();
    keys[base + t] = s[t];
    keys[base + t + TILE / 2] = s[t + TILE / 2];
}
extern "C" __global__ void sort_int(int *keys) { tile_sort(keys); }
extern "C" __global__ void sort_float(float *keys) { tile_sort(keys); }

// one step (k, j) of the network over global memory
extern "C" __global__ void merge_step(int *d, unsigned k, unsigned j) {
    const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned pos = 2 * t - (t & (j - 1));
    int a = d[pos], b = d[pos + j];
    if ((a > b) == ((pos & k) == 0)) { d[pos] = b; d[pos + j] = a; }
}

// not swaps: each keeps its branch
extern "C" __global__ void racy_min(const int *v, int *m) {
    int x = v[blockIdx.x * blockDim.x + threadIdx.x];
    if (x < m[0]) m[0] = x;                       // stores a value it did not read
}
extern "C" __global__ void volatile_swap(volatile int *d) {
    int a = d[2 * threadIdx.x], b = d[2 * threadIdx.x + 1];
    if (a > b) { d[2 * threadIdx.x] = b; d[2 * threadIdx.x + 1] = a; }
}
extern "C" __global__ void store_between(int *d, int *flag) {
    int a = d[2 * threadIdx.x], b = d[2 * threadIdx.x + 1];
    flag[threadIdx.x] = 1;                        // may alias d: the values read may be stale
    if (a > b) { d[2 * threadIdx.x] = b; d[2 * threadIdx.x + 1] = a; }
}
// a flag set in an `if` and read after a barrier (pathfinder's `computed`)
extern "C" __global__ void flag_after_barrier(const int *x, int *out, int lo, int hi) {
    __shared__ int s[128];
    int t = threadIdx.x;
    bool done = false;
    int v = 7;
    if (t >= lo && t <= hi) {
        s[t] = x[blockIdx.x * 128 + t] * 2;
        done = true;
        v = x[blockIdx.x * 128 + t];
    }
    __syncthreads();
    out[blockIdx.x * 128 + t] = done ? s[t] + v : -1;
}
extern "C" __global__ void swap_and_count(int *d, int *count) {
    int a = d[2 * threadIdx.x], b = d[2 * threadIdx.x + 1];
    if (a > b) { d[2 * threadIdx.x] = b; d[2 * threadIdx.x + 1] = a; atomicAdd(count, 1); }
}
'''


@pytest.fixture(scope="module")
def module():
    return parse_ptx(compile_to_ptx(SRC).ptx)


def _converted(module, name: str) -> int:
    entry = next(f for f in module.functions.values() if f.name == name)
    return if_convert_swaps(_block_body(lift_kernel(module, entry).op))


@pytest.mark.parametrize("name, expected", [
    ("merge_step", 1),
    ("racy_min", 0),
    ("volatile_swap", 0),
    ("store_between", 0),
    ("swap_and_count", 0),
])
def test_which_ifs_are_converted(module, name, expected):
    assert _converted(module, name) == expected


def test_every_compare_exchange_of_an_unrolled_network_is_converted(module):
    # nvcc unrolls the network of a 256-key tile: 8 * 9 / 2 = 36 compare-exchanges
    assert _converted(module, "sort_int") == 36


@pytest.fixture(scope="module")
def mod():
    return cpuify.RawModule(code=SRC)


@pytest.mark.parametrize("kernel, dtype", [("sort_int", np.int32), ("sort_float", np.float32)])
def test_tile_sort_matches_numpy(mod, kernel, dtype):
    rng = np.random.default_rng(1)
    tiles = 24
    keys = (rng.integers(-50, 50, tiles * 256) if dtype is np.int32
            else rng.standard_normal(tiles * 256)).astype(dtype)
    f = mod.get_function(kernel)
    for _ in range(2):          # the second launch runs the code specialized for the block
        d = keys.copy()
        f((tiles,), (128,), (d,))
        np.testing.assert_array_equal(d.reshape(tiles, 256), np.sort(keys.reshape(tiles, 256), 1))


def test_global_network_sorts(mod):
    rng = np.random.default_rng(2)
    n = 1 << 12
    keys = rng.integers(0, 1000, n).astype(np.int32)     # many ties
    d = keys.copy()
    f = mod.get_function("merge_step")
    k = 2
    while k <= n:
        j = k >> 1
        while j > 0:
            f((n // 2 // 64,), (64,), (d, np.uint32(k), np.uint32(j)))
            j >>= 1
        k <<= 1
    np.testing.assert_array_equal(d, np.sort(keys))


def test_flag_phis_become_selects(module):
    entry = next(f for f in module.functions.values() if f.name == "flag_after_barrier")
    region = _block_body(lift_kernel(module, entry).op)
    # `done` (constants on both ways); `v` comes from a load inside the `if`: left alone
    assert select_if_phis(region) == 1


def test_flag_after_barrier(mod):
    x = np.arange(256, dtype=np.int32) - 100
    out = np.zeros_like(x)
    f = mod.get_function("flag_after_barrier")
    t = np.arange(256) % 128
    for lo, hi in ((10, 90), (0, 127), (50, 20)):
        for _ in range(2):
            out[:] = 0
            f((2,), (128,), (x, out, np.int32(lo), np.int32(hi)))
            inside = (t >= lo) & (t <= hi)
            np.testing.assert_array_equal(out, np.where(inside, 3 * x, -1))
