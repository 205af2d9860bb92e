"""split-in-order-sums: a block-uniform loop whose in-order float sum adds values the loop
stores, contiguous within a thread (the naive row softmax's `out[c] = e; total += e`), is
split into the elementwise loop (kept in each thread) and the sum over the stored terms
read back (interchanged with the thread loop), behind a run-time guard that the threads'
stores do not overlap (else each thread recomputes the terms).

IR-level checks of where the pass fires and where it must not, the printed IR, and results
checked bit for bit: against a sequential float32 sum in NumPy, against the pipeline
without the pass, and on launches where the guard must send the threads to the fallback."""

from __future__ import annotations

import io

import numpy as np
import pytest

import cpuify
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.ir.structure import block_body
from cpuify.ir.verifier import verify
from cpuify.lifting import lift_kernel
from cpuify.transforms.interchange import interchange_uniform_loops
from cpuify.transforms.pass_manager import PipelineOptions, default_pipeline, run_pipeline
from cpuify.transforms.sum_split import (
    GUARD, RECOMPUTE, RELOAD, SUM_SPLIT, TERMS, split_in_order_sums,
)

SRC = r'''
#define ROW_START const int row = blockIdx.x * blockDim.x + threadIdx.x; \
    if (row >= rows) return; \
    const float *in = x + (size_t)row * cols; float *out = y + (size_t)row * cols;

// the suite's row softmax: max, sum of stored exponentials, divide -> split
extern "C" __global__ void softmax_rows(const float *__restrict__ x, float *__restrict__ y,
                                        int rows, int cols) {
    ROW_START
    float row_max = -3.402823466e38f;
    for (int c = 0; c < cols; c++) row_max = fmaxf(row_max, in[c]);
    float total = 0.0f;
    for (int c = 0; c < cols; c++) {
        const float e = expf(in[c] - row_max);
        out[c] = e;
        total += e;
    }
    for (int c = 0; c < cols; c++) out[c] = out[c] / total;
}
// stored squares summed in order (NumPy computes the same bits) -> split
extern "C" __global__ void square_sum(const float *__restrict__ x, float *__restrict__ y,
                                      float *__restrict__ sums, int rows, int cols) {
    ROW_START
    float total = 0.0f;
    for (int c = 0; c < cols; c++) {
        const float e = __fadd_rn(__fmul_rn(in[c], in[c]), 0.5f * in[c]);  // (no fma)
        out[c] = e;
        total += e;
    }
    sums[row] = total;
}
// the terms are not stored: nothing to read back -> not split
extern "C" __global__ void unstored(const float *__restrict__ x, float *__restrict__ y,
                                    float *__restrict__ sums, int rows, int cols) {
    ROW_START
    float total = 0.0f;
    for (int c = 0; c < cols; c++) total += expf(in[c]) * in[c] + 1.0f;
    sums[row] = total + out[0];
}
// what is stored is not the term -> not split
extern "C" __global__ void other_value(const float *__restrict__ x, float *__restrict__ y,
                                       float *__restrict__ sums, int rows, int cols) {
    ROW_START
    float total = 0.0f;
    for (int c = 0; c < cols; c++) {
        const float e = expf(in[c]);
        out[c] = e * 3.0f;
        total += e;
    }
    sums[row] = total;
}
// the terms depend on another row of y, which the neighbouring thread writes (a load that
// is not read-only) -> not split
extern "C" __global__ void next_row(const float *__restrict__ x, float *y,
                                    float *__restrict__ sums, int rows, int cols) {
    ROW_START
    const float *below = y + (size_t)(row + 1) * cols;
    float total = 0.0f;
    for (int c = 0; c < cols; c++) {
        const float e = expf(in[c]);
        out[c] = e;
        total += e * below[c];
    }
    sums[row] = total;
}
// a column per thread (consecutive across threads) -> not split, interchanged as before
extern "C" __global__ void column(const float *__restrict__ x, float *__restrict__ y,
                                  float *__restrict__ sums, int rows, int cols) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= cols) return;
    float total = 0.0f;
    for (int r = 0; r < rows; r++) {
        const float e = expf(x[(size_t)r * cols + col]);
        y[(size_t)r * cols + col] = e;
        total += e;
    }
    sums[col] = total;
}
// rows `stride` floats apart, `cols` long: overlapping rows when stride < cols (the guard
// must send the threads to the fallback; what y holds there is a race, the sums are not)
extern "C" __global__ void strided_rows(const float *__restrict__ x, float *__restrict__ y,
                                        float *__restrict__ sums, int rows, int cols,
                                        int stride) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float *in = x + (size_t)row * cols;
    float *out = y + (size_t)row * stride;
    float total = 0.0f;
    for (int c = 0; c < cols; c++) {
        const float e = __fadd_rn(__fmul_rn(in[c], in[c]), 0.5f * in[c]);  // (no fma)
        out[c] = e;
        total += e;
    }
    sums[row] = total;
}
'''


@pytest.fixture(scope="module")
def ptx() -> str:
    return compile_to_ptx(SRC, options=("-ftz=true",)).ptx


def _region(ptx: str, kernel: str):  # type: ignore[no-untyped-def]
    module = parse_ptx(ptx)
    return block_body(lift_kernel(module, module.functions[kernel]).op)


def _kinds(region) -> list[str]:  # type: ignore[no-untyped-def]
    return [b.terminator.attributes[SUM_SPLIT] for b in region.blocks
            if b.terminator is not None and SUM_SPLIT in b.terminator.attributes]


@pytest.mark.parametrize("kernel,loops", [
    ("softmax_rows", 2),        # nvcc's 4-times unrolled loop and its remainder loop
    ("square_sum", 2),
    ("strided_rows", 2),
    ("unstored", 0), ("other_value", 0), ("next_row", 0), ("column", 0),
])
def test_where_the_pass_fires(ptx, kernel, loops):
    region = _region(ptx, kernel)
    before = interchange_uniform_loops(_region(ptx, kernel))
    done = split_in_order_sums(region)
    assert len(done) == loops
    if not loops:
        assert _kinds(region) == []
        return
    assert sorted(_kinds(region)) == sorted([TERMS, GUARD, RELOAD, RECOMPUTE] * loops)
    # the reload loops, small as they are, are interchanged; the elementwise loops stay in
    # each thread (the fallback's, as before the split, when they are large enough)
    interchanged = interchange_uniform_loops(region)
    assert set(done) <= set(interchanged)
    terms = [b for b in region.blocks if b.terminator is not None and
             b.terminator.attributes.get(SUM_SPLIT) == TERMS]
    assert len(terms) == loops and not set(terms) & set(interchanged)
    assert 1 <= len(before) <= loops        # (without the split: the whole big ones were)
    for header in done:
        loads = [op for op in header.ops if op.name == "ptx.ld"]
        assert loads and all("nc" not in op.attributes["mods"] for op in loads)
        assert not any(op.name in ("ptx.st", "ptx.ex2") for op in header.ops)


def test_printed_ir_after_the_pass(ptx):
    module = parse_ptx(ptx)
    op = lift_kernel(module, module.functions["softmax_rows"]).op
    out = io.StringIO()
    run_pipeline(op, PipelineOptions(passes=tuple(default_pipeline()), verify_each=True,
                                     print_after=frozenset({"split-in-order-sums"})), out=out)
    text = out.getvalue()
    for kind in (TERMS, RELOAD, RECOMPUTE, GUARD):
        assert f'sum_split = "{kind}"' in text
    assert "uniform_condition = true" in text
    verify(op)


def _launch(ptx: str, kernel: str, args: tuple, rows: int, block: tuple = (128,), options=()):  # type: ignore[no-untyped-def]
    f = cpuify.RawModule(ptx=ptx, options=options).get_function(kernel)
    grid = ((rows + block[0] - 1) // block[0],)
    f(grid, block, args)


@pytest.mark.parametrize("rows,cols", [(5, 0), (1, 1), (37, 3), (130, 784), (300, 129)])
def test_sums_equal_sequential_float32_sums(ptx, rows, cols):
    """Each thread adds its terms in order: NumPy's float32 sum, column after column."""
    rng = np.random.default_rng(rows + cols)
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    e = x * x + np.float32(0.5) * x
    want = np.zeros(rows, np.float32)
    for c in range(cols):
        want = (want + e[:, c]).astype(np.float32)
    for _ in range(3):          # the generic code, then the code for the block shape
        y = np.zeros_like(x)
        sums = np.full(rows, np.nan, np.float32)
        _launch(ptx, "square_sum", (x, y, sums, np.int32(rows), np.int32(cols)), rows)
        np.testing.assert_array_equal(y, e)
        np.testing.assert_array_equal(sums.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("rows,cols", [(20, 37), (130, 784)])
def test_softmax_bit_equal_without_the_pass(ptx, rows, cols):
    rng = np.random.default_rng(cols)
    x = rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(3)
    got = {}
    for label, options in (("split", ()), ("whole", ("--disable-pass=split-in-order-sums",))):
        for _ in range(3):
            y = np.zeros_like(x)
            _launch(ptx, "softmax_rows", (x, y, np.int32(rows), np.int32(cols)), rows,
                    options=options)
        got[label] = y
    np.testing.assert_array_equal(got["split"].view(np.uint32), got["whole"].view(np.uint32))


@pytest.mark.parametrize("stride,block", [
    (20, (64,)),                # rows overlap: the guard fails, the terms are recomputed
    (64, (64,)),                # rows apart: the stored terms read back
    (64, (32, 2)),              # a 2-D block: the guard fails
])
def test_the_guard(ptx, stride, block):
    rows, cols = 100, 64
    rng = np.random.default_rng(stride)
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    e = x * x + np.float32(0.5) * x
    want = np.zeros(rows, np.float32)
    for c in range(cols):
        want = (want + e[:, c]).astype(np.float32)
    threads = block[0] * (block[1] if len(block) > 1 else 1)
    for _ in range(3):
        y = np.zeros(rows * stride + cols, np.float32)
        sums = np.full(rows, np.nan, np.float32)
        f = cpuify.RawModule(ptx=ptx).get_function("strided_rows")
        f(((rows + threads - 1) // threads,), block,
          (x, y, sums, np.int32(rows), np.int32(cols), np.int32(stride)))
        # (a 2-D block: threads (x, 0) and (x, 1) run the same row; the rows covered are
        # the grid's blocks times blockDim.x)
        covered = min(rows, (rows + threads - 1) // threads * block[0])
        np.testing.assert_array_equal(sums[:covered].view(np.uint32),
                                      want[:covered].view(np.uint32))
