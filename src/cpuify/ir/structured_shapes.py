"""What a kernel in either form will hold once lowered (ir/structured.py): loops, loops of
one block.  Passes whose rewrite is the CFG's ask this of the structured form first and
lower the kernel only where they may fire (transforms/pass_manager.py, Forms)."""

from __future__ import annotations

from cpuify.ir.core import Block, Operation, Region
from cpuify.ir.dialects import STRUCTURED_OPS
from cpuify.ir.loop_guard import DO_WHILE
from cpuify.ir.structured import NEGATED_EXIT, RAISED_EDGE, continues, has_structured_ops


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
    return any(op.name in ("upir.while", "upir.for") for op in nested_ops(kernel)) or \
        bool(regions_branching_back(kernel, first=True))


def regions_branching_back(kernel: Operation, first: bool = False) -> list[Region]:
    """The regions of the kernel (the block body, and those nested in structured ops) with
    a branch to a block at or before its own in the region's order: those that may hold a
    loop of blocks (control flow the raise left as CFG).  `first`: stop at the first."""
    index: dict[int, dict[int, int]] = {}
    out: list[Region] = []
    for op in nested_ops(kernel):
        block = op.parent
        if not op.successors or block is None or block.parent is None:
            continue
        region: Region = block.parent
        order = index.get(id(region))
        if order is None:
            order = index[id(region)] = {id(b): k for k, b in enumerate(region.blocks)}
        here = order.get(id(block), -1)
        if any(order.get(id(s), len(order)) <= here for s in op.successors) and \
                region not in out:
            out.append(region)
            if first:
                break
    return out


def lowered_size(loop: Operation) -> int:
    """How many ops the blocks of `loop` (a `upir.while` or `upir.for`) will hold once
    lowered (ir/structured.py): what a pass that sizes a loop by its CFG blocks counts.  A
    for gains its header's compare and branch (a do-while for: the compare in its latch)
    and an add per back edge; a structured op nested in the loop is its branch; a region
    that only yields, a block that only yields for an edge, a branch the lowering folds
    into an exit and a negation folded into a branch are no ops; the blocks of a multi-exit
    while that only leave are no blocks of the loop."""
    if loop.name == "upir.for":
        body = loop.regions[0]
        yields = sum(1 for b in body.blocks if b.ops and b.ops[-1].name == "upir.yield")
        extra = 2 * yields if DO_WHILE in loop.attributes else 2 + yields
        return extra + _blocks_size(body.blocks)
    before, after = loop.regions
    size = _blocks_size(_going_on(before.blocks))
    if not (len(after.blocks) == 1 and len(after.entry.ops) == 1):
        size += _blocks_size(after.blocks)
    for b in before.blocks:
        c = b.ops[-1] if b.ops else None
        test = c.operands[0] if c is not None and c.name == "upir.condition" else None
        neg = getattr(test, "op", None)
        if neg is not None and neg.name == "ptx.not" and neg.attributes.get(NEGATED_EXIT) \
                and len(test.uses) == 1:
            size -= 1
    return size


def _going_on(blocks: list[Block]) -> list[Block]:
    """The blocks of a while's before region from which the loop may go on (the others,
    a multi-exit while's ways out, are no blocks of the lowered loop)."""
    index = {b: k for k, b in enumerate(blocks)}
    on: set[Block] = set()
    changed = True
    while changed:
        changed = False
        for b in reversed(blocks):
            if b in on or not b.ops:
                continue
            t = b.ops[-1]
            if (t.name == "upir.condition" and continues(t)) or \
                    any(s in on for s in t.successors if s in index):
                on.add(b)
                changed = True
    return [b for b in blocks if b in on]


def _blocks_size(blocks: list[Block]) -> int:
    size = 0
    for k, b in enumerate(blocks):
        if k and _bare_edge(b):
            continue            # (forwarded: the branch to it goes on to its target)
        for at, op in enumerate(b.ops):
            if op.name in ("upir.const", "upir.undef") and RAISED_EDGE in op.attributes:
                continue
            if op.name == "cf.br" and RAISED_EDGE in op.attributes and len(b.ops) == 1 and k:
                continue
            size += 1
            if op.name not in STRUCTURED_OPS:
                continue
            if op.name == "upir.if":
                for r in op.regions:
                    if not (len(r.blocks) == 1 and _bare_edge(r.entry)):
                        size += _blocks_size(r.blocks)
                rest = b.ops[at + 1:]
                if len(rest) == 1 and rest[0].name == "cf.br" and \
                        all(u is rest[0] for v in op.results for u in v.uses):
                    size -= 1   # (its arms branch to the target)
            else:
                size += lowered_size(op) - 1
    return size


def _bare_edge(b: Block) -> bool:
    return len(b.ops) == 1 and not b.args and b.ops[0].name in ("upir.yield", "upir.condition") \
        and RAISED_EDGE in b.ops[0].attributes
