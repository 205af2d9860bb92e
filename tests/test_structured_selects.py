"""select-if-phis and reroll-loops on the structured form (form "any"): the default pipeline
stays structured from raise-structured-cf through parallel-licm.  select-if-phis reads the
results of `upir.if` ops (transforms/structured_selects.py); reroll-loops reads the regions
for nvcc's unrolled arrangement (reroll.may_reroll) and lowers the kernel only where it may
be there.  IR-in/IR-out: the pass on the raised kernel and, on the same kernel lowered
first, the pass on the CFG give the same IR once lowered, where they fire and where they
must not."""

from __future__ import annotations

import io

import numpy as np
import pytest

import cpuify
from cpuify.compiler import lift_and_optimize
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp.machine import InterpModule
from cpuify.ir.core import Operation
from cpuify.ir.parser import parse_op
from cpuify.ir.printer import print_op
from cpuify.ir.structured import has_structured_ops, lower_structured_control_flow
from cpuify.ir.verifier import verify
from cpuify.lifting import lift_kernel
from cpuify.transforms.pass_manager import (
    PipelineOptions, default_pipeline, make_pass, pass_form, run_pipeline,
)
from cpuify.transforms.reroll import may_reroll
from test_ir import filecheck
from test_structured_cf import PROLOGUE, kernel

SRC = r'''
// a flag set in an `if` and read after a barrier (pathfinder's `computed`); `v` is loaded
// in the `if`: it stays merged
extern "C" __global__ void flag_after_barrier(const int *x, int *out, int lo, int hi) {
    __shared__ int s[128];
    int t = threadIdx.x;
    bool done = false;
    int v = 7;
    if (t >= lo && t <= hi) {
        s[t] = x[blockIdx.x * 128 + t] * 2;
        done = true;
        v = x[blockIdx.x * 128 + t];
    }
    __syncthreads();
    out[blockIdx.x * 128 + t] = done ? s[t] + v : -1;
}
// two ifs in a row, each setting a constant: the if followed by the branch to its join
extern "C" __global__ void two_flags(const int *x, int *out, int lo, int hi) {
    __shared__ int s[128];
    int t = threadIdx.x;
    int low = 0, high = 0;
    s[t] = t;
    if (t < lo) { s[t] = x[t]; low = 1; }
    if (t > hi) { s[t] = -x[t]; high = 2; }
    __syncthreads();
    out[blockIdx.x * 128 + t] = low + high + s[t ^ 1];
}
// an if in a loop whose merged value is loaded in it: nothing to select
extern "C" __global__ void flag_in_loop(const int *x, int *out, int n, int lim) {
    __shared__ int s[128];
    int t = threadIdx.x, acc = 0;
    for (int i = 0; i < n; i++) {
        bool big = false;
        int v = x[i * 128 + t];
        if (v > lim) { s[t] = v; big = true; }
        __syncthreads();
        acc += big ? s[(t + 1) & 127] : 1;
        __syncthreads();
    }
    out[blockIdx.x * 128 + t] = acc;
}
// nvcc's remainder loop + 4x unrolled main loop of a grid-stride loop (reroll-loops fires)
extern "C" __global__ void axpy_pre(float a, const float *x, float *y, int n) {
    int s = blockDim.x * gridDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += s) y[i] = a * x[i] + y[i];
}
// its remainder peeled into ifs inside a time-step loop (the ifs share one join)
extern "C" __global__ void steps_pre(float *x, int n, int iters) {
    int s = blockDim.x;
    for (int t = 0; t < iters; t++) {
        for (int i = threadIdx.x; i < n; i += s) x[i] = x[i] * 0.5f + 1.0f;
        __syncthreads();
    }
}
// an if and no loop or barrier: no pass needs the CFG
extern "C" __global__ void guarded(const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? 2.0f * x[i] : x[i];
}
// a loop nvcc did not unroll: no `q <u U-1` test, nothing for reroll-loops to lower for
extern "C" __global__ void no_unroll(const float *x, float *y, int n) {
    int s = blockDim.x * gridDim.x;
#pragma unroll 1
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += s) y[i] = 2.0f * x[i];
}
'''

#: the default pipeline's passes before select-if-phis
UPTO = tuple(default_pipeline()[:default_pipeline().index("select-if-phis")])


@pytest.fixture(scope="module")
def ptx() -> str:
    return compile_to_ptx(SRC, filename="structured_selects.cu").ptx


def _raised(ptx: str, name: str, passes: tuple[str, ...] = UPTO) -> Operation:
    module = parse_ptx(ptx)
    lifted, _ = lift_and_optimize(module, module.functions[name], PipelineOptions(passes=passes))
    assert has_structured_ops(lifted.op)
    return lifted.op


def _lowered_text(op: Operation) -> str:
    copy = parse_op(print_op(op))
    lower_structured_control_flow(copy)
    verify(copy)
    return print_op(copy)


def _both_forms(ptx: str, name: str, pass_name: str,
                passes: tuple[str, ...] = UPTO) -> tuple[int, int, Operation]:
    """(count on the regions, count on the CFG, the kernel after the pass on the regions);
    asserts that, lowered, both runs leave the same IR."""
    on_regions = _raised(ptx, name, passes)
    n_regions = make_pass(pass_name).run(on_regions)
    verify(on_regions)
    on_cfg = _raised(ptx, name, passes)
    lower_structured_control_flow(on_cfg)
    n_cfg = make_pass(pass_name).run(on_cfg)
    verify(on_cfg)
    assert _lowered_text(on_regions) == print_op(on_cfg)
    return n_regions, n_cfg, on_regions


def test_both_passes_take_either_form() -> None:
    assert pass_form(make_pass("select-if-phis")) == "any"
    assert pass_form(make_pass("reroll-loops")) == "any"


@pytest.mark.parametrize("name, expected", [("flag_after_barrier", 1), ("two_flags", 2),
                                            ("flag_in_loop", 0), ("steps_pre", 0)])
def test_select_if_phis_same_decisions_and_ir(ptx: str, name: str, expected: int) -> None:
    """On the regions: the flags become selects in front of their `upir.if`, which keeps
    the values it must (a load in the arm; the peeled copies' index, whose join has four
    ways in); lowered, the IR the CFG pass makes."""
    on_regions = _raised(ptx, name)
    ifs_results = sum(len(o.results) for o in on_regions.walk() if o.name == "upir.if")
    n_regions, n_cfg, after = _both_forms(ptx, name, "select-if-phis")
    assert n_regions == n_cfg == expected
    assert has_structured_ops(after)
    text = print_op(after)
    if name in ("flag_after_barrier", "two_flags"):
        # the if merges one value fewer per select; no lowering happened
        assert sum(len(o.results) for o in after.walk() if o.name == "upir.if") <= \
            ifs_results - (expected if name == "flag_after_barrier" else 0)
        filecheck(text, """
            CHECK: "ptx.selp"
            CHECK-NEXT: "upir.if"
        """)


def test_flag_after_barrier_keeps_the_loaded_value(ptx: str) -> None:
    _, _, after = _both_forms(ptx, "flag_after_barrier", "select-if-phis")
    first = next(o for o in after.walk() if o.name == "upir.if")
    # `v` (loaded in the arm) is still the if's result; `done` is a select on its condition
    # in front of it, of a constant
    assert len(first.results) == 1
    assert first.regions[1].entry.ops[-1].operands[0].owner.name == "ptx.ld"  # type: ignore[union-attr]
    block = first.parent
    assert block is not None
    sel = block.ops[block.ops.index(first) - 1]
    assert sel.name == "ptx.selp" and sel.operands[2] is first.operands[0]
    assert any(v.owner.name == "upir.const" for v in sel.operands[:2])  # type: ignore[union-attr]


# an if followed by the branch to a block of its own (the results passed on by that branch,
# with a value from before the if), and a branch triangle left as CFG in the same region
_IF_THEN_BRANCH = PROLOGUE + '''
  %c = "ptx.setp"(%t, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  %r, %l = "upir.if"(%c) ({
    "upir.yield"(%zero, %t) {edge = unit} : (i32, i32) -> ()
  }, {
    %x = "ptx.ld"(%p) {mods = ["global", "s32"], offset = 0 : i64} : (i64) -> i32
    %k = "upir.const"() {value = 5 : i64} : () -> i32
    "upir.yield"(%k, %x) {line = 9 : i64} : (i32, i32) -> ()
  }) {line = 7 : i64} : (i1) -> (i32, i32)
  "cf.br"(%r, %l, %t) [^bb1] : (i32, i32, i32) -> ()
^bb1(%m: i32, %v: i32, %u: i32):
  %d = "ptx.setp"(%m, %n) {mods = ["gt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%d, %one) [^bb3, ^bb2] <{operandSegmentSizes = array<i32: 1, 1, 0>}> {line = 11 : i64} : (i1, i32) -> ()
^bb2:
  "ptx.st"(%p, %v) {mods = ["global", "s32"], offset = 4 : i64} : (i64, i32) -> ()
  "cf.br"(%u) [^bb3] {line = 13 : i64} : (i32) -> ()
^bb3(%w: i32):
  "upir.barrier"() {mods = ["sync"]} : () -> ()
  %y = "ptx.add"(%m, %w) {mods = ["s32"]} : (i32, i32) -> i32
  %z = "ptx.add"(%y, %v) {mods = ["s32"]} : (i32, i32) -> i32
  "ptx.st"(%p, %z) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "upir.exit"() : () -> ()'''


def test_if_then_branch_and_a_triangle_left_in_the_region() -> None:
    on_regions = parse_op(kernel(_IF_THEN_BRANCH))
    verify(on_regions)
    on_cfg = parse_op(kernel(_IF_THEN_BRANCH))
    lower_structured_control_flow(on_cfg)
    # %m (constants), %u (one value both ways) and %w (a value from before the branch and a
    # constant); %v is loaded in the arm
    assert make_pass("select-if-phis").run(on_cfg) == 3
    assert make_pass("select-if-phis").run(on_regions) == 3
    verify(on_regions)
    text = print_op(on_regions)
    assert _lowered_text(on_regions) == print_op(on_cfg)
    filecheck(text, """
        CHECK: [[T:%\\d+]] = "upir.special"() {reg = "%tid.x"}
        CHECK: [[ZERO:%\\d+]] = "upir.const"() {value = 0
        CHECK: [[ONE:%\\d+]] = "upir.const"() {value = 1
        CHECK: [[C:%\\d+]] = "ptx.setp"
        CHECK-NEXT: [[K:%\\d+]] = "upir.const"() {value = 5
        CHECK-NEXT: [[M:%\\d+]] = "ptx.selp"([[ZERO]], [[K]], [[C]]) {mods = ["b32"], line = 7
        CHECK-NEXT: [[U:%\\d+]] = "ptx.selp"([[T]], [[T]], [[C]])
        CHECK-NEXT: [[L:%\\d+]] = "upir.if"([[C]])
        CHECK-NEXT: "upir.yield"([[T]]) {edge = unit}
        CHECK: [[X:%\\d+]] = "ptx.ld"
        CHECK: "upir.yield"([[X]]) {line = 9
        CHECK: "cf.br"([[L]]) [^bb1]
        CHECK-NEXT: ^bb1([[V:%\\d+]]: i32):
        CHECK-NEXT: [[D:%\\d+]] = "ptx.setp"([[M]]
        CHECK-NEXT: [[W:%\\d+]] = "ptx.selp"([[ONE]], [[U]], [[D]]) {mods = ["b32"], line = 11
        CHECK-NEXT: "cf.cond_br"([[D]]) [^bb3, ^bb2]
        CHECK: ^bb3:
        CHECK: "ptx.add"([[M]], [[W]])
    """)


def test_print_ir_after_shows_structured_ir(ptx: str) -> None:
    """--print-ir-after=select-if-phis,reroll-loops,parallel-licm: the regions, with no
    lowering before parallel-licm for a kernel nvcc did not unroll."""
    module = parse_ptx(ptx)
    op = lift_kernel(module, module.functions["two_flags"]).op
    out = io.StringIO()
    opts, _ = PipelineOptions.parse(["--print-ir-after=select-if-phis,reroll-loops,parallel-licm"])
    result = run_pipeline(op, opts, out)
    dumps = out.getvalue().split("// -----// IR of kernel")[1:]
    assert [d.split(" after ")[1].split(" ")[0] for d in dumps] == \
        ["select-if-phis", "reroll-loops", "parallel-licm"]
    assert all('"upir.if"' in d for d in dumps)
    assert result.counts["select-if-phis"] == 2
    assert result.transitions[0] == ("lower", "barrier-elimination")


@pytest.mark.parametrize("name, fires, may", [("axpy_pre", 1, True), ("steps_pre", 1, True),
                                              ("no_unroll", 0, False)])
def test_reroll_on_structured_input(ptx: str, name: str, fires: int, may: bool) -> None:
    """reroll-loops on the regions: lowered (and re-rolled) where nvcc's `q <u U-1` test is
    there, the same IR as on the CFG; left structured where it is not."""
    passes = UPTO + ("select-if-phis",)
    assert may_reroll(_raised(ptx, name, passes)) is may
    n_regions, n_cfg, after = _both_forms(ptx, name, "reroll-loops", passes)
    assert n_regions == n_cfg == fires
    assert has_structured_ops(after) is not may


@pytest.mark.parametrize("name, first", [
    ("two_flags", "barrier-elimination"), ("flag_in_loop", "barrier-elimination"),
    ("axpy_pre", "reroll-loops"), ("no_unroll", "min-cut-fission"),
    ("guarded", None)])
def test_pipeline_lowers_only_where_a_cfg_rewrite_may_fire(ptx: str, name: str,
                                                           first: str | None) -> None:
    """The default pipeline's first lowering: by the first pass whose rewrite is the CFG's
    and whose quick test says it may fire (a barrier, nvcc's unrolled loops; a sync point:
    no_unroll's grid-stride loop is interchanged on the regions, and its soft barrier is
    what min-cut-fission splits at); a kernel with none of them is never lowered, and so
    not raised again at the end."""
    module = parse_ptx(ptx)
    op = lift_kernel(module, module.functions[name]).op
    result = run_pipeline(op, PipelineOptions(verify_each=True))
    if first is None:
        assert result.transitions == []
    else:
        assert result.transitions[0] == ("lower", first)
        assert result.transitions[-1] == ("raise", "")
    assert has_structured_ops(op)


@pytest.mark.parametrize("lo, hi", [(10, 90), (0, 127), (50, 20)])
def test_two_flags_match_numpy_and_the_interpreter(ptx: str, lo: int, hi: int) -> None:
    x = (np.arange(256, dtype=np.int32) * 7) % 23 - 11
    t = np.arange(128)
    s = np.where(t < lo, x[t], t)
    s = np.where(t > hi, -x[t], s)
    want = np.where(t < lo, 1, 0) + np.where(t > hi, 2, 0) + s[t ^ 1]
    out = np.zeros(128, dtype=np.int32)
    cpuify.RawModule(ptx=ptx).get_function("two_flags")((1,), (128,), (x, out, np.int32(lo), np.int32(hi)))
    np.testing.assert_array_equal(out, want)
    # the reference interpreter on the IR after select-if-phis (on the regions)
    module = parse_ptx(ptx)
    op = lift_kernel(module, module.functions["two_flags"]).op
    passes = tuple(default_pipeline()[:default_pipeline().index("select-if-phis") + 1])
    assert run_pipeline(op, PipelineOptions(passes=passes)).counts["select-if-phis"] == 2
    assert has_structured_ops(op)
    interp = InterpModule(ptx)
    interp.use_ir("two_flags", op)
    args = [x.copy(), np.zeros(128, dtype=np.int32), np.int32(lo), np.int32(hi)]
    interp.launch("two_flags", (1, 1, 1), (128, 1, 1), args)
    np.testing.assert_array_equal(args[1], want)


_ONE_BLOCK_LOOP = PROLOGUE + '''
  %three = "upir.const"() {value = 3 : i64} : () -> i32
  %five = "upir.const"() {value = 5 : i64} : () -> i32
  %bound = "ptx.mov"(BOUND) {mods = ["u32"]} : (i32) -> i32
  "cf.br"(%zero) [^bb1] : (i32) -> ()
^bb1(%k: i32):
  %k2 = "ptx.add"(%k, %one) {mods = ["s32"]} : (i32, i32) -> i32
  %c = "ptx.setp"(%k2, %bound) {mods = ["lt", "u32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c, %k2) [^bb1, ^bb2] <{operandSegmentSizes = array<i32: 1, 1, 0>}> : (i1, i32) -> ()
^bb2:
  "upir.exit"() : () -> ()'''


@pytest.mark.parametrize("bound, may", [("%three", True), ("%five", False), ("%n", False),
                                        ("%t", False)])
def test_may_reroll_reads_the_bound(bound: str, may: bool) -> None:
    """nvcc's `q <u U-1` has a bound the proof evaluates to U - 1 (3 for U = 4): a loop of
    one block whose only unsigned test is against a parameter, a thread index or another
    constant is no candidate, raised or not."""
    op = parse_op(kernel(_ONE_BLOCK_LOOP.replace("BOUND", bound)))
    assert may_reroll(op) is may
    make_pass("raise-structured-cf").run(op)
    assert has_structured_ops(op) and may_reroll(op) is may
