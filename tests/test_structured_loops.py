"""The loop order of structured loops (analysis/structured_loops.py): the accesses, induction
steps and carried float kinds of a `upir.for`/`upir.while` read from its regions, as
analysis/loop_order.py finds them on the same loop lowered (a for's step, which no op adds
before the lowering; a while's after-region arguments standing for what its condition
passes)."""

from __future__ import annotations

import pytest

from cpuify.analysis.cfg import incoming_values
from cpuify.analysis.loop_order import CONSECUTIVE, LoopOrder, loop_order
from cpuify.analysis.structured_loops import structured_loop_order
from cpuify.analysis.structured_uniformity import structured_uniform_values
from cpuify.analysis.uniformity import uniform_values
from cpuify.compiler import lift_and_optimize
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.ir.core import dominators
from cpuify.ir.parser import parse_op
from cpuify.ir.printer import print_op
from cpuify.ir.structure import block_body
from cpuify.ir.structured import lower_structured_control_flow
from cpuify.transforms.interchange import _loops
from cpuify.transforms.pass_manager import PipelineOptions, default_pipeline
from test_loop_order import SRC as ORDER_SRC
from test_reroll_rows import SRC as ROWS_SRC
from test_structured_cf import PROLOGUE, kernel

#: the default pipeline up to parallel-licm: the loops the interchanges would find
UPTO = tuple(default_pipeline()[:default_pipeline().index("parallel-licm") + 1])


def _key(order: LoopOrder) -> tuple:  # type: ignore[type-arg]
    return ([(a.op.name, a.op.attributes.get("line"), a.within_step, a.across)
             for a in order.accesses], order.other, order.carried, order.describe(),
            order.contiguous_within_thread(), order.contiguous_across_threads(),
            order.reorderable())


def _both(source: str, name: str) -> tuple[list, list]:  # type: ignore[type-arg]
    module = parse_ptx(compile_to_ptx(source).ptx)
    lifted, _ = lift_and_optimize(module, module.functions[name], PipelineOptions(passes=UPTO))
    op = lifted.op
    uniform = structured_uniform_values(block_body(op))
    on_regions = sorted(_key(structured_loop_order(o, uniform)) for o in op.walk()
                        if o.name in ("upir.while", "upir.for"))
    lowered = parse_op(print_op(op))
    lower_structured_control_flow(lowered)
    region = block_body(lowered)
    uniform, incoming = uniform_values(region), incoming_values(region)
    on_cfg = sorted(_key(loop_order(h, body, uniform, incoming))
                    for h, body in _loops(region, dominators(region)).items())
    return on_regions, on_cfg


@pytest.mark.parametrize("source, name", [
    (ORDER_SRC, n) for n in ("row_max", "col_max", "row_sum", "softmax_rows", "matmul",
                             "col_update", "row_update")] + [
    (ROWS_SRC, n) for n in ("shifted_rows", "row_sum_from", "row_max_from", "column_sum",
                            "weighted", "row_chain", "row_once")])
def test_same_order_as_on_the_lowered_loop(source: str, name: str) -> None:
    on_regions, on_cfg = _both(source, name)
    assert on_regions and on_regions == on_cfg


# a for whose induction variable indexes memory: its step (4 bytes an iteration) is an
# operand of the for, added by no op until lowered
_FOR = PROLOGUE + '''
  %four = "upir.const"() {value = 4 : i64} : () -> i32
  %pt = "ptx.mul"(%t, %four) {mods = ["wide", "s32"]} : (i32, i32) -> i64
  %base = "ptx.add"(%p, %pt) {mods = ["s64"]} : (i64, i64) -> i64
  "upir.for"(%zero, %n, %one) ({
  ^bb0(%i: i32):
    %off = "ptx.mul"(%i, %n) {mods = ["wide", "s32"]} : (i32, i32) -> i64
    %a = "ptx.add"(%base, %off) {mods = ["s64"]} : (i64, i64) -> i64
    %x = "ptx.ld"(%a) {mods = ["global", "f32"], offset = 0 : i64, line = 3 : i64} : (i64) -> f32
    %ioff = "ptx.mul"(%i, %four) {mods = ["wide", "s32"]} : (i32, i32) -> i64
    %b = "ptx.add"(%p, %ioff) {mods = ["s64"]} : (i64, i64) -> i64
    "ptx.st"(%b, %x) {mods = ["global", "f32"], offset = 0 : i64, line = 4 : i64} : (i64, f32) -> ()
    "upir.yield"() : () -> ()
  }) {predicate = ["lt", "s32"], increment = ["s32"]} : (i32, i32, i32) -> ()
  "upir.exit"() : () -> ()'''


def test_a_for_moves_by_its_step() -> None:
    op = parse_op(kernel(_FOR))
    loop = next(o for o in op.walk() if o.name == "upir.for")
    order = structured_loop_order(loop, structured_uniform_values(block_body(op)))
    (load, store) = order.accesses
    # x[t + i * n]: a column per thread (consecutive across threads, n elements a step);
    # y[i]: the same in every thread, 4 bytes a step
    assert load.across == CONSECUTIVE and load.within_step is None
    assert store.across == "uniform" and store.within_step == 4
    lowered = parse_op(kernel(_FOR))
    lower_structured_control_flow(lowered)
    region = block_body(lowered)
    ((header, body),) = _loops(region, dominators(region)).items()
    assert _key(loop_order(header, body, uniform_values(region))) == _key(order)


def test_only_loop_ops() -> None:
    op = parse_op(kernel(_FOR))
    with pytest.raises(ValueError, match="loop op"):
        structured_loop_order(next(o for o in op.walk() if o.name == "ptx.ld"), set())
