"""parallel-licm on the structured form (transforms/licm_structured.py): the invariant prefix
read from `upir.if`/`upir.while`/`upir.for` regions and hoisted with its structured ops,
out of the grid into the launch prologue, or onto thread 0 of each block.  IR-in/IR-out:
the kernel raised, the pass run on the regions, and the same kernel lowered first, the pass
run on the CFG: once lowered, both are the same IR; where the pass must not fire on the CFG
it must not fire on the regions either."""

from __future__ import annotations

import io

import pytest

from cpuify.compiler import lift_and_optimize
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.ir.core import Operation
from cpuify.ir.printer import print_op
from cpuify.ir.structure import launch_prologue
from cpuify.ir.structured import has_structured_ops, lower_structured_control_flow
from cpuify.ir.verifier import verify
from cpuify.transforms.pass_manager import PipelineOptions, make_pass, pass_form, run_pipeline
from test_ir import filecheck
from test_passes import NORMALIZE, NOT_HOISTED, ROW_NORMALIZE

#: the default pipeline's passes before parallel-licm, then the raise
BEFORE = ("spin-wait-yields", "warp-lockstep", "raise-structured-cf", "merge-duplicate-threads",
          "narrow-induction-variables", "selects-to-min-max", "speculate-selected-loads",
          "thread-index-outermost", "if-convert-swaps", "select-if-phis", "reroll-loops", "raise-structured-cf")


def _raised(source: str, name: str) -> Operation:
    """The kernel as parallel-licm finds it in the default pipeline, raised."""
    module = parse_ptx(compile_to_ptx(source, filename=f"{name}.cu").ptx)
    lifted, _ = lift_and_optimize(module, module.functions[name], PipelineOptions(passes=BEFORE))
    assert has_structured_ops(lifted.op)
    return lifted.op


def _both_forms(source: str, name: str) -> tuple[int, int, Operation, str]:
    """(count on the regions, count on the CFG, the kernel after the pass on the regions,
    its IR lowered); asserts that the CFG run gives that same lowered IR."""
    on_regions = _raised(source, name)
    n_regions = make_pass("parallel-licm").run(on_regions)
    verify(on_regions)
    on_cfg = _raised(source, name)
    lower_structured_control_flow(on_cfg)
    n_cfg = make_pass("parallel-licm").run(on_cfg)
    verify(on_cfg)
    text = print_op(on_regions)
    lowered = _lowered(on_regions)
    assert lowered == print_op(on_cfg)
    return n_regions, n_cfg, on_regions, text


def _lowered(op: Operation) -> str:
    from cpuify.ir.parser import parse_op
    copy = parse_op(print_op(op))
    lower_structured_control_flow(copy)
    verify(copy)
    return print_op(copy)


def test_licm_declares_any_form() -> None:
    assert pass_form(make_pass("parallel-licm")) == "any"


def test_launch_invariant_loop_hoisted_with_its_structured_ops() -> None:
    """Fig. 1: the `sum(in, n)` loops (nvcc's unrolled while and its remainder for, in
    ifs on n) move into the launch prologue as structured ops; the grid reads the sum from
    the parameter buffer and keeps only its own element's load."""
    n_regions, n_cfg, op, text = _both_forms(NORMALIZE, "normalize")
    assert n_regions > 0 and n_cfg > 0
    prologue = launch_prologue(op)
    assert prologue is not None
    prologue_text, grid_text = text.split('"upir.grid_parallel"', 1)
    filecheck(prologue_text, r'''
    CHECK: "upir.launch_prologue"
    CHECK: "upir.if"
    CHECK: "upir.while"
    CHECK: "ptx.ld"
    CHECK: "upir.for"
    CHECK: "upir.launch_store"
    CHECK: "upir.exit"
    ''')
    assert "%tid.x" not in prologue_text
    assert "hoisted = true" in grid_text and grid_text.count('"ptx.ld"') == 1
    assert '"upir.while"' not in grid_text and '"upir.for"' not in grid_text


def test_block_invariant_loop_runs_on_thread_zero() -> None:
    """A row's sum (depends on blockIdx): thread 0 of each block runs the structured loop,
    behind a branch on the thread index; the others wait at the barrier and read it from
    shared memory."""
    n_regions, n_cfg, op, text = _both_forms(ROW_NORMALIZE, "row_normalize")
    assert n_regions > 0 and n_cfg > 0 and launch_prologue(op) is None
    filecheck(text, r'''
    CHECK: "upir.global"() {sym_name = "__cpuify_hoisted_row_normalize"
    CHECK: %tid.z
    CHECK: "cf.cond_br"
    CHECK: "upir.if"
    CHECK: "upir.barrier"() {mods = ["sync"], hoisted = true}
    CHECK: "ptx.ld"({{%\w+}}) {mods = ["shared", "f32"]
    ''')


@pytest.mark.parametrize("name", sorted(NOT_HOISTED))
def test_structured_licm_does_not_fire(name: str) -> None:
    """A store before the loop, a thread-dependent trip count, a loop under a thread's
    condition, volatile loads, shared memory, atomics, a constant trip count, no loop: on
    the regions as on the CFG, nothing moves."""
    n_regions, n_cfg, op, _ = _both_forms(NOT_HOISTED[name], name)
    assert n_regions == n_cfg == 0
    assert launch_prologue(op) is None


def _merge_joins(op: Operation) -> Operation:
    """The block body's blocks entered by one `cf.br` merged into their predecessor: ops
    after a structured op in one block (structured IR the raise does not make itself, but
    the lowering and every pass take)."""
    from cpuify.ir.core import replace_all_uses
    from cpuify.ir.structure import block_body
    region = block_body(op)
    merged = True
    while merged:
        merged = False
        for b in region.blocks:
            term = b.ops[-1]
            if term.name != "cf.br":
                continue
            s = term.successors[0]
            if s is region.entry or sum(x.successors.count(s) for x in region.blocks) != 1:
                continue
            term.drop_uses()
            b.ops.pop()
            for a, v in zip(s.args, term.successor_args[0]):
                replace_all_uses(a, v)
            for o in s.ops:
                b.append(o)
            region.blocks.remove(s)
            merged = True
            break
    verify(op)
    return op


def test_prefix_ending_after_a_structured_op_splits_its_block() -> None:
    """The invariant loop is followed, in the same block, by the thread's own code: the
    block is split after the loop's `if` (the continuation takes the if's results, as the
    lowering's continuation block does), the if moves to the prologue, the rest stays."""
    source = r'''
extern "C" __global__ void after_loop(float *out, const float *in, int n) {
    float t = 0.0f;
    for (int i = 0; i < n; i++) t += in[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = t;
}'''
    results = []
    for on_regions in (True, False):
        op = _merge_joins(_raised(source, "after_loop"))
        from cpuify.ir.structure import block_body
        assert len(block_body(op).blocks) == 1       # (the loop's if and the store: one block)
        if not on_regions:
            lower_structured_control_flow(op)
        results.append(make_pass("parallel-licm").run(op))
        verify(op)
        if on_regions:
            text = print_op(op)
            lowered = _lowered(op)
        else:
            assert lowered == print_op(op)
    assert results[0] > 0 and results[1] > 0
    prologue_text, grid_text = text.split('"upir.grid_parallel"', 1)
    assert '"upir.if"' in prologue_text and '"upir.launch_store"' in prologue_text
    filecheck(grid_text, r'''
    CHECK: "upir.block_parallel"
    CHECK: "upir.param"() {offset = {{\d+}} : i64, type = "f32", hoisted = true}
    CHECK: "cf.br"
    CHECK: ^bb1({{%\w+}}: f32):
    CHECK: "ptx.st"
    ''')


def test_print_ir_after_shows_structured_licm() -> None:
    """In a pipeline that hands parallel-licm the structured form, the IR printed after it
    is structured (no lowering for the pass), and so is the prologue it made."""
    module = parse_ptx(compile_to_ptx(NORMALIZE, filename="normalize.cu").ptx)
    lifted, _ = lift_and_optimize(module, module.functions["normalize"],
                                  PipelineOptions(passes=BEFORE))
    out = io.StringIO()
    result = run_pipeline(lifted.op, PipelineOptions(passes=("parallel-licm",),
                                                     print_after=frozenset({"parallel-licm"}),
                                                     verify_each=True), out)
    assert result.transitions == [] and result.counts["parallel-licm"] > 0
    text = out.getvalue()
    assert text.startswith("// -----// IR of kernel 'normalize' after parallel-licm")
    assert '"upir.launch_prologue"' in text and '"upir.while"' in text
