"""Loop order chosen from the access analysis (analysis/loop_order.py, the `by_access`
decision of interchange-uniform-loops): a block-uniform loop whose accesses are contiguous
within a thread and strided across threads, carrying only min/max reductions, stays in each
thread (its own loop vectorizes with contiguous loads); a loop reading consecutive elements
across threads, or carrying an in-order float sum, is interchanged with the thread loop.

IR-level checks of the decision and of the access classification, the printed IR after the
pass, the LLVM code (vector loads and a vector max reduction, no gathers), and results
checked bit for bit against the reference interpreter and against NumPy."""

from __future__ import annotations

import contextlib
import io
import re

import numpy as np
import pytest

import cpuify
from cpuify.analysis.cfg import incoming_values
from cpuify.analysis.loop_order import (
    CONSECUTIVE,
    STRIDED,
    SYMBOLIC,
    UNIFORM,
    loop_order,
    tid_x_stride,
)
from cpuify.analysis.uniformity import uniform_values
from cpuify.cli.main import main as cli_main
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp import interpret_kernel
from cpuify.ir.core import OpResult, dominators
from cpuify.ir.printer import print_op
from cpuify.ir.structure import block_body
from cpuify.lifting import lift_kernel
from cpuify.transforms.interchange import (
    INTERCHANGED,
    LOOP_ACCESSES,
    LOOP_ORDER,
    PER_THREAD,
    _loops,
    interchange_uniform_loops,
)
from cpuify.transforms.pass_manager import (
    PipelineOptions,
    default_pipeline,
    run_pipeline,
)

SRC = r'''
// a row per thread: a scaled row maximum (max reduction only) -> stays in each thread
extern "C" __global__ void row_max(const float *__restrict__ x, const float *__restrict__ w,
                                   float *__restrict__ out, int rows, int cols, float s) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float *in = x + (size_t)row * cols;
    float m = -3.402823466e38f;
    for (int c = 0; c < cols; c++) {
        const float v = in[c];
        m = fmaxf(m, fabsf(v) * w[c] + v * v);
    }
    out[row] = m * s;
}
// a column per thread, the same computation -> interchanged (consecutive across threads)
extern "C" __global__ void col_max(const float *__restrict__ x, const float *__restrict__ w,
                                   float *__restrict__ out, int rows, int cols, float s) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= cols) return;
    float m = -3.402823466e38f;
    for (int r = 0; r < rows; r++) {
        const float v = x[(size_t)r * cols + col];
        m = fmaxf(m, fabsf(v) * w[r] + v * v);
    }
    out[col] = m * s;
}
// a row per thread with an in-order float sum -> interchanged (only the threads are lanes)
extern "C" __global__ void row_sum(const float *__restrict__ x, const float *__restrict__ w,
                                   float *__restrict__ out, int rows, int cols, float s) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float *in = x + (size_t)row * cols;
    float t = 0.0f;
    for (int c = 0; c < cols; c++) {
        const float v = in[c];
        t += fabsf(v) * w[c] + v * v;
    }
    out[row] = t * s;
}
// the row softmax of the benchmark suite: one thread per row, max, exp-sum, divide
extern "C" __global__ void softmax_rows(const float *__restrict__ x, float *__restrict__ y,
                                        int rows, int cols) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float *in = x + (size_t)row * cols;
    float *out = y + (size_t)row * cols;
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
// a matrix product on 2-D blocks: a[row][k] the same along x, b[k][col] consecutive
extern "C" __global__ void matmul(const float *a, const float *b, float *c, int n) {
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.0f;
    for (int k = 0; k < n; k++) acc += a[row * n + k] * b[k * n + col];
    c[row * n + col] = acc;
}
// a column per thread that carries no float (PolyBench gramschmidt's update: r[k][j] read
// again each iteration, a[i][j] updated) -> interchanged: each thread's own loop would
// touch a cache line of its own per iteration
extern "C" __global__ void col_update(float *a, const float *q, const float *r, int n, int k) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j > k && j < n) {
        for (int i = 0; i < n; i++) a[i * n + j] -= q[i * n + k] * r[k * n + j];
    }
}
// the same with a[i][j] walked along the row of each thread -> not a column: left alone
extern "C" __global__ void row_update(float *a, const float *q, int n, int k) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < n) {
        for (int i = 0; i < n; i++) a[j * n + i] -= q[i] * a[j * n + k];
    }
}
'''


@pytest.fixture(scope="module")
def ptx() -> str:
    # -ftz=true: as RawModule compiles (every CuPy-style compile)
    return compile_to_ptx(SRC, options=("-ftz=true",)).ptx


def _region(ptx: str, kernel: str):  # type: ignore[no-untyped-def]
    module = parse_ptx(ptx)
    return block_body(lift_kernel(module, module.functions[kernel]).op)


def _decisions(region) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    return [(b.terminator.attributes[LOOP_ORDER], b.terminator.attributes[LOOP_ACCESSES])
            for b in region.blocks
            if b.terminator is not None and LOOP_ORDER in b.terminator.attributes]


@pytest.mark.parametrize("kernel,interchanged,order,why", [
    ("row_max", 0, PER_THREAD, "strided across threads, contiguous in the thread"),
    ("col_max", 1, INTERCHANGED, "consecutive across threads"),
    ("row_sum", 1, INTERCHANGED, "in-order float value"),
    ("col_update", 1, INTERCHANGED, "consecutive across threads, not contiguous in the thread"),
])
def test_which_loop_order_is_chosen(ptx, kernel, interchanged, order, why):
    region = _region(ptx, kernel)
    assert len(interchange_uniform_loops(region)) == interchanged
    decisions = _decisions(region)
    assert decisions and all(o == order for o, _ in decisions)
    assert all(why in text for _, text in decisions)


def test_without_the_access_analysis_the_row_loop_is_interchanged(ptx):
    region = _region(ptx, "row_max")
    assert len(interchange_uniform_loops(region, by_access=False)) == 1
    assert {o for o, _ in _decisions(region)} == {INTERCHANGED}


def test_access_classification_of_the_row_and_column_loops(ptx):
    for kernel, expect in (("row_max", {STRIDED, UNIFORM}), ("col_max", {CONSECUTIVE, UNIFORM})):
        region = _region(ptx, kernel)
        uniform = uniform_values(region)
        loops = _loops(region, dominators(region))
        # the loop with the memory accesses (nvcc's 4-times unrolled main loop)
        header, body = max(loops.items(), key=lambda hb: sum(len(b.ops) for b in hb[1]))
        order = loop_order(header, body, uniform)
        assert {a.across for a in order.accesses} == expect, kernel
        assert order.carried == ("min/max",)
        steps = {a.within_step for a in order.accesses}
        if kernel == "row_max":
            # x[row * cols + c] and w[c]: 4 columns of 4 bytes per iteration in each thread
            assert steps == {16}
            assert order.contiguous_within_thread() and order.reorderable()
        else:
            assert not order.contiguous_within_thread()
        # the thread index of a row: (blockIdx.x * blockDim.x + threadIdx.x) * cols elements
        # apart, a block-uniform amount
        if kernel == "row_max":
            starts = [v for arg in header.args for v in incoming_values(region).get(arg, [])
                      if arg.type == "i64" and isinstance(v, OpResult) and v.op.parent not in body]
            assert any(tid_x_stride(v, uniform, {}) == SYMBOLIC for v in starts)


#: the default pipeline with nvcc's unrolled row loops kept (re-rolled, a row loop is too
#: small for interchange-uniform-loops, which then records no decision: it stays in the
#: thread either way)
UNROLLED = tuple("reroll-loops{per_thread=false}" if p == "reroll-loops" else p
                 for p in default_pipeline())


def test_printed_ir_after_the_pass_records_the_decision(ptx):
    module = parse_ptx(ptx)
    op = lift_kernel(module, module.functions["row_max"]).op
    out = io.StringIO()
    run_pipeline(op, PipelineOptions(passes=UNROLLED, verify_each=True,
                                     print_after=frozenset({"interchange-uniform-loops"})), out=out)
    text = out.getvalue()
    assert "after interchange-uniform-loops" in text
    assert 'loop_order = "per-thread"' in text
    assert '"upir.barrier"() {soft = true' not in text        # no soft barrier inserted
    # and the printed IR parses back with the decision kept (print_op of the final IR)
    assert 'loop_order = "per-thread"' in print_op(op)


def _cli(*args: str) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli_main(list(args)) in (0, None)
    return buf.getvalue()


def test_explain_says_why(ptx, tmp_path):
    path = tmp_path / "rows.ptx"
    path.write_text(ptx)
    text = _cli("explain", str(path), "--kernel", "row_max", "--block", "128",
                "--passes", ",".join(UNROLLED))
    assert "kept in each thread, its own loop innermost" in text
    text = _cli("explain", str(path), "--kernel", "softmax_rows", "--block", "128")
    assert "a float sum carried: its additions stay in order" in text


def test_the_row_loop_vectorizes_without_gathers(ptx, tmp_path):
    """LLVM's loop vectorizer takes the thread's own loop (vector loads, a vector max
    reduction); interchanged, the same loop reads each column with gathers."""
    path = tmp_path / "rows.ptx"
    path.write_text(ptx)
    kept = _cli("llvm", str(path), "--kernel", "row_max", "--block", "128")
    assert re.search(r"call [^\n]*@llvm\.maximum(num)?\.v\d+f32", kept)
    assert not re.search(r"call [^\n]*@llvm\.masked\.gather", kept)
    explain = _cli("explain", str(path), "--kernel", "row_max", "--block", "128")
    assert re.search(r"LLVM: [1-9]\d* loop\(s\) vectorized", explain)
    old = ",".join(p + "{by_access=false}" if p == "interchange-uniform-loops" else p
                   for p in UNROLLED)
    interchanged = _cli("llvm", str(path), "--kernel", "row_max", "--block", "128",
                        "--passes", old)
    assert re.search(r"call [^\n]*@llvm\.masked\.gather", interchanged)


def _row_max_ref(x: np.ndarray, w: np.ndarray, s: float) -> np.ndarray:
    v = x.astype(np.float32)
    return (np.max(np.abs(v) * w + v * v, axis=1) * np.float32(s)).astype(np.float32)


@pytest.mark.parametrize("rows,cols", [(1, 1), (37, 3), (200, 50), (300, 784)])
def test_row_max_matches_numpy_and_interpreter(ptx, rows, cols):
    rng = np.random.default_rng(rows * 1000 + cols)
    x = (rng.standard_normal((rows, cols), dtype=np.float32) * 3).astype(np.float32)
    w = rng.random(cols, dtype=np.float32)
    x[0, 0] = -0.0
    f = cpuify.RawModule(ptx=ptx).get_function("row_max")
    grid = ((rows + 127) // 128,)
    for _ in range(3):              # the generic code, then the code for the block shape
        out = np.full(rows, np.nan, np.float32)
        f(grid, (128,), (x, w, out, np.int32(rows), np.int32(cols), np.float32(0.5)))
        # fmaxf, |v| * w + v * v (fused or not): NumPy's float32 within an ulp or two
        np.testing.assert_allclose(out, _row_max_ref(x, w, 0.5), rtol=1e-6)
    small = min(rows, 40)
    ref = np.full(small, np.nan, np.float32)
    interpret_kernel(ptx, "row_max", (1,), (64,),
                     (x[:small].copy(), w, ref, np.int32(small), np.int32(cols), np.float32(0.5)))
    mine = np.full(small, np.nan, np.float32)
    f((1,), (64,), (x[:small].copy(), w, mine, np.int32(small), np.int32(cols), np.float32(0.5)))
    np.testing.assert_array_equal(mine.view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("rows,cols", [(20, 37), (130, 784)])
def test_row_softmax_matches_numpy_and_interpreter(ptx, rows, cols):
    rng = np.random.default_rng(cols)
    x = (rng.standard_normal((rows, cols), dtype=np.float32) * 3).astype(np.float32)
    f = cpuify.RawModule(ptx=ptx).get_function("softmax_rows")
    grid = ((rows + 127) // 128,)
    z = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    ref = z / z.sum(1, keepdims=True)
    for _ in range(3):
        y = np.zeros_like(x)
        f(grid, (128,), (x, y, np.int32(rows), np.int32(cols)))
        np.testing.assert_allclose(y, ref, rtol=2e-5, atol=1e-12)
    small = min(rows, 24)
    expect = np.zeros((small, cols), np.float32)
    interpret_kernel(ptx, "softmax_rows", (1,), (32,),
                     (x[:small].copy(), expect, np.int32(small), np.int32(cols)))
    got = np.zeros((small, cols), np.float32)
    f((1,), (32,), (x[:small].copy(), got, np.int32(small), np.int32(cols)))
    # expf is nvcc's ex2.approx sequence: the interpreter's ex2.approx and the compiled one
    # may differ in the last bit (both within PTX's 2 ulp), which the sum and the division
    # carry into a few ulps; every other operation is exact
    np.testing.assert_allclose(got, expect, rtol=4e-7 * cols ** 0.5, atol=0)


def test_access_classification_through_products_of_the_thread_index(ptx):
    """`a[row * n + k]` (row from threadIdx.y: the same along x, 4 bytes per iteration)
    and `b[k * n + col]` (consecutive along x, n elements per iteration: no constant step)
    are read through products with a block-uniform `n`; the loop carries an in-order sum."""
    region = _region(ptx, "matmul")
    uniform = uniform_values(region)
    loops = _loops(region, dominators(region))
    header, body = max(loops.items(), key=lambda hb: sum(len(b.ops) for b in hb[1]))
    order = loop_order(header, body, uniform)
    kinds = {(a.across, a.within_step) for a in order.accesses}
    assert (UNIFORM, 16) in kinds or (UNIFORM, 4) in kinds
    assert (CONSECUTIVE, None) in kinds
    assert not order.other and order.carried == ("in order",)
    assert not order.contiguous_within_thread()


def test_a_loop_carrying_no_float_is_interchanged_only_for_a_column(ptx):
    """col_update carries no float value (the old rule's only trigger): the access analysis
    interchanges it because every access is consecutive across threads or the same in all;
    row_update, contiguous in each thread, keeps its order and records no decision; without
    the access analysis neither is touched."""
    region = _region(ptx, "row_update")
    assert interchange_uniform_loops(region) == [] and _decisions(region) == []
    for name in ("col_update", "row_update"):
        assert interchange_uniform_loops(_region(ptx, name), by_access=False) == []


@pytest.mark.parametrize("n,k", [(40, 3), (300, 17), (300, 290)])
def test_column_update_matches_numpy_and_interpreter(ptx, n, k):
    rng = np.random.default_rng(n + k)
    a0 = rng.standard_normal((n, n), dtype=np.float32)
    q = rng.standard_normal((n, n), dtype=np.float32)
    r = rng.standard_normal((n, n), dtype=np.float32)
    f = cpuify.RawModule(ptx=ptx).get_function("col_update")
    grid = ((n + 127) // 128,)
    want = a0.copy()
    want[:, k + 1:] = a0[:, k + 1:] - q[:, k:k + 1] * r[k, k + 1:]      # (-ftz: no subnormals here)
    for _ in range(3):              # the generic code, then the code for the block shape
        a = a0.copy()
        f(grid, (128,), (a, q, r, np.int32(n), np.int32(k)))
        # a - q * r, the product rounded or fused into the subtraction: within an ulp or two
        np.testing.assert_allclose(a, want, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(a[:, :k + 1], a0[:, :k + 1])
    ref = a0.copy()
    interpret_kernel(ptx, "col_update", grid, (128,), (ref, q, r, np.int32(n), np.int32(k)))
    np.testing.assert_array_equal(a.view(np.uint32), ref.view(np.uint32))
