"""split-row-streams: a soft barrier between accesses of two rows of one global array in a
barrier interval (IR level), and the kernels it splits still computing what NumPy does."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.compiler import lift_and_optimize
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.ir.printer import print_op
from cpuify.transforms.pass_manager import PipelineOptions

SRC = r'''
#define B 256
// first add during global load: rows in[base + t] and in[base + B + t]
extern "C" __global__ void two_rows(const float *in, float *partial, int n) {
    __shared__ float s[B];
    unsigned int t = threadIdx.x;
    unsigned int i = blockIdx.x * (2 * B) + t;
    float v = 0.0f;
    if (i < n) v = in[i];
    if (i + B < n) v += in[i + B];
    s[t] = v;
    __syncthreads();
    for (unsigned int k = B / 2; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0) partial[blockIdx.x] = s[0];
}
// four rows updated in place: out[i + k * B] += off (a scan's add of the tile offsets)
extern "C" __global__ void four_rows(int *out, const int *offs, int n) {
    const int off = offs[blockIdx.x];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        int i = blockIdx.x * 4 * B + k * B + threadIdx.x;
        if (i < n) out[i] += off;
    }
}
// one row read and written (the same row: no split), neighbours x[i - 1], x[i + 1] (the
// same row too), two arrays (rows of different arrays: no split)
extern "C" __global__ void one_row(float *y, const float *x, int n) {
    __shared__ float s[B];
    int i = blockIdx.x * B + threadIdx.x;
    s[threadIdx.x] = 0.0f;
    __syncthreads();
    if (i > 0 && i + 1 < n) y[i] = y[i] + x[i - 1] + x[i + 1] + s[threadIdx.x];
}
'''


@pytest.fixture(scope="module")
def module():
    return parse_ptx(compile_to_ptx(SRC).ptx)


def _soft_barriers(module, name, dims, passes=("split-row-streams",)):
    lifted, result = lift_and_optimize(module, module.functions[name],
                                       PipelineOptions(passes=passes), dims)
    text = print_op(lifted.op)
    return result.counts.get("split-row-streams", 0), text.count("soft = true")


def test_two_rows_of_one_array_are_split(module):
    count, soft = _soft_barriers(module, "two_rows", (256, 1, 1))
    assert (count, soft) == (1, 1)


def test_four_rows_are_four_passes(module):
    count, soft = _soft_barriers(module, "four_rows", (256, 1, 1))
    assert (count, soft) == (3, 3)


def test_must_not_fire(module):
    # the same row, neighbours in one row, other arrays
    assert _soft_barriers(module, "one_row", (256, 1, 1)) == (0, 0)
    # no block shape: nothing is known of the rows
    assert _soft_barriers(module, "two_rows", None) == (0, 0)
    # rows of 32 floats (128 bytes) are shorter than min_row_bytes: left interleaved
    assert _soft_barriers(module, "two_rows", (32, 1, 1)) == (0, 0)
    assert _soft_barriers(module, "two_rows", (32, 1, 1),
                          ("split-row-streams{min_row_bytes=128}",))[0] == 1


def _launch_twice(fn, grid, block, args):
    # the second launch with a block shape runs the code specialized for it
    for _ in range(2):
        fn(grid, block, args)


@pytest.mark.parametrize("disable", [(), ("--disable-pass=split-row-streams",)])
def test_two_rows_sum_matches_numpy(disable):
    rng = np.random.default_rng(7)
    n = 5 * 512 + 300                        # a partial last block: both guards taken
    x = rng.random(n, dtype=np.float32)
    blocks = (n + 511) // 512
    partial = np.zeros(blocks, np.float32)
    fn = cpuify.RawModule(code=SRC, options=disable).get_function("two_rows")
    _launch_twice(fn, (blocks,), (256,), (x, partial, np.int32(n)))
    padded = np.zeros(blocks * 512, np.float64)
    padded[:n] = x
    np.testing.assert_allclose(partial, padded.reshape(blocks, 512).sum(1), rtol=1e-5)


@pytest.mark.parametrize("disable", [(), ("--disable-pass=split-row-streams",)])
def test_four_rows_update_matches_numpy(disable):
    rng = np.random.default_rng(8)
    n = 3 * 1024 + 700
    blocks = (n + 1023) // 1024
    base = rng.integers(-50, 50, n, dtype=np.int32)
    offs = rng.integers(-1000, 1000, blocks, dtype=np.int32)
    fn = cpuify.RawModule(code=SRC, options=disable).get_function("four_rows")
    out = base.copy()
    _launch_twice(fn, (blocks,), (256,), (out, offs, np.int32(n)))
    want = base + 2 * np.repeat(offs, 1024)[:n]          # two launches: added twice
    np.testing.assert_array_equal(out, want)


def test_interpreter_agrees_on_the_split_kernel(module):
    # the reference interpreter runs the IR after the pass (soft barrier included)
    from cpuify.interp import InterpModule
    rng = np.random.default_rng(9)
    n = 2 * 512 + 100
    x = rng.random(n, dtype=np.float32)
    blocks = (n + 511) // 512
    lifted, result = lift_and_optimize(module, module.functions["two_rows"],
                                       PipelineOptions(passes=("split-row-streams",)),
                                       (256, 1, 1))
    assert result.counts["split-row-streams"] == 1
    partial = np.zeros(blocks, np.float32)
    InterpModule.from_ir(print_op(lifted.op)).launch("two_rows", blocks, 256,
                                                     (x, partial, np.int32(n)))
    padded = np.zeros(blocks * 512, np.float64)
    padded[:n] = x
    np.testing.assert_allclose(partial, padded.reshape(blocks, 512).sum(1), rtol=1e-5)
