"""barrier-elimination (transforms/barriers.py): barriers no memory access needs are removed
(the Polygeist paper's Fig. 9, Rodinia's backprop layer), and the ones that order
accesses of different threads stay: neighbours at +-1, pointers that may alias, atomics,
volatile accesses, addresses through a loop counter, and same-thread accesses when the block
shape is not known."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.compiler import lift_and_optimize
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp.machine import InterpModule
from cpuify.ir.core import reverse_postorder
from cpuify.ir.structure import block_body
from cpuify.transforms.pass_manager import PipelineOptions, default_pipeline

SOURCE = r'''
#define H 16
#define W 16
// the paper's Fig. 9 (Rodinia bpnn_layerforward), with its two unneeded barriers
extern "C" __global__ void fig9(const float *input, float *hidden, float *output, int hid) {
    __shared__ float node[H];
    __shared__ float weights[H][W];
    int by = blockIdx.y, tx = threadIdx.x, ty = threadIdx.y;
    int index = (hid + 1) * H * by + (hid + 1) * ty + tx + 1 + (hid + 1);
    int index_in = H * by + ty + 1;
    if (tx == 0) node[ty] = input[index_in];
    __syncthreads();                                   // unneeded #1
    weights[ty][tx] = hidden[index];
    __syncthreads();
    weights[ty][tx] = weights[ty][tx] * node[ty];
    __syncthreads();
    for (int i = 1; i <= 4; i++) {
        int p = 1 << i;
        if (ty % p == 0) weights[ty][tx] += weights[ty + p / 2][tx];
        __syncthreads();
    }
    hidden[index] = weights[ty][tx];
    __syncthreads();                                   // unneeded #2 if hidden, output differ
    if (tx == 0) output[by * hid + ty] = weights[tx][ty];
}
// two staging phases on distinct shared arrays: the first barrier orders nothing
extern "C" __global__ void two_phases(const float *x, const float *y, float *out) {
    __shared__ float s1[64], s2[64];
    int t = threadIdx.x;
    s1[t] = x[t];
    __syncthreads();                                   // unneeded: the next one orders both
    s2[t] = y[t] * 2.0f;
    __syncthreads();
    out[t] = s1[63 - t] + s2[63 - t];
}
// same-thread round trip through shared memory: removable once the block shape is known
// (x is __restrict__: its loads are .nc, never a hazard with the stores to y)
extern "C" __global__ void own_slot(const float *__restrict__ x, float *y) {
    __shared__ float s[16][16];
    int tx = threadIdx.x, ty = threadIdx.y;
    s[ty][tx] = x[ty * 16 + tx] * 2.0f;
    __syncthreads();
    y[ty * 16 + tx] = s[ty][tx] + 1.0f;
}
// neighbours: thread t reads what t + 1 wrote
extern "C" __global__ void neighbour(const float *x, float *y) {
    __shared__ float s[65];
    int t = threadIdx.x;
    s[t] = x[t];
    if (t == 0) s[64] = 0.0f;
    __syncthreads();
    y[t] = s[t + 1] - s[t];
}
// a write through one pointer, a read through another that may be the same array
extern "C" __global__ void aliasing(float *a, const float *b) {
    int t = threadIdx.x;
    a[t] = 1.0f;
    __syncthreads();
    a[t] = b[(t + 1) & 63] + 2.0f;
}
// atomics on one shared counter, read by every thread after the barrier
extern "C" __global__ void atomics(int *out) {
    __shared__ int count;
    if (threadIdx.x == 0) count = 0;
    __syncthreads();
    atomicAdd(&count, 1);
    __syncthreads();
    out[threadIdx.x] = count;
}
// volatile shared memory: each access is observable
extern "C" __global__ void volatile_slot(float *y) {
    volatile __shared__ float s[64];
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    y[threadIdx.x] = s[threadIdx.x];
}
// the address moves with a loop counter: the write of one iteration is the read of the next
extern "C" __global__ void moving(float *y, int n) {
    __shared__ float s[128];
    int t = threadIdx.x;
    s[t] = t;
    s[t + 64] = 0.0f;
    __syncthreads();
    for (int k = 0; k < n; k++) {
        float v = s[t + k];
        __syncthreads();
        s[t + k + 1] = v + 1.0f;
        __syncthreads();
    }
    y[t] = s[t + n];
}
// barrier motion must not fire: the code after the barrier writes the slot the `if` wrote
// (the same thread's two writes would swap: the barrier itself orders nothing)
extern "C" __global__ void same_slot(const float *x, float *y) {
    __shared__ float s[16][16];
    int tx = threadIdx.x, ty = threadIdx.y;
    if ((tx & 1) == 0) s[ty][tx] = x[ty];
    __syncthreads();
    s[ty][tx] = 2.0f;
    __syncthreads();
    y[ty * 16 + tx] = s[ty][15 - tx];
}
// ... nor when the code after it reads what the `if` wrote, one row down (a neighbour's)
extern "C" __global__ void next_row(const float *x, float *y) {
    __shared__ float node[16], tile[16][16];
    int tx = threadIdx.x, ty = threadIdx.y;
    if (tx == 0) node[ty] = x[ty];
    __syncthreads();
    tile[ty][tx] = node[(ty + 1) & 15];
    __syncthreads();
    y[ty * 16 + tx] = tile[ty][15 - tx];
}
// ... nor when the condition is no function of the thread index alone (`tx == n`)
extern "C" __global__ void param_if(const float *__restrict__ x, float *y, int n) {
    __shared__ float node[16], tile[16][16];
    int tx = threadIdx.x, ty = threadIdx.y;
    if (tx == n) node[ty] = x[ty];
    __syncthreads();
    tile[ty][tx] = x[16 + ty * 16 + tx];
    __syncthreads();
    y[ty * 16 + tx] = tile[ty][15 - tx] * node[ty];
}
// ... nor when the `if` writes global memory the code after it may read (a may alias b)
extern "C" __global__ void alias_if(float *a, const float *b, float *y) {
    __shared__ float tile[16][16];
    int tx = threadIdx.x, ty = threadIdx.y;
    if (tx == 0) a[ty] = 1.0f;
    __syncthreads();
    tile[ty][tx] = b[ty * 16 + tx];
    __syncthreads();
    y[ty * 16 + tx] = tile[ty][15 - tx];
}
'''


@pytest.fixture(scope="module")
def ptx() -> str:
    return compile_to_ptx(SOURCE, filename="barriers.cu").ptx


def _barriers(ptx: str, name: str, dims=None) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """(barriers before, barriers removed)."""
    module = parse_ptx(ptx)
    before, _ = lift_and_optimize(module, module.functions[name], PipelineOptions(passes=()))
    n = sum(op.name == "upir.barrier" for b in block_body(before.op).blocks for op in b.ops)
    lifted, result = lift_and_optimize(module, module.functions[name], PipelineOptions(), dims)
    return n, result.counts["barrier-elimination"]


def test_distinct_shared_arrays(ptx: str) -> None:
    assert _barriers(ptx, "two_phases") == (2, 1)


def test_fig9_keeps_the_barrier_that_isolates_divergent_code(ptx: str) -> None:
    """#1 orders nothing (node and weights never overlap), but it ends the interval only
    the threads with tx == 0 run: merged into the next, a branch on tx in a thread loop
    that vectorized without it.  barrier-elimination keeps it; barrier-motion moves it (see
    below).  #2 orders hidden[] before output[], which may alias.  With the block shape,
    store-forwarding removes the `weights[ty][tx]` round trip, and the barrier it crossed
    (between the load of `hidden` and the multiplication) orders nothing: it goes
    (tests/test_forwarding_barriers.py)."""
    total, removed = _barriers(ptx, "fig9")
    assert total == 8 and removed == 0
    assert _barriers(ptx, "fig9", (16, 16, 1))[1] == 1


def _motion(ptx: str, name: str, dims=None):  # type: ignore[no-untyped-def]
    """(the kernel's IR after the default pipeline, left a CFG: without raise-structured-cf,
    the passes' counts)."""
    module = parse_ptx(ptx)
    # barrier motion on its own: without store-forwarding and with barrier-elimination's
    # rule as the paper states it (by default, Fig. 9's barrier between the copy of hidden
    # into weights and its load goes first, a same-thread round trip in one interval, and
    # then #1 orders node[ty] before its readers)
    options = PipelineOptions(passes=tuple(
        "barrier-elimination{adjacent_intervals=false}" if p == "barrier-elimination" else p
        for p in default_pipeline() if p not in ("store-forwarding", "raise-structured-cf")))
    lifted, result = lift_and_optimize(module, module.functions[name], options, dims)
    return lifted.op, result.counts


def test_fig9_barrier_motion(ptx: str) -> None:
    """barrier-motion (the paper's IV-A): Fig. 9's barrier #1 moves down onto the next one;
    the load of `hidden` and the store to `weights` move above the `if (tx == 0)`, which
    then ends its barrier interval (run after the vectorized thread loop)."""
    from test_ir import filecheck

    from cpuify.ir.printer import print_op
    op, counts = _motion(ptx, "fig9", (16, 16, 1))
    assert counts["barrier-motion"] == 1 and counts["barrier-elimination"] == 0
    assert sum(o.name == "upir.barrier" for b in block_body(op).blocks for o in b.ops) == 7
    # (blocks in reverse post-order: without the raise in the pipeline, if-convert-swaps
    # still gets the structured form, and the CFG lowered back after it is the same graph
    # but may list an if-else's arms in another order than the PTX did)
    body = block_body(op)
    order = reverse_postorder(body)
    body.blocks = order + [b for b in body.blocks if b not in set(order)]
    filecheck(print_op(op), r'''
        CHECK: "upir.block_parallel"
        CHECK-NOT: "upir.barrier"
        CHECK: "ptx.ld"({{.*}}) {mods = ["global", "f32"]
        CHECK-NOT: "upir.barrier"
        CHECK: "ptx.st"({{.*}}) {mods = ["shared", "f32"]
        CHECK-NEXT: "cf.cond_br"
        CHECK-NOT: "upir.barrier"
        CHECK: "ptx.ld"({{.*}}) {mods = ["global", "f32"]
        CHECK-NEXT: "ptx.st"({{.*}}) {mods = ["shared", "f32"]
        CHECK-NEXT: "cf.br"
        CHECK-NEXT: ^bb
        CHECK-NEXT: "upir.barrier"
    ''')
    # generic code (block shape unknown: no thread-index condition to defer) keeps it
    assert _motion(ptx, "fig9")[1]["barrier-motion"] == 0
    # and the pass can be left out
    module = parse_ptx(ptx)
    _, result = lift_and_optimize(module, module.functions["fig9"],
                                  PipelineOptions.parse(["--disable-pass=barrier-motion"])[0],
                                  (16, 16, 1))
    assert "barrier-motion" not in result.counts


@pytest.mark.parametrize("name", ["same_slot", "next_row", "param_if", "alias_if"])
def test_barrier_motion_must_not_fire(ptx: str, name: str) -> None:
    op, counts = _motion(ptx, name, (16, 16, 1))
    assert counts["barrier-motion"] == 0
    assert counts["barrier-elimination"] == 0
    assert sum(o.name == "upir.barrier" for b in block_body(op).blocks for o in b.ops) == 2


def test_barrier_motion_results(ptx: str) -> None:
    """The kernels above, compiled (code for the 16 x 16 shape from the second launch on)
    and through the interpreter after the passes, against NumPy."""
    mod = cpuify.RawModule(code=SOURCE)
    rng = np.random.default_rng(3)
    x = rng.random(16 + 256, dtype=np.float32)
    expect = {
        "same_slot": np.full(256, 2.0, np.float32),
        "next_row": np.repeat(np.roll(x[:16], -1), 16),
        "param_if": (x[16:].reshape(16, 16)[:, ::-1] * x[:16, None]).ravel(),
    }
    module = parse_ptx(ptx)
    for name, want in expect.items():
        args = (x, np.int32(3)) if name == "param_if" else (x,)
        lifted, _ = lift_and_optimize(module, module.functions[name], PipelineOptions(), (16, 16, 1))
        interp = InterpModule(ptx)
        interp.use_ir(name, lifted.op)
        runs = []
        for _ in range(3):
            y = np.zeros(256, np.float32)
            full = (x, y) + args[1:]
            mod.get_function(name)((1,), (16, 16), full)
            runs.append(y)
        y = np.zeros(256, np.float32)
        interp.launch(name, (1,), (16, 16), (x, y) + args[1:])
        runs.append(y)
        for got in runs:
            np.testing.assert_array_equal(got, want, err_msg=name)


def test_same_thread_needs_the_block_shape(ptx: str) -> None:
    assert _barriers(ptx, "own_slot") == (1, 0)
    assert _barriers(ptx, "own_slot", (16, 16, 1)) == (1, 1)
    assert _barriers(ptx, "own_slot", (16, 8, 1)) == (1, 1)
    # a 32-wide row would reach into the next row's slots: different threads, same address
    assert _barriers(ptx, "own_slot", (32, 8, 1)) == (1, 0)


@pytest.mark.parametrize("name", ["neighbour", "aliasing", "atomics", "volatile_slot", "moving"])
def test_needed_barriers_stay(ptx: str, name: str) -> None:
    total, removed = _barriers(ptx, name, (64, 1, 1))
    assert total >= 1 and removed == 0


def test_results(ptx: str) -> None:
    mod = cpuify.RawModule(code=SOURCE)
    rng = np.random.default_rng(1)
    a, b, c = rng.random(64, dtype=np.float32), rng.random(64, dtype=np.float32), np.zeros(64, np.float32)
    for _ in range(2):
        mod.get_function("two_phases")((1,), (64,), (a, b, c))
        np.testing.assert_array_equal(c, a[::-1] + b[::-1] * np.float32(2))
    x = rng.random(256, dtype=np.float32)
    y = np.zeros(256, np.float32)
    f = mod.get_function("own_slot")
    for _ in range(3):                     # generic code, then code for the 16x16 shape
        f((1,), (16, 16), (x, y))
        np.testing.assert_array_equal(y, x * np.float32(2) + np.float32(1))
    # fig9 through the compiler and through the interpreter, after the passes
    hid, blocks = 16, 4
    inp = rng.random(16 * blocks + 1, dtype=np.float32)
    hidden = rng.random((hid + 1) * (16 * blocks + 1), dtype=np.float32)
    results = []
    g = mod.get_function("fig9")
    for _ in range(2):
        h, out = hidden.copy(), np.zeros(blocks * hid, np.float32)
        g((1, blocks), (16, 16), (inp, h, out, np.int32(hid)))
        results.append((h, out))
    module = parse_ptx(ptx)
    lifted, _ = lift_and_optimize(module, module.functions["fig9"], PipelineOptions(), (16, 16, 1))
    interp = InterpModule(ptx)
    interp.use_ir("fig9", lifted.op)
    h, out = hidden.copy(), np.zeros(blocks * hid, np.float32)
    interp.launch("fig9", (1, blocks), (16, 16), (inp, h, out, np.int32(hid)))
    # NumPy: the column sums of weights * node, per block
    ref_out = np.zeros(blocks * hid, np.float32)
    for by in range(blocks):
        w = np.array([[hidden[(hid + 1) * 16 * by + (hid + 1) * ty + tx + 1 + (hid + 1)]
                       for tx in range(16)] for ty in range(16)], np.float32)
        node = inp[16 * by + 1: 16 * by + 17]
        w = w * node[:, None]
        for i in range(1, 5):
            p = 1 << i
            for ty in range(0, 16, p):
                w[ty] = w[ty] + w[ty + p // 2]
        ref_out[by * hid: by * hid + 16] = w[0]
    for got_h, got_out in results + [(h, out)]:
        np.testing.assert_array_equal(got_out, ref_out)
        np.testing.assert_array_equal(got_h, results[0][0])
    for a in (x,):
        assert a.dtype == np.float32


def test_store_forwarding_across_a_barrier(ptx: str) -> None:
    """store-forwarding: Fig. 9's `weights[ty][tx]` load after the barrier reads
    the value the same thread stored (every store of `weights` is at [ty][tx]); the store
    it came from is dead (overwritten before any thread reads it).  Results unchanged."""
    module = parse_ptx(ptx)
    passes = PipelineOptions(passes=("store-forwarding",))
    _, result = lift_and_optimize(module, module.functions["fig9"], passes, (16, 16, 1))
    assert result.counts["store-forwarding"] == 2
    _, generic = lift_and_optimize(module, module.functions["fig9"], passes)
    assert generic.counts["store-forwarding"] == 0          # needs the block shape
    # node[ty] is written by the tx == 0 threads only: never forwarded
    _, result = lift_and_optimize(module, module.functions["neighbour"], passes, (64, 1, 1))
    assert result.counts["store-forwarding"] == 0
    mod = cpuify.RawModule(code=SOURCE, options=("--passes=store-forwarding",))
    rng = np.random.default_rng(2)
    hid, blocks = 16, 3
    inp = rng.random(16 * blocks + 1, dtype=np.float32)
    hidden = rng.random((hid + 1) * (16 * blocks + 1), dtype=np.float32)
    outs = []
    for m in (mod, cpuify.RawModule(code=SOURCE, options=("--passes=",))):
        for _ in range(2):                  # the generic code, then the code for 16 x 16
            h, out = hidden.copy(), np.zeros(blocks * hid, np.float32)
            m.get_function("fig9")((1, blocks), (16, 16), (inp, h, out, np.int32(hid)))
            outs.append((h, out))
    for h, out in outs[1:]:
        np.testing.assert_array_equal(out, outs[0][1])
        np.testing.assert_array_equal(h, outs[0][0])


def test_keep_divergent_splits_option(ptx: str) -> None:
    """barrier-elimination{keep_divergent_splits=false}: Fig. 9 loses its first barrier, as
    in the paper (node and weights never overlap), at the price measured in the pass's
    docstring."""
    module = parse_ptx(ptx)
    opts = PipelineOptions.parse(["--passes=barrier-elimination{keep_divergent_splits=false}"])[0]
    _, result = lift_and_optimize(module, module.functions["fig9"], opts)
    assert result.counts["barrier-elimination"] == 1
