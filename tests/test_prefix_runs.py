"""Prefix runs (KernelCodegen.plan_prefix_runs): in code specialized for a one-dimensional
block shape, once some threads have exited and the live ones are the block's first live_end
threads, whole warps, the next segments run them as one thread loop up to live_end (masked
2): no state check per thread, no scan of the states after a segment that knows where its
threads stopped, and static shuffles read their buffers instead of an exchange.  A block
reduction's second stage, `if (warp == 0)` after the other warps returned, is the case.
Checked against NumPy: block reductions of several block sizes, exits that leave holes or a
partial warp (the masked path), exits in several steps, and a prefix run whose threads
diverge again.  Each kernel runs twice (generic code, then the code specialized for its
block shape)."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.codegen.llvm_gen import KernelCodegen, ModuleCodegen
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.lifting.lift import lift_kernel

SRC = r'''
#define FULL 0xffffffffu
__device__ int warp_sum(int v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL, v, o);
    return v;
}
// the block reduction of CUDA samples and CUB: warp sums, one per warp in shared memory,
// warp 0 sums them; the other warps return before warp 0's shuffles
extern "C" __global__ void block_sum(const int *x, int *out, int n) {
    __shared__ int sums[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    int v = warp_sum(i < n ? x[i] : 0);
    if (lane == 0) sums[wid] = v;
    __syncthreads();
    if (wid != 0) return;
    v = lane < (blockDim.x + 31) / 32 ? sums[lane] : 0;
    v = warp_sum(v);
    if (lane == 0) out[blockIdx.x] = v;
}
// threads leave in steps: 128 go on, then 64, then 32 (a barrier between)
extern "C" __global__ void steps(const int *x, int *out) {
    __shared__ int s[256];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = x[i];
    __syncthreads();
    if (t >= 128) return;
    s[t] += s[t + 128];
    __syncthreads();
    if (t >= 64) return;
    s[t] += s[t + 64];
    __syncthreads();
    if (t >= 32) return;
    int v = warp_sum(s[t] + s[t + 32]);
    out[i] = v;
}
// after the prefix run, warp 0 meets at a vote, which the generated code leaves to the
// runtime's scheduler: the threads that exited must stay exited there
extern "C" __global__ void vote_after_exits(const int *x, int *out) {
    __shared__ int s[256];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    if (t >= 64) return;
    s[t] = x[i];
    __syncthreads();
    int v = s[63 - t];
    unsigned b = __ballot_sync(0xffffffffu, v > 0);
    out[i] = __popc(b) * 10000 + warp_sum(v);
}
// a barrier with a reduction (a kind the scheduler runs) after the other warps exited: it
// counts the live threads only
extern "C" __global__ void count_after_exits(const int *x, int *out) {
    __shared__ int s[256];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    if (t >= 96) return;
    s[t] = x[i];
    __syncthreads();
    int n = __syncthreads_count(s[95 - t] > 0);
    out[i] = n * 10000 + s[(t + 1) % 96];
}
// the live threads are not the first ones (every other warp returns): the masked path
extern "C" __global__ void holes(const int *x, int *out) {
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    if ((t >> 5) & 1) return;
    out[i] = warp_sum(x[i]);
}
// 40 threads go on past a barrier: the first live threads, but not whole warps
extern "C" __global__ void partial(const int *x, int *out) {
    __shared__ int s[256];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    if (t >= 40) return;
    s[t] = x[i];
    __syncthreads();
    out[i] = s[t] + s[(t + 1) % 40];
}
// in a prefix run, the live threads diverge again: lanes stop at two different barriers
// by their parity (a run that stores states), then meet
extern "C" __global__ void diverge(const int *x, int *out) {
    __shared__ int s[256];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    if (t >= 64) return;
    s[t] = x[i];
    __syncthreads();
    int v = s[63 - t];
    if (x[i] & 1) {
        v += 1;
        __syncwarp();
    } else {
        v -= 1;
        __syncwarp();
    }
    out[i] = warp_sum(v);
}
'''


@pytest.fixture(scope="module")
def mod():
    return cpuify.RawModule(code=SRC)


@pytest.fixture(scope="module")
def ptx():
    return parse_ptx(compile_to_ptx(SRC).ptx)


def _warp_sum(v: np.ndarray) -> np.ndarray:
    """__shfl_down_sync sums (o = 16 .. 1) of each warp: lane k gets the sum of lanes k,
    k + 1, ... of a tree whose missing sources are the lane's own value."""
    w = v.reshape(-1, 32).copy()
    for o in (16, 8, 4, 2, 1):
        src = w.copy()
        src[:, :32 - o] = w[:, o:]
        w = w + src
    return w.reshape(v.shape)


def test_which_kernels(ptx):
    def prefix(name, block):
        kc = KernelCodegen(ModuleCodegen(ptx), lift_kernel(ptx, ptx.functions[name]), block)
        return kc.prefix_runs
    assert prefix("block_sum", (256, 1, 1)) and prefix("steps", (256, 1, 1))
    assert not prefix("block_sum", None)            # generic code
    assert not prefix("block_sum", (32, 8, 1))      # 2-D blocks
    gen = ModuleCodegen(ptx)
    gen.add_kernel(lift_kernel(ptx, ptx.functions["block_sum"]), (256, 1, 1))
    assert "first_threads" in gen.llvm_text()


@pytest.mark.parametrize("block,n", [(256, 256 * 7), (256, 1000), (1024, 3000), (64, 640),
                                     (96, 500), (32, 100)])
def test_block_sum(mod, block, n, run_twice):
    rng = np.random.default_rng(block + n)
    grid = (n + block - 1) // block
    x = rng.integers(-1000, 1000, grid * block).astype(np.int32)
    out = np.zeros(grid, np.int32)
    want = np.where(np.arange(grid * block) < n, x, 0).reshape(grid, block).sum(axis=1)
    for got in run_twice(mod, "block_sum", (grid,), (block,), (x, out, np.int32(n)), out):
        np.testing.assert_array_equal(got, want)


def test_steps(mod, run_twice):
    rng = np.random.default_rng(1)
    x = rng.integers(-1000, 1000, 3 * 256).astype(np.int32)
    out = np.zeros_like(x)
    want = np.full_like(x, -1)
    for b in range(3):
        s = x[b * 256:(b + 1) * 256].copy()
        s[:128] += s[128:]
        s[:64] += s[64:128]
        want[b * 256:b * 256 + 32] = _warp_sum(s[:32] + s[32:64])
    for got in run_twice(mod, "steps", (3,), (256,), (x, out), out):
        np.testing.assert_array_equal(got, want)


def test_holes_take_the_masked_path(mod, run_twice):
    rng = np.random.default_rng(2)
    x = rng.integers(-1000, 1000, 2 * 256).astype(np.int32)
    out = np.zeros_like(x)
    sums = _warp_sum(x)
    warp = (np.arange(512) >> 5) & 1
    want = np.where(warp == 0, sums, -1).astype(np.int32)
    for got in run_twice(mod, "holes", (2,), (256,), (x, out), out):
        np.testing.assert_array_equal(got, want)


def test_partial_warp_takes_the_masked_path(mod, run_twice):
    x = np.arange(2 * 256, dtype=np.int32) * 3
    out = np.zeros_like(x)
    want = np.full_like(x, -1)
    for b in range(2):
        s = x[b * 256:b * 256 + 40]
        want[b * 256:b * 256 + 40] = s + np.roll(s, -1)
    for got in run_twice(mod, "partial", (2,), (256,), (x, out), out):
        np.testing.assert_array_equal(got, want)


def test_prefix_run_that_diverges(mod, run_twice):
    rng = np.random.default_rng(3)
    x = rng.integers(-1000, 1000, 2 * 128).astype(np.int32)
    out = np.zeros_like(x)
    want = np.full_like(x, -1)
    for b in range(2):
        blk = x[b * 128:(b + 1) * 128]
        v = blk[:64][::-1] + np.where(blk[:64] & 1, 1, -1)
        want[b * 128:b * 128 + 64] = _warp_sum(v)
    for got in run_twice(mod, "diverge", (2,), (128,), (x, out), out):
        np.testing.assert_array_equal(got, want)


def test_collective_after_a_prefix_run_goes_to_the_scheduler(mod, run_twice):
    rng = np.random.default_rng(4)
    x = rng.integers(-1000, 1000, 2 * 256).astype(np.int32)
    out = np.zeros_like(x)
    want = np.full_like(x, -1)
    for b in range(2):
        v = x[b * 256:b * 256 + 64][::-1]
        ballots = [(v[w * 32:(w + 1) * 32] > 0).sum() for w in range(2)]
        popc = np.repeat(ballots, 32)
        want[b * 256:b * 256 + 64] = popc * 10000 + _warp_sum(v)
    for got in run_twice(mod, "vote_after_exits", (2,), (256,), (x, out), out):
        np.testing.assert_array_equal(got, want)


def test_barrier_reduction_after_a_prefix_run(mod, run_twice):
    rng = np.random.default_rng(5)
    x = rng.integers(-1000, 1000, 2 * 256).astype(np.int32)
    out = np.zeros_like(x)
    want = np.full_like(x, -1)
    for b in range(2):
        v = x[b * 256:b * 256 + 96]
        want[b * 256:b * 256 + 96] = (v > 0).sum() * 10000 + np.roll(v, -1)
    for got in run_twice(mod, "count_after_exits", (2,), (256,), (x, out), out):
        np.testing.assert_array_equal(got, want)


def test_explain_reports_prefix_runs(tmp_path, capsys):
    from cpuify.cli.main import main
    src = tmp_path / "k.cu"
    src.write_text(SRC)
    assert main(["explain", "--block", "256", "--kernel", "block_sum", str(src)]) == 0
    assert "the segments after sync points run them as one loop" in capsys.readouterr().out
    assert main(["explain", "--kernel", "block_sum", str(src)]) == 0
    assert "as one loop" not in capsys.readouterr().out
