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
from cpuify.interp.machine import InterpModule
from cpuify.ir.parser import parse_op
from cpuify.ir.printer import print_op
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
// a loop nvcc leaves rolled, its lone sum adding one stored term: the read-back becomes
// one upir.in_order_sum per thread; `scale` makes subnormal terms and partial sums
#define ROLLED_SCALED_SUM float total = 0.0f; \
    _Pragma("unroll 1") for (int c = 0; c < cols; c++) { \
        const float e = in[c] * scale; out[c] = e; total += e; } \
    sums[row] = total;
extern "C" __global__ void rolled_sum(const float *__restrict__ x, float *__restrict__ y,
                                      float *__restrict__ sums, int rows, int cols,
                                      float scale) {
    ROW_START
    ROLLED_SCALED_SUM
}
// the same with an f64 conversion after it: f64 arithmetic keeps subnormals, so the
// kernel runs without the CPU's DAZ/FTZ and the sum's .ftz is done in code
extern "C" __global__ void rolled_sum_mixed(const float *__restrict__ x, float *__restrict__ y,
                                            float *__restrict__ sums, double *__restrict__ twice,
                                            int rows, int cols, float scale) {
    ROW_START
    ROLLED_SCALED_SUM
    twice[row] = (double)total * 2.0;
}
// every other thread leaves first (lanes off in the read-back's thread loop), and pairs of
// values stored per column, the sum adding the first (terms 8 bytes apart: a gather each)
extern "C" __global__ void rolled_pairs(const float *__restrict__ x, float *__restrict__ y,
                                        float *__restrict__ sums, int rows, int cols) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows || (row & 1)) return;
    const float *in = x + (size_t)row * cols;
    float *out = y + (size_t)row * 2 * cols;
    float total = 0.0f;
#pragma unroll 1
    for (int c = 0; c < cols; c++) {
        const float e = in[c] * 3.0f;
        out[2 * c] = e;
        out[2 * c + 1] = in[c] + 1.0f;
        total += e;
    }
    sums[row] = total;
}
extern "C" __global__ void rolled_sum_f64(const double *__restrict__ x, double *__restrict__ y,
                                          double *__restrict__ sums, int rows, int cols) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const double *in = x + (size_t)row * cols;
    double *out = y + (size_t)row * cols;
    double total = 0.0;
#pragma unroll 1
    for (int c = 0; c < cols; c++) {
        const double e = in[c] * in[c];
        out[c] = e;
        total += e;
    }
    sums[row] = total;
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
    done = split_in_order_sums(region, sum_op=False)        # (the read-back as a loop)
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


def _sum_ops(region):  # type: ignore[no-untyped-def]
    return [op for b in region.blocks for op in b.ops if op.name == "upir.in_order_sum"]


@pytest.mark.parametrize("kernel,t", [("rolled_sum", "f32"), ("rolled_sum_f64", "f64")])
def test_read_back_as_one_sum_op(ptx, kernel, t):
    """A lone sum of one stored term (a loop nvcc left rolled): the read-back is one
    `upir.in_order_sum` of the thread's stored run, alone between two soft barriers, and
    interchange-uniform-loops still takes the fallback's loop."""
    region = _region(ptx, kernel)
    (block,) = split_in_order_sums(region)
    (op,) = _sum_ops(region)
    assert op.parent is block and op.results[0].type == t
    assert op.attributes["step"] == (4 if t == "f32" else 8)
    assert ("ftz" in op.attributes["mods"]) == (t == "f32")        # (compiled with -ftz=true)
    names = [o.name for o in block.ops]
    assert names == ["upir.barrier", "upir.in_order_sum", "upir.barrier", "cf.br"]
    assert all(o.attributes.get("soft") and o.attributes.get(SUM_SPLIT) == RELOAD
               for o in block.ops if o.name == "upir.barrier")
    assert sorted(_kinds(region)) == sorted([TERMS, GUARD, RECOMPUTE])
    (interchanged,) = interchange_uniform_loops(region, min_ops=1)     # (a small loop)
    assert interchanged.terminator.attributes[SUM_SPLIT] == RECOMPUTE
    verify(region.parent)
    again = parse_op(print_op(region.parent))       # (the printed IR parses back)
    verify(again)
    assert len([o for o in again.walk() if o.name == "upir.in_order_sum"]) == 1


def test_sum_op_form_switched_off(ptx):
    region = _region(ptx, "rolled_sum")
    split_in_order_sums(region, sum_op=False)
    assert not _sum_ops(region)
    assert sorted(_kinds(region)) == sorted([TERMS, GUARD, RELOAD, RECOMPUTE])


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


# --- the read-back as upir.in_order_sum, end to end ------------------------------------------

#: the default pipeline with the read-back as an interchanged loop (the sum op off)
LOOP_READ_BACK = "--passes=" + ",".join(
    "split-in-order-sums{sum_op=false}" if p == "split-in-order-sums" else p
    for p in default_pipeline())
_TINY = np.float32(2.0 ** -126)


def _flush(v: np.ndarray, on: bool) -> np.ndarray:
    return np.where(np.abs(v) < _TINY, np.copysign(np.float32(0), v), v).astype(v.dtype) if on else v


def _in_order(e: np.ndarray, ftz: bool) -> np.ndarray:
    """Each row's terms added one after another in e's precision (PTX add, .ftz flushing
    both operands and the result)."""
    total = np.zeros(e.shape[0], e.dtype)
    with np.errstate(all="ignore"):
        for c in range(e.shape[1]):
            total = _flush((total + _flush(e[:, c], ftz)).astype(e.dtype), ftz)
    return total


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    keep = ~np.isnan(want)
    np.testing.assert_array_equal(got[keep].view(np.uint32 if got.dtype == np.float32 else np.uint64),
                                  want[keep].view(np.uint32 if want.dtype == np.float32 else np.uint64))


def _rolled_inputs(rows: int, cols: int, scale: float) -> np.ndarray:
    rng = np.random.default_rng(rows * 1000 + cols)
    x = rng.standard_normal((rows, cols), dtype=np.float32) + np.float32(0.5)
    if rows > 3 and cols > 2:
        x[1, 0], x[2, cols // 2], x[3, cols - 1] = np.inf, np.nan, -np.inf
        x[min(4, rows - 1), :2] = [np.inf, -np.inf]          # (inf + -inf: a NaN)
    return x


@pytest.fixture(scope="module")
def plain_ptx() -> str:
    """Without -ftz: the adds keep subnormals."""
    return compile_to_ptx(SRC).ptx


@pytest.mark.parametrize("rows,cols,block", [
    (1, 1, 128), (5, 15, 128), (15, 16, 128), (17, 17, 128), (37, 33, 32), (130, 784, 128),
    (300, 129, 128), (70, 64, 48)])
@pytest.mark.parametrize("kernel,ftz", [("rolled_sum", True), ("rolled_sum_mixed", True),
                                        ("rolled_sum", False)])
@pytest.mark.parametrize("scale", [1.0, 3e-38])        # (3e-38: subnormal partial sums)
def test_sum_op_equals_in_order_sums(ptx, plain_ptx, rows, cols, block, kernel, ftz, scale):
    """The sums read back by upir.in_order_sum (rows of threads transposed in registers, the
    last columns gathered, lanes off or counts apart one by one) are the in-order sums bit
    for bit: NumPy's, and the pipeline's with the read-back as an interchanged loop; rows
    not a multiple of the vector width, fewer rows than threads, NaN and infinities,
    subnormals flushed (-ftz, by the CPU or in code) or kept."""
    source = ptx if ftz else plain_ptx
    x = _rolled_inputs(rows, cols, scale)
    with np.errstate(all="ignore"):
        e = _flush((x * np.float32(scale)).astype(np.float32), ftz)
    want = _in_order(e, ftz)
    for options in ((), (LOOP_READ_BACK,)):
        f = cpuify.RawModule(ptx=source, options=options).get_function(kernel)
        for _ in range(3):          # the generic code, then the code for the block shape
            y = np.zeros_like(x)
            sums = np.full(rows, np.nan, np.float32)
            args = [x, y, sums] + ([np.zeros(rows)] if kernel == "rolled_sum_mixed" else [])
            f(((rows + block - 1) // block,), (block,),
              tuple(args + [np.int32(rows), np.int32(cols), np.float32(scale)]))
            _same_bits(y, e)
            _same_bits(sums, want)
            if kernel == "rolled_sum_mixed":
                _same_bits(args[3], want.astype(np.float64) * 2.0)


def test_sum_op_f64_and_interpreter(ptx):
    """f64 sums (vectors of 2, 4, 8 lanes) natively and in the reference interpreter on the
    IR after the pipeline (the op's own semantics there)."""
    rows, cols = 21, 35
    x = np.random.default_rng(3).standard_normal((rows, cols))
    x[2, 3] = np.nan
    want = _in_order(x * x, False)
    f = cpuify.RawModule(ptx=ptx).get_function("rolled_sum_f64")
    for _ in range(3):
        sums = np.full(rows, np.nan)
        y = np.zeros_like(x)
        f((1,), (32,), (x, y, sums, np.int32(rows), np.int32(cols)))
        _same_bits(sums, want)
    module = parse_ptx(ptx)
    for kernel, args in (
            ("rolled_sum_f64", lambda: [x, np.zeros_like(x), np.full(rows, np.nan)]),
            ("rolled_sum", lambda: [x.astype(np.float32), np.zeros(x.shape, np.float32),
                                    np.full(rows, np.nan, np.float32)])):
        op = lift_kernel(module, module.functions[kernel]).op
        run_pipeline(op, PipelineOptions(passes=tuple(default_pipeline())), out=io.StringIO())
        assert [o for o in op.walk() if o.name == "upir.in_order_sum"]
        interp = InterpModule(ptx)
        interp.use_ir(kernel, parse_op(print_op(op)))
        a = args()
        extra = [np.float32(1.0)] if kernel == "rolled_sum" else []
        interp.launch(kernel, (1,), (32,), a + [np.int32(rows), np.int32(cols)] + extra)
        e = a[0] * a[0] if kernel == "rolled_sum_f64" else a[0]
        _same_bits(a[2], _in_order(e, kernel == "rolled_sum"))


@pytest.mark.parametrize("rows,cols", [(7, 5), (40, 37), (130, 64)])
def test_sum_op_strided_terms_and_lanes_off(ptx, rows, cols):
    """Terms 8 bytes apart (the gather path) and odd threads gone before the read-back."""
    region = _region(ptx, "rolled_pairs")
    split_in_order_sums(region)
    (op,) = _sum_ops(region)
    assert op.attributes["step"] == 8
    x = _rolled_inputs(rows, cols, 1.0)
    e = (x * np.float32(3)).astype(np.float32)
    want = _in_order(e, True)
    f = cpuify.RawModule(ptx=ptx).get_function("rolled_pairs")
    for _ in range(3):
        y = np.zeros((rows, 2 * cols), np.float32)
        sums = np.full(rows, -1, np.float32)
        f(((rows + 31) // 32,), (32,), (x, y, sums, np.int32(rows), np.int32(cols)))
        _same_bits(sums[::2], want[::2])
        np.testing.assert_array_equal(sums[1::2], -1)
        _same_bits(y[::2, ::2], e[::2])
