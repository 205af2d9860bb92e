"""Warp-synchronous exchanges without `volatile` and loops around lockstep steps (issue #16:
NPB-GPU LU's flux kernels, blocks of min(n, 32) threads).

* A shared store followed, with no barrier between, by a shared access of another lane of
  the same warp at an affine address (`t[2*tid] = ...; out[tid] = t[tid];`, or the next pass
  of a loop overwriting `t[tid]` that the lanes still read as `t[tid - 1]`) makes the
  `warp-lockstep` pass step the kernel's shared accesses, volatile or not.
* A loop that holds steps gets one at the end of each latch, so that a lane that skips the
  last steps of the body waits there for the others instead of starting the next pass
  (a pre-Volta warp reconverges before the back edge); before, lanes that skipped an `if`
  overwrote a shared tile the others had not read, with or without `--warp-lockstep`.

Results against NumPy (compiled generic and specialized code, the interpreter on the IR
after the passes), IR checks where the pass must and must not fire.
"""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.compiler import lift_and_optimize
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp import InterpModule
from cpuify.ir.core import natural_loops
from cpuify.ir.structure import block_body
from cpuify.transforms.pass_manager import PipelineOptions

SOURCE = r'''
// tiles of blockDim.x - 2 outputs with a halo of one on each side, no barrier at the end of
// the loop body: the lanes that skip the stencil start the next tile while the others still
// read this one, which a warp in lockstep does only after reconverging behind the `if`
template <typename T>
__device__ void smooth(T *t, const double *in, double *out, int n) {
    int row = blockIdx.x;
    int i = threadIdx.x;
    while (i < n) {
        t[threadIdx.x] = in[row * n + i];
        __syncthreads();
        if (threadIdx.x >= 1 && threadIdx.x < blockDim.x - 1 && i < n - 1)
            out[row * n + i] = t[threadIdx.x - 1] + 2.0 * t[threadIdx.x] + t[threadIdx.x + 1];
        i += blockDim.x - 2;
    }
}
extern "C" __global__ void smooth_volatile(const double *in, double *out, int n) {
    __shared__ double t[32];
    smooth<volatile double>(t, in, out, n);
}
extern "C" __global__ void smooth_plain(const double *in, double *out, int n) {
    __shared__ double t[32];
    smooth<double>(t, in, out, n);
}
// the same with a barrier ending the pass: nothing to step
extern "C" __global__ void smooth_synchronized(const double *in, double *out, int n) {
    __shared__ double t[32];
    int i = threadIdx.x;
    while (i < n) {
        t[threadIdx.x] = in[blockIdx.x * n + i];
        __syncthreads();
        if (threadIdx.x >= 1 && threadIdx.x < blockDim.x - 1 && i < n - 1)
            out[blockIdx.x * n + i] = t[threadIdx.x - 1] + 2.0 * t[threadIdx.x] + t[threadIdx.x + 1];
        i += blockDim.x - 2;
        __syncthreads();
    }
}
// each lane updates its own pair of a shared tile, then the tile goes back thread-strided
// with no barrier: lane k writes back entries that lanes k / 2 and (k + blockDim.x) / 2 made
extern "C" __global__ void pairs_plain(double *a) {
    __shared__ double t[64];
    int nt = blockDim.x;
    double *row = a + blockIdx.x * 2 * nt;
    t[threadIdx.x] = row[threadIdx.x];
    t[threadIdx.x + nt] = row[threadIdx.x + nt];
    __syncthreads();
    double x = t[2 * threadIdx.x], y = t[2 * threadIdx.x + 1];
    t[2 * threadIdx.x] = x + y;
    t[2 * threadIdx.x + 1] = x - y;
    row[threadIdx.x] = t[threadIdx.x];
    row[threadIdx.x + nt] = t[threadIdx.x + nt];
}
// must not fire: a lane reads only its own slot between barriers
extern "C" __global__ void own_slots(double *a) {
    __shared__ double t[64];
    t[2 * threadIdx.x] = a[threadIdx.x];
    t[2 * threadIdx.x + 1] = 2.0 * t[2 * threadIdx.x];
    __syncthreads();
    a[threadIdx.x] = t[2 * threadIdx.x + 1] + t[(2 * threadIdx.x + 2) % 64];
}
// must not fire: another lane's slot at an address the analysis cannot follow (a lookup)
extern "C" __global__ void gathered(const int *perm, double *a) {
    __shared__ double t[32];
    t[threadIdx.x] = a[threadIdx.x];
    a[threadIdx.x] = t[perm[threadIdx.x]];
}
'''

ROWS, N = 3, 40


@pytest.fixture(scope="module")
def module():
    return cpuify.RawModule(code=SOURCE)


@pytest.fixture(scope="module")
def ptx():
    return compile_to_ptx(SOURCE).ptx


def _smooth_want(x: np.ndarray) -> np.ndarray:
    xr = x.reshape(ROWS, N)
    want = np.zeros((ROWS, N))
    want[:, 1:-1] = xr[:, :-2] + 2 * xr[:, 1:-1] + xr[:, 2:]
    return want.ravel()


def _lifted(ptx: str, name: str, block_dims=None, options=()):
    module = parse_ptx(ptx)
    opts, _ = PipelineOptions.parse(["--disable-pass=raise-structured-cf", *options])
    return lift_and_optimize(module, module.functions[name], opts, block_dims)


def _steps(kernel_op) -> list:
    return [op for b in block_body(kernel_op).blocks for op in b.ops
            if op.name == "upir.warp_collective" and op.attributes.get("kind") == "lockstep"]


@pytest.mark.parametrize("name", ["smooth_volatile", "smooth_plain", "smooth_synchronized"])
@pytest.mark.parametrize("block", [12, 32])
def test_tiles_with_a_halo_in_a_loop(module, ptx, name, block):
    x = np.random.default_rng(block).uniform(-1, 1, ROWS * N)
    want = _smooth_want(x)
    f = module.get_function(name)
    for _ in range(2):              # generic code, then code specialized for the block
        out = np.zeros(ROWS * N)
        f((ROWS,), (block,), (x, out, np.int32(N)))
        np.testing.assert_allclose(out, want, rtol=1e-14)
    lifted, _ = _lifted(ptx, name)
    interp = InterpModule(ptx)
    interp.use_ir(name, lifted.op)
    out = np.zeros(ROWS * N)
    interp.launch(name, (ROWS,), (block,), (x, out, np.int32(N)))
    np.testing.assert_allclose(out, want, rtol=1e-14)


@pytest.mark.parametrize("block", [12, 32])
def test_pairs_written_back_without_barrier(module, ptx, block):
    a = np.random.default_rng(block).uniform(-1, 1, ROWS * 2 * block)
    ar = a.reshape(ROWS, -1)
    want = ar.copy()
    want[:, 0::2] = ar[:, 0::2] + ar[:, 1::2]
    want[:, 1::2] = ar[:, 0::2] - ar[:, 1::2]
    f = module.get_function("pairs_plain")
    for _ in range(2):
        got = a.copy()
        f((ROWS,), (block,), (got,))
        np.testing.assert_allclose(got.reshape(ROWS, -1), want, rtol=1e-14)
    lifted, _ = _lifted(ptx, "pairs_plain")
    interp = InterpModule(ptx)
    interp.use_ir("pairs_plain", lifted.op)
    got = a.copy()
    interp.launch("pairs_plain", (ROWS,), (block,), (got,))
    np.testing.assert_allclose(got.reshape(ROWS, -1), want, rtol=1e-14)


@pytest.mark.parametrize("dims", [None, (12, 1, 1), (32, 1, 1), (64, 1, 1)])
def test_plain_exchanges_get_steps(ptx, dims):
    """A step before the second access of each pair: pairs_plain's write-back load of
    t[tid] (after the stores of t[2*tid], t[2*tid+1]) and smooth_plain's store of t[tid] at
    the top of the loop (after the loads of t[tid - 1], t[tid + 1] of the pass before)."""
    for name, second in (("pairs_plain", "ptx.ld"), ("smooth_plain", "ptx.st")):
        lifted, result = _lifted(ptx, name, dims)
        steps = _steps(lifted.op)
        assert result.counts["warp-lockstep"] == len(steps) > 0, name
        assert len(steps) <= 4, name        # not a step at every shared access
        stepped = [op for b in block_body(lifted.op).blocks for k, op in enumerate(b.ops)
                   if op.name == second and "shared" in op.attributes.get("mods", ())
                   and k and b.ops[k - 1] in steps]
        assert stepped, name


def test_a_step_ends_each_latch_of_a_loop_with_steps(ptx):
    for name in ("smooth_volatile", "smooth_plain"):
        lifted, _ = _lifted(ptx, name)
        steps = set(_steps(lifted.op))
        loops = natural_loops(block_body(lifted.op))
        latches = [latch for _, ls in loops.values() for latch in ls]
        assert latches, name
        for latch in latches:
            assert latch.ops[-2] in steps, name       # right before the branch back
    # without the steps of the body, no latch step either
    lifted, result = _lifted(ptx, "smooth_synchronized")
    assert result.counts["warp-lockstep"] == 0 and not _steps(lifted.op)


@pytest.mark.parametrize("name", ["smooth_synchronized", "own_slots", "gathered"])
def test_no_steps_without_an_exchange_the_addresses_show(ptx, name):
    for dims in (None, (32, 1, 1)):
        lifted, result = _lifted(ptx, name, dims)
        assert result.counts["warp-lockstep"] == 0 and not _steps(lifted.op), (name, dims)


def test_pass_can_be_disabled(ptx):
    lifted, result = _lifted(ptx, "pairs_plain", None, ["--disable-pass=warp-lockstep"])
    assert "warp-lockstep" not in result.counts or result.counts["warp-lockstep"] == 0
    assert not _steps(lifted.op)
