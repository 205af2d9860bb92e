"""reroll-loops on a thread's own step-1 loop: nvcc unrolls `for (c = c0; c < n; c++)` four
times with a remainder loop (the unrolled loop first, or the remainder first when c0 is not
a constant); where the loop walks memory contiguous within the thread (a row per thread,
the naive row softmax) the pass puts the simple loop in their place.  nvcc's own entry test
(`n < 1`, `n <= c0`) proves `c0 < n`, and a step of 1 cannot wrap: no guard, no fallback.

IR in / IR out (where it fires, where it must not: copies that differ, additions of a
carried sum regrouped, a later copy's load moved above an earlier copy's store, a column
per thread, a value nvcc forwards from one copy's store to the next), and results bit for
bit: against NumPy with sequential float32 sums, against the pipeline without the pass and
against the reference interpreter on the lifted IR."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.analysis.unrolled_loops import match_unrolled_loop
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp.machine import InterpModule
from cpuify.ir.core import Operation, predecessors
from cpuify.ir.parser import parse_op
from cpuify.ir.printer import print_op
from cpuify.ir.structure import block_body
from cpuify.ir.structured import lower_structured_control_flow
from cpuify.ir.verifier import verify
from cpuify.lifting import lift_kernel
from cpuify.transforms.pass_manager import PipelineOptions, default_pipeline, run_pipeline
from cpuify.transforms.reroll import REROLLED

SRC = r'''
#define ROW_START const int row = blockIdx.x * blockDim.x + threadIdx.x; \
    if (row >= rows) return; \
    const float *in = x + (size_t)row * cols; float *out = y + (size_t)row * cols;

// the suite's row softmax: three step-1 loops, each unrolled 4x, the unrolled loop first
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
// the same loops with `in[c] - max` as the term: NumPy computes the same bits
extern "C" __global__ void shifted_rows(const float *__restrict__ x, float *__restrict__ y,
                                        int rows, int cols) {
    ROW_START
    float row_max = -3.402823466e38f;
    for (int c = 0; c < cols; c++) row_max = fmaxf(row_max, in[c]);
    float total = 0.0f;
    for (int c = 0; c < cols; c++) {
        const float e = in[c] - row_max;
        out[c] = e;
        total += e;
    }
    for (int c = 0; c < cols; c++) out[c] = out[c] / total;
}
// a start from a parameter: nvcc puts the remainder loop first; stored terms summed (the
// unrolled loop reads a pointer computed from where the remainder loop stopped: not proven)
extern "C" __global__ void row_sum_from(const float *__restrict__ x, float *__restrict__ y,
                                        float *__restrict__ sums, int rows, int cols,
                                        int from) {
    ROW_START
    float acc = 0.0f;
    for (int c = from; c < cols; c++) { const float e = in[c] * 0.5f; out[c] = e; acc += e; }
    sums[row] = acc;
}
// a start from a parameter, a running max: the remainder-first pair, re-rolled
extern "C" __global__ void row_max_from(const float *__restrict__ x, float *__restrict__ out,
                                        int rows, int cols, int from) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float *in = x + (size_t)row * cols;
    float m = -3.402823466e38f;
    for (int c = from; c < cols; c++) m = fmaxf(m, in[c] * 0.5f);
    out[row] = m;
}
// an in-order sum whose terms are not stored: split-in-order-sums leaves it, and re-rolled
// it would be too small to interchange (kept in each thread: 3x slower) -> left unrolled
extern "C" __global__ void row_sum_unstored(const float *x, float *sums, int rows, int cols,
                                            int from) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float *in = x + (size_t)row * cols;
    float acc = 0.0f;
    for (int c = from; c < cols; c++) acc += in[c];
    sums[row] = acc;
}
// a column per thread (consecutive across threads): the interchange's loop, left unrolled
extern "C" __global__ void column_sum(const float *__restrict__ x, float *__restrict__ sums,
                                      int rows, int cols) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= cols) return;
    float acc = 0.0f;
    for (int r = 0; r < rows; r++) acc += x[(size_t)r * cols + col];
    sums[col] = acc;
}
// the same weights read by every thread (uniform across threads): the interchange's loop
extern "C" __global__ void weighted(const float *__restrict__ w, const float *__restrict__ x,
                                    float *__restrict__ out, int n, int k) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float xi = x[i];
    float acc = 0.0f;
    for (int c = 0; c < k; c++) acc += w[c] * xi;
    out[i] = acc;
}
// each element from the previous one: nvcc forwards the stored value to the next copy
extern "C" __global__ void row_chain(float *y, int rows, int cols) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    float *r = y + (size_t)row * cols;
    for (int c = 0; c + 1 < cols; c++) r[c + 1] = r[c] * 0.5f + r[c + 1];
}
// one row loop alone: after re-rolling, a loop whose pointer starts per thread and moves by
// 4 bytes, thread-strided by its pointer but no grid-stride loop
extern "C" __global__ void row_max(const float *__restrict__ x, float *__restrict__ out,
                                   int rows, int cols) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float *in = x + (size_t)row * cols;
    float m = -3.402823466e38f;
    for (int c = 0; c < cols; c++) m = fmaxf(m, in[c]);
    out[row] = m;
}
// not unrolled: nothing to re-roll
extern "C" __global__ void row_once(const float *__restrict__ x, float *__restrict__ y,
                                    int rows, int cols) {
    ROW_START
#pragma unroll 1
    for (int c = 0; c < cols; c++) out[c] = 2.0f * in[c];
}
'''

UPTO = default_pipeline()[:default_pipeline().index("reroll-loops")]


@pytest.fixture(scope="module")
def ptx() -> str:
    return compile_to_ptx(SRC, filename="reroll_rows.cu").ptx


def _before_reroll(ptx: str, name: str) -> Operation:
    """The kernel as reroll-loops sees it in the default pipeline."""
    module = parse_ptx(ptx)
    kernel = lift_kernel(module, module.functions[name]).op
    run_pipeline(kernel, PipelineOptions(passes=tuple(UPTO)))
    # (the pipeline hands on structured control flow; reroll-loops works on the CFG, which
    # the pass manager lowers for it)
    lower_structured_control_flow(kernel)
    return kernel


def _reroll(kernel: Operation, spec: str = "reroll-loops") -> int:
    return run_pipeline(kernel, PipelineOptions(passes=(spec,), verify_each=True)
                        ).counts["reroll-loops"]


def _loops(kernel: Operation) -> list:  # type: ignore[type-arg]
    return [b for b in block_body(kernel).blocks if b in b.successors]


@pytest.mark.parametrize("name,fires", [("softmax_rows", 3), ("shifted_rows", 3),
                                        ("row_sum_from", 0), ("row_max_from", 1),
                                        ("row_sum_unstored", 0),
                                        ("column_sum", 0),
                                        ("weighted", 0), ("row_chain", 0), ("row_once", 0),
                                        ("row_max", 1)])
def test_which_loops_are_rerolled(ptx: str, name: str, fires: int) -> None:
    """Each of the softmax's three loops (a max, a stored sum, a division in place) and a
    remainder-first pair with a start from a parameter; not a column per thread, weights
    every thread reads, a loop whose stored value nvcc forwards to the next copy, a loop
    nvcc did not unroll."""
    kernel = _before_reroll(ptx, name)
    before = print_op(kernel)
    loops = len(_loops(kernel))
    assert _reroll(kernel) == fires
    text = print_op(kernel)
    if not fires:
        assert text == before
        return
    # one simple loop per unrolled pair, nothing kept behind a guard (the entry test proves
    # c0 < n and a step of 1 does not wrap)
    assert len(_loops(kernel)) == loops - fires
    assert "reroll_fallback" not in text and "2147483647" not in text
    assert text.count(f'{REROLLED} = "per-thread"') == fires
    for header in _loops(kernel):
        if name != "row_max_from":
            assert sum(op.name in ("ptx.st", "ptx.max", "ptx.div") for op in header.ops) <= 2
        assert header.ops[-1].attributes.get(REROLLED) == "per-thread"
    verify(parse_op(text))          # the printed IR parses back and verifies


def test_uniform_weights_are_refused_by_the_decision_not_the_proof(ptx: str) -> None:
    """The weights loop's unrolled pair is provably one loop too; it is left unrolled because
    the interchange takes it (threads as vector lanes: four iterations per pass)."""
    kernel = _before_reroll(ptx, "weighted")
    region = block_body(kernel)
    preds = predecessors(region)
    proven = [match_unrolled_loop(region, b, lambda: set(), preds, lambda main: True)
              for b in _loops(kernel)]
    assert sum(p is not None for p in proven) == 1
    assert _reroll(kernel) == 0


def test_a_rerolled_row_loop_is_not_taken_for_a_grid_stride_loop(ptx: str) -> None:
    """The re-rolled row loop stays in each thread (LLVM vectorizes it along the row): the
    interchange of thread-strided loops would make every load a gather (37 vs 25 ms for
    65536 rows x 784, one thread)."""
    module = parse_ptx(ptx)
    kernel = lift_kernel(module, module.functions["row_max"]).op
    counts = run_pipeline(kernel, PipelineOptions(verify_each=True)).counts
    assert counts["reroll-loops"] == 1
    assert counts["interchange-thread-strided-loops"] == 0
    assert counts["interchange-uniform-loops"] == 0
    assert "soft = true" not in print_op(kernel)
    rows, cols = 300, 97
    x = np.random.default_rng(1).standard_normal((rows, cols), dtype=np.float32)
    f = cpuify.RawModule(ptx=ptx).get_function("row_max")
    for _ in range(3):
        out = np.full(rows, np.nan, np.float32)
        f(((rows + 127) // 128,), (128,), (x, out, np.int32(rows), np.int32(cols)))
        np.testing.assert_array_equal(out, x.max(axis=1))


def test_per_thread_false_leaves_them(ptx: str) -> None:
    kernel = _before_reroll(ptx, "softmax_rows")
    assert _reroll(kernel, "reroll-loops{per_thread=false}") == 0


def test_disabled_leaves_the_unrolled_loops(ptx: str) -> None:
    module = parse_ptx(ptx)
    kernel = lift_kernel(module, module.functions["softmax_rows"]).op
    counts = run_pipeline(kernel, PipelineOptions(disabled=frozenset({"reroll-loops"}))).counts
    assert "reroll-loops" not in counts and REROLLED not in print_op(kernel)
    kernel = lift_kernel(module, module.functions["softmax_rows"]).op
    counts = run_pipeline(kernel, PipelineOptions()).counts
    assert counts["reroll-loops"] == 3 and counts["split-in-order-sums"] == 1


# --- must not fire: the unrolled copies are not the remainder loop's body -------------------

def _unrolled(kernel: Operation, op_name: str):  # type: ignore[no-untyped-def]
    """nvcc's unrolled loop holding the most `op_name` ops."""
    return max(_loops(kernel), key=lambda b: sum(op.name == op_name for op in b.ops))


def _mutated(ptx: str, name: str, op_name: str, mutate) -> int:  # type: ignore[no-untyped-def]
    kernel = _before_reroll(ptx, name)
    mutate(_unrolled(kernel, op_name))
    verify(kernel)
    return _reroll(parse_op(print_op(kernel)))         # (IR in, as text)


def test_unmutated_fires(ptx: str) -> None:
    assert _mutated(ptx, "shifted_rows", "ptx.div", lambda main: None) == 3


def test_not_when_one_copy_computes_something_else(ptx: str) -> None:
    """The third copy of the normalization divides the other way round."""
    def mutate(main):  # type: ignore[no-untyped-def]
        third = [op for op in main.ops if op.name == "ptx.div"][2]
        third.operands[0], third.operands[1] = third.operands[1], third.operands[0]
    assert _mutated(ptx, "shifted_rows", "ptx.div", mutate) == 2


def test_not_when_the_carried_sum_is_regrouped(ptx: str) -> None:
    """(s + e0 + e1) + (e2 + e3): the same terms, added in another order (a loop-carried
    dependence re-rolling would reorder: the result differs in the last bits)."""
    def mutate(main):  # type: ignore[no-untyped-def]
        adds = [op for op in main.ops if op.name == "ptx.add" and op.results[0].type == "f32"]
        assert len(adds) == 4
        third, fourth = adds[2], adds[3]
        e2, e3 = third.operands[1], fourth.operands[1]
        pair = Operation("ptx.add", [e2, e3], ["f32"], dict(fourth.attributes))
        pair.parent = main
        main.ops.insert(main.ops.index(fourth), pair)
        fourth.set_operand(0, adds[1].results[0])
        fourth.set_operand(1, pair.results[0])
        # (third's result is now read by nothing: a dead add, as in the mutated program)
    assert _mutated(ptx, "shifted_rows", "ptx.st", mutate) == 2


def test_not_when_a_later_copy_loads_before_an_earlier_copy_stores(ptx: str) -> None:
    """In the in-place normalization, copy 1's load of out[c+1] moved above copy 0's store
    of out[c]: the order of the memory effects is not the loop's."""
    def mutate(main):  # type: ignore[no-untyped-def]
        first_store = next(op for op in main.ops if op.name == "ptx.st")
        later_load = [op for op in main.ops if op.name == "ptx.ld"][1]
        main.ops.remove(later_load)
        main.ops.insert(main.ops.index(first_store), later_load)
    assert _mutated(ptx, "shifted_rows", "ptx.div", mutate) == 2


def test_unproven_start_keeps_the_guard(ptx: str) -> None:
    """Without nvcc's entry test (its branch made unconditional into the loops) `c0 < n` is
    checked at run time and nvcc's loops stay behind the check."""
    kernel = _before_reroll(ptx, "row_max_from")
    region = block_body(kernel)
    entry_test = next(b for b in region.blocks if b.terminator is not None and
                      b.terminator.name == "cf.cond_br" and
                      any(op.name == "ptx.setp" and op.attributes["mods"] == ["le", "s32"]
                          for op in b.ops))
    term = entry_test.terminator
    assert term is not None
    into = term.successors[1]
    term.drop_uses()
    entry_test.ops[-1] = Operation("cf.br", [], [], dict(term.attributes), successors=[into],
                                   successor_args=[list(term.successor_args[1])])
    entry_test.ops[-1].parent = entry_test
    region.blocks[:] = [b for b in region.blocks if b is region.entry or
                        any(b in p.successors for p in region.blocks)]
    verify(kernel)
    assert _reroll(kernel) == 1
    text = print_op(kernel)
    assert "reroll_fallback = true" in text and '["lt", "s32"]' in text
    assert "2147483647" not in text          # (a step of 1: no range check)


# --- results -----------------------------------------------------------------------------

def _interp(ptx: str, name: str, pipeline, grid, block, args):  # type: ignore[no-untyped-def]
    module = parse_ptx(ptx)
    kernel = lift_kernel(module, module.functions[name]).op
    run_pipeline(kernel, PipelineOptions(passes=tuple(pipeline), verify_each=True))
    interp = InterpModule(ptx)
    interp.use_ir(name, kernel)
    interp.launch(name, grid, block, args)
    return args


def _sequential_sums(terms: np.ndarray) -> np.ndarray:
    """Each row's terms added one after the other in float32 (what each thread does)."""
    total = np.zeros(terms.shape[0], np.float32)
    for c in range(terms.shape[1]):
        total = (total + terms[:, c]).astype(np.float32)
    return total


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint32)


@pytest.mark.parametrize("rows,cols", [(3, 0), (5, 1), (37, 3), (130, 4), (20, 5),
                                       (300, 129), (130, 784)])
def test_shifted_rows_bit_equal_to_numpy(ptx: str, rows: int, cols: int) -> None:
    """max, `x - max` stored and summed in order, divided in place: NumPy's float32 ops,
    column after column, give the same bits (no remainder, all of it, and none)."""
    rng = np.random.default_rng(rows * 1000 + cols)
    x = rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(3)
    # (cols = 0: the loops do not run, the max stays -FLT_MAX and the sum 0)
    row_max = x.max(axis=1) if cols else np.zeros(rows, np.float32)
    e = (x - row_max[:, None]).astype(np.float32)
    with np.errstate(invalid="ignore"):         # (one column: 0 / 0, NaN in both)
        want = (e / _sequential_sums(e)[:, None]).astype(np.float32)
    f = cpuify.RawModule(ptx=ptx).get_function("shifted_rows")
    for _ in range(3):          # the generic code, then the code for the block shape
        y = np.full_like(x, np.nan)
        f(((rows + 127) // 128,), (128,), (x, y, np.int32(rows), np.int32(cols)))
        np.testing.assert_array_equal(_bits(y), _bits(want))


@pytest.mark.parametrize("cols,start", [(0, 0), (7, 0), (7, 6), (7, 7), (7, 9), (784, 3),
                                        (785, -2)])
def test_row_sum_from_bit_equal_to_numpy(ptx: str, cols: int, start: int) -> None:
    """nvcc's remainder-first pair with stored terms (left unrolled: see above), bit for bit:
    a start from a parameter (past the end: no iteration; a
    negative one reads before the row, here the previous row's last elements)."""
    rows = 70
    rng = np.random.default_rng(cols + start)
    flat = rng.standard_normal(rows * cols + 8, dtype=np.float32)
    x = flat[8:]
    sums = np.full(rows, np.nan, np.float32)
    terms = np.stack([flat[8 + r * cols + start: 8 + r * cols + cols] for r in range(rows)]) \
        if cols > start else np.zeros((rows, 0), np.float32)
    terms = (terms * np.float32(0.5)).astype(np.float32)
    want = _sequential_sums(terms)
    y = np.zeros(rows * cols + 8, np.float32)[8:]
    args = (x, y, sums, np.int32(rows), np.int32(cols), np.int32(start))
    f = cpuify.RawModule(ptx=ptx).get_function("row_sum_from")
    for _ in range(3):
        sums[:] = np.nan
        f(((rows + 31) // 32,), (32,), args)
        np.testing.assert_array_equal(_bits(sums), _bits(want))
    got = _interp(ptx, "row_sum_from", UPTO + ["reroll-loops"], (3,), (32,),
                  [x, np.zeros(rows * cols + 8, np.float32)[8:],
                   np.full(rows, np.nan, np.float32), *args[3:]])[2]
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("cols,start", [(0, 0), (7, 0), (7, 6), (7, 9), (785, 3)])
def test_row_max_from_matches_numpy(ptx: str, cols: int, start: int) -> None:
    """The re-rolled remainder-first pair (a start from a parameter)."""
    rows = 70
    x = np.random.default_rng(cols + start).standard_normal((rows, cols), dtype=np.float32)
    want = np.full(rows, np.float32(-3.402823466e38), np.float32)
    if cols > start:
        want = np.maximum(want, (x[:, start:] * np.float32(0.5)).max(axis=1))
    f = cpuify.RawModule(ptx=ptx).get_function("row_max_from")
    for _ in range(3):
        out = np.full(rows, np.nan, np.float32)
        f(((rows + 31) // 32,), (32,), (x, out, np.int32(rows), np.int32(cols), np.int32(start)))
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("rows,cols", [(20, 37), (130, 784), (9, 2)])
def test_softmax_bit_equal_without_the_pass_and_in_the_interpreter(ptx: str, rows: int,
                                                                    cols: int) -> None:
    """CUDA's expf is no NumPy function: the re-rolled kernel gives the bits of the kernel
    without the pass and of the lifted IR in the reference interpreter, and is a softmax."""
    rng = np.random.default_rng(cols)
    x = rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(3)
    got = {}
    for label, options in (("rerolled", ()), ("unrolled", ("--disable-pass=reroll-loops",))):
        f = cpuify.RawModule(ptx=ptx, options=options).get_function("softmax_rows")
        for _ in range(3):
            y = np.full_like(x, np.nan)
            f(((rows + 127) // 128,), (128,), (x, y, np.int32(rows), np.int32(cols)))
        got[label] = y
    np.testing.assert_array_equal(_bits(got["rerolled"]), _bits(got["unrolled"]))
    small = min(rows, 9)
    lifted = _interp(ptx, "softmax_rows", [], (1,), (small,),
                     [x, np.full_like(x, np.nan), np.int32(small), np.int32(cols)])[1]
    rerolled = _interp(ptx, "softmax_rows", UPTO + ["reroll-loops"], (1,), (small,),
                       [x, np.full_like(x, np.nan), np.int32(small), np.int32(cols)])[1]
    np.testing.assert_array_equal(_bits(rerolled[:small]), _bits(lifted[:small]))
    # (compiled and interpreted ex2.approx may differ in the last bit: no bit comparison)
    np.testing.assert_allclose(got["rerolled"][:small], lifted[:small], rtol=1e-6)
    z = x.astype(np.float64) - x.max(axis=1, keepdims=True)
    ref = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(got["rerolled"], ref, rtol=2e-5, atol=1e-12)


# --- what the branches before the loops prove (analysis/loop_entry.py) ----------------------

def _entry_test(build, skip_first: bool = True, second_way_in: bool = False):  # type: ignore[no-untyped-def]
    """entry: n, c0 and the condition `build` makes; a branch to `skip` (first successor
    when skip_first) or to `loops`; returns (region, loops, values by name)."""
    from cpuify.ir.core import Block, Region
    entry, loops, skip, done = Block(), Block(), Block(), Block()
    region = Region([entry, loops, skip, done])

    def op(block, name, operands, rtype, **attrs):  # type: ignore[no-untyped-def]
        o = Operation(name, operands, [rtype] if rtype else [], attrs)
        block.append(o)
        return o.results[0] if rtype else o
    v = {"n": op(entry, "upir.param", [], "i32", offset=0, type="u32"),
         "c0": op(entry, "upir.param", [], "i32", offset=4, type="u32"),
         "zero": op(entry, "upir.const", [], "i32", value=0),
         "one": op(entry, "upir.const", [], "i32", value=1)}
    cond = build(lambda *a, **k: op(entry, *a, **k), v)
    targets = [skip, loops] if skip_first else [loops, skip]
    op(entry, "cf.cond_br", [cond], None)
    entry.ops[-1].successors = targets
    entry.ops[-1].successor_args = [[], []]
    for b in (loops, skip):
        op(b, "cf.br", [], None)
        b.ops[-1].successors, b.ops[-1].successor_args = [done], [[]]
    if second_way_in:                   # skip also leads into the loops
        skip.ops[-1].successors = [loops]
        op(loops, "cf.br", [], None)
        loops.ops.pop(-2)
        loops.ops[-1].successors, loops.ops[-1].successor_args = [done], [[]]
    op(done, "upir.exit", [], None)
    return region, loops, v


def _setp(cmp: str, sign: str = "s32"):  # type: ignore[no-untyped-def]
    return lambda a, b: lambda op, v: op("ptx.setp", [v[a], v[b]], "i1", mods=[cmp, sign])


@pytest.mark.parametrize("build,skip_first,start,second,proven", [
    (_setp("lt")("n", "one"), True, "zero", False, True),       # n < 1 ? skip   : 0 < n
    (_setp("lt")("n", "one"), True, "one", False, False),       # ... not 1 < n
    (_setp("le")("n", "c0"), True, "c0", False, True),          # n <= c0 ? skip : c0 < n
    (_setp("le", "u32")("n", "c0"), True, "c0", False, False),  # unsigned: no
    (_setp("lt")("c0", "n"), False, "c0", False, True),         # c0 < n ? loops
    (_setp("lt")("c0", "n"), True, "c0", False, False),         # ... on the other edge
    (_setp("lt")("c0", "n"), False, "c0", True, False),         # the loops reached another way
    (lambda op, v: op("ptx.or", [_setp("lt")("n", "one")(op, v),
                                 _setp("ge")("c0", "zero")(op, v)], "i1", mods=["pred"]),
     True, "zero", False, True),                                # n < 1 || ... ? skip
    (lambda op, v: op("ptx.and", [_setp("lt")("n", "one")(op, v),
                                  _setp("ge")("c0", "zero")(op, v)], "i1", mods=["pred"]),
     True, "zero", False, False),                               # && on the skip edge: no
    (lambda op, v: op("ptx.not", [_setp("ge")("c0", "n")(op, v)], "i1", mods=["pred"]),
     False, "c0", False, True),                                 # !(c0 >= n) ? loops
])
def test_start_below_bound(build, skip_first: bool, start: str, second: bool,
                           proven: bool) -> None:
    from cpuify.analysis.loop_entry import start_below_bound
    region, loops, v = _entry_test(build, skip_first, second)
    assert start_below_bound(region, loops, v[start], v["n"]) == proven
