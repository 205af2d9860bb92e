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
  * a while whose after region only passes values back, or whose before region has one
    condition, has its after-region arguments replaced by what the condition passes
    (`same`);
  * its blocks (those of its regions and of the structured ops in them) and its ops in
    program order: a walk of its regions, an op's regions in its place (the lowered order).

Integer induction variables, accesses and carried float kinds come out as the CFG
analysis finds them on the lowered loop (tests/test_structured_guards.py compares both on
the loop-order and re-roll test kernels)."""

from __future__ import annotations

from cpuify.analysis.loop_order import LoopOrder, loop_order_of
from cpuify.ir.core import Block, BlockArgument, Operation, Value
from cpuify.ir.structured import nested_blocks


def structured_loop_order(loop: Operation, uniform: set[Value]) -> LoopOrder:
    """loop_order of `loop` (a `upir.while` or `upir.for`); `uniform`: the values equal in
    every thread of the block (analysis/structured_uniformity.py)."""
    if loop.name not in ("upir.while", "upir.for"):
        raise ValueError(f"structured_loop_order takes a loop op, not {loop.name}")
    body: set[Block] = {b for r in loop.regions for b in nested_blocks(r)}
    ops = [o for r in loop.regions for b in r.blocks for top in b.ops for o in top.walk()]
    incoming: dict[BlockArgument, list[Value]] = {}
    increments: dict[BlockArgument, list[Value]] = {}
    same: dict[Value, Value] = {}
    if loop.name == "upir.while":
        before, after = loop.regions
        args = list(before.entry.args)
        inits = list(loop.operands)
        back = after
        conditions = [b.ops[-1] for b in before.blocks
                      if b.ops and b.ops[-1].name == "upir.condition"]
        only = len(after.blocks) == 1 and len(after.entry.ops) == 1 and \
            after.entry.ops[0].name == "upir.yield"
        if only or len(conditions) == 1:
            for a, v in zip(after.entry.args, conditions[0].operands[1:] if conditions else ()):
                same[a] = v
    else:
        region = loop.regions[0]
        iv, *args = region.entry.args
        inits = list(loop.operands[3:])
        incoming[iv] = [loop.operands[0]]
        increments[iv] = [loop.operands[2]]
        args = [iv, *args]
        back = region
    carried = args[1:] if loop.name == "upir.for" else args
    for k, a in enumerate(carried):
        incoming[a] = [inits[k]] + [b.ops[-1].operands[k] for b in back.blocks
                                    if b.ops and b.ops[-1].name == "upir.yield"]
    return loop_order_of(args, body, ops, uniform, incoming, increments=increments, same=same)


__all__ = ["structured_loop_order"]
