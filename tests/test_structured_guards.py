"""The passes after parallel-licm on the structured form.  thread-index-ranges marks the ops
that become the branches once lowered (`upir.if`, a loop's `upir.condition`, the raise's
negated exit tests included); the passes whose analysis and rewrite are the CFG's
(store-forwarding, the barrier passes, the loop interchanges, split-in-order-sums,
min-cut-fission, simd-collectives) take either form and lower the kernel only where their
quick test says they may fire.  IR-in/IR-out: on the regions and on the same kernel lowered
first, the same IR once lowered."""

from __future__ import annotations

import pytest

from cpuify.compiler import lift_and_optimize
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.ir.core import Operation
from cpuify.ir.parser import parse_op
from cpuify.ir.printer import print_op
from cpuify.ir.structured import has_structured_ops, lower_structured_control_flow
from cpuify.ir.structured_shapes import has_loop, has_single_block_loop
from cpuify.ir.verifier import verify
from cpuify.transforms.pass_manager import PipelineOptions, make_pass, pass_form
from test_structured_cf import PROLOGUE, kernel
from test_thread_index_ranges import SRC as RANGES_SRC

#: the passes after parallel-licm that lower only where they may fire
GUARDED = ("store-forwarding", "barrier-elimination", "barrier-motion",
           "interchange-thread-strided-loops", "split-in-order-sums", "interchange-uniform-loops",
           "min-cut-fission", "simd-collectives")

SRC = r'''
extern "C" __global__ void guarded(const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? 2.0f * x[i] : x[i];
}
extern "C" __global__ void tile(const float *x, float *y, int n) {
    __shared__ float s[128];
    int t = threadIdx.x, i = blockIdx.x * 128 + t;
    s[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    if (i < n) y[i] = s[t] + s[127 - t];
}
'''


def _raised(source: str, name: str, dims: tuple[int, int, int] | None) -> Operation:
    module = parse_ptx(compile_to_ptx(source).ptx)
    lifted, _ = lift_and_optimize(module, module.functions[name],
                                  PipelineOptions(passes=("raise-structured-cf",)), dims)
    assert has_structured_ops(lifted.op)
    return lifted.op


def _lowered_text(op: Operation) -> str:
    copy = parse_op(print_op(op))
    lower_structured_control_flow(copy)
    verify(copy)
    return print_op(copy)


def _both_forms(make, spec: str) -> tuple[int, int, Operation]:  # type: ignore[no-untyped-def]
    on_regions = make()
    n_regions = make_pass(spec).run(on_regions)
    verify(on_regions)
    on_cfg = make()
    lower_structured_control_flow(on_cfg)
    n_cfg = make_pass(spec).run(on_cfg)
    assert _lowered_text(on_regions) == print_op(on_cfg)
    return n_regions, n_cfg, on_regions


def test_forms() -> None:
    for name in GUARDED + ("thread-index-ranges",):
        assert pass_form(make_pass(name)) == "any", name


@pytest.mark.parametrize("name, dims, marked", [("rows", (16, 16, 1), 3), ("others", (8, 8, 1), 1),
                                                ("rows", None, 0)])
def test_thread_index_ranges_on_regions(name: str, dims: tuple[int, int, int] | None,
                                        marked: int) -> None:
    """The marks go on the `upir.if`s, and lowered they are the marks of the CFG run."""
    n_regions, n_cfg, after = _both_forms(lambda: _raised(RANGES_SRC, name, dims),
                                          "thread-index-ranges")
    assert n_regions == n_cfg == marked
    assert has_structured_ops(after)
    ifs = [o for o in after.walk() if o.name == "upir.if" and "thread_index_if" in o.attributes]
    assert len(ifs) == marked


# a loop left on the true side of a test of the thread index: raised, its condition is the
# negation (marked `structured_negation`), which the lowering folds back into the branch
_EXIT_ON_THREAD = PROLOGUE + '''
  "cf.br"(%zero) [^bb1] : (i32) -> ()
^bb1(%k: i32):
  %k2 = "ptx.add"(%k, %one) {mods = ["s32"]} : (i32, i32) -> i32
  "ptx.st"(%p, %k2) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  %c = "ptx.setp"(%t, %one) {mods = ["lt", "u32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c, %k2) [^bb2, ^bb1] <{operandSegmentSizes = array<i32: 1, 0, 1>}> {line = 5 : i64} : (i1, i32) -> ()
^bb2:
  "upir.exit"() : () -> ()'''


def test_thread_index_ranges_on_a_negated_loop_exit() -> None:
    def make() -> Operation:
        op = parse_op(kernel(_EXIT_ON_THREAD))
        op.attributes["block_dims"] = [8, 1, 1]
        assert make_pass("raise-structured-cf").run(op)
        return op
    raised = make()
    assert any(o.name == "upir.condition" for o in raised.walk())
    assert "structured_negation" in print_op(raised)
    n_regions, n_cfg, after = _both_forms(make, "thread-index-ranges")
    assert n_regions == n_cfg == 1
    cond = next(o for o in after.walk() if o.name == "upir.condition")
    # lowered: cond_br(t < 1) [exit, loop]: thread 0 leaves, threads 1..7 go round
    assert cond.attributes["threads_true"] == [0, 1, 1]
    assert cond.attributes["threads_false"] == [1, 8, 1]


@pytest.mark.parametrize("spec", GUARDED)
def test_no_lowering_where_the_pass_cannot_fire(spec: str) -> None:
    """A kernel with an if and nothing else (no barrier, loop, shared store, collective):
    the pass leaves the regions as they are."""
    op = _raised(SRC, "guarded", (128, 1, 1))
    before = print_op(op)
    assert make_pass(spec).run(op) == 0
    assert print_op(op) == before


@pytest.mark.parametrize("spec", ["store-forwarding", "barrier-elimination", "min-cut-fission"])
def test_lowered_where_the_pass_may_fire(spec: str) -> None:
    """A kernel with a shared store and a barrier: lowered by the pass, which then does on
    the CFG what it does on the kernel lowered first."""
    n_regions, n_cfg, after = _both_forms(lambda: _raised(SRC, "tile", (128, 1, 1)), spec)
    assert n_regions == n_cfg
    assert not has_structured_ops(after)


def test_pipeline_transitions() -> None:
    """The default pipeline: `guarded` is never lowered (nor raised again); `tile` is
    lowered for store-forwarding (a shared store, the block shape known), raised for
    split-row-streams (global accesses in code for a block shape: it may fire), lowered
    again for min-cut-fission; without a block shape only barrier-elimination lowers it."""
    module = parse_ptx(compile_to_ptx(SRC).ptx)
    for name, dims, want in (("guarded", (128, 1, 1), []), ("guarded", None, []),
                             ("tile", (128, 1, 1), [("lower", "store-forwarding"),
                                                    ("raise", "split-row-streams"),
                                                    ("lower", "min-cut-fission"), ("raise", "")]),
                             ("tile", None, [("lower", "barrier-elimination"), ("raise", "")])):
        _, result = lift_and_optimize(module, module.functions[name],
                                      PipelineOptions(verify_each=True), dims)
        assert result.transitions == want, (name, dims)


def test_loop_shapes() -> None:
    """has_loop: a structured loop or a branch back in its region's order; a single-block
    loop once lowered (split-in-order-sums, reroll-loops)."""
    flat = parse_op(kernel(PROLOGUE + '  "upir.exit"() : () -> ()'))
    assert not has_loop(flat) and not has_single_block_loop(flat)
    cfg = parse_op(kernel(_EXIT_ON_THREAD))
    assert has_loop(cfg) and has_single_block_loop(cfg)
    make_pass("raise-structured-cf").run(cfg)
    assert has_loop(cfg) and has_single_block_loop(cfg)
    assert not has_loop(_raised(SRC, "guarded", None))


def test_explain_counts_what_is_handed_on() -> None:
    """A kernel never lowered after the raise (no barrier, no loop) whose swap's `if`
    if-convert-swaps removed: `explain`'s structure line counts the ifs left, not the
    raise's."""
    from test_ifconvert import SRC as SWAPS
    from cpuify.transforms.structured_cf import structure_summary
    module = parse_ptx(compile_to_ptx(SWAPS).ptx)
    lifted, result = lift_and_optimize(module, module.functions["merge_step"], PipelineOptions())
    assert result.transitions == [] and result.counts["if-convert-swaps"] == 1
    ifs = sum(o.name == "upir.if" for o in lifted.op.walk())
    assert structure_summary(lifted.op)[0].startswith(f"structured control flow: {ifs} if,")
    raised, _ = lift_and_optimize(module, module.functions["merge_step"],
                                  PipelineOptions(passes=("raise-structured-cf",)))
    assert sum(o.name == "upir.if" for o in raised.op.walk()) == ifs + 1
