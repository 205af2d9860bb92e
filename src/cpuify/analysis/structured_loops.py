"""The loop order (analysis/loop_order.py) of a `upir.while` or `upir.for`, read from its
regions without lowering it.

What loop_order reads of a CFG loop, given for a loop op as the lowering
(ir/structured.py) would make it:

  * the header's arguments: a while's before-region arguments; a for's body arguments,
    its induction variable first;
  * the values flowing into them: the op's initial values, and what each yield of the
    loop's own regions passes back (a while's after region; a for's body);
  * the induction variable of a for moves by its step on every back edge, an add no op
    holds until the lowering makes it: given as an increment of its own (`increments`);
  * a while whose after region only passes values back takes, on each back edge, what
    the condition that goes on passes; one whose before region has one condition has its
    after-region arguments replaced by what the condition passes (`same`);
  * its blocks (those of its regions and of the structured ops in them) and its ops in
    program order: a walk of its regions, an op's regions in its place (the lowered order).

Integer induction variables, accesses and carried float kinds come out as the CFG
analysis finds them on the lowered loop (tests/test_structured_guards.py compares both on
the loop-order and re-roll test kernels)."""

from __future__ import annotations

from dataclasses import dataclass

from cpuify.analysis.loop_order import LoopOrder, loop_order_of
from cpuify.ir.core import Block, BlockArgument, Operation, Value
from cpuify.ir.structured import continues, nested_blocks

LOOP_OPS = ("upir.while", "upir.for")


@dataclass
class LoopView:
    """A loop op read as the CFG loop it lowers to (module doc): `args` its header's
    arguments (a for's induction variable first), `body` its blocks, `ops` its ops in
    program order, `incoming` the values flowing into each argument (initial values, then
    what each back edge passes), `increments` steps no op computes (a for's), `same` values
    that stand for others, `back_edges` the terminators that branch back to the header once
    lowered (a for's yields; a while's after-region yields, or the conditions that may go on
    when its after region only passes values back)."""
    loop: Operation
    args: list[BlockArgument]
    body: set[Block]
    ops: list[Operation]
    incoming: dict[BlockArgument, list[Value]]
    increments: dict[BlockArgument, list[Value]]
    same: dict[Value, Value]
    back_edges: list[Operation]


def only_yields(region_blocks: list[Block]) -> bool:
    """Whether a while's after region (its blocks) only passes values back."""
    return len(region_blocks) == 1 and len(region_blocks[0].ops) == 1 and \
        region_blocks[0].ops[0].name == "upir.yield"


def loop_view(loop: Operation) -> LoopView:
    """The LoopView of `loop` (a `upir.while` or `upir.for`)."""
    if loop.name not in LOOP_OPS:
        raise ValueError(f"a loop view takes a loop op, not {loop.name}")
    body: set[Block] = {b for r in loop.regions for b in nested_blocks(r)}
    ops = [o for r in loop.regions for b in r.blocks for top in b.ops for o in top.walk()]
    incoming: dict[BlockArgument, list[Value]] = {}
    increments: dict[BlockArgument, list[Value]] = {}
    same: dict[Value, Value] = {}
    if loop.name == "upir.while":
        before, after = loop.regions
        args = list(before.entry.args)
        conditions = [b.ops[-1] for b in before.blocks
                      if b.ops and b.ops[-1].name == "upir.condition"]
        if only_yields(after.blocks):
            # (each condition that goes on passes the next iteration's values itself)
            back_edges = [c for c in conditions if continues(c)]
            y = after.entry.ops[0]
            slot = {a: k for k, a in enumerate(after.entry.args)}
            for j, a in enumerate(args):
                v = y.operands[j]
                incoming[a] = [loop.operands[j]] + [
                    c.operands[1 + slot[v]] if v in slot else v for c in back_edges]
        else:
            back_edges = [b.ops[-1] for b in after.blocks
                          if b.ops and b.ops[-1].name == "upir.yield"]
            if len(conditions) == 1:
                for a, v in zip(after.entry.args, conditions[0].operands[1:]):
                    same[a] = v
            for j, a in enumerate(args):
                incoming[a] = [loop.operands[j]] + [y.operands[j] for y in back_edges]
    else:
        region = loop.regions[0]
        iv, *carried = region.entry.args
        back_edges = [b.ops[-1] for b in region.blocks
                      if b.ops and b.ops[-1].name == "upir.yield"]
        incoming[iv] = [loop.operands[0]]
        increments[iv] = [loop.operands[2]]
        for k, a in enumerate(carried):
            incoming[a] = [loop.operands[3 + k]] + [y.operands[k] for y in back_edges]
        args = [iv, *carried]
    return LoopView(loop, args, body, ops, incoming, increments, same, back_edges)


def structured_loop_order(loop: Operation, uniform: set[Value]) -> LoopOrder:
    """loop_order of `loop` (a `upir.while` or `upir.for`); `uniform`: the values equal in
    every thread of the block (analysis/structured_uniformity.py)."""
    if loop.name not in LOOP_OPS:
        raise ValueError(f"structured_loop_order takes a loop op, not {loop.name}")
    view = loop_view(loop)
    return loop_order_of(view.args, view.body, view.ops, uniform, view.incoming,
                         increments=view.increments, same=view.same)


__all__ = ["LOOP_OPS", "LoopView", "loop_view", "structured_loop_order"]
