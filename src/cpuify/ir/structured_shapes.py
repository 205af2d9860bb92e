"""What a kernel in either form will hold once lowered (ir/structured.py): loops, loops of
one block.  Passes whose rewrite is the CFG's ask this of the structured form first and
lower the kernel only where they may fire (transforms/pass_manager.py, Forms)."""

from __future__ import annotations

from cpuify.ir.core import Operation, Region
from cpuify.ir.dialects import STRUCTURED_OPS
from cpuify.ir.loop_guard import DO_WHILE
from cpuify.ir.structured import has_structured_ops


def region_has_structured_ops(region: Region) -> bool:
    """Whether a structured control-flow op is in `region`, at any depth (an analysis the
    pass manager caches: transforms/pass_manager.structured_now)."""
    return any(has_structured_ops(op) for b in region.blocks for op in b.ops)


def nested_ops(op: Operation) -> list[Operation]:
    """`op` and every op nested in it, in the order of `op.walk()` (a list made by an
    iterative walk: cheaper than the generator for a look at every op)."""
    out: list[Operation] = []
    stack = [op]
    while stack:
        o = stack.pop()
        out.append(o)
        for region in reversed(o.regions):
            for block in reversed(region.blocks):
                stack.extend(reversed(block.ops))
    return out


def single_block_loop(op: Operation) -> bool:
    """Whether `op` is, or is the structured op of, a loop of one block once lowered: a
    branch back to its own block; a while all in its before region (one block, no
    structured op in it; the after region only passes values back); a for lowered as a
    do-while whose body is one such block (a top-tested for has a header of its own)."""
    if op.parent is not None and op.parent in op.successors:
        return True
    if op.name == "upir.while":
        before, after = op.regions
        body = before
        if len(after.blocks) != 1 or len(after.entry.ops) != 1:
            return False
    elif op.name == "upir.for" and DO_WHILE in op.attributes:
        body = op.regions[0]
    else:
        return False
    return len(body.blocks) == 1 and not any(o.name in STRUCTURED_OPS for o in body.entry.ops)


def has_single_block_loop(kernel: Operation) -> bool:
    return any(single_block_loop(op) for op in nested_ops(kernel))


def has_loop(kernel: Operation) -> bool:
    """Whether the kernel holds a loop, in any form: a `upir.while` or `upir.for`, or a
    branch to a block at or before its own in its region's order (a cycle of blocks has
    one such edge whatever the order)."""
    index: dict[int, dict[int, int]] = {}
    for op in nested_ops(kernel):
        if op.name in ("upir.while", "upir.for"):
            return True
        block = op.parent
        if not op.successors or block is None or block.parent is None:
            continue
        region: Region = block.parent
        order = index.get(id(region))
        if order is None:
            order = index[id(region)] = {id(b): k for k, b in enumerate(region.blocks)}
        here = order.get(id(block), -1)
        if any(order.get(id(s), len(order)) <= here for s in op.successors):
            return True
    return False
