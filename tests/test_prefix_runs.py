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


def _check_blocks(mod, run_twice, kernel, nblocks, block, x, live, ref):
    """Runs `kernel` on x (nblocks blocks of `block` threads, one output per thread) and
    checks every block: its first `live` outputs are ref(the block's x), the other threads
    exited before writing (-1)."""
    out = np.zeros_like(x)
    want = np.full_like(x, -1)
    for b in range(nblocks):
        want[b * block:b * block + live] = ref(x[b * block:(b + 1) * block])
    for got in run_twice(mod, kernel, (nblocks,), (block,), (x, out), out):
        np.testing.assert_array_equal(got, want)


def _ints(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-1000, 1000, n).astype(np.int32)


def test_steps(mod, run_twice):
    def ref(blk):
        s = blk.copy()
        s[:128] += s[128:]
        s[:64] += s[64:128]
        return _warp_sum(s[:32] + s[32:64])
    _check_blocks(mod, run_twice, "steps", 3, 256, _ints(1, 3 * 256), 32, ref)


def test_holes_take_the_masked_path(mod, run_twice):
    warp = (np.arange(256) >> 5) & 1
    _check_blocks(mod, run_twice, "holes", 2, 256, _ints(2, 2 * 256), 256,
                  lambda blk: np.where(warp == 0, _warp_sum(blk), -1))


def test_partial_warp_takes_the_masked_path(mod, run_twice):
    _check_blocks(mod, run_twice, "partial", 2, 256, np.arange(2 * 256, dtype=np.int32) * 3,
                  40, lambda blk: blk[:40] + np.roll(blk[:40], -1))


def test_prefix_run_that_diverges(mod, run_twice):
    _check_blocks(mod, run_twice, "diverge", 2, 128, _ints(3, 2 * 128), 64,
                  lambda blk: _warp_sum(blk[:64][::-1] + np.where(blk[:64] & 1, 1, -1)))


def test_collective_after_a_prefix_run_goes_to_the_scheduler(mod, run_twice):
    def ref(blk):
        v = blk[:64][::-1]
        popc = np.repeat([(v[w * 32:(w + 1) * 32] > 0).sum() for w in range(2)], 32)
        return popc * 10000 + _warp_sum(v)
    _check_blocks(mod, run_twice, "vote_after_exits", 2, 256, _ints(4, 2 * 256), 64, ref)


def test_barrier_reduction_after_a_prefix_run(mod, run_twice):
    _check_blocks(mod, run_twice, "count_after_exits", 2, 256, _ints(5, 2 * 256), 96,
                  lambda blk: (blk[:96] > 0).sum() * 10000 + np.roll(blk[:96], -1))


def test_explain_reports_prefix_runs(tmp_path, capsys):
    from cpuify.cli.main import main
    src = tmp_path / "k.cu"
    src.write_text(SRC)
    assert main(["explain", "--block", "256", "--kernel", "block_sum", str(src)]) == 0
    assert "the segments after sync points run them as one loop" in capsys.readouterr().out
    assert main(["explain", "--kernel", "block_sum", str(src)]) == 0
    assert "as one loop" not in capsys.readouterr().out


# the first threads exit and the others run two block-uniform loops interchanged with the
# thread loop (soft barriers): every later step is a masked run, whose block-uniform values
# left at the soft barrier (the loop bound, the row) must reach the next segment; the
# code specialized for the block shape also has prefix copies, which once overwrote what
# the masked run had to gather (PolyBench-ACC gramschmidt's third kernel hung)
GRAM = r'''
extern "C" __global__ void gram3(int ni, int nj, float *a, float *r, const float *q, int k) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j > k && j < nj) {
        r[k * nj + j] = 0.0f;
        for (int i = 0; i < ni; i++) r[k * nj + j] += q[i * nj + k] * a[i * nj + j];
        for (int i = 0; i < ni; i++) a[i * nj + j] -= q[i * nj + k] * r[k * nj + j];
    }
}'''


@pytest.mark.parametrize("k", [5, 40, 130])
def test_masked_runs_after_leading_threads_exit(k: int) -> None:
    n = 256
    rng = np.random.default_rng(k)
    q = rng.random((n, n), dtype=np.float32)
    kern = cpuify.RawKernel(GRAM, "gram3")
    for _ in range(2):          # generic code, then the code specialized for (128, 1, 1)
        a = rng.random((n, n), dtype=np.float32)
        r = np.zeros((n, n), np.float32)
        a0 = a.astype(np.float64)
        kern((n // 128,), (128,), (np.int32(n), np.int32(n), a, r, q, np.int32(k)))
        cols = np.arange(n) > k
        rk = q[:, k].astype(np.float64) @ a0
        np.testing.assert_allclose(r[k, cols], rk[cols], rtol=1e-4)
        np.testing.assert_allclose(a[:, cols], (a0 - np.outer(q[:, k], rk))[:, cols],
                                   rtol=1e-3, atol=1e-3)
        np.testing.assert_array_equal(r[k, ~cols], 0)
