"""The loop interchanges on structured loops (transforms/interchange_structured.py): the
soft barrier and the iteration counter put into `upir.for`/`upir.while` ops without
lowering the kernel (IR-in/IR-out), the loops they must leave alone, and the same program as
the CFG passes make: lowered, the result is the CFG the CFG pass makes of the lowered
input, and compiled kernels agree with the reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from cpuify.compiler import lift_and_optimize
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp import interpret_kernel
from cpuify.ir.parser import parse_op
from cpuify.ir.printer import print_op
from cpuify.ir.structured import has_structured_ops, lower_structured_control_flow
from cpuify.ir.verifier import verify
from cpuify.transforms.pass_manager import PipelineOptions, default_pipeline, make_pass
from test_interchange import ARGMIN_SRC, SRC, UNIFORM_SRC
from test_ir import filecheck
from test_structured_cf import PROLOGUE, kernel

UNIFORM = "interchange-uniform-loops{min_ops=1}"
STRIDED = "interchange-thread-strided-loops"

_FLOATS = '''
  %f0 = "upir.const"() {value = 0.0 : f64} : () -> f32
  %tf = "ptx.cvt"(%t) {mods = ["rn", "f32", "s32"]} : (i32) -> f32
'''

#: a for whose bounds are the same in every thread, carrying a per-thread float sum
UNIFORM_FOR = PROLOGUE + _FLOATS + '''
  %s = "upir.for"(%zero, %n, %one, %f0) ({
  ^bb0(%i: i32, %acc: f32):
    %x = "ptx.cvt"(%i) {mods = ["rn", "f32", "s32"]} : (i32) -> f32
    %d = "ptx.sub"(%x, %tf) {mods = ["rn", "f32"]} : (f32, f32) -> f32
    %a2 = "ptx.add"(%acc, %d) {mods = ["rn", "f32"]} : (f32, f32) -> f32
    "upir.yield"(%a2) {line = 9 : i64} : (f32) -> ()
  }) {predicate = ["lt", "s32"], increment = ["s32"], predicate_line = 8 : i64} : (i32, i32, i32, f32) -> f32
  "ptx.st"(%p, %s) {mods = ["global", "f32"], offset = 0 : i64} : (i64, f32) -> ()
  "upir.exit"() : () -> ()'''

#: a while that is no for (it halves a uniform value), carrying a per-thread float
UNIFORM_WHILE = PROLOGUE + _FLOATS + '''
  %r, %rs = "upir.while"(%n, %f0) ({
  ^bb0(%x: i32, %acc: f32):
    %c = "ptx.setp"(%x, %zero) {mods = ["gt", "s32"], line = 20 : i64} : (i32, i32) -> i1
    "upir.condition"(%c, %x, %acc) {line = 20 : i64} : (i1, i32, f32) -> ()
  }, {
  ^bb0(%x2: i32, %acc2: f32):
    %h = "ptx.shr"(%x2, %one) {mods = ["s32"]} : (i32, i32) -> i32
    %a2 = "ptx.add"(%acc2, %tf) {mods = ["rn", "f32"]} : (f32, f32) -> f32
    "upir.yield"(%h, %a2) {line = 22 : i64} : (i32, f32) -> ()
  }) : (i32, f32) -> (i32, f32)
  "ptx.st"(%p, %rs) {mods = ["global", "f32"], offset = 0 : i64} : (i64, f32) -> ()
  "upir.exit"() : () -> ()'''

#: a grid-stride loop's start (different in each thread) and step (the same in all)
_GRID = '''
  %four = "upir.const"() {value = 4 : i64} : () -> i32
  %nt = "upir.special"() {reg = "%ntid.x"} : () -> i32
  %nc = "upir.special"() {reg = "%nctaid.x"} : () -> i32
  %c = "upir.special"() {reg = "%ctaid.x"} : () -> i32
  %start = "ptx.mad"(%c, %nt, %t) {mods = ["lo", "s32"]} : (i32, i32, i32) -> i32
  %stride = "ptx.mul"(%nt, %nc) {mods = ["lo", "s32"]} : (i32, i32) -> i32
'''

#: a grid-stride loop: thread-strided start, a step the same in all threads
GRID_STRIDE = PROLOGUE + _GRID + '''
  "upir.for"(%start, %n, %stride) ({
  ^bb0(%i: i32):
    %off = "ptx.mul"(%i, %four) {mods = ["wide", "s32"]} : (i32, i32) -> i64
    %a = "ptx.add"(%p, %off) {mods = ["s64"]} : (i64, i64) -> i64
    %x = "ptx.ld"(%a) {mods = ["global", "f32"], offset = 0 : i64, line = 5 : i64} : (i64) -> f32
    %y = "ptx.add"(%x, %x) {mods = ["rn", "f32"]} : (f32, f32) -> f32
    "ptx.st"(%a, %y) {mods = ["global", "f32"], offset = 0 : i64} : (i64, f32) -> ()
    "upir.yield"() : () -> ()
  }) {predicate = ["lt", "s32"], increment = ["s32"], predicate_line = 4 : i64} : (i32, i32, i32) -> ()
  "upir.exit"() : () -> ()'''


def _run(text: str, spec: str) -> tuple[str, int]:
    op = parse_op(text)
    n = make_pass(spec).run(op)
    verify(op)
    return print_op(op), n


def _same_as_on_the_cfg(text: str, spec: str) -> int:
    """Lowered, the structured pass's result is the CFG pass's result on the lowered input
    (the pass takes the CFG path on a kernel with no structured ops); returns the count."""
    on_regions = parse_op(text)
    n = make_pass(spec).run(on_regions)
    lower_structured_control_flow(on_regions)
    on_cfg = parse_op(text)
    lower_structured_control_flow(on_cfg)
    assert make_pass(spec).run(on_cfg) == n
    assert print_op(on_regions) == print_op(on_cfg)
    return n


@pytest.mark.parametrize("text, checks", [
    # a for tested at the top has no header op until lowered: the same loop as a while
    (UNIFORM_FOR, '''
    CHECK: "upir.while"(%{{\\w+}}, %{{\\w+}})
    CHECK-NEXT: ^bb0(%[[IV:\\w+]]: i32, %{{\\w+}}: f32):
    CHECK-NEXT: "upir.barrier"() {soft = true, line = 8 : i64}
    CHECK-NEXT: "ptx.setp"(%[[IV]], %{{\\w+}}) {mods = ["lt", "s32"], line = 8 : i64}
    CHECK-NEXT: "upir.condition"
    CHECK: "ptx.add"(%{{\\w+}}, %{{\\w+}}) {mods = ["s32"]}
    CHECK-NEXT: "upir.yield"({{.*}}) {line = 9 : i64, loop_order = "interchanged"
    CHECK-NOT: "cf.cond_br"
    '''),
    (UNIFORM_WHILE, '''
    CHECK: "upir.while"
    CHECK-NEXT: ^bb0(%{{\\w+}}: i32, %{{\\w+}}: f32):
    CHECK-NEXT: "upir.barrier"() {soft = true, line = 20 : i64}
    CHECK-NEXT: "ptx.setp"
    CHECK: "upir.yield"({{.*}}) {line = 22 : i64, loop_order = "interchanged"
    CHECK-NOT: "cf.br"
    ''')], ids=["for", "while"])
def test_uniform_loop_gets_a_soft_barrier_first_in_its_header(text: str, checks: str) -> None:
    out, n = _run(kernel(text), UNIFORM)
    assert n == 1 and has_structured_ops(parse_op(out))
    filecheck(out, checks)
    _same_as_on_the_cfg(kernel(text), UNIFORM)


def test_grid_stride_for_carries_an_iteration_counter() -> None:
    out, n = _run(kernel(GRID_STRIDE), STRIDED)
    assert n == 1
    # the counter: 0 on entry (a constant put first in the block body), +1 per iteration,
    # passed through the condition to the after region; the soft barrier's lockstep names it
    filecheck(out, '''
    CHECK: %[[ONE:\\w+]] = "upir.const"() {value = 1 : i64} : () -> i32
    CHECK-NEXT: %[[ZERO:\\w+]] = "upir.const"() {value = 0 : i64} : () -> i32
    CHECK: "upir.while"(%{{\\w+}}, %[[ZERO]])
    CHECK-NEXT: ^bb0(%[[IV:\\w+]]: i32, %[[K:\\w+]]: i32):
    CHECK-NEXT: "upir.barrier"() {soft = true, line = 4 : i64, lockstep = [1 : i64]}
    CHECK: "upir.condition"(%{{\\w+}}, %[[IV]], %[[K]])
    CHECK: ^bb0(%{{\\w+}}: i32, %[[K2:\\w+]]: i32):
    CHECK: %[[NEXT:\\w+]] = "ptx.add"(%[[K2]], %[[ONE]]) {mods = ["s32"]}
    CHECK-NEXT: "upir.yield"(%{{\\w+}}, %[[NEXT]])
    CHECK-NOT: "cf.cond_br"
    ''')
    _same_as_on_the_cfg(kernel(GRID_STRIDE), STRIDED)


def test_threads_leaving_the_loop_stop_after_it_when_work_follows() -> None:
    # (the ops after the for move to a block of their own, as the lowering makes them)
    text = kernel(GRID_STRIDE.replace('''  "upir.exit"() : () -> ()''', '''
  "ptx.st"(%p, %t) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "upir.exit"() : () -> ()'''))
    out, n = _run(text, STRIDED)
    assert n == 1 and out.count("soft = true") == 2
    filecheck(out, '''
    CHECK: "upir.while"
    CHECK: : (i32, i32) -> (i32, i32)
    CHECK-NEXT: "cf.br"({{.*}}) [^bb1]
    CHECK-NEXT: ^bb1:
    CHECK-NEXT: "upir.barrier"() {soft = true
    CHECK-NEXT: "ptx.st"
    ''')
    _same_as_on_the_cfg(text, STRIDED)


# --- nested loops, ifs ----------------------------------------------------------------------

NESTED = PROLOGUE + _FLOATS + '''
  %s = "upir.for"(%zero, %n, %one, %f0) ({
  ^bb0(%j: i32, %outer: f32):
    %s2 = "upir.for"(%zero, %n, %one, %outer) ({
    ^bb0(%i: i32, %acc: f32):
      %x = "ptx.cvt"(%i) {mods = ["rn", "f32", "s32"]} : (i32) -> f32
      %a2 = "ptx.add"(%acc, %x) {mods = ["rn", "f32"]} : (f32, f32) -> f32
      "upir.yield"(%a2) {line = 12 : i64} : (f32) -> ()
    }) {predicate = ["lt", "s32"], increment = ["s32"], predicate_line = 11 : i64} : (i32, i32, i32, f32) -> f32
    %o2 = "ptx.add"(%s2, %tf) {mods = ["rn", "f32"]} : (f32, f32) -> f32
    "upir.yield"(%o2) {line = 14 : i64} : (f32) -> ()
  }) {predicate = ["lt", "s32"], increment = ["s32"], predicate_line = 10 : i64} : (i32, i32, i32, f32) -> f32
  "ptx.st"(%p, %s) {mods = ["global", "f32"], offset = 0 : i64} : (i64, f32) -> ()
  "upir.exit"() : () -> ()'''


def test_nested_loops_only_the_innermost_is_interchanged() -> None:
    out, n = _run(kernel(NESTED), UNIFORM)
    assert n == 1 and out.count("soft = true") == 1
    filecheck(out, '''
    CHECK: "upir.for"
    CHECK: "upir.while"
    CHECK-NEXT: ^bb0(
    CHECK-NEXT: "upir.barrier"() {soft = true, line = 11 : i64}
    CHECK: "upir.yield"({{.*}}) {line = 14 : i64} : (f32) -> ()
    ''')
    _same_as_on_the_cfg(kernel(NESTED), UNIFORM)


def _in_if(loop: str, condition: str) -> str:
    """The loop of UNIFORM_FOR inside `if (condition)`."""
    body = loop.split(_FLOATS)[1].rsplit('  "ptx.st"', 1)[0]
    return PROLOGUE + _FLOATS + f'''
  %cond = "ptx.setp"({condition}, %zero) {{mods = ["gt", "s32"]}} : (i32, i32) -> i1
  %r = "upir.if"(%cond) ({{
  {body}
    "upir.yield"(%s) : (f32) -> ()
  }}, {{
    "upir.yield"(%f0) : (f32) -> ()
  }}) {{line = 3 : i64}} : (i1) -> f32
  "ptx.st"(%p, %r) {{mods = ["global", "f32"], offset = 0 : i64}} : (i64, f32) -> ()
  "upir.exit"() : () -> ()'''


@pytest.mark.parametrize("condition", ["%n", "%t"])
def test_loop_inside_an_if_is_interchanged(condition: str) -> None:
    """Under an if on a uniform or a thread-dependent condition: the threads that run the
    loop run it the same way (the others never stop at its soft barrier)."""
    text = kernel(_in_if(UNIFORM_FOR, condition))
    out, n = _run(text, UNIFORM)
    assert n == 1
    filecheck(out, '''
    CHECK: "upir.if"
    CHECK: "upir.while"
    CHECK-NEXT: ^bb0(
    CHECK-NEXT: "upir.barrier"() {soft = true
    ''')
    _same_as_on_the_cfg(text, UNIFORM)


# --- loops the passes leave alone -----------------------------------------------------------

_BARRIER = '''    "upir.barrier"() {mods = ["sync"], line = 30 : i64} : () -> ()
'''
_UNDER_THREAD_IF = '''    "upir.if"(%under) ({
      "upir.barrier"() {mods = ["sync"], line = 31 : i64} : () -> ()
      "upir.yield"() : () -> ()
    }, {
      "upir.yield"() {edge} : () -> ()
    }) {line = 32 : i64} : (i1) -> ()
'''
_YIELD = '''    "upir.yield"(%a2) {line = 9 : i64} : (f32) -> ()'''


@pytest.mark.parametrize("case", ["barrier", "barrier under a thread-dependent if",
                                  "thread-dependent trip count", "thread-dependent exit"])
def test_uniform_interchange_leaves_alone(case: str) -> None:
    """A loop holding a barrier (it is split at the barrier by min-cut-fission, not
    interchanged here), or one the threads may leave at different iterations."""
    text = UNIFORM_FOR
    if case == "barrier":
        text = text.replace(_YIELD, _BARRIER + _YIELD)
    elif case == "barrier under a thread-dependent if":
        text = text.replace(_YIELD, '''    %under = "ptx.setp"(%t, %i) {mods = ["lt", "s32"]} : (i32, i32) -> i1
''' + _UNDER_THREAD_IF + _YIELD)
    elif case == "thread-dependent trip count":
        text = text.replace('"upir.for"(%zero, %n, %one, %f0)', '"upir.for"(%zero, %t, %one, %f0)')
    else:
        text = UNIFORM_WHILE.replace('"upir.while"(%n, %f0)', '"upir.while"(%t, %f0)')
    before = print_op(parse_op(kernel(text)))
    out, n = _run(kernel(text), UNIFORM)
    assert n == 0 and out == before            # unchanged, and never lowered
    _same_as_on_the_cfg(kernel(text), UNIFORM)


def test_uniform_loop_is_no_grid_stride_loop() -> None:
    """A counter the same in every thread (carrying per-thread values) is no thread-strided
    loop: the thread-strided interchange leaves it (the uniform one takes it)."""
    before = print_op(parse_op(kernel(UNIFORM_FOR)))
    out, n = _run(kernel(UNIFORM_FOR), STRIDED)
    assert n == 0 and out == before


def test_grid_stride_loop_with_a_barrier_is_left_alone() -> None:
    text = kernel(GRID_STRIDE.replace('''    "upir.yield"() : () -> ()''', _BARRIER + '''    "upir.yield"() : () -> ()'''))
    before = print_op(parse_op(text))
    out, n = _run(text, STRIDED)
    assert n == 0 and out == before


def test_a_cycle_of_blocks_left_as_cfg_takes_the_cfg_pass() -> None:
    """A kernel whose region keeps a loop as blocks (what the raise cannot nest) is lowered
    by the pass, which then interchanges on the CFG."""
    text = kernel(PROLOGUE + _FLOATS + '''
  %c0 = "ptx.setp"(%n, %zero) {mods = ["gt", "s32"]} : (i32, i32) -> i1
  %u = "upir.if"(%c0) ({
    "upir.yield"(%n) : (i32) -> ()
  }, {
    "upir.yield"(%one) : (i32) -> ()
  }) : (i1) -> i32
  "cf.br"(%zero, %f0) [^bb1] : (i32, f32) -> ()
^bb1(%i: i32, %acc: f32):
  %x = "ptx.cvt"(%i) {mods = ["rn", "f32", "s32"]} : (i32) -> f32
  %d = "ptx.sub"(%x, %tf) {mods = ["rn", "f32"]} : (f32, f32) -> f32
  %a2 = "ptx.add"(%acc, %d) {mods = ["rn", "f32"]} : (f32, f32) -> f32
  %i2 = "ptx.add"(%i, %one) {mods = ["s32"]} : (i32, i32) -> i32
  %c = "ptx.setp"(%i2, %u) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c, %i2, %a2) [^bb1, ^bb2] <{operandSegmentSizes = array<i32: 1, 2, 0>}> : (i1, i32, f32) -> ()
^bb2:
  "ptx.st"(%p, %a2) {mods = ["global", "f32"], offset = 0 : i64} : (i64, f32) -> ()
  "upir.exit"() : () -> ()''')
    out, n = _run(text, UNIFORM)
    assert n == 1 and not has_structured_ops(parse_op(out)) and "soft = true" in out


#: some_threads of test_interchange with its loop kept rolled (nothing lowers the kernel
#: before the interchange: no unrolled arrangement for reroll-loops, no store in the loop)
ROLLED_SRC = r'''
extern "C" __global__ void some_threads_rolled(const float *x, float *out, int m) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0;
    if (threadIdx.x % 3 == 0) {
        #pragma unroll 1
        for (int k = 0; k < m; k++) {
            float d = x[k] - i;
            acc += d * d / (1.0f + d * d) + sqrtf(d * d + 1.0f) * 0.5f - d / (2.0f + d * d)
                   + d * d * d / (3.0f + d * d) - sqrtf(d * d + 4.0f) * 0.25f
                   + d / (5.0f + d * d) - d * d / (7.0f + d * d);
        }
    }
    out[i] = acc;
}
'''


# --- the compiled kernels: no lowering for the interchanges, the same results -----------------

def _kernels() -> list[tuple[str, str]]:
    return [(SRC, k) for k in ("axpy_gs", "partial_sums", "scale_2d", "two_loops", "pre_stride",
                               "gs_then_tree", "gs_then_shuffles", "hist_gs", "row_sums")] + \
        [(UNIFORM_SRC, k) for k in ("tile_forces", "some_threads")] + [(ARGMIN_SRC, "assign"),
                                                                         (ROLLED_SRC, "some_threads_rolled")]


_PTX: dict[str, str] = {}


def _ptx(source: str) -> str:
    if source not in _PTX:
        _PTX[source] = compile_to_ptx(source).ptx
    return _PTX[source]


@pytest.mark.parametrize("source, name", _kernels(), ids=[k for _, k in _kernels()])
def test_pipeline_interchanges_without_lowering(source: str, name: str) -> None:
    """Through the default pipeline: the interchanges make no lowering (the first one, if
    any, is a later pass's), and lowered after them the IR is the CFG passes' IR."""
    module = parse_ptx(_ptx(source))
    upto = default_pipeline()[:default_pipeline().index("barrier-motion") + 1]
    lifted, _ = lift_and_optimize(module, module.functions[name], PipelineOptions(passes=tuple(upto)))
    text = print_op(lifted.op)
    if not has_structured_ops(lifted.op):
        pytest.skip("lowered before the interchanges")
    assert _same_as_on_the_cfg(text, STRIDED) + \
        _same_as_on_the_cfg(text, "interchange-uniform-loops") == (name != "row_sums")
    op = parse_op(text)
    for spec in (STRIDED, "interchange-uniform-loops"):
        make_pass(spec).run(op)
        assert has_structured_ops(op)


def test_print_ir_after_the_interchange_shows_structured_ops() -> None:
    import io
    from cpuify.compiler import lift_kernel
    from cpuify.transforms.pass_manager import run_pipeline
    module = parse_ptx(_ptx(ROLLED_SRC))
    out = io.StringIO()
    opts = PipelineOptions.parse(["--print-ir-after=interchange-uniform-loops"])[0]
    lifted = lift_kernel(module, module.functions["some_threads_rolled"])
    result = run_pipeline(lifted.op, opts, out)
    printed = out.getvalue()
    assert "after interchange-uniform-loops" in printed
    filecheck(printed, '''
    CHECK: "upir.if"
    CHECK: "upir.while"
    CHECK-NEXT: ^bb0(
    CHECK-NEXT: "upir.barrier"() {soft = true
    CHECK: loop_order = "interchanged"
    ''')
    assert result.counts["interchange-uniform-loops"] == 1
    # the kernel is lowered once, for the fission at the soft barrier, not for the interchange
    assert result.transitions == [("lower", "min-cut-fission"), ("raise", "")]


def test_rolled_loop_matches_the_interpreter() -> None:
    import cpuify
    ptx = _ptx(ROLLED_SRC)
    x = np.random.default_rng(5).random(37, dtype=np.float32)
    ref = np.full(192, -1.0, np.float32)
    interpret_kernel(ptx, "some_threads_rolled", (2,), (96,), (x, ref, np.int32(37)))
    f = cpuify.RawModule(ptx=ptx).get_function("some_threads_rolled")
    for _ in range(2):              # generic code, then the specialized block shape
        out = np.full(192, -1.0, np.float32)
        f((2,), (96,), (x, out, np.int32(37)))
        np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name, grid, block", [("tile_forces", 1, 64), ("some_threads", 2, 96)])
def test_interchanged_uniform_loops_match_the_interpreter(name: str, grid: int, block: int) -> None:
    import cpuify
    ptx = _ptx(UNIFORM_SRC)
    rng = np.random.default_rng(7)
    if name == "tile_forces":
        pos = rng.random((grid * block, 4), dtype=np.float32)
        args = lambda out: (pos, out, np.int32(grid * block))  # noqa: E731
        shape = (grid * block, 4)
    else:
        x = rng.random(41, dtype=np.float32)
        args = lambda out: (x, out, np.int32(41))  # noqa: E731
        shape = (grid * block,)
    ref = np.zeros(shape, np.float32)
    interpret_kernel(ptx, name, (grid,), (block,), args(ref))
    f = cpuify.RawModule(ptx=ptx).get_function(name)
    for _ in range(2):
        out = np.zeros(shape, np.float32)
        f((grid,), (block,), args(out))
        np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)


#: a grid-stride loop with a data-dependent `break`, as lifted: two exit edges, raised as a
#: multi-exit while (exit flags, a condition per way out)
GRID_STRIDE_BREAK = PROLOGUE + _GRID + '''
  "cf.br"(%start) [^bb1] : (i32) -> ()
^bb1(%i: i32):
  %in = "ptx.setp"(%i, %n) {mods = ["lt", "s32"], line = 3 : i64} : (i32, i32) -> i1
  "cf.cond_br"(%in) [^bb2, ^bb5] <{operandSegmentSizes = array<i32: 1, 0, 0>}> {line = 3 : i64} : (i1) -> ()
^bb2:
  %off = "ptx.mul"(%i, %four) {mods = ["wide", "s32"]} : (i32, i32) -> i64
  %a = "ptx.add"(%p, %off) {mods = ["s64"]} : (i64, i64) -> i64
  %x = "ptx.ld"(%a) {mods = ["global", "s32"], offset = 0 : i64, line = 5 : i64} : (i64) -> i32
  %brk = "ptx.setp"(%x, %zero) {mods = ["gt", "s32"], line = 6 : i64} : (i32, i32) -> i1
  "cf.cond_br"(%brk) [^bb4, ^bb3] <{operandSegmentSizes = array<i32: 1, 0, 0>}> {line = 6 : i64} : (i1) -> ()
^bb3:
  "ptx.st"(%a, %t) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  %i2 = "ptx.add"(%i, %stride) {mods = ["s32"]} : (i32, i32) -> i32
  "cf.br"(%i2) [^bb1] {line = 8 : i64} : (i32) -> ()
^bb4:
  "ptx.st"(%p, %x) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "cf.br"() [^bb5] : () -> ()
^bb5:
  "upir.exit"() : () -> ()'''


def test_grid_stride_loop_with_a_break_as_a_multi_exit_while() -> None:
    op = parse_op(kernel(GRID_STRIDE_BREAK))
    assert make_pass("raise-structured-cf").run(op)
    text = print_op(op)
    assert "exit_flags" in text
    out, n = _run(text, STRIDED)
    assert n == 1 and has_structured_ops(parse_op(out))
    # the condition that goes on passes k + 1; the break's passes the counter, read by nothing
    filecheck(out, '''
    CHECK: "upir.while"
    CHECK-NEXT: ^bb0(%{{\\w+}}: i32, %[[K:\\w+]]: i32):
    CHECK-NEXT: "upir.barrier"() {soft = true, line = 3 : i64, lockstep = [1 : i64]}
    CHECK: "upir.condition"({{.*}}, %[[K]])
    CHECK: %[[NEXT:\\w+]] = "ptx.add"(%[[K]], %{{\\w+}}) {mods = ["s32"]}
    CHECK-NEXT: "upir.condition"({{.*}}, %[[NEXT]])
    CHECK: exit_flags
    ''')
    _same_as_on_the_cfg(text, STRIDED)


@pytest.mark.parametrize("source, name", _kernels(), ids=[k for _, k in _kernels()])
def test_lowered_size_of_innermost_loops_is_their_cfg_size(source: str, name: str) -> None:
    """interchange-uniform-loops' min_ops counts a loop's ops once lowered: lowered_size of
    an innermost loop op is the op count of its blocks in the lowered kernel."""
    from cpuify.analysis.structured_loops import LOOP_OPS
    from cpuify.ir.core import dominators
    from cpuify.ir.structure import block_body
    from cpuify.ir.structured_shapes import lowered_size
    from cpuify.transforms.interchange import _loops
    module = parse_ptx(_ptx(source))
    upto = default_pipeline()[:default_pipeline().index("raise-structured-cf") + 1]
    lifted, _ = lift_and_optimize(module, module.functions[name], PipelineOptions(passes=tuple(upto)))
    op = lifted.op
    innermost = [o for o in op.walk() if o.name in LOOP_OPS and
                 not any(x is not o and x.name in LOOP_OPS for x in o.walk())]
    lowered = parse_op(print_op(op))
    lower_structured_control_flow(lowered)
    region = block_body(lowered)
    loops = _loops(region, dominators(region))
    on_cfg = sorted(sum(len(b.ops) for b in body) for h, body in loops.items()
                    if not any(o is not h and o in body for o in loops))
    assert innermost and sorted(lowered_size(o) for o in innermost) == on_cfg
