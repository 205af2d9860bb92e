"""Flat thread loops (the flat-thread-loops pass, KernelPlan.flat_loops,
SegmentPaths.wants_flat_loop): in code for any block shape of a kernel the pass marked, a
segment whose every way runs an access LLVM's loop vectorizer never takes (volatile or
ordered loads and stores, atomics) runs its threads in one loop over the linear thread
index, tx/ty/tz counted along with it, instead of the z/y/x nest.  Generic code runs
every launch whose block shape was not specialized, so each kernel here runs on 1-D, 2-D and
3-D blocks of odd sizes (partial warps) through the generic code (the first launch of a
shape) and is compared with the reference interpreter and with NumPy: a warp-synchronous
scan on volatile shared memory, atomics after a barrier with a divergent exit, and warp
shuffles between volatile stores."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.codegen.llvm_gen import KernelCodegen, ModuleCodegen
from cpuify.compiler import lift_and_optimize
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp import interpret_kernel
from cpuify.ir.structure import block_parallel
from cpuify.transforms.pass_manager import PipelineOptions

SRC = r'''
#define LINEAR (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))
#define COUNT (blockDim.x * blockDim.y * blockDim.z)
// an inclusive scan in each warp on volatile shared memory, warp-synchronous (no sync
// between the steps), after a barrier; each thread also writes its own indices
extern "C" __global__ void warp_scan(const int *x, int *out, int *where) {
    __shared__ volatile int s[1024];
    unsigned t = LINEAR, i = blockIdx.x * COUNT + t, lane = t & 31;
    s[t] = x[i];
    __syncthreads();
    if (lane >= 1) s[t] += s[t - 1];
    if (lane >= 2) s[t] += s[t - 2];
    if (lane >= 4) s[t] += s[t - 4];
    if (lane >= 8) s[t] += s[t - 8];
    if (lane >= 16) s[t] += s[t - 16];
    __syncthreads();
    out[i] = s[t];
    where[i] = threadIdx.x + 100 * threadIdx.y + 10000 * threadIdx.z;
}
// a shared histogram: cleared, a barrier, threads past n leave, the others count with
// atomics, a barrier, then the first 16 threads add it to the global one
extern "C" __global__ void histogram(const int *x, int *hist, int *where, int n) {
    __shared__ int h[16];
    unsigned t = LINEAR, i = blockIdx.x * COUNT + t;
    if (t < 16) h[t] = 0;
    __syncthreads();
    if (i < n) {
        atomicAdd(&h[x[i] & 15], 1);
        where[i] = threadIdx.x + 100 * threadIdx.y + 10000 * threadIdx.z;
    }
    __syncthreads();
    if (t < 16) atomicAdd(&hist[t], h[t]);
}
// threads past n exit after the barrier; the others add into global counters
extern "C" __global__ void exits(const int *x, int *total, int *where, int n) {
    __shared__ int s[1024];
    unsigned t = LINEAR, i = blockIdx.x * COUNT + t;
    s[t] = x[i];
    __syncthreads();
    if (i >= n) return;
    atomicAdd(total, s[COUNT - 1 - t]);
    where[i] = threadIdx.x + 100 * threadIdx.y + 10000 * threadIdx.z;
}
// shuffles between volatile stores (whole warps)
extern "C" __global__ void shuffles(const int *x, int *out) {
    __shared__ volatile int s[1024];
    unsigned t = LINEAR, i = blockIdx.x * COUNT + t;
    int v = x[i];
    s[t] = v;
    __syncthreads();
    v += __shfl_down_sync(0xffffffffu, v, 1);
    s[t] = v;
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    s[t] += v;
    __syncthreads();
    out[i] = s[t] + s[t ^ 1];
}
'''

#: block shapes of odd sizes (partial warps): 1-D, 2-D, 3-D
ODD = [(45, 1, 1), (100, 1, 1), (7, 5, 1), (33, 3, 1), (3, 5, 7), (5, 4, 3)]
#: ... and of whole warps, for the shuffles
WHOLE = [(64, 1, 1), (16, 4, 1), (32, 3, 1), (8, 4, 2), (4, 2, 12)]


@pytest.fixture(scope="module")
def ptx_text() -> str:
    return compile_to_ptx(SRC).ptx


@pytest.fixture(scope="module")
def ptx(ptx_text):
    return parse_ptx(ptx_text)


def _lifted(ptx, name, block, disabled=frozenset()):
    return lift_and_optimize(ptx, ptx.functions[name], PipelineOptions(disabled=disabled), block)[0]


def _plan(ptx, name, block, disabled=frozenset()):
    return KernelCodegen(ModuleCodegen(ptx), _lifted(ptx, name, block, disabled), block)


def test_which_segments(ptx):
    for name in ("warp_scan", "histogram", "exits", "shuffles"):
        assert _plan(ptx, name, None).flat_loops, name
        assert not _plan(ptx, name, (64, 1, 1)).flat_loops, name      # specialized: nests
        # the pass marks the kernel; without it, nests
        assert not _plan(ptx, name, None, frozenset({"flat-thread-loops"})).flat_loops, name
    # the histogram's first segment (before any atomic, `h[t] = 0`) keeps its nest
    assert 0 not in _plan(ptx, "histogram", None).flat_loops
    gen = ModuleCodegen(ptx)
    gen.add_kernel(_lifted(ptx, "warp_scan", None), None)
    assert "t.head" in gen.llvm_text()


def test_pass_marks_kernels_with_sync_points_and_ordered_accesses():
    src = r'''
    extern "C" __global__ void plain(int *x) {          // a barrier, no ordered access
        __shared__ int s[64]; s[threadIdx.x] = x[threadIdx.x]; __syncthreads();
        x[threadIdx.x] = s[63 - threadIdx.x]; }
    extern "C" __global__ void no_sync(int *x) {         // an atomic, no sync point
        atomicAdd(x, 1); }
    extern "C" __global__ void marked(volatile int *x) {
        __shared__ int s[64]; s[threadIdx.x] = x[threadIdx.x]; __syncthreads();
        x[threadIdx.x] = s[63 - threadIdx.x]; }
    '''
    mod = parse_ptx(compile_to_ptx(src).ptx)
    marked = {name: bool(block_parallel(_lifted(mod, name, None).op).attributes.get("flat_thread_loops"))
              for name in ("plain", "no_sync", "marked")}
    assert marked == {"plain": False, "no_sync": False, "marked": True}


def _where(block, nblocks):
    x, y, z = np.meshgrid(np.arange(block[0]), np.arange(block[1]), np.arange(block[2]), indexing="ij")
    one = (x + 100 * y + 10000 * z).transpose(2, 1, 0).reshape(-1)      # linear order: z, y, x
    return np.tile(one, nblocks).astype(np.int32)


def _generic_and_interpreted(ptx_text, name, grid, block, args):
    """The kernel run through its generic code (a fresh module's first launch of the
    shape) and through the interpreter, on copies of the arguments."""
    compiled = tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)
    interpreted = tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)
    cpuify.RawModule(ptx=ptx_text).get_function(name)(grid, block, compiled)
    interpret_kernel(ptx_text, name, grid, block, interpreted)
    for c, i in zip(compiled, interpreted):
        if isinstance(c, np.ndarray):
            np.testing.assert_array_equal(c, i)
    return compiled


@pytest.mark.parametrize("block", ODD)
def test_warp_scan(ptx_text, block):
    count, nblocks = block[0] * block[1] * block[2], 3
    x = np.random.default_rng(count).integers(-100, 100, nblocks * count).astype(np.int32)
    out = np.zeros_like(x)
    where = np.zeros_like(x)
    _, out, where = _generic_and_interpreted(ptx_text, "warp_scan", (nblocks,), block, (x, out, where))
    want = np.concatenate([np.cumsum(x[b * count:][k:k + 32][:min(32, count - k)])
                           for b in range(nblocks) for k in range(0, count, 32)])
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(where, _where(block, nblocks))


@pytest.mark.parametrize("block", ODD)
def test_histogram(ptx_text, block):
    count, nblocks = block[0] * block[1] * block[2], 4
    n = nblocks * count - count // 2 - 1        # the last block's second half is past n
    x = np.random.default_rng(count + 1).integers(0, 1 << 20, nblocks * count).astype(np.int32)
    hist = np.zeros(16, np.int32)
    where = np.full_like(x, -1)
    _, hist, where, _ = _generic_and_interpreted(ptx_text, "histogram", (nblocks,), block,
                                              (x, hist, where, np.int32(n)))
    np.testing.assert_array_equal(hist, np.bincount(x[:n] & 15, minlength=16))
    np.testing.assert_array_equal(where[:n], _where(block, nblocks)[:n])
    assert (where[n:] == -1).all()


@pytest.mark.parametrize("block", ODD)
def test_exits(ptx_text, block):
    count, nblocks = block[0] * block[1] * block[2], 3
    n = nblocks * count - count // 3 - 2
    x = np.random.default_rng(count + 2).integers(-1000, 1000, nblocks * count).astype(np.int32)
    total = np.zeros(1, np.int32)
    where = np.full_like(x, -1)
    _, total, where, _ = _generic_and_interpreted(ptx_text, "exits", (nblocks,), block,
                                               (x, total, where, np.int32(n)))
    mirrored = x.reshape(nblocks, count)[:, ::-1].reshape(-1)      # s[COUNT - 1 - t]
    assert total[0] == mirrored[:n].sum()
    np.testing.assert_array_equal(where[:n], _where(block, nblocks)[:n])
    assert (where[n:] == -1).all()


def _shuffles_reference(x: np.ndarray) -> np.ndarray:
    w = x.reshape(-1, 32).astype(np.int64)
    down = w.copy()
    down[:, :31] = w[:, 1:]          # lane 31 reads its own value
    v = w + down
    s = v.copy()
    v = v + v[:, np.arange(32) ^ 2]
    s = s + v
    return (s + s[:, np.arange(32) ^ 1]).reshape(-1).astype(np.int32)


@pytest.mark.parametrize("block", WHOLE)
def test_shuffles(ptx_text, block):
    count, nblocks = block[0] * block[1] * block[2], 2
    x = np.random.default_rng(count + 3).integers(-1000, 1000, nblocks * count).astype(np.int32)
    out = np.zeros_like(x)
    _, out = _generic_and_interpreted(ptx_text, "shuffles", (nblocks,), block, (x, out))
    np.testing.assert_array_equal(out, _shuffles_reference(x))
