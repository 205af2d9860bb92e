"""stream-prefetch-distance: the block barriers of a loop whose global loads stream this
block's own data (every load addressed from every block index the kernel reads) are marked
`prefetch_next_block = 1` (with `prefetch_ahead = 1`, the segment's own iteration), and the
segments resuming there prefetch their iteration's lines in block blockIdx.x + 1, into L2;
with `next_block=false`, or in a kernel that does not read blockIdx.x, `prefetch_ahead = 5`
(5 iterations ahead); loops whose loads blocks share (a tiled matmul's A and B), gathers
through loaded indices, volatile loads, loops without barriers and generic code are left
unmarked (2 ahead).
Checked on the IR the pass leaves, on what code generation plans, and end to end against
NumPy with the pass on and off."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.codegen.llvm_gen import KernelCodegen, ModuleCodegen
from cpuify.compiler import lift_and_optimize
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.ir.parser import parse_op
from cpuify.ir.printer import print_op
from cpuify.ir.structured_shapes import nested_ops
from cpuify.transforms.pass_manager import PipelineOptions, make_pass
from test_prefetch import SRC as PREFETCH_SRC     # its tiled_mm: A's tiles picked by blockIdx.y
                                                  # alone, B's by blockIdx.x (shared by blocks)

SRC = r'''
// pathfinder's shape: a row per iteration, each block its own columns of each row
extern "C" __global__ void rows_min(const int *wall, int *out, int cols, int rows) {
    __shared__ int prev[128];
    __shared__ int next[128];
    int x = blockIdx.x * blockDim.x + threadIdx.x, t = threadIdx.x;
    prev[t] = x < cols ? wall[x] : 0;
    __syncthreads();
    for (int r = 1; r < rows; r++) {
        int w = t > 0 ? prev[t - 1] : prev[t];
        int e = t < blockDim.x - 1 ? prev[t + 1] : prev[t];
        int m = min(prev[t], min(w, e));
        next[t] = x < cols ? wall[r * cols + x] + m : 0;
        __syncthreads();
        prev[t] = next[t];
        __syncthreads();
    }
    if (x < cols) out[x] = prev[t];
}
// the same over blockIdx.y (a grid of 1 x n blocks): the next block is not blockIdx.x + 1
extern "C" __global__ void rows_min_y(const int *wall, int *out, int cols, int rows) {
    __shared__ int prev[128];
    __shared__ int next[128];
    int x = blockIdx.y * blockDim.x + threadIdx.x, t = threadIdx.x;
    prev[t] = x < cols ? wall[x] : 0;
    __syncthreads();
    for (int r = 1; r < rows; r++) {
        int m = min(prev[t], t > 0 ? prev[t - 1] : prev[t]);
        next[t] = x < cols ? wall[r * cols + x] + m : 0;
        __syncthreads();
        prev[t] = next[t];
        __syncthreads();
    }
    if (x < cols) out[x] = prev[t];
}
// the rows through an index array: the row a block reads is loaded, not computed
extern "C" __global__ void rows_gather(const int *order, const float *w, float *out, int cols,
                                       int rows) {
    __shared__ float acc[128];
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    acc[threadIdx.x] = 0.0f;
    __syncthreads();
    for (int r = 0; r < rows; r++) {
        float v = x < cols ? w[order[r] * cols + x] : 0.0f;
        __syncthreads();
        acc[threadIdx.x] += v;
        __syncthreads();
    }
    if (x < cols) out[x] = acc[threadIdx.x];
}
// volatile loads stay as written
extern "C" __global__ void rows_volatile(volatile const float *w, float *out, int cols, int rows) {
    __shared__ float acc[128];
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    acc[threadIdx.x] = 0.0f;
    __syncthreads();
    for (int r = 0; r < rows; r++) {
        float v = x < cols ? w[r * cols + x] : 0.0f;
        __syncthreads();
        acc[threadIdx.x] += v;
        __syncthreads();
    }
    if (x < cols) out[x] = acc[threadIdx.x];
}
// a loop without barriers
extern "C" __global__ void rows_sum(const float *w, float *out, int cols, int rows) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= cols) return;
    float s = 0.0f;
    for (int r = 0; r < rows; r++) s += w[r * cols + x];
    out[x] = s;
}
'''


@pytest.fixture(scope="module")
def ptx():
    return parse_ptx(compile_to_ptx(SRC + PREFETCH_SRC).ptx)


def _marks(ptx, kernel, block, disabled=(), attribute="prefetch_ahead"):
    """The `attribute` marks of the kernel's barriers after the default pipeline."""
    lifted = lift_and_optimize(ptx, ptx.functions[kernel], PipelineOptions(disabled=frozenset(disabled)),
                               block)[0]
    return [op.attributes.get(attribute) for op in nested_ops(lifted.op)
            if op.name == "upir.barrier"], lifted


def test_marks_the_barriers_of_a_loop_streaming_its_own_rows(ptx):
    marks, lifted = _marks(ptx, "rows_min", (128, 1, 1), attribute="prefetch_next_block")
    # the loop's barriers (NVRTC may unroll it: every copy's); the one before it is in no loop
    assert marks[0] is None and len(marks) >= 3 and set(marks[1:]) == {1}
    text = print_op(lifted.op)
    assert "prefetch_next_block = 1" in text and "prefetch_ahead = 1" in text
    kc = KernelCodegen(ModuleCodegen(ptx), lifted, (128, 1, 1))
    assert kc.prefetches and all(kc.prefetch_advance(r) == 1 for r in kc.prefetches)


def _prefetch_calls(tmp_path, capsys, kernel, *options):
    """The llvm.prefetch calls of the kernel's raw LLVM IR (`cpuify llvm --raw`)."""
    from cpuify.cli.main import main
    src = tmp_path / "k.cu"
    src.write_text(SRC)
    assert main(["llvm", "--raw", "--block", "128", "--kernel", kernel, *options, str(src)]) == 0
    return [line for line in capsys.readouterr().out.splitlines()
            if "call" in line and "llvm.prefetch" in line]


def test_prefetches_the_next_block_into_l2(tmp_path, capsys):
    # (read, locality 2: prefetcht1) from the next block; 5 iterations ahead into L1 (3)
    # with the option off
    calls = _prefetch_calls(tmp_path, capsys, "rows_min")
    assert calls and all(c.rstrip().endswith("i32 0, i32 2, i32 1)") for c in calls), calls
    calls = _prefetch_calls(tmp_path, capsys, "rows_min",
                            "--disable-pass=stream-prefetch-distance")
    assert calls and all(c.rstrip().endswith("i32 0, i32 3, i32 1)") for c in calls), calls
    out = capsys.readouterr()
    from cpuify.cli.main import main
    src = tmp_path / "k.cu"
    assert main(["explain", "--block", "128", "--kernel", "rows_min", str(src)]) == 0
    assert "of its own iteration in the next block (blockIdx.x + 1), into L2" in \
        capsys.readouterr().out, out


def test_iterations_ahead_without_blockIdx_x(ptx):
    # the blocks of a 1 x n grid run blockIdx.y + 1 next: 5 iterations ahead as before
    marks, _ = _marks(ptx, "rows_min_y", (128, 1, 1))
    assert set(m for m in marks if m) == {5}
    marks, _ = _marks(ptx, "rows_min_y", (128, 1, 1), attribute="prefetch_next_block")
    assert not any(marks)


@pytest.mark.parametrize("kernel,block", [("tiled_mm", (16, 16, 1)), ("rows_gather", (128, 1, 1)),
                                          ("rows_volatile", (128, 1, 1)), ("rows_sum", (128, 1, 1))])
def test_leaves_shared_gathered_volatile_and_barrier_free_loops(ptx, kernel, block):
    marks, lifted = _marks(ptx, kernel, block)
    assert not any(marks)
    # the code plans the same prefetches as without the pass
    _, without = _marks(ptx, kernel, block, disabled=("stream-prefetch-distance",))
    plans = [KernelCodegen(ModuleCodegen(ptx), k, block) for k in (lifted, without)]
    assert [{r: kc.prefetch_advance(r) for r in kc.prefetches} for kc in plans][0] == \
        [{r: kc.prefetch_advance(r) for r in kc.prefetches} for kc in plans][1]


def test_no_marks_without_a_block_shape_or_when_disabled(ptx):
    marks, _ = _marks(ptx, "rows_min", None)
    assert not any(marks)
    marks, lifted = _marks(ptx, "rows_min", (128, 1, 1), disabled=("stream-prefetch-distance",))
    assert not any(marks)
    kc = KernelCodegen(ModuleCodegen(ptx), lifted, (128, 1, 1))
    assert kc.prefetches and all(kc.prefetch_advance(r) == 2 for r in kc.prefetches)


def test_runs_on_ir_text_with_its_option(ptx):
    # the IR the pipeline leaves without the pass, printed and parsed back, then the pass
    # alone with another distance
    _, lifted = _marks(ptx, "rows_min", (128, 1, 1), disabled=("stream-prefetch-distance",))
    kernel = parse_op(print_op(lifted.op))
    assert make_pass("stream-prefetch-distance{ahead=3,next_block=false}").run(kernel) >= 2
    barriers = [op for op in nested_ops(kernel) if op.name == "upir.barrier"]
    assert set(op.attributes.get("prefetch_ahead") for op in barriers) - {None} == {3}
    assert not any(op.attributes.get("prefetch_next_block") for op in barriers)
    assert make_pass("stream-prefetch-distance").run(kernel) == 0     # (marked already)
    # the default: the next block's lines of the segment's own iteration
    kernel = parse_op(print_op(lifted.op))
    assert make_pass("stream-prefetch-distance").run(kernel) >= 2
    barriers = [op for op in nested_ops(kernel) if op.name == "upir.barrier"]
    assert set(op.attributes.get("prefetch_next_block") for op in barriers) - {None} == {1}
    assert set(op.attributes.get("prefetch_ahead") for op in barriers) - {None} == {1}


@pytest.mark.parametrize("options", [(), ("--disable-pass=stream-prefetch-distance",)])
@pytest.mark.parametrize("cols,rows", [(1000, 9), (300, 2), (5000, 33)])
def test_rows_min_matches_numpy(options, cols, rows):
    # the last block's prefetches for blockIdx.x + 1 run past the array's end: never a fault
    w = np.random.default_rng(cols + rows).integers(0, 10, (rows, cols), dtype=np.int32)
    block = 128
    ref = w[0].astype(np.int64)
    for r in range(1, rows):
        m = ref.copy()
        for b0 in range(0, cols, block):            # neighbours within the block only
            seg = ref[b0:b0 + block]
            full = np.zeros(block, np.int64)
            full[:len(seg)] = seg
            west = np.concatenate([full[:1], full[:-1]])
            east = np.concatenate([full[1:], full[-1:]])
            m[b0:b0 + block] = np.minimum(full, np.minimum(west, east))[:len(seg)]
        ref = w[r] + m
    f = cpuify.RawModule(code=SRC, options=options).get_function("rows_min")
    for _ in range(2):         # the second launch runs the code specialized for the shape
        out = np.zeros(cols, np.int32)
        f(((cols + block - 1) // block,), (block,), (w, out, np.int32(cols), np.int32(rows)))
        np.testing.assert_array_equal(out, ref)


PYRAMID_SRC = r'''
// a shrinking pyramid of `steps` rows per launch in shared memory, a block-uniform break
// before the second barrier, neighbours clamped to the block's valid columns
extern "C" __global__ void pyramid_rows(int steps, const int *cost, const int *src, int *dst,
                                        int cols, int row0, int halo) {
    __shared__ int cur[128];
    __shared__ int nxt[128];
    int width = 128 - 2 * steps;
    int x0 = width * (int)blockIdx.x - halo;
    int t = threadIdx.x, x = x0 + t;
    int lo = x0 < 0 ? -x0 : 0;
    int hi = x0 + 127 > cols - 1 ? 127 - (x0 + 127 - (cols - 1)) : 127;
    int w = max(t - 1, lo), e = min(t + 1, hi);
    if (x >= 0 && x < cols) cur[t] = src[x];
    __syncthreads();
    bool done = false;
    for (int i = 0; i < steps; i++) {
        done = false;
        if (t >= i + 1 && t <= 126 - i && t >= lo && t <= hi) {
            done = true;
            nxt[t] = min(cur[t], min(cur[w], cur[e])) + cost[(row0 + i) * cols + x];
        }
        __syncthreads();
        if (i == steps - 1) break;
        if (done) cur[t] = nxt[t];
        __syncthreads();
    }
    if (done) dst[x] = nxt[t];
}
'''


@pytest.mark.parametrize("cols,rows,steps", [(1000, 25, 6), (300, 10, 4), (77, 5, 2)])
def test_pyramid_rows_match_numpy(cols, rows, steps):
    # its loop's barriers are marked (next block); launches of `steps` rows ping-pong
    # between two rows, each block computing 128 - 2 * steps columns of each
    kernel = parse_ptx(compile_to_ptx(PYRAMID_SRC).ptx)
    marks, _ = _marks(kernel, "pyramid_rows", (128, 1, 1), attribute="prefetch_next_block")
    assert 1 in marks
    w = np.random.default_rng(cols * rows).integers(0, 10, (rows, cols), dtype=np.int32)
    ref = w[0].copy()
    for r in range(1, rows):
        m = ref.copy()
        np.minimum(m[1:], ref[:-1], out=m[1:])
        np.minimum(m[:-1], ref[1:], out=m[:-1])
        ref = m + w[r]
    f = cpuify.RawModule(code=PYRAMID_SRC).get_function("pyramid_rows")
    bufs = [w[0].copy(), np.zeros(cols, np.int32)]
    cost = np.ascontiguousarray(w[1:])
    src = 0
    for t in range(0, rows - 1, steps):
        n = min(steps, rows - 1 - t)        # (the last launch may advance fewer rows)
        blocks = -(-cols // (128 - 2 * n))
        f((blocks,), (128,), (np.int32(n), cost, bufs[src], bufs[1 - src], np.int32(cols),
                              np.int32(t), np.int32(n)))
        src = 1 - src
    np.testing.assert_array_equal(bufs[src], ref)
