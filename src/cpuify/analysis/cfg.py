"""Control-flow facts of a region: incoming values of block arguments, post-dominators."""

from __future__ import annotations

from cpuify.ir.core import Block, BlockArgument, Region, Value, postorder, predecessors


def incoming_values(region: Region) -> dict[BlockArgument, list[Value]]:
    out: dict[BlockArgument, list[Value]] = {}
    for b in region.blocks:
        term = b.terminator
        if term is None:
            continue
        for s, args in zip(term.successors, term.successor_args):
            for a, v in zip(s.args, args):
                out.setdefault(a, []).append(v)
    return out



def immediate_post_dominators(region: Region) -> dict[Block, Block]:
    """Block -> its immediate post-dominator, for blocks that have one other than the exit
    (every path from the block to the end of the kernel passes through it).

    Cooper-Harvey-Kennedy's dominator algorithm on the reversed CFG, with a virtual exit
    joining the blocks that have no successors: near-linear time and linear memory.
    Blocks with no path to an exit (an endless loop) have no post-dominators, and a
    successor with no path to an exit does not constrain its predecessor's."""
    blocks = region.blocks
    preds = predecessors(region)
    exits = [b for b in blocks if not b.successors]
    # post-order of the reversed CFG from the virtual exit
    order = postorder(exits, lambda b: preds.get(b, ()))
    # numbers: the virtual exit is the highest (it comes last in post-order)
    number = {b: i for i, b in enumerate(order)}
    top = len(order)
    ipdom: list[int] = [-1] * (top + 1)
    ipdom[top] = top
    for b in exits:
        ipdom[number[b]] = top
    rpo = [number[b] for b in reversed(order) if b.successors]
    succ_numbers = {number[b]: [number[s] for s in b.successors if s in number] for b in order}
    changed = True
    while changed:
        changed = False
        for n in rpo:
            new = -1
            for s in succ_numbers[n]:
                if ipdom[s] == -1:
                    continue
                if new == -1:
                    new = s
                    continue
                a = s
                while a != new:       # intersect (post-order numbers grow towards the exit)
                    while a < new:
                        a = ipdom[a]
                    while new < a:
                        new = ipdom[new]
            if new != -1 and ipdom[n] != new:
                ipdom[n] = new
                changed = True
    out: dict[Block, Block] = {}
    for b in blocks:
        n = number.get(b)
        if n is None:
            continue
        d = ipdom[n]
        if d != top and d != -1:
            out[b] = order[d]
    return out


def cyclic_blocks(region: Region, without: frozenset[Block] | set[Block] = frozenset()
                  ) -> set[Block]:
    """Blocks on some cycle of the region's CFG (a strongly connected component of more
    than one block, or a block that branches to itself): Tarjan's algorithm with an
    explicit stack, linear in blocks and edges.  `without`: blocks taken out of the graph
    first (the cycles that avoid them)."""
    index: dict[Block, int] = {}
    low: dict[Block, int] = {}
    on_stack: set[Block] = set()
    scc_stack: list[Block] = []
    out: set[Block] = set()
    for root in region.blocks:
        if root in index or root in without:
            continue
        index[root] = low[root] = len(index)
        scc_stack.append(root)
        on_stack.add(root)
        work: list[tuple[Block, int]] = [(root, 0)]
        while work:
            b, i = work[-1]
            succs = b.successors
            if i < len(succs):
                work[-1] = (b, i + 1)
                s = succs[i]
                if s in without:
                    continue
                if s is b:
                    out.add(b)
                if s not in index:
                    index[s] = low[s] = len(index)
                    scc_stack.append(s)
                    on_stack.add(s)
                    work.append((s, 0))
                elif s in on_stack and index[s] < low[b]:
                    low[b] = index[s]
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                if low[b] < low[parent]:
                    low[parent] = low[b]
            if low[b] == index[b]:
                members: list[Block] = []
                while True:
                    x = scc_stack.pop()
                    on_stack.discard(x)
                    members.append(x)
                    if x is b:
                        break
                if len(members) > 1:
                    out.update(members)
    return out
